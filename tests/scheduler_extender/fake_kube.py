"""A fake of the small Kubernetes API surface KubernetesState uses (JSON dicts, watch
queues, failure injection)."""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from scheduler_extender.kubernetes_state import TERMINATED_PHASES, ApiError
from topology.contract import ANN_TOPOLOGY
from topology.model import Topology
from topology.serialization import dumps

_STOP = object()


class FakeKubeAPI:
    """Nodes and pods in dicts; every change can be pushed to the watchers as an event."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}  # by uid
        self.rv = 100
        self.queues: dict[str, queue.Queue[Any]] = {"nodes": queue.Queue(), "pods": queue.Queue()}
        self.lists = {"nodes": 0, "pods": 0}
        self.calls: list[tuple[str, ...]] = []
        self.fail_binding: str | None = None
        self.fail_binding_status = 409
        self.emit_bindings = True
        self.lose_binding_reply = False
        self.after_binding: Callable[[], None] | None = None
        self.lock = threading.Lock()

    # ---------------------------------------------------------------- building
    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def add_node(self, name: str, topology: Topology | None, *, emit: bool = False) -> None:
        ann = {ANN_TOPOLOGY: dumps(topology)} if topology is not None else {}
        node = {"metadata": {"name": name, "uid": f"node-{name}", "annotations": ann,
                             "resourceVersion": self._next_rv()}, "spec": {}, "status": {}}
        self.nodes[name] = node
        if emit:
            self.push("nodes", "ADDED", node)

    def add_pod(
        self, name: str, uid: str, *, node: str = "", annotations: Mapping[str, str] | None = None,
        gpus: int = 2, phase: str = "Pending", emit: bool = False,
    ) -> dict[str, Any]:
        pod = {
            "metadata": {"name": name, "namespace": "default", "uid": uid,
                         "annotations": dict(annotations or {}),
                         "resourceVersion": self._next_rv()},
            "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {
                "limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase},
        }
        self.pods[uid] = pod
        if emit:
            self.push("pods", "ADDED", pod)
        return pod

    def update_pod(self, uid: str, change: Callable[[dict[str, Any]], None], *,
                   emit: bool = True) -> None:
        pod = self.pods[uid]
        change(pod)
        pod["metadata"]["resourceVersion"] = self._next_rv()
        if emit:
            self.push("pods", "MODIFIED", pod)

    def delete_pod(self, uid: str, *, emit: bool = True) -> None:
        pod = self.pods.pop(uid)
        pod["metadata"]["resourceVersion"] = self._next_rv()
        if emit:
            self.push("pods", "DELETED", pod)

    def push(self, kind: str, type_: str, obj: Mapping[str, Any]) -> None:
        self.queues[kind].put({"type": type_, "object": copy.deepcopy(obj)})

    def expire(self, kind: str) -> None:
        """Make the next watch read fail with 410 Gone."""
        from scheduler_extender.kubernetes_state import WatchExpired

        self.queues[kind].put(WatchExpired("410 Gone: too old resource version", 410))

    def close(self) -> None:
        for q in self.queues.values():
            q.put(_STOP)

    # ---------------------------------------------------------------- KubeAPI
    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        self.lists["nodes"] += 1
        return [copy.deepcopy(n) for n in self.nodes.values()], str(self.rv)

    def list_pods(self) -> tuple[list[dict[str, Any]], str]:
        self.lists["pods"] += 1
        live = [p for p in self.pods.values() if p["status"]["phase"] not in TERMINATED_PHASES]
        return [copy.deepcopy(p) for p in live], str(self.rv)

    def _watch(self, kind: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        deadline = time.monotonic() + min(timeout_s, 0.5)
        while time.monotonic() < deadline:
            try:
                item = self.queues[kind].get(timeout=0.05)
            except queue.Empty:
                continue
            if item is _STOP:
                self.queues[kind].put(_STOP)
                return
            if isinstance(item, Exception):
                raise item
            yield item

    def watch_nodes(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        return self._watch("nodes", timeout_s)

    def watch_pods(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        return self._watch("pods", timeout_s)

    def _by_name(self, namespace: str, name: str) -> dict[str, Any] | None:
        for p in self.pods.values():
            if p["metadata"]["namespace"] == namespace and p["metadata"]["name"] == name:
                return p
        return None

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        p = self._by_name(namespace, name)
        return copy.deepcopy(p) if p is not None else None

    def patch_pod_conditions(
        self, namespace: str, name: str, uid: str, conditions: list[dict[str, str]]
    ) -> None:
        """What a strategic-merge patch of ``pods/status`` does to ``status.conditions``:
        merge by ``type`` (the others kept), refuse another pod's UID (422: immutable);
        pushed to the pod watch."""
        self.calls.append(("conditions", name, *(c["type"] for c in conditions)))
        with self.lock:
            p = self._by_name(namespace, name)
            if p is None:
                raise ApiError(f'404 Not Found: pods "{name}" not found', 404)
            if p["metadata"]["uid"] != uid:
                raise ApiError("422 Unprocessable Entity: metadata.uid: field is immutable", 422)
            have = p.setdefault("status", {}).setdefault("conditions", [])
            for c in conditions:
                have[:] = [h for h in have if h.get("type") != c["type"]] + [dict(c)]
            p["metadata"]["resourceVersion"] = self._next_rv()
        self.push("pods", "MODIFIED", p)

    def create_binding(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        """What kube-apiserver's ``pods/binding`` does: UID precondition, refuse an assigned
        pod, then set ``spec.nodeName`` and merge the annotations in one write (pushed to
        the pod watch when :attr:`emit_bindings`); :attr:`after_binding` (if set) runs after
        the write; :attr:`lose_binding_reply` writes and then fails as a lost reply would."""
        self.calls.append(("bind", name, node, *(f"{k}={v}" for k, v in sorted(
            annotations.items(), key=lambda kv: kv[0]))))
        if self.fail_binding:
            raise ApiError(self.fail_binding, self.fail_binding_status)
        p = self._by_name(namespace, name)
        if p is None:
            raise ApiError(f'404 Not Found: pods "{name}" not found', 404)
        if uid and p["metadata"]["uid"] != uid:
            raise ApiError(f"409 Conflict: Precondition failed: UID in precondition: {uid}", 409)
        if p["spec"].get("nodeName"):
            raise ApiError(
                f'409 Conflict: pod {name} is already assigned to node "{p["spec"]["nodeName"]}"',
                409,
            )
        p["spec"]["nodeName"] = node
        p["metadata"].setdefault("annotations", {}).update(annotations)
        p["metadata"]["resourceVersion"] = self._next_rv()
        if self.emit_bindings:
            self.push("pods", "MODIFIED", p)
        if self.after_binding is not None:
            self.after_binding()
        if self.lose_binding_reply:
            raise ApiError("the reply was lost (connection reset)", 0)
