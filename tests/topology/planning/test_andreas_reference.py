"""The fast Algorithm 1 pinned to the implementation it replaced (issue 22), frozen in
``benchmarks/andreas_reference.py``:

* with the paper's settings (:meth:`PlannerSettings.paper`; with or without a move charge and a
  restart time, which the old implementation had too) the same seed gives the same plan —
  placements, f_OBJ to the bit, iterations, the iteration that built it — on random small
  instances and on the rescheduling points of a simulation;
* early stopping keeps a prefix of the same iterations, and the local search never makes a
  plan worse;
* the per-node-class numpy evaluation of configurations builds the same candidate lists as
  the job-by-job code;
* the same input gives the same plan, whatever the planner's cache saw before.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator.planning_engine as engine
from benchmarks import andreas_reference as ref
from simulator.planning_workloads import scenario
from tests.topology.planning.test_andreas import TABLE, instances, job, t4, v100
from topology.planning import andreas
from topology.planning.andreas import Placement, PlanJob, PlannerSettings, PlanNode, plan

Instance = tuple[list[PlanNode], list[PlanJob], float]


def as_reference(nodes: list[PlanNode], jobs: list[PlanJob]) -> tuple[list[Any], list[Any]]:
    """The same input as the reference implementation's own types."""
    rn = [ref.PlanNode(n.name, n.gpu_model, n.gpus, n.power) for n in nodes]
    rj = [ref.PlanJob(j.id, j.due_s, j.weight_eur_per_h, j.remaining_epochs, j.epoch_time_s,
                      None if j.current is None else ref.Placement(j.current.node,
                                                                   j.current.gpus),
                      j.submitted_s, j.progress_s) for j in jobs]
    return rn, rj


def assert_same_plan(now: float, nodes: list[PlanNode], jobs: list[PlanJob],
                     s: PlannerSettings) -> None:
    """plan() with the paper's settings ``s`` and the reference with the same values make
    exactly the same plan."""
    rn, rj = as_reference(nodes, jobs)
    old = ref.plan(now, rn, rj, ref.PlannerSettings(
        rho=s.rho, max_iterations=s.max_iterations, interval_s=s.interval_s, price=s.price,
        swap_probability=s.swap_probability, alpha=s.alpha, seed=s.seed,
        restart_s=s.restart_s, move_penalty_eur=s.move_penalty_eur))
    new = plan(now, nodes, jobs, s)
    assert (new.iterations, new.best_iteration) == (old.iterations, old.best_iteration)
    assert (new.objective.tardiness_eur, new.objective.worst_case_eur,
            new.objective.energy_eur, new.objective.reconfiguration_eur) == (
        old.objective.tardiness_eur, old.objective.worst_case_eur,
        old.objective.first_ending_eur, old.objective.reconfiguration_eur)
    assert new.greedy_objective.total_eur == old.greedy_objective.total_eur
    assert new.pressure_s == old.pressure_s
    for jid, d in old.decisions.items():
        mine = new.decisions[jid]
        where = None if d.placement is None else Placement(d.placement.node, d.placement.gpus)
        assert (mine.placement, mine.exec_time_s, mine.energy_cost_eur, mine.reason) == (
            where, d.exec_time_s, d.energy_cost_eur, d.reason), jid


@settings(max_examples=60, deadline=None)
@given(instances(), st.integers(0, 5), st.sampled_from([1, 2, 40, 150]),
       st.sampled_from([0.0, 0.02]), st.sampled_from([0.0, 60.0]))
def test_same_seed_same_plan_as_the_reference(inst: Instance, seed: int, iterations: int,
                                              penalty: float, restart: float) -> None:
    nodes, jobs, now = inst
    assert_same_plan(now, nodes, jobs, PlannerSettings.paper(
        seed=seed, max_iterations=iterations, move_penalty_eur=penalty, restart_s=restart))


