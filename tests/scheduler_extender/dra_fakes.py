"""A fake of the DRA allocator's API and of the objects the cluster holds: nodes, gputopo's
slices (from the contract, :func:`topology.dra.resource_slices`), DeviceClasses, claims and
pods as the API returns them. Writes land in the fake's objects and go back to the allocator
as watch events, as in a cluster; a test can make a write fail."""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler_extender.dra.allocator import Allocator
from scheduler_extender.dra.claims import SCHEDULING_GATE
from scheduler_extender.dra.kube import release_ops
from scheduler_extender.dra.state import DraState
from scheduler_extender.kubernetes_state import ApiError
from topology import catalog, dra
from topology.contract import ANN_TOPOLOGY
from topology.model import Topology
from topology.serialization import dumps

_uids = itertools.count(1)


def uid() -> str:
    return f"00000000-0000-0000-0000-{next(_uids):012d}"


def node_obj(name: str, topo: Topology, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels},
                         "annotations": {ANN_TOPOLOGY: dumps(topo)}}, "spec": {}}


def claim_obj(ns: str, name: str, requests: Sequence[Mapping[str, Any]], *,
              owner: Mapping[str, Any] | None = None, **spec_extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": ns, "name": name, "uid": uid(), "resourceVersion": "1"}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "controller": True,
                                    "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"]}]
    return {"metadata": meta, "spec": {"devices": {"requests": list(requests), **spec_extra}},
            "status": {}}


def gpus(name: str, count: int, cls: str = dra.CLASS_GPU) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": cls, "count": count}}


def share(name: str, compute: int, memory: str) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": dra.CLASS_SHARE, "count": 1,
                                      "capacity": {"requests": {"compute": str(compute),
                                                                "memory": memory}}}}


def slot(name: str, memory: str = "4Gi") -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": dra.CLASS_SLOT, "count": 1,
                                      "capacity": {"requests": {"memory": memory}}}}


