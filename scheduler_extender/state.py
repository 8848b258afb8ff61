"""Cluster state as the extender sees it: node topologies and who holds which GPU.

:class:`ClusterState` is the protocol the HTTP layer uses; two backends implement it:

* :class:`MemoryState` (this module) — nodes from a catalog spec (``dgx1-v100:4``),
  allocations in memory. The demo, the tests and the benchmarks use it.
* :class:`scheduler_extender.kubernetes_state.KubernetesState` — nodes and allocations
  listed and watched from the Kubernetes API (the only module that talks to it).

Both keep allocations in an :class:`AllocationBook`: a thread-safe map ``pod key →
Allocation`` with a per-node cached :class:`NodeState`, so a filter over 1,000 nodes reads 1,000
cached states instead of rebuilding them. A *reservation* is an allocation recorded by bind
before the API calls; :meth:`AllocationBook.add` refuses one that would hand out a GPU (or a
share of one) that is already taken, under one lock, so two binds can never receive the same
GPU even if they raced past the per-node bind lock.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from scheduler_extender.pending import PendingPods
from topology import catalog
from topology.colocation.model import DEFAULT_SLOTS
from topology.contract import Assignment, assignment_annotations
from topology.model import Topology, TopologyError
from topology.numa_alignment import KUBELET_DEFAULTS, KubeletConfig, KubeletConfigError
from topology.policies.base import (
    FULL_CORE,
    Decision,
    GPUUsage,
    NodeState,
    Resident,
    add_grant,
    add_resident,
)
from topology.serialization import loads
from topology.text import decimal_int

#: ``NodeState.key()``: ints for whole/vGPU holdings, resident records for shared GPUs.
StateKey = tuple[tuple[Any, ...], ...]


class NodeTopologyError(Exception):
    """Why a node's topology is unavailable (returned, not raised, by ``node_topology``)."""


class ReservationConflict(Exception):
    """A reservation would hand out a GPU (or GPU share) that is already taken."""


class BindError(Exception):
    """The backend could not bind the pod (API call failed); ``str(exc)`` says why.

    ``maybe_written``: the outcome is unknown (no reply, and the pod could not be read back):
    the Binding may have been written, so the caller must keep the GPUs reserved (the watch
    confirms them, or drops them when the pod goes) rather than hand them to another pod.
    """

    def __init__(self, message: str, *, maybe_written: bool = False) -> None:
        super().__init__(message)
        self.maybe_written = maybe_written


class NodesSpecError(ValueError):
    """A ``--nodes`` spec is malformed or names an unknown catalog machine."""


@dataclass(frozen=True)
class PodRef:
    """Identity of a pod. ``key`` is the UID when known, else ``namespace/name``."""

    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        """Allocation key: the UID, or ``namespace/name`` when the UID is unknown."""
        return self.uid or f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Allocation:
    """GPUs held by one pod on one node.

    Attributes:
        pod: the holder.
        node: node name.
        gpus: GPU indices (one for a share).
        core_percent: vGPU-core of a share (percent), 0 for whole GPUs.
        memory_mib: GPU memory of a share or of a co-location slot (MiB), 0 for whole GPUs.
        fractional: a vGPU share of one GPU rather than whole GPUs.
        colocation: for a co-location slot (``gputopo.io/gpu-shared``), the resident it adds
            to its GPU (job name, profile, memory); None otherwise.
        confirmed: seen in the API (annotations delivered by the watch); False = a
            reservation made by bind that the watch has not confirmed yet.
        created: monotonic time the record was made (reservation ageing).
    """

    pod: PodRef
    node: str
    gpus: tuple[int, ...]
    core_percent: int = 0
    memory_mib: int = 0
    fractional: bool = False
    confirmed: bool = True
    created: float = field(default_factory=time.monotonic)
    colocation: Resident | None = None

    @classmethod
    def from_decision(
        cls, pod: PodRef, node: str, decision: Decision, *, confirmed: bool = False
    ) -> Allocation:
        """The allocation a policy decision grants."""
        c = decision.colocation
        if c is not None:
            return cls(
                pod=pod, node=node, gpus=tuple(decision.gpus), memory_mib=c.memory_mib,
                confirmed=confirmed, colocation=Resident(c.job or str(pod), c.profile,
                                                         c.memory_mib),
            )  # fmt: skip
        return cls(
            pod=pod, node=node, gpus=tuple(decision.gpus),
            core_percent=decision.core_percent if decision.fractional else 0,
            memory_mib=decision.memory_mib if decision.fractional else 0,
            fractional=decision.fractional, confirmed=confirmed,
        )  # fmt: skip

    @classmethod
    def from_assignment(cls, pod: PodRef, node: str, a: Assignment) -> Allocation:
        """The allocation read back from a pod's output annotations."""
        colocation = a.colocation
        if colocation is not None and not colocation.name:
            colocation = Resident(str(pod), colocation.profile, colocation.memory_mib)
        return cls(
            pod=pod, node=node, gpus=a.gpu_indices, core_percent=a.core_percent,
            memory_mib=a.memory_mib, fractional=a.fractional, confirmed=True,
            colocation=colocation,
        )  # fmt: skip


