"""Algorithm 1's construction, the plan's decisions and gputopo's local search on small
cases where a slip changes who runs where, or the f_OBJ the plan reports: written for the
seventeenth mutation round (docs/testing.md). ANDREAS §IV-B (Algorithm 1, Eq. 2's order,
D*_j and the fallback to the fastest configuration); the local search and the move charge
are gputopo's (``topology/planning/andreas.py``'s module docstring)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.topology.planning.test_andreas import T4, V100
from topology.planning.andreas import (
    Placement,
    Plan,
    PlanJob,
    PlannerSettings,
    PlanNode,
    objective,
    plan,
    reconfiguration_eur,
)
from topology.planning.energy import EnergyPrice

V = "v100-pcie-32gb"


def v100(name: str, gpus: int = 1) -> PlanNode:
    return PlanNode(name, "Tesla V100-PCIE-32GB", gpus, V100)


def t4(name: str = "t") -> PlanNode:
    return PlanNode(name, "Tesla T4", 1, T4)


def schedule(p: Plan, jobs: list[PlanJob]) -> dict[str, Placement | None]:
    return {j.id: p.decisions[j.id].placement for j in jobs}


def test_a_preempted_job_on_the_first_node_is_charged_after_a_local_search_change() -> None:
    """R runs on va, the first node; U must start now on a V100 and takes va, so R is
    preempted. The local search then swaps L and C (``test_andreas.py``'s swap case), and the
    plan's terms are recomputed: R's move charge (its 60 s of lost work and 0.02 EUR) is
    still in them, as Eq. 1 recomputed from scratch has it."""
    nodes = [v100("va"), v100("vb"), t4()]
    r = PlanJob("R", 1e6, 1.0, 100, {(V, 1): 100.0}, current=Placement("va", 1),
                progress_s=60.0)
    u = PlanJob("U", 1100, 1.0, 10, {(V, 1): 100.0})
    lstm = PlanJob("L", 30_000, 1.0, 20, {(V, 1): 100.0, ("t4", 1): 170.0})
    cnn = PlanJob("C", 90_000, 1.0, 20, {(V, 1): 100.0, ("t4", 1): 250.0})
    jobs = [r, u, lstm, cnn]
    s = PlannerSettings(max_iterations=1, shadow_window_s=0)
    p = plan(0, nodes, jobs, s)
    assert schedule(p, jobs) == {"R": None, "U": Placement("va", 1), "L": Placement("t", 1),
                                 "C": Placement("vb", 1)}
    assert p.local_moves == 1
    assert p.objective.reconfiguration_eur == pytest.approx(reconfiguration_eur(r, nodes, s))
    again = objective(0, nodes, jobs, schedule(p, jobs), s)
    assert p.objective.selection_eur == pytest.approx(again.selection_eur, rel=1e-12)


def test_equal_pressure_goes_to_the_larger_tardiness_weight() -> None:
    """Eq. 2 orders the jobs by Δ_j; between equal pressures the job whose lateness costs
    more per hour goes first (then input order). One T4, two identical jobs that miss their
    due date either way: the pure greedy gives it to H (ω = 9 EUR/h), listed second, and
    postpones the lighter one."""
    table = {("t4", 1): 100.0}
    light = PlanJob("light", 500.0, 1.0, 10, table)
    heavy = PlanJob("H", 500.0, 9.0, 10, table)
    p = plan(0, [t4()], [light, heavy], PlannerSettings.paper(max_iterations=1))
    assert p.pressure_s["light"] == p.pressure_s["H"] == pytest.approx(500.0)
    assert schedule(p, [light, heavy]) == {"light": None, "H": Placement("t", 1)}


def test_patience_stops_the_randomised_iterations() -> None:
    """gputopo's early stopping (:attr:`PlannerSettings.patience`): after P randomised
    iterations in a row without a better schedule the search stops, far short of MaxIt_RG.
    One job alone on one T4: the pure greedy (iteration 0) is the best, so the search runs
    it and P more."""
    j = PlanJob("A", 1e6, 1.0, 10, {("t4", 1): 100.0})
    p = plan(0, [t4()], [j], PlannerSettings(max_iterations=200, patience=3,
                                             local_search=False))
    assert (p.iterations, p.best_iteration) == (4, 0)
    assert plan(0, [t4()], [j], PlannerSettings.paper(max_iterations=200)).iterations == 200


def test_a_zero_probability_draws_no_random_numbers() -> None:
    """With π = 0 (:attr:`PlannerSettings.swap_probability`) the randomised iterations draw
    no numbers for the swaps, only for α's deviations, and with α = 0 none for the
    deviations, as the implementation before issue 22 did
    (``benchmarks/andreas_reference.py``): the same seed makes the same plan."""
    from tests.topology.planning.test_andreas import TABLE
    from tests.topology.planning.test_andreas_reference import assert_same_plan

    nodes = [v100("v2", 2), v100("v1"), t4("t1"), t4("t2")]
    jobs = [PlanJob(f"J{i}", 1500.0 + 500 * i, 1.0 + i % 3, 5 + 4 * i, TABLE)
            for i in range(7)]
    for seed in range(4):
        assert_same_plan(0.0, nodes, jobs, PlannerSettings.paper(
            swap_probability=0.0, alpha=0.5, max_iterations=60, seed=seed))
        # and with α = 0 none for the deviations, only for the swaps
        assert_same_plan(0.0, nodes, jobs, PlannerSettings.paper(
            swap_probability=0.5, alpha=0.0, max_iterations=60, seed=seed))


def _mixed() -> list[PlanNode]:
    return [v100("v2", 2), v100("v1"), t4("t1"), t4("t2")]


def test_without_running_jobs_every_iteration_after_the_greedy_is_randomised() -> None:
    """Algorithm 1 builds the pure greedy, then randomised schedules; the incumbent (and the
    pressing incumbent) exist only when some job runs. With every job waiting, iteration 1 is
    randomised: here a randomised iteration beats the greedy, and the plan is the one the
    implementation before issue 22 made for the seed (``benchmarks/andreas_reference.py``),
    its iteration included."""
    from tests.topology.planning.test_andreas import TABLE
    from tests.topology.planning.test_andreas_reference import assert_same_plan

    jobs = [PlanJob(f"J{i}", due, w, epochs, TABLE) for i, (due, w, epochs) in enumerate(
        [(4600, 0.5, 28), (3100, 1, 22), (800, 1, 5), (2500, 1, 14), (3500, 1, 2)])]
    for seed in (0, 1):
        s = PlannerSettings.paper(max_iterations=30, seed=seed)
        assert plan(0, _mixed(), jobs, s).best_iteration > 0
        assert_same_plan(0, _mixed(), jobs, s)
    for seed in (0, 1):  # gputopo's defaults: no incumbent either
        s = PlannerSettings(max_iterations=30, seed=seed, local_search=False, patience=None)
        assert plan(0, _mixed(), jobs, s) == plan(0, _mixed(), jobs,
                                                  replace(s, pressing_incumbent=False))


def test_with_every_job_running_there_is_no_pressing_incumbent() -> None:
    """The pressing incumbent (:attr:`PlannerSettings.pressing_incumbent`) lets a waiting job
    pass running ones; with no job waiting it would be the incumbent again, so it is not
    built and the randomised iterations are the same as without it — here one of them is
    the best (iteration 17 or 19 by seed)."""
    from tests.topology.planning.test_andreas import TABLE

    jobs = [PlanJob("R0", 600, 5, 7, TABLE, Placement("v2", 1)),
            PlanJob("R1", 1950, 2, 11, TABLE, Placement("v2", 1)),
            PlanJob("R2", 3800, 2, 4, TABLE, Placement("v1", 1), progress_s=30),
            PlanJob("R3", 2450, 2, 17, TABLE, Placement("t1", 1), progress_s=30)]
    for seed, best in ((0, 19), (1, 17)):
        s = PlannerSettings(max_iterations=30, seed=seed, local_search=False, patience=None)
        p = plan(0, _mixed(), jobs, s)
        assert p.best_iteration == best
        assert p == plan(0, _mixed(), jobs, replace(s, pressing_incumbent=False))


def test_eq1_counts_the_first_ending_job_on_a_node_and_the_cheaper_on_equal_times() -> None:
    """Eq. 1's energy term (the paper's): α_jn = 1 for the job that ends first on node n,
    and on equal times the cheaper one (module docstring). On one 3-GPU V100 node at
    1 EUR/kWh, paper c_ng (the job's own g): A on 2 GPUs ends at 600 s (π = 600 s x
    0.75 kW), B on 1 GPU at 800 s (π = 800 s x 0.5 kW, cheaper but later): A's π counts.
    With B ending at 600 s too, B's (the cheaper) counts, though B is placed first."""
    node = [v100("v", 3)]
    s = PlannerSettings.paper(max_iterations=1, price=EnergyPrice(pue=1.0, eur_per_kwh=1.0))
    a = PlanJob("A", 1e6, 1.0, 10, {(V, 2): 60.0})
    b = PlanJob("B", 1e6, 1.0, 10, {(V, 1): 80.0})
    p = plan(0, node, [a, b], s)
    assert schedule(p, [a, b]) == {"A": Placement("v", 2), "B": Placement("v", 1)}
    assert p.objective.energy_eur == pytest.approx(600 * 0.750 / 3600)
    b_first = PlanJob("B", 900.0, 1.0, 10, {(V, 1): 60.0})  # Δ = -300 s: taken before A
    p = plan(0, node, [a, b_first], s)
    assert schedule(p, [a, b_first]) == {"A": Placement("v", 2), "B": Placement("v", 1)}
    assert p.objective.energy_eur == pytest.approx(600 * 0.500 / 3600)


