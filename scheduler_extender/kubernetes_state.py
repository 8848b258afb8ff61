"""Cluster state from the Kubernetes API — the only module that talks to it.

:class:`KubernetesState` lists and watches Nodes (for their ``gputopo.io/topology``
annotation) and Pods in every namespace (non-terminated ones; those carrying gputopo's output
annotations are allocations, keyed by pod UID). Everything is rebuilt from annotations at
start, so an extender restart loses nothing.

Bind (:meth:`KubernetesState.bind`) is one API round trip: it creates the pod's
``pods/binding`` subresource with the assignment annotations in the Binding's
``metadata.annotations``. kube-apiserver merges those into the pod in the same storage write
that sets ``spec.nodeName`` (``BindingREST.setPodNodeAndMetadata`` in
``pkg/registry/core/pod/storage/storage.go``, Kubernetes v1.36.3; ``setPodHostAndAnnotations``
in older releases), under the Binding's UID precondition. So no pod is ever bound without its
decision, and a refused Binding leaves nothing to roll back. The allocation bind reserved
beforehand stays *in flight* until the watch delivers the bound pod with its annotations
(confirmed) or the pod disappears; a relist keeps in-flight reservations younger than the
list. A pod that terminates or is deleted frees its GPUs. A watch that fails with 410 Gone is
restarted from a fresh list.

The API surface used is the small :class:`KubeAPI` protocol; :class:`OfficialKubeAPI`
implements it with the official ``kubernetes`` client (raw JSON dicts, no model
deserialisation — ``_preload_content=False`` everywhere; every raw reply is read to its end so
its keep-alive connection goes back to the pool). The Binding, the one call on the hot path,
goes through the client's request layer with a plain dict body (no argument validation, no
model), and its reply — a ``Status``, which the generated ``create_namespaced_pod_binding``
would try to read as a ``V1Binding`` — is only drained. Its connection pool is sized
for the binds in flight (``bind_connections``) plus the two watches and a list or get. Tests
pass a fake.
"""

from __future__ import annotations

import heapq
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from scheduler_extender.pending import (
    DEFAULT_SCHEDULER_NAME,
    PendingPods,
    placed_condition,
    postponed_at,
    postponed_condition,
    scheduled_at,
)
from scheduler_extender.podspec import bound_node_of
from scheduler_extender.state import (
    Allocation,
    AllocationBook,
    BindError,
    BookedViews,
    NodeTopologyError,
    PodRef,
    TopologyCache,
    ViewCache,
)
from topology.colocation.model import DEFAULT_SLOTS
from topology.contract import (
    ANN_GPU_SHARED_SLOTS,
    ANN_TOPOLOGY,
    ANN_UNHEALTHY_GPUS,
    ANN_VGPU_MEMORY_UNIT,
    AssignmentError,
    assignment_annotations,
    has_assignment,
    parse_assignment,
    parse_gpu_indices,
)
from topology.model import Topology
from topology.numa_alignment import (
    KUBELET_DEFAULTS,
    KubeletConfig,
    KubeletConfigError,
    kubelet_config_from_labels,
)
from topology.policies.base import Decision
from topology.text import decimal_int

#: Binds sent at once by default (``ExtenderSettings.bind_concurrency``): the bind threads and
#: the keep-alive connections kept for them.
DEFAULT_BIND_CONCURRENCY = 64

log = logging.getLogger("gputopo.extender.kubernetes")

TERMINATED_PHASES = ("Succeeded", "Failed")
#: Default of :attr:`KubernetesState.placed_check_s` (s).
PLACED_CHECK_S = 10.0
#: Field selector of the pod list/watch: only pods that may hold GPUs.
POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


class _Write(NamedTuple):
    """One item for the postponement writer (:meth:`KubernetesState._write_loop`)."""

    uid: str
    wall_s: float  # when the pod's postponement began, Unix s
    started_here: bool  # write the condition (else only wake the pod at its bound)
    placed: tuple[str, dict[str, str]] | None = None  # bound: (namespace/name, condition)
    check: str | None = None  # seen bound with the condition True: namespace/name to re-read


class ApiError(Exception):
    """A Kubernetes API call failed; ``status`` is the HTTP status (0 = no response)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class WatchExpired(ApiError):
    """The watch's resourceVersion is too old (HTTP 410 Gone): relist."""


