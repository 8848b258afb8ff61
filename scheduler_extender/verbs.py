"""The extender's verbs — filter, prioritize, bind — from wire arguments to wire replies.

Each verb is thin: it parses the kube-scheduler arguments (:mod:`scheduler_extender.schemas`;
the pod through :mod:`scheduler_extender.podspec`), calls the layer that does the work, and
shapes the reply (plain dicts with the Go field names):

* ``filter`` and ``prioritize`` → :meth:`scheduler_extender.decision.Decider.decide`;
* ``preempt`` → :meth:`scheduler_extender.preemption.Preemption.judge` (which asks the same
  decision layer, as if the proposed victims were gone);
* ``bind`` → :meth:`scheduler_extender.binding.Binder.bind`.

No HTTP here: the routes (:mod:`scheduler_extender.routes`) read the body, time the call and
serialise the reply.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from scheduler_extender.binding import Binder, BindResult, PendingBind, RequestMemo
from scheduler_extender.cache import BoundedCache
from scheduler_extender.decision import (
    Ask,
    BadRequest,
    Candidate,
    Decider,
    NodeDecision,
    ask_for,
)
from scheduler_extender.metrics import Metrics
from scheduler_extender.podspec import (
    PodRequest,
    PodSpecError,
    parse_pod,
    pod_identity,
)
from scheduler_extender.preemption import Preemption, Victim, VictimSet
from scheduler_extender.profiles import ColocationInputs, ProfileLayers
from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs, ExtenderPreemptionArgs
from scheduler_extender.state import ClusterState, PodRef
from topology.contract import DEFAULT_VGPU_MEMORY_UNIT_MIB
from topology.policies.base import MAX_UPCOMING
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
        profiles: the co-location profile layers and threshold for ``gputopo.io/gpu-shared``
            pods (None = the shipped catalog, the default threshold).
        colocation_policy: the policy for co-location slots when ``policy`` does not place
            them (default ``gputopo``).
        lookahead_pods: pending pods (the state's ``pending``) a lookahead policy weighs per
            decision (0 = none).

    Attributes:
        metrics: the counters given (None = not counted).
        decider: the decision layer.
        binder: the binding layer.
        preemption: the preemption layer.

    Raises:
        UnknownPolicy: ``policy`` or ``colocation_policy`` is not registered.
        ValueError: ``colocation_policy`` does not place co-location slots.
    """

    def __init__(
        self, state: ClusterState, policy: str, metrics: Metrics | None = None,
        budget_ms: float | None = None, workers: int | None = None,
        memory_unit_mib: int = DEFAULT_VGPU_MEMORY_UNIT_MIB,
        profiles: ProfileLayers | None = None, colocation_policy: str = "gputopo",
        lookahead_pods: int = MAX_UPCOMING,
    ) -> None:
        get_policy(policy)
        if not get_policy(colocation_policy).colocation:
            raise ValueError(f"colocation policy {colocation_policy!r} does not place "
                             "co-location slots")
        self.state = state
        self.policy = policy
        self.colocation_policy = colocation_policy
        self.metrics = metrics
        self.memory_unit_mib = memory_unit_mib
        self.profiles = profiles or ProfileLayers()
        self.memo = RequestMemo()
        # (uid, resourceVersion) -> (profile layers, request): a filter's pod for its prioritize
        self._parsed = BoundedCache(_PARSED_SIZE)
        self.decider = Decider(state, metrics, budget_ms, workers, memory_unit_mib)
        self.lookahead_pods = lookahead_pods
        self.binder = Binder(state, self.decider, self.memo, policy, metrics, memory_unit_mib,
                             profiles=self.profiles, colocation_policy=colocation_policy,
                             lookahead_pods=lookahead_pods)
        self.preemption = Preemption(self.decider)

    def close(self) -> None:
        """Stop the decision layer's worker processes (if any)."""
        self.decider.close()

    def clear_caches(self) -> None:
        """Forget every cached topology, decision and score (cold-cache benchmarks, tests)."""
        self.decider.clear_caches()

    # ------------------------------------------------------------------ parsing
    def _parse_pod(self, pod: Mapping[str, Any]) -> tuple[PodRef, PodRequest | None]:
        """The pod's identity and request. A pod seen before with the same UID and
        ``resourceVersion`` (prioritize after filter, a re-filter) is not parsed again: any
        change to it bumps its ``resourceVersion``; the request is reused only if the
        co-location profile layers are still the same objects.

        Raises:
            PodError: the pod is invalid (never cached).
        """
        try:
            ns, name, uid = pod_identity(pod)
            ref = PodRef(ns, name, uid)
            inputs = self.profiles.snapshot()
            key = _version_key(pod, uid)
            hit: tuple[ColocationInputs, PodRequest | None] | None = (
                self._parsed.get(key) if key is not None else None)
            if hit is not None and hit[0] == inputs:
                preq = hit[1]
            else:
                preq = parse_pod(pod, memory_unit_mib=self.memory_unit_mib, colocation=inputs)
                if key is not None:  # thread-safe: preempt parses in the thread pool
                    self._parsed.put(key, (inputs, preq))
        except PodSpecError as exc:
            raise PodError(f"pod {_pod_label(pod)}: {exc}") from None
        self.memo.remember(ref, preq)
        return ref, preq

    def _ask(self, ref: PodRef, preq: PodRequest, *, may_wait: bool = True) -> Ask:
        return ask_for(preq, ref.uid, policy=self.policy,
                       colocation_policy=self.colocation_policy,
                       pending=getattr(self.state, "pending", None),
                       lookahead_pods=self.lookahead_pods, may_wait=may_wait)

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
        admit = getattr(self.state, "admit_pending", None)
        if admit is not None:  # a pod the state's watch has not delivered yet
            admit(args.Pod)
        try:
            rows = self.decider.decide(self._ask(ref, preq), nodes, verb="filter")
        except BadRequest as exc:
            return _filter_result(by_objects, [], {}, {}, f"pod {_pod_label(args.Pod)}: {exc}")
        pending = getattr(self.state, "pending", None)
        left = None
        if pending is not None and any(r.outcome.postponed for r in rows):
            pending.postponed(ref.uid)  # the bounded wait starts at the first postponement
            left = pending.wait_left(ref.uid)
        return _filter_reply(by_objects, rows, left)

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

    def preempt(self, args: ExtenderPreemptionArgs) -> dict[str, Any]:
        """``POST /preempt``: of the scheduler's (node, victims) proposals, those whose
        eviction gives the pod a placement its policy accepts, victims unchanged.

        Either request form is accepted: ``NodeNameToMetaVictims`` (victims by UID,
        ``nodeCacheCapable: true``) or ``NodeNameToVictims`` (full pods); the reply always
        names victims by UID, as kube-scheduler expects. A pod that asks for no gputopo
        resource gets the proposals back unchanged (they are not the extender's to judge);
        an invalid pod gets none (no eviction can place it; the reason is logged). See
        :mod:`scheduler_extender.preemption` for why a proposal is kept whole or dropped.

        Returns:
            An ``ExtenderPreemptionResult`` dict: ``{"NodeNameToMetaVictims": {node:
            {"Pods": [{"UID": uid}, ...], "NumPDBViolations": n}}}``.
        """
        proposals = _proposals(args)
        try:
            ref, preq = self._parse_pod(args.Pod)
        except PodError as exc:
            log.warning("preempt: %s; no node is kept", exc)
            self._count_preemption(0, len(proposals))
            return _preemption_result({})
        if preq is None:
            return _preemption_result({n: p for n, p in proposals.items() if p.victims})
        try:
            # judged as it will be filtered once nominated: without postponement
            verdicts = self.preemption.judge(self._ask(ref, preq, may_wait=False), proposals)
        except BadRequest as exc:
            log.warning("preempt: pod %s: %s; no node is kept", ref, exc)
            self._count_preemption(0, len(proposals))
            return _preemption_result({})
        kept = {v.name: v.proposal for v in verdicts if v.keep}
        self._count_preemption(len(kept), len(verdicts) - len(kept))
        for v in verdicts:
            if v.keep and v.decision is not None:
                log.info("preempt: pod %s on %s: evicting %d pod(s) frees GPUs %s",
                         ref, v.name, len(v.proposal.victims), list(v.decision.gpus))
            elif not v.keep:
                log.info("preempt: pod %s: node %s dropped: %s", ref, v.name, v.reason)
        return _preemption_result(kept)

    def _count_preemption(self, kept: int, dropped: int) -> None:
        if self.metrics is not None:
            self.metrics.preemption_nodes.labels(outcome="kept").inc(kept)
            self.metrics.preemption_nodes.labels(outcome="dropped").inc(dropped)

    def bind(self, args: ExtenderBindingArgs) -> dict[str, str]:
        """``POST /bind``: decide again under the node's lock, reserve, then bind.

        Returns:
            ``{"Error": ""}`` when bound, else ``{"Error": reason}`` with nothing held.
        """
        pod = PodRef(args.PodNamespace, args.PodName, args.PodUID)
        return {"Error": self.binder.bind(pod, args.Node).error}

    def bind_prepare(self, args: ExtenderBindingArgs) -> PendingBind | dict[str, str] | None:
        """The first half of ``POST /bind`` (:meth:`Binder.prepare`): decide and reserve,
        without an API call.

        Returns:
            a :class:`PendingBind` for :meth:`bind_commit`; ``{"Error": reason}`` (nothing
            held); None when the pod must be fetched from the API (call :meth:`bind`).
        """
        pod = PodRef(args.PodNamespace, args.PodName, args.PodUID)
        step = self.binder.prepare(pod, args.Node, fetch=False)
        if isinstance(step, BindResult):
            return {"Error": step.error}
        return step

    def bind_commit(self, pending: PendingBind) -> dict[str, str]:
        """The second half of ``POST /bind`` (:meth:`Binder.commit`): the API call
        (blocking).

        Returns:
            ``{"Error": ""}`` when bound, else ``{"Error": reason}`` with nothing held.
        """
        return {"Error": self.binder.commit(pending).error}


