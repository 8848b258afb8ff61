"""The decision layer on its own: typed results, a node evaluated without some pods'
allocations (what preemption asks) and a request the policy refuses, inline and on workers."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool

import pytest

from scheduler_extender.decision import Ask, BadRequest, Candidate, Decider, NodeDecision, Outcome
from scheduler_extender.metrics import Metrics
from scheduler_extender.state import MemoryState, PodRef
from scheduler_extender.workers import Job, Status, WorkerResult, remote_decide
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


def test_a_node_the_policy_refuses_on_a_worker_fails_with_the_policy_reason() -> None:
    """A share asked of a 16-GPU node whose GPUs are all held whole passes the precheck (a
    share's precheck reads only GPU memory) and goes to a worker (no cost estimate yet for a
    16-GPU shape): the worker's no-fit must come back as a failed node with the policy's
    reason, not as a node that passes."""
    big = catalog.get("mapa-cubemesh-16")
    state = MemoryState({"big": big})
    holder = PodRef("default", "holder", "uid-holder")
    state.reserve(holder.key, "big", place("baseline", big, NodeState(), Request(16)),
                  pod=holder)
    decider = Decider(state, Metrics(), budget_ms=60_000, workers=1)
    try:
        ask = Ask(Request(0, core_percent=50), "gputopo", pod_uid="u")
        (row,) = decider.decide(ask, [Candidate("big")])
        assert row.outcome.decision is None and not row.outcome.passes
        assert not row.outcome.provisional and not row.outcome.unresolvable
        # the policy's own words: what the same decision made in this thread says
        (inline,) = Decider(state).decide(ask, [Candidate("big")])
        assert row.outcome.reason == inline.outcome.reason != ""
        # the same outcome again, from the cache the worker's result filled
        (again,) = decider.decide(ask, [Candidate("big")])
        assert again.outcome == row.outcome
    finally:
        decider.close()


def test_a_job_that_ended_without_an_outcome_is_decided_again_here() -> None:
    """A queued job another call claimed and decided in its own thread ends with no outcome
    when that decision raised (``WorkerPool.complete(job, None)``); a call that waited on the
    job must then decide the node itself — here, exactly as a decider without a budget."""
    state, _ = busy_cluster()
    decider = Decider(state)
    request = Request(4, pattern=ring(4))
    view = state.node_view("idle")
    job = Job(("gputopo", view.group, 0), (), None)
    job.done.set()  # finished, result None, error None
    got = decider._take("gputopo", view, request, 0, job)
    assert isinstance(got, Outcome) and got.decision is not None
    (want,) = Decider(state).decide(Ask(request, "gputopo"), [Candidate("idle")])
    assert got == want.outcome


class FinishedAtOncePool:
    """A worker pool that runs each job as it is submitted, in this thread: every job is
    already done when the decider looks at it (what a fast worker sometimes does first)."""

    def new_call(self) -> int:
        return 0

    def queued(self, key: object) -> Job | None:
        return None

    def submit(self, call: int, position: int, key: object, args: tuple[object, ...],
               on_result: Callable[[WorkerResult], object], *, reprioritize: bool) -> Job:
        job = Job(key, args, on_result)
        job.result = on_result(remote_decide(*args))  # type: ignore[arg-type]
        job.done.set()
        return job

    def stop(self) -> None:
        pass


def test_jobs_done_before_the_decider_looks_give_every_node_its_outcome() -> None:
    """Two 16-GPU nodes (their decisions go to the workers) whose jobs are both finished by
    the time the decider reads them: each node gets its own worker outcome, the ones a
    decider without a budget gives."""
    rows = decided_like_without_a_budget(FinishedAtOncePool())
    assert all(r.outcome.decision is not None for r in rows)


def decided_like_without_a_budget(pool: FinishedAtOncePool) -> list[NodeDecision]:
    """A 3-GPU ring decided with a budget and ``pool`` as the workers on two 16-GPU nodes
    (their decisions go to the workers; one node has an unhealthy GPU); asserts every node got
    the outcome and score a decider without a budget gives, and returns the rows."""
    big = catalog.get("mapa-cubemesh-16")
    state = MemoryState({"a": big, "b": big})
    state.book.set_unhealthy("b", [0])
    decider = Decider(state, Metrics(), budget_ms=60_000, workers=0)
    decider.workers = pool  # type: ignore[assignment]
    ask = Ask(Request(3, pattern=ring(3)), "gputopo", pod_uid="u")
    rows = decider.decide(ask, [Candidate("a"), Candidate("b")], scored=True)
    want = Decider(state).decide(ask, [Candidate("a"), Candidate("b")], scored=True)
    assert [(r.name, r.outcome, r.score) for r in rows] == [
        (r.name, r.outcome, r.score) for r in want]
    return rows


def test_prioritize_decides_small_nodes_in_its_own_time_without_workers() -> None:
    """Prioritize without a filter before it (the cache empty), a budget, no workers: an
    8-GPU node decides in about a millisecond, so it is decided inline and scored, not left
    provisional (0)."""
    state = MemoryState({"a": DGX, "b": DGX})
    state.book.set_unhealthy("b", [0])
    decider = Decider(state, Metrics(), budget_ms=60_000, workers=0)
    ask = Ask(Request(2, pattern=ring(2)), "gputopo", pod_uid="u")
    rows = decider.decide(ask, [Candidate("a"), Candidate("b")], verb="prioritize",
                          scored=True)
    want = Decider(state).decide(ask, [Candidate("a"), Candidate("b")], scored=True)
    assert [r.score for r in rows] == [r.score for r in want] and all(
        r.score for r in rows)
    assert not any(r.outcome.provisional for r in rows)


class _DiesWhileWaitedJob(Job):
    """A job a worker is running when the decider first looks, and whose worker process dies
    while the decider waits on it (the OOM killer, say): the wait ends with the job failed."""

    __slots__ = ()

    def wait(self, timeout: float | None) -> bool:
        self.error = BrokenProcessPool("a worker process died")
        self.done.set()
        return True


class WorkerDiesPool(FinishedAtOncePool):
    """A worker pool each of whose jobs is already running (the decider cannot claim it) and
    fails while waited on."""

    def submit(self, call: int, position: int, key: object, args: tuple[object, ...],
               on_result: Callable[[WorkerResult], object], *, reprioritize: bool) -> Job:
        job = _DiesWhileWaitedJob(key, args, on_result)
        job.started = True
        return job

    def claim(self, job: Job) -> bool:
        return False


def test_a_job_whose_worker_died_while_waited_on_is_decided_here() -> None:
    """Two 16-GPU nodes sent to the workers (no cost estimate for the shape yet); their
    worker dies while the decider waits: each node is decided in this thread instead — the
    answers and scores a decider without a budget gives, not a failed verb."""
    rows = decided_like_without_a_budget(WorkerDiesPool())
    assert all(r.outcome.decision is not None and not r.outcome.provisional for r in rows)


class PolicyFailsPool(FinishedAtOncePool):
    """A worker pool on which the policy raises (a bug): each job finishes at once with the
    worker's report of the failure."""

    def submit(self, call: int, position: int, key: object, args: tuple[object, ...],
               on_result: Callable[[WorkerResult], object], *, reprioritize: bool) -> Job:
        job = Job(key, args, on_result)
        job.result = on_result(WorkerResult(Status.FAILED, message="ZeroDivisionError: bug"))
        job.done.set()
        return job


