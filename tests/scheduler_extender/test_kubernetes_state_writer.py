"""KubernetesState's postponement writer (``_write_loop``), driven by hand: what is written
for a pod postponed here, taken from another extender, bound, gone or admitted from a filter
request; one writer, first in first out; the wakes it keeps; a process it does not keep
alive. Tests wait on the patches the fake API received, in order. (docs/testing.md, "Ninth
round".)"""

from __future__ import annotations

import calendar
import copy
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler_extender.kubernetes_state import ApiError, KubernetesState
from scheduler_extender.pending import CONDITION_POSTPONED, postponed_condition
from scheduler_extender.state import PodRef
from tests.scheduler_extender.kube_state_helpers import (
    DGX,
    PatchLog,
    SlowPatches,
    decision_on,
    listed,
    waiting_pod,
)


@pytest.fixture
def patches() -> Iterator[tuple[PatchLog, KubernetesState]]:
    api = PatchLog()
    api.add_node("n1", DGX)
    state = listed(api)
    yield api, state
    state.stop()


def test_binding_a_postponed_pod_marks_it_placed_and_no_other(
    patches: tuple[PatchLog, KubernetesState]
) -> None:
    """Bound, a postponed pod's condition turns ``Placed`` on its node and it leaves the
    pending view at once; a pod never postponed gets no condition. (The writer is FIFO: the
    patch of a pod postponed afterwards is the next one.)"""
    fake, kube = patches
    for name in ("a", "b", "c"):
        kube.apply_pod_event("ADDED", waiting_pod(fake, name, f"u-{name}"))
    kube.pending.postponed("u-a")
    assert fake.next_patch() == ("a", "WaitingForBetterGPUs")
    kube.bind(PodRef("default", "a", "u-a"), "n1", decision_on((4, 5)))
    assert "u-a" not in kube.pending and kube.pending.postponed_since("u-a") is None
    assert fake.next_patch() == ("a", "Placed")
    placed = fake.pods["u-a"]["status"]["conditions"][0]
    assert placed["status"] == "False" and placed["message"].endswith("on node n1")
    kube.bind(PodRef("default", "b", "u-b"), "n1", decision_on((6, 7)))
    assert "u-b" not in kube.pending
    kube.pending.postponed("u-c")
    assert fake.next_patch() == ("c", "WaitingForBetterGPUs")
    assert "conditions" not in fake.pods["u-b"]["status"]


def test_a_clock_taken_from_the_pod_is_not_written_again(
    patches: tuple[PatchLog, KubernetesState]
) -> None:
    """A pod carrying another extender's postponement condition continues that clock: this
    extender writes nothing (the condition is already there) until the bound, when it wakes
    the pod; a pod postponed here is written at once and not woken before its bound."""
    fake, kube = patches
    kube.pending.postpone_max_s = 3600.0
    held = waiting_pod(fake, "held", "u-held")
    held["status"]["conditions"] = [postponed_condition(time.time(), 3600.0)]
    kube.apply_pod_event("ADDED", held)
    assert kube.pending.postponed_since("u-held") is not None
    for name in ("a", "b"):
        kube.apply_pod_event("ADDED", waiting_pod(fake, name, f"u-{name}"))
    kube.pending.postponed("u-a")
    kube.pending.postponed("u-b")
    assert fake.next_patch() == ("a", "WaitingForBetterGPUs")  # nothing for "held" before
    assert fake.next_patch() == ("b", "WaitingForBetterGPUs")  # no wake of "a" in between
    assert fake.patched.empty()


