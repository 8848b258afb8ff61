"""What the DRA allocator tells the API about a pod over its life: the Event of a pod that
waits, the postponement condition's three steps (waiting, the bound ended, placed), the
``Placed`` repair of a pod bound without a ``PodScheduled`` time, and a stop that lets the
writes in flight land (thirteenth mutation round, docs/testing.md)."""

from __future__ import annotations

import copy
import threading
from typing import Any

from scheduler_extender.kubernetes_state import ApiError
from scheduler_extender.pending import CONDITION_POSTPONED
from tests.scheduler_extender.dra_fakes import (
    claim_obj,
    cluster,
    drain,
    gpus,
    held_claim_writes,
    pod_obj,
)
from tests.scheduler_extender.test_dra_allocator import (
    _five_on_the_issue_set,
    _indices,
    _met_by_a_new_allocator,
    _placed_lost,
    _three_postponed,
)
from topology import dra
from topology.contract import ANN_GPU_INDICES, ANN_NODE, ANN_PATTERN


def test_a_pod_that_waits_gets_a_gpu_allocation_pending_event() -> None:
    alloc, api = cluster({"n0": "dgx1-v100"})
    api.add_claim(claim_obj("ns", "big", [gpus("g", 9)]))
    api.add_pod(pod_obj("ns", "big", [("g", "big")]))
    drain(alloc)
    assert [(n, r) for n, r, _m in api.events] == [("big", "GPUAllocationPending")]
    assert api.events[0][2].startswith("no node has the GPUs: n0: ")