def test_ties_in_f_obj_go_to_the_schedule_that_changes_fewer_running_jobs() -> None:
    """Ties in f_OBJ (within 1e-9 EUR) go to the schedule that moves or preempts fewer running
    jobs (module docstring). The paper's settings charge nothing for a move of a job with no
    progress, so the pure greedy, which builds from nothing in Eq. 2's order, ties with the
    incumbent here (R and W are identical, neither will be late, W is more pressing):

    * two T4s, R runs on t1: the greedy gives t1 to W and moves R to t2; R stays on t1;
    * one T4, R runs on it: the greedy runs W and preempts R; R keeps running."""
    table = {("t4", 1): 100.0}
    r = PlanJob("R", 1e6, 1.0, 10, table, current=Placement("t1", 1))
    w = PlanJob("W", 5e5, 1.0, 10, table)
    # gputopo's energy term too, without the move charge (and the 1-GPU nodes full: no
    # vacancy term), where the incumbent's running sum reaches the best f_OBJ exactly
    default = PlannerSettings(max_iterations=2, move_penalty_eur=0.0, local_search=False,
                              shadow_window_s=0.0)
    for s in (PlannerSettings.paper(max_iterations=2), default):
        for nodes, where_w in (([t4("t1"), t4("t2")], Placement("t2", 1)),
                               ([t4("t1")], None)):
            p = plan(0, nodes, [r, w], s)
            assert p.greedy_objective.total_eur == pytest.approx(p.objective.total_eur,
                                                                 abs=1e-12)
            assert schedule(p, [r, w]) == {"R": Placement("t1", 1), "W": where_w}
            assert p.best_iteration == 1


def test_the_greedy_objective_splits_the_shadow_term_apart_too() -> None:
    """Plan.greedy_objective is the pure greedy's f_OBJ with the shadow term apart from the
    energy, as the plan's own: with one iteration and no local search they are the same
    schedule, so the same figures (``test_andreas.py``'s oversubscribed V100 case)."""
    nodes = [v100("v"), t4()]
    lstm = PlanJob("L", 30_000, 1.0, 20, {(V, 1): 100.0, ("t4", 1): 170.0})
    cnn = PlanJob("C", 90_000, 1.0, 20, {(V, 1): 100.0, ("t4", 1): 250.0})
    p = plan(0, nodes, [lstm, cnn], PlannerSettings(max_iterations=1, local_search=False))
    assert p.objective.shadow_eur > 0
    assert p.greedy_objective == p.objective
