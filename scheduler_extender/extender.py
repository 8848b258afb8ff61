"""The extender's verbs as plain methods: filter, prioritize, bind (no HTTP here).

:class:`Extender` turns wire arguments (:mod:`scheduler_extender.schemas`) into wire replies
(plain dicts with the Go field names). The HTTP layer (:mod:`scheduler_extender.app`) only
parses, times and serialises.

Hot path (filter / prioritize over hundreds of nodes):

* each node's topology annotation is parsed once (:class:`TopologyCache`, keyed by the text);
* nodes are grouped by ``(topology class, NodeState.key())`` and each group is evaluated once
  per call — a decision is the same for every node of a group up to UUID labels;
* decisions come from :func:`topology.policies.evaluate.place` (cached per class across calls)
  and scores from a bounded cache keyed the same way;
* Node objects are read as dicts: only ``metadata.name`` and the annotation.

Filter and prioritize never change the cluster state. Bind takes a per-node lock, re-reads
the node's state, decides again with the same policy, reserves, then asks the backend to
write the annotations and the Binding; on failure it releases the reservation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_extender.evaluator import Dropped, Evaluator, Job, default_workers
from scheduler_extender.metrics import Metrics
from scheduler_extender.podspec import PodRequest, PodSpecError, parse_pod, pod_identity
from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs
from scheduler_extender.state import (
    BindError,
    ClusterState,
    NodeTopologyError,
    NodeView,
    PodRef,
    ReservationConflict,
    TopologyCache,
    _Interner,
)
from topology.contract import ANN_TOPOLOGY
from topology.model import Topology
from topology.policies.base import Decision, NoFit, Request, RequestError
from topology.policies.evaluate import place
from topology.policies.registry import get_policy
from topology.policies.scoring import NodeScore, node_score
from topology.serialization import dumps

log = logging.getLogger("gputopo.extender")

_PENDING_SIZE = 10_000
_GROUP_CACHE_SIZE = 65_536


#: Interns request keys (pattern edge tuples hash slowly; ints do not).
intern_request = _Interner()


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


class _LRU:
    """A small thread-safe LRU map (reads are lock-free dict lookups)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._d: OrderedDict[tuple[object, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[object, ...]) -> Any:
        return self._d.get(key)

    def put(self, key: tuple[object, ...], value: Any) -> None:
        with self._lock:
            self._d[key] = value
            if len(self._d) > self.size:
                self._d.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()


@dataclass(frozen=True)
class Outcome:
    """The result of evaluating a pod on a group of equal nodes.

    Attributes:
        decision: where the pod would go (None when it does not fit or is not known yet).
        reason: why it does not fit.
        unresolvable: preemption cannot help (no/invalid topology, node too small).
        provisional: the decision was not ready within the time budget; the node has the
            capacity, so filter lets it pass and prioritize scores it 0 for now.
    """

    decision: Decision | None
    reason: str = ""
    unresolvable: bool = False
    provisional: bool = False

    @property
    def passes(self) -> bool:
        """The node passes filter."""
        return self.decision is not None or self.provisional


_PROVISIONAL = Outcome(None, provisional=True)
_NEEDS_POLICY = Outcome(None, "needs the policy")
#: Jobs of one call pushed at the call's priority (the rest keep their queue position).
_PRIORITY_JOBS = 64
_BAD_REQUEST = "\x00bad-request:"
#: Each filter/prioritize call waits at least this long for uncached decisions.
_MIN_SLICE_S = 0.001


@dataclass(frozen=True)
class _Pending:
    pod: PodRef
    request: PodRequest | None


class PodError(Exception):
    """The pod itself is invalid (reported in the ``Error`` field)."""


class Extender:
    """Filter, prioritize and bind over a :class:`ClusterState`.

    Args:
        state: the cluster state backend.
        policy: the default policy name (pods may pick another with ``gputopo.io/policy``).
        metrics: where to count decisions and bind errors (optional).
        budget_ms: time a pod's filter + prioritize may spend waiting for decisions that are
            not cached yet (they run on a background :class:`Evaluator`; late ones are
            provisional: filter passes the node on capacity, prioritize scores it 0, and the
            result is cached for the next pods). None = no budget: every decision is made in
            the request thread before answering (exact, deterministic; the default).
        workers: worker processes for budgeted decisions (None = :func:`default_workers`;
            0 = none: the request thread decides what its cost model says fits the budget,
            and the rest stays provisional until a later call has the time).

    Raises:
        UnknownPolicy: ``policy`` is not registered.
    """

    def __init__(
        self, state: ClusterState, policy: str, metrics: Metrics | None = None,
        budget_ms: float | None = None, workers: int | None = None,
    ) -> None:
        get_policy(policy)
        self.state = state
        self.policy = policy
        self.metrics = metrics
        self.budget_s = budget_ms / 1000.0 if budget_ms else None
        if workers is None:
            workers = default_workers()
        self.evaluator = Evaluator(workers) if self.budget_s is not None and workers else None
        if self.evaluator is not None:
            self.evaluator.start()
        self._spent = _LRU(_PENDING_SIZE)  # pod uid -> seconds its filter waited
        self._costs = _CostModel()
        self.topologies = TopologyCache()
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._pending_lock = threading.Lock()
        # (policy, class, state key, request key) -> Outcome / NodeScore
        self._outcomes = _LRU(_GROUP_CACHE_SIZE)
        self._prechecks = _LRU(_GROUP_CACHE_SIZE)  # (group, request id) -> Outcome
        self._scores = _LRU(_GROUP_CACHE_SIZE)
        self._node_locks: dict[str, threading.Lock] = {}
        self._node_locks_lock = threading.Lock()
        self._seen_topology: dict[str, Topology] = {}
        self._class_json_cache: dict[str, str] = {}

    # ------------------------------------------------------------------ caches
    def clear_caches(self) -> None:
        """Forget parsed topologies, cached outcomes and scores, here and in the evaluator's
        workers (cold-cache benchmarks, tests)."""
        if self.evaluator is not None:
            self.evaluator.clear_caches()
        self.topologies.clear()
        self._outcomes.clear()
        self._prechecks.clear()
        self._scores.clear()

    def _remember(self, pod: PodRef, request: PodRequest | None) -> None:
        if not pod.uid:
            return
        with self._pending_lock:
            self._pending[pod.uid] = _Pending(pod, request)
            self._pending.move_to_end(pod.uid)
            if len(self._pending) > _PENDING_SIZE:
                self._pending.popitem(last=False)

    def node_lock(self, node: str) -> threading.Lock:
        """The lock serialising binds to ``node``."""
        lock = self._node_locks.get(node)
        if lock is None:
            with self._node_locks_lock:
                lock = self._node_locks.setdefault(node, threading.Lock())
        return lock

    # ------------------------------------------------------------------ shared steps
    def _parse_pod(self, pod: Mapping[str, Any]) -> tuple[PodRef, PodRequest | None]:
        try:
            ns, name, uid = pod_identity(pod)
            ref = PodRef(ns, name, uid)
            preq = parse_pod(pod)
        except PodSpecError as exc:
            raise PodError(f"pod {_pod_label(pod)}: {exc}") from None
        self._remember(ref, preq)
        return ref, preq

    def _view(
        self, name: str, node_obj: Mapping[str, Any] | None, by_free: bool = False
    ) -> NodeView:
        """The node's view; ``by_free``: its variant grouped by free-GPU mask
        (``NodeView.by_free``)."""
        view = self.state.node_view(name)
        if node_obj is not None:
            meta = node_obj.get("metadata")
            ann = meta.get("annotations") if isinstance(meta, Mapping) else None
            text = ann.get(ANN_TOPOLOGY) if isinstance(ann, Mapping) else None
            if isinstance(text, str):
                topo = self.topologies.get(text)
                if isinstance(topo, Topology):
                    self._seen_topology[name] = topo
                view = NodeView.of(name, topo, view.state, view.state_key, view.state_id)
        if by_free and view.by_free is not None:
            return view.by_free
        return view

    def _candidates(self, args: ExtenderArgs) -> list[tuple[str, Mapping[str, Any] | None]]:
        if args.Nodes is not None:
            out: list[tuple[str, Mapping[str, Any] | None]] = []
            for i, node in enumerate(args.Nodes.items):
                meta = node.get("metadata")
                name = meta.get("name") if isinstance(meta, Mapping) else None
                if not isinstance(name, str) or not name:
                    raise PodError(f"Nodes.items[{i}] has no metadata.name")
                out.append((name, node))
            return out
        return [(n, None) for n in (args.NodeNames or [])]

    def precheck(self, view: NodeView, request: Request) -> Outcome | None:
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
        if request.fractional:
            biggest = max(g.memory_mib for g in topo.gpus)
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

    def evaluate(self, policy: str, view: NodeView, request: Request) -> Outcome:
        """Decide ``request`` on one node (filter semantics, no state change, no cache of
        this class).

        Raises:
            PodError: the request is invalid for the policy (``RequestError``).
        """
        quick = self.precheck(view, request)
        if quick is not None:
            return quick
        assert isinstance(view.topology, Topology)
        try:
            return Outcome(place(policy, view.topology, view.state, request))
        except NoFit as exc:
            return Outcome(None, str(exc))
        except RequestError as exc:
            raise PodError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a policy bug must not kill the verb
            log.exception("policy %s failed on node %s", policy, view.name)
            return Outcome(None, f"policy {policy} failed: {type(exc).__name__}: {exc}")

    def _compute(self, policy: str, view: NodeView, request: Request, rid: int) -> Outcome:
        """Decide and score one group in this thread and cache both."""
        start = time.perf_counter()
        outcome = self.evaluate(policy, view, request)
        if outcome.decision is not None and isinstance(view.topology, Topology):
            try:
                sc = node_score(policy, view.topology, view.state, request, outcome.decision)
                self._scores.put((policy, view.group, rid), sc)
            except Exception:  # noqa: BLE001 - prioritize will retry and report
                log.exception("scoring failed on node %s", view.name)
        self._outcomes.put((policy, view.group, rid), outcome)
        self._costs.observe(_CostModel.key(policy, view, request), time.perf_counter() - start)
        return outcome

    def _grouped(
        self, policy: str, request: Request, nodes: list[tuple[str, Mapping[str, Any] | None]],
        deadline: float | None = None, learn: bool = False,
    ) -> list[tuple[str, Mapping[str, Any] | None, NodeView, Outcome]]:
        """Evaluate every node once per group; uncached groups are decided inline (no budget)
        or on the evaluator until ``deadline`` (``time.monotonic()``), then provisional.

        A whole-GPU request to a ``free_set_only`` policy groups nodes by free-GPU mask (its
        decision and score read nothing else), any other request by full state."""
        groups: dict[object, Outcome | None] = {}
        misses: dict[object, NodeView] = {}
        rows: list[tuple[str, Mapping[str, Any] | None, NodeView, Outcome | None]] = []
        rid = intern_request(request.key())
        by_free = get_policy(policy).keys_by_free_mask(request)
        for name, obj in nodes:
            view = self._view(name, obj, by_free)
            group = view.group
            if group is None:
                rows.append((name, obj, view, self.evaluate(policy, view, request)))
                continue
            if group in groups:
                rows.append((name, obj, view, groups[group]))
                continue
            outcome: Outcome | None = self._outcomes.get((policy, group, rid))
            if outcome is None:
                pkey = (group, rid)
                pre = self._prechecks.get(pkey)
                if pre is None:
                    pre = self.precheck(view, request) or _NEEDS_POLICY
                    self._prechecks.put(pkey, pre)
                if pre is _NEEDS_POLICY:
                    misses[group] = view
                else:
                    outcome = pre
            groups[group] = outcome
            rows.append((name, obj, view, outcome))
        if not misses:
            return rows  # type: ignore[return-value]
        resolved = self._resolve(policy, request, rid, misses, deadline, learn)
        return [(n, o, v, out if out is not None else resolved[v.group])
                for n, o, v, out in rows]

    def _resolve(
        self, policy: str, request: Request, rid: int, misses: dict[object, NodeView],
        deadline: float | None, learn: bool = False,
    ) -> dict[object, Outcome]:
        # cheapest first: fewer free GPUs = smaller search (and best-fit candidates)
        order = sorted(misses.values(), key=lambda v: (-len(v.state.usage), v.name))
        out: dict[object, Outcome] = {}
        if deadline is None:
            for v in order:
                out[v.group] = self._compute(policy, v, request, rid)
            return out
        jobs: list[tuple[NodeView, Job | None]] = [(v, None) for v in order]
        if self.evaluator is not None:
            call = self.evaluator.new_call()
            jobs = []
            for i, v in enumerate(order):
                job = self.evaluator.queued((policy, v.group, rid))
                if job is None or (i < _PRIORITY_JOBS and not job.started):
                    job = self.evaluator.submit(
                        call, i, (policy, v.group, rid),
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
                elif self.evaluator is None and learn and (
                    inline == 0 or left > 0.5 * (self.budget_s or 0.0)
                ):
                    est = 0.0  # without workers filter learns unknown shapes while time is ample
            if left > 0 and est is not None and est < 0.5 * left and (
                job is None or self.evaluator is None or self.evaluator.claim(job)
            ):
                inline += 1
                try:
                    outcome = self._compute(policy, v, request, rid)
                finally:
                    if job is not None and self.evaluator is not None:
                        self.evaluator.complete(job, self._outcomes.get((policy, v.group, rid)))
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

    def _take(self, policy: str, v: NodeView, request: Request, rid: int, job: Job) -> Outcome:
        """The outcome of a finished job (decided here if the worker failed; provisional if
        the job was dropped unrun)."""
        if isinstance(job.error, Dropped):
            return _PROVISIONAL
        if job.error is not None or not isinstance(job.result, Outcome):
            return self._compute(policy, v, request, rid)
        if job.result.reason.startswith(_BAD_REQUEST):
            raise PodError(job.result.reason.removeprefix(_BAD_REQUEST))
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
    ) -> Callable[[Any], Outcome]:
        """The callback turning a worker result into a cached :class:`Outcome` (+ score)."""

        def absorb(result: Any) -> Outcome:
            kind = result[0]
            self._costs.observe(_CostModel.key(policy, view, request), result[-1])
            if kind == "ok":
                outcome = Outcome(result[1])
                if result[2] is not None:
                    self._scores.put((policy, view.group, rid), result[2])
            elif kind == "nofit":
                outcome = Outcome(None, result[1])
            elif kind == "bad-request":
                return Outcome(None, _BAD_REQUEST + result[1])  # not cached: the pod is bad
            else:
                outcome = Outcome(None, f"policy {policy} failed: {result[1]}")
            self._outcomes.put((policy, view.group, rid), outcome)
            return outcome

        return absorb

    def score(
        self, policy: str, view: NodeView, request: Request, outcome: Outcome,
        request_id: int | None = None,
    ) -> int:
        """0–10 for one node (0 when it cannot host the pod or its decision is provisional);
        cached per class and state."""
        if outcome.decision is None or not isinstance(view.topology, Topology):
            return 0
        topo = view.topology
        rid = request_id if request_id is not None else intern_request(request.key())
        key = (policy, view.group, rid)
        hit: NodeScore | None = self._scores.get(key)
        if hit is None:
            hit = node_score(policy, topo, view.state, request, outcome.decision)
            self._scores.put(key, hit)
        return hit.score

    # ------------------------------------------------------------------ verbs
    def close(self) -> None:
        """Stop the evaluator's worker processes (if any)."""
        if self.evaluator is not None:
            self.evaluator.stop()

    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        """``POST /filter``: the nodes that can host the pod, and why the others cannot.

        Returns:
            An ``ExtenderFilterResult`` dict: ``Nodes`` (when the request carried Node
            objects) or ``NodeNames``, ``FailedNodes``, ``FailedAndUnresolvableNodes``,
            ``Error`` (a bad pod: every other field empty).
        """
        by_objects = args.Nodes is not None
        try:
            ref, preq = self._parse_pod(args.Pod)
            nodes = self._candidates(args)
        except PodError as exc:
            return _filter_result(by_objects, [], {}, {}, str(exc))
        if preq is None:  # pass-through: not a gputopo pod
            return _filter_result(by_objects, [obj or name for name, obj in nodes], {}, {}, "")
        policy = preq.policy or self.policy
        start = time.monotonic()
        deadline = start + self.budget_s if self.budget_s is not None else None
        try:
            rows = self._grouped(policy, preq.request, nodes, deadline, learn=True)
        except PodError as exc:
            return _filter_result(by_objects, [], {}, {}, f"pod {_pod_label(args.Pod)}: {exc}")
        if ref.uid and self.budget_s is not None:
            self._spent.put((ref.uid,), time.monotonic() - start)
        passed: list[Any] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        for name, obj, _view, outcome in rows:
            if outcome.passes:
                passed.append(obj if by_objects else name)
            elif outcome.unresolvable:
                unresolvable[name] = outcome.reason
            else:
                failed[name] = outcome.reason
        return _filter_result(by_objects, passed, failed, unresolvable, "")

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        """``POST /prioritize``: ``[{"Host": name, "Score": 0..10}]`` for every node given.

        A pass-through or invalid pod gets 0 everywhere (an invalid pod already failed
        filter; kube-scheduler ignores prioritize errors anyway).
        """
        try:
            ref, preq = self._parse_pod(args.Pod)
            nodes = self._candidates(args)
        except PodError as exc:
            log.warning("prioritize: %s; scoring 0", exc)
            return [{"Host": n, "Score": 0} for n in self._candidates_lenient(args)]
        if preq is None:
            return [{"Host": name, "Score": 0} for name, _ in nodes]
        policy = preq.policy or self.policy
        deadline = None
        if self.budget_s is not None:
            spent = self._spent.get((ref.uid,)) or 0.0
            deadline = time.monotonic() + max(self.budget_s - spent, _MIN_SLICE_S)
        try:
            rows = self._grouped(policy, preq.request, nodes, deadline)
        except PodError as exc:
            log.warning("prioritize: %s; scoring 0", exc)
            return [{"Host": name, "Score": 0} for name, _ in nodes]
        scores: dict[object, int] = {}
        out = []
        rid = intern_request(preq.request.key())
        for name, _obj, view, outcome in rows:
            if outcome.decision is None or view.group is None:
                out.append({"Host": name, "Score": 0})
                continue
            s = scores.get(view.group)
            if s is None:
                s = self.score(policy, view, preq.request, outcome, rid)
                scores[view.group] = s
            out.append({"Host": name, "Score": s})
        return out

    def _candidates_lenient(self, args: ExtenderArgs) -> list[str]:
        if args.Nodes is not None:
            names = []
            for node in args.Nodes.items:
                meta = node.get("metadata")
                name = meta.get("name") if isinstance(meta, Mapping) else None
                if isinstance(name, str):
                    names.append(name)
            return names
        return list(args.NodeNames or [])

    def _resolve_request(self, pod: PodRef) -> tuple[PodRequest | None, str]:
        """The pod's request for bind: from its filter call, else from the API."""
        if pod.uid:
            hit = self._pending.get(pod.uid)
            if hit is not None:
                return hit.request, ""
        obj = self.state.fetch_pod(pod.namespace, pod.name)
        if obj is None:
            return None, (
                f"pod {pod} is unknown to the extender: no filter call was seen for it and "
                f"the state backend cannot fetch it"
            )
        try:
            ns, name, uid = pod_identity(obj)
            if pod.uid and uid and uid != pod.uid:
                return None, f"pod {pod} has UID {uid}, the bind names {pod.uid}"
            return parse_pod(obj), ""
        except PodSpecError as exc:
            return None, f"pod {pod}: {exc}"

    def bind(self, args: ExtenderBindingArgs) -> dict[str, str]:
        """``POST /bind``: decide again under the node's lock, reserve, then bind.

        Returns:
            ``{"Error": ""}`` when bound, else ``{"Error": reason}`` with nothing held.
        """
        pod = PodRef(args.PodNamespace, args.PodName, args.PodUID)
        node = args.Node
        known_uid = self.state.pod_uid(pod.namespace, pod.name)
        if known_uid and pod.uid and known_uid != pod.uid:
            return self._bind_error(
                pod, node, f"PodUID {pod.uid} does not match the live pod's UID {known_uid}",
                "uid-mismatch",
            )
        if not pod.uid and known_uid:
            pod = PodRef(pod.namespace, pod.name, known_uid)
        preq, why = self._resolve_request(pod)
        if why:
            return self._bind_error(pod, node, why, "unknown-pod")
        if preq is None:  # pass-through pod: just bind
            log.info("bind %s -> %s (no gputopo resources)", pod, node)
            try:
                self.state.bind(pod, node, None)
            except BindError as exc:
                return self._bind_error(pod, node, str(exc), "api")
            return {"Error": ""}
        policy = preq.policy or self.policy
        with self.node_lock(node):
            view = self.state.node_view(node)
            if isinstance(view.topology, NodeTopologyError) and node in self._seen_topology:
                view = NodeView.of(node, self._seen_topology[node], view.state,
                                   view.state_key, view.state_id)
            if self.state.allocation(pod.key) is not None:
                # a re-bind (after a failed attempt): forget the stale record first
                self.state.release(pod.key)
                view = self.state.node_view(node)
                if isinstance(view.topology, NodeTopologyError) and node in self._seen_topology:
                    view = NodeView.of(node, self._seen_topology[node], view.state,
                                   view.state_key, view.state_id)
            try:
                started = time.perf_counter()
                outcome = self.evaluate(policy, view, preq.request)
                self._costs.observe(
                    _CostModel.key(policy, view, preq.request), time.perf_counter() - started
                )
            except PodError as exc:
                return self._bind_error(pod, node, str(exc), "bad-pod")
            decision = outcome.decision
            if decision is None:
                return self._bind_error(pod, node, f"cannot bind: {outcome.reason}", "no-fit")
            try:
                self.state.reserve(pod.key, node, decision, pod=pod)
            except ReservationConflict as exc:
                return self._bind_error(pod, node, f"cannot reserve: {exc}", "conflict")
        try:
            self.state.bind(pod, node, decision)
        except BindError as exc:
            self.state.release(pod.key)
            return self._bind_error(pod, node, str(exc), "api")
        except Exception as exc:  # noqa: BLE001 - roll back whatever went wrong
            self.state.release(pod.key)
            log.exception("bind %s -> %s failed", pod, node)
            return self._bind_error(pod, node, f"{type(exc).__name__}: {exc}", "internal")
        if self.metrics is not None:
            self.metrics.decisions.labels(policy=decision.policy).inc()
        gpus = ",".join(str(g) for g in decision.gpus)
        if decision.fractional:
            what = f"gpu={gpus} share={decision.core_percent}%/{decision.memory_mib}MiB"
        else:
            what = f"gpus={gpus} effbw={decision.effective_bandwidth_gbps:.1f}GB/s"
        log.info("bind %s -> %s %s policy=%s", pod, node, what, decision.policy)
        return {"Error": ""}

    def _bind_error(self, pod: PodRef, node: str, reason: str, kind: str) -> dict[str, str]:
        if self.metrics is not None:
            self.metrics.bind_errors.labels(reason=kind).inc()
        log.warning("bind %s -> %s failed: %s", pod, node, reason)
        return {"Error": reason}


def _pod_label(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata")
    if isinstance(meta, Mapping):
        return f"{meta.get('namespace') or 'default'}/{meta.get('name') or '?'}"
    return "?"


def _filter_result(
    by_objects: bool, passed: list[Any], failed: dict[str, str], unresolvable: dict[str, str],
    error: str,
) -> dict[str, Any]:
    return {
        "Nodes": {"metadata": {}, "items": passed} if by_objects else None,
        "NodeNames": None if by_objects else passed,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": error,
    }