def test_a_pod_admitted_from_a_request_is_named_as_the_watch_would(
    patches: tuple[PatchLog, KubernetesState]
) -> None:
    """A pod kube-scheduler asks about before the watch delivers it joins the pending view
    under its namespace and name: ``pod_uid`` knows it, and its postponement is written into
    that pod (a pod without a namespace is in ``default``)."""
    fake, kube = patches
    pod = waiting_pod(fake, "p", "u-p")
    fake.pods["u-p"]["metadata"]["namespace"] = pod["metadata"]["namespace"] = "team"
    kube.admit_pending(pod)
    assert "u-p" in kube.pending
    assert kube.pod_uid("team", "p") == "u-p" and kube.pod_uid("default", "p") is None
    kube.pending.postponed("u-p")
    assert fake.next_patch() == ("p", "WaitingForBetterGPUs")
    assert fake.pods["u-p"]["status"]["conditions"][0]["reason"] == "WaitingForBetterGPUs"
    bare = waiting_pod(fake, "q", "u-q")
    del bare["metadata"]["namespace"]
    kube.admit_pending(bare)
    assert kube.pod_uid("default", "q") == "u-q"


def test_a_lost_reply_proven_bound_marks_the_postponed_pod_placed_on_its_node(
    patches: tuple[PatchLog, KubernetesState]
) -> None:
    """A Binding whose reply is lost but whose read-back shows the pod bound with its
    decision counts as bound: the postponed pod's condition turns ``Placed`` on its node."""
    fake, kube = patches
    kube.apply_pod_event("ADDED", waiting_pod(fake, "a", "u-a"))
    kube.pending.postponed("u-a")
    assert fake.next_patch() == ("a", "WaitingForBetterGPUs")
    fake.lose_binding_reply = True
    kube.bind(PodRef("default", "a", "u-a"), "n1", decision_on((4, 5)))
    assert "u-a" not in kube.pending
    assert fake.next_patch() == ("a", "Placed")
    placed = fake.pods["u-a"]["status"]["conditions"][0]
    assert placed["message"].endswith("placed on node n1")


def test_a_postponed_pod_the_watch_sees_bound_before_the_reply_is_still_marked_placed(
    patches: tuple[PatchLog, KubernetesState]
) -> None:
    """The pod watch may deliver the bound pod before the Binding's reply reaches bind (the
    watch then forgets the pod and its clock): the postponed pod's condition still turns
    ``Placed``. (Seen once end to end: the restarted extender bound the pod on time and its
    condition stayed ``True``.)"""
    fake, kube = patches
    kube.apply_pod_event("ADDED", waiting_pod(fake, "a", "u-a"))
    kube.pending.postponed("u-a")
    assert fake.next_patch() == ("a", "WaitingForBetterGPUs")
    fake.after_binding = lambda: kube.apply_pod_event("MODIFIED", copy.deepcopy(fake.pods["u-a"]))
    kube.bind(PodRef("default", "a", "u-a"), "n1", decision_on((4, 5)))
    assert "u-a" not in kube.pending
    assert fake.next_patch() == ("a", "Placed")
    placed = fake.pods["u-a"]["status"]["conditions"][0]
    assert placed["message"].endswith("placed on node n1")


