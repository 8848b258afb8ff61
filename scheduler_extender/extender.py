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
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_extender.contract import ANN_TOPOLOGY
from scheduler_extender.metrics import Metrics
from scheduler_extender.podspec import PodRequest, PodSpecError, parse_pod, pod_identity
from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs
from scheduler_extender.scoring import NodeScore, node_score
from scheduler_extender.state import (
    BindError,
    ClusterState,
    NodeTopologyError,
    NodeView,
    PodRef,
    ReservationConflict,
    TopologyCache,
)
from topology.model import Topology
from topology.policies.base import Decision, NoFit, Request, RequestError
from topology.policies.evaluate import place
from topology.policies.registry import get_policy

log = logging.getLogger("gputopo.extender")

_PENDING_SIZE = 10_000
_SCORE_CACHE_SIZE = 65_536


@dataclass(frozen=True)
class Outcome:
    """The result of evaluating a pod on a group of equal nodes.

    Attributes:
        decision: where the pod would go (None when it does not fit).
        reason: why it does not fit.
        unresolvable: preemption cannot help (no/invalid topology, node too small).
    """

    decision: Decision | None
    reason: str = ""
    unresolvable: bool = False


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

    Raises:
        UnknownPolicy: ``policy`` is not registered.
    """

    def __init__(self, state: ClusterState, policy: str, metrics: Metrics | None = None) -> None:
        get_policy(policy)
        self.state = state
        self.policy = policy
        self.metrics = metrics
        self.topologies = TopologyCache()
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._pending_lock = threading.Lock()
        self._scores: OrderedDict[tuple[object, ...], NodeScore] = OrderedDict()
        self._scores_lock = threading.Lock()
        self._node_locks: dict[str, threading.Lock] = {}
        self._node_locks_lock = threading.Lock()
        self._seen_topology: dict[str, Topology] = {}

    # ------------------------------------------------------------------ caches
    def clear_caches(self) -> None:
        """Forget parsed topologies and cached scores (cold-cache benchmarks, tests)."""
        self.topologies.clear()
        with self._scores_lock:
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

    def _view(self, name: str, node_obj: Mapping[str, Any] | None) -> NodeView:
        view = self.state.node_view(name)
        if node_obj is None:
            return view
        meta = node_obj.get("metadata")
        ann = meta.get("annotations") if isinstance(meta, Mapping) else None
        text = ann.get(ANN_TOPOLOGY) if isinstance(ann, Mapping) else None
        if not isinstance(text, str):
            return view
        topo = self.topologies.get(text)
        if isinstance(topo, Topology):
            self._seen_topology[name] = topo
        return NodeView(name, topo, view.state, view.state_key)

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

    def evaluate(self, policy: str, view: NodeView, request: Request) -> Outcome:
        """Decide ``request`` on one node (filter semantics, no state change).

        Raises:
            PodError: the request is invalid for the policy (``RequestError``).
        """
        topo = view.topology
        if isinstance(topo, NodeTopologyError):
            return Outcome(None, str(topo), unresolvable=True)
        if request.count > topo.size:
            return Outcome(
                None, f"node has {topo.size} GPUs; the pod asks for {request.count}", True
            )
        if request.fractional and request.memory_mib > max(g.memory_mib for g in topo.gpus):
            return Outcome(
                None,
                f"no GPU on the node has {request.memory_mib} MiB; the largest has "
                f"{max(g.memory_mib for g in topo.gpus)} MiB",
                True,
            )
        try:
            return Outcome(place(policy, topo, view.state, request))
        except NoFit as exc:
            return Outcome(None, str(exc))
        except RequestError as exc:
            raise PodError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a policy bug must not kill the verb
            log.exception("policy %s failed on node %s", policy, view.name)
            return Outcome(None, f"policy {policy} failed: {type(exc).__name__}: {exc}")

    def _grouped(
        self, policy: str, request: Request, nodes: list[tuple[str, Mapping[str, Any] | None]]
    ) -> list[tuple[str, Mapping[str, Any] | None, NodeView, Outcome]]:
        groups: dict[tuple[object, ...], Outcome] = {}
        out = []
        for name, obj in nodes:
            view = self._view(name, obj)
            topo = view.topology
            gkey: tuple[object, ...]
            if isinstance(topo, Topology):
                gkey = (topo.topology_class, view.state_key)
            else:
                gkey = ("error", id(topo))
            outcome = groups.get(gkey)
            if outcome is None:
                outcome = self.evaluate(policy, view, request)
                groups[gkey] = outcome
            out.append((name, obj, view, outcome))
        return out

    def score(self, policy: str, view: NodeView, request: Request, outcome: Outcome) -> int:
        """0–10 for one node (0 when it cannot host the pod); cached per class and state."""
        if outcome.decision is None or not isinstance(view.topology, Topology):
            return 0
        topo = view.topology
        key = (policy, topo.topology_class, view.state_key, request.key())
        hit = self._scores.get(key)
        if hit is None:
            hit = node_score(policy, topo, view.state, request, outcome.decision)
            with self._scores_lock:
                self._scores[key] = hit
                if len(self._scores) > _SCORE_CACHE_SIZE:
                    self._scores.popitem(last=False)
        return hit.score

    # ------------------------------------------------------------------ verbs
    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        """``POST /filter``: the nodes that can host the pod, and why the others cannot.

        Returns:
            An ``ExtenderFilterResult`` dict: ``Nodes`` (when the request carried Node
            objects) or ``NodeNames``, ``FailedNodes``, ``FailedAndUnresolvableNodes``,
            ``Error`` (a bad pod: every other field empty).
        """
        by_objects = args.Nodes is not None
        try:
            _, preq = self._parse_pod(args.Pod)
            nodes = self._candidates(args)
        except PodError as exc:
            return _filter_result(by_objects, [], {}, {}, str(exc))
        if preq is None:  # pass-through: not a gputopo pod
            return _filter_result(by_objects, [obj or name for name, obj in nodes], {}, {}, "")
        policy = preq.policy or self.policy
        try:
            rows = self._grouped(policy, preq.request, nodes)
        except PodError as exc:
            return _filter_result(by_objects, [], {}, {}, f"pod {_pod_label(args.Pod)}: {exc}")
        passed: list[Any] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        for name, obj, _view, outcome in rows:
            if outcome.decision is not None:
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
            _, preq = self._parse_pod(args.Pod)
            nodes = self._candidates(args)
        except PodError as exc:
            log.warning("prioritize: %s; scoring 0", exc)
            nodes = self._candidates_lenient(args)
            return [{"Host": n, "Score": 0} for n in nodes]
        if preq is None:
            return [{"Host": name, "Score": 0} for name, _ in nodes]
        policy = preq.policy or self.policy
        try:
            rows = self._grouped(policy, preq.request, nodes)
        except PodError as exc:
            log.warning("prioritize: %s; scoring 0", exc)
            return [{"Host": name, "Score": 0} for name, _ in nodes]
        scores: dict[tuple[object, ...], int] = {}
        out = []
        for name, _obj, view, outcome in rows:
            if outcome.decision is None or not isinstance(view.topology, Topology):
                out.append({"Host": name, "Score": 0})
                continue
            gkey = (view.topology.topology_class, view.state_key)
            s = scores.get(gkey)
            if s is None:
                s = self.score(policy, view, preq.request, outcome)
                scores[gkey] = s
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
                view = NodeView(node, self._seen_topology[node], view.state, view.state_key)
            if self.state.allocation(pod.key) is not None:
                # a re-bind (after a failed attempt): forget the stale record first
                self.state.release(pod.key)
                view = self.state.node_view(node)
                if isinstance(view.topology, NodeTopologyError) and node in self._seen_topology:
                    view = NodeView(node, self._seen_topology[node], view.state, view.state_key)
            try:
                outcome = self.evaluate(policy, view, preq.request)
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