@dataclass(frozen=True)
class NodeView:
    """What filter/prioritize read about one node, in one lookup.

    Attributes:
        name: node name.
        topology: the node's topology, or why it is unavailable.
        state: its used GPUs.
        state_key: ``state.key()``, precomputed (cache key).
        state_id: a small integer standing for ``state_key`` (equal keys, equal ids), so
            grouping 1,000 nodes hashes ints rather than nested tuples.
        group: ``(topology class, state_id)`` — nodes with equal groups get equal decisions;
            None when the topology is unavailable.
        by_free: the same view grouped by ``(topology class, free-GPU mask)`` instead: what
            a whole-GPU request to a ``free_set_only`` policy may share across nodes whose
            busy GPUs are used differently (None when the topology is unavailable, and on
            that variant itself: no reference cycles among objects rebuilt on every state
            change).
    """

    name: str
    topology: Topology | NodeTopologyError
    state: NodeState
    state_key: StateKey
    state_id: int = -1
    group: tuple[str, int] | None = None
    by_free: NodeView | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(
        cls, name: str, topology: Topology | NodeTopologyError, state: NodeState,
        state_key: StateKey, state_id: int,
    ) -> NodeView:
        """A view with its ``group`` and ``by_free`` variant filled in."""
        if not isinstance(topology, Topology):
            return cls(name, topology, state, state_key, state_id, None)
        cls_id = topology.topology_class
        free_group = (cls_id, intern_state(("free", state.mask(topology))))
        variant = cls(name, topology, state, state_key, state_id, free_group)
        return cls(name, topology, state, state_key, state_id, (cls_id, state_id), variant)


class _Interner:
    """Maps hashable keys to small, never reused integers (bounded: forgets when full)."""

    def __init__(self, limit: int = 1_000_000) -> None:
        self._ids: dict[object, int] = {}
        self._next = 0
        self._limit = limit
        self._lock = threading.Lock()

    def __call__(self, key: object) -> int:
        hit = self._ids.get(key)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._ids.get(key)
            if hit is None:
                if len(self._ids) >= self._limit:
                    self._ids.clear()  # ids are never reused: stale cache entries just age out
                hit = self._next
                self._next += 1
                self._ids[key] = hit
            return hit


#: Interns NodeState keys (shared by every backend, so equal states share an id), and
#: ``("free", mask)`` keys of free-GPU masks (``NodeView.by_free``).
intern_state = _Interner()


def apply_usage(usage: dict[int, GPUUsage], alloc: Allocation) -> None:
    """Add ``alloc`` to a usage map in place (whole GPUs: core 100; shares: summed;
    :func:`topology.policies.base.add_grant`; co-location slots: a resident on the GPU,
    :func:`topology.policies.base.add_resident`)."""
    if alloc.colocation is not None:
        add_resident(usage, alloc.gpus[0], alloc.colocation, slots=None)
        return
    add_grant(usage, alloc.gpus, fractional=alloc.fractional,
              core_percent=alloc.core_percent, memory_mib=alloc.memory_mib)


