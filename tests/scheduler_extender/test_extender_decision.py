"""The decision layer on its own: typed results, a node evaluated without some pods'
allocations (what preemption asks) and a request the policy refuses, inline and on workers."""

from __future__ import annotations

import pytest

from scheduler_extender.decision import Ask, BadRequest, Candidate, Decider
from scheduler_extender.metrics import Metrics
from scheduler_extender.state import MemoryState, PodRef
from scheduler_extender.workers import Status, WorkerResult, remote_decide
from topology import catalog
from topology.patterns import ring
from topology.policies.base import NodeState, Request
from topology.policies.evaluate import Evaluator
from topology.serialization import dumps

#: This module's own evaluator (decision cache and policy memo; nothing shared).
place = Evaluator().place

DGX = catalog.get("dgx1-v100")


def busy_cluster() -> tuple[MemoryState, list[str]]:
    """Two DGX-1 nodes; on ``full`` two pods hold all eight GPUs."""
    state = MemoryState({"full": DGX, "idle": DGX})
    keys = []
    for i, gpus in enumerate(((0, 1, 2, 3), (4, 5, 6, 7))):
        d = place("baseline", DGX, NodeState.whole([g for g in range(8) if g not in gpus]),
                  Request(4))
        assert d.gpus == gpus
        ref = PodRef("default", f"holder-{i}", f"uid-holder-{i}")
        state.reserve(ref.key, "full", d, pod=ref)
        keys.append(ref.key)
    return state, keys


def test_decide_returns_one_typed_result_per_candidate_in_order() -> None:
    state, _ = busy_cluster()
    decider = Decider(state)
    ask = Ask(Request(4, pattern=ring(4)), "gputopo")
    rows = decider.decide(ask, [Candidate("idle"), Candidate("full"), Candidate("ghost")],
                          scored=True)
    assert [r.name for r in rows] == ["idle", "full", "ghost"]
    idle, full, ghost = rows
    assert idle.outcome.passes and idle.outcome.decision is not None
    assert len(idle.outcome.decision.gpus) == 4 and idle.score is not None and idle.score > 0
    assert not full.outcome.passes and not full.outcome.unresolvable
    assert "only 0 of 8 GPUs free" in full.outcome.reason and full.score == 0
    assert ghost.outcome.unresolvable and ghost.score == 0


def test_a_node_without_some_pods_is_decided_without_touching_the_live_state() -> None:
    state, keys = busy_cluster()
    decider = Decider(state)
    ask = Ask(Request(4, pattern=ring(4)), "gputopo")
    live_before = state.node_state("full")
    # evicting one holder frees its four GPUs: the pod fits, on exactly those
    (row,) = decider.decide(ask, [Candidate("full", without=frozenset(keys[:1]))])
    assert row.outcome.decision is not None
    assert row.outcome.decision.gpus == (0, 1, 2, 3)
    # and the same request on the live node still does not fit
    (live,) = decider.decide(ask, [Candidate("full")])
    assert live.outcome.decision is None
    assert state.node_state("full") == live_before
    assert len(state.allocations()) == 2
    # the view without both holders is the idle node's state (same group, cache shared)
    assert state.node_view("full", without=frozenset(keys)).group == state.node_view(
        "idle").group


def test_a_request_the_policy_refuses_is_a_bad_request() -> None:
    state, _ = busy_cluster()
    decider = Decider(state)
    ask = Ask(Request(2, profile="lenet"), "topo-aware")
    with pytest.raises(BadRequest, match="unknown job profile 'lenet'"):
        decider.decide(ask, [Candidate("idle")])


def test_a_worker_reports_a_refused_request_as_a_typed_result() -> None:
    out = remote_decide("topo-aware", dumps(DGX), NodeState(), Request(2, profile="lenet"))
    assert isinstance(out, WorkerResult) and out.status is Status.BAD_REQUEST
    assert "unknown job profile" in out.message and out.seconds >= 0
    ok = remote_decide("gputopo", dumps(DGX), NodeState(), Request(2))
    assert ok.status is Status.OK and ok.decision is not None and ok.score is not None


def test_a_refused_request_raises_through_the_worker_pool() -> None:
    state, _ = busy_cluster()
    decider = Decider(state, Metrics(), budget_ms=60_000, workers=1)
    try:
        ask = Ask(Request(2, profile="lenet"), "topo-aware", pod_uid="u")
        # 16-GPU machines go to the workers first (no cost estimate yet)
        state.add_node("big", catalog.get("mapa-cubemesh-16"))
        with pytest.raises(BadRequest, match="unknown job profile"):
            decider.decide(ask, [Candidate("big")])
    finally:
        decider.close()


def test_prioritize_scores_every_node_class_on_one_scale() -> None:
    """A mixed cluster: the sensitive pod's idle DGX outscores the idle PCIe box (each alone
    would score 10); a node that cannot host the pod does not set the scale."""
    a100 = catalog.get("dgx-a100")
    state = MemoryState({"dgx": DGX, "pcie": catalog.get("pcie-8gpu"), "a100": a100})
    decider = Decider(state)
    ask = Ask(Request(4, pattern=ring(4)), "gputopo")
    names = [Candidate("dgx"), Candidate("pcie"), Candidate("a100")]
    for only in ("dgx", "pcie"):
        (alone,) = decider.decide(ask, [Candidate(only)], scored=True)
        assert alone.score == 10
    dgx, pcie, a100_row = decider.decide(ask, names, scored=True)
    assert a100_row.score == 10 and a100_row.score > dgx.score > pcie.score  # type: ignore[operator]
    # the A100 full: the DGX is the best host left and is the reference again
    d = place("baseline", a100, NodeState(), Request(8))
    ref = PodRef("default", "a100-holder", "uid-a100-holder")
    state.reserve(ref.key, "a100", d, pod=ref)
    dgx, pcie, a100_row = decider.decide(ask, names, scored=True)
    assert a100_row.score == 0 and dgx.score == 10
    assert pcie.score is not None and pcie.score < 10
