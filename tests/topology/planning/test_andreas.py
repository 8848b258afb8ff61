"""ANDREAS' optimizer: Eq. 1 and Eq. 2 against hand-computed cases, Algorithm 1's choices on
small instances (the paper's settings, :meth:`PlannerSettings.paper`), what gputopo's defaults
change (the move charge, shared idle power, the energy term over every job, the local search),
determinism, and invariants (hypothesis)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology.planning.andreas import (
    Placement,
    PlanJob,
    PlannerSettings,
    PlanningError,
    PlanNode,
    cost_eur_per_h,
    execution_time_s,
    objective,
    plan,
    pressure_s,
    reconfiguration_eur,
    shadow_prices,
    slowest_time_s,
)
from topology.planning.energy import EnergyPrice, PowerProfile

V100 = PowerProfile(idle_w=250.0, gpu_w=250.0)
T4 = PowerProfile(idle_w=250.0, gpu_w=70.0)
# c_ng by hand, EUR/h: W / 1000 x 1.33 x 0.172
C_V100_1 = 0.500 * 1.33 * 0.172  # 0.114380
C_V100_2 = 0.750 * 1.33 * 0.172  # 0.171570
C_T4_1 = 0.320 * 1.33 * 0.172  # 0.073203
#: Algorithm 1 and Eq. 1 as published
PAPER = PlannerSettings.paper()


def v100(name: str = "v", gpus: int = 2) -> PlanNode:
    return PlanNode(name, "Tesla V100-PCIE-32GB", gpus, V100)


def t4(name: str = "t") -> PlanNode:
    return PlanNode(name, "Tesla T4", 1, T4)


def job(jid: str, due: float, weight: float, epochs: float, table: dict[tuple[str, int], float],
        current: Placement | None = None, **kw: float) -> PlanJob:
    return PlanJob(jid, due, weight, epochs, table, current, **kw)


# ------------------------------------------------------------------------------ Eq. 1


def test_eq1_hand_computed() -> None:
    """Two jobs on a 2-GPU V100 node, one postponed job, T_c = 0, H = 300 s, ρ = 100.

    A: 10 epochs x 120 s = 1200 s on 1 V100, due 1000, ω = 3.6 EUR/h: τ = 200 s
       -> ω τ = 0.001 EUR/s x 200 s = 0.2 EUR.
    B: 20 epochs x 50 s = 1000 s on 1 V100, due 5000: τ = 0; B ends first on the node, so
       α_B = 1 and π_B = 1000 s x c_v,1 = 1000 / 3600 x 0.114380 = 0.0317722 EUR.
    C: postponed, due 1500, ω = 1.8 EUR/h; slowest configuration (M_C) 5 x 300 s = 1500 s on
       the T4: τ̂ = 0 + 300 + 1500 - 1500 = 300 s -> ρ ω τ̂ = 100 x 0.0005 x 300 = 15 EUR;
       τ_C = max(0, 0 - 1500) = 0.
    f_OBJ = 0.2 + 15 + 0.0317722 = 15.2317722 EUR.
    """
    nodes = [v100("v"), t4("t")]
    a = job("A", 1000, 3.6, 10, {("v100-pcie-32gb", 1): 120.0})
    b = job("B", 5000, 7.2, 20, {("v100-pcie-32gb", 1): 50.0})
    c = job("C", 1500, 1.8, 5, {("v100-pcie-32gb", 1): 100.0, ("t4", 1): 300.0})
    sched = {"A": Placement("v", 1), "B": Placement("v", 1), "C": None}
    f = objective(0.0, nodes, [a, b, c], sched, PAPER)
    assert f.tardiness_eur == pytest.approx(0.2)
    assert f.worst_case_eur == pytest.approx(15.0)
    assert f.energy_eur == pytest.approx(0.0317722, abs=1e-7)
    assert f.total_eur == pytest.approx(15.2317722, abs=1e-7)
    assert f.reconfiguration_eur == 0.0


def test_eq1_first_ending_job_per_node_and_late_postponed_job() -> None:
    """Jobs on two nodes: each node counts only its first-ending job's π = t · c_ng with the
    job's own g (4k). A postponed job already past its due date pays ω (T_c - d) as τ (4i) on
    top of ρ ω τ̂ (4j)."""
    nodes = [v100("v"), t4("t")]
    x = job("X", 10_000, 1.0, 10, {("v100-pcie-32gb", 2): 60.0})  # 600 s on 2 GPUs
    y = job("Y", 10_000, 1.0, 10, {("t4", 1): 90.0})  # 900 s
    late = job("L", 500, 3.6, 1, {("t4", 1): 100.0})  # due 500, now 1000: 500 s late already
    f = objective(1000.0, nodes, [x, y, late],
                  {"X": Placement("v", 2), "Y": Placement("t", 1), "L": None}, PAPER)
    assert f.energy_eur == pytest.approx(600 / 3600 * C_V100_2 + 900 / 3600 * C_T4_1)
    assert f.tardiness_eur == pytest.approx(0.001 * 500)  # ω τ, τ = T_c - d = 500 s
    # τ̂ = 1000 + 300 + 100 - 500 = 900 s
    assert f.worst_case_eur == pytest.approx(100 * 0.001 * 900)


def test_eq1_price_and_interval_are_settings() -> None:
    nodes = [t4("t")]
    c = job("C", 1000, 3.6, 10, {("t4", 1): 100.0})  # M = 1000 s
    s = PlannerSettings.paper(rho=10, interval_s=600,
                              price=EnergyPrice(pue=1.0, eur_per_kwh=1.0))
    f = objective(0.0, nodes, [c], {"C": None}, s)
    assert f.worst_case_eur == pytest.approx(10 * 0.001 * 600)  # τ̂ = 600 + 1000 - 1000
    f2 = objective(0.0, nodes, [c], {"C": Placement("t", 1)}, s)
    assert f2.energy_eur == pytest.approx(1000 / 3600 * 0.320)  # 320 W at 1 EUR/kWh


def test_eq1_rejects_impossible_schedules() -> None:
    nodes = [t4("t")]
    a = job("A", 1000, 1, 1, {("t4", 1): 10.0})
    b = job("B", 1000, 1, 1, {("t4", 1): 10.0})
    with pytest.raises(PlanningError, match="GPUs planned"):
        objective(0, nodes, [a, b], {"A": Placement("t", 1), "B": Placement("t", 1)})
    with pytest.raises(PlanningError, match="unknown node"):
        objective(0, nodes, [a], {"A": Placement("nope", 1)})
    with pytest.raises(PlanningError, match="no profile"):
        objective(0, [v100()], [a], {"A": Placement("v", 1)})


# ------------------------------------------------------------------------------ Eq. 2


def test_eq2_pressure_hand_computed() -> None:
    """Δ_j = T_c + min t_jng - d_j: 10 epochs, fastest 80 s/epoch (2 V100) -> 800 s;
    T_c = 100, d = 1000: Δ = 100 + 800 - 1000 = -100 s."""
    nodes = [v100(), t4()]
    j = job("A", 1000, 1, 10, {("v100-pcie-32gb", 1): 120.0, ("v100-pcie-32gb", 2): 80.0,
                               ("t4", 1): 200.0})
    assert pressure_s(j, nodes, 100.0) == pytest.approx(-100.0)
    assert slowest_time_s(j, nodes) == pytest.approx(2000.0)
    assert execution_time_s(j, nodes[0], 2) == pytest.approx(800.0)
    assert execution_time_s(j, nodes[0], 3) is None  # more GPUs than the node has
    # a job no node can run is the most pressing (it will be postponed)
    assert pressure_s(job("Z", 1, 1, 1, {("a100", 1): 1.0}), nodes, 0) == math.inf


def test_plan_reports_pressures() -> None:
    nodes = [v100()]
    a = job("A", 1000, 1, 10, {("v100-pcie-32gb", 1): 50.0})
    p = plan(0, nodes, [a], PlannerSettings(max_iterations=1))
    assert p.pressure_s == {"A": pytest.approx(500 - 1000)}


# ------------------------------------------------------------------------------ Algorithm 1

TABLE = {("v100-pcie-32gb", 1): 100.0, ("v100-pcie-32gb", 2): 70.0, ("t4", 1): 130.0}


def test_cheapest_configuration_that_meets_the_due_date() -> None:
    """20 epochs: T4 2600 s (cost 2600/3600 x 0.0732 = 0.0529 EUR), V100 2000 s (0.0635 EUR),
    2 x V100 1400 s (0.0667 EUR). With a due date of 3000 s all meet it: the T4 wins."""
    p = plan(0, [v100(), t4()], [job("A", 3000, 1, 20, TABLE)], PAPER)
    d = p.decisions["A"]
    assert d.placement == Placement("t", 1)
    assert d.exec_time_s == pytest.approx(2600)
    assert d.energy_cost_eur == pytest.approx(2600 / 3600 * C_T4_1)
    assert "cheapest" in d.reason
    # a due date of 2500 s rules the T4 out: one V100 is the cheapest that meets it
    p = plan(0, [v100(), t4()], [job("A", 2500, 1, 20, TABLE)], PAPER)
    assert p.decisions["A"].placement == Placement("v", 1)


def test_fastest_configuration_when_no_configuration_meets_the_due_date() -> None:
    """Due in 1000 s, fastest is 1400 s on 2 V100: D* is empty, so (n*, g*) is the fastest
    configuration although it is the most expensive."""
    p = plan(0, [v100(), t4()], [job("A", 1000, 1, 20, TABLE)], PAPER)
    d = p.decisions["A"]
    assert d.placement == Placement("v", 2)
    assert d.tardiness_s == pytest.approx(400)
    assert "fastest" in d.reason


def test_suboptimal_configuration_when_the_best_is_taken() -> None:
    """Two jobs whose cheapest configuration is the single T4: the more pressing one gets it,
    the other is assigned to the next configuration of D* (one V100), not postponed."""
    urgent = job("U", 2700, 1, 20, TABLE)  # Δ = 1400 - 2700 = -1300
    relaxed = job("R", 5000, 1, 20, TABLE)  # Δ = -3600
    p = plan(0, [v100(), t4()], [relaxed, urgent], PlannerSettings.paper(max_iterations=1))
    assert p.decisions["U"].placement == Placement("t", 1)
    assert p.decisions["R"].placement == Placement("v", 1)
    assert "cheaper configuration was full" in p.decisions["R"].reason


def test_preempts_a_less_urgent_running_job() -> None:
    """One T4. L runs there with a distant due date; U arrives and misses its due date unless
    it starts now. Algorithm 1 takes U first (higher pressure) and L is preempted: L's
    worst-case tardiness is 0 (it can wait), U's would be ρ ω τ̂."""
    node = [t4("t")]
    table = {("t4", 1): 100.0}
    running = job("L", 100_000, 5, 50, table, Placement("t", 1), progress_s=30.0)
    urgent = job("U", 1500, 1, 10, table)  # 1000 s of work, due in 1500 s
    p = plan(0, node, [running, urgent], PAPER)
    assert p.decisions["U"].placement == Placement("t", 1)
    assert p.decisions["L"].placement is None
    assert "preempted" in p.decisions["L"].reason
    assert p.changes([running, urgent]) == ["L", "U"]
    # without the newcomer, the running job stays (the incumbent is kept)
    alone = plan(0, node, [running], PAPER)
    assert alone.decisions["L"].placement == Placement("t", 1)
    assert alone.decisions["L"].exec_time_s == pytest.approx(50 * 100 - 30)  # keeps progress