def conflicts(
    usage: Mapping[int, GPUUsage], alloc: Allocation, topology: Topology | None,
    unhealthy: frozenset[int] = frozenset(), slots: int = DEFAULT_SLOTS,
) -> str | None:
    """Why ``alloc`` cannot be added on top of ``usage`` (None when it fits).

    Whole GPUs must be idle; a share needs ``core_percent`` and ``memory_mib`` room on its GPU
    and no co-located jobs; a co-location slot needs a GPU that is not held whole or split
    into vGPU shares, one of its ``slots`` free, and its memory free next to the residents'
    (memory checked against the GPU's framebuffer when the topology is known): GPU memory is
    never overcommitted, whichever way the GPU is shared.
    """
    for g in alloc.gpus:
        if topology is not None and not 0 <= g < topology.size:
            return f"GPU {g} does not exist on node {alloc.node}"
        if g in unhealthy:
            return f"GPU {g} on {alloc.node} is unhealthy"
        u = usage.get(g, GPUUsage())
        if alloc.colocation is not None:
            if u.core_percent or u.memory_mib:
                return (f"GPU {g} on {alloc.node} is held whole or split into vGPU shares; "
                        "it takes no co-location slot")
            if len(u.residents) >= slots:
                return f"GPU {g} on {alloc.node} has all {slots} co-location slots taken"
            if topology is not None and u.resident_memory_mib + alloc.memory_mib > \
                    topology.gpus[g].memory_mib:
                return f"GPU {g} on {alloc.node} has not {alloc.memory_mib} MiB free"
            continue
        if not alloc.fractional:
            if not u.idle:
                return f"GPU {g} on {alloc.node} is already in use"
            continue
        if u.residents:
            return f"GPU {g} on {alloc.node} is shared by co-located jobs"
        if u.core_percent + alloc.core_percent > FULL_CORE:
            return (
                f"GPU {g} on {alloc.node} has {FULL_CORE - u.core_percent}% vGPU-core free; "
                f"{alloc.core_percent}% asked"
            )
        if topology is not None and u.memory_mib + alloc.memory_mib > topology.gpus[g].memory_mib:
            return f"GPU {g} on {alloc.node} has not {alloc.memory_mib} MiB free"
    return None