# ---------------------------------------------------------------------- wire helpers
#: Pods whose parsed request is kept by (UID, resourceVersion): a filter's pod for its
#: prioritize (oldest dropped first).
_PARSED_SIZE = 4096
#: Candidates by node name (``nodeCacheCapable`` calls name every node, every pod): a
#: name-only Candidate is immutable, so one per name is shared by every call; forgotten
#: wholesale past this many names (nodes come and go).
_NAMED: dict[str, Candidate] = {}
_NAMED_SIZE = 65_536


def _version_key(pod: Mapping[str, Any], uid: str) -> tuple[str, str] | None:
    """``(uid, resourceVersion)`` of a pod dict, None when either is missing."""
    meta = pod.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return (uid, rv) if uid and isinstance(rv, str) and rv else None


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
    names = args.NodeNames or []
    if len(_NAMED) + len(names) > _NAMED_SIZE:
        _NAMED.clear()
    named = _NAMED.get
    return [named(n) or _NAMED.setdefault(n, Candidate(n)) for n in names]


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


def _proposals(args: ExtenderPreemptionArgs) -> dict[str, VictimSet]:
    """The (node → victims) proposals of an ``ExtenderPreemptionArgs``, in either form.

    A victim's allocation keys are its UID and, from a full ``v1.Pod``, ``namespace/name``;
    a null entry is a node with no victims.
    """
    out: dict[str, VictimSet] = {}
    if args.NodeNameToMetaVictims is not None:
        for node, meta in args.NodeNameToMetaVictims.items():
            if meta is None:
                out[node] = VictimSet(())
                continue
            victims = tuple(Victim(p.UID, frozenset((p.UID,))) for p in meta.Pods or ())
            out[node] = VictimSet(victims, meta.NumPDBViolations)
    elif args.NodeNameToVictims is not None:
        for node, full in args.NodeNameToVictims.items():
            if full is None:
                out[node] = VictimSet(())
                continue
            out[node] = VictimSet(
                tuple(_victim(p) for p in full.Pods or ()), full.NumPDBViolations
            )
    return out


