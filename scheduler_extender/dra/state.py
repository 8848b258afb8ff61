"""The cluster as the DRA allocator sees it: node topologies, the GPUs each node's
ResourceSlices offer, and the GPUs every allocated ResourceClaim holds.

:class:`DraState` is a :class:`~scheduler_extender.state.BookedViews` backend, so the extender's
:class:`~scheduler_extender.decision.Decider` decides on it unchanged. Its allocations are the
extender's :class:`~scheduler_extender.state.AllocationBook` records — one per claim (keyed by
the claim's UID; :class:`~scheduler_extender.state.PodRef` names the claim) — so whole GPUs,
vGPU shares and co-location slots follow the device-plugin path's accounting exactly
(:func:`scheduler_extender.state.conflicts`).

* **Topology** of a node: its ``gputopo.io/topology`` annotation (what the DRA driver publishes
  beside its slices, as the device plugin does), parsed once per text.
* **Offered GPUs**: GPU ``i`` is offered while the node's pool (driver ``gpu.gputopo.io``,
  latest generation, complete) lists device ``gpu-<i>``; a GPU the driver left out (unhealthy)
  is never handed out. Co-location slots per GPU: the ``slots`` capacity of the ``-slot``
  devices (0 when there are none). A node with no complete pool offers nothing.
* **Device taints**: each offered device's NoSchedule/NoExecute taints
  (:meth:`DraState.device_taints`), except :data:`topology.dra.ALLOCATOR_TAINT` (addressed to
  kube-scheduler's allocator, not to this one) — those in the slice plus those of every
  DeviceTaintRule (``resource.k8s.io/v1beta2``) whose selector matches the device, appended as
  kube-scheduler's ResourceSlice tracker does (:meth:`DraState.apply_taint_rule`). Whether one
  keeps a GPU from a request depends on the request's tolerations, so the allocator applies
  them per decision.
* **Held GPUs**: every claim whose ``status.allocation`` names gputopo devices, whoever wrote
  it, rebuilt from a list at start and kept by the watch: an allocator restart loses nothing.
  A co-location slot's resident profile comes from its pod's ``gputopo.io/colocation``
  annotation (:meth:`DraState.remember_resident`), else the conservative default profile.
* **Reservations**: :meth:`DraState.reserve` records a decision before its API writes (refusing
  a GPU already taken, under the book's lock); the claim watch confirms it when the claim shows
  the allocation, :meth:`DraState.release` drops it when the write failed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from scheduler_extender.dra.claims import ClaimAsk, ClaimError, DeviceTaint, parse_claim
from scheduler_extender.state import (
    Allocation,
    AllocationBook,
    BindError,
    BookedViews,
    NodeTopologyError,
    NodeView,
    PodRef,
    ReservationConflict,
    TopologyCache,
)
from topology.colocation.profile import builtin_catalog
from topology.colocation.sources import resolve_profile
from topology.contract import ANN_TOPOLOGY
from topology.dra import (
    ALLOCATOR_TAINT,
    CAP_SLOTS,
    DRIVER,
    DeviceKind,
    DRAContractError,
    parse_device_name,
)
from topology.model import Topology
from topology.policies.base import Decision, Resident

log = logging.getLogger("gputopo.dra.allocator")


@dataclass
class _Pool:
    """The slices of one node's pool (latest generation only)."""

    generation: int = 0
    count: int = 0
    slices: dict[str, Mapping[str, Any]] | None = None

    def complete(self) -> bool:
        return self.slices is not None and len(self.slices) >= self.count > 0


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def claim_ref(claim: ClaimAsk) -> PodRef:
    """The book's holder record for a claim (namespace, claim name, claim UID)."""
    return PodRef(claim.namespace, claim.name, claim.uid)