def test_a_policy_that_fails_on_a_worker_fails_the_node_saying_so() -> None:
    """A policy that raises on a worker fails the node — not provisional, not passed — with a
    reason naming the policy and the worker's report, as a failure in this thread does
    (``policy <name> failed: <type>: <message>``)."""
    big = catalog.get("mapa-cubemesh-16")
    state = MemoryState({"big": big})
    decider = Decider(state, Metrics(), budget_ms=60_000, workers=0)
    decider.workers = PolicyFailsPool()  # type: ignore[assignment]
    ask = Ask(Request(3, pattern=ring(3)), "gputopo", pod_uid="u")
    (row,) = decider.decide(ask, [Candidate("big")], scored=True)
    assert not row.outcome.passes and not row.outcome.provisional and row.score == 0
    assert row.outcome.reason == "policy gputopo failed: ZeroDivisionError: bug"


def test_with_queue_keeps_every_other_field_of_the_ask() -> None:
    """``_with_queue`` builds the Ask positionally (it is on the lookahead's hot path): a field
    added to Ask must be carried over there too, and this test says so."""
    import dataclasses

    from scheduler_extender.decision import _with_queue
    from topology.numa_alignment import PodDemand
    from topology.policies.base import Upcoming

    ask = Ask(Request(count=3, pattern=ring(3), wait_for_better=True), "gputopo", "uid-1",
              "n1", PodDemand(container_cpus=4, pod_cpus=4))
    waiting = (Upcoming(count=2),)
    out = _with_queue(ask, waiting)
    assert out.request.upcoming == waiting and out.request.wait_for_better
    for f in dataclasses.fields(Ask):
        if f.name != "request":
            assert getattr(out, f.name) == getattr(ask, f.name), f.name
    assert dataclasses.replace(out, request=ask.request) == ask
