"""The GPU pods waiting to be scheduled, for the default policy's lookahead (issue 24).

The extender already watches every pod (:mod:`scheduler_extender.kubernetes_state`). A pod of
this extender's scheduler (``spec.schedulerName``) that asks for whole GPUs, has no node yet and
has not ended is *pending*; :class:`PendingPods` keeps them in the order kube-scheduler's
queue pops them and hands a lookahead policy the first
:data:`~topology.policies.base.MAX_UPCOMING` of them other than the pod being decided, as data
(:class:`~topology.policies.base.Upcoming`, in ``Request.upcoming``): the policy stays a pure
function. Shares and co-location slots are not listed (the lookahead weighs whole GPUs).

**Queue order.** kube-scheduler's ``PrioritySort`` pops the higher ``spec.priority`` first,
then the pod that entered the queue earlier (``QueuedPodInfo.Timestamp``: when its informer
delivered the pod, refreshed after each failed attempt; ``pkg/scheduler/framework/plugins/
queuesort/priority_sort.go``, ``backend/queue/scheduling_queue.go``). The view orders by
priority, then ``metadata.creationTimestamp``, then the order this watch first delivered the
pods — the API's creation order, which is the order kube-scheduler's informer enqueues them.
The timestamp has one-second resolution: a stream submitted at once (the
replay's 150 pods) is ordered by the watch, ``job-1, job-2, …``, not by name (``job-1,
job-10, job-100, …``). After a relist the watch order is the list's (by name) within a second.
Failed attempts are not mirrored: a pod kube-scheduler's own filters reject never reaches the
extender, and a pod this extender postponed is better left ahead in the view, as the job the
next decisions should leave a good set for.

**Bounded postponement.** For a bandwidth-sensitive multi-GPU pod the view knows,
:func:`with_lookahead` sets ``Request.wait_for_better``, and the default policy may then refuse
a busy node whose every free set is poor (filter reports ``postponed: ...``). kube-scheduler
then parks the pod among its unschedulable pods and retries it, after its backoff (1–10 s), on
the next event of any Pod or Node in the cluster (an extender's rejection registers them all:
``defaultEnqueueExtension`` in ``pkg/scheduler/framework/runtime/framework.go``), or after 5
min without one. The view remembers when filter first postponed each pod
(:meth:`PendingPods.postponed`); :attr:`PendingPods.postpone_max_s` after that the flag stays
off and the pod takes what the rule gives it. So the bound is on the delay the postponement
itself adds: a pod that queued an hour behind others for lack of GPUs still may wait for a good
set once it could start, as the simulators' jobs and the planner's gangs do. For a pod the view
does not know, or with ``postpone_max_s`` 0, the flag stays off: no pod waits without a bound.
kube-scheduler's filter call can arrive before this view's watch has delivered a new pod (both
read the API; the call comes milliseconds after the creation), so the Kubernetes state then
takes the pod in the request into the view (:meth:`PendingPods.admit`; not a pod the watch has
already forgotten: bound, ended or deleted) — whether a pod may wait does not depend on which
of the two came first. The clock survives a relist, and a failover: the extender that starts it
writes it into the pod as the condition :data:`CONDITION_POSTPONED` (``True``, its
``lastTransitionTime`` the start, one-second resolution; ``on_postponed``), and a view that
meets a pod carrying one continues that clock — a new leader's extender, or this one after a
restart, does not grant the pod a second full wait. When the bound ends the extender updates
the condition (reason ``PostponementEnded``): that update is itself a Pod event, so
kube-scheduler retries the pod then even in a quiet cluster, where nothing else would wake it
for 5 min (:mod:`scheduler_extender.kubernetes_state`). When the pod is bound the condition
turns ``False`` (reason ``Placed``, :func:`placed_condition`: when the wait began, how long it
lasted, the node), so ``kubectl describe pod`` of a running pod does not show it waiting.

Only the size, the pattern and the bandwidth sensitivity of a waiting pod matter; an
insensitive pod's pattern is dropped, so two queues that differ only there share cached
decisions.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from scheduler_extender.podspec import PodSpecError, request_from_pod
from topology.policies.base import MAX_UPCOMING, Request, Upcoming
from topology.policies.default import POSTPONE_MAX_S
from topology.policies.registry import get_policy

#: ``spec.schedulerName`` of the chart's scheduler profile (``scheduler.schedulerName``).
DEFAULT_SCHEDULER_NAME = "gputopo-scheduler"

#: Entries a :class:`PendingPods` keeps in each of its small caches (cleared when full).
_SHAPES_MAX = 256
#: UIDs of forgotten pods (bound, ended, deleted) a :class:`PendingPods` remembers, so that a
#: late scheduling request does not take one back (:meth:`PendingPods.admit`); the oldest go
#: first.
_GONE_MAX = 4096

#: The pod condition that records when the extender first postponed a pod for a better GPU
#: set (``status: "True"``, ``lastTransitionTime``: the start of its bounded wait; module
#: docstring, "Bounded postponement"). Written through ``pods/status`` (a strategic-merge
#: patch keyed by ``type``, beside kube-scheduler's ``PodScheduled``).
CONDITION_POSTPONED = "gputopo.io/PostponedForBetterGPUs"


def upcoming_of(request: Request) -> Upcoming | None:
    """The lookahead's view of a whole-GPU request (None for shares and co-location slots):
    its count, its pattern when it is bandwidth sensitive, its sensitivity."""
    if request.fractional or request.shared is not None:
        return None
    sensitive = request.sensitive
    pattern = request.pattern if sensitive and request.count > 1 else None
    return Upcoming(request.count, pattern, sensitive)


class PendingPods:
    """Pending whole-GPU pods of one scheduler, in queue order (thread-safe).

    Args:
        scheduler_name: the ``spec.schedulerName`` whose pods are kept.
        postpone_max_s: how long (s, from its first postponement) a pod may be postponed for
            a better set (module docstring); 0 = never.
        clock: monotonic clock (s), for tests.
        wall: wall clock (Unix s), to read and write :data:`CONDITION_POSTPONED`.
        on_postponed: called (outside the lock) with a pod's UID, the wall time (Unix s) its
            postponement clock started, and whether it started here (True: to be written
            into the pod) or was taken from the pod's :data:`CONDITION_POSTPONED` (False);
            the Kubernetes state persists it and wakes the pod at the bound. It must not
            block (filter calls it).
    """

    def __init__(self, scheduler_name: str = DEFAULT_SCHEDULER_NAME, *,
                 postpone_max_s: float = POSTPONE_MAX_S,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 on_postponed: Callable[[str, float, bool], None] | None = None) -> None:
        self.scheduler_name = scheduler_name
        self.postpone_max_s = postpone_max_s
        self._clock = clock
        self._wall = wall
        self.on_postponed = on_postponed
        # uid -> when the watch first delivered it: a sequence number, its queue position
        # among pods created in one second (module docstring, "Queue order")
        self._first_seen: dict[str, int] = {}
        # uid -> clock of its first postponement (the start of its bounded wait); the last
        # relist's leftovers wait in _carried until the pod is listed again
        self._postponed: dict[str, float] = {}
        self._carried: dict[str, float] = {}
        self._next = itertools.count()
        self._pods: dict[str, tuple[tuple[int, str, int], Upcoming]] = {}
        self._order: list[tuple[tuple[int, str, int], str]] | None = []
        # (exclude, limit) -> upcoming()'s answer while the queue is unchanged (_order):
        # filter, prioritize and bind of one pod ask alike
        self._listed: dict[tuple[str, int], tuple[Upcoming, ...]] = {}
        # one Upcoming per distinct view (equal ones are one object): its cached key() is
        # then computed once per shape, not on the first filter after each watch event
        self._shapes: dict[Upcoming, Upcoming] = {}
        # UIDs forgotten since (at most _GONE_MAX, oldest first): never pending again
        self._gone: dict[str, None] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, uid: object) -> bool:
        """Pod ``uid`` is pending here."""
        with self._lock:
            return uid in self._pods

    def add(self, uid: str, upcoming: Upcoming, *, priority: int = 0,
            created: str = "", postponed_at: float | None = None,
            only_new: bool = False) -> bool:
        """Keep (or update) pending pod ``uid``; ``created`` is its RFC 3339 creation time
        (strings of one format sort by time). A pod first added before another of the same
        priority and creation second comes first (module docstring, "Queue order").
        ``postponed_at`` (Unix s, from the pod's :data:`CONDITION_POSTPONED`) starts its
        postponement clock then, unless this view already holds an earlier one. With
        ``only_new`` a pod the view holds or has forgotten is left as it is. Returns whether
        the pod was kept or updated."""
        adopted = False
        with self._lock:
            if only_new and (uid in self._first_seen or uid in self._gone):
                return False
            if len(self._shapes) >= _SHAPES_MAX:
                self._shapes.clear()
            upcoming = self._shapes.setdefault(upcoming, upcoming)
            seen = self._first_seen.get(uid)
            if seen is None:
                seen = self._first_seen[uid] = next(self._next)
                since = self._carried.pop(uid, None)
                if since is not None:
                    self._postponed[uid] = since
            if postponed_at is not None:
                since = monotonic_since(postponed_at, self._clock, self._wall)
                if since < self._postponed.get(uid, math.inf):
                    adopted = uid not in self._postponed
                    self._postponed[uid] = since
            self._pods[uid] = ((-priority, created, seen), upcoming)
            self._order = None
        if adopted and self.on_postponed is not None and postponed_at is not None:
            self.on_postponed(uid, postponed_at, False)
        return True

    def discard(self, uid: str) -> None:
        """Forget pod ``uid`` (bound, ended, deleted); a no-op when unknown."""
        with self._lock:
            self._first_seen.pop(uid, None)
            self._postponed.pop(uid, None)
            if self._pods.pop(uid, None) is not None:
                self._order = None
            self._gone.pop(uid, None)
            self._gone[uid] = None
            if len(self._gone) > _GONE_MAX:
                del self._gone[next(iter(self._gone))]

    def clear(self) -> None:
        """Forget every pod (a relist). A pod's postponement clock survives one relist: it is
        restored when the pod is added again before the next one."""
        with self._lock:
            self._pods.clear()
            self._first_seen.clear()
            self._carried, self._postponed = self._postponed, {}
            self._order = []
            self._listed = {}

    def may_wait(self, uid: str) -> bool:
        """Pod ``uid`` is pending here, ``postpone_max_s`` is positive, and the pod was never
        postponed or first postponed less than :attr:`postpone_max_s` ago (module docstring,
        "Bounded postponement")."""
        with self._lock:
            if uid not in self._first_seen or self.postpone_max_s <= 0:
                return False
            since = self._postponed.get(uid)
            return since is None or self._clock() - since < self.postpone_max_s

    def postponed_since(self, uid: str) -> float | None:
        """The clock (s) when filter first postponed pending pod ``uid``, or None."""
        with self._lock:
            return self._postponed.get(uid)

    def wait_left(self, uid: str) -> float | None:
        """Seconds left of pending pod ``uid``'s bounded wait (0 once the bound has passed),
        or None when it was never postponed."""
        with self._lock:
            since = self._postponed.get(uid)
            if since is None:
                return None
            return max(0.0, since + self.postpone_max_s - self._clock())

    def postponed_wall(self, uid: str) -> float | None:
        """When filter first postponed pending pod ``uid``, as wall time (Unix s), or None."""
        with self._lock:
            since = self._postponed.get(uid)
            return None if since is None else wall_at(since, self._clock, self._wall)

    def postponed(self, uid: str) -> None:
        """Filter postponed pending pod ``uid`` (some node refused it with
        :class:`~topology.policies.base.Postponed`): its bounded wait starts now, unless it
        already started (then :attr:`on_postponed` is called). A no-op for a pod the view
        does not hold."""
        with self._lock:
            if uid not in self._first_seen or uid in self._postponed:
                return
            self._postponed[uid] = self._clock()
            started = self._wall()
        if self.on_postponed is not None:
            self.on_postponed(uid, started, True)

    def observe(self, pod: Mapping[str, Any]) -> None:
        """Apply one pod as the watch sees it: keep it when it is this scheduler's, asks for
        whole GPUs, has no node and has not ended; forget it otherwise. An invalid pod is
        forgotten (filter will report it)."""
        self._apply(pod, admit=False)

    def admit(self, pod: Mapping[str, Any]) -> bool:
        """Take ``pod`` from a scheduling request (kube-scheduler's filter) into the view when
        the watch has not delivered it yet (module docstring, "Bounded postponement"): as
        :meth:`observe` would, but never a pod the view holds already (the watch's copy is as
        new or newer) or has forgotten (bound, ended or deleted: such a request is late).
        Returns whether the view took it."""
        meta = pod.get("metadata")
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        with self._lock:  # the usual case, on every filter call: known, nothing to parse
            if uid in self._first_seen or uid in self._gone:
                return False
        return self._apply(pod, admit=True)  # add() checks again under the lock

    def _apply(self, pod: Mapping[str, Any], *, admit: bool) -> bool:
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        if not isinstance(uid, str) or not uid:
            return False
        spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
        status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
        assert isinstance(meta, Mapping) and isinstance(spec, Mapping)
        phase = status.get("phase") if isinstance(status, Mapping) else None
        if (spec.get("nodeName") or phase in ("Succeeded", "Failed")
                or meta.get("deletionTimestamp")
                or (spec.get("schedulerName") or "default-scheduler") != self.scheduler_name):
            if not admit:
                self.discard(uid)
            return False
        try:
            request = request_from_pod(pod)
        except PodSpecError:
            request = None
        up = upcoming_of(request) if request is not None else None
        if up is None:
            if not admit:
                self.discard(uid)
            return False
        priority = spec.get("priority")
        return self.add(uid, up, priority=priority if isinstance(priority, int) else 0,
                        created=str(meta.get("creationTimestamp") or ""),
                        postponed_at=postponed_at(pod), only_new=admit)

    def upcoming(self, exclude: str = "", limit: int = MAX_UPCOMING) -> tuple[Upcoming, ...]:
        """The first ``limit`` pending pods in queue order, ``exclude`` (a UID) left out."""
        if limit <= 0:
            return ()
        with self._lock:
            if self._order is None:
                self._order = sorted((key, uid) for uid, (key, _) in self._pods.items())
                self._listed = {}
            hit = self._listed.get((exclude, limit))
            if hit is not None:
                return hit
            out: list[Upcoming] = []
            for _, uid in self._order:
                if uid == exclude:
                    continue
                out.append(self._pods[uid][1])
                if len(out) == limit:
                    break
            if len(self._listed) >= _SHAPES_MAX:
                self._listed.clear()
            listed = self._listed[(exclude, limit)] = tuple(out)
            return listed


def postponed_at(pod: Mapping[str, Any]) -> float | None:
    """When an extender first postponed ``pod`` (Unix s): the ``lastTransitionTime`` of its
    :data:`CONDITION_POSTPONED` condition while ``True``; None without one (or unreadable)."""
    return _true_since(pod, CONDITION_POSTPONED)


def scheduled_at(pod: Mapping[str, Any]) -> float | None:
    """When ``pod`` was bound (Unix s): the ``lastTransitionTime`` of its ``PodScheduled``
    condition while ``True`` (the API server writes it with the Binding); None without one
    (or unreadable)."""
    return _true_since(pod, "PodScheduled")


def _true_since(pod: Mapping[str, Any], kind: str) -> float | None:
    """The ``lastTransitionTime`` (Unix s) of ``pod``'s condition ``kind`` while ``True``."""
    status = pod.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return None
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True":
            try:
                at = datetime.fromisoformat(str(c.get("lastTransitionTime")))
            except ValueError:
                return None
            return at.timestamp() if at.tzinfo is not None else None
    return None


def monotonic_since(at: float, clock: Callable[[], float], wall: Callable[[], float]) -> float:
    """A wait that began at wall time ``at`` (Unix s; :func:`postponed_at`) as a reading of
    the monotonic ``clock`` (``wall`` and ``clock`` read now); a start in the future (another
    host's clock, the condition's rounding up) counts as now."""
    return clock() - max(0.0, wall() - at)


def wall_at(since: float, clock: Callable[[], float], wall: Callable[[], float]) -> float:
    """A reading ``since`` of the monotonic ``clock`` as wall time (Unix s; ``wall`` and
    ``clock`` read now): :func:`monotonic_since` the other way."""
    return wall() - (clock() - since)


def postponed_condition(wall_s: float, postpone_max_s: float, *,
                        ended: bool = False) -> dict[str, str]:
    """The :data:`CONDITION_POSTPONED` condition for a wait that began at ``wall_s`` (Unix s)
    and may last ``postpone_max_s`` s (``ended``: the bound has passed): what ``kubectl
    describe pod`` shows. The API keeps whole seconds: the time is rounded up, so a view
    continuing the clock from the condition never ends the wait before the view that started
    it (it may grant up to 1 s more)."""
    at = datetime.fromtimestamp(math.ceil(wall_s), tz=UTC)
    if ended:
        reason, message = "PostponementEnded", (
            f"gputopo postponed this pod for a better GPU set for {postpone_max_s:.0f} s (its "
            "bound) from this condition's lastTransitionTime; it now takes what the rule "
            "gives it")
    else:
        reason, message = "WaitingForBetterGPUs", (
            f"gputopo postpones this pod for a better GPU set, at most {postpone_max_s:.0f} s "
            "from this condition's lastTransitionTime; then it takes what the rule gives it")
    return {"type": CONDITION_POSTPONED, "status": "True",
            "lastTransitionTime": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "reason": reason, "message": message}


def placed_condition(wall_s: float, node: str, now_s: float) -> dict[str, str]:
    """The :data:`CONDITION_POSTPONED` condition of a postponed pod once it is placed on
    ``node``: ``status`` ``False`` (it waits no more; reason ``Placed``), its
    ``lastTransitionTime`` ``now_s`` (Unix s), the message giving when the wait began
    (``wall_s``, Unix s, as :func:`postponed_condition` wrote it) and how long it lasted. A
    view that meets it continues no clock (:func:`postponed_at` reads ``True`` only)."""
    start = datetime.fromtimestamp(math.ceil(wall_s), tz=UTC)
    now = datetime.fromtimestamp(math.floor(now_s), tz=UTC)
    waited = max(0.0, now_s - math.ceil(wall_s))
    return {"type": CONDITION_POSTPONED, "status": "False",
            "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "reason": "Placed",
            "message": (f"gputopo postponed this pod for a better GPU set from "
                        f"{start.strftime('%Y-%m-%dT%H:%M:%SZ')} for {waited:.0f} s; it was "
                        f"then placed on node {node}")}


def may_postpone(request: Request, policy: str) -> bool:
    """The bounded postponement applies to ``request`` under ``policy``: whole GPUs, bandwidth
    sensitive and several (``Request.postponable``), and a policy that reads
    ``Request.wait_for_better`` (``PolicySpec.lookahead``). Callers add the bound and whether
    the pod may wait at all (the extender's :func:`with_lookahead`, the DRA allocator).

    Raises:
        UnknownPolicy: ``policy`` is not registered.
    """
    return (request.postponable and not request.fractional and request.shared is None
            and get_policy(policy).lookahead)


def with_lookahead(request: Request, policy: str, pending: PendingPods | None, uid: str,
                   limit: int, *, may_wait: bool = True) -> Request:
    """``request`` with the pending pods as ``Request.upcoming`` when ``policy`` reads them
    (``PolicySpec.lookahead``) and the request is for whole GPUs, and with
    ``Request.wait_for_better`` for a bandwidth-sensitive multi-GPU pod the view lets wait
    (:meth:`PendingPods.may_wait`) — not when ``may_wait`` is False (a pod the planner placed,
    ``gputopo.io/planned-node``: its node is decided, and a gang's pod must not hold up its
    gang); else ``request`` itself.

    Raises:
        UnknownPolicy: ``policy`` is not registered.
    """
    if (pending is None or request.fractional or request.shared is not None
            or not get_policy(policy).lookahead):
        return request
    waiting = pending.upcoming(exclude=uid, limit=min(limit, MAX_UPCOMING)) if limit > 0 else ()
    wait = may_wait and may_postpone(request, policy) and pending.may_wait(uid)
    if waiting == request.upcoming and wait == request.wait_for_better:
        return request
    return request.with_queue(waiting, wait)