class AllocationBook:
    """Thread-safe allocations with a cached :class:`NodeState` per node.

    Args:
        on_change: called with a node name whenever that node's state changes (under the
            book's lock) — backends drop their cached :class:`NodeView` there.
    """

    def __init__(self, on_change: Callable[[str], object] | None = None) -> None:
        self.lock = threading.RLock()
        self._on_change = on_change
        self._by_key: dict[str, Allocation] = {}
        self._by_node: dict[str, dict[str, Allocation]] = {}
        self._states: dict[str, tuple[NodeState, StateKey, int]] = {}
        self._unhealthy: dict[str, frozenset[int]] = {}
        self._slots: dict[str, int] = {}
        #: bumped on every change (callers cache views per node and compare)
        self.version = 0

    def _usage(self, node: str) -> dict[int, GPUUsage]:
        usage: dict[int, GPUUsage] = {}
        for a in self._by_node.get(node, {}).values():
            apply_usage(usage, a)
        return usage

    def state(self, node: str) -> tuple[NodeState, StateKey, int]:
        """``(NodeState, NodeState.key(), state id)`` of ``node`` (cached until it changes)."""
        hit = self._states.get(node)
        if hit is not None:
            return hit
        with self.lock:
            st = NodeState(self._usage(node), self._unhealthy.get(node, frozenset()),
                           self._slots.get(node, DEFAULT_SLOTS))
            key = st.key()
            hit = (st, key, intern_state(key))
            self._states[node] = hit
            return hit

    def state_without(
        self, node: str, keys: frozenset[str]
    ) -> tuple[NodeState, StateKey, int]:
        """Like :meth:`state`, as if the allocations of pods ``keys`` were gone from
        ``node`` (what evicting them would leave). Computed from the records, not cached;
        the live state is untouched."""
        with self.lock:
            usage: dict[int, GPUUsage] = {}
            for a in self._by_node.get(node, {}).values():
                if a.pod.key not in keys:
                    apply_usage(usage, a)
            st = NodeState(usage, self._unhealthy.get(node, frozenset()),
                           self._slots.get(node, DEFAULT_SLOTS))
        key = st.key()
        return st, key, intern_state(key)

    def _touch(self, node: str) -> None:
        self._states.pop(node, None)
        if self._on_change is not None:
            self._on_change(node)
        self.version += 1

    def add(self, alloc: Allocation, topology: Topology | None, *, check: bool = True) -> None:
        """Record ``alloc`` (replacing any record of the same pod).

        Args:
            alloc: the allocation.
            topology: the node's topology (bounds and memory checks), if known.
            check: refuse conflicts (bind); False records what the API says regardless.

        Raises:
            ReservationConflict: ``check`` and a GPU or share is already taken.
        """
        key = alloc.pod.key
        with self.lock:
            old = self._by_key.get(key)
            if check:
                usage: dict[int, GPUUsage] = {}
                for a in self._by_node.get(alloc.node, {}).values():
                    if a.pod.key != key:
                        apply_usage(usage, a)
                sick = self._unhealthy.get(alloc.node, frozenset())
                why = conflicts(usage, alloc, topology, sick,
                                self._slots.get(alloc.node, DEFAULT_SLOTS))
                if why is not None:
                    raise ReservationConflict(why)
            if old is not None:
                self._by_node.get(old.node, {}).pop(key, None)
                self._touch(old.node)
            self._by_key[key] = alloc
            self._by_node.setdefault(alloc.node, {})[key] = alloc
            self._touch(alloc.node)

    def remove(self, key: str) -> Allocation | None:
        """Forget the allocation of pod ``key``; returns it (None if there was none)."""
        with self.lock:
            old = self._by_key.pop(key, None)
            if old is not None:
                self._by_node.get(old.node, {}).pop(key, None)
                self._touch(old.node)
            return old

    def remove_reservation(self, key: str) -> Allocation | None:
        """Forget the allocation of pod ``key`` only while it is an unconfirmed reservation;
        returns it (None if there was none, or it is confirmed and kept)."""
        with self.lock:
            held = self._by_key.get(key)
            if held is None or held.confirmed:
                return None
            return self.remove(key)

    def get(self, key: str) -> Allocation | None:
        """The allocation of pod ``key``, if any."""
        return self._by_key.get(key)

    def all(self) -> list[Allocation]:
        """Every allocation (a snapshot)."""
        with self.lock:
            return list(self._by_key.values())

    def on_node(self, node: str) -> list[Allocation]:
        """Allocations on ``node`` (a snapshot)."""
        with self.lock:
            return list(self._by_node.get(node, {}).values())

    def set_unhealthy(self, node: str, gpus: Iterable[int]) -> None:
        """Mark GPUs of ``node`` as not to be handed out."""
        sick = frozenset(gpus)
        with self.lock:
            if self._unhealthy.get(node, frozenset()) != sick:
                self._unhealthy[node] = sick
                self._touch(node)

    def set_slots(self, node: str, slots: int) -> None:
        """Co-location slots per GPU of ``node`` (what its device plugin advertises)."""
        with self.lock:
            if self._slots.get(node, DEFAULT_SLOTS) != slots:
                self._slots[node] = slots
                self._touch(node)

    def slots(self, node: str) -> int:
        """Co-location slots per GPU of ``node`` (default 3)."""
        return self._slots.get(node, DEFAULT_SLOTS)

    def clear(self) -> None:
        """Forget everything (relist)."""
        with self.lock:
            nodes = list(self._by_node)
            self._by_key.clear()
            self._by_node.clear()
            for n in nodes:
                self._touch(n)


