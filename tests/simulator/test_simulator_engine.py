"""The engine's invariants: no GPU double-booked, every job finishes, same seed → same run;
the queue, postponement, interference and the run-time model."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import SimulationError
from simulator import runtime as rt
from simulator.engine import RunResult, Simulation
from simulator.workloads import Job, Workload, amaral_prototype, load_workload
from topology import catalog
from topology.patterns import ring
from topology.policies.common import MODEL_GPUTOPO
from topology.policies.memo import Memo

ALL_POLICIES = ["baseline", "nvidia-best-effort", "gaia", "mapa-greedy", "mapa-preserve",
                "topo-aware", "topo-aware-p", "fcfs", "best-fit", "gputopo"]
MACHINES = ["dgx1-v100", "minsky", "summit"]


def check_invariants(res: RunResult, nodes: int, size: int) -> None:
    intervals: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for rec in res.records:
        job = rec.job
        assert rec.start_s >= job.arrival_s - 1e-9  # never before submission
        assert rec.end_s > rec.start_s  # finished, after it started
        assert 0 <= rec.node < nodes
        assert len(rec.gpus) == job.gpus == len(set(rec.gpus))
        assert all(0 <= g < size for g in rec.gpus)
        assert sorted(rec.mapping) == sorted(rec.gpus)
        for g in rec.gpus:
            intervals[(rec.node, g)].append((rec.start_s, rec.end_s))
    for spans in intervals.values():  # no GPU held by two jobs at once
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end - 1e-9
    assert res.timeline[-1].busy_gpus == 0 and res.timeline[-1].running == 0
    assert all(0 <= s.busy_gpus <= nodes * size for s in res.timeline)


def fingerprint(res: RunResult) -> list[tuple[object, ...]]:
    return [(r.job.id, r.node, r.gpus, r.mapping, round(r.start_s, 9), round(r.end_s, 9),
             r.effbw_gbps, r.postponements) for r in res.records]


@st.composite
def workloads(draw: st.DrawFn, max_gpus: int) -> Workload:
    n = draw(st.integers(1, 14))
    jobs = []
    for i in range(n):
        k = draw(st.integers(1, max_gpus))
        prof = draw(st.sampled_from([None, "alexnet/tiny", "googlenet/big", "vgg16"]))
        jobs.append(Job(
            id=i, arrival_s=draw(st.sampled_from([0.0, 1.0, 5.5, 30.0, 100.0])), gpus=k,
            network="x", runtime_s=draw(st.floats(1.0, 500.0)),
            comm_share=draw(st.floats(0.0, 0.8)), sensitive=draw(st.booleans()),
            pattern=draw(st.sampled_from(["ring", "all-to-all", "tree"])), profile=prof,
            min_utility=draw(st.none() | st.floats(0.0, 1.0)),
        ))
    return Workload("random", tuple(sorted(jobs, key=lambda j: (j.arrival_s, j.id))),
                    interference=draw(st.booleans()))


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_invariants_hold_for_every_policy(data: st.DataObject) -> None:
    topo = catalog.get(data.draw(st.sampled_from(MACHINES)))
    nodes = data.draw(st.integers(1, 3))
    wl = data.draw(workloads(topo.size))
    policy = data.draw(st.sampled_from(ALL_POLICIES))
    queue = data.draw(st.sampled_from(["fifo", "backfill"]))
    res = Simulation(topo, nodes, wl, policy, queue=queue).run()
    assert len(res.records) == len(wl.jobs)  # every job finished
    check_invariants(res, nodes, topo.size)
    again = Simulation(topo, nodes, wl, policy, queue=queue).run()
    assert fingerprint(again) == fingerprint(res)  # deterministic


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_same_seed_same_result_on_a_generated_trace(policy: str) -> None:
    topo = catalog.get("dgx1-v100")
    a = Simulation(topo, 2, load_workload("mapa:jobs=25", seed=7), policy).run()
    b = Simulation(topo, 2, load_workload("mapa:jobs=25", seed=7), policy).run()
    check_invariants(a, 2, 8)
    assert fingerprint(a) == fingerprint(b)
    c = Simulation(topo, 2, load_workload("mapa:jobs=25", seed=8), policy).run()
    assert [r.job for r in c.records] != [r.job for r in a.records]


def _job(i: int, t: float, k: int, run: float = 100.0, **kw: object) -> Job:
    return Job(id=i, arrival_s=t, gpus=k, network="x", runtime_s=run, comm_share=0.0,
               sensitive=k > 1, **kw)  # type: ignore[arg-type]


def test_fifo_blocks_behind_a_job_that_fits_nowhere_backfill_does_not() -> None:
    topo = catalog.get("minsky")
    wl = Workload("w", (_job(0, 0, 2), _job(1, 1, 4), _job(2, 2, 1)))
    fifo = {r.job.id: r for r in Simulation(topo, 1, wl, "baseline").run().records}
    assert fifo[1].start_s == pytest.approx(100.0)  # waits for job 0
    assert fifo[2].start_s >= fifo[1].start_s  # stuck behind job 1
    back = {r.job.id: r for r in Simulation(topo, 1, wl, "baseline", queue="backfill")
            .run().records}
    assert back[2].start_s == pytest.approx(2.0)  # overtakes the 4-GPU job


def test_topo_aware_p_postpones_table1_job3_and_runs_jobs_out_of_order() -> None:
    topo = catalog.get("minsky")
    wl = amaral_prototype()
    p = {r.job.id: r for r in Simulation(topo, 1, wl, "topo-aware-p").run().records}
    ta = {r.job.id: r for r in Simulation(topo, 1, wl, "topo-aware").run().records}
    assert p[3].postponements > 0 and ta[3].postponements == 0
    assert p[3].start_s > ta[3].start_s
    assert topo.nvlinks(*p[3].gpus) == 2  # it waited for an NVLinked pair
    assert p[1].gpus[0] // 2 != p[0].gpus[0] // 2  # Job 1 kept off Job 0's socket


def test_a_postponed_job_lets_later_jobs_pass() -> None:
    """Amaral Algorithm 1: the postponed job keeps its place; later jobs that fit go first."""
    topo = catalog.get("minsky")
    jobs = (_job(0, 0, 1, profile="alexnet/tiny"), _job(1, 1, 1, profile="alexnet/tiny"),
            _job(2, 2, 2, profile="alexnet/tiny", min_utility=0.5),
            _job(3, 3, 1, profile="alexnet/tiny"))
    recs = {r.job.id: r for r in Simulation(topo, 1, Workload("w", jobs), "topo-aware-p")
            .run().records}
    assert recs[2].postponements > 0
    assert recs[3].start_s == pytest.approx(3.0)
    assert recs[3].start_s < recs[2].start_s


def test_interference_slows_co_located_jobs() -> None:
    topo = catalog.get("minsky")
    jobs = (_job(0, 0, 1, profile="alexnet/tiny"), _job(1, 0, 1, profile="alexnet/tiny"))
    alone = Workload("w", jobs, interference=False)
    shared = Workload("w", jobs, interference=True)
    # fcfs puts both on socket 0 (GPUs 0 and 1)
    a = Simulation(topo, 1, alone, "fcfs").run().records
    b = Simulation(topo, 1, shared, "fcfs").run().records
    assert all(r.run_s == pytest.approx(100.0) for r in a)
    assert all(r.run_s == pytest.approx(130.0) for r in b)  # K = 0.30 for tiny + tiny


def test_run_time_model() -> None:
    assert rt.bandwidth_factor(40.0, 40.0, 0.6) == 1.0
    assert rt.bandwidth_factor(10.0, 40.0, 0.5) == pytest.approx(0.5 + 0.5 * 4)
    assert rt.bandwidth_factor(10.0, 40.0, 0.0) == 1.0  # insensitive
    assert rt.bandwidth_factor(60.0, 80.0, 0.5) == 1.0  # both past saturation (50 GB/s)
    dgx = catalog.get("dgx1-v100")
    assert rt.ideal_effbw(dgx, ring(2), MODEL_GPUTOPO, Memo()) == pytest.approx(0.7844 * 50)


def test_bad_inputs_are_one_line_errors() -> None:
    topo = catalog.get("minsky")
    with pytest.raises(SimulationError, match="asks for 8 GPUs"):
        Simulation(topo, 1, Workload("w", (_job(0, 0, 8),)), "baseline")
    with pytest.raises(SimulationError, match="unknown policy"):
        Simulation(topo, 1, Workload("w", (_job(0, 0, 1),)), "fastest")
    with pytest.raises(SimulationError, match="unknown queue"):
        Simulation(topo, 1, Workload("w", (_job(0, 0, 1),)), "baseline", queue="lifo")
    with pytest.raises(SimulationError, match="unknown EffBW model"):
        Simulation(topo, 1, Workload("w", (_job(0, 0, 1),)), "baseline", judge="x")
    with pytest.raises(SimulationError, match="unknown job profile"):
        Simulation(topo, 1, Workload("w", (_job(0, 0, 1, profile="lenet"),)), "topo-aware")


def _waits(topology, state, request, memo):  # type: ignore[no-untyped-def]
    """A policy that postpones whatever may wait on a busy node (the bound's mechanics)."""
    from topology.policies.base import NoFit
    from topology.policies.registry import get_policy

    if request.wait_for_better and any(not u.idle for u in state.usage.values()):
        raise NoFit("postponed: test")
    return get_policy("baseline").fn(topology, state, request, memo)


def test_postponement_is_bounded_by_postpone_max_s() -> None:
    from topology.policies.registry import policies, register

    if "test-waits" not in policies():
        register("test-waits", "postpones on busy nodes (tests)", free_set_only=True,
                 lookahead=True)(_waits)
    if "test-waits-no-queue" not in policies():
        register("test-waits-no-queue", "the same, not reading the queue (tests)",
                 free_set_only=True)(_waits)
    topo = catalog.get("dgx1-v100")
    # job 0 holds a GPU until t = 5000; job 1 (2 GPUs, sensitive) may wait; job 2's arrival
    # at t = 200 is the next event
    jobs = (_job(0, 0, 1, run=5000.0), _job(1, 0, 2, run=10.0), _job(2, 200, 1, run=10.0))
    wl = Workload("w", jobs)
    long = {r.job.id: r for r in Simulation(topo, 1, wl, "test-waits").run().records}
    assert long[1].postponements > 0 and long[1].start_s == pytest.approx(5000.0)
    short = {r.job.id: r for r in Simulation(topo, 1, wl, "test-waits", postpone_max_s=100)
             .run().records}
    assert short[1].start_s == pytest.approx(200.0)  # the bound passed: placed as it is
    never = {r.job.id: r for r in Simulation(topo, 1, wl, "test-waits", postpone_max_s=0)
             .run().records}
    assert never[1].postponements == 0 and never[1].start_s == pytest.approx(0.0)
    # as in the extender, only a policy that reads the queue (lookahead) is asked to wait
    plain = {r.job.id: r for r in Simulation(topo, 1, wl, "test-waits-no-queue")
             .run().records}
    assert plain[1].postponements == 0 and plain[1].start_s == pytest.approx(0.0)
    with pytest.raises(SimulationError, match="postpone-max-s"):
        Simulation(topo, 1, wl, "test-waits", postpone_max_s=-1)


def test_gputopo_postpones_eq2_pits_in_a_stream() -> None:
    """On MAPA's stream the default policy postpones some job (it would otherwise land in an
    EffBW pit); with the postponement off it postpones none."""
    topo = catalog.get("dgx1-v100")
    wl = load_workload("mapa:jobs=150", seed=16)
    on = Simulation(topo, 1, wl, "gputopo", judge="eq2").run()
    off = Simulation(topo, 1, wl, "gputopo", judge="eq2", postpone_max_s=0).run()
    assert sum(r.postponements > 0 for r in on.records) > 0
    assert sum(r.postponements > 0 for r in off.records) == 0
    worst_on = min(r.effbw_gbps / r.ideal_gbps for r in on.records if r.measured and r.ideal_gbps)
    worst_off = min(r.effbw_gbps / r.ideal_gbps for r in off.records
                    if r.measured and r.ideal_gbps)
    assert worst_on >= 0.4 > worst_off