def test_postpones_when_nothing_is_free() -> None:
    table = {("t4", 1): 100.0}
    a = job("A", 1000, 2, 5, table)
    b = job("B", 9000, 1, 5, table)
    p = plan(0, [t4()], [a, b], PAPER)
    assert p.decisions["A"].placement == Placement("t", 1)
    assert p.decisions["B"].placement is None
    assert p.decisions["B"].reason.startswith("postponed")


def test_job_without_a_usable_profile_is_postponed_with_a_reason() -> None:
    p = plan(0, [t4()], [job("A", 1000, 1, 5, {("a100-sxm4-40gb", 1): 10.0})])
    assert p.decisions["A"].placement is None
    assert "profile" in p.decisions["A"].reason


def test_running_job_keeps_its_node_among_equal_choices() -> None:
    """Two identical V100 nodes: a running job stays where it is rather than moving to the
    equally good lowest-index node."""
    nodes = [v100("a", 1), v100("b", 1)]
    table = {("v100-pcie-32gb", 1): 100.0}
    r = job("R", 10_000, 1, 10, table, Placement("b", 1))
    p = plan(0, nodes, [r])
    assert p.decisions["R"].placement == Placement("b", 1)
    assert p.changes([r]) == []


def test_plan_is_never_worse_than_the_greedy_or_the_incumbent() -> None:
    """The pure greedy is iteration 0 and the incumbent (every running job stays) iteration
    1, so the plan is at least as good as both under f_OBJ."""
    nodes = [v100("v", 2), t4("t")]
    jobs = [job(f"J{i}", 1500 + 400 * i, 1 + i % 3, 5 + 3 * i, TABLE) for i in range(6)]
    jobs[0] = job("J0", 1500, 1, 5, TABLE, Placement("t", 1))
    p = plan(0, nodes, jobs)
    assert p.objective.selection_eur <= p.greedy_objective.selection_eur + 1e-12
    running = [job("A", 9000, 1, 30, TABLE, Placement("v", 1)),
               job("B", 9000, 1, 10, TABLE, Placement("v", 1)),
               job("C", 2000, 3, 12, TABLE, Placement("t", 1))]
    p = plan(0, nodes, running)
    keep = {j.id: j.current for j in running}
    assert p.objective.selection_eur <= objective(0, nodes, running, keep).selection_eur + 1e-12


