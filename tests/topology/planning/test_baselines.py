"""FIFO, EDF and PS (ANDREAS §V-B's first-principle methods) with their two configuration
rules: Algorithm 1's (cheapest on time, else fastest) and ``-fastest`` (no energy model)."""

from __future__ import annotations

import pytest

from tests.topology.planning.test_andreas import TABLE, job, t4, v100
from topology.planning.andreas import Placement
from topology.planning.baselines import METHODS, plan_queue


def test_methods_are_three_orders_times_two_rules() -> None:
    assert set(METHODS) == {"fifo", "edf", "ps", "fifo-fastest", "edf-fastest", "ps-fastest"}


def test_rule_cheapest_on_time_versus_fastest() -> None:
    """20 epochs (TABLE): T4 2600 s is the cheapest that meets a 3000 s due date; 2 x V100
    (1400 s) is the fastest. The plain method takes the former, ``-fastest`` the latter."""
    nodes, jobs = [v100(), t4()], [job("A", 3000, 1, 20, TABLE)]
    assert plan_queue("edf", 0, nodes, jobs) == {"A": Placement("t", 1)}
    assert plan_queue("edf-fastest", 0, nodes, jobs) == {"A": Placement("v", 2)}
    # nothing meets a 1000 s due date: both rules take the fastest
    late = [job("A", 1000, 1, 20, TABLE)]
    assert plan_queue("fifo", 0, nodes, late) == plan_queue("fifo-fastest", 0, nodes, late)


def test_fastest_that_the_free_gpus_allow_and_running_jobs_stay() -> None:
    """A running job holds one V100: ``-fastest`` gives the next job the other V100 (2000 s),
    not the T4 (2600 s), and never touches the running one."""
    running = job("R", 9000, 1, 20, TABLE, Placement("v", 1))
    out = plan_queue("ps-fastest", 0, [v100(), t4()], [running, job("A", 3000, 1, 20, TABLE)])
    assert out == {"R": Placement("v", 1), "A": Placement("v", 1)}


def test_order_decides_who_gets_the_fastest() -> None:
    """Two waiting jobs, one 2 x V100 node: the first in the method's order takes both GPUs
    and the strict queue leaves the other waiting."""
    early_due = job("E", 2000, 1, 20, TABLE, submitted_s=50)
    heavy = job("H", 9000, 5, 20, TABLE, submitted_s=0)
    nodes = [v100()]
    assert plan_queue("edf-fastest", 100, nodes, [heavy, early_due]) == {
        "E": Placement("v", 2), "H": None}
    assert plan_queue("ps-fastest", 100, nodes, [heavy, early_due]) == {
        "H": Placement("v", 2), "E": None}
    assert plan_queue("fifo-fastest", 100, nodes, [heavy, early_due]) == {
        "H": Placement("v", 2), "E": None}


def test_unknown_method_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown method 'edf-cheapest'"):
        plan_queue("edf-cheapest", 0, [v100()], [job("A", 3000, 1, 20, TABLE)])
