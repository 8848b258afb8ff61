"""The extender's verbs — filter, prioritize, bind — from wire arguments to wire replies.

Each verb is thin: it parses the kube-scheduler arguments (:mod:`scheduler_extender.schemas`;
the pod through :mod:`scheduler_extender.podspec`), calls the layer that does the work, and
shapes the reply (plain dicts with the Go field names):

* ``filter`` and ``prioritize`` → :meth:`scheduler_extender.decision.Decider.decide`;
* ``bind`` → :meth:`scheduler_extender.binding.Binder.bind`.

No HTTP here: the routes (:mod:`scheduler_extender.routes`) read the body, time the call and
serialise the reply.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from scheduler_extender.binding import Binder, RequestMemo
from scheduler_extender.decision import Ask, BadRequest, Candidate, Decider, NodeDecision
from scheduler_extender.metrics import Metrics
from scheduler_extender.podspec import PodRequest, PodSpecError, parse_pod, pod_identity
from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs
from scheduler_extender.state import ClusterState, PodRef
from topology.contract import DEFAULT_VGPU_MEMORY_UNIT_MIB
from topology.policies.registry import get_policy

log = logging.getLogger("gputopo.extender")


class PodError(Exception):
    """The pod itself is invalid (reported in the ``Error`` field)."""


class Extender:
    """Filter, prioritize and bind over a :class:`ClusterState`.

    Args:
        state: the cluster state backend.
        policy: the default policy name (pods may pick another with ``gputopo.io/policy``).
        metrics: where to count decisions, provisional answers and bind errors (optional).
        budget_ms: time a pod's filter + prioritize may spend waiting for decisions that are
            not cached yet (see :class:`~scheduler_extender.decision.Decider`). None = no
            budget: every decision is made before answering (exact, deterministic; the
            default).
        workers: worker processes for budgeted decisions (None = the default count; 0 = none).
        memory_unit_mib: MiB per ``gputopo.io/vgpu-memory`` device: pods' requests are
            counted in it, and nodes publishing another unit are refused to pods asking vGPU
            memory.

    Attributes:
        metrics: the counters given (None = not counted).
        decider: the decision layer.
        binder: the binding layer.

    Raises:
        UnknownPolicy: ``policy`` is not registered.
    """

    def __init__(
        self, state: ClusterState, policy: str, metrics: Metrics | None = None,
        budget_ms: float | None = None, workers: int | None = None,
        memory_unit_mib: int = DEFAULT_VGPU_MEMORY_UNIT_MIB,
    ) -> None:
        get_policy(policy)
        self.state = state
        self.policy = policy
        self.metrics = metrics
        self.memory_unit_mib = memory_unit_mib
        self.memo = RequestMemo()
        self.decider = Decider(state, metrics, budget_ms, workers, memory_unit_mib)
        self.binder = Binder(state, self.decider, self.memo, policy, metrics, memory_unit_mib)

    def close(self) -> None:
        """Stop the decision layer's worker processes (if any)."""
        self.decider.close()

    def clear_caches(self) -> None:
        """Forget every cached topology, decision and score (cold-cache benchmarks, tests)."""
        self.decider.clear_caches()

    # ------------------------------------------------------------------ parsing
    def _parse_pod(self, pod: Mapping[str, Any]) -> tuple[PodRef, PodRequest | None]:
        try:
            ns, name, uid = pod_identity(pod)
            ref = PodRef(ns, name, uid)
            preq = parse_pod(pod, memory_unit_mib=self.memory_unit_mib)
        except PodSpecError as exc:
            raise PodError(f"pod {_pod_label(pod)}: {exc}") from None
        self.memo.remember(ref, preq)
        return ref, preq

    def _ask(self, ref: PodRef, preq: PodRequest) -> Ask:
        return Ask(preq.request, preq.policy or self.policy, ref.uid)

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
            ref, preq = self._parse_pod(args.Pod)
            nodes = _candidates(args)
        except PodError as exc:
            return _filter_result(by_objects, [], {}, {}, str(exc))
        if preq is None:  # pass-through: not a gputopo pod
            return _filter_result(
                by_objects, [c.node or c.name for c in nodes], {}, {}, ""
            )
        try:
            rows = self.decider.decide(self._ask(ref, preq), nodes, verb="filter")
        except BadRequest as exc:
            return _filter_result(by_objects, [], {}, {}, f"pod {_pod_label(args.Pod)}: {exc}")
        return _filter_reply(by_objects, rows)

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        """``POST /prioritize``: ``[{"Host": name, "Score": 0..10}]`` for every node given.

        A pass-through or invalid pod gets 0 everywhere (an invalid pod already failed
        filter; kube-scheduler ignores prioritize errors anyway).
        """
        try:
            ref, preq = self._parse_pod(args.Pod)
            nodes = _candidates(args)
        except PodError as exc:
            log.warning("prioritize: %s; scoring 0", exc)
            return [{"Host": n, "Score": 0} for n in _candidate_names_lenient(args)]
        if preq is None:
            return [{"Host": c.name, "Score": 0} for c in nodes]
        try:
            rows = self.decider.decide(self._ask(ref, preq), nodes, verb="prioritize",
                                       scored=True)
        except BadRequest as exc:
            log.warning("prioritize: %s; scoring 0", exc)
            return [{"Host": c.name, "Score": 0} for c in nodes]
        return [{"Host": r.name, "Score": r.score or 0} for r in rows]

    def bind(self, args: ExtenderBindingArgs) -> dict[str, str]:
        """``POST /bind``: decide again under the node's lock, reserve, then bind.

        Returns:
            ``{"Error": ""}`` when bound, else ``{"Error": reason}`` with nothing held.
        """
        pod = PodRef(args.PodNamespace, args.PodName, args.PodUID)
        return {"Error": self.binder.bind(pod, args.Node).error}


# ---------------------------------------------------------------------- wire helpers
def _pod_label(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata")
    if isinstance(meta, Mapping):
        return f"{meta.get('namespace') or 'default'}/{meta.get('name') or '?'}"
    return "?"


def _candidates(args: ExtenderArgs) -> list[Candidate]:
    """The nodes of an ``ExtenderArgs``: Node objects or names.

    Raises:
        PodError: a Node object has no ``metadata.name``.
    """
    if args.Nodes is not None:
        out: list[Candidate] = []
        for i, node in enumerate(args.Nodes.items):
            meta = node.get("metadata")
            name = meta.get("name") if isinstance(meta, Mapping) else None
            if not isinstance(name, str) or not name:
                raise PodError(f"Nodes.items[{i}] has no metadata.name")
            out.append(Candidate(name, node))
        return out
    return [Candidate(n) for n in (args.NodeNames or [])]


def _candidate_names_lenient(args: ExtenderArgs) -> list[str]:
    if args.Nodes is not None:
        names = []
        for node in args.Nodes.items:
            meta = node.get("metadata")
            name = meta.get("name") if isinstance(meta, Mapping) else None
            if isinstance(name, str):
                names.append(name)
        return names
    return list(args.NodeNames or [])


def _filter_reply(by_objects: bool, rows: list[NodeDecision]) -> dict[str, Any]:
    passed: list[Any] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for r in rows:
        if r.outcome.passes:
            passed.append(r.node if by_objects else r.name)
        elif r.outcome.unresolvable:
            unresolvable[r.name] = r.outcome.reason
        else:
            failed[r.name] = r.outcome.reason
    return _filter_result(by_objects, passed, failed, unresolvable, "")


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