class TopologyCache:
    """Parsed ``gputopo.io/topology`` annotations, keyed by the annotation text (its hash).

    Bounded LRU; parse failures are cached too (as :class:`NodeTopologyError`), so a corrupt
    annotation costs one parse, not one per request.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._cache: OrderedDict[str, Topology | NodeTopologyError] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text: str) -> Topology | NodeTopologyError:
        """The topology of annotation ``text``, or a :class:`NodeTopologyError` saying
        ``topology annotation invalid: …`` (corrupt JSON, schema violation, newer
        ``schemaVersion``)."""
        hit = self._cache.get(text)
        if hit is not None:
            return hit
        try:
            parsed: Topology | NodeTopologyError = loads(text)
        except TopologyError as exc:
            parsed = NodeTopologyError(f"topology annotation invalid: {exc}")
        except Exception as exc:  # noqa: BLE001 - never let a node annotation crash a verb
            parsed = NodeTopologyError(f"topology annotation invalid: {type(exc).__name__}: {exc}")
        with self._lock:
            self._cache[text] = parsed
            if len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return parsed

    def clear(self) -> None:
        """Forget every parsed annotation."""
        with self._lock:
            self._cache.clear()

    @staticmethod
    def digest(text: str) -> str:
        """Short hash of an annotation (for logs)."""
        return hashlib.sha256(text.encode()).hexdigest()[:12]


@runtime_checkable
class ClusterState(Protocol):
    """What the extender needs from the cluster. Implementations are thread-safe.

    ``filter`` and ``prioritize`` only read (:meth:`node_view`); ``bind`` calls
    :meth:`reserve` (under the extender's per-node lock), then :meth:`bind`, and
    :meth:`release` when :meth:`bind` fails.
    """

    def ready(self) -> bool:
        """True once the backend has its initial view (readiness probe)."""
        ...

    def node_topology(self, name: str) -> Topology | NodeTopologyError:
        """The node's topology, or why it has none (unknown node, no or invalid annotation)."""
        ...

    def node_state(self, name: str) -> NodeState:
        """Used GPUs of the node (confirmed allocations plus in-flight reservations)."""
        ...

    def node_memory_unit(self, name: str) -> str | None:
        """The node's ``gputopo.io/vgpu-memory-unit-mib`` annotation as published (MiB per
        ``gputopo.io/vgpu-memory`` device), None when the node publishes none."""
        ...

    def node_kubelet_config(self, name: str) -> KubeletConfig | KubeletConfigError:
        """The node's kubelet NUMA-alignment settings as its device plugin publishes them
        (``gputopo.io/topology-manager-policy`` … labels; the kubelet's defaults when none),
        or why the published labels are invalid."""
        ...

    def node_view(self, name: str, *, without: frozenset[str] = frozenset()) -> NodeView:
        """Topology, state and state key in one call (the filter hot path).

        ``without``: pod keys whose allocations are left out — the node as it would be once
        they were evicted (preemption), without changing the live state.
        """
        ...

    def reserve(self, pod_key: str, node: str, decision: Decision, *, pod: PodRef) -> None:
        """Record ``decision`` for ``pod`` on ``node`` before any API call.

        Raises:
            ReservationConflict: a GPU or share of ``decision`` is already taken.
        """
        ...

    def release(self, pod_key: str, *, reservation_only: bool = False) -> None:
        """Drop the allocation of ``pod_key`` (no-op if absent). ``reservation_only``: only
        while it is an unconfirmed reservation — the rollback of a failed bind, which must
        not drop an allocation the API already shows (a Binding whose reply was lost)."""
        ...

    def bind(self, pod: PodRef, node: str, decision: Decision | None) -> None:
        """Bind the pod to ``node`` with the assignment annotations of ``decision`` (none
        when None), atomically: both or neither.

        Raises:
            BindError: the API refused; nothing is bound and no annotation written.
        """
        ...

    def pod_uid(self, namespace: str, name: str) -> str | None:
        """The UID of a live pod the backend knows, else None (PodUID verification)."""
        ...

    def fetch_pod(self, namespace: str, name: str) -> Mapping[str, object] | None:
        """The pod object (for a bind that saw no filter call), or None if unavailable."""
        ...

    def allocations(self) -> list[Allocation]:
        """Every allocation and reservation (snapshot)."""
        ...

    def allocation(self, pod_key: str) -> Allocation | None:
        """The allocation or reservation of ``pod_key``, if any."""
        ...


# ------------------------------------------------------------------------------ memory
#: Most nodes a ``CATALOG:COUNT`` spec may name (each is built in memory before any start).
MAX_SPEC_NODES = 10_000


def parse_nodes_spec(spec: str) -> list[tuple[str, Topology]]:
    """Expand ``CATALOG:COUNT[,CATALOG:COUNT…]`` into ``[(name, topology)]``.

    Node names are ``<catalog>-<i>`` (``dgx1-v100-0`` …); a machine listed twice continues
    its numbering. ``COUNT`` defaults to 1 (``dgx1-v100`` = ``dgx1-v100:1``).

    Raises:
        NodesSpecError: empty spec, bad count, more than :data:`MAX_SPEC_NODES` nodes in all,
            unknown catalog machine (names the known ones).
    """
    out: list[tuple[str, Topology]] = []
    seen: dict[str, int] = {}
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise NodesSpecError("empty nodes spec; expected e.g. dgx1-v100:4")
    for part in parts:
        machine, _, count_text = part.partition(":")
        machine = machine.strip().lower()
        count_text = count_text.strip() or "1"
        count = decimal_int(count_text)
        if count is None or count < 1:
            raise NodesSpecError(f"bad node count in {part!r}; expected CATALOG:COUNT, COUNT >= 1")
        if len(out) + count > MAX_SPEC_NODES:
            raise NodesSpecError(f"{spec.strip()!r} names more than {MAX_SPEC_NODES} nodes")
        try:
            topo = catalog.get(machine)
        except catalog.UnknownMachine as exc:
            raise NodesSpecError(str(exc)) from None
        start = seen.get(machine, 0)
        for i in range(start, start + count):
            out.append((f"{machine}-{i}", topo))
        seen[machine] = start + count
    return out


@dataclass
class BoundPod:
    """A pod the memory backend has bound: its node, the annotations bind wrote and the
    decision (None for a pod without gputopo resources)."""

    pod: PodRef
    node: str
    annotations: dict[str, str]
    decision: Decision | None = None


class ViewCache(dict[str, NodeView]):
    """The backends' cached :class:`NodeView` per node name, with a log of the names whose
    view was dropped (their allocations, topology or settings changed), so a reader that
    keeps something per node (the lookahead's homes, :meth:`changed_since`) revisits only
    those nodes instead of every node of the cluster.

    Every way a backend drops views goes through :meth:`pop` or :meth:`clear`; a view is
    dropped *before* its name is logged, so a reader that sees the name and asks for the view
    gets the new one."""

    #: Names kept in the log; a reader further behind rescans every node.
    MAX_LOG = 4096

    def __init__(self) -> None:
        super().__init__()
        self._log: list[str] = []
        self._base = 0  # log position of self._log[0]
        self._epoch = 0  # bumped by clear(): every view dropped at once

    def pop(self, name: str, default: Any = None) -> Any:
        out = super().pop(name, default)
        self._log.append(name)
        if len(self._log) > 2 * self.MAX_LOG:
            del self._log[:self.MAX_LOG]
            self._base += self.MAX_LOG
        return out

    def __delitem__(self, name: str) -> None:
        self.pop(name)

    def clear(self) -> None:
        super().clear()
        self._epoch += 1

    def cursor(self) -> tuple[int, int]:
        """Where the log ends now (pass it to :meth:`changed_since` later)."""
        return self._epoch, self._base + len(self._log)

    def changed_since(self, cursor: tuple[int, int]) -> tuple[set[str] | None, tuple[int, int]]:
        """The names whose view was dropped since ``cursor`` (None: unknown — every view was
        dropped, or the log no longer reaches back that far), and the new cursor."""
        epoch, pos = cursor
        now = self.cursor()
        if epoch != self._epoch or pos < self._base:
            return None, now
        return set(self._log[pos - self._base:now[1] - self._base]), now


class BookedViews:
    """Node state and cached node views from an :class:`AllocationBook`, shared by the
    state backends. Subclasses set ``book``, ``_views`` and ``pending`` and define
    ``node_topology``; the book's ``on_change`` drops a node's view when its allocations
    change.

    Attributes:
        pending: the pending whole-GPU pods, in kube-scheduler's queue order, for the
            default policy's lookahead (:mod:`scheduler_extender.pending`).
    """

    book: AllocationBook
    _views: dict[str, NodeView]
    pending: PendingPods

    def view_changes(
        self, cursor: tuple[int, int] | None,
    ) -> tuple[set[str] | None, tuple[int, int]]:
        """The nodes whose view may have changed since ``cursor`` (None: unknown, rescan every
        node; also for ``cursor=None``) and the cursor to pass next time
        (:meth:`ViewCache.changed_since`)."""
        views = self._views
        if not isinstance(views, ViewCache):  # a backend without the log: always rescan
            return None, (0, 0)
        if cursor is None:
            return None, views.cursor()
        return views.changed_since(cursor)

    def node_topology(self, name: str) -> Topology | NodeTopologyError:  # pragma: no cover
        raise NotImplementedError

    def node_memory_unit(self, name: str) -> str | None:
        """The node's published vGPU-memory unit annotation (None: none published)."""
        return None

    def node_kubelet_config(self, name: str) -> KubeletConfig | KubeletConfigError:
        """The kubelet's defaults (no NUMA alignment) unless a backend knows better."""
        return KUBELET_DEFAULTS

    def node_state(self, name: str) -> NodeState:
        """Used GPUs of ``name`` (confirmed allocations and in-flight reservations)."""
        return self.book.state(name)[0]

    def node_view(self, name: str, *, without: frozenset[str] = frozenset()) -> NodeView:
        """Topology and state of ``name`` (cached until either changes); ``without``: as if
        the allocations of those pod keys were gone (not cached, live state untouched)."""
        if without:
            state, key, sid = self.book.state_without(name, without)
            return NodeView.of(name, self.node_topology(name), state, key, sid)
        view = self._views.get(name)
        if view is not None:
            return view
        with self.book.lock:
            state, key, sid = self.book.state(name)
            view = NodeView.of(name, self.node_topology(name), state, key, sid)
            self._views[name] = view
        return view


class MemoryState(BookedViews):
    """In-memory cluster: fixed nodes, allocations and bindings kept in this process.

    Args:
        nodes: node name → topology.

    Use :meth:`from_spec` for catalog nodes. :meth:`delete_pod` frees a pod's GPUs (a pod
    finishing). Ready at once. Nothing watches pods here: whoever plays the cluster tells
    :attr:`pending` about waiting pods (``pending.observe(pod)``); bind forgets them.
    """

    def __init__(self, nodes: Mapping[str, Topology] | None = None,
                 pending: PendingPods | None = None) -> None:
        self._nodes: dict[str, Topology] = dict(nodes or {})
        self.pending = pending if pending is not None else PendingPods()
        self._units: dict[str, str] = {}
        self._kubelet: dict[str, KubeletConfig] = {}
        self._views = ViewCache()
        self.book = AllocationBook(on_change=lambda node: self._views.pop(node, None))
        self._bound: dict[str, BoundPod] = {}  # "ns/name" -> record
        self._lock = threading.RLock()

    @classmethod
    def from_spec(cls, spec: str) -> MemoryState:
        """Nodes from a ``CATALOG:COUNT[,…]`` spec (see :func:`parse_nodes_spec`).

        Raises:
            NodesSpecError: the spec is malformed.
        """
        return cls(dict(parse_nodes_spec(spec)))

    # -------------------------------------------------------------- nodes
    def add_node(
        self, name: str, topology: Topology, *, memory_unit_mib: str | None = None,
        kubelet: KubeletConfig | None = None,
    ) -> None:
        """Add or replace a node; ``memory_unit_mib``: the ``gputopo.io/vgpu-memory-unit-mib``
        annotation it publishes (None: none); ``kubelet``: the NUMA-alignment settings it
        publishes (None: the kubelet's defaults)."""
        with self._lock:
            self._nodes[name] = topology
            if memory_unit_mib is None:
                self._units.pop(name, None)
            else:
                self._units[name] = memory_unit_mib
            if kubelet is None:
                self._kubelet.pop(name, None)
            else:
                self._kubelet[name] = kubelet
            self._views.pop(name, None)

    def set_kubelet_config(self, name: str, kubelet: KubeletConfig | None) -> None:
        """Set (None: reset to the defaults) the kubelet settings a node publishes (its view
        is dropped, as for every change of what a decision on the node reads)."""
        with self._lock:
            if kubelet is None:
                self._kubelet.pop(name, None)
            else:
                self._kubelet[name] = kubelet
            self._views.pop(name, None)

    def node_names(self) -> list[str]:
        """Node names, sorted."""
        return sorted(self._nodes)

    def ready(self) -> bool:
        """Always ready."""
        return True

    def node_topology(self, name: str) -> Topology | NodeTopologyError:
        """The node's topology or a :class:`NodeTopologyError` for an unknown node."""
        topo = self._nodes.get(name)
        if topo is None:
            return NodeTopologyError("node has no gputopo.io/topology annotation")
        return topo

    def node_memory_unit(self, name: str) -> str | None:
        """The unit given to :meth:`add_node` (catalog nodes publish none)."""
        return self._units.get(name)

    def node_kubelet_config(self, name: str) -> KubeletConfig | KubeletConfigError:
        """The settings given to :meth:`add_node` (the kubelet's defaults otherwise)."""
        return self._kubelet.get(name) or KUBELET_DEFAULTS


    def set_unhealthy(self, node: str, gpus: Iterable[int]) -> None:
        """Mark GPUs of ``node`` unhealthy (never handed out)."""
        self.book.set_unhealthy(node, gpus)

    # -------------------------------------------------------------- allocations
    def reserve(self, pod_key: str, node: str, decision: Decision, *, pod: PodRef) -> None:
        """Record the decision (see :meth:`ClusterState.reserve`)."""
        topo = self._nodes.get(node)
        ref = pod if pod.key == pod_key else PodRef(pod.namespace, pod.name, pod_key)
        self.book.add(Allocation.from_decision(ref, node, decision, confirmed=False), topo)

    def release(self, pod_key: str, *, reservation_only: bool = False) -> None:
        """Drop ``pod_key``'s allocation (``reservation_only``: only if unconfirmed)."""
        if reservation_only:
            self.book.remove_reservation(pod_key)
        else:
            self.book.remove(pod_key)

    def bind(self, pod: PodRef, node: str, decision: Decision | None) -> None:
        """Record the binding and the annotations bind would write; confirms the reservation."""
        ann = assignment_annotations(decision, node) if decision is not None else {}
        with self._lock:
            self._bound[str(pod)] = BoundPod(pod, node, ann, decision)
        self.pending.discard(pod.uid)  # no longer waiting (the watch does this on a cluster)
        alloc = self.book.get(pod.key)
        if alloc is not None and not alloc.confirmed:
            self.book.add(replace(alloc, confirmed=True), None, check=False)

    def delete_pod(self, namespace: str, name: str) -> bool:
        """The pod ended: free its GPUs and forget its binding. Returns whether it existed."""
        with self._lock:
            rec = self._bound.pop(f"{namespace}/{name}", None)
        if rec is not None:
            self.book.remove(rec.pod.key)
            return True
        freed = False  # reserved but never bound (a bind in flight): find it by name
        for a in self.book.all():
            if a.pod.namespace == namespace and a.pod.name == name:
                freed = self.book.remove(a.pod.key) is not None or freed
        return freed

    def bound_pod(self, namespace: str, name: str) -> BoundPod | None:
        """The binding record of a pod (node and annotations written), if bound."""
        return self._bound.get(f"{namespace}/{name}")

    def pod_uid(self, namespace: str, name: str) -> str | None:
        """UID of a pod this backend bound (None otherwise)."""
        rec = self._bound.get(f"{namespace}/{name}")
        return rec.pod.uid or None if rec is not None else None

    def fetch_pod(self, namespace: str, name: str) -> Mapping[str, object] | None:
        """The memory backend stores no pod objects: always None."""
        return None

    def allocations(self) -> list[Allocation]:
        """Every allocation (snapshot)."""
        return self.book.all()

    def allocation(self, pod_key: str) -> Allocation | None:
        """The allocation of ``pod_key``, if any."""
        return self.book.get(pod_key)