class _Reads:
    """Counts the fake API's pod reads (``get_pod``) and signals each one."""

    def __init__(self, fake: PatchLog) -> None:
        self.count = 0
        self.done = threading.Event()
        self._get = fake.get_pod
        fake.get_pod = self  # type: ignore[method-assign]

    def __call__(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._get(namespace, name)
        finally:
            self.count += 1
            self.done.set()


def _postponed_elsewhere(fake: PatchLog, kube: KubernetesState, name: str,
                         began: float) -> dict[str, Any]:
    """A pending pod ``name`` whose postponement another extender began at ``began`` (its
    condition ``True``), as the watch delivers it."""
    pod = waiting_pod(fake, name, f"u-{name}")
    fake.pods[f"u-{name}"]["status"]["conditions"] = pod["status"]["conditions"] = [
        postponed_condition(began, 1800.0)]
    kube.apply_pod_event("ADDED", pod)
    return pod


def _bind_elsewhere(fake: PatchLog, uid: str, node: str, at: str) -> dict[str, Any]:
    """Bind pod ``uid`` to ``node`` as another scheduler would: ``nodeName`` and
    ``PodScheduled`` (``True`` since ``at``), nothing of ours. Returns the watch's copy."""
    pod = fake.pods[uid]
    pod["spec"]["nodeName"] = node
    pod["status"].setdefault("conditions", []).append(
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": at})
    return copy.deepcopy(pod)


def _bound_here(fake: PatchLog, kube: KubernetesState, name: str) -> dict[str, Any]:
    """Pod ``name`` postponed and then bound by this extender (its ``Placed`` written);
    returns the watch's copy taken at the Binding, before that write: still ``True``."""
    uid = f"u-{name}"
    kube.apply_pod_event("ADDED", waiting_pod(fake, name, uid))
    kube.pending.postponed(uid)
    assert fake.next_patch() == (name, "WaitingForBetterGPUs")
    seen: list[dict[str, Any]] = []
    fake.after_binding = lambda: seen.append(copy.deepcopy(fake.pods[uid]))
    kube.bind(PodRef("default", name, uid), "n1", decision_on((4, 5)))
    assert fake.next_patch() == (name, "Placed")
    return seen[0]


def test_a_postponed_pod_bound_without_our_write_is_marked_placed_once(
    patches: tuple[PatchLog, KubernetesState]
) -> None:
    """A pod the watch shows bound with its postponement condition still ``True`` (bound by
    another scheduler, or by a bind whose outcome was unknown, or an extender that stopped
    before its write) is read again after :attr:`placed_check_s` and marked ``Placed``: when
    the wait began (from the condition), the node, and the ``PodScheduled`` time as its
    transition — the same condition whichever replica writes it. The watch's repeated events
    of that pod cost one read."""
    fake, kube = patches
    kube.placed_check_s = 0.05
    reads = _Reads(fake)
    began = float(int(time.time()) - 100)
    _postponed_elsewhere(fake, kube, "a", began)
    assert kube.pending.postponed_since("u-a") is not None  # the other extender's clock
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began + 90))
    bound = _bind_elsewhere(fake, "u-a", "n1", at)
    for _ in range(3):
        kube.apply_pod_event("MODIFIED", bound)
    assert "u-a" not in kube.pending
    assert fake.next_patch() == ("a", "Placed")
    placed = {c["type"]: c for c in fake.pods["u-a"]["status"]["conditions"]}[CONDITION_POSTPONED]
    assert placed["status"] == "False" and placed["lastTransitionTime"] == at
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began))
    assert placed["message"] == (f"gputopo postponed this pod for a better GPU set from {start} "
                                 "for 90 s; it was then placed on node n1")
    kube.apply_pod_event("MODIFIED", copy.deepcopy(fake.pods["u-a"]))  # False: nothing to check
    kube.stop()
    assert reads.count == 1 and fake.patched.empty()


def test_a_postponed_pod_bound_here_is_read_again_but_not_written_twice(
    patches: tuple[PatchLog, KubernetesState]
) -> None:
    """This extender's bind writes ``Placed`` itself; the watch's copy of the bound pod, taken
    before that write, still shows ``True``: the re-read finds ``False`` and writes nothing."""
    fake, kube = patches
    kube.placed_check_s = 0.05
    reads = _Reads(fake)
    seen = _bound_here(fake, kube, "a")
    kube.apply_pod_event("MODIFIED", seen)
    assert reads.done.wait(10)
    kube.stop()
    assert reads.count == 1 and fake.patched.empty()


def test_a_re_read_is_withdrawn_when_the_watch_shows_the_pod_placed(
    patches: tuple[PatchLog, KubernetesState]
) -> None:
    """The watch's copy of a pod this extender bound, taken before its ``Placed`` write,
    queues a re-read; the next copy, showing ``Placed``, withdraws it: no read. (Pod ``b``,
    bound elsewhere after it, is re-read and marked placed: its check was due after ``a``'s,
    so ``a``'s has had its turn.)"""
    fake, kube = patches
    kube.placed_check_s = 0.05
    reads = _Reads(fake)
    seen = _bound_here(fake, kube, "a")
    _postponed_elsewhere(fake, kube, "b", time.time())
    kube.apply_pod_event("MODIFIED", seen)  # bound, still True: a re-read is queued
    kube.apply_pod_event("MODIFIED", copy.deepcopy(fake.pods["u-a"]))  # Placed: withdrawn
    kube.apply_pod_event("MODIFIED", _bind_elsewhere(fake, "u-b", "n1", "2023-11-14T22:15:00Z"))
    assert fake.next_patch() == ("b", "Placed")
    kube.stop()
    assert reads.count == 1 and fake.patched.empty()


