"""The extender's pending view (`scheduler_extender/pending.py`): which watched pods it keeps,
what it forgets, the queue it hands the lookahead, and the condition times it writes — the
cases mutation testing found no test for (docs/testing.md, eighth round)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler_extender import pending as pending_mod
from scheduler_extender.pending import (
    PendingPods,
    placed_condition,
    postponed_at,
    postponed_condition,
    with_lookahead,
)
from tests.scheduler_extender.test_extender_lookahead import waiting
from topology.patterns import ring
from topology.policies.base import Request

SCHED = "gputopo-scheduler"


def view(**kw: Any) -> PendingPods:
    return PendingPods(SCHED, **kw)


def counts(p: PendingPods) -> list[int]:
    """The GPU counts of the pods the view hands the lookahead, in queue order."""
    return [u.count for u in p.upcoming()]


@pytest.mark.parametrize("change", [
    pytest.param(lambda pod: pod["status"].update(phase="Failed"), id="failed"),
    pytest.param(lambda pod: pod["status"].update(phase="Succeeded"), id="succeeded"),
    pytest.param(lambda pod: pod["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"),
                 id="being-deleted"),
    pytest.param(lambda pod: pod["spec"].update(nodeName="n1"), id="bound"),
    pytest.param(lambda pod: pod["metadata"].update(annotations={
        **pod["metadata"]["annotations"], "gputopo.io/pattern": "no-such-pattern"}),
        id="unreadable-request"),
])
def test_a_pod_that_ends_or_stops_being_a_readable_gpu_pod_leaves_the_view(change: Any) -> None:
    """A watched pod that failed, succeeded, is being deleted, was bound, or whose request
    can no longer be read is no longer waiting: the next watch event drops it, and a late
    scheduling request (``admit``) does not take it back."""
    p = view()
    pod = waiting("three", 3)
    p.observe(pod)
    assert counts(p) == [3]
    change(pod)
    p.observe(pod)
    assert counts(p) == []
    assert not p.admit(waiting("three", 3))
    assert counts(p) == []


def test_a_pod_without_a_scheduler_name_is_the_default_schedulers() -> None:
    """The API server defaults ``spec.schedulerName`` to ``default-scheduler``; a pod dict
    without it belongs to a view of that scheduler, and to no other."""
    pod = waiting("three", 3)
    del pod["spec"]["schedulerName"]
    default = PendingPods("default-scheduler")
    default.observe(pod)
    assert counts(default) == [3]
    ours = view()
    ours.observe(pod)
    assert counts(ours) == []


def test_a_pod_without_a_priority_ranks_as_priority_zero() -> None:
    """Queue order is priority, then creation: a pod with no ``spec.priority`` (no priority
    admission) ranks with the priority-0 pods, by creation time."""
    p = view()
    older = waiting("two", 2, created="2024-01-01T00:00:00Z", priority=0)
    newer = waiting("three", 3, created="2024-01-01T00:01:00Z")
    del newer["spec"]["priority"]
    p.observe(newer)
    p.observe(older)
    assert counts(p) == [2, 3]


@pytest.mark.parametrize("pod", [
    {},
    {"metadata": None, "spec": None, "status": None},
    {"metadata": {"uid": 7, "name": "x"}, "spec": {}, "status": {}},
    {"metadata": {"uid": "", "name": "x"}, "spec": {}, "status": {}},
    {"metadata": {"uid": "u", "name": "x"}, "spec": "oops", "status": ["oops"]},
])
def test_malformed_pods_are_ignored_not_raised_on(pod: dict[str, Any]) -> None:
    p = view()
    p.observe(pod)
    assert not p.admit(pod)
    assert counts(p) == []
    assert postponed_at(pod) is None


def test_the_forgotten_pods_are_bounded_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The view remembers at most ``_GONE_MAX`` forgotten UIDs (a late request must not take a
    bound pod back); past that the oldest is let go, and forgetting a pod again makes it the
    newest."""
    monkeypatch.setattr(pending_mod, "_GONE_MAX", 2)
    p = view()
    for name in ("a", "b"):
        p.discard(f"uid-{name}")
    p.discard("uid-a")  # a again: now newer than b
    p.discard("uid-c")  # three forgotten: the oldest, b, is let go
    assert p.admit(waiting("b", 2))
    assert not p.admit(waiting("a", 2)) and not p.admit(waiting("c", 2))
    assert counts(p) == [2]


def test_with_lookahead_reads_as_many_waiting_pods_as_asked() -> None:
    p = view()
    for name, gpus in (("two", 2), ("three", 3), ("four", 4)):
        p.observe(waiting(name, gpus, created=f"2024-01-01T00:0{gpus}:00Z"))
    req = Request(count=2, pattern=ring(2))
    assert [u.count for u in with_lookahead(req, "gputopo", p, "uid-two", 1).upcoming] == [3]
    assert [u.count for u in with_lookahead(req, "gputopo", p, "uid-two", 8).upcoming] == [3, 4]
    assert with_lookahead(req, "gputopo", p, "uid-two", 0).upcoming == ()
    # a fractional request is not weighed against whole-GPU jobs
    frac = Request(count=0, core_percent=50)
    assert with_lookahead(frac, "gputopo", p, "uid-x", 8) is frac


def test_a_bound_below_a_second_still_lets_a_pod_wait() -> None:
    p = view(postpone_max_s=0.5)
    p.observe(waiting("three", 3))
    assert p.may_wait("uid-three")


@pytest.fixture
def tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The extender's local time zone is not UTC (a container with ``TZ`` set)."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_condition_times_are_utc_whatever_the_local_zone(tokyo: None) -> None:
    start, now = 1_767_225_600.0, 1_767_225_600.0 + 90.4  # 2026-01-01T00:00:00Z, + 90.4 s
    assert time.localtime(start).tm_hour == 9  # the zone is in effect
    cond = postponed_condition(start, 1800)
    assert cond["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    placed = placed_condition(start, "n1", now)
    assert placed["lastTransitionTime"] == "2026-01-01T00:01:30Z"
    assert "from 2026-01-01T00:00:00Z for 90 s" in placed["message"]


def test_a_placed_condition_never_reports_a_negative_wait() -> None:
    """The wall clock may step back between the postponement and the bind: the wait then
    reads 0 s, not a negative (or invented) duration."""
    placed = placed_condition(1_767_225_600.0, "n1", 1_767_225_600.0 - 5)
    assert "for 0 s" in placed["message"]
