"""The decision layer: where a pod would go on each candidate node, and how good that is.

One entry point, :meth:`Decider.decide`: an :class:`Ask` (the pod's placement request and the
policy that decides it) and the candidate nodes in, one :class:`NodeDecision` per node out
(an :class:`Outcome` — the decision or why not — and, for prioritize, the node's score). No
HTTP, no wire types: :mod:`scheduler_extender.verbs` turns wire arguments into an ``Ask`` and
the result into replies; :mod:`scheduler_extender.binding` asks :meth:`Decider.decide_exact`
for the one node it binds to.

How a call is answered (the hot path: filter and prioritize over hundreds of nodes):

* each node's topology annotation is parsed once (:class:`TopologyCache`, keyed by the text);
* nodes are grouped by ``(topology class, NodeState.key())`` — or, for a whole-GPU request to
  a ``free_set_only`` policy, by ``(class, free-GPU mask)`` — and each group is decided once:
  a decision is the same for every node of a group up to UUID labels;
* the cheap exact part (no topology, too few GPUs, too little memory) is a *precheck*;
* decisions come from the decider's own :class:`~topology.policies.evaluate.Evaluator`
  (cached per class, with the policies' per-class tables in its memo) and scores from
  :func:`topology.policies.scoring.node_score`, both kept in bounded caches keyed by
  ``(policy, group, request)`` — a score also by the set of node classes it was compared
  across (:func:`topology.policies.scoring.score_scale`: prioritize scores every candidate on
  one scale, the classes of the call's nodes that can host the pod);
* with a time budget, misses go to the :class:`~scheduler_extender.workers.WorkerPool` (or are
  decided in this thread when the :class:`_CostModel` says they fit); whatever is not done by
  the deadline is *provisional*: it passes filter on capacity and scores 0.
* prioritize of the pod filter just answered reuses filter's whole answer (every node's
  decision, and a lookahead policy's split of the candidates by waiting jobs) when it asks the
  same request on nodes filter decided and nothing a decision reads has changed since filter
  read it: no node's view was dropped (the state's log, ``view_changes``: a bind, a pod
  ending, a reservation, a node's topology or settings) and no Node object sent other
  settings; otherwise, or when filter left provisional rows, prioritize decides again. One
  scheduling cycle then decides each pod once, not twice.

A pod that asks for ``gputopo.io/vgpu-memory`` counts it in the extender's unit
(``memory_unit_mib``, MiB per device); a node whose device plugin publishes another unit
(``gputopo.io/vgpu-memory-unit-mib``) would hand out other memory for the same count, so such a
node is refused for that pod, unresolvable, with the two units named (checked per node before
grouping, and again at bind). Pods that ask no vGPU memory do not depend on the unit.

Deciding never changes the cluster state. Node state comes from the state backend
(:meth:`ClusterState.node_view`); a :class:`Candidate` may name pods whose allocations to
leave out (``without``), which evaluates the node as if they were gone without touching the
live state — what preemption asks (kube-scheduler's ``ProcessPreemption``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple, cast

from scheduler_extender.alignment import NUMAAlignment, Refusal
from scheduler_extender.cache import BoundedCache
from scheduler_extender.metrics import Metrics
from scheduler_extender.pending import PendingPods, with_lookahead
from scheduler_extender.podspec import PodRequest, choose_policy
from scheduler_extender.state import (
    ClusterState,
    NodeTopologyError,
    NodeView,
    TopologyCache,
    _Interner,
    intern_state,
)
from scheduler_extender.workers import (
    Dropped,
    Job,
    Status,
    WorkerPool,
    WorkerResult,
    default_workers,
)
from topology.contract import (
    ANN_TOPOLOGY,
    ANN_VGPU_MEMORY_UNIT,
    DEFAULT_VGPU_MEMORY_UNIT_MIB,
    RESOURCE_VGPU_MEMORY,
)
from topology.model import Topology
from topology.numa_alignment import KUBELET_DEFAULTS, KubeletConfigError, PodDemand
from topology.policies.base import (
    Decision,
    NodeState,
    NoFit,
    Postponed,
    Request,
    RequestError,
    Upcoming,
)
from topology.policies.evaluate import Evaluator
from topology.policies.registry import get_policy
from topology.policies.robust import WaitingHomes
from topology.policies.scoring import NodeScore, ScoreScale, node_score, score_scale
from topology.serialization import dumps
from topology.text import decimal_int

log = logging.getLogger("gputopo.extender")

_SPENT_SIZE = 10_000
#: Filter answers kept for prioritize (each taken by it): kube-scheduler calls prioritize right
#: after filter in its one scheduling cycle, and not at all when one node passed, so only the
#: last few pods' answers are ever asked for.
_ANSWERS_SIZE = 4
_GROUP_CACHE_SIZE = 65_536
#: Jobs of one call pushed at the call's priority (the rest keep their queue position).
_PRIORITY_JOBS = 64
#: Each filter/prioritize call waits at least this long for uncached decisions.
_MIN_SLICE_S = 0.001

#: Which verb asks: filter starts the pod's time budget (and may learn unknown shapes in this
#: thread), prioritize spends what filter left of it; preempt is never budgeted (a provisional
#: answer there would evict pods on a guess).
Verb = Literal["filter", "prioritize", "preempt"]


@dataclass(frozen=True)
class Ask:
    """What is decided: one pod's placement request under one policy.

    Attributes:
        request: the placement request (:mod:`scheduler_extender.podspec` builds it).
        policy: the registered policy that decides it (the pod's ``gputopo.io/policy`` or the
            extender's default).
        pod_uid: the pod's UID ("" when unknown): filter and prioritize of one pod share its
            time budget through it.
        required_node: the only node the pod may go to (the planner's
            ``gputopo.io/planned-node``), or None.
        demand: the pod's CPU and container facts the kubelet's Topology Manager reads
            (:func:`scheduler_extender.podspec.pod_demand`), for nodes that align NUMA.
    """

    request: Request
    policy: str
    pod_uid: str = ""
    required_node: str | None = None
    demand: PodDemand = PodDemand()


def ask_for(preq: PodRequest, uid: str, *, policy: str, colocation_policy: str,
            pending: PendingPods | None, lookahead_pods: int, may_wait: bool = True) -> Ask:
    """The :class:`Ask` for a parsed pod — what filter, prioritize, preempt and bind decide.

    Args:
        preq: the parsed pod (:func:`scheduler_extender.podspec.parse_pod`).
        uid: the pod's UID ("" when unknown).
        policy, colocation_policy: the extender's defaults for whole-GPU and shared pods
            (:func:`scheduler_extender.podspec.choose_policy`).
        pending: the pending GPU pods the lookahead reads, or None (no view).
        lookahead_pods: how many of them at most.
        may_wait: False when the caller must not postpone the pod (the preempt verb); the pod
            itself may also forbid it (``PodRequest.may_wait``: planned or nominated).

    Raises:
        UnknownPolicy: the chosen policy is not registered.
    """
    chosen = choose_policy(preq, policy, colocation_policy)
    request = with_lookahead(preq.request, chosen, pending, uid, lookahead_pods,
                             may_wait=may_wait and preq.may_wait)
    return Ask(request, chosen, uid, preq.required_node, demand=preq.demand)


class Candidate(NamedTuple):
    """A node to decide on (a named tuple, not a frozen dataclass: filter builds one per
    node per call, and a tuple costs about a third as much to create).

    Attributes:
        name: node name.
        node: the ``v1.Node`` kube-scheduler sent (its topology annotation is read from it),
            or None when only the name came (``nodeCacheCapable``: the state backend's view).
        without: pod keys whose allocations on this node are left out of its state (the node
            as it would be once they were evicted); empty = the live state.
        unusable: GPU indices this pod may not have on this node (counted as unhealthy in its
            state: the DRA allocator's device taints the pod's requests do not tolerate);
            empty = none.
    """

    name: str
    node: Mapping[str, Any] | None = None
    without: frozenset[str] = frozenset()
    unusable: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Outcome:
    """The result of deciding a pod on a group of equal nodes.

    Attributes:
        decision: where the pod would go (None when it does not fit or is not known yet).
        reason: why it does not fit.
        unresolvable: preemption cannot help (no/invalid topology, node too small).
        provisional: the decision was not ready within the time budget; the node has the
            capacity, so filter lets it pass and prioritize scores it 0 for now.
        postponed: the policy could place the pod here but holds it back for a better GPU
            set (:class:`~topology.policies.base.Postponed`; the bounded postponement's
            clock starts at the first one, :meth:`PendingPods.postponed`).
    """

    decision: Decision | None
    reason: str = ""
    unresolvable: bool = False
    provisional: bool = False
    postponed: bool = False

    @property
    def passes(self) -> bool:
        """The node passes filter."""
        return self.decision is not None or self.provisional


class NodeDecision(NamedTuple):
    """One candidate's answer (a named tuple: filter and prioritize build one per node per
    call).

    Attributes:
        name: node name.
        node: the Node object of the candidate (None when only the name came).
        view: the node's topology and state the decision read.
        outcome: the decision or why not.
        score: 0–10 (:func:`topology.policies.scoring.node_score`; 0 when the pod does not
            fit or the decision is provisional); None when not asked for (filter).
    """

    name: str
    node: Mapping[str, Any] | None
    view: NodeView
    outcome: Outcome
    score: int | None = None


class BadRequest(Exception):
    """The request is invalid for the policy (the policy's ``RequestError``): every node
    would refuse it, so the pod, not a node, is at fault; ``str(exc)`` says why."""


_PROVISIONAL = Outcome(None, provisional=True)
_NEEDS_POLICY = Outcome(None, "needs the policy")


def memory_unit_refusal(published: str | None, own_mib: int) -> Outcome | None:
    """The refusal of a node that publishes ``gputopo.io/vgpu-memory-unit-mib`` =
    ``published`` to an extender counting ``gputopo.io/vgpu-memory`` in ``own_mib``-MiB
    units (unresolvable: no eviction changes a unit); None when they agree or the node
    publishes none (a device plugin that advertises no vGPU memory)."""
    if published is None:
        return None
    text = published.strip()
    unit = decimal_int(text)
    if unit == own_mib:
        return None
    what = f"{text}-MiB units" if unit is not None else f"an invalid unit {published!r}"
    return Outcome(
        None,
        f"node counts {RESOURCE_VGPU_MEMORY} in {what} ({ANN_VGPU_MEMORY_UNIT}) but this "
        f"extender counts it in {own_mib}-MiB units: the pod's request would mean other "
        "memory there; give the device plugin and the extender the same "
        "--vgpu-memory-unit-mib",
        unresolvable=True,
    )


class _CostModel:
    """Running estimate of decision time per (policy, class, busy GPUs, request shape),
    seconds.

    The request thread decides a miss itself only when the estimate says it fits well within
    the time left; unknown shapes go to the workers first (their times teach the model) or,
    without workers, are learnt by filter while its time is ample. Every decision made here,
    by the workers or by bind updates it.
    """

    def __init__(self) -> None:
        self._est: dict[tuple[object, ...], float] = {}

    @staticmethod
    def key(policy: str, view: NodeView, request: Request) -> tuple[object, ...]:
        busy = len(view.state.usage) + len(view.state.unhealthy)  # proxy of the search size
        cls = view.group[0] if view.group else ""
        return (policy, cls, busy, request.count, request.fractional)

    def estimate(self, key: tuple[object, ...]) -> float | None:
        return self._est.get(key)

    def observe(self, key: tuple[object, ...], seconds: float) -> None:
        old = self._est.get(key)
        # keep the worse of the recent ones: this model guards the deadline
        self._est[key] = seconds if old is None else max(seconds, 0.7 * old + 0.3 * seconds)


@dataclass
class _Call:
    """One :meth:`Decider.decide` call's fixed inputs (``rid``: the request's id in the
    decider's caches; -1 for a lookahead ask's whole queue, whose parts have their own)."""

    ask: Ask
    rid: int
    deadline: float | None
    learn: bool
    misses: dict[object, NodeView] = field(default_factory=dict)


#: A state stamp: the state's log cursor of dropped node views, then the versions of what the
#: decider and the NUMA alignment last saw on Node objects (:meth:`Decider._stamp`).
_Stamp = tuple[tuple[int, int], int, int]


@dataclass
class _Answer:
    """A filter's whole answer, kept for the same pod's prioritize (:meth:`Decider._reused`).

    Its rows are kept as two lists, not as filter's ``NodeDecision`` tuples: an answer lives
    from filter to prioritize, long enough for the garbage collector to move what it holds to
    an older generation, and a thousand tuples per pod promoted there made CPython's default
    collector run its full collections three times as often (``bench_lookahead --interpreter
    python``, 1 000-node cube mesh); two lists are two objects.

    Attributes:
        stamp: the state before filter read it.
        ask: what filter decided (request with its waiting jobs, policy, pinned node, demand).
        candidates: filter's candidates; ``views``, ``outcomes`` and ``calls`` (the call each
            row was decided in) aligned with them.
    """

    stamp: _Stamp
    ask: Ask
    candidates: Sequence[Candidate]
    views: list[NodeView]
    outcomes: list[Outcome]
    calls: list[_Call]
    at: dict[str, int] | None = None

    def position(self) -> dict[str, int]:
        """Node name -> its index in ``candidates`` (built on first use)."""
        if self.at is None:
            self.at = {c.name: i for i, c in enumerate(self.candidates)}
        return self.at


class Decider:
    """Decisions and scores for :class:`Ask` s over a :class:`ClusterState` (thread-safe).

    Attributes:
        evaluator: runs the policies; owns the decision cache and the policies' memo.
        workers: the worker pool (None without a budget or with ``workers=0``).

    Args:
        state: the cluster state backend (node topologies and states; read only here).
        metrics: where to count provisional answers (optional).
        budget_ms: time one pod's filter + prioritize may spend waiting for decisions not
            cached yet; late ones are provisional and finish in the background for the next
            pods. None = no budget: every decision is made before answering (exact,
            deterministic; the default).
        workers: worker processes for budgeted decisions (None = :func:`default_workers`;
            0 = none: the request thread decides what its cost model says fits the budget,
            and the rest stays provisional until a later call has the time).
        memory_unit_mib: MiB per ``gputopo.io/vgpu-memory`` device as this extender counts
            pods' requests; nodes publishing another unit are refused to pods asking vGPU
            memory.
    """

    def __init__(
        self, state: ClusterState, metrics: Metrics | None = None,
        budget_ms: float | None = None, workers: int | None = None,
        memory_unit_mib: int = DEFAULT_VGPU_MEMORY_UNIT_MIB,
    ) -> None:
        self.state = state
        self.memory_unit_mib = memory_unit_mib
        self._seen_unit: dict[str, str] = {}
        self._seen_version = 0  # bumped when _seen_unit changes (see _stamp)
        self.metrics = metrics
        self.budget_s = budget_ms / 1000.0 if budget_ms else None
        if workers is None:
            workers = default_workers()
        self.workers = WorkerPool(workers) if self.budget_s is not None and workers else None
        if self.workers is not None:
            self.workers.start()
        self.evaluator = Evaluator()
        self.alignment = NUMAAlignment(state, memory_unit_mib)
        self.topologies = TopologyCache()
        self._requests = _Interner()  # request keys -> small ints (edge tuples hash slowly)
        self._spent = BoundedCache(_SPENT_SIZE)  # pod uid -> seconds its filter waited
        # (pod uid, "parts") -> {node: waiting jobs} where prioritize weighed other waiting
        # jobs than the common list (a lookahead policy's unique homes), for bind
        self._asked = BoundedCache(_SPENT_SIZE)
        # (pod uid,) -> filter's whole answer, for that pod's prioritize (_reused)
        self._answers = BoundedCache(_ANSWERS_SIZE)
        # per grouping (by free mask or not): the waiting jobs' homes index, the node names
        # it was built on, the node views it has seen, their topology classes and where the
        # state's log of changed views was read last
        self._homes: dict[bool, tuple[WaitingHomes, list[str], dict[str, object],
                                      dict[str, str | None], list[tuple[int, int] | None]]] = {}
        self._homes_lock = threading.Lock()  # _waiting: the index, one thread at a time
        self._costs = _CostModel()
        # (policy, group, request id) -> Outcome / NodeScore; (group, request id) -> Outcome
        self._outcomes = BoundedCache(_GROUP_CACHE_SIZE)
        self._prechecks = BoundedCache(_GROUP_CACHE_SIZE)
        self._scores = BoundedCache(_GROUP_CACHE_SIZE)
        self._seen_topology: dict[str, Topology] = {}
        self._class_json_cache: dict[str, str] = {}

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop the worker processes (if any)."""
        if self.workers is not None:
            self.workers.stop()

    def clear_caches(self) -> None:
        """Forget parsed topologies, cached outcomes and scores, here and in the workers
        (cold-cache benchmarks, tests)."""
        if self.workers is not None:
            self.workers.clear_caches()
        self.evaluator.clear()
        self.alignment.clear()
        self.topologies.clear()
        self._outcomes.clear()
        self._prechecks.clear()
        self._scores.clear()
        self._asked.clear()
        self._answers.clear()
        with self._homes_lock:
            self._homes.clear()

    # ------------------------------------------------------------------ the entry point
    def decide(
        self, ask: Ask, candidates: Sequence[Candidate], *, verb: Verb = "filter",
        scored: bool = False,
    ) -> list[NodeDecision]:
        """Decide ``ask`` on every candidate, once per group of equal nodes.

        Args:
            ask: the pod's request and policy.
            candidates: the nodes, in the caller's order.
            verb: ``filter`` starts the pod's time budget, ``prioritize`` uses what is left
                (no effect without a budget); ``preempt`` decides every node exactly, whatever
                the budget.
            scored: fill ``NodeDecision.score`` (prioritize).

        Returns:
            One :class:`NodeDecision` per candidate, in order.

        Raises:
            BadRequest: the request is invalid for the policy.
        """
        start = time.monotonic()
        deadline: float | None = None
        if self.budget_s is not None and verb != "preempt":
            if verb == "filter":
                deadline = start + self.budget_s
            else:
                spent = self._spent.get((ask.pod_uid,)) or 0.0
                deadline = start + max(self.budget_s - spent, _MIN_SLICE_S)
        learn = verb == "filter"
        # a lookahead policy decides each part of the candidates with its own request (its
        # waiting jobs): the whole queue's request, new for every pod, is never interned
        waits = (ask.required_node is None and bool(ask.request.upcoming)
                 and get_policy(ask.policy).lookahead)
        call = _Call(ask, -1 if waits else self._requests(ask.request.key()), deadline,
                     learn=learn)
        calls = [call] * len(candidates)
        # filter's whole answer serves the same pod's prioritize while nothing it read changed
        stamp = self._stamp() if ask.pod_uid and verb != "preempt" else None
        reused = (self._reused(ask, candidates)
                  if verb == "prioritize" and stamp is not None else None)
        if reused is not None:
            rows, calls = reused
        elif ask.required_node is not None:
            rows = self._pinned(call, candidates, ask.required_node)
        elif waits:
            rows, calls = self._waiting(ask, candidates, deadline, learn)
        else:
            rows = self._grouped(call, candidates)
        if verb == "filter" and stamp is not None and (
                self.budget_s is None or not any(r.outcome.provisional for r in rows)):
            # provisional rows are not kept: prioritize may still have the time to decide them
            self._answers.put((ask.pod_uid,), _Answer(
                stamp, ask, tuple(candidates), [r.view for r in rows],
                [r.outcome for r in rows], calls))
        if verb == "filter" and ask.pod_uid and self.budget_s is not None:
            self._spent.put((ask.pod_uid,), time.monotonic() - start)
        if not scored:
            return rows
        scale = self._scale(call, rows)
        scores: dict[object, int] = {}
        out = []
        for row, c in zip(rows, calls, strict=True):
            group = row.view.group
            if row.outcome.decision is None or group is None or scale is None:
                out.append(_with_score(row, 0))
                continue
            s = scores.get((group, c.rid))
            if s is None:
                s = scores[(group, c.rid)] = self._score(c, row.view, row.outcome, scale)
            out.append(_with_score(row, s))
        return out

    def _stamp(self) -> _Stamp | None:
        """Where the state is now, for :meth:`_unchanged` later (None: the backend keeps no
        log of dropped node views, so no answer can be reused)."""
        changes_of = getattr(self.state, "view_changes", None)
        if not callable(changes_of):
            return None
        _, cursor = changes_of(None)
        return cursor, self._seen_version, self.alignment.seen_version

    def _unchanged(self, stamp: _Stamp) -> bool:
        """Nothing a decision reads changed since ``stamp``: no node's view was dropped (its
        allocations, reservations, health, topology or settings, a node added or removed:
        :class:`~scheduler_extender.state.ViewCache`) and no Node object sent another
        memory unit or kubelet setting than seen before."""
        cursor, seen, aligned = stamp
        if seen != self._seen_version or aligned != self.alignment.seen_version:
            return False
        changes_of = getattr(self.state, "view_changes", None)
        changed = changes_of(cursor)[0] if callable(changes_of) else None
        return changed is not None and not changed

    def _reused(
        self, ask: Ask, candidates: Sequence[Candidate],
    ) -> tuple[list[NodeDecision], list[_Call]] | None:
        """The rows of the same pod's last filter for ``candidates`` (kube-scheduler's
        prioritize gets the nodes that passed it), or None when they cannot stand: no filter
        kept for the pod, another request (the queue moved: other waiting jobs), a candidate
        filter did not decide or sent differently, or the state changed since filter read
        it. The lookahead's homes, the split of the candidates and every decision are then
        made once per scheduling cycle, not twice."""
        hit: _Answer | None = self._answers.pop((ask.pod_uid,))
        if hit is None or hit.ask != ask or not self._unchanged(hit.stamp):
            return None
        at = hit.position()
        old, views, outcomes, was = hit.candidates, hit.views, hit.outcomes, hit.calls
        rows: list[NodeDecision] = []
        calls: list[_Call] = []
        for c in candidates:
            i = at.get(c.name)
            if i is None or (old[i] is not c and old[i] != c):
                return None
            rows.append(NodeDecision(c.name, c.node, views[i], outcomes[i]))
            calls.append(was[i])
        return rows, calls

    def _waiting(
        self, ask: Ask, candidates: Sequence[Candidate], deadline: float | None, learn: bool,
    ) -> tuple[list[NodeDecision], list[_Call]]:
        """:meth:`_grouped` for a lookahead policy: each group of equal nodes weighs only the
        waiting jobs whose one best home it is (:func:`topology.policies.robust.
        waiting_by_node`), so the candidates are decided in parts, one per distinct list of
        waiting jobs. Returns the rows in the candidates' order and the call of each."""
        by_free = get_policy(ask.policy).keys_by_free_mask(ask.request)
        # a waiting job's homes are sought on every node the state knows, not only on this
        # pod's candidates (kube-scheduler's own filters drop nodes the waiting job may use);
        # the groups and each waiting job's costs are kept and updated node by node
        # (:meth:`_sync_homes`): a bind re-prices the groups of the nodes it changed
        names_of = getattr(self.state, "node_names", None)
        names = names_of() if callable(names_of) else [c.name for c in candidates]
        # preempt decides in the thread pool while filter and prioritize run: the index is
        # brought up to date and read by one thread at a time
        with self._homes_lock:
            index = self._sync_homes(names, by_free)
            lists = index.waiting(ask.request.upcoming)
            # a candidate the state does not list weighs nothing (its own view may differ)
            where = index.where
            slots = [where.get(c.name, -1) for c in candidates] if lists else []
        if not lists:  # no node is a waiting job's one best home: the plain request on all
            if ask.pod_uid:
                self._asked.put((ask.pod_uid, "parts"), {})
            part = _with_queue(ask, ())
            call = _Call(part, self._requests(part.request.key()), deadline, learn=learn)
            return self._grouped(call, candidates), [call] * len(candidates)
        parts: dict[tuple[Upcoming, ...], list[int]] = {}
        for pos, at in enumerate(slots):
            parts.setdefault(lists.get(at, ()) if at >= 0 else (), []).append(pos)
        if ask.pod_uid:  # what bind decides with on each node (none: the plain request)
            self._asked.put((ask.pod_uid, "parts"), {
                candidates[p].name: w for w, ps in parts.items() if w for p in ps})
        rows: list[NodeDecision | None] = [None] * len(candidates)
        calls: list[_Call | None] = [None] * len(candidates)
        for waiting, positions in parts.items():
            part = _with_queue(ask, waiting)
            call = _Call(part, self._requests(part.request.key()), deadline, learn=learn)
            if len(parts) == 1:  # the common case: one call over every candidate
                return self._grouped(call, candidates), [call] * len(candidates)
            decided = self._grouped(call, [candidates[p] for p in positions])
            for p, row in zip(positions, decided, strict=True):
                rows[p], calls[p] = row, call
        return cast(list[NodeDecision], rows), cast(list[_Call], calls)

    def _sync_homes(self, names: list[str], by_free: bool) -> WaitingHomes:
        """The waiting jobs' homes index of the nodes ``names`` (grouped by free mask when
        ``by_free``), brought up to date: only the nodes whose view changed since the last
        call (a bind, a pod ending) are moved between groups; new or removed nodes, or a
        node's topology class changing, rebuild it from scratch."""
        tracked = self._homes.get(by_free)
        if tracked is None:
            tracked = self._homes[by_free] = (WaitingHomes(self.evaluator.memo), [], {}, {},
                                              [None])
        index, known, seen, classes, cursor = tracked
        # a backend drops a node's cached view whenever its allocations or topology change,
        # so a view seen before stands for an unchanged node; a backend that logs the drops
        # (``view_changes``) names the nodes to look at, others are scanned whole
        changes_of = getattr(self.state, "view_changes", None)
        changed: set[str] | None = None
        if callable(changes_of):
            changed, cursor[0] = changes_of(cursor[0])
        if names != known:
            index.reset()
            seen.clear()
            classes.clear()
            known[:] = names
            changed = None
        node_view = self.state.node_view
        for name in (names if changed is None else sorted(changed & seen.keys())):
            base = node_view(name)
            if seen.get(name) is base:
                continue
            topo = base.topology
            cls = topo.topology_class if isinstance(topo, Topology) else None
            if name in classes and classes[name] != cls:
                # the yardstick of every cost may change: start over
                index.reset()
                seen.clear()
                classes.clear()
                known.clear()
                return self._sync_homes(names, by_free)
            classes[name] = cls
            seen[name] = base
            view = base.by_free if by_free and base.by_free is not None else base
            if isinstance(topo, Topology):
                index.set_node(name, _key(view, name), topo, view.state.mask(topo))
        return index

    def decide_exact(self, ask: Ask, view: NodeView) -> Outcome:
        """Decide ``ask`` on one node now, with no budget and no group cache (bind).

        Raises:
            BadRequest: the request is invalid for the policy.
        """
        refused = self._unit_refusal(view.name, ask.request)
        if refused is not None:
            return refused
        if (ask.request.upcoming and ask.required_node is None
                and get_policy(ask.policy).lookahead):
            # the waiting jobs filter and prioritize weighed on this node (none when it was
            # no waiting job's one best home)
            parts = self._asked.get((ask.pod_uid, "parts")) if ask.pod_uid else None
            waiting = (parts or {}).get(view.name, ())
            ask = _with_queue(ask, waiting)
        aligned = self.alignment.apply(
            view, self.alignment.config(view.name, None), ask.request, ask.demand,
            self._requests(ask.request.key()), policy=ask.policy,
            place=self._placer(ask.policy, ask.request))
        if isinstance(aligned, Refusal):
            return Outcome(None, aligned.reason, unresolvable=aligned.unresolvable)
        view = aligned
        started = time.perf_counter()
        outcome = self._evaluate(ask.policy, view, ask.request)
        self._costs.observe(
            _CostModel.key(ask.policy, view, ask.request), time.perf_counter() - started
        )
        return outcome

    def bind_view(self, name: str) -> NodeView:
        """The state backend's view of ``name``, with the topology filter read from the
        Node object when the backend has none (a node known only from kube-scheduler's
        ``Nodes``)."""
        view = self.state.node_view(name)
        if isinstance(view.topology, NodeTopologyError) and name in self._seen_topology:
            view = NodeView.of(name, self._seen_topology[name], view.state, view.state_key,
                               view.state_id)
        return view

    # ------------------------------------------------------------------ memory unit
    def _unit_refusal(
        self, name: str, request: Request, node: Mapping[str, Any] | None = None
    ) -> Outcome | None:
        """Refuse ``name`` when ``request`` asks vGPU memory and the node publishes a
        ``gputopo.io/vgpu-memory-unit-mib`` other than this extender's unit (read from the
        Node object kube-scheduler sent, else from the state backend); None = no objection."""
        if request.memory_mib <= 0:
            return None
        published: str | None = None
        if node is not None:
            meta = node.get("metadata")
            ann = meta.get("annotations") if isinstance(meta, Mapping) else None
            value = ann.get(ANN_VGPU_MEMORY_UNIT) if isinstance(ann, Mapping) else None
            if isinstance(value, str):
                if self._seen_unit.get(name) != value:
                    self._seen_version += 1
                published = self._seen_unit[name] = value
            elif self._seen_unit.pop(name, None) is not None:
                self._seen_version += 1
        else:
            published = self.state.node_memory_unit(name) or self._seen_unit.get(name)
        return memory_unit_refusal(published, self.memory_unit_mib)

    def _pinned(self, call: _Call, candidates: Sequence[Candidate],
                node: str) -> list[NodeDecision]:
        """Rows for a pod the planner pinned to ``node``: that node is decided as usual, every
        other fails unresolvably (preempting pods there would not help)."""
        mine = [c for c in candidates if c.name == node]
        decided = {r.name: r for r in self._grouped(call, mine)} if mine else {}
        reason = f"the gputopo planner placed this pod on node {node} (gputopo.io/planned-node)"
        out = []
        for c in candidates:
            if c.name in decided:
                out.append(decided[c.name])
            else:
                out.append(NodeDecision(c.name, c.node, self.state.node_view(c.name),
                                        Outcome(None, reason, unresolvable=True)))
        return out

    # ------------------------------------------------------------------ grouping
    def _view(self, c: Candidate, by_free: bool) -> NodeView:
        """The candidate's view; ``by_free``: its variant grouped by free-GPU mask
        (``NodeView.by_free``)."""
        view = self.state.node_view(c.name, without=c.without) if c.without else (
            self.state.node_view(c.name))
        if c.unusable and not c.unusable <= view.state.unhealthy:
            st = replace(view.state, unhealthy=view.state.unhealthy | c.unusable)
            key = st.key()
            view = NodeView.of(c.name, view.topology, st, key, intern_state(key))
        if c.node is not None:
            meta = c.node.get("metadata")
            ann = meta.get("annotations") if isinstance(meta, Mapping) else None
            text = ann.get(ANN_TOPOLOGY) if isinstance(ann, Mapping) else None
            if isinstance(text, str):
                topo = self.topologies.get(text)
                if isinstance(topo, Topology):
                    self._seen_topology[c.name] = topo
                view = NodeView.of(c.name, topo, view.state, view.state_key, view.state_id)
        if by_free and view.by_free is not None:
            return view.by_free
        return view

    def _precheck(self, view: NodeView, request: Request) -> Outcome | None:
        """The cheap, exact part of a decision: no/invalid topology, too few GPUs in total,
        too little memory on any GPU, too few free GPUs (every policy refuses those:
        ``common.check_capacity``). None when only the policy can tell."""
        topo = view.topology
        if isinstance(topo, NodeTopologyError):
            return Outcome(None, str(topo), unresolvable=True)
        if request.count > topo.size:
            return Outcome(
                None, f"node has {topo.size} GPUs; the pod asks for {request.count}", True
            )
        if request.shared is not None:  # a slot may be on a shared GPU: only the policy knows
            need = request.shared.memory_mib
            biggest = max(g.memory_mib for g in topo.gpus)
            if need > biggest:
                return Outcome(
                    None,
                    f"no GPU on the node has {need} MiB for the co-location slot; the "
                    f"largest has {biggest} MiB",
                    True,
                )
            return None
        if request.fractional:
            biggest = max(g.memory_mib for g in topo.gpus)
            if request.memory_mib and biggest == 0:
                return Outcome(
                    None,
                    "the node's GPU memory is unknown (its device plugin advertises no "
                    f"{RESOURCE_VGPU_MEMORY}; see its --gpu-memory-mib)",
                    True,
                )
            if request.memory_mib > biggest:
                return Outcome(
                    None,
                    f"no GPU on the node has {request.memory_mib} MiB; the largest has "
                    f"{biggest} MiB",
                    True,
                )
            return None
        free = len(view.state.free_gpus(topo))
        if free < request.count:
            return Outcome(
                None, f"only {free} of {topo.size} GPUs free; the pod asks for {request.count}"
            )
        return None

    def _placer(
        self, policy: str, request: Request,
    ) -> Callable[[Topology, NodeState], Decision | None]:
        """``policy``'s decision for ``request`` on a state (None when it does not fit or the
        request is invalid there): what the NUMA alignment asks when the kubelet takes some
        GPUs whatever the plugin says (:meth:`NUMAAlignment.apply`)."""

        def place(topology: Topology, state: NodeState) -> Decision | None:
            try:
                return self.evaluator.place(policy, topology, state, request)
            except (NoFit, RequestError):
                return None

        return place

    def _evaluate(self, policy: str, view: NodeView, request: Request) -> Outcome:
        """Decide ``request`` on one node (no state change, no cache of this class).

        Raises:
            BadRequest: the request is invalid for the policy (``RequestError``).
        """
        quick = self._precheck(view, request)
        if quick is not None:
            return quick
        assert isinstance(view.topology, Topology)
        try:
            return Outcome(self.evaluator.place(policy, view.topology, view.state, request))
        except NoFit as exc:
            return Outcome(None, str(exc), postponed=isinstance(exc, Postponed))
        except RequestError as exc:
            raise BadRequest(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a policy bug must not kill the verb
            log.exception("policy %s failed on node %s", policy, view.name)
            return Outcome(None, f"policy {policy} failed: {type(exc).__name__}: {exc}")

    def _compute(self, policy: str, view: NodeView, request: Request, rid: int) -> Outcome:
        """Decide and score one group in this thread and cache both (the score on the
        group's own class: what prioritize over nodes of one class asks)."""
        start = time.perf_counter()
        outcome = self._evaluate(policy, view, request)
        if outcome.decision is not None and isinstance(view.topology, Topology):
            try:
                sc = node_score(policy, view.topology, view.state, request, outcome.decision,
                                evaluator=self.evaluator)
                self._scores.put(
                    (policy, view.group, rid, (view.topology.topology_class,)), sc
                )
            except Exception:  # noqa: BLE001 - prioritize will retry and report
                log.exception("scoring failed on node %s", view.name)
        self._outcomes.put((policy, view.group, rid), outcome)
        self._costs.observe(_CostModel.key(policy, view, request), time.perf_counter() - start)
        return outcome

    def _grouped(self, call: _Call, candidates: Sequence[Candidate]) -> list[NodeDecision]:
        """Decide every node once per group; uncached groups are decided inline (no budget)
        or on the workers until the deadline, then provisional.

        A whole-GPU request to a ``free_set_only`` policy groups nodes by free-GPU mask (its
        decision and score read nothing else), any other request by full state."""
        policy, request, rid = call.ask.policy, call.ask.request, call.rid
        groups: dict[object, Outcome | None] = {}
        # one row per candidate, in order; None where the group's outcome is still a miss
        rows: list[NodeDecision | None] = []
        misses: list[tuple[int, Candidate, NodeView]] = []
        by_free = get_policy(policy).keys_by_free_mask(request)
        # per call, not per node (a filter names every node of the cluster); the loop below
        # runs once per node per filter and prioritize, so what it reads is bound locally
        asks_memory = request.memory_mib > 0
        config_of = self.alignment.config
        node_view = self.state.node_view
        outcomes = self._outcomes
        prechecks = self._prechecks
        place: Callable[[Topology, NodeState], Decision | None] | None = None
        for c in candidates:
            name, node = c.name, c.node
            # _view's common case inlined (a method call per node was 15 % of a filter):
            if node is None and not c.without and not c.unusable:  # the backend's view
                view = node_view(name)
                if by_free and view.by_free is not None:
                    view = view.by_free
            else:
                view = self._view(c, by_free)
            if asks_memory:
                refused = self._unit_refusal(name, request, node)
                if refused is not None:
                    rows.append(NodeDecision(name, node, view, refused))
                    continue
            config = config_of(name, node)
            if config is not KUBELET_DEFAULTS and (
                isinstance(config, KubeletConfigError) or config.aligning
            ):
                if place is None:
                    place = self._placer(policy, request)
                aligned = self.alignment.apply(
                    view, config, request, call.ask.demand, rid, by_free=by_free,
                    policy=policy, place=place)
                if isinstance(aligned, Refusal):
                    rows.append(NodeDecision(name, node, view, Outcome(
                        None, aligned.reason, unresolvable=aligned.unresolvable)))
                    continue
                view = aligned
            group = view.group
            if group is None:
                rows.append(NodeDecision(name, node, view,
                                         self._evaluate(policy, view, request)))
                continue
            if group in groups:
                outcome = groups[group]
            else:
                outcome = outcomes.get((policy, group, rid))
                if outcome is None:
                    pkey = (group, rid)
                    pre = prechecks.get(pkey)
                    if pre is None:
                        pre = self._precheck(view, request) or _NEEDS_POLICY
                        prechecks.put(pkey, pre)
                    if pre is _NEEDS_POLICY:
                        call.misses[group] = view
                    else:
                        outcome = pre
                groups[group] = outcome
            if outcome is None:
                misses.append((len(rows), c, view))
                rows.append(None)
            else:
                rows.append(NodeDecision(name, node, view, outcome))
        if misses:
            resolved = self._resolve(call)
            for i, c, v in misses:
                rows[i] = NodeDecision(c.name, c.node, v, resolved[v.group])
        return cast(list[NodeDecision], rows)  # every None was filled above

    def _resolve(self, call: _Call) -> dict[object, Outcome]:
        policy, request, rid, deadline = call.ask.policy, call.ask.request, call.rid, call.deadline
        # cheapest first: fewer free GPUs = smaller search (and best-fit candidates)
        order = sorted(call.misses.values(), key=lambda v: (-len(v.state.usage), v.name))
        out: dict[object, Outcome] = {}
        if deadline is None:
            for v in order:
                out[v.group] = self._compute(policy, v, request, rid)
            return out
        jobs: list[tuple[NodeView, Job | None]] = [(v, None) for v in order]
        if self.workers is not None:
            pool_call = self.workers.new_call()
            jobs = []
            for i, v in enumerate(order):
                job = self.workers.queued((policy, v.group, rid))
                if job is None or (i < _PRIORITY_JOBS and not job.started):
                    job = self.workers.submit(
                        pool_call, i, (policy, v.group, rid),
                        (policy, self._class_json(v.topology), v.state, request),
                        self._absorb(policy, v, request, rid), reprioritize=i < _PRIORITY_JOBS,
                    )
                jobs.append((v, job))
        # This thread decides the misses its cost model says fit in the time left (no IPC);
        # the workers, if any, take the others. At the deadline what is left is provisional.
        pending = []
        inline = 0
        for v, job in jobs:
            if job is not None and job.done.is_set():
                out[v.group] = self._take(policy, v, request, rid, job)
                continue
            left = deadline - time.monotonic()
            est = self._costs.estimate(_CostModel.key(policy, v, request))
            if est is None:
                small = isinstance(v.topology, Topology) and v.topology.size <= 8
                if small:
                    est = 0.0  # small machines decide in about a millisecond
                elif self.workers is None and call.learn and (
                    inline == 0 or left > 0.5 * (self.budget_s or 0.0)
                ):
                    est = 0.0  # without workers filter learns unknown shapes while time is ample
            if left > 0 and est is not None and est < 0.5 * left and (
                job is None or self.workers is None or self.workers.claim(job)
            ):
                inline += 1
                try:
                    outcome = self._compute(policy, v, request, rid)
                finally:
                    if job is not None and self.workers is not None:
                        self.workers.complete(job, self._outcomes.get((policy, v.group, rid)))
                out[v.group] = outcome
            else:
                pending.append((v, job))
        provisional = 0
        for v, job in pending:
            left = max(deadline - time.monotonic(), 0.0)
            if job is not None and (job.done.is_set() or (left > 0 and job.wait(left))):
                out[v.group] = self._take(policy, v, request, rid, job)
            else:
                out[v.group] = _PROVISIONAL
                provisional += 1
        if provisional and self.metrics is not None:
            self.metrics.provisional.inc(provisional)
        return out

    # ------------------------------------------------------------------ workers
    def _take(self, policy: str, v: NodeView, request: Request, rid: int, job: Job) -> Outcome:
        """The outcome of a finished job (decided here if the worker failed; provisional if
        the job was dropped unrun).

        Raises:
            BadRequest: the worker found the request invalid for the policy.
        """
        if isinstance(job.error, Dropped):
            return _PROVISIONAL
        if isinstance(job.result, BadRequest):
            raise BadRequest(str(job.result))
        if job.error is not None or not isinstance(job.result, Outcome):
            return self._compute(policy, v, request, rid)
        return job.result

    def _class_json(self, topology: Topology | NodeTopologyError) -> str:
        """Annotation JSON of the first topology seen of this class (sent to workers)."""
        assert isinstance(topology, Topology)
        key = topology.topology_class
        text = self._class_json_cache.get(key)
        if text is None:
            text = self._class_json_cache.setdefault(key, dumps(topology))
        return text

    def _absorb(
        self, policy: str, view: NodeView, request: Request, rid: int
    ) -> Callable[[WorkerResult], Outcome | BadRequest]:
        """The callback turning a worker's result into a cached :class:`Outcome` (+ score);
        an invalid request comes back as a :class:`BadRequest` value, not cached."""

        def absorb(result: WorkerResult) -> Outcome | BadRequest:
            self._costs.observe(_CostModel.key(policy, view, request), result.seconds)
            if result.status is Status.OK:
                outcome = Outcome(result.decision)
                if result.score is not None and view.group is not None:
                    # the worker scored on the group's own class
                    self._scores.put((policy, view.group, rid, (view.group[0],)), result.score)
            elif result.status is Status.NO_FIT:
                outcome = Outcome(None, result.message, postponed=result.postponed)
            elif result.status is Status.BAD_REQUEST:
                return BadRequest(result.message)  # not cached: the pod is bad
            else:
                outcome = Outcome(None, f"policy {policy} failed: {result.message}")
            self._outcomes.put((policy, view.group, rid), outcome)
            return outcome

        return absorb

    # ------------------------------------------------------------------ scores
    def _scale(self, call: _Call, rows: Sequence[NodeDecision]) -> ScoreScale | None:
        """The yardsticks every node of this prioritize call is scored on: taken over the
        classes of the nodes that can host the pod (None when none can). Only nodes that
        could take the pod set the reference, so a full DGX does not make the PCIe boxes'
        scores (all that is left to compare) shrink."""
        hosts: dict[str, Topology] = {}
        for row in rows:
            topo = row.view.topology
            if row.outcome.decision is not None and isinstance(topo, Topology):
                hosts.setdefault(topo.topology_class, topo)
        if not hosts:
            return None
        request = call.ask.request  # the waiting jobs change no yardstick: one scale per shape
        if request.upcoming:
            request = request.with_queue((), request.wait_for_better)
        return score_scale(call.ask.policy, hosts.values(), request, self.evaluator)

    def _score(self, call: _Call, view: NodeView, outcome: Outcome, scale: ScoreScale) -> int:
        """0–10 for one group on ``scale`` (0 when it cannot host the pod or its decision
        is provisional); cached per class, state and the classes of the scale."""
        if outcome.decision is None or not isinstance(view.topology, Topology):
            return 0
        policy, request = call.ask.policy, call.ask.request
        key = (policy, view.group, call.rid, scale.classes)
        hit: NodeScore | None = self._scores.get(key)
        if hit is None:
            hit = node_score(policy, view.topology, view.state, request, outcome.decision,
                             evaluator=self.evaluator, scale=scale)
            self._scores.put(key, hit)
        return hit.score


def _key(view: NodeView, name: str) -> object:
    """A view's group key (its own name when it is in no group)."""
    return view.group if view.group is not None else ("node", name)


def _with_queue(ask: Ask, waiting: tuple[Upcoming, ...]) -> Ask:
    """``ask`` weighing the waiting jobs ``waiting`` (``replace`` of its request's
    ``upcoming``, without the field walk of two ``dataclasses.replace``)."""
    return Ask(ask.request.with_queue(waiting, ask.request.wait_for_better), ask.policy,
               ask.pod_uid, ask.required_node, ask.demand)


def _with_score(row: NodeDecision, score: int) -> NodeDecision:
    return NodeDecision(row.name, row.node, row.view, row.outcome, score)
