"""ANDREAS' cost model counts a gang's nodes: GPUs other pods hold (the pods of gangs the
planner admitted across nodes) share the node's idle power with the jobs it plans there."""

from __future__ import annotations

import pytest

from topology.planning.andreas import (
    PlanJob,
    PlannerSettings,
    PlanningError,
    PlanNode,
    cost_eur_per_h,
    plan,
)
from topology.planning.energy import EnergyPrice, PowerProfile, node_cost_eur_per_h

V100 = PowerProfile(idle_w=250.0, gpu_w=250.0)
MODEL = "Tesla V100-PCIE-32GB"


def test_a_job_beside_a_gang_pays_its_share_of_the_whole_node() -> None:
    """A 4-GPU V100 node whose other 2 GPUs a gang holds: a 1-GPU job is charged a quarter of
    the node fully busy, as on an idle 4-GPU node — not half of a 2-GPU node's idle power."""
    price = EnergyPrice()
    whole = PlanNode("n", MODEL, 4, V100)
    beside = PlanNode("n", MODEL, 2, V100, total_gpus=4)
    alone = PlanNode("n", MODEL, 2, V100)
    s = PlannerSettings()
    assert cost_eur_per_h(beside, 1, s) == pytest.approx(cost_eur_per_h(whole, 1, s))
    assert cost_eur_per_h(beside, 1, s) == pytest.approx(
        node_cost_eur_per_h(V100, 4, price) / 4)
    assert cost_eur_per_h(alone, 1, s) > cost_eur_per_h(beside, 1, s)
    # the paper's c_ng (no sharing) is what it was
    paper = PlannerSettings().paper()
    assert cost_eur_per_h(beside, 1, paper) == node_cost_eur_per_h(V100, 1, price)


def test_plans_use_the_free_gpus_only() -> None:
    job = PlanJob("j", due_s=10_000.0, weight_eur_per_h=1.0, remaining_epochs=10,
                  epoch_time_s={("v100-pcie-32gb", 1): 10.0, ("v100-pcie-32gb", 2): 6.0,
                                ("v100-pcie-32gb", 3): 5.0})
    p = plan(0.0, [PlanNode("n", MODEL, 2, V100, total_gpus=4)], [job],
             PlannerSettings(max_iterations=5))
    d = p.decisions["j"]
    assert d.placement is not None and d.placement.gpus <= 2
    with pytest.raises(PlanningError, match="total_gpus 1 < gpus 2"):
        plan(0.0, [PlanNode("n", MODEL, 2, V100, total_gpus=1)], [job])