def test_a_re_read_is_withdrawn_when_the_pod_is_deleted(
    patches: tuple[PatchLog, KubernetesState]
) -> None:
    """A bound pod deleted before its re-read is due is not read again."""
    fake, kube = patches
    kube.placed_check_s = 0.05
    reads = _Reads(fake)
    _postponed_elsewhere(fake, kube, "a", time.time())
    bound = _bind_elsewhere(fake, "u-a", "n1", "2023-11-14T22:15:00Z")
    _postponed_elsewhere(fake, kube, "b", time.time())
    kube.apply_pod_event("MODIFIED", bound)
    kube.apply_pod_event("DELETED", bound)
    kube.apply_pod_event("MODIFIED", _bind_elsewhere(fake, "u-b", "n1", "2023-11-14T22:15:00Z"))
    assert fake.next_patch() == ("b", "Placed")
    kube.stop()
    assert reads.count == 1


@pytest.mark.parametrize("change", ["deleted", "replaced", "unreadable", "not-json"])
def test_a_bound_pod_that_cannot_be_read_again_is_left_alone(
    patches: tuple[PatchLog, KubernetesState], change: str
) -> None:
    """The re-read finds the pod gone, replaced under its name (another UID), the API
    fails, or its reply is not JSON (a proxy's error page: the client's decoder raises, not
    an :class:`ApiError`): nothing is written, and the writer goes on (a later pod is still
    written)."""
    fake, kube = patches
    kube.placed_check_s = 0.05
    _postponed_elsewhere(fake, kube, "a", time.time())
    bound = _bind_elsewhere(fake, "u-a", "n1", "2023-11-14T22:15:00Z")
    if change == "deleted":
        del fake.pods["u-a"]
    elif change == "replaced":
        fake.pods["u-a"]["metadata"]["uid"] = "u-other"
    else:
        def fail(namespace: str, name: str) -> dict[str, Any] | None:
            if change == "not-json":
                json.loads("<html>502 Bad Gateway</html>")
            raise ApiError("503 Service Unavailable", 503)
        fake.get_pod = fail  # type: ignore[method-assign]
    reads = _Reads(fake)
    kube.apply_pod_event("MODIFIED", bound)
    assert reads.done.wait(10)
    kube.apply_pod_event("ADDED", waiting_pod(fake, "b", "u-b"))
    kube.pending.postponed("u-b")
    assert fake.next_patch() == ("b", "WaitingForBetterGPUs")


def test_conditions_are_written_one_at_a_time_in_the_order_decided() -> None:
    """One writer, first in first out: a pod bound while its postponement's write is still
    in flight ends ``Placed`` — the ``Placed`` patch is not sent before the first one
    returns (a second writer would send it at once, and the late ``WaitingForBetterGPUs``
    would then show a running pod waiting)."""
    fake = SlowPatches()
    fake.add_node("n1", DGX)
    kube = listed(fake)
    try:
        kube.apply_pod_event("ADDED", waiting_pod(fake, "a", "u-a"))
        kube.pending.postponed("u-a")
        assert fake.entered.get(timeout=10) == "a"  # the first write is in flight
        kube.bind(PodRef("default", "a", "u-a"), "n1", decision_on((4, 5)))
        with pytest.raises(queue.Empty):  # a chance for a second writer to start: none may
            fake.entered.get(timeout=0.5)
        fake.go.set()
        assert fake.next_patch() == ("a", "WaitingForBetterGPUs")
        assert fake.next_patch() == ("a", "Placed")
        assert fake.pods["u-a"]["status"]["conditions"][0]["reason"] == "Placed"
    finally:
        fake.go.set()
        kube.stop()