class KubeAPI(Protocol):
    """The API calls the state needs (objects are JSON dicts with the API's camelCase keys)."""

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        """All Nodes and the list's resourceVersion."""
        ...

    def watch_nodes(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        """Watch events ``{"type", "object"}`` from ``resource_version``; ends on timeout.

        Raises:
            WatchExpired: 410 Gone.
            ApiError: any other failure.
        """
        ...

    def list_pods(self) -> tuple[list[dict[str, Any]], str]:
        """Non-terminated Pods in all namespaces and the list's resourceVersion."""
        ...

    def watch_pods(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        """Like :meth:`watch_nodes`, for non-terminated Pods in all namespaces."""
        ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One Pod, or None when it does not exist."""
        ...

    def create_binding(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        """Create the pod's ``pods/binding`` subresource targeting ``node``, carrying
        ``annotations`` (merged into the pod in the write that sets ``spec.nodeName``);
        ``uid`` (if set) is the Binding's precondition.

        Raises:
            ApiError: the binding failed (e.g. the pod is already bound, or UID mismatch);
                nothing was written.
        """
        ...

    def patch_pod_conditions(
        self, namespace: str, name: str, uid: str, conditions: list[dict[str, str]]
    ) -> None:
        """Merge ``conditions`` into the pod's ``status.conditions`` by ``type`` (a
        strategic-merge patch of ``pods/status``; the others, kube-scheduler's
        ``PodScheduled`` among them, are kept); ``uid`` must be the pod's.

        Raises:
            ApiError: the pod is gone, is another pod by now (UID), or the API refused.
        """
        ...


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class PodConditionAPI(Protocol):
    """What :func:`record_condition` needs of an API (:meth:`KubeAPI.patch_pod_conditions`)."""

    def patch_pod_conditions(
        self, namespace: str, name: str, uid: str, conditions: list[dict[str, str]]
    ) -> None: ...


def record_condition(api: PodConditionAPI, namespace: str, name: str, uid: str,
                     condition: dict[str, str]) -> None:
    """Merge the postponement ``condition`` into pod ``namespace/name`` (UID ``uid``).

    Called on the one writer thread that keeps these writes in the order decided (the
    extender's :meth:`KubernetesState._write_loop`, the DRA allocator's condition writer). A
    failure is logged, never raised: the writer must outlive one bad call, and a condition
    must not undo the placement around it. A pod gone or replaced meanwhile (:class:`ApiError`)
    has nothing to keep."""
    try:
        api.patch_pod_conditions(namespace, name, uid, [condition])
    except ApiError as exc:
        log.info("cannot record the postponement of pod %s/%s: %s", namespace, name, exc)
    except Exception:  # noqa: BLE001 - see the docstring
        log.exception("cannot record the postponement of pod %s/%s", namespace, name)


class PlacedRepairAPI(PodConditionAPI, Protocol):
    """What :func:`mark_placed_if_bound` needs of an API (:meth:`KubeAPI.get_pod` too)."""

    def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...


def mark_placed_if_bound(api: PlacedRepairAPI, namespace: str, name: str, uid: str,
                         *, now: Callable[[], float] = time.time) -> bool:
    """Read pod ``namespace/name`` and, if it is pod ``uid``, bound, and its postponement
    condition still ``True`` (waiting, or its bound passed), write it ``False``/``Placed``:
    the repair of a pod bound without the placing writer's own ``Placed`` — a Binding or gate
    removal whose outcome the writer could not learn, another scheduler's bind, a writer that
    stopped in between (the extender's :meth:`KubernetesState._check_placed`, the DRA
    allocator's checks). The condition's ``lastTransitionTime`` is the pod's
    ``PodScheduled`` transition (written by the API server with the Binding; ``now()``, Unix
    s, when absent), so every replica that repairs it writes the same condition and the API
    server drops the repeats.

    Returns:
        Whether it wrote. It never raises (the writers that call it must outlive one bad
        call): the write is :func:`record_condition`'s; reading the pod failed (logged), it is
        gone, another pod by that name, not bound, or placed meanwhile: False.
    """
    try:
        live = api.get_pod(namespace, name)
    except ApiError as exc:
        log.warning("cannot read pod %s/%s to mark its postponement placed: %s",
                    namespace, name, exc)
        return False
    except Exception:  # noqa: BLE001 - as record_condition: its writer must outlive one read
        log.exception("cannot read pod %s/%s to mark its postponement placed", namespace, name)
        return False
    if live is None or _meta(live).get("uid") != uid:
        return False
    node, at = bound_node_of(live), postponed_at(live)
    if not node or at is None:
        return False  # placed meanwhile (the placing writer's own write), or not bound
    when = scheduled_at(live)
    log.info("pod %s/%s is bound to %s with its postponement condition still True: marked "
             "placed", namespace, name, node)
    record_condition(api, namespace, name, uid,
                     placed_condition(at, node, now() if when is None else when))
    return True


def _slots(text: object) -> int:
    """Co-location slots per GPU from a node's ``gputopo.io/gpu-shared-slots`` annotation:
    the default (3) when absent, 0 (no slot) when not a non-negative integer."""
    if text is None:
        return DEFAULT_SLOTS
    value = decimal_int(str(text))
    return 0 if value is None else value


def _unhealthy(node: str, text: object) -> frozenset[int]:
    """GPU indices from a node's ``gputopo.io/unhealthy-gpus`` annotation (none when absent).
    An unreadable value is logged and read as none: the kubelet's allocatable count still
    keeps kube-scheduler from over-filling the node."""
    if not isinstance(text, str):
        return frozenset()
    try:
        return parse_gpu_indices(text)
    except AssignmentError as exc:
        log.warning("node %s: unreadable %s %r: %s", node, ANN_UNHEALTHY_GPUS, text, exc)
        return frozenset()


class KubernetesState(BookedViews):
    """Cluster state kept in sync with the API by list + watch (thread-safe).

    Args:
        api: the API (default: :class:`OfficialKubeAPI` from ``kubeconfig`` or in-cluster).
        kubeconfig: kubeconfig path; None = in-cluster service account.
        bind_connections: keep-alive connections reserved for Bindings in the default API's
            pool (the extender's ``bind_concurrency``: binds in flight at once).
        watch_timeout_s: server-side timeout of each watch call (it is then re-opened).
        reservation_grace_s: a relist keeps in-flight reservations younger than this even if
            the listed pod does not carry annotations yet.
        scheduler_name: the ``spec.schedulerName`` whose pending GPU pods are kept for the
            lookahead (:attr:`pending`).

    Call :meth:`start` (initial list, then watcher threads) and :meth:`stop`.

    Raises:
        ApiError: ``api`` is None and no client configuration can be loaded.
    """

    def __init__(
        self, api: KubeAPI | None = None, *, kubeconfig: str | Path | None = None,
        bind_connections: int = DEFAULT_BIND_CONCURRENCY, watch_timeout_s: int = 300,
        reservation_grace_s: float = 60.0, scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    ) -> None:  # fmt: skip
        self.api: KubeAPI = (
            api if api is not None
            else OfficialKubeAPI.from_config(kubeconfig, bind_connections=bind_connections)
        )  # fmt: skip
        self._views = ViewCache()
        self.book = AllocationBook(on_change=lambda node: self._views.pop(node, None))
        self.pending = PendingPods(scheduler_name, on_postponed=self._persist_postponed)
        # postponement clocks to write into their pods (when started here) and to wake the
        # pods at their bound; and the conditions of postponed pods once bound
        self._writes: queue.Queue[_Write] = queue.Queue()
        self._writer: threading.Thread | None = None
        #: Seconds after the watch shows a pod bound with its postponement condition still
        #: ``True`` before the pod is read again and, if still so, marked ``Placed``
        #: (:meth:`_check_placed`): the grace of the binding extender's own write.
        self.placed_check_s = PLACED_CHECK_S
        self._checking: set[str] = set()  # uids with such a re-read queued
        self.topologies = TopologyCache()
        self.watch_timeout_s = watch_timeout_s
        self.reservation_grace_s = reservation_grace_s
        self._lock = threading.RLock()
        self._node_ann: dict[str, str | None] = {}
        self._node_unit: dict[str, str] = {}
        self._node_kubelet: dict[str, KubeletConfig | KubeletConfigError] = {}
        self._uid_by_name: dict[str, str] = {}
        self._name_by_uid: dict[str, str] = {}
        self._synced = {"nodes": False, "pods": False}
        self._rv = {"nodes": "", "pods": ""}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """List nodes and pods (rebuild), then watch both in daemon threads.

        Raises:
            ApiError: the initial list failed.
        """
        self.resync_nodes()
        self.resync_pods()
        for kind in ("nodes", "pods"):
            t = threading.Thread(target=self._watch_loop, args=(kind,), daemon=True,
                                 name=f"gputopo-watch-{kind}")
            t.start()
            self._threads.append(t)

    def start_background(self, retry_s: float = 2.0) -> threading.Thread:
        """:meth:`start` in a daemon thread, retrying the initial list until it succeeds
        (the HTTP server answers ``/healthz`` meanwhile; ``/readyz`` says not ready)."""

        def run() -> None:
            while not self._stop.is_set():
                try:
                    self.start()
                    log.info("cluster state synced: %d nodes, %d allocations",
                             len(self._node_ann), len(self.book.all()))
                    return
                except Exception as exc:  # noqa: BLE001
                    log.warning("initial list failed: %s; retrying in %.0fs", exc, retry_s)
                    if self._stop.wait(retry_s):
                        return

        t = threading.Thread(target=run, daemon=True, name="gputopo-state-sync")
        t.start()
        return t

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the watcher threads (they exit at their next event or timeout)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout_s)

    def ready(self) -> bool:
        """True once nodes and pods have been listed."""
        return self._synced["nodes"] and self._synced["pods"]

    def _watch_loop(self, kind: str) -> None:
        backoff = 0.5
        watch = self.api.watch_nodes if kind == "nodes" else self.api.watch_pods
        apply = self.apply_node_event if kind == "nodes" else self.apply_pod_event
        resync = self.resync_nodes if kind == "nodes" else self.resync_pods
        while not self._stop.is_set():
            try:
                for event in watch(self._rv[kind], self.watch_timeout_s):
                    if self._stop.is_set():
                        return
                    self._note_rv(kind, event)
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        apply(event["type"], event["object"])
                backoff = 0.5
            except WatchExpired:
                log.info("%s watch expired (410 Gone); relisting", kind)
                self._safe_resync(resync, kind)
            except Exception as exc:  # noqa: BLE001 - keep watching whatever happens
                log.warning("%s watch failed: %s; retrying in %.1fs", kind, exc, backoff)
                if self._stop.wait(backoff):
                    return
                backoff = min(backoff * 2, 10.0)
                self._safe_resync(resync, kind)

    def _safe_resync(self, resync: Any, kind: str) -> None:
        try:
            resync()
        except Exception as exc:  # noqa: BLE001
            log.warning("%s relist failed: %s", kind, exc)

    def _note_rv(self, kind: str, event: Mapping[str, Any]) -> None:
        obj = event.get("object")
        if isinstance(obj, Mapping):
            rv = _meta(obj).get("resourceVersion")
            if isinstance(rv, str) and rv:
                self._rv[kind] = rv

    # ------------------------------------------------------------------ nodes
    def resync_nodes(self) -> None:
        """Replace the node view with a fresh list.

        Raises:
            ApiError: the list failed.
        """
        items, rv = self.api.list_nodes()
        with self._lock:
            self._node_ann.clear()
            self._node_unit.clear()
            self._node_kubelet.clear()
            self._views.clear()
            for node in items:
                self._store_node(node)
            self._rv["nodes"] = rv
            self._synced["nodes"] = True

    def _store_node(self, node: Mapping[str, Any]) -> None:
        meta = _meta(node)
        name = meta.get("name")
        if not isinstance(name, str):
            return
        ann = meta.get("annotations") or {}
        text = ann.get(ANN_TOPOLOGY) if isinstance(ann, Mapping) else None
        self._node_ann[name] = text if isinstance(text, str) else None
        unit = ann.get(ANN_VGPU_MEMORY_UNIT) if isinstance(ann, Mapping) else None
        if isinstance(unit, str):
            self._node_unit[name] = unit
        else:
            self._node_unit.pop(name, None)
        slots = ann.get(ANN_GPU_SHARED_SLOTS) if isinstance(ann, Mapping) else None
        self.book.set_slots(name, _slots(slots))
        sick = ann.get(ANN_UNHEALTHY_GPUS) if isinstance(ann, Mapping) else None
        self.book.set_unhealthy(name, _unhealthy(name, sick))
        labels = meta.get("labels")
        try:
            kubelet: KubeletConfig | KubeletConfigError = kubelet_config_from_labels(
                labels if isinstance(labels, Mapping) else None)
        except KubeletConfigError as exc:
            kubelet = exc
        if isinstance(kubelet, KubeletConfig) and not kubelet.aligning:
            self._node_kubelet.pop(name, None)
        else:
            self._node_kubelet[name] = kubelet
        self._views.pop(name, None)

    def apply_node_event(self, kind: str, node: Mapping[str, Any]) -> None:
        """Apply one Node watch event (``ADDED`` / ``MODIFIED`` / ``DELETED``)."""
        with self._lock:
            if kind == "DELETED":
                name = _meta(node).get("name")
                self._node_ann.pop(str(name), None)
                self._node_unit.pop(str(name), None)
                self._node_kubelet.pop(str(name), None)
                self._views.pop(str(name), None)
                self.book.set_unhealthy(str(name), ())
            else:
                self._store_node(node)

    def node_names(self) -> list[str]:
        """Every node the watch knows, sorted (the lookahead's cluster)."""
        with self._lock:
            return sorted(self._node_ann)

    def node_memory_unit(self, name: str) -> str | None:
        """The node's ``gputopo.io/vgpu-memory-unit-mib`` annotation, None when absent."""
        return self._node_unit.get(name)

    def node_kubelet_config(self, name: str) -> KubeletConfig | KubeletConfigError:
        """The node's kubelet NUMA-alignment settings from its labels (the kubelet's
        defaults when it publishes none), or why they are invalid."""
        return self._node_kubelet.get(name) or KUBELET_DEFAULTS

    def node_topology(self, name: str) -> Topology | NodeTopologyError:
        """The node's topology from its annotation, or why there is none."""
        if name not in self._node_ann:
            return NodeTopologyError("node is unknown to the extender (no Node object seen)")
        text = self._node_ann[name]
        if text is None:
            return NodeTopologyError("node has no gputopo.io/topology annotation")
        return self.topologies.get(text)


    # ------------------------------------------------------------------ pods
    def resync_pods(self) -> None:
        """Rebuild every confirmed allocation from a fresh pod list; keep young in-flight
        reservations.

        Raises:
            ApiError: the list failed.
        """
        started = time.monotonic()
        items, rv = self.api.list_pods()
        with self._lock, self.book.lock:
            keep = [
                a for a in self.book.all()
                if not a.confirmed and started - a.created < self.reservation_grace_s
            ]  # fmt: skip
            self.book.clear()
            self.pending.clear()
            self._uid_by_name.clear()
            self._name_by_uid.clear()
            for pod in items:
                self.apply_pod_event("ADDED", pod)
            for a in keep:
                if self.book.get(a.pod.key) is None:
                    self.book.add(a, None, check=False)
            self._rv["pods"] = rv
            self._synced["pods"] = True

    def apply_pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        """Apply one Pod watch event: annotations → allocation; terminated/deleted → freed."""
        meta = _meta(pod)
        uid, ns, name = meta.get("uid"), meta.get("namespace") or "default", meta.get("name")
        if not isinstance(uid, str) or not uid or not isinstance(name, str):
            return
        status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
        phase = status.get("phase") if isinstance(status, Mapping) else None
        key = f"{ns}/{name}"
        gone = kind == "DELETED" or phase in TERMINATED_PHASES
        with self._lock:
            if gone:
                if self._uid_by_name.get(key) == uid:
                    self._uid_by_name.pop(key, None)
                self._name_by_uid.pop(uid, None)
                self.book.remove(uid)
            else:  # named before the pending view sees it (its postponement writer asks)
                self._uid_by_name[key] = uid
                self._name_by_uid[uid] = key
        if kind == "DELETED":
            self.pending.discard(uid)
        else:
            self.pending.observe(pod)
        waits = postponed_at(pod) is not None
        if (gone or not waits) and uid in self._checking:
            with self._lock:  # placed (or gone): a queued re-read has nothing to repair
                self._checking.discard(uid)
        if gone:
            return
        if bound_node_of(pod) and waits:
            with self._lock:
                fresh = uid not in self._checking
                self._checking.add(uid)
            if fresh:
                self._writes.put(_Write(uid, 0.0, False, check=key))
                self._ensure_writer()
        with self._lock:
            ann = meta.get("annotations")
            if not has_assignment(ann if isinstance(ann, Mapping) else None):
                held = self.book.get(uid)
                if held is not None and held.confirmed:  # annotations removed: freed
                    self.book.remove(uid)
                return  # an unconfirmed reservation stays: bind is in flight
            try:
                assignment = parse_assignment(ann)
            except AssignmentError as exc:
                log.warning("pod %s has unreadable gputopo annotations: %s", key, exc)
                return
            node = bound_node_of(pod) or assignment.node
            ref = PodRef(str(ns), name, uid)
            self.book.add(Allocation.from_assignment(ref, node, assignment), None,
                          check=False)

    def reserve(self, pod_key: str, node: str, decision: Decision, *, pod: PodRef) -> None:
        """Record ``decision`` in flight (see :meth:`ClusterState.reserve`).

        Raises:
            ReservationConflict: a GPU or share is already taken.
        """
        topo = self.node_topology(node)
        ref = pod if pod.key == pod_key else PodRef(pod.namespace, pod.name, pod_key)
        self.book.add(
            Allocation.from_decision(ref, node, decision, confirmed=False),
            topo if isinstance(topo, Topology) else None,
        )

    def release(self, pod_key: str, *, reservation_only: bool = False) -> None:
        """Drop the allocation of ``pod_key``; ``reservation_only``: only while it is an
        unconfirmed reservation (a failed bind's rollback must not drop what the watch has
        already confirmed: a Binding whose reply was lost may have been written)."""
        if reservation_only:
            self.book.remove_reservation(pod_key)
        else:
            self.book.remove(pod_key)

    def bind(self, pod: PodRef, node: str, decision: Decision | None) -> None:
        """Bind the pod to ``node`` in one API call: a Binding carrying the assignment
        annotations of ``decision`` (none for a pod without gputopo resources).

        A call without a reply (connection reset, timeout) or with a 5xx may still have written
        the Binding: the pod is then read back, and when it is bound to ``node`` with exactly
        these annotations the bind succeeded (the reply was lost, not the write) — so the
        caller keeps the GPUs reserved and kube-scheduler is told the truth.

        Raises:
            BindError: the API refused (nothing was written), or the outcome is unknown
                (``maybe_written``: the pod could not be read back).
        """
        ann = assignment_annotations(decision, node) if decision is not None else {}
        # read before the call: the pod watch may see the pod bound (and forget its clock)
        # before the Binding's reply comes back
        started = self.pending.postponed_wall(pod.uid) if pod.uid else None
        try:
            self.api.create_binding(pod.namespace, pod.name, pod.uid, node, ann)
        except ApiError as exc:
            if exc.status and exc.status < 500:
                raise BindError(f"cannot bind pod {pod} to {node}: {exc}") from None
            try:
                live = self.api.get_pod(pod.namespace, pod.name)
            except Exception as again:  # noqa: BLE001 - any failure: the outcome is unknown
                raise BindError(
                    f"cannot bind pod {pod} to {node}: {exc}; reading it back failed too "
                    f"({again}): its GPUs stay reserved until the watch shows the outcome",
                    maybe_written=True,
                ) from None
            if live is not None and _bound_with(live, pod.uid, node, ann):
                log.warning("Binding of %s to %s: %s, but the pod is bound there with its "
                            "decision: bound", pod, node, exc)
                self._bound(pod, node, started)
                return
            raise BindError(f"cannot bind pod {pod} to {node}: {exc}") from None
        self._bound(pod, node, started)

    def _bound(self, pod: PodRef, node: str, started: float | None) -> None:
        """``pod`` is bound to ``node``: it is pending no more (the watch will say so too; a
        wake at its bound must not write over what follows), and when it was postponed
        (``started``: when, Unix s, read before the Binding) its condition turns ``False``
        (:func:`~scheduler_extender.pending.placed_condition`, written from the background
        thread: bind does not wait for it)."""
        if not pod.uid:
            return
        self.pending.discard(pod.uid)
        if started is not None:
            self._writes.put(_Write(pod.uid, started, False,
                                    (f"{pod.namespace}/{pod.name}",
                                     placed_condition(started, node, time.time()))))
            self._ensure_writer()

    def admit_pending(self, pod: Mapping[str, Any]) -> None:
        """A pod kube-scheduler asks about (filter) before the pod watch has delivered it:
        take it into the pending view and name it for the postponement writer, as the watch
        would (:meth:`PendingPods.admit`: not a pod the view holds or has forgotten), so that
        whether it may wait for a better set does not depend on which came first."""
        if not self.pending.admit(pod):
            return
        meta = _meta(pod)
        uid, ns, name = meta.get("uid"), meta.get("namespace") or "default", meta.get("name")
        if not isinstance(uid, str) or not isinstance(name, str):
            return
        with self._lock:  # the watch's mapping wins: it may already be newer
            key = f"{ns}/{name}"
            self._name_by_uid.setdefault(uid, key)
            self._uid_by_name.setdefault(key, uid)

    def _persist_postponed(self, uid: str, wall_s: float, started_here: bool) -> None:
        """:attr:`PendingPods.on_postponed`: from a background thread (filter does not wait
        for the API), write the pod's :data:`~scheduler_extender.pending.CONDITION_POSTPONED`
        when its clock ``started_here`` (so another extender continues it), and wake the pod
        when its bound ends (:meth:`_write_loop`)."""
        self._writes.put(_Write(uid, wall_s, started_here))
        self._ensure_writer()

    def _ensure_writer(self) -> None:
        with self._lock:
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(target=self._write_loop, daemon=True,
                                                name="gputopo-postponed-writer")
                self._writer.start()

    def _write_loop(self) -> None:
        """Write postponement conditions; at each pod's bound, if it is still pending, mark
        the condition ended. That write is a Pod update, which kube-scheduler answers by
        retrying the pod (an extender's rejection is requeued on any Pod event), so the
        bound holds in a quiet cluster too, where the next retry could be 5 min away."""
        wakes: list[tuple[float, str, str, float]] = []  # (monotonic deadline, uid, key, wall)
        checks: list[tuple[float, str, str]] = []  # (monotonic deadline, uid, key)
        while not self._stop.is_set():
            first = min([h[0][0] for h in (wakes, checks) if h], default=None)
            timeout = 1.0 if first is None else min(1.0, max(0.0, first - time.monotonic()))
            try:
                uid, wall_s, write, placed, check = self._writes.get(timeout=timeout)
            except queue.Empty:
                pass
            else:
                if placed is not None:  # bound: the condition turns False, nothing to wake
                    self._patch_postponed(placed[0], uid, placed[1])
                    continue
                if check is not None:
                    heapq.heappush(checks, (time.monotonic() + self.placed_check_s, uid, check))
                    continue
                key = self._name_by_uid.get(uid)  # None: gone meanwhile
                if key is None:
                    continue
                bound = self.pending.postpone_max_s
                if write:
                    self._patch_postponed(key, uid, postponed_condition(wall_s, bound))
                since = self.pending.postponed_since(uid)  # the view's (time.monotonic) clock
                if since is not None:  # None: bound meanwhile, nothing to wake
                    heapq.heappush(wakes, (since + bound, uid, key, wall_s))
            while wakes and wakes[0][0] <= time.monotonic():
                _, uid, key, wall_s = heapq.heappop(wakes)
                if self.pending.postponed_since(uid) is not None:  # still pending and waiting
                    self._patch_postponed(key, uid, postponed_condition(
                        wall_s, self.pending.postpone_max_s, ended=True))
            while checks and checks[0][0] <= time.monotonic():
                _, uid, key = heapq.heappop(checks)
                self._check_placed(uid, key)

    def _check_placed(self, uid: str, key: str) -> None:
        """The watch showed pod ``key`` (``uid``) bound with its postponement condition still
        ``True``, :attr:`placed_check_s` ago: read it again and, if it still is, mark it
        ``Placed`` — a pod bound without this extender's write (a Binding whose outcome was
        unknown to bind, another scheduler's bind, an extender that stopped before its write).
        Its ``lastTransitionTime`` is the pod's ``PodScheduled`` transition, so every replica
        that repairs it writes the same condition (the API server drops the repeats). A pod
        the watch has shown placed, or gone, meanwhile is not read again
        (:meth:`apply_pod_event` withdrew its check)."""
        with self._lock:
            if uid not in self._checking:
                return
            self._checking.discard(uid)
        ns, name = key.split("/", 1)
        mark_placed_if_bound(self.api, ns, name, uid)

    def _patch_postponed(self, key: str, uid: str, condition: dict[str, str]) -> None:
        ns, name = key.split("/", 1)
        record_condition(self.api, ns, name, uid, condition)

    def pod_uid(self, namespace: str, name: str) -> str | None:
        """UID of a live pod seen by the watch, else None."""
        return self._uid_by_name.get(f"{namespace}/{name}")

    def fetch_pod(self, namespace: str, name: str) -> Mapping[str, object] | None:
        """GET the pod (bind without a preceding filter call); None if absent or on error."""
        try:
            return self.api.get_pod(namespace, name)
        except ApiError as exc:
            log.warning("cannot fetch pod %s/%s: %s", namespace, name, exc)
            return None

    def allocations(self) -> list[Allocation]:
        """Every allocation and in-flight reservation (snapshot)."""
        return self.book.all()

    def allocation(self, pod_key: str) -> Allocation | None:
        """The allocation of ``pod_key`` (a pod UID), if any."""
        return self.book.get(pod_key)


# ---------------------------------------------------------------------- official client
def _bound_with(pod: Mapping[str, Any], uid: str, node: str, ann: Mapping[str, str]) -> bool:
    """``pod`` (as the API returns it) is pod ``uid`` (any, when ``uid`` is empty), bound to
    ``node`` and carries every annotation of ``ann``: our Binding was written."""
    meta = _meta(pod)
    have = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    return ((not uid or meta.get("uid") == uid) and bound_node_of(pod) == node
            and all((have or {}).get(k) == v for k, v in ann.items()))


def _api_error(exc: Exception) -> ApiError:
    status = int(getattr(exc, "status", 0) or 0)
    reason = getattr(exc, "reason", "") or type(exc).__name__
    body = getattr(exc, "body", None)
    detail = ""
    if body:
        try:
            detail = json.loads(body).get("message", "")
        except (ValueError, AttributeError, TypeError):
            detail = str(body)[:200]
    text = f"{status} {reason}" + (f": {detail}" if detail else "") if status else str(exc)
    cls = WatchExpired if status == 410 else ApiError
    return cls(" ".join(text.split()), status)


#: Connections of the pool besides the binds': the node and pod watches, and one list or get.
OTHER_CONNECTIONS = 3


def _drain(resp: Any) -> bytes:
    """Read a raw (``_preload_content=False``) reply to its end and hand its connection back
    to the pool; unread, the connection stays out of the pool and the next call opens (and
    TLS-handshakes) a new one."""
    try:
        data: bytes = resp.read()
    finally:
        resp.release_conn()
    return data


#: ``(connect, read)`` timeout of the extender's one-shot API calls (the Binding, a pod read,
#: a list page), seconds: a call the API server never answers must not hold a bind thread
#: (and its pod's reservation) forever. The read timeout bounds each wait for bytes, not the
#: whole reply.
REQUEST_TIMEOUT_S = (10.0, 30.0)


def _no_reply(exc: Exception) -> ApiError:
    """An ``ApiError`` with status 0 ("no reply") for a transport failure of the client's
    urllib3 layer — connection reset or refused, a timeout, a protocol error — which the
    official client raises as is, not as an ``ApiException``."""
    return ApiError(" ".join(f"no reply from the API server: {exc}".split()), 0)


@contextmanager
def _as_api_error() -> Iterator[None]:
    """Raise what the official client raises inside as an :class:`ApiError`: its
    ``ApiException`` with the HTTP status (:func:`_api_error`; 410 Gone as
    :class:`WatchExpired`), a urllib3 transport failure with status 0 (:func:`_no_reply`), a
    reply whose body is not JSON with status 0 too (no usable reply)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        yield
    except ApiException as exc:
        raise _api_error(exc) from None
    except HTTPError as exc:
        raise _no_reply(exc) from None
    except json.JSONDecodeError as exc:  # a 2xx body that is no API object (a proxy's page)
        raise ApiError(f"the API server's reply is not JSON: {exc}", 0) from None


class OfficialKubeAPI:
    """:class:`KubeAPI` over the official client's ``CoreV1Api`` (raw JSON, no models).

    Every failure is an :class:`ApiError`: the API server's refusals with their HTTP status,
    transport failures (no reply) with status 0, so :meth:`KubernetesState.bind` reads a
    pod back after a Binding whose reply was lost."""

    def __init__(self, core: Any, *,
                 request_timeout_s: tuple[float, float] = REQUEST_TIMEOUT_S) -> None:
        self.core = core
        self.request_timeout_s = request_timeout_s

    @classmethod
    def from_config(
        cls, kubeconfig: str | Path | None = None, *,
        bind_connections: int = DEFAULT_BIND_CONCURRENCY,
    ) -> OfficialKubeAPI:
        """Client from a kubeconfig file, or the in-cluster service account when None, with
        a keep-alive pool of ``bind_connections`` + :data:`OTHER_CONNECTIONS` connections
        (the client's default, 5 per CPU, is smaller than the binds in flight on a small
        machine; a call finding every pooled connection busy opens a throwaway one).

        Raises:
            ApiError: no usable configuration.
        """
        import yaml  # what load_kube_config parses with
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        cfg = client.Configuration()
        cfg.connection_pool_maxsize = bind_connections + OTHER_CONNECTIONS
        try:
            if kubeconfig is not None:
                config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
            else:
                config.load_incluster_config(client_configuration=cfg)
            api_client = client.ApiClient(cfg)
        except (ConfigException, OSError, TypeError, ValueError, AttributeError, LookupError,
                yaml.YAMLError) as exc:  # a file that is not a kubeconfig: each of these
            where = f"kubeconfig {str(kubeconfig)!r}" if kubeconfig else "in-cluster config"
            raise ApiError(
                f"cannot load {where}: {' '.join(str(exc).split())}"
                + ("" if kubeconfig else " (outside a cluster pass --kubeconfig)")
            ) from None
        return cls(client.CoreV1Api(api_client))

    def _list(self, fn: Any, **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
        items: list[dict[str, Any]] = []
        cont: str | None = None
        rv = ""
        with _as_api_error():
            while True:
                extra = {"_continue": cont} if cont else {}
                resp = fn(limit=500, _preload_content=False,
                          _request_timeout=self.request_timeout_s, **kwargs, **extra)
                data = json.loads(_drain(resp))
                items.extend(data.get("items") or [])
                meta = data.get("metadata") or {}
                rv = meta.get("resourceVersion") or rv
                cont = meta.get("continue")
                if not cont:
                    return items, rv

    def _watch(
        self, fn: Any, resource_version: str, timeout_s: int, **kwargs: Any
    ) -> Iterator[dict[str, Any]]:
        from kubernetes import watch

        def raw(**kw: Any) -> Any:  # no return annotation: Watch yields raw dicts
            return fn(**kw)

        w = watch.Watch()
        try:
            with _as_api_error():
                for event in w.stream(
                    raw, resource_version=resource_version or None, timeout_seconds=timeout_s,
                    allow_watch_bookmarks=True, _request_timeout=(10, timeout_s + 30), **kwargs,
                ):  # fmt: skip
                    if isinstance(event, dict):
                        obj = event.get("raw_object", event.get("object"))
                        yield {"type": event.get("type"), "object": obj}
        finally:
            w.stop()

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        return self._list(self.core.list_node)

    def watch_nodes(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        return self._watch(self.core.list_node, resource_version, timeout_s)

    def list_pods(self) -> tuple[list[dict[str, Any]], str]:
        return self._list(self.core.list_pod_for_all_namespaces, field_selector=POD_FIELD_SELECTOR)

    def watch_pods(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        return self._watch(
            self.core.list_pod_for_all_namespaces, resource_version, timeout_s,
            field_selector=POD_FIELD_SELECTOR,
        )  # fmt: skip

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            with _as_api_error():
                resp = self.core.read_namespaced_pod(
                    name, namespace, _preload_content=False,
                    _request_timeout=self.request_timeout_s)
                return json.loads(_drain(resp))  # type: ignore[no-any-return]
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create_binding(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        """POST the Binding as a plain JSON dict through the client's own request path
        (``ApiClient.param_serialize`` for the URL, headers and bearer-token auth, then
        ``call_api`` on its urllib3 pool), not through ``create_namespaced_pod_binding``: the
        generated method validates its arguments with pydantic's ``validate_call`` and builds
        and re-serialises a ``V1Binding`` model, which cost more CPU per bind than the rest
        of it (``benchmarks/profile_extender.py``). ``param_serialize`` and ``call_api`` are
        the generated client's own request layer (kubernetes >= 37)."""
        from kubernetes.client.exceptions import ApiException

        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        api = self.core.api_client
        with _as_api_error():  # no reply: sent, maybe written; the caller reads back
            request = api.param_serialize(
                method="POST", resource_path="/api/v1/namespaces/{namespace}/pods/{name}/binding",
                path_params={"namespace": namespace, "name": name},
                header_params={"Accept": "application/json", "Content-Type": "application/json"},
                body=body, auth_settings=["BearerToken"],
            )  # fmt: skip
            resp = api.call_api(*request, _request_timeout=self.request_timeout_s)
            if not 200 <= resp.status <= 299:
                try:
                    resp.read()  # the Status, for the error's message
                finally:
                    resp.response.release_conn()
                raise ApiException.from_response(http_resp=resp, body=None, data=None)
            _drain(resp.response)

    def patch_pod_conditions(
        self, namespace: str, name: str, uid: str, conditions: list[dict[str, str]]
    ) -> None:
        body = {"metadata": {"uid": uid}, "status": {"conditions": conditions}}
        with _as_api_error():
            resp = self.core.patch_namespaced_pod_status(
                name, namespace, body, _preload_content=False,
                _content_type="application/strategic-merge-patch+json",
                _request_timeout=self.request_timeout_s)
            _drain(resp)