def test_same_input_same_plan() -> None:
    nodes = [v100("v", 2), v100("w", 2), t4("t")]
    jobs = [job(f"J{i}", 1000 + 700 * i, 1 + i % 5, 4 + 5 * i, TABLE) for i in range(8)]
    s = PlannerSettings(seed=7)
    first = plan(0, nodes, jobs, s)
    again = plan(0, nodes, jobs, s)
    assert first == again
    assert [d.placement for d in first.decisions.values()] == \
        [d.placement for d in again.decisions.values()]


def test_move_penalty_keeps_running_jobs_unless_the_move_pays() -> None:
    """A job runs on a V100 when a cheaper T4 frees up: without a move charge Algorithm 1
    moves it (lower π); with a charge above the saving it stays."""
    nodes = [v100("v", 1), t4("t")]
    r = job("R", 100_000, 1, 20, TABLE, Placement("v", 1))
    moved = plan(0, nodes, [r], PlannerSettings.paper(max_iterations=1))
    assert moved.decisions["R"].placement == Placement("t", 1)
    saving = 2000 / 3600 * C_V100_1 - 2600 / 3600 * C_T4_1  # π on the V100 - π on the T4
    kept = plan(0, nodes, [r], PlannerSettings.paper(move_penalty_eur=saving * 1.5))
    assert kept.decisions["R"].placement == Placement("v", 1)
    assert reconfiguration_eur(r, nodes, PlannerSettings(move_penalty_eur=0.5)) == 0.5


