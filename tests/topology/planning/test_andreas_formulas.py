"""ANDREAS' formulas one by one (Table I's t_jng and c_ng, Eq. 2's pressure, Appendix A's M_j,
Eq. 1's terms, the reconfiguration charge) on cases where a slip changes the figure: written
for the seventeenth mutation round (docs/testing.md), each test names the behaviour it pins.

Hand-computed figures use the V100 and T4 power profiles of ``test_andreas.py``: c_ng =
(idle + g · gpu) W / 1000 x PUE x EUR/kWh.
"""

from __future__ import annotations

import pytest

from tests.topology.planning.test_andreas import T4, V100
from topology.planning.andreas import (
    Placement,
    PlanJob,
    PlannerSettings,
    PlanningError,
    PlanNode,
    execution_time_s,
    objective,
    pressure_s,
    reconfiguration_eur,
    slowest_time_s,
)
from topology.planning.energy import EnergyPrice

V = "v100-pcie-32gb"
#: 1 EUR/kWh, PUE 1: c_ng in EUR/h is the node's kW
UNIT = EnergyPrice(pue=1.0, eur_per_kwh=1.0)
PAPER = PlannerSettings.paper()


def v100(name: str = "v", gpus: int = 2) -> PlanNode:
    return PlanNode(name, "Tesla V100-PCIE-32GB", gpus, V100)


def t4(name: str = "t") -> PlanNode:
    return PlanNode(name, "Tesla T4", 1, T4)


# ------------------------------------------------------------------------------ t_jng, Δ_j, M_j


def test_a_configuration_with_more_gpus_than_the_node_has_no_time() -> None:
    """t_jng exists only for g ≤ G_n (Table I): a profile for 4 V100s does not make a 2-GPU
    V100 node run the job on 4, nor count towards Δ_j or M_j there."""
    node = v100("v", gpus=2)
    j = PlanJob("A", 1000.0, 1.0, 10, {(V, 1): 100.0, (V, 4): 10.0})
    assert execution_time_s(j, node, 4) is None
    assert execution_time_s(j, node, 0) is None
    assert execution_time_s(j, node, 1) == pytest.approx(1000.0)
    # Δ = 0 + 1000 (the 1-GPU time: 4 GPUs do not fit) - 1000
    assert pressure_s(j, [node], 0.0) == pytest.approx(0.0)


def test_pressure_and_the_slowest_time_count_the_one_gpu_configuration() -> None:
    """Eq. 2's min and Appendix A's M_j run over every g from 1: a job whose profile has a
    single GPU only has Δ_j and M_j from it (not +inf / None)."""
    j = PlanJob("A", 500.0, 1.0, 4, {("t4", 1): 100.0})
    assert pressure_s(j, [t4()], 200.0) == pytest.approx(200.0 + 400.0 - 500.0)
    assert slowest_time_s(j, [t4()]) == pytest.approx(400.0)


# ------------------------------------------------------------------------------ reconfiguration


def test_a_waiting_job_costs_nothing_to_reconfigure() -> None:
    """Only a running job loses work when the plan moves it; a waiting one costs 0."""
    j = PlanJob("A", 1000.0, 1.0, 1, {("t4", 1): 10.0}, progress_s=500.0)
    assert reconfiguration_eur(j, [t4()], PlannerSettings(move_penalty_eur=0.5)) == 0.0


def test_reconfiguring_a_job_on_an_unknown_node_is_a_planning_error() -> None:
    """A running job whose node is not among the nodes is refused naming it (not a bare
    StopIteration from the lookup)."""
    j = PlanJob("A", 1000.0, 1.0, 1, {("t4", 1): 10.0}, current=Placement("gone", 1))
    with pytest.raises(PlanningError, match="job A: runs on unknown node 'gone'"):
        reconfiguration_eur(j, [t4()])


# ------------------------------------------------------------------------------ Eq. 1, energy "all"


def test_a_waiting_jobs_energy_is_its_cheapest_configuration_under_the_given_settings() -> None:
    """With the energy term over every job, a postponed job counts its cheapest π (module
    docstring) — priced with the settings' price and idle rule, not the defaults. One T4
    (320 W busy) at 1 EUR/kWh, 1000 s: 0.32 x 1000 / 3600 EUR."""
    s = PlannerSettings(price=UNIT, shared_idle=False, local_search=False,
                        shadow_window_s=0.0)
    j = PlanJob("A", 1e9, 1.0, 10, {("t4", 1): 100.0})
    f = objective(0.0, [t4()], [j], {"A": None}, s)
    assert f.energy_eur == pytest.approx(0.320 * 1000 / 3600)


def test_a_postponed_running_jobs_cheapest_energy_includes_its_restart() -> None:
    """A running job the schedule preempts would restart anywhere but where it runs: each such
    configuration's t_jng grows by ``restart_s`` (never shrinks), so its cheapest π does.
    The job runs on 2 V100s (900 s left, 750 W); 1 V100 takes 1000 s + 200 s restart at
    500 W: π = 0.5 x 1200 / 3600 EUR (below staying, 0.75 x 900 / 3600)."""
    s = PlannerSettings(price=UNIT, shared_idle=False, local_search=False,
                        shadow_window_s=0.0, restart_s=200.0, move_penalty_eur=0.0)
    j = PlanJob("A", 1e9, 1.0, 10, {(V, 1): 100.0, (V, 2): 90.0},
                current=Placement("v", 2))
    f = objective(0.0, [v100("v")], [j], {"A": None}, s)
    assert f.energy_eur == pytest.approx(0.5 * 1200 / 3600)