class DraState(BookedViews):
    """Node topologies, offered GPUs and held GPUs (thread-safe).

    Fed by the allocator's watches: :meth:`apply_node`, :meth:`apply_slice`,
    :meth:`apply_claim` (and :meth:`resync_claims` after a relist).
    """

    def __init__(self) -> None:
        self._views: dict[str, NodeView] = {}
        self.book = AllocationBook(on_change=lambda node: self._views.pop(node, None))
        self.topologies = TopologyCache()
        self._lock = threading.RLock()
        self._node_ann: dict[str, str | None] = {}
        self._pools: dict[str, _Pool] = {}
        self._offered: dict[str, frozenset[int]] = {}
        self._taints: dict[str, dict[DeviceKind, dict[int, tuple[DeviceTaint, ...]]]] = {}
        self._rules: dict[str, TaintRule] = {}
        self._claims: dict[str, tuple[Mapping[str, Any], ClaimAsk | ClaimError]] = {}
        self._residents: dict[str, Resident] = {}
        self._synced: set[str] = set()

    # ------------------------------------------------------------------ readiness
    def mark_synced(self, kind: str) -> None:
        """Record that ``kind`` (``nodes``, ``slices``, ``claims``) has been listed."""
        self._synced.add(kind)

    def ready(self) -> bool:
        """Nodes, slices and claims have been listed."""
        return {"nodes", "slices", "claims"} <= self._synced

    # ------------------------------------------------------------------ nodes
    def apply_node(self, kind: str, node: Mapping[str, Any]) -> None:
        """One Node event: its topology annotation (gone with the node)."""
        meta = _meta(node)
        name = str(meta.get("name") or "")
        if not name:
            return
        with self._lock:
            if kind == "DELETED":
                self._node_ann.pop(name, None)
            else:
                ann = meta.get("annotations") or {}
                text = ann.get(ANN_TOPOLOGY) if isinstance(ann, Mapping) else None
                self._node_ann[name] = text if isinstance(text, str) else None
            self._refresh(name)

    def node_names(self) -> list[str]:
        """Nodes whose pool offers GPUs, sorted."""
        with self._lock:
            return sorted(n for n, gpus in self._offered.items() if gpus)

    def node_topology(self, name: str) -> Topology | NodeTopologyError:
        """The node's topology, or why there is none (no Node, no annotation, no slices)."""
        if name not in self._node_ann:
            return NodeTopologyError("node is unknown to the allocator (no Node object seen)")
        text = self._node_ann[name]
        if text is None:
            return NodeTopologyError(
                f"node has no {ANN_TOPOLOGY} annotation (is gputopo's DRA driver running "
                "there?)")
        if name not in self._offered:
            return NodeTopologyError(f"node has no complete ResourceSlice pool of {DRIVER}")
        return self.topologies.get(text)

    def offered(self, name: str) -> frozenset[int]:
        """GPU indices the node's pool offers (``gpu-<i>`` devices)."""
        return self._offered.get(name, frozenset())

    def device_taints(self, name: str, kind: DeviceKind) -> Mapping[int, tuple[DeviceTaint, ...]]:
        """GPU index → the NoSchedule/NoExecute taints of the node's ``kind`` device of that
        GPU (``gpu-<i>``, ``gpu-<i>-share``, ``gpu-<i>-slot``), gputopo's allocator taint left
        out; untainted devices are not listed."""
        return self._taints.get(name, {}).get(kind, {})

    # ------------------------------------------------------------------ taint rules
    def apply_taint_rule(self, kind: str, obj: Mapping[str, Any]) -> None:
        """One DeviceTaintRule event (``resource.k8s.io/v1beta2``): its taint is added to every
        device its selector matches, on every node, until the rule goes."""
        name = str(_meta(obj).get("name") or "")
        if not name:
            return
        with self._lock:
            if kind == "DELETED":
                self._rules.pop(name, None)
            else:
                self._rules[name] = TaintRule.parse(obj)
            for node in list(self._pools):
                self._refresh(node)

    def taint_rule_count(self) -> int:
        """DeviceTaintRules held (each applied to the devices it selects)."""
        return len(self._rules)

    def resync_taint_rules(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Replace every DeviceTaintRule with a fresh list (an empty one when the API does
        not serve them)."""
        with self._lock:
            self._rules = {str(_meta(o).get("name")): TaintRule.parse(o) for o in items
                           if _meta(o).get("name")}
            for node in list(self._pools):
                self._refresh(node)

    # ------------------------------------------------------------------ slices
    def apply_slice(self, kind: str, obj: Mapping[str, Any]) -> None:
        """One ResourceSlice event (other drivers' slices are ignored)."""
        spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
        if (spec or {}).get("driver") != DRIVER:
            return
        node = str((spec or {}).get("nodeName") or "")
        name = str(_meta(obj).get("name") or "")
        pool = (spec or {}).get("pool") or {}
        if not node or not name:
            return
        gen = int(pool.get("generation") or 0)
        count = int(pool.get("resourceSliceCount") or 1)
        with self._lock:
            p = self._pools.setdefault(node, _Pool())
            if kind == "DELETED":
                if p.slices is not None:
                    p.slices.pop(name, None)
            elif gen > p.generation or p.slices is None:
                p.generation, p.count, p.slices = gen, count, {name: obj}
            elif gen == p.generation:
                p.count = count
                p.slices[name] = obj
            self._refresh(node)

    def _refresh(self, node: str) -> None:
        """Recompute what ``node`` offers (under the lock)."""
        p = self._pools.get(node)
        offered: set[int] = set()
        taints: dict[DeviceKind, dict[int, tuple[DeviceTaint, ...]]] = {}
        slots = 0
        if p is not None and p.complete():
            rules = [r for r in self._rules.values() if r.matches_pool(node)]
            for s in (p.slices or {}).values():
                for dev in ((s.get("spec") or {}).get("devices")) or []:
                    name = str(dev.get("name", ""))
                    try:
                        ref = parse_device_name(name)
                    except DRAContractError:
                        continue
                    tainted = _device_taints(dev, [r.taint for r in rules
                                                   if r.device in (None, name)])
                    if tainted:
                        taints.setdefault(ref.kind, {})[ref.index] = tainted
                    if ref.kind is DeviceKind.GPU:
                        offered.add(ref.index)
                    elif ref.kind is DeviceKind.SLOT:
                        cap = ((dev.get("capacity") or {}).get(CAP_SLOTS) or {}).get("value")
                        try:
                            slots = max(slots, int(str(cap)))
                        except ValueError:
                            pass
        if p is not None and p.complete():
            self._offered[node] = frozenset(offered)
        else:
            self._offered.pop(node, None)
        if taints:
            self._taints[node] = taints
        else:
            self._taints.pop(node, None)
        topo = self.node_topology(node)
        size = topo.size if isinstance(topo, Topology) else 0
        self.book.set_unhealthy(node, [i for i in range(size) if i not in offered])
        self.book.set_slots(node, slots)
        self._views.pop(node, None)

    # ------------------------------------------------------------------ claims
    def claim(self, key: str) -> tuple[Mapping[str, Any], ClaimAsk | ClaimError] | None:
        """The claim ``namespace/name`` as last seen (object, parsed or why unusable)."""
        return self._claims.get(key)

    def remember_resident(self, claim_uid: str, resident: Resident) -> None:
        """The co-location resident a slot claim holds (from the pod's annotation, or the
        decision that allocated it): used when its allocation is (re)booked."""
        self._residents[claim_uid] = resident

    def apply_claim(self, kind: str, obj: Mapping[str, Any]) -> ClaimAsk | ClaimError | None:
        """One ResourceClaim event: book, confirm or free its gputopo devices. Returns the
        parsed claim (None when deleted)."""
        meta = _meta(obj)
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        uid = str(meta.get("uid") or "")
        if not uid:
            return None
        with self._lock, self.book.lock:
            if kind == "DELETED":
                self._claims.pop(key, None)
                self._residents.pop(uid, None)
                self.book.remove(uid)
                return None
            try:
                parsed: ClaimAsk | ClaimError = parse_claim(obj)
            except ClaimError as exc:
                parsed = exc
            self._claims[key] = (obj, parsed)
            self._book_claim(uid, parsed)
            return parsed

    def _book_claim(self, uid: str, parsed: ClaimAsk | ClaimError) -> None:
        held = self.book.get(uid)
        if isinstance(parsed, ClaimError) or parsed.allocation is None or parsed.node is None:
            if isinstance(parsed, ClaimError):
                log.warning("%s", parsed)
            if held is not None and held.confirmed:
                self.book.remove(uid)  # deallocated (by the controller, or kube-scheduler)
            return  # an unconfirmed reservation stays: its write is in flight
        alloc = self.allocation_of(parsed)
        if held is not None and not held.confirmed and held.gpus != alloc.gpus:
            log.warning("claim %s is allocated GPUs %s on %s, not the reserved %s on %s",
                        parsed.key, alloc.gpus, alloc.node, held.gpus, held.node)
        self.book.add(alloc, None, check=False)

    def allocation_of(self, claim: ClaimAsk, *, confirmed: bool = True) -> Allocation:
        """The book record of an allocated gputopo claim."""
        assert claim.allocation is not None and claim.node is not None
        a = claim.allocation
        ref = claim_ref(claim)
        kind = a.kind
        if kind is DeviceKind.SLOT:
            resident = self._residents.get(claim.uid) or default_resident(claim, a.memory_mib)
            return Allocation(ref, claim.node, a.gpus, memory_mib=a.memory_mib,
                              confirmed=confirmed, colocation=resident)
        if kind is DeviceKind.SHARE:
            return Allocation(ref, claim.node, a.gpus, core_percent=a.core_percent,
                              memory_mib=a.memory_mib, fractional=True, confirmed=confirmed)
        return Allocation(ref, claim.node, a.gpus, confirmed=confirmed)

    def resync_claims(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Replace every claim with a fresh list (keeping unconfirmed reservations, and the
        co-location residents of the claims still listed or reserved)."""
        with self._lock, self.book.lock:
            keep = [a for a in self.book.all() if not a.confirmed]
            self.book.clear()
            self._claims.clear()
            live = {a.pod.uid for a in keep}
            for obj in items:
                live.add(str(_meta(obj).get("uid") or ""))
                self.apply_claim("ADDED", obj)
            for uid in [u for u in self._residents if u not in live]:
                del self._residents[uid]  # its claim went while the watch was down
            for a in keep:
                if self.book.get(a.pod.key) is None:
                    self.book.add(a, None, check=False)

    def claims(self) -> list[tuple[Mapping[str, Any], ClaimAsk | ClaimError]]:
        """Every claim seen (snapshot)."""
        with self._lock:
            return list(self._claims.values())

    # ------------------------------------------------------------------ reservations
    def hold(self, alloc: Allocation) -> None:
        """Record a claim's part of a decision before its writes (a reservation).

        Raises:
            ReservationConflict: a GPU or share of it is already taken.
        """
        topo = self.node_topology(alloc.node)
        with self.book.lock:
            held = self.book.get(alloc.pod.key)
            if held is not None:  # never replace a claim's record: its GPUs would look free
                raise ReservationConflict(
                    f"claim {alloc.pod} already holds GPUs {held.gpus} on {held.node}"
                    + ("" if held.confirmed else " (its write is in flight)"))
            self.book.add(replace(alloc, confirmed=False),
                          topo if isinstance(topo, Topology) else None)

    def unhold(self, claim_uid: str) -> None:
        """Drop a reservation whose write failed (a confirmed allocation stays)."""
        self.book.remove_reservation(claim_uid)

    # ------------------------------------------------------------------ ClusterState
    # The rest of the extender's ClusterState protocol, so the Decider reads this state as it
    # reads the extender's. Binding is kube-scheduler's here.
    def reserve(self, pod_key: str, node: str, decision: Decision, *, pod: PodRef) -> None:
        """Record ``decision`` under ``pod_key`` (see :meth:`hold` for claims).

        Raises:
            ReservationConflict: a GPU or share is already taken.
        """
        ref = pod if pod.key == pod_key else PodRef(pod.namespace, pod.name, pod_key)
        self.hold(Allocation.from_decision(ref, node, decision))

    def release(self, pod_key: str, *, reservation_only: bool = False) -> None:
        """Drop the record of ``pod_key`` (only an unconfirmed one with
        ``reservation_only``)."""
        if reservation_only:
            self.book.remove_reservation(pod_key)
        else:
            self.book.remove(pod_key)

    def bind(self, pod: PodRef, node: str, decision: Decision | None) -> None:
        """Not the allocator's job: kube-scheduler binds pods whose claims are allocated.

        Raises:
            BindError: always.
        """
        raise BindError("the DRA allocator does not bind pods; kube-scheduler does")

    def pod_uid(self, namespace: str, name: str) -> str | None:
        """Pods are not tracked here: None."""
        return None

    def fetch_pod(self, namespace: str, name: str) -> Mapping[str, object] | None:
        """Pods are not tracked here: None."""
        return None

    def allocations(self) -> list[Allocation]:
        """Every claim's record and reservation (snapshot)."""
        return self.book.all()

    def allocation(self, pod_key: str) -> Allocation | None:
        """The record of claim UID ``pod_key``, if any."""
        return self.book.get(pod_key)


@dataclass(frozen=True)
class TaintRule:
    """A DeviceTaintRule as kube-scheduler applies it (k8s.io/dynamic-resource-allocation
    v0.36.3 ``resourceslice/tracker/tracker.go`` ``applyPatches``, 669-719): its
    ``spec.taint`` is appended to the taints of every device of every slice whose driver, pool
    and device name match ``spec.deviceSelector`` (an unset field matches any; no selector
    matches every device).

    Attributes:
        driver, pool, device: the selector's fields (None: any).
        taint: ``spec.taint`` as a device taint (``key``, ``value``, ``effect``).
    """

    driver: str | None
    pool: str | None
    device: str | None
    taint: Mapping[str, Any]

    @classmethod
    def parse(cls, obj: Mapping[str, Any]) -> TaintRule:
        """From the API object (the API server has validated it)."""
        spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
        sel = (spec or {}).get("deviceSelector") or {}
        taint = (spec or {}).get("taint") or {}

        def field(name: str) -> str | None:
            v = sel.get(name) if isinstance(sel, Mapping) else None
            return None if v is None else str(v)

        return cls(field("driver"), field("pool"), field("device"),
                   dict(taint) if isinstance(taint, Mapping) else {})

    def matches_pool(self, pool: str) -> bool:
        """The rule may apply to devices of gputopo's pool ``pool`` (the node's name)."""
        return self.driver in (None, DRIVER) and self.pool in (None, pool)


def _device_taints(dev: Mapping[str, Any],
                   extra: Iterable[Mapping[str, Any]] = ()) -> tuple[DeviceTaint, ...]:
    """A device's taints that may prevent an allocation (NoSchedule, NoExecute; other effects,
    None included, never do), without gputopo's own allocator taint: the slice's, then
    ``extra`` (the matching DeviceTaintRules' taints, appended as upstream does)."""
    out: list[DeviceTaint] = []
    for t in [*(dev.get("taints") or []), *extra]:
        if not isinstance(t, Mapping) or t.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        taint = DeviceTaint(str(t.get("key") or ""), str(t.get("value") or ""),
                            str(t.get("effect")))
        if (taint.key, taint.value, taint.effect) == (
                ALLOCATOR_TAINT["key"], ALLOCATOR_TAINT["value"], ALLOCATOR_TAINT["effect"]):
            continue
        out.append(taint)
    return tuple(out)


def default_resident(claim: ClaimAsk, memory_mib: int) -> Resident:
    """The resident a slot claim holds when its pod's profile is unknown: the documented
    conservative default profile (:func:`topology.colocation.sources.resolve_profile` with
    nothing given), never co-located with a heavy job."""
    profile = resolve_profile({}, catalog=builtin_catalog(),
                              memory_request_mib=memory_mib or None)
    return Resident(f"{claim.namespace}/{claim.name}", profile, memory_mib)