def test_bad_input_is_a_planning_error() -> None:
    table = {("t4", 1): 1.0}
    with pytest.raises(PlanningError, match="twice"):
        plan(0, [t4(), t4()], [])
    with pytest.raises(PlanningError, match="twice"):
        plan(0, [t4()], [job("A", 1, 1, 1, table), job("A", 1, 1, 1, table)])
    with pytest.raises(PlanningError, match="weight"):
        plan(0, [t4()], [job("A", 1, 0, 1, table)])
    with pytest.raises(PlanningError, match="remaining epochs"):
        plan(0, [t4()], [job("A", 1, 1, 0, table)])
    with pytest.raises(PlanningError, match="unknown node"):
        plan(0, [t4()], [job("A", 1, 1, 1, table, Placement("x", 1))])
    with pytest.raises(PlanningError, match="more GPUs"):
        plan(0, [t4()], [job("A", 1, 1, 1, table, Placement("t", 2))])
    with pytest.raises(PlanningError, match="max_iterations"):
        PlannerSettings(max_iterations=0)
    with pytest.raises(PlanningError, match="alpha"):
        PlannerSettings(alpha=2)


# ------------------------------------------------------------------------------ the defaults


def test_paper_settings_are_the_papers() -> None:
    p = PlannerSettings.paper(seed=3, max_iterations=10)
    assert (p.move_penalty_eur, p.shared_idle, p.energy_term, p.patience, p.local_search,
            p.pressing_incumbent) == (0.0, False, "first-ending", None, False, False)
    assert (p.seed, p.max_iterations) == (3, 10)
    d = PlannerSettings(seed=3, restart_s=60)
    assert d.as_paper() == PlannerSettings.paper(seed=3, restart_s=60)
    assert (d.move_penalty_eur, d.shared_idle, d.energy_term, d.local_search,
            d.pressing_incumbent) == (0.02, True, "all", True, True)
    with pytest.raises(PlanningError, match="local_search needs"):
        PlannerSettings(energy_term="first-ending")
    with pytest.raises(PlanningError, match="patience"):
        PlannerSettings(patience=0)
    with pytest.raises(PlanningError, match="vacancy_s"):
        PlannerSettings(vacancy_s=-1)
    assert (p.shadow_window_s, d.shadow_window_s) == (0.0, 1800.0)
    with pytest.raises(PlanningError, match="shadow_window_s must"):
        PlannerSettings(shadow_window_s=-1)
    with pytest.raises(PlanningError, match="shadow_window_s needs"):
        PlannerSettings(energy_term="first-ending", local_search=False)


