"""Binding: which pod, decide again under the node's lock, reserve, bind, release on failure.

:class:`Binder` is the extender's only writer of the cluster state. For one bind it

1. checks the pod's identity (the ``PodUID`` against the live pod's) and finds its request:
   the one filter parsed (:class:`RequestMemo`), else the pod fetched from the state backend;
2. takes the per-node lock (:meth:`Binder.node_lock`) — two binds to one node never decide on
   the same state;
3. refuses a pod the state already shows bound (a confirmed allocation: the API has it on a
   node with its annotations) or still holds a reservation for (its earlier bind is in flight,
   or succeeded and the watch has not confirmed it yet: deciding again would let go of GPUs
   the API may already have given it — kube-scheduler, whose bind call timed out, retries
   later and then meets the confirmed allocation; a failed bind has already released its
   reservation);
4. decides again on the node's current state (:meth:`Decider.decide_exact`, exact, no budget)
   and *reserves* the decision (:meth:`ClusterState.reserve`, which refuses a GPU or share
   already taken, even if two binds raced past the lock);
5. outside the lock, asks the backend to bind the pod with its assignment annotations, both
   or neither (:meth:`ClusterState.bind`; on Kubernetes one Binding carrying the annotations,
   :mod:`scheduler_extender.kubernetes_state`); on any failure it releases the reservation
   unless the state has meanwhile seen the pod bound, so nothing is held that the API does not
   hold.

Steps 1–4 are :meth:`Binder.prepare` (no API call unless the pod must be fetched), step 5 is
:meth:`Binder.commit`. The extender's ``/bind`` route runs ``prepare`` the moment the request
arrives, on its event loop, and only the API call waits for a bind thread: kube-scheduler
sends the next pod's filter while this pod's bind is still in flight, and that filter must
already see these GPUs taken, or several pods are sent to the same last free GPUs (or share)
and all but one fail at bind.

The reservation stays until the state backend confirms the binding (the memory backend at
once; the Kubernetes backend when its pod watch delivers the bound, annotated pod), so the
GPUs are taken from the moment of the decision on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from scheduler_extender.decision import BadRequest, Decider, ask_for
from scheduler_extender.metrics import Metrics
from scheduler_extender.podspec import (
    PodRequest,
    PodSpecError,
    parse_pod,
    pod_identity,
)
from scheduler_extender.profiles import ProfileLayers
from scheduler_extender.state import BindError, ClusterState, PodRef, ReservationConflict
from topology.contract import DEFAULT_VGPU_MEMORY_UNIT_MIB
from topology.policies.base import MAX_UPCOMING, Decision

log = logging.getLogger("gputopo.extender")

_MEMO_SIZE = 10_000


class RequestMemo:
    """The requests filter parsed, by pod UID (bounded, newest kept), so bind need not fetch
    the pod again. Thread-safe."""

    def __init__(self, size: int = _MEMO_SIZE) -> None:
        self._size = size
        self._d: OrderedDict[str, PodRequest | None] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, pod: PodRef, request: PodRequest | None) -> None:
        """Keep ``request`` (None = a pass-through pod) for ``pod`` (ignored without a UID)."""
        if not pod.uid:
            return
        with self._lock:
            self._d[pod.uid] = request
            self._d.move_to_end(pod.uid)
            if len(self._d) > self._size:
                self._d.popitem(last=False)

    def get(self, uid: str) -> tuple[bool, PodRequest | None]:
        """``(seen, request)`` for pod ``uid``."""
        if uid and uid in self._d:
            return True, self._d.get(uid)
        return False, None


@dataclass(frozen=True)
class BindResult:
    """How one bind ended.

    Attributes:
        error: "" when bound, else the reason (the wire reply's ``Error``); nothing is held.
        kind: the failure class counted in ``gputopo_extender_bind_errors_total{reason}``
            (``uid-mismatch``, ``unknown-pod``, ``already-bound``, ``bad-pod``, ``no-fit``,
            ``conflict``, ``api``, ``internal``); "" when bound.
        decision: what was bound (None for a pass-through pod or a failure).
    """

    error: str = ""
    kind: str = ""
    decision: Decision | None = None

    @property
    def ok(self) -> bool:
        """The pod is bound."""
        return not self.error


@dataclass(frozen=True)
class PendingBind:
    """A bind decided and reserved (:meth:`Binder.prepare`), waiting for its API call
    (:meth:`Binder.commit`).

    Attributes:
        pod: the pod (its UID filled in when the state knew it).
        node: the node it goes to.
        decision: the GPUs reserved for it; None for a pod without gputopo resources.
    """

    pod: PodRef
    node: str
    decision: Decision | None


class Binder:
    """Bind pods over a :class:`ClusterState`, deciding with a :class:`Decider`.

    Args:
        state: the cluster state backend (reserve, bind, release).
        decider: decides again on the node's current state.
        memo: the requests filter parsed.
        policy: the default policy (pods may pick another with ``gputopo.io/policy``).
        metrics: where to count decisions and bind errors (optional).
        memory_unit_mib: MiB per ``gputopo.io/vgpu-memory`` device (pods fetched here).
        lookahead_pods: pending pods a lookahead policy weighs (the same as filter's, read
            again at bind: :func:`scheduler_extender.pending.with_lookahead`).
    """

    def __init__(
        self, state: ClusterState, decider: Decider, memo: RequestMemo, policy: str,
        metrics: Metrics | None = None, memory_unit_mib: int = DEFAULT_VGPU_MEMORY_UNIT_MIB,
        *, profiles: ProfileLayers | None = None, colocation_policy: str = "gputopo",
        lookahead_pods: int = MAX_UPCOMING,
    ) -> None:
        self.profiles = profiles or ProfileLayers()
        self.lookahead_pods = lookahead_pods
        self.colocation_policy = colocation_policy
        self.state = state
        self.memory_unit_mib = memory_unit_mib
        self.decider = decider
        self.memo = memo
        self.policy = policy
        self.metrics = metrics
        self._node_locks: dict[str, threading.Lock] = {}
        self._node_locks_lock = threading.Lock()

    def node_lock(self, node: str) -> threading.Lock:
        """The lock serialising binds to ``node``."""
        lock = self._node_locks.get(node)
        if lock is None:
            with self._node_locks_lock:
                lock = self._node_locks.setdefault(node, threading.Lock())
        return lock

    def _fetch_request(self, pod: PodRef) -> tuple[PodRequest | None, str]:
        """The request of a pod no filter call was seen for, from the API (I/O); or why it
        is unknown."""
        obj = self.state.fetch_pod(pod.namespace, pod.name)
        if obj is None:
            return None, (
                f"pod {pod} is unknown to the extender: no filter call was seen for it and "
                f"the state backend cannot fetch it"
            )
        try:
            _ns, _name, uid = pod_identity(obj)
            if pod.uid and uid and uid != pod.uid:
                return None, f"pod {pod} has UID {uid}, the bind names {pod.uid}"
            return parse_pod(obj, memory_unit_mib=self.memory_unit_mib,
                             colocation=self.profiles.snapshot()), ""
        except PodSpecError as exc:
            return None, f"pod {pod}: {exc}"

    def bind(self, pod: PodRef, node: str) -> BindResult:
        """Bind ``pod`` to ``node`` on the GPUs its policy picks there now: :meth:`prepare`,
        then :meth:`commit`.

        Returns:
            :class:`BindResult`: bound, or why not with nothing held.
        """
        step = self.prepare(pod, node)
        assert step is not None  # fetch=True never defers
        return step if isinstance(step, BindResult) else self.commit(step)

    def prepare(
        self, pod: PodRef, node: str, *, fetch: bool = True
    ) -> PendingBind | BindResult | None:
        """Steps 1–4 (module docstring): check the pod, decide on ``node`` under its lock and
        reserve the decision. No API call — except fetching a pod no filter call was seen
        for, which only happens with ``fetch`` (else None is returned and the caller runs
        :meth:`bind` where blocking is fine). The extender runs this as soon as the bind
        request arrives, on its event loop, so the next pods' filter sees the GPUs taken even
        while the API call waits for a connection.

        Returns:
            :class:`PendingBind` (reserved, to :meth:`commit`); a failed
            :class:`BindResult` (nothing held); None (``fetch`` is False and the pod must be
            fetched).
        """
        known_uid = self.state.pod_uid(pod.namespace, pod.name)
        if known_uid and pod.uid and known_uid != pod.uid:
            return self._fail(
                pod, node, f"PodUID {pod.uid} does not match the live pod's UID {known_uid}",
                "uid-mismatch",
            )
        if not pod.uid and known_uid:
            pod = PodRef(pod.namespace, pod.name, known_uid)
        seen, preq = self.memo.get(pod.uid)
        if not seen:
            if not fetch:
                return None
            preq, why = self._fetch_request(pod)
            if why:
                return self._fail(pod, node, why, "unknown-pod")
        if preq is None:  # pass-through pod: just bind
            return PendingBind(pod, node, None)
        ask = ask_for(preq, pod.uid, policy=self.policy,
                      colocation_policy=self.colocation_policy,
                      pending=getattr(self.state, "pending", None),
                      lookahead_pods=self.lookahead_pods)
        if ask.required_node is not None and ask.required_node != node:
            return self._fail(
                pod, node, f"the gputopo planner placed this pod on node {ask.required_node}, "
                "not here (gputopo.io/planned-node)", "planned-elsewhere",
            )
        with self.node_lock(node):
            view = self.decider.bind_view(node)
            held = self.state.allocation(pod.key)
            if held is not None and held.confirmed:
                gpus = ",".join(str(g) for g in held.gpus)
                return self._fail(
                    pod, node, f"pod {pod} is already bound to {held.node} (GPUs {gpus})",
                    "already-bound",
                )
            if held is not None:
                gpus = ",".join(str(g) for g in held.gpus)
                return self._fail(
                    pod, node, f"a bind of pod {pod} to {held.node} (GPUs {gpus}) is in flight "
                    "or awaiting the watch's confirmation; not deciding again", "in-flight",
                )
            try:
                outcome = self.decider.decide_exact(ask, view)
            except BadRequest as exc:
                return self._fail(pod, node, str(exc), "bad-pod")
            decision = outcome.decision
            if decision is None:
                return self._fail(pod, node, f"cannot bind: {outcome.reason}", "no-fit")
            try:
                self.state.reserve(pod.key, node, decision, pod=pod)
            except ReservationConflict as exc:
                return self._fail(pod, node, f"cannot reserve: {exc}", "conflict")
        return PendingBind(pod, node, decision)

    def commit(self, pending: PendingBind) -> BindResult:
        """Step 5: the backend binds the pod with its decision (on Kubernetes one Binding
        round trip; blocking); on failure the reservation is released unless the state has
        meanwhile seen the pod bound.

        Returns:
            :class:`BindResult`: bound, or why not with nothing held.
        """
        pod, node, decision = pending.pod, pending.node, pending.decision
        started = time.perf_counter()
        try:
            self.state.bind(pod, node, decision)
        except BindError as exc:
            if decision is not None and not exc.maybe_written:
                self.state.release(pod.key, reservation_only=True)
            return self._fail(pod, node, str(exc), "api")
        except Exception as exc:  # noqa: BLE001 - roll back whatever went wrong
            if decision is not None:
                self.state.release(pod.key, reservation_only=True)
            log.exception("bind %s -> %s failed", pod, node)
            return self._fail(pod, node, f"{type(exc).__name__}: {exc}", "internal")
        finally:
            if self.metrics is not None:
                self.metrics.bind_api.observe(time.perf_counter() - started)
        if decision is None:
            log.info("bind %s -> %s (no gputopo resources)", pod, node)
            return BindResult()
        if self.metrics is not None:
            self.metrics.decisions.labels(policy=decision.policy).inc()
        gpus = ",".join(str(g) for g in decision.gpus)
        if decision.colocation is not None:
            c = decision.colocation
            what = (f"gpu={gpus} co-location slot: {len(c.chosen.residents)} resident(s), "
                    f"sum of C {c.chosen.sum_c:.3g}, predicted delta {c.chosen.delta:.2f}")
        elif decision.fractional:
            what = f"gpu={gpus} share={decision.core_percent}%/{decision.memory_mib}MiB"
        else:
            what = f"gpus={gpus} effbw={decision.effective_bandwidth_gbps:.1f}GB/s"
        log.info("bind %s -> %s %s policy=%s", pod, node, what, decision.policy)
        return BindResult(decision=decision)

    def _fail(self, pod: PodRef, node: str, reason: str, kind: str) -> BindResult:
        if self.metrics is not None:
            self.metrics.bind_errors.labels(reason=kind).inc()
        log.warning("bind %s -> %s failed: %s", pod, node, reason)
        return BindResult(error=reason, kind=kind)