# ------------------------------------------------------------------------------ shadow term


def _shadow_case() -> tuple[list[PlanNode], PlanJob, PlanJob, float]:
    """An oversubscribed 2-GPU V100 node at 1 EUR/kWh (``test_andreas.py``'s case on two
    GPUs): L and C each run 1000 s on both V100s (0.75 kW: 0.75 x 1000 / 3600 EUR) and want
    2 x 1000 GPU-seconds of the window's 2 x 1800; L on the T4 takes 3400 s x 0.32 kW, C
    5000 s. The V100's shadow price per GPU-second is the middle of their regrets, (π on
    the T4 - π on the V100) / (g · t)."""
    nodes = [v100("v", 2), t4("t")]
    lstm = PlanJob("L", 30_000, 1.0, 20, {(V, 2): 50.0, ("t4", 1): 170.0})
    cnn = PlanJob("C", 90_000, 1.0, 20, {(V, 2): 50.0, ("t4", 1): 250.0})
    regret_l = (3400 * 0.320 - 1000 * 0.750) / 3600 / (2 * 1000)
    regret_c = (5000 * 0.320 - 1000 * 0.750) / 3600 / (2 * 1000)
    return nodes, lstm, cnn, (regret_l + regret_c) / 2


def test_eq1_reports_the_shadow_term_apart_with_the_settings_price() -> None:
    """objective() prices the GPU time a schedule takes on an oversubscribed class at the
    class's shadow price (with the settings' energy price, window and idle rule), apart from
    the energy: C's 2 x 1000 V100 GPU-seconds at λ_v; for L waiting, what its cheapest
    configuration with the shadow price (the T4, 3400 s x 0.32 kW) costs above its cheapest
    energy (the V100s, 1000 s x 0.75 kW); a job no node can run adds nothing."""
    nodes, lstm, cnn, lam_v = _shadow_case()
    nowhere = PlanJob("Z", 1e9, 1.0, 1, {("a100", 1): 1.0})
    jobs = [cnn, lstm, nowhere]
    s = PlannerSettings(price=UNIT)
    placed = objective(0.0, nodes, jobs, {"L": Placement("t", 1), "C": Placement("v", 2)}, s)
    assert placed.shadow_eur == pytest.approx(2 * 1000 * lam_v, rel=1e-9)
    assert placed.energy_eur == pytest.approx((3400 * 0.320 + 1000 * 0.750) / 3600, rel=1e-9)
    waiting = objective(0.0, nodes, jobs, {"L": None, "C": Placement("v", 2)}, s)
    assert waiting.shadow_eur == pytest.approx(
        2 * 1000 * lam_v + (3400 * 0.320 - 1000 * 0.750) / 3600, rel=1e-9)
    assert waiting.selection_eur == pytest.approx(
        waiting.total_eur + waiting.shadow_eur, rel=1e-12)
    # no window, no shadow term
    off = objective(0.0, nodes, jobs, {"L": None, "C": Placement("v", 2)},
                    PlannerSettings(price=UNIT, shadow_window_s=0.0))
    assert off.shadow_eur == 0.0


def test_eq1_adds_the_restart_to_a_moved_job_only() -> None:
    """t_jng of a running job placed elsewhere grows by ``restart_s`` (its tardiness and π
    with it); a waiting job that starts pays no restart. Two 1-GPU T4 nodes at 0.32 kW, 1
    EUR/kWh: R moves from t1 to t2, 1000 s + 600 s restart, due at 1200 s: 400 s late at
    ω = 3.6 EUR/h; W starts on t1 for 1000 s, due at 1000 s: on time."""
    nodes = [PlanNode("t1", "Tesla T4", 1, T4), PlanNode("t2", "Tesla T4", 1, T4)]
    r = PlanJob("R", 1200.0, 3.6, 10, {("t4", 1): 100.0}, current=Placement("t1", 1))
    w = PlanJob("W", 1000.0, 3.6, 10, {("t4", 1): 100.0})
    s = PlannerSettings.paper(price=UNIT, restart_s=600.0)
    f = objective(0.0, nodes, [r, w], {"R": Placement("t2", 1), "W": Placement("t1", 1)}, s)
    assert f.tardiness_eur == pytest.approx(0.001 * 400)
    # the paper's energy term: each node's first-ending job, here one per node
    assert f.energy_eur == pytest.approx((1600 + 1000) * 0.320 / 3600)


def test_eq1_charges_each_gpu_a_used_node_leaves_free() -> None:
    """Energy term ``all`` with shared idle power: a used node's free GPUs each cost their
    share of its idle power for ``vacancy_s``. One job on one GPU of a 4-GPU V100 node
    (1000 s at 1 · 1.25 kW / 4) leaves three free: 3 x 0.25 kW / 4 x 1800 s."""
    node = v100("v", gpus=4)
    j = PlanJob("A", 1e9, 1.0, 10, {(V, 1): 100.0})
    f = objective(0.0, [node], [j], {"A": Placement("v", 1)}, PlannerSettings(price=UNIT))
    assert f.energy_eur == pytest.approx((1000 * 1.250 / 4 + 3 * 0.250 / 4 * 1800) / 3600)