def test_shared_idle_hand_computed() -> None:
    """A job on g of a node's G GPUs pays g / G of the node fully busy: one GPU of a 2-GPU
    V100 node costs c_v,2 / 2 = 0.085785 EUR/h (the paper: c_v,1 = 0.11438); a 1-GPU T4
    node costs c_t,1 either way."""
    s = PlannerSettings()
    assert cost_eur_per_h(v100(), 1, s) == pytest.approx(C_V100_2 / 2)
    assert cost_eur_per_h(v100(), 1, PAPER) == pytest.approx(C_V100_1)
    assert cost_eur_per_h(t4(), 1, s) == pytest.approx(C_T4_1)
    # 20 epochs (TABLE) due in 3000 s: on a shared V100, 2000 s x c_v,2 / 2 = 0.0477 EUR is
    # cheaper than the T4's 2600 s x c_t,1 = 0.0529 EUR, so the rule takes the V100 ...
    jobs = [job("A", 3000, 1, 20, TABLE)]
    p = plan(0, [v100(), t4()], jobs, PlannerSettings(vacancy_s=0))
    assert p.decisions["A"].placement == Placement("v", 1)
    assert p.decisions["A"].energy_cost_eur == pytest.approx(2000 / 3600 * C_V100_2 / 2)
    # ... unless nobody will take the other GPU soon: alone, it leaves half the node's idle
    # power unpaid for vacancy_s = 1800 s (0.0143 EUR), and the T4 is cheaper after all
    assert plan(0, [v100(), t4()], jobs, s).decisions["A"].placement == Placement("t", 1)


def test_energy_term_all_hand_computed() -> None:
    """Energy term ``all``: every placed job's π, a waiting job's cheapest π, and the idle
    share of the GPUs a used node leaves free for vacancy_s.

    A: 10 epochs x 120 s = 1200 s on one GPU of the 2-GPU V100 node: π = 1200 s x c_v,2 / 2.
    B: waits; its cheapest configuration is 5 x 300 s on the T4: π = 1500 s x c_t,1.
    The V100 node is used with one GPU free: 250 W idle / 2 GPUs for 1800 s."""
    nodes = [v100("v"), t4("t")]
    a = job("A", 10_000, 3.6, 10, {("v100-pcie-32gb", 1): 120.0})
    b = job("B", 10_000, 1.8, 5, {("v100-pcie-32gb", 1): 400.0, ("t4", 1): 300.0})
    f = objective(0.0, nodes, [a, b], {"A": Placement("v", 1), "B": None})
    idle_v = 0.250 * 1.33 * 0.172  # EUR/h
    assert f.energy_eur == pytest.approx(1200 / 3600 * C_V100_2 / 2 + 1500 / 3600 * C_T4_1
                                         + idle_v * 1800 / 3600 / 2)
    assert f.tardiness_eur == 0 and f.worst_case_eur == 0 and f.reconfiguration_eur == 0