def pod_obj(ns: str, name: str, claims: Sequence[tuple[str, str]], *, gated: bool = True,
            annotations: Mapping[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A pod whose ``claims`` are (pod claim name, ResourceClaim name) pairs referenced by
    name (``resourceClaimName``)."""
    body: dict[str, Any] = {
        "metadata": {"namespace": ns, "name": name, "uid": uid(),
                     "annotations": dict(annotations or {})},
        "spec": {"containers": [{"name": "c", "image": "x"}],
                 "resourceClaims": [{"name": p, "resourceClaimName": c} for p, c in claims],
                 **spec},
        "status": {"phase": "Pending"},
    }
    if gated:
        body["spec"]["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    return body


class FakeAPI:
    """Records writes, applies them to the stored objects and feeds them back to the
    allocator (as the watch would), synchronously."""

    def __init__(self) -> None:
        self.allocator: Allocator | None = None
        self.claims: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str, str]] = []
        self.writes: list[tuple[str, str]] = []
        self.fail_claim_writes: set[str] = set()
        self._rv = itertools.count(100)

    def _bump(self, obj: dict[str, Any]) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self._rv))

    def patch_claim_status(self, namespace: str, name: str, resource_version: str,
                           status: Mapping[str, Any]) -> dict[str, Any]:
        key = f"{namespace}/{name}"
        self.writes.append(("claim", key))
        if key in self.fail_claim_writes:
            raise ApiError("500 injected failure", 500)
        obj = self.claims[key]
        if obj["metadata"]["resourceVersion"] != resource_version:
            raise ApiError("409 Conflict: the object has been modified", 409)
        if obj.get("status", {}).get("allocation"):
            raise ApiError("422 status.allocation: field is immutable", 422)
        obj["status"] = copy.deepcopy(dict(status))
        self._bump(obj)
        assert self.allocator is not None
        self.allocator.on_claim("MODIFIED", copy.deepcopy(obj))
        return copy.deepcopy(obj)

    def add_claim_finalizer(self, namespace: str, name: str, resource_version: str,
                            finalizers: list[str]) -> dict[str, Any]:
        key = f"{namespace}/{name}"
        self.writes.append(("finalizer", key))
        obj = self.claims[key]
        if obj["metadata"]["resourceVersion"] != resource_version:
            raise ApiError("409 Conflict", 409)
        obj["metadata"]["finalizers"] = list(finalizers)
        self._bump(obj)
        assert self.allocator is not None
        self.allocator.on_claim("MODIFIED", copy.deepcopy(obj))
        return copy.deepcopy(obj)

    def release_pod(self, pod: Mapping[str, Any], annotations: Mapping[str, str]) -> None:
        """Apply :func:`release_ops` (RFC 6902 test/add/remove) to the stored pod."""
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        self.writes.append(("pod", key))
        live = self.pods.get(key)
        if live is None:
            raise ApiError("404 Not Found", 404)
        doc = copy.deepcopy(live)
        for op in release_ops(pod, annotations):
            parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
            parent: Any = doc
            for part in parts[:-1]:
                parent = parent[int(part)] if isinstance(parent, list) else parent[part]
            last = parts[-1]
            if op["op"] == "test":
                got = parent[int(last)] if isinstance(parent, list) else parent.get(last)
                if got != op["value"]:
                    raise ApiError(f"422 test failed at {op['path']}", 422)
            elif op["op"] == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            else:
                parent[last] = op["value"]
        self.pods[key] = doc
        assert self.allocator is not None
        self.allocator.on_pod("MODIFIED", copy.deepcopy(doc))

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.writes.append(("get", f"{namespace}/{name}"))
        live = self.pods.get(f"{namespace}/{name}")
        return copy.deepcopy(live) if live is not None else None

    def bind(self, key: str, node: str, at: str) -> None:
        """kube-scheduler binds pod ``key`` to ``node`` at ``at`` (RFC 3339: ``nodeName`` and
        ``PodScheduled``); the pending-pod watch (a field selector on ``spec.nodeName``)
        delivers DELETED carrying the pod as it was before (the watch cache's rule)."""
        live = self.pods[key]
        before = copy.deepcopy(live)
        live["spec"]["nodeName"] = node
        live.setdefault("status", {}).setdefault("conditions", []).append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": at})
        self._bump(live)
        assert self.allocator is not None
        self.allocator.on_pod("DELETED", before)

    def pod_event(self, pod: Mapping[str, Any], reason: str, message: str,
                  kind: str = "Warning") -> None:
        self.events.append((pod["metadata"]["name"], reason, message))

    def patch_pod_conditions(self, namespace: str, name: str, uid: str,
                             conditions: list[dict[str, str]]) -> None:
        """Merge by ``type``, as a strategic-merge patch of ``pods/status`` does."""
        key = f"{namespace}/{name}"
        self.writes.append(("conditions", key))
        live = self.pods.get(key)
        if live is None:
            raise ApiError("404 Not Found", 404)
        if live["metadata"].get("uid") != uid:
            raise ApiError("422 metadata.uid: field is immutable", 422)
        have = live.setdefault("status", {}).setdefault("conditions", [])
        for c in conditions:
            have[:] = [h for h in have if h.get("type") != c["type"]] + [dict(c)]
        self._bump(live)
        assert self.allocator is not None
        self.allocator.on_pod("MODIFIED", copy.deepcopy(live))

    # -------------------------------------------------------------- test helpers
    def add_claim(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.claims[f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = obj
        assert self.allocator is not None
        self.allocator.on_claim("ADDED", copy.deepcopy(obj))
        return obj

    def add_pod(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.pods[f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = obj
        assert self.allocator is not None
        self.allocator.on_pod("ADDED", copy.deepcopy(obj))
        return obj

    def delete_pod(self, key: str) -> None:
        """The pod goes and its claims with it (the resourceclaim controller / GC)."""
        pod = self.pods.pop(key)
        assert self.allocator is not None
        self.allocator.on_pod("DELETED", pod)
        for ckey, c in list(self.claims.items()):
            if pod["metadata"]["uid"] in [r.get("uid") for r in
                                          c.get("status", {}).get("reservedFor", [])]:
                del self.claims[ckey]
                self.allocator.on_claim("DELETED", c)


def cluster(nodes: Mapping[str, str | Topology], *, taints: Mapping[str, Sequence[Any]] = {},
            **kwargs: Any) -> tuple[Allocator, FakeAPI]:
    """An allocator over ``nodes`` (name → catalog machine) with their slices and the
    contract's DeviceClasses, synced, its decision thread not started (tests call
    :meth:`Allocator.sync` or :func:`drain`)."""
    api = FakeAPI()
    state = DraState()
    alloc = Allocator(state, api, writers=1, clock=lambda: "2026-01-01T00:00:00Z", **kwargs)
    api.allocator = alloc
    populate(alloc, nodes, taints=taints)
    return alloc, api


def populate(alloc: Allocator, nodes: Mapping[str, str | Topology], *,
             taints: Mapping[str, Sequence[Any]] = {}) -> None:
    """Feed ``alloc`` the Nodes ``nodes`` (name → catalog machine), their ResourceSlices and
    the contract's DeviceClasses, and mark its state synced."""
    for name, machine in nodes.items():
        topo = machine if isinstance(machine, Topology) else catalog.get(machine)
        obj = node_obj(name, topo)
        if name in taints:
            obj["spec"]["taints"] = list(taints[name])
        alloc.on_node("ADDED", obj)
        for s in dra.resource_slices(topo, name):  # with the allocator taint on every
            alloc.on_slice("ADDED", s)             # device: it must not refuse them
    for c in dra.device_classes():
        alloc.on_class("ADDED", c)
    for kind in ("nodes", "slices", "claims"):
        alloc.state.mark_synced(kind)


def drain(alloc: Allocator) -> None:
    """Decide every queued pod, in order, and wait for the writes (one writer thread, then
    the condition writer the writes may have queued on)."""
    for _ in range(10_000):
        with alloc._lock:  # noqa: SLF001 - the test drives the loop itself
            if not alloc._queue:  # noqa: SLF001
                break
            key, _ = alloc._queue.popitem(last=False)  # noqa: SLF001
        alloc.sync(key)
        _writes_done(alloc)
    _writes_done(alloc)


def _writes_done(alloc: Allocator) -> None:
    alloc._writers.submit(lambda: None).result()  # noqa: SLF001 - the test drives the writes
    alloc._conditions.submit(lambda: None).result()  # noqa: SLF001


def held_claim_writes(api: FakeAPI) -> threading.Event:
    """Hold every claim status write of ``api`` until the returned gate is set (a slow API
    server: the write is in flight meanwhile)."""
    gate = threading.Event()
    real = api.patch_claim_status

    def slow(*args: Any, **kwargs: Any) -> dict[str, Any]:
        gate.wait(10.0)
        return real(*args, **kwargs)

    api.patch_claim_status = slow  # type: ignore[method-assign]
    return gate