def _victim(pod: Mapping[str, Any]) -> Victim:
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    uid = meta.get("uid")
    uid = uid if isinstance(uid, str) else ""
    keys = {uid} if uid else set()
    name = meta.get("name")
    if isinstance(name, str) and name:
        keys.add(f"{meta.get('namespace') or 'default'}/{name}")
    return Victim(uid, frozenset(keys))


def _preemption_result(kept: Mapping[str, VictimSet]) -> dict[str, Any]:
    return {
        "NodeNameToMetaVictims": {
            node: {
                "Pods": [{"UID": v.uid} for v in proposal.victims],
                "NumPDBViolations": proposal.pdb_violations,
            }
            for node, proposal in kept.items()
        }
    }


def _filter_reply(by_objects: bool, rows: list[NodeDecision],
                  wait_left_s: float | None = None) -> dict[str, Any]:
    """The ``ExtenderFilterResult`` of ``rows``; a postponing node's reason also says how
    long the pod may still wait (``wait_left_s``, s; what ``kubectl describe pod`` shows in
    kube-scheduler's FailedScheduling event)."""
    passed: list[Any] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for r in rows:
        if r.outcome.passes:
            passed.append(r.node if by_objects else r.name)
        elif r.outcome.unresolvable:
            unresolvable[r.name] = r.outcome.reason
        elif r.outcome.postponed and wait_left_s is not None:
            failed[r.name] = (f"{r.outcome.reason}; it waits for a better set at most "
                              f"{math.ceil(wait_left_s):.0f} s more, then takes the best here")
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