def test_move_charge_by_default() -> None:
    """The default charges a running job that is moved, resized or preempted its lost work
    and restart at its configuration's cost, plus 0.02 EUR; the paper's variant only its lost
    work. Both count it in the schedule's comparison, not in Eq. 1."""
    nodes = [v100("v", 2), t4()]
    r = job("R", 100_000, 1, 20, TABLE, Placement("v", 1), progress_s=30.0)
    s = PlannerSettings(restart_s=60)
    c = C_V100_2 / 2 / 3600  # shared: one GPU of the 2-GPU node, EUR/s
    assert reconfiguration_eur(r, nodes, s) == pytest.approx(90 * c + 0.02)
    assert reconfiguration_eur(r, nodes, PAPER) == pytest.approx(30 * C_V100_1 / 3600)
    f = objective(0, nodes, [r], {"R": Placement("t", 1)}, s)
    assert f.reconfiguration_eur == pytest.approx(90 * c + 0.02)
    assert f.selection_eur == pytest.approx(f.total_eur + 90 * c + 0.02)
    # the T4 saves less than the charge: it stays, and keeps its progress
    p = plan(0, nodes, [r], s)
    assert p.decisions["R"].placement == Placement("v", 1)
    assert p.decisions["R"].exec_time_s == pytest.approx(2000 - 30)
    assert p.changes([r]) == []


def test_local_search_swaps_configurations() -> None:
    """Both jobs are cheapest on the V100 (L: 100 s/epoch x c_v,1 = 0.00318 EUR/epoch
    against 170 s x c_t,1 = 0.00346 on the T4; C: 0.00318 against 250 s x c_t,1 = 0.00508).
    L is more pressing, so the greedy gives it the V100 and C the T4; exchanging their
    configurations saves (0.00508 - 0.00318) - (0.00346 - 0.00318) EUR per epoch, and the
    local search does it. Due dates are far."""
    nodes = [v100("v", 1), t4("t")]
    lstm = job("L", 30_000, 1, 20, {("v100-pcie-32gb", 1): 100.0, ("t4", 1): 170.0})
    cnn = job("C", 90_000, 1, 20, {("v100-pcie-32gb", 1): 100.0, ("t4", 1): 250.0})
    s = PlannerSettings(max_iterations=1, shadow_window_s=0)  # the shadow price decides it
    greedy = plan(0, nodes, [lstm, cnn], replace(s, local_search=False))
    assert (greedy.placement("L"), greedy.placement("C")) == (Placement("v", 1),
                                                              Placement("t", 1))
    better = plan(0, nodes, [lstm, cnn], s)
    assert (better.placement("L"), better.placement("C")) == (Placement("t", 1),
                                                              Placement("v", 1))
    assert better.local_moves == 1
    saved = 20 * ((250 - 100) - (170 - 100)) / 3600 * C_T4_1
    assert better.objective.selection_eur == pytest.approx(
        greedy.objective.selection_eur - saved - 20 * (100 - 100) / 3600 * C_V100_1)