def test_the_condition_says_waiting_then_ended_then_placed() -> None:
    """Issue 24's postponed ring: its condition is written three times, in this order —
    waiting (at its first postponement), the bound ended (at the bound, still ``True``: it
    now takes what the rule gives), placed (``False``, once its claim is allocated)."""
    now, wall = [0.0], [1_767_225_600.0]
    written: list[dict[str, str]] = []
    alloc, api = _three_postponed(now, wall)
    patch = api.patch_pod_conditions

    def record(namespace: str, name: str, uid: str, conditions: list[dict[str, str]]) -> None:
        written.extend(copy.deepcopy(conditions))
        patch(namespace, name, uid, conditions)

    api.patch_pod_conditions = record
    now[0], wall[0] = now[0] + 300.0, wall[0] + 300.0
    assert alloc.recheck_postponed() == ["ns/three"]
    drain(alloc)
    alloc.stop()
    assert [(c["type"], c["status"], c["reason"]) for c in written] == [
        (CONDITION_POSTPONED, "True", "PostponementEnded"),
        (CONDITION_POSTPONED, "False", "Placed")]
    assert written[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # the wait's start
    assert written[1]["message"].endswith("it was then placed on node n0")
    assert "for 300 s (its bound)" in written[0]["message"]


def test_a_pod_bound_without_a_scheduled_time_is_marked_placed_as_of_the_allocators_clock(
) -> None:
    """The ``Placed`` repair of a pod whose binding left no ``PodScheduled`` condition (a
    bind by another client) dates it by the allocator's wall clock when it reads the pod."""
    now, wall = [0.0], [1_767_225_600.0]
    alloc, api = _placed_lost(now, wall)  # the bound ended at 00:05:00
    live = api.pods["ns/three"]
    before = copy.deepcopy(live)
    live["spec"]["nodeName"] = "n0"
    alloc.on_pod("DELETED", before)  # the pending watch: it left, condition still True
    now[0] += alloc.placed_check_s
    wall[0] += 12.0
    assert alloc.check_placed() == ["ns/three"]
    alloc.stop()
    cond = {c["type"]: c for c in api.pods["ns/three"]["status"]["conditions"]}
    placed = cond[CONDITION_POSTPONED]
    assert (placed["status"], placed["reason"]) == ("False", "Placed")
    assert placed["lastTransitionTime"] == "2026-01-01T00:05:12Z"
    assert placed["message"].endswith("for 312 s; it was then placed on node n0")


def test_stop_waits_for_the_writes_in_flight() -> None:
    """A claim write still in flight when the allocator stops (a leader stepping down) lands
    before ``stop`` returns: the pod is not left with half its writes."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    gate = held_claim_writes(api)
    api.add_claim(claim_obj("ns", "c", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "p", [("g", "c")]))
    alloc.sync("ns/p")  # decided; the claim write waits for the gate
    opener = threading.Timer(0.2, gate.set)
    opener.start()
    alloc.stop()
    assert api.claims["ns/c"]["status"].get("allocation")
    assert api.pods["ns/p"]["spec"]["schedulingGates"] == []
    opener.join()


def test_gpus_whose_write_is_in_flight_are_not_handed_out_again() -> None:
    """Pod a is decided, its claim write still in flight: pod b, decided meanwhile on the same
    node, gets other GPUs; a decided pod is not listed as waiting, nor decided again."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    gate = held_claim_writes(api)
    for name, n in (("a", 4), ("b", 4)):
        api.add_claim(claim_obj("ns", name, [gpus("g", n)]))
        api.add_pod(pod_obj("ns", name, [("g", name)]))
    alloc.sync("ns/a")
    assert alloc.pending() == {}
    alloc.sync("ns/b")
    assert alloc.pending() == {}
    alloc.sync("ns/a")  # looked at again while its writes run: not decided again
    gate.set()
    drain(alloc)
    assert alloc.metrics.decisions == 2
    a, b = (set(api.claims[f"ns/{n}"]["status"]["allocation"]["devices"]["results"][i]["device"]
                for i in range(4)) for n in ("a", "b"))
    assert len(a) == len(b) == 4 and not a & b


def test_a_claim_shared_by_two_pods_decided_at_once_is_allocated_once() -> None:
    """Pods a and b share claim ``shared``; b also has its own. b is decided while a's
    writes are in flight: ``shared`` is held for a already, so b's decision is dropped — its
    own claim's reservation too — and b is decided again once ``shared`` is allocated: its
    own claim on the same node, on GPUs of its own."""
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"})
    gate = held_claim_writes(api)
    api.add_claim(claim_obj("ns", "shared", [gpus("g", 2)]))
    api.add_claim(claim_obj("ns", "own", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "a", [("s", "shared")]))
    api.add_pod(pod_obj("ns", "b", [("o", "own"), ("s", "shared")]))
    alloc.sync("ns/a")
    alloc.sync("ns/b")
    assert [a.pod.name for a in alloc.state.book.all()] == ["shared"]  # b's hold dropped
    gate.set()
    drain(alloc)
    shared, own = api.claims["ns/shared"], api.claims["ns/own"]
    node = shared["status"]["allocation"]["nodeSelector"]
    assert own["status"]["allocation"]["nodeSelector"] == node
    devs = [r["device"] for c in (shared, own)
            for r in c["status"]["allocation"]["devices"]["results"]]
    assert len(set(devs)) == 4
    assert [w for w in api.writes if w[0] == "claim"] == [("claim", "ns/shared"),
                                                         ("claim", "ns/own")]
    assert api.pods["ns/b"]["spec"]["schedulingGates"] == []


def test_a_release_retried_after_the_pod_changed_keeps_the_decisions_annotations() -> None:
    """The pod watch replaced the pod's record while it was decided, and the first gate
    removal failed (a 500): the retry, which finds the claim allocated already, still writes
    the decision's annotations (node, GPUs) with the gate's removal."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    pod = pod_obj("ns", "p", [("g", "c")])
    again = copy.deepcopy(pod)
    again["status"]["conditions"] = [{"type": "PodScheduled", "status": "False"}]
    decide = alloc.decider.decide

    def decide_while_the_pod_changes(*args: Any, **kwargs: Any) -> Any:
        alloc.on_pod("MODIFIED", again)
        return decide(*args, **kwargs)

    alloc.decider.decide = decide_while_the_pod_changes  # type: ignore[method-assign]
    release = api.release_pod
    calls = [0]

    def flaky(pod: Any, annotations: Any) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise ApiError("500 injected", 500)
        release(pod, annotations)

    api.release_pod = flaky  # type: ignore[method-assign]
    api.add_claim(claim_obj("ns", "c", [gpus("g", 2)]))
    api.add_pod(pod)
    alloc.sync("ns/p")
    alloc.decider.decide = decide  # type: ignore[method-assign]
    drain(alloc)
    assert calls[0] == 2
    live = api.pods["ns/p"]
    assert live["spec"]["schedulingGates"] == []
    held = [dra.parse_device_name(r["device"]).index
            for r in api.claims["ns/c"]["status"]["allocation"]["devices"]["results"]]
    ann = live["metadata"]["annotations"]
    assert ann[ANN_NODE] == "n0"
    assert ann[ANN_GPU_INDICES] == ",".join(map(str, sorted(held)))


def test_a_pod_placed_before_its_bound_is_not_marked_ended_at_the_bound() -> None:
    """The postponed ring is placed within its bound (the 5-GPU pod left); kube-scheduler
    has not bound it yet when the bound passes: its condition stays ``Placed`` — the bound's
    recheck was dropped with the decision."""
    now, wall = [0.0], [1_767_225_600.0]
    alloc, api = _three_postponed(now, wall)
    api.delete_pod("ns/five")
    drain(alloc)
    assert len(api.claims["ns/three"]["status"]["allocation"]["devices"]["results"]) == 3
    writes = api.writes.count(("conditions", "ns/three"))
    now[0], wall[0] = now[0] + 300.0, wall[0] + 300.0
    assert alloc.recheck_postponed() == []
    drain(alloc)
    alloc.stop()
    assert api.writes.count(("conditions", "ns/three")) == writes
    cond = {c["type"]: c for c in api.pods["ns/three"]["status"]["conditions"]}
    assert (cond[CONDITION_POSTPONED]["status"], cond[CONDITION_POSTPONED]["reason"]) == (
        "False", "Placed")


def test_a_waiting_pod_changed_or_deleted() -> None:
    """A pod that waits keeps waiting across a change the watch delivers (listed, no second
    Event for the same reason); deleted, it is no longer listed nor decided when GPUs free."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    api.add_claim(claim_obj("ns", "big", [gpus("g", 6)]))
    api.add_pod(pod_obj("ns", "big", [("g", "big")]))
    for name in ("a", "b"):
        api.add_claim(claim_obj("ns", name, [gpus("g", 4)]))
        api.add_pod(pod_obj("ns", name, [("g", name)]))
    drain(alloc)
    assert set(alloc.pending()) == {"ns/a", "ns/b"}
    live = api.pods["ns/a"]
    live["metadata"].setdefault("labels", {})["changed"] = "yes"
    alloc.on_pod("MODIFIED", copy.deepcopy(live))
    drain(alloc)
    assert set(alloc.pending()) == {"ns/a", "ns/b"}
    assert [n for n, _r, _m in api.events] == ["a", "b"]
    alloc.on_pod("DELETED", api.pods.pop("ns/b"))
    assert set(alloc.pending()) == {"ns/a"}
    api.delete_pod("ns/big")
    drain(alloc)
    assert api.claims["ns/a"]["status"].get("allocation")
    assert api.claims["ns/b"]["status"] == {}
    assert ("claim", "ns/b") not in api.writes


def test_a_release_retried_after_a_pod_event_during_the_writes_keeps_the_annotations() -> None:
    """The pod watch delivers a change while the claim is being written, and the first gate
    removal fails: the retry still writes the decision's annotations."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    release = api.release_pod
    calls = [0]

    def flaky(pod: Any, annotations: Any) -> None:
        calls[0] += 1
        if calls[0] == 1:
            live = api.pods["ns/p"]
            live["metadata"].setdefault("labels", {})["changed"] = "yes"
            alloc.on_pod("MODIFIED", copy.deepcopy(live))
            raise ApiError("500 injected", 500)
        release(pod, annotations)

    api.release_pod = flaky  # type: ignore[method-assign]
    api.add_claim(claim_obj("ns", "c", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "p", [("g", "c")]))
    drain(alloc)
    assert calls[0] == 2
    ann = api.pods["ns/p"]["metadata"]["annotations"]
    assert ann[ANN_NODE] == "n0" and ann[ANN_GPU_INDICES]


def test_a_continued_clock_is_not_ended_early_while_the_claim_is_awaited() -> None:
    """A new leader meets a pod 200 s into its 300 s wait before the pod's claim reaches its
    claim watch: the bound still ends 100 s later, not at once."""
    now, wall = [0.0], [1_767_225_600.0]
    alloc, api = _three_postponed(now, wall)
    pod = copy.deepcopy(api.pods["ns/three"])
    now[0], wall[0] = 5000.0, wall[0] + 200
    fresh, api2 = cluster({"n0": "dgx1-v100"}, postpone_max_s=300,
                          monotonic=lambda: now[0], wall=lambda: wall[0])
    api2.add_pod(pod)  # its claim not seen yet
    drain(fresh)
    assert fresh.recheck_postponed() == []
    now[0] += 99.0
    assert fresh.recheck_postponed() == []
    now[0] += 1.0
    assert fresh.recheck_postponed() == ["ns/three"]
    fresh.stop()
    alloc.stop()


def test_without_a_bound_a_pod_never_shows_the_postponement_condition() -> None:
    """``postpone_max_s`` 0 turns the postponement off: issue 24's ring takes {1,5,6} at
    once and its pod never carries the condition (not even for a moment)."""
    alloc, api = _five_on_the_issue_set(postpone_max_s=0)
    api.add_claim(claim_obj("ns", "three", [gpus("g", 3)]))
    api.add_pod(pod_obj("ns", "three", [("g", "three")], annotations={ANN_PATTERN: "ring"}))
    drain(alloc)
    assert len(api.claims["ns/three"]["status"]["allocation"]["devices"]["results"]) == 3
    assert ("conditions", "ns/three") not in api.writes


def test_a_one_second_bound_still_postpones_and_a_new_allocator_continues_it() -> None:
    """Any positive ``postpone_max_s`` postpones — 1 s too (a bound is not rounded to 0): the
    ring waits, its pod says so, and it takes {1,5,6} when the second is up. A new allocator
    meeting that pod half a second in ends the wait half a second later, continuing the
    pod's clock rather than starting its own. (Round 13's "1 s bound treated as 0" survivors.)"""
    now, wall = [0.0], [1_767_225_600.0]
    alloc, api = _three_postponed(now, wall, bound=1)
    pod = copy.deepcopy(api.pods["ns/three"])
    assert pod["status"]["conditions"][0]["reason"] == "WaitingForBetterGPUs"
    alloc.stop()
    now[0], wall[0] = 5000.0, wall[0] + 0.5  # another process: another monotonic origin
    fresh, api2 = _met_by_a_new_allocator(pod, now, wall, bound=1)
    now[0] += 0.4
    assert fresh.recheck_postponed() == []
    now[0] += 0.1
    assert fresh.recheck_postponed() == ["ns/three"]
    drain(fresh)
    assert sorted(_indices(api2.claims["ns/three"])) == [1, 5, 6]
    fresh.stop()
