"""The DRA allocator: pods whose ResourceClaims ask gputopo's DeviceClasses get the node and
GPU set the extender's placement policy chooses, written as the claims' allocation before
kube-scheduler sees the pods (docs/dra.md has the why; this is the how).

For each pod not bound yet that references ResourceClaims (:meth:`Allocator.sync`):

1. wait until every claim exists (the resourceclaim controller creates template claims);
2. no gputopo claim: remove gputopo's scheduling gate, if any — kube-scheduler does the rest;
3. every gputopo claim allocated (a restart, a claim shared with another pod): remove the gate;
4. otherwise decide: the pod's gputopo requests over its unallocated claims are one placement
   request (:func:`~scheduler_extender.dra.claims.pod_demand` →
   :func:`~scheduler_extender.podspec.parse_pod`, with the pod's ``gputopo.io/pattern``,
   ``bandwidth-sensitive`` and ``policy`` annotations), decided by the extender's
   :class:`~scheduler_extender.decision.Decider` over every node whose pool offers GPUs —
   the same decision layer, policies and scores as ``/filter`` + ``/prioritize`` — on the
   live state (every allocated claim, every reservation). The best-scoring node wins (ties:
   fewest free GPUs, then name). Its set is split over the claims
   (:func:`~scheduler_extender.dra.claims.split`) and *reserved* in the book, which refuses a
   GPU already taken;
5. write, on a writer thread: each claim's ``status.allocation`` + ``reservedFor`` (with the
   ``resourceVersion`` decided on), then the pod (gate removed, the decision's
   ``gputopo.io/*`` annotations). kube-scheduler then binds the pod to the allocation's node
   without writing the claims again. A failed write releases what it had reserved and the pod
   is tried again.

Device taints (in the slices, or from DeviceTaintRules): tolerations are per request, as in
kube-scheduler (:func:`~scheduler_extender.dra.claims.taint_prevents`); gputopo's own
:data:`topology.dra.ALLOCATOR_TAINT`, there for kube-scheduler's allocator, is ignored. A GPU
whose device (of the kind the pod asks: ``gpu-<i>``, ``-share`` or ``-slot``) carries a
NoSchedule or NoExecute taint that *no* request of the pod tolerates is not free for the pod:
the decision sees it as unhealthy (:attr:`~scheduler_extender.decision.Candidate.unusable`),
so the policy stays pure and never picks it. When the pod's requests tolerate different
taints, the policy's set (one free set per decision) is then handed to the requests so that
each gets only GPUs it tolerates (:func:`assign_tolerated`: the pattern's order where it
allows, else the fewest moves, the decision's EffBW recomputed for the new order); when the set
allows no such assignment, the pod is decided again on the GPUs *every* request tolerates.

The node must suit the rest of the pod too. The allocator checks ``spec.nodeSelector`` and
NoSchedule/NoExecute taints against tolerations; anything else that keeps the pod off the node
(CPU, affinity, other drivers' claims) makes kube-scheduler's PostFilter deallocate the claim
(``DynamicResources.PostFilter``); the allocator sees that, remembers the node, and decides
again without it.

Decisions run on one thread, in arrival order (a scheduling queue); writes run on
``writers`` threads. What cannot be placed now waits and is retried when GPUs are freed,
offered or a claim changes; its reason goes to the pod as an Event.

**Bounded postponement** (issue 24, as the extender's filter: :mod:`scheduler_extender.pending`).
A bandwidth-sensitive pod of several whole GPUs asks the policy with
``Request.wait_for_better``, so a busy node whose every free set is below the default policy's
threshold of the ideal EffBW answers :class:`~topology.policies.base.Postponed`. When no node
places the pod and some postponed it, it waits ("waiting for a better GPU set") and is retried
as any waiting pod, and once more when its bound ends: ``postpone_max_s`` after its first
postponement it asks without the flag and takes what the rule gives. A pod with an allocated
claim already (its node is decided) or a co-location slot never waits so. The start of the wait
is written into the pod as the extender writes it (the condition
:data:`~scheduler_extender.pending.CONDITION_POSTPONED`, marked ``PostponementEnded`` at the
bound, and turned ``False``, reason ``Placed``, once its claims are allocated and its gate
removed), and an allocator that meets a pod carrying one — a new leader, a restart — continues
that clock rather than grant a second full wait. A pod that leaves the pending-pod watch with
the condition still ``True`` (its ``Placed`` write lost, a leader stopped before it, a gate
removed by hand) is read again :attr:`Allocator.placed_check_s` later and, bound, marked
``Placed`` (:meth:`Allocator.check_placed`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from scheduler_extender.decision import Ask, BadRequest, Candidate, Decider, NodeDecision
from scheduler_extender.dra.claims import (
    DELETE_PROTECTION,
    ClaimAsk,
    ClaimError,
    DeviceTaint,
    Grant,
    PodClaimRef,
    RequestAsk,
    allocation_status,
    pod_claim_refs,
    pod_demand,
    pod_gated,
    split,
    taint_prevents,
)
from scheduler_extender.dra.state import DraState, claim_ref
from scheduler_extender.kubernetes_state import (
    PLACED_CHECK_S,
    ApiError,
    mark_placed_if_bound,
    record_condition,
)
from scheduler_extender.pending import (
    may_postpone,
    monotonic_since,
    placed_condition,
    postponed_at,
    postponed_condition,
    wall_at,
)
from scheduler_extender.podspec import (
    PodRequest,
    PodSpecError,
    bound_node_of,
    choose_policy,
    parse_pod,
)
from scheduler_extender.profiles import ProfileLayers
from scheduler_extender.state import Allocation, ReservationConflict
from topology.contract import assignment_annotations
from topology.dra import DeviceKind
from topology.model import Topology
from topology.policies.base import Decision, Resident
from topology.policies.common import effective_bandwidth, mapped_edges
from topology.policies.default import POSTPONE_MAX_S

log = logging.getLogger("gputopo.dra.allocator")


class AllocatorAPI(Protocol):
    """The writes the allocator makes (:class:`scheduler_extender.dra.kube.DraKubeAPI`)."""

    def patch_claim_status(self, namespace: str, name: str, resource_version: str,
                           status: Mapping[str, Any]) -> dict[str, Any]: ...

    def add_claim_finalizer(self, namespace: str, name: str, resource_version: str,
                            finalizers: list[str]) -> dict[str, Any]: ...

    def release_pod(self, pod: Mapping[str, Any], annotations: Mapping[str, str]) -> None: ...

    def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def pod_event(self, pod: Mapping[str, Any], reason: str, message: str,
                  kind: str = "Warning") -> None: ...

    def patch_pod_conditions(self, namespace: str, name: str, uid: str,
                             conditions: list[dict[str, str]]) -> None: ...


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def pod_key(pod: Mapping[str, Any]) -> str:
    """``namespace/name`` of a pod."""
    meta = _meta(pod)
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def _tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        effect = t.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (
                taint.get("value") or ""):
            return True
    return False


def assign_tolerated(arrangement: Sequence[int], counts: Sequence[int],
                     forbidden: Sequence[Collection[int]]) -> list[int] | None:
    """Hand the GPUs of ``arrangement`` to requests so that each gets only GPUs it may have.

    Request ``r`` takes ``counts[r]`` GPUs and may not have those in ``forbidden[r]`` (their
    taints it does not tolerate). The pattern's split
    (:func:`~scheduler_extender.dra.claims.split`: request after request, the next
    ``counts[r]`` GPUs) is kept where it is allowed; the rest is a bipartite matching
    (augmenting paths), so a GPU moves only when it must.

    Returns:
        The new arrangement — each request's GPUs in their arrangement order, request after
        request (what :func:`split` hands out) — or None when no assignment exists.
    """
    n = len(arrangement)
    owner: list[int | None] = [None] * n
    home: list[int] = [r for r, c in enumerate(counts) for _ in range(c)]
    load = [0] * len(counts)
    for p, r in enumerate(home[:n]):
        if arrangement[p] not in forbidden[r]:
            owner[p], load[r] = r, load[r] + 1

    def augment(p: int, seen: set[int]) -> bool:
        for r in range(len(counts)):
            if r in seen or arrangement[p] in forbidden[r]:
                continue
            seen.add(r)
            if load[r] < counts[r]:
                owner[p], load[r] = r, load[r] + 1
                return True
            for q in range(n):
                if owner[q] == r and augment(q, seen):
                    owner[p] = r  # q moved to another request; r's count is unchanged
                    return True
        return False

    for p in range(n):
        if owner[p] is None and not augment(p, set()):
            return None
    return [arrangement[p] for r in range(len(counts)) for p in range(n) if owner[p] == r]


def node_admits(pod: Mapping[str, Any], node: Mapping[str, Any] | None) -> str | None:
    """Why ``node`` cannot take ``pod`` by its ``nodeSelector`` or its NoSchedule /
    NoExecute taints (None: no objection; kube-scheduler checks everything else)."""
    if node is None:
        return None
    spec = pod.get("spec") or {}
    labels = _meta(node).get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return f"node selector {k}={v}"
    tolerations = [t for t in spec.get("tolerations") or [] if isinstance(t, Mapping)]
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(
                tolerations, taint):
            return f"taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}"
    return None


@dataclass
class Metrics:
    """Counters the service exports (plain integers; :mod:`scheduler_extender.dra.service`
    turns them into Prometheus metrics)."""

    allocated_claims: int = 0
    released_pods: int = 0
    decisions: int = 0
    #: every failed write of a decision — a claim's finalizer or status, or the pod's gate
    #: removal, by an API refusal or an unexpected error; the pod is tried again (not after
    #: a 404: it waits for the next event)
    write_errors: int = 0
    requeued_after_deallocation: int = 0


@dataclass
class _PodRecord:
    pod: Mapping[str, Any]
    refs: list[PodClaimRef]
    reason: str = ""          # why it waits (last reported)
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def uid(self) -> str:
        return str(_meta(self.pod).get("uid") or "")


class Allocator:
    """Allocates gputopo claims of pending pods (thread-safe; one decision thread).

    Args:
        state: the cluster state (fed by the service's watches).
        api: the writes.
        policy: the default placement policy (pods pick another with ``gputopo.io/policy``).
        colocation_policy: the default for co-location slots when ``policy`` does not
            co-locate.
        profiles: the co-location profile layers.
        writers: threads making API writes (claims and pods of several pods at once).
        clock: RFC 3339 "now" (tests pin it).
        postpone_max_s: how long a bandwidth-sensitive multi-GPU pod may be postponed for a
            better set, s from its first postponement (module docstring); 0 = never.
        monotonic: the clock of that bound, s (tests pin it).
        wall: the wall clock (Unix s) of the postponement condition (tests pin it).
        observe_decision: called with each placement decision's duration, s (the service's
            histogram).
    """

    def __init__(
        self, state: DraState, api: AllocatorAPI, *, policy: str = "gputopo",
        colocation_policy: str = "gputopo", profiles: ProfileLayers | None = None,
        writers: int = 16, clock: Callable[[], str] | None = None,
        postpone_max_s: float = POSTPONE_MAX_S,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        observe_decision: Callable[[float], None] | None = None,
    ) -> None:
        self.state = state
        self.api = api
        self.policy = policy
        self.colocation_policy = colocation_policy
        self.profiles = profiles or ProfileLayers()
        self.decider = Decider(state, memory_unit_mib=1)
        self.metrics = Metrics()
        self._observe_decision = observe_decision
        self._clock = clock or (lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._queue: OrderedDict[str, None] = OrderedDict()
        self._pods: dict[str, _PodRecord] = {}
        self._by_claim: dict[str, set[str]] = {}   # claim key -> pod keys referencing it
        self._nodes: dict[str, Mapping[str, Any]] = {}
        self._classes: dict[str, Mapping[str, Any]] = {}
        self._tried: dict[str, set[str]] = {}      # pod uid -> nodes kube-scheduler refused
        # pod uids whose writes run (kept apart from the records, which every pod event
        # replaces): a pod is never decided twice at once
        self._busy: set[str] = set()
        self._released: set[str] = set()           # pod uids whose gate this allocator removed
        self.postpone_max_s = postpone_max_s
        self._monotonic = monotonic
        self._wall = wall
        self._postponed: dict[str, float] = {}     # pod uid -> its first postponement
        # the postponement condition's writes (record_condition), one at a time in the order
        # they were decided: the decision loop queues the bound's "ended" before it decides
        # the allocation whose writer queues "placed", so "ended" cannot land after "placed"
        self._conditions = ThreadPoolExecutor(max_workers=1,
                                              thread_name_prefix="gputopo-dra-condition")
        self._recheck: dict[str, float] = {}       # pod key -> when its postponement ends
        #: how long after a pod left the pending watch with its postponement condition
        #: ``True`` it is read again (:meth:`check_placed`): the grace of this allocator's
        #: own ``Placed`` write, s
        self.placed_check_s = PLACED_CHECK_S
        self._placed_checks: dict[str, tuple[float, str]] = {}  # uid -> (when, pod key)
        self._stop = threading.Event()
        self._writers = ThreadPoolExecutor(max_workers=writers,
                                           thread_name_prefix="gputopo-dra-write")
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the decision thread."""
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="gputopo-dra-decide")
        self._thread.start()

    def stop(self) -> None:
        """Stop deciding; writes in flight finish."""
        self._stop.set()
        with self._lock:
            self._wake.notify_all()
        if self._thread is not None:  # its last pass may still queue writes
            self._thread.join(timeout=30.0)
        self._writers.shutdown(wait=True)
        self._conditions.shutdown(wait=True)  # after the writers: they queue "placed" here
        self.decider.close()

    # ------------------------------------------------------------------ events
    def on_pod(self, kind: str, pod: Mapping[str, Any]) -> None:
        """A pending-pod event (DELETED also when the pod got bound or finished)."""
        key = pod_key(pod)
        with self._lock:
            old = self._pods.get(key)
            if old is not None:
                for r in old.refs:
                    if r.claim:
                        self._by_claim.get(f"{key.split('/')[0]}/{r.claim}", set()).discard(key)
            if kind == "DELETED" or bound_node_of(pod):
                self._pods.pop(key, None)
                uid = str(_meta(pod).get("uid") or "")
                if postponed_at(pod) is not None and uid:
                    # bound (the pending watch's DELETED carries the pod as it was before)
                    # or deleted, its condition still saying it waits: read it again
                    self._placed_checks.setdefault(
                        uid, (self._monotonic() + self.placed_check_s, key))
                self._tried.pop(uid, None)
                self._released.discard(uid)
                self._postponed.pop(uid, None)
                self._recheck.pop(key, None)
                self._queue.pop(key, None)
                return
            refs = pod_claim_refs(pod)
            if not refs and not pod_gated(pod):
                self._pods.pop(key, None)
                return
            rec = _PodRecord(pod, refs)
            at = postponed_at(pod)
            if at is not None and rec.uid not in self._postponed and self.postpone_max_s > 0:
                # postponed by another allocator (a former leader): continue its clock
                since = monotonic_since(at, self._monotonic, self._wall)
                self._postponed[rec.uid] = since
                self._recheck[key] = since + self.postpone_max_s
            if old is not None and old.uid == rec.uid:
                rec.reason = old.reason
                rec.annotations = old.annotations
            self._pods[key] = rec
            ns = key.split("/")[0]
            for r in refs:
                if r.claim:
                    self._by_claim.setdefault(f"{ns}/{r.claim}", set()).add(key)
            self._enqueue(key)

    def on_claim(self, kind: str, claim: Mapping[str, Any]) -> None:
        """A ResourceClaim event: book it, and wake the pods it concerns."""
        meta = _meta(claim)
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        before = self.state.claim(key)
        parsed = self.state.apply_claim(kind, claim)
        was = before[1] if before is not None else None
        freed = isinstance(was, ClaimAsk) and was.allocation is not None and (
            parsed is None or isinstance(parsed, ClaimError) or parsed.allocation is None)
        with self._lock:
            if freed and isinstance(was, ClaimAsk) and parsed is not None and was.node:
                # deallocated while a pod it was reserved for still waits: kube-scheduler's
                # PostFilter found the node unsuitable for the pod
                for uid in was.reserved_for:
                    for pk, rec in self._pods.items():
                        if _meta(rec.pod).get("uid") == uid:
                            self._tried.setdefault(uid, set()).add(was.node)
                            self.metrics.requeued_after_deallocation += 1
                            log.info("claim %s was deallocated from %s while pod %s waits; "
                                     "deciding again without that node", key, was.node, pk)
            for pk in self._by_claim.get(key, ()):
                self._enqueue(pk)
            owner = meta.get("ownerReferences") or []
            for ref in owner:
                if ref.get("kind") == "Pod":
                    self._enqueue(f"{meta.get('namespace') or 'default'}/{ref.get('name')}")
            if freed:
                self._wake_waiting()

    def on_node(self, kind: str, node: Mapping[str, Any]) -> None:
        """A Node event (its labels and taints for :func:`node_admits`, its topology)."""
        name = str(_meta(node).get("name") or "")
        self.state.apply_node(kind, node)
        with self._lock:
            if kind == "DELETED":
                self._nodes.pop(name, None)
            else:
                self._nodes[name] = node
            self._wake_waiting()

    def on_slice(self, kind: str, obj: Mapping[str, Any]) -> None:
        """A ResourceSlice event (GPUs offered or withdrawn)."""
        self.state.apply_slice(kind, obj)
        with self._lock:
            self._wake_waiting()

    def on_taint_rule(self, kind: str, obj: Mapping[str, Any]) -> None:
        """A DeviceTaintRule event (its taint on the devices it selects)."""
        self.state.apply_taint_rule(kind, obj)
        with self._lock:
            self._wake_waiting()

    def resync_taint_rules(self, items: list[dict[str, Any]]) -> None:
        """Every DeviceTaintRule, freshly listed (none when the API does not serve them)."""
        self.state.resync_taint_rules(items)
        with self._lock:
            self._wake_waiting()

    def on_class(self, kind: str, obj: Mapping[str, Any]) -> None:
        """A DeviceClass event (their config goes into allocations)."""
        name = str(_meta(obj).get("name") or "")
        with self._lock:
            if kind == "DELETED":
                self._classes.pop(name, None)
            else:
                self._classes[name] = obj
            self._wake_waiting()

    def _enqueue(self, key: str) -> None:
        if key in self._pods:
            self._queue[key] = None
            self._wake.notify()

    def _wake_waiting(self) -> None:
        for key, rec in self._pods.items():
            if rec.reason and rec.uid not in self._busy:
                self._queue[key] = None
        self._wake.notify()

    def recheck_postponed(self) -> list[str]:
        """Queue again the postponed pods whose bound has ended (the loop calls it before
        each decision and every second while idle); returns their keys."""
        now = self._monotonic()
        with self._lock:
            due = [k for k, t in self._recheck.items() if t <= now]
            for k in due:
                del self._recheck[k]
                self._enqueue(k)
                rec = self._pods.get(k)
                since = self._postponed.get(rec.uid) if rec is not None else None
                if rec is not None and since is not None:
                    self._write_postponed(rec, since, ended=True)
            return due

    def check_placed(self) -> list[str]:
        """Queue, on the condition writer, the re-read of every pod whose check is due: a pod
        that left the pending watch (bound, or deleted) with its postponement condition still
        ``True`` :attr:`placed_check_s` ago is read and, if it is bound and the condition
        still says so, marked ``Placed`` (:func:`mark_placed_if_bound`) — a pod whose gate
        was removed without this allocator's ``Placed`` write: a release whose outcome it
        could not learn, a leader that stopped in between, a gate removed by hand. The loop
        calls it with :meth:`recheck_postponed`; returns the keys read."""
        now = self._monotonic()
        with self._lock:
            due = [(uid, k) for uid, (t, k) in self._placed_checks.items() if t <= now]
            for uid, key in due:
                del self._placed_checks[uid]
                ns, name = key.split("/", 1)
                self._conditions.submit(mark_placed_if_bound, self.api, ns, name, uid,
                                        now=self._wall)
            return [k for _, k in due]

    def pending(self) -> dict[str, str]:
        """Pods waiting for GPUs → why (snapshot)."""
        with self._lock:
            return {k: r.reason for k, r in self._pods.items() if r.reason}

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                self.recheck_postponed()
                self.check_placed()
                while not self._queue and not self._stop.is_set():
                    self._wake.wait(1.0)
                    self.recheck_postponed()
                    self.check_placed()
                if self._stop.is_set():
                    return
                key, _ = self._queue.popitem(last=False)
            try:
                self.sync(key)
            except Exception:  # noqa: BLE001 - one pod must not stop the allocator
                log.exception("allocating pod %s failed", key)

    def sync(self, key: str) -> None:
        """Decide (and start writing) for pod ``key`` now (module docstring)."""
        with self._lock:
            rec = self._pods.get(key)
            if rec is None or rec.uid in self._busy:
                return
            pod, refs = rec.pod, rec.refs
        ns = key.split("/")[0]
        claims: list[ClaimAsk] = []
        for ref in refs:
            if not ref.needed:
                continue
            if ref.claim is None:
                return  # the resourceclaim controller has not created it yet
            seen = self.state.claim(f"{ns}/{ref.claim}")
            if seen is None:
                return  # not in the watch yet
            parsed = seen[1]
            if isinstance(parsed, ClaimError):
                self._wait(key, str(parsed))
                return
            if ref.from_template and parsed.owner_pod != _meta(pod).get("uid"):
                return  # a claim of an earlier pod of that name, about to be replaced
            if parsed.deleting:
                return
            claims.append(parsed)
        ours = [c for c in claims if c.ours]
        todo = [c for c in ours if not c.allocated]
        if not todo:
            self._release(key, rec)
            return
        self._decide(key, rec, claims, todo)

    # ------------------------------------------------------------------ deciding
    def _decide(self, key: str, rec: _PodRecord, claims: list[ClaimAsk],
                todo: list[ClaimAsk]) -> None:
        pod = rec.pod
        meta = _meta(pod)
        uid = str(meta.get("uid") or "")
        try:
            demand = pod_demand(todo)
            preq = parse_pod(pod, memory_unit_mib=1, colocation=self.profiles.snapshot(),
                             demand=demand)
        except (ClaimError, PodSpecError) as exc:
            self._wait(key, f"cannot allocate: {exc}")
            return
        if preq is None:
            self._release(key, rec)
            return
        nodes = {c.node for c in claims if c.allocated and c.node}
        if len(nodes) > 1:
            self._wait(key, f"the pod's allocated claims are on different nodes: "
                       f"{', '.join(sorted(str(n) for n in nodes))}")
            return
        required = next(iter(nodes), None) or preq.required_node
        policy = choose_policy(preq, self.policy, self.colocation_policy)
        tried = self._tried.get(uid, set())
        refused: dict[str, str] = {}
        names: list[str] = []
        with self._lock:
            node_objs = dict(self._nodes)
        requests = [r for c in todo for r in c.requests]
        tainted: dict[str, str] = {}
        blocked: dict[str, list[dict[int, DeviceTaint]]] = {}  # node -> per request

        def candidate(name: str, strict: bool) -> Candidate:
            per = blocked.get(name)
            if per is None:
                per = blocked[name] = [self._blocked(name, r) for r in requests]
            union: dict[int, DeviceTaint] = {}
            for b in per:
                for i, t in b.items():
                    union.setdefault(i, t)
            if not union:
                return Candidate(name)
            tainted[name] = "device taints not tolerated: " + ", ".join(
                f"GPU {i} {t}" for i, t in sorted(union.items()))
            unusable = set(union) if strict else set(per[0]).intersection(*per[1:])
            return Candidate(name, unusable=frozenset(unusable))

        for name in self.state.node_names():
            if required is not None and name != required:
                continue
            why = node_admits(pod, node_objs.get(name))
            if why is None and name in tried and required is None:
                why = "kube-scheduler refused the pod there"
            if why is not None:
                refused[name] = why
                continue
            names.append(name)
        if not names and tried and required is None:
            self._tried.pop(uid, None)  # every node refused once: try them all again
            names = [n for n in self.state.node_names() if n not in refused
                     or refused[n] == "kube-scheduler refused the pod there"]
        request = preq.request
        waits = (self.postpone_max_s > 0 and required is None and preq.may_wait
                 and may_postpone(request, policy))
        since = self._postponed.get(uid)
        if waits and (since is None or self._monotonic() - since < self.postpone_max_s):
            request = replace(request, wait_for_better=True)
        ask = Ask(request, policy, uid, required)
        # per request, as kube-scheduler: first on the GPUs some request tolerates; a set that
        # cannot be handed out so that each request gets GPUs it tolerates is decided again
        # on the GPUs every request tolerates (always assignable)
        for strict in (False, True):
            t0 = time.perf_counter()
            try:
                rows = self.decider.decide(ask, [candidate(n, strict) for n in names],
                                           verb="filter", scored=True)
            except BadRequest as exc:
                self._wait(key, f"cannot allocate: {exc}")
                return
            self.metrics.decisions += 1
            if self._observe_decision is not None:
                self._observe_decision(time.perf_counter() - t0)
            best = self._best(rows)
            chosen = best.outcome.decision if best is not None else None
            if best is None or chosen is None:
                break
            per = blocked.get(best.name) or []
            if strict or all(b.keys() == per[0].keys() for b in per[1:]):
                break
            fixed = self._tolerated(chosen, best.name, requests, per, preq)
            if fixed is not None:
                if fixed is not chosen:
                    best = best._replace(outcome=replace(best.outcome, decision=fixed))
                break
            log.info("pod %s: the policy's set %s on %s cannot be handed out so that each "
                     "request gets GPUs it tolerates; deciding on the GPUs all tolerate", key,
                     chosen.mapping, best.name)
        if best is None:
            reasons = {r.name: r.outcome.reason + (f" ({tainted[r.name]})" if r.name in tainted
                                                   else "") for r in rows} | refused
            if any(r.outcome.postponed for r in rows):
                with self._lock:
                    first = self._postponed.get(uid)
                    if first is None:
                        first = self._postponed[uid] = self._monotonic()
                        self._write_postponed(rec, first)
                    self._recheck[key] = first + self.postpone_max_s
                self._wait(key, f"waiting for a better GPU set (at most {self.postpone_max_s:.0f}"
                           " s from its first postponement): " + "; ".join(
                               f"{n}: {why}" for n, why in sorted(reasons.items())[:8]))
                return
            self._wait(key, "no node has the GPUs: " + "; ".join(
                f"{n}: {why}" for n, why in sorted(reasons.items())[:8]) if reasons else
                "no node offers gputopo GPUs")
            return
        decision = best.outcome.decision
        assert decision is not None
        grants = split(decision.mapping, todo, core_percent=decision.core_percent,
                       memory_mib=decision.memory_mib if decision.colocation is None
                       else decision.colocation.memory_mib)
        reserved: list[str] = []
        try:
            for g in grants:
                self.state.hold(self._record(g, best.name, decision))
                reserved.append(g.claim.uid)
        except ReservationConflict as exc:
            for r in reserved:
                self.state.unhold(r)
            log.warning("pod %s: %s; deciding again", key, exc)
            with self._lock:
                self._enqueue(key)
            return
        with self._lock:
            self._busy.add(uid)
            self._recheck.pop(key, None)
            rec.reason = ""
            rec.annotations = assignment_annotations(decision, best.name)
            current = self._pods.get(key)
            if current is not None and current is not rec and current.uid == uid:
                current.reason, current.annotations = "", rec.annotations
        log.info("pod %s -> %s gpus=%s effbw=%.1fGB/s policy=%s claims=%s", key, best.name,
                 ",".join(map(str, decision.mapping)), decision.effective_bandwidth_gbps,
                 decision.policy, ",".join(g.claim.name for g in grants))
        self._writers.submit(self._write, key, rec, best.name, grants)

    def _blocked(self, node: str, request: RequestAsk) -> dict[int, DeviceTaint]:
        """GPU index → the first taint of its device (of the request's kind) on ``node``
        that ``request`` does not tolerate."""
        out: dict[int, DeviceTaint] = {}
        for i, taints in self.state.device_taints(node, request.kind).items():
            hit = taint_prevents(taints, request.tolerations)
            if hit is not None:
                out[i] = hit
        return out

    def _tolerated(self, decision: Decision, node: str, requests: list[RequestAsk],
                   blocked: list[dict[int, DeviceTaint]], preq: PodRequest) -> Decision | None:
        """``decision`` with its GPUs handed to ``requests`` so that each gets only GPUs it
        tolerates (:func:`assign_tolerated`; EffBW recomputed when the order changed), or None
        when its set allows no such assignment."""
        order = assign_tolerated(decision.mapping, [r.count for r in requests],
                                 [b.keys() for b in blocked])
        if order is None:
            return None
        if tuple(order) == tuple(decision.mapping):
            return decision
        topo = self.state.node_topology(node)
        eff = decision.effective_bandwidth_gbps
        if isinstance(topo, Topology) and len(order) > 1:
            eff = effective_bandwidth(topo, mapped_edges(preq.request.effective_pattern(),
                                                         order), decision.bandwidth_model)
        return replace(decision, mapping=tuple(order), effective_bandwidth_gbps=eff,
                       reason=decision.reason + "; GPUs reordered so that each request gets "
                       "GPUs whose taints it tolerates")

    @staticmethod
    def _best(rows: list[NodeDecision]) -> NodeDecision | None:
        fits = [r for r in rows if r.outcome.decision is not None]
        if not fits:
            return None

        def rank(r: NodeDecision) -> tuple[int, int, str]:
            topo = r.view.topology
            free = len(r.view.state.free_gpus(topo)) if isinstance(topo, Topology) else 0
            return (-(r.score or 0), free, r.name)

        return min(fits, key=rank)

    def _record(self, grant: Grant, node: str, decision: Decision) -> Allocation:
        ref = claim_ref(grant.claim)
        gpus = grant.indices
        if grant.kind is DeviceKind.SLOT:
            c = decision.colocation
            assert c is not None
            resident = Resident(c.job or ref.name, c.profile, c.memory_mib)
            self.state.remember_resident(grant.claim.uid, resident)
            return Allocation(ref, node, gpus, memory_mib=c.memory_mib, colocation=resident,
                              confirmed=False)
        if grant.kind is DeviceKind.SHARE:
            return Allocation(ref, node, gpus, core_percent=grant.core_percent,
                              memory_mib=grant.memory_mib, fractional=True, confirmed=False)
        return Allocation(ref, node, gpus, confirmed=False)

    # ------------------------------------------------------------------ writing
    def _write(self, key: str, rec: _PodRecord, node: str, grants: list[Grant]) -> None:
        pod = rec.pod
        meta = _meta(pod)
        ns, name, uid = key.split("/")[0], str(meta.get("name")), str(meta.get("uid") or "")
        done: set[str] = set()
        try:
            for g in grants:
                c = g.claim
                seen = self.state.claim(c.key)
                obj = seen[0] if seen is not None else {}
                rv = c.resource_version
                if not c.owner_pod and not c.protected:
                    # no pod owns it: the resourceclaim controller must deallocate it when
                    # its last consumer goes, which it does for claims with this finalizer
                    fins = list(_meta(obj).get("finalizers") or []) + [DELETE_PROTECTION]
                    updated = self.api.add_claim_finalizer(ns, c.name, rv, fins)
                    rv = str(_meta(updated).get("resourceVersion") or rv)
                share_ids = {a.name: str(uuid.uuid4()) for a in c.requests} \
                    if g.kind is not DeviceKind.GPU else None
                status = allocation_status(obj, g, node, classes=self._classes_snapshot(),
                                           pod_name=name, pod_uid=uid, timestamp=self._clock(),
                                           share_ids=share_ids)
                self.api.patch_claim_status(ns, c.name, rv, status)
                done.add(c.uid)
                self.metrics.allocated_claims += 1
            with self._lock:  # before the release: the pod may be bound, and the watch
                since = self._postponed.get(uid)  # forget its clock, before the call returns
            self.api.release_pod(self._current(key, pod), rec.annotations)
            self.metrics.released_pods += 1
            with self._lock:
                self._released.add(uid)
            if since is not None:  # it waited for a better set: it waits no more
                placed = placed_condition(wall_at(since, self._monotonic, self._wall), node,
                                          self._wall())
                self._conditions.submit(record_condition, self.api, ns, name, uid, placed)
        except (ApiError, ClaimError) as exc:
            self.metrics.write_errors += 1
            for g in grants:
                if g.claim.uid not in done:
                    self.state.unhold(g.claim.uid)
            code = exc.status if isinstance(exc, ApiError) else 0
            log.warning("pod %s: writing the allocation on %s failed (%s)%s", key, node, exc,
                        "" if done else "; nothing was written")
            self._settle(key, uid, retry=code != 404)
            return
        except Exception:  # noqa: BLE001
            log.exception("pod %s: writing the allocation failed", key)
            self.metrics.write_errors += 1
            for g in grants:
                if g.claim.uid not in done:
                    self.state.unhold(g.claim.uid)
            self._settle(key, uid, retry=True)
            return
        self._settle(key, uid)

    def _current(self, key: str, pod: Mapping[str, Any]) -> Mapping[str, Any]:
        """The latest version of ``pod`` the watch delivered (its gates, annotations)."""
        with self._lock:
            rec = self._pods.get(key)
            if rec is not None and _meta(rec.pod).get("uid") == _meta(pod).get("uid"):
                return rec.pod
        return pod

    def _settle(self, key: str, uid: str, *, retry: bool = False) -> None:
        """The writes of pod ``key`` (UID ``uid``) are over: clear its in-flight mark (on the
        record the pod watch may have replaced meanwhile) and, with ``retry``, try again."""
        with self._lock:
            self._busy.discard(uid)
            rec = self._pods.get(key)
            if rec is not None and rec.uid == uid and retry:
                self._enqueue(key)

    def _classes_snapshot(self) -> dict[str, Mapping[str, Any]]:
        with self._lock:
            return dict(self._classes)

    def _release(self, key: str, rec: _PodRecord) -> None:
        """Remove the gate of a pod that needs no (more) allocation."""
        pod = rec.pod
        with self._lock:
            rec.reason = ""
            if not pod_gated(pod) or rec.uid in self._busy or rec.uid in self._released:
                return
            self._busy.add(rec.uid)
        meta = _meta(pod)

        uid = str(meta.get("uid") or "")

        def run() -> None:
            try:
                self.api.release_pod(self._current(key, pod), rec.annotations)
                self.metrics.released_pods += 1
                with self._lock:
                    self._released.add(uid)
            except ApiError as exc:
                log.warning("pod %s: removing the scheduling gate failed: %s", key, exc)
                self.metrics.write_errors += 1
                self._settle(key, uid, retry=exc.status != 404)
                return
            except Exception:  # noqa: BLE001 - as _write: never leave the pod marked busy
                log.exception("pod %s: removing the scheduling gate failed", key)
                self.metrics.write_errors += 1
                self._settle(key, uid, retry=True)
                return
            self._settle(key, uid)

        self._writers.submit(run)

    def _write_postponed(self, rec: _PodRecord, since: float, *, ended: bool = False) -> None:
        """Queue the pod's postponement condition for the clock started at ``since``
        (:attr:`_monotonic`), waiting or ``ended``, on the condition writer."""
        meta = _meta(rec.pod)
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        cond = postponed_condition(wall_at(since, self._monotonic, self._wall),
                                   self.postpone_max_s, ended=ended)
        self._conditions.submit(record_condition, self.api, ns, name, rec.uid, cond)

    def _wait(self, key: str, reason: str) -> None:
        """Record why the pod waits; tell the pod (an Event) when the reason changes."""
        with self._lock:
            rec = self._pods.get(key)
            if rec is None:
                return
            changed = rec.reason != reason
            rec.reason = reason
            pod = rec.pod
        if not changed:
            return
        log.info("pod %s waits: %s", key, reason)

        def run() -> None:
            try:
                self.api.pod_event(pod, "GPUAllocationPending", reason)
            except ApiError as exc:
                log.debug("event for %s failed: %s", key, exc)

        self._writers.submit(run)


__all__ = ["Allocator", "AllocatorAPI", "Metrics", "node_admits", "pod_key"]