def test_shadow_price_sends_the_job_that_loses_least_off_an_oversubscribed_class() -> None:
    """One V100 GPU, two jobs of 2000 s on it: over the 1800 s window they want 3600
    GPU-seconds of a class that has 1800, so one must run on the T4. Per V100 GPU-second, L
    loses (3400 s x c_t,1 - 2000 s x c_v,1) / 2000 s on the T4 and C (5000 s x c_t,1 - 2000 s
    x c_v,1) / 2000 s: C fills the V100 and L is the marginal job, so the V100's shadow price
    is the middle of the two regrets. With it the pure greedy (no local search) already puts
    L, the more pressing, on the T4 and C on the V100 — without it, L takes the V100 — and
    the shadow price is reported apart from the energy."""
    nodes = [v100("v", 1), t4("t")]
    lstm = job("L", 30_000, 1, 20, {("v100-pcie-32gb", 1): 100.0, ("t4", 1): 170.0})
    cnn = job("C", 90_000, 1, 20, {("v100-pcie-32gb", 1): 100.0, ("t4", 1): 250.0})
    regret_l = (3400 * C_T4_1 - 2000 * C_V100_1) / 3600 / 2000
    regret_c = (5000 * C_T4_1 - 2000 * C_V100_1) / 3600 / 2000
    lam = shadow_prices(nodes, [lstm, cnn])
    assert lam["v"] == pytest.approx((regret_l + regret_c) / 2, rel=1e-9)
    assert lam["t"] == 0.0
    s = PlannerSettings(max_iterations=1, local_search=False)
    p = plan(0, nodes, [lstm, cnn], s)
    assert (p.placement("L"), p.placement("C")) == (Placement("t", 1), Placement("v", 1))
    energy = (3400 * C_T4_1 + 2000 * C_V100_1) / 3600
    assert p.objective.energy_eur == pytest.approx(energy, rel=1e-9)
    assert p.objective.shadow_eur == pytest.approx(2000 * lam["v"], rel=1e-9)
    assert p.decisions["C"].energy_cost_eur == pytest.approx(2000 * C_V100_1 / 3600, rel=1e-9)
    off = plan(0, nodes, [lstm, cnn], replace(s, shadow_window_s=0))
    assert (off.placement("L"), off.placement("C")) == (Placement("v", 1), Placement("t", 1))
    assert off.objective.shadow_eur == 0.0
    # two jobs that lose the same by leaving: which one leaves does not matter, no price
    assert shadow_prices(nodes, [lstm, replace(lstm, id="L2")])["v"] == 0.0
    # two V100s hold both: no price
    two = [v100("v", 1), v100("w", 1), t4("t")]
    assert set(shadow_prices(two, [lstm, cnn]).values()) == {0.0}
    assert set(shadow_prices(nodes, [lstm, cnn], replace(s, shadow_window_s=0)).values()) \
        == {0.0}


def test_local_search_sends_a_running_job_home() -> None:
    """R2 runs on va, R1 on vb, W waits; the T4 is free. W is the most pressing and cheapest
    on a V100; R1 is much cheaper on the T4 (100 epochs: 11000 s x c_t,1 = 0.224 EUR against
    10000 s x c_v,1 = 0.318 EUR). The greedy builds from nothing: W takes the lowest-index
    V100, va, so R2 moves to vb (a needless move, 0.02 EUR) and R1 to the T4 — still better
    than keeping everyone (the incumbent, which leaves R1 on the V100). The local search
    sends R2 home and W to vb, saving R2's move charge."""
    nodes = [v100("va", 1), v100("vb", 1), t4("t")]
    w = job("W", 5_000, 1, 10, {("v100-pcie-32gb", 1): 100.0, ("t4", 1): 160.0})
    r2 = job("R2", 20_000, 1, 100, {("v100-pcie-32gb", 1): 100.0}, Placement("va", 1))
    r1 = job("R1", 1e6, 1, 100, {("v100-pcie-32gb", 1): 100.0, ("t4", 1): 110.0},
             Placement("vb", 1))
    jobs = [w, r2, r1]
    off = plan(0, nodes, jobs, PlannerSettings(max_iterations=2, local_search=False))
    assert [off.placement(j.id) for j in jobs] == [
        Placement("va", 1), Placement("vb", 1), Placement("t", 1)]
    p = plan(0, nodes, jobs, PlannerSettings(max_iterations=2))
    assert [p.placement(j.id) for j in jobs] == [
        Placement("vb", 1), Placement("va", 1), Placement("t", 1)]
    assert p.local_moves == 1
    assert p.changes(jobs) == ["W", "R1"]
    assert p.objective.selection_eur == pytest.approx(off.objective.selection_eur - 0.02)