def test_the_writer_does_not_keep_the_process_alive(tmp_path: Path) -> None:
    """The extender never stops its state (``gputopo extender`` exits on SIGTERM): a process
    whose postponement writer has started must still exit when its main thread ends."""
    script = tmp_path / "exits.py"
    script.write_text(
        "from scheduler_extender.kubernetes_state import KubernetesState\n"
        "from scheduler_extender.pending import DEFAULT_SCHEDULER_NAME\n"
        "from tests.scheduler_extender.fake_kube import FakeKubeAPI\n"
        "api = FakeKubeAPI()\n"
        "pod = api.add_pod('a', 'u-a', gpus=3)\n"
        "pod['spec']['schedulerName'] = DEFAULT_SCHEDULER_NAME\n"
        "kube = KubernetesState(api)\n"
        "kube.resync_pods()\n"
        "kube.pending.postponed('u-a')\n"
        "assert kube._writer is not None and kube._writer.is_alive()\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(script)], cwd=root, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()


def test_a_wake_survives_other_pods_placed_or_gone() -> None:
    """The writer keeps every pending wake whatever it writes in between: pod ``a`` is still
    woken at its bound after pod ``b`` was bound (its ``Placed`` write) and pod ``g`` was
    deleted before its postponement could be written (nothing written for it)."""
    fake = SlowPatches()
    fake.add_node("n1", DGX)
    kube = listed(fake)
    kube.pending.postpone_max_s = 0.5
    try:
        for name in ("a", "b", "g"):
            kube.apply_pod_event("ADDED", waiting_pod(fake, name, f"u-{name}"))
        kube.pending.postponed("u-a")
        assert fake.entered.get(timeout=10) == "a"  # the writer holds a's write
        kube.pending.postponed("u-b")
        kube.pending.postponed("u-g")
        kube.apply_pod_event("DELETED", copy.deepcopy(fake.pods["u-g"]))
        kube.bind(PodRef("default", "b", "u-b"), "n1", decision_on((4, 5)))
        fake.go.set()
        seen: list[tuple[str, ...]] = []
        while not {("a", "PostponementEnded"), ("b", "Placed")} <= set(seen):
            assert len(seen) < 10, seen  # four are due
            seen.append(fake.next_patch())
        assert [p for p in seen if p[0] == "a"] == [
            ("a", "WaitingForBetterGPUs"), ("a", "PostponementEnded")]
        assert [p for p in seen if p[0] == "b"] == [
            ("b", "WaitingForBetterGPUs"), ("b", "Placed")]
        assert not [p for p in seen if p[0] == "g"]
    finally:
        fake.go.set()
        kube.stop()


def test_a_failed_re_read_is_tried_again_at_the_pods_next_event(
    patches: tuple[PatchLog, KubernetesState]
) -> None:
    """A re-read that fails leaves the pod to its next event: the watch's next copy still
    showing the condition ``True`` queues another re-read, and that one marks it
    ``Placed``."""
    fake, kube = patches
    kube.placed_check_s = 0.0
    _postponed_elsewhere(fake, kube, "a", time.time())
    bound = _bind_elsewhere(fake, "u-a", "n1", "2023-11-14T22:15:00Z")
    get, failures = fake.get_pod, [ApiError("503 Service Unavailable", 503)]

    def fail_once(namespace: str, name: str) -> dict[str, Any] | None:
        if failures:
            raise failures.pop()
        return get(namespace, name)

    fake.get_pod = fail_once  # type: ignore[method-assign]
    reads = _Reads(fake)
    kube.apply_pod_event("MODIFIED", bound)
    assert reads.done.wait(10)
    assert fake.patched.empty()
    kube.apply_pod_event("MODIFIED", bound)  # e.g. the kubelet's status update
    assert fake.next_patch() == ("a", "Placed")
    assert reads.count == 2


def test_a_bound_pod_is_read_again_only_after_the_grace(
    patches: tuple[PatchLog, KubernetesState]
) -> None:
    """The re-read waits :attr:`placed_check_s`: the grace in which the binding extender
    writes ``Placed`` itself. A pod's wake due well before it comes first, with no read."""
    fake, kube = patches
    kube.placed_check_s = 3600.0
    kube.pending.postpone_max_s = 0.2
    reads = _Reads(fake)
    _postponed_elsewhere(fake, kube, "a", time.time())
    kube.apply_pod_event("MODIFIED", _bind_elsewhere(fake, "u-a", "n1", "2023-11-14T22:15:00Z"))
    kube.apply_pod_event("ADDED", waiting_pod(fake, "w", "u-w"))
    kube.pending.postponed("u-w")
    assert fake.next_patch() == ("w", "WaitingForBetterGPUs")
    assert fake.next_patch() == ("w", "PostponementEnded")
    assert reads.count == 0


def test_only_a_bound_pod_with_the_condition_true_is_read_again(
    patches: tuple[PatchLog, KubernetesState]
) -> None:
    """A pod still pending with its condition ``True`` (it waits), a bound pod without one
    (never postponed) or with it ``False`` (placed): none is read again. (The writer's next
    two patches come after any re-read those events could have queued.)"""
    fake, kube = patches
    kube.placed_check_s = 0.0
    reads = _Reads(fake)
    _postponed_elsewhere(fake, kube, "waiting", time.time())
    plain = waiting_pod(fake, "plain", "u-plain")
    kube.apply_pod_event("ADDED", plain)
    kube.apply_pod_event("MODIFIED", _bind_elsewhere(fake, "u-plain", "n1",
                                                     "2023-11-14T22:15:00Z"))
    done = _postponed_elsewhere(fake, kube, "done", time.time())
    cond = done["status"]["conditions"][0]
    cond.update(status="False", reason="Placed")
    done["spec"]["nodeName"] = "n1"
    kube.apply_pod_event("MODIFIED", done)
    kube.apply_pod_event("ADDED", waiting_pod(fake, "w", "u-w"))
    kube.pending.postponed("u-w")
    assert fake.next_patch() == ("w", "WaitingForBetterGPUs")
    kube.bind(PodRef("default", "w", "u-w"), "n1", decision_on((4, 5)))
    assert fake.next_patch() == ("w", "Placed")
    assert reads.count == 0


@pytest.mark.parametrize("found", ["placed", "no PodScheduled"])
def test_a_re_read_keeps_the_writers_wakes(
    patches: tuple[PatchLog, KubernetesState], found: str
) -> None:
    """Whatever the re-read finds — the pod already ``Placed`` by the binding extender, or
    bound without a ``PodScheduled`` condition (then marked ``Placed`` as of now) — the
    writer goes on: a wake due after the re-read still ends its pod's wait."""
    fake, kube = patches
    kube.placed_check_s = 0.05
    kube.pending.postpone_max_s = 0.5
    kube.apply_pod_event("ADDED", waiting_pod(fake, "w", "u-w"))
    kube.pending.postponed("u-w")
    assert fake.next_patch() == ("w", "WaitingForBetterGPUs")
    _postponed_elsewhere(fake, kube, "a", time.time() - 60)
    bound = _bind_elsewhere(fake, "u-a", "n1", "2023-11-14T22:15:00Z")
    live = fake.pods["u-a"]["status"]["conditions"]
    if found == "placed":
        live[0] = {**live[0], "status": "False", "reason": "Placed"}
    else:
        del live[1]  # no PodScheduled
    before = int(time.time())
    kube.apply_pod_event("MODIFIED", bound)
    if found == "placed":
        assert fake.next_patch() == ("w", "PostponementEnded")
        return
    # the two are due 0.45 s apart: a writer delayed that long does both in one pass
    assert {fake.next_patch(), fake.next_patch()} == {("a", "Placed"), ("w", "PostponementEnded")}
    placed = fake.pods["u-a"]["status"]["conditions"][0]
    assert placed["status"] == "False" and calendar.timegm(
        time.strptime(placed["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")) >= before