def test_same_plan_as_the_reference_at_every_point_of_a_simulation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rescheduling points of ``andreas-paper`` on §V-B's second scenario (4 nodes, 40
    jobs), captured as the simulator calls the planner: at each, the reference makes the same
    plan."""
    points: list[tuple[float, list[PlanNode], list[PlanJob], PlannerSettings]] = []

    def capture(now: float, nodes: list[PlanNode], jobs: list[PlanJob], s: PlannerSettings,
                cache: andreas.PlanCache | None = None) -> andreas.Plan:
        points.append((now, list(nodes), list(jobs), s))
        return plan(now, nodes, jobs, s, cache=cache)

    monkeypatch.setattr(engine, "plan", capture)
    w = scenario(2, 4, seed=3, jobs=40)
    engine.PlanningSimulation(w, "andreas-paper", settings=PlannerSettings(
        max_iterations=200, seed=3)).run()
    assert len(points) > 50
    assert any(j.current is not None for _, _, jobs, _ in points for j in jobs)
    for now, nodes, jobs, s in points[::3]:
        assert_same_plan(now, nodes, jobs, s)


@settings(max_examples=60, deadline=None)
@given(instances(), st.integers(0, 3), st.integers(1, 30))
def test_early_stopping_keeps_a_prefix_of_the_iterations(inst: Instance, seed: int,
                                                         patience: int) -> None:
    """With patience P the search runs the first iterations of the full search and stops
    after P randomised ones without a better schedule: its plan is the full search's with
    MaxIt_RG cut to the iterations it ran."""
    nodes, jobs, now = inst
    s = PlannerSettings(seed=seed, max_iterations=200, patience=patience, local_search=False)
    early = plan(now, nodes, jobs, s)
    assert early.iterations <= 200
    if early.iterations < 200:
        assert early.iterations == early.best_iteration + patience + 1
    cut = plan(now, nodes, jobs, replace(s, patience=None, max_iterations=early.iterations))
    assert cut == early


@settings(max_examples=60, deadline=None)
@given(instances(), st.integers(0, 3))
def test_local_search_never_makes_a_plan_worse(inst: Instance, seed: int) -> None:
    nodes, jobs, now = inst
    s = PlannerSettings(seed=seed, max_iterations=20)
    with_ls = plan(now, nodes, jobs, s)
    without = plan(now, nodes, jobs, replace(s, local_search=False))
    assert with_ls.objective.selection_eur <= without.objective.selection_eur + 1e-9
    assert (with_ls.local_moves == 0) == (with_ls.decisions == without.decisions)


@settings(max_examples=60, deadline=None)
@given(instances(), st.floats(0, 120), st.booleans())
def test_numpy_configurations_match_the_job_by_job_code(inst: Instance, restart: float,
                                                        paper: bool) -> None:
    nodes, jobs, now = inst
    s = (PlannerSettings.paper if paper else PlannerSettings)(restart_s=restart)
    index = andreas._validate(nodes, jobs)
    classes = andreas._Classes(nodes, s.price, s.shared_idle)
    assert andreas._all_job_data(jobs, classes, index, now, s) == [
        andreas._job_data(i, j, classes, index, now, s) for i, j in enumerate(jobs)]


def test_same_input_same_plan_whatever_the_cache_saw() -> None:
    """A :class:`PlanCache` keeps per-epoch time rows across calls: a plan does not depend on
    what the cache saw before (the same job ids with other tables), nor on whether a table is
    the same object or an equal copy, nor on having a cache at all."""
    nodes = [v100("v", 2), v100("w", 2), t4("t")]
    jobs = [job(f"J{i}", 1000 + 700 * i, 1 + i % 5, 4 + 5 * i, TABLE,
                Placement("v", 1) if i == 2 else None, progress_s=10.0) for i in range(8)]
    s = PlannerSettings(seed=7)
    first = plan(0, nodes, jobs, s)
    cache = andreas.PlanCache(max_rows=6)
    other = [replace(j, epoch_time_s={k: 2 * v for k, v in TABLE.items()}) for j in jobs]
    assert plan(50, nodes, other, s, cache=cache) == plan(50, nodes, other, s)
    copies = [replace(j, epoch_time_s=dict(j.epoch_time_s)) for j in jobs]
    assert plan(0, nodes, copies, s, cache=cache) == first
    assert plan(0, nodes, jobs, s, cache=cache) == first
    assert plan(0, nodes, jobs, s, cache=cache) == first