def test_pressing_incumbent_lets_an_urgent_job_preempt_only_the_least_pressing() -> None:
    """The three GPUs run R1 (va), R3 (vb) and R2 (the T4); U arrives and can meet its due
    date only if it starts now on a V100 (waiting: ρ ω τ̂ = 100 x 100 s / 3600 = 2.78 EUR).
    Pressure: U > R2 > R3 > R1. The greedy builds from nothing: U takes va, R2 takes vb (a
    V100 is cheaper for it than the T4 it runs on), and R3 and R1 are left out — three running
    jobs stopped. The incumbent keeps all three and leaves U waiting. The pressing incumbent
    (iteration 2) goes in pressure order with every running job preferring its place: U takes
    va, R2 and R3 stay, only R1 (the least pressing) is preempted."""
    nodes = [v100("va", 1), v100("vb", 1), t4("t")]
    u = job("U", 1200, 1, 10, {("v100-pcie-32gb", 1): 100.0})
    r2 = job("R2", 3500, 1, 20, {("v100-pcie-32gb", 1): 100.0, ("t4", 1): 170.0},
             Placement("t", 1))
    r3 = job("R3", 3000, 1, 10, {("v100-pcie-32gb", 1): 100.0}, Placement("vb", 1))
    r1 = job("R1", 100_000, 1, 10, {("v100-pcie-32gb", 1): 100.0}, Placement("va", 1))
    jobs = [u, r2, r3, r1]
    off = plan(0, nodes, jobs, PlannerSettings(max_iterations=2, local_search=False,
                                               pressing_incumbent=False))
    assert [off.placement(j.id) for j in jobs] == [
        Placement("va", 1), Placement("vb", 1), None, None]
    assert off.best_iteration == 0  # the greedy
    on = plan(0, nodes, jobs, PlannerSettings(max_iterations=3, local_search=False))
    assert [on.placement(j.id) for j in jobs] == [
        Placement("va", 1), Placement("t", 1), Placement("vb", 1), None]
    assert on.best_iteration == 2
    assert on.changes(jobs) == ["U", "R1"]
    assert on.objective.selection_eur < off.objective.selection_eur
    # the default planner gets there too, without a local-search change
    assert plan(0, nodes, jobs).local_moves == 0

# ------------------------------------------------------------------------------ invariants

MODELS = ("v100-pcie-32gb", "t4")


@st.composite
def instances(draw: st.DrawFn) -> tuple[list[PlanNode], list[PlanJob], float]:
    n_nodes = draw(st.integers(1, 5))
    nodes = []
    for i in range(n_nodes):
        model = draw(st.sampled_from(MODELS))
        nodes.append(PlanNode(f"n{i}", model, draw(st.integers(1, 4)),
                              V100 if model == MODELS[0] else T4))
    now = draw(st.floats(0, 5000))
    free = {n.name: n.gpus for n in nodes}
    jobs = []
    for k in range(draw(st.integers(0, 12))):
        table = {(m, g): draw(st.floats(1, 500)) for m in MODELS for g in (1, 2, 4)
                 if draw(st.booleans())}
        current = None
        if draw(st.booleans()):
            fits = [(name, g) for name, f in free.items() for g in (1, 2) if f >= g]
            if fits:
                name, g = draw(st.sampled_from(fits))
                free[name] -= g
                current = Placement(name, g)
        jobs.append(PlanJob(f"j{k}", draw(st.floats(0, 20_000)), draw(st.floats(0.1, 10)),
                            draw(st.integers(1, 100)), table, current,
                            progress_s=draw(st.floats(0, 50))))
    return nodes, jobs, now


@settings(max_examples=60, deadline=None)
@given(instances(), st.integers(0, 3), st.booleans())
def test_plan_invariants(inst: tuple[list[PlanNode], list[PlanJob], float], seed: int,
                         paper: bool) -> None:
    """No node gets more GPUs than it has; a job runs on at most one configuration it has a
    profile for; the plan's reported f_OBJ equals Eq. 1 recomputed from scratch (with the
    paper's energy term or gputopo's); and the same input gives the same plan."""
    nodes, jobs, now = inst
    s = (PlannerSettings.paper if paper else PlannerSettings)(max_iterations=30, seed=seed)
    p = plan(now, nodes, jobs, s)
    assert set(p.decisions) == {j.id for j in jobs}
    by_node = {n.name: n for n in nodes}
    used = dict.fromkeys(by_node, 0)
    for j in jobs:
        where = p.decisions[j.id].placement
        if where is None:
            continue
        used[where.node] += where.gpus
        assert (by_node[where.node].model_key, where.gpus) in j.epoch_time_s
    assert all(used[n] <= by_node[n].gpus for n in used)
    again = objective(now, nodes, jobs, {k: d.placement for k, d in p.decisions.items()}, s)
    assert again.total_eur == pytest.approx(p.objective.total_eur, rel=1e-9, abs=1e-9)
    assert again.reconfiguration_eur == pytest.approx(p.objective.reconfiguration_eur,
                                                      rel=1e-9, abs=1e-9)
    assert plan(now, nodes, jobs, s) == p
