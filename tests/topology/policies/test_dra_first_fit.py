"""NVIDIA's DRA model as kube-scheduler's 1.36 allocator gives it: first fit in device order,
with and without matchAttribute pcieRoot; and the simulator's random node choice."""

from __future__ import annotations

import pytest

from simulator.engine import Simulation
from simulator.workloads import mapa
from topology import catalog
from topology.dra import pcie_roots
from topology.policies.base import NodeState, NoFit, Request
from topology.policies.evaluate import Evaluator

DGX1 = catalog.get("dgx1-v100")
place = Evaluator().place


def test_first_fit_takes_the_lowest_free_gpus() -> None:
    d = place("dra-first-fit", DGX1, NodeState.whole([0, 2]), Request(count=3))
    assert d.gpus == (1, 3, 4)
    assert d.policy == "dra-first-fit"


def test_pcie_root_constraint_takes_the_first_set_on_one_root() -> None:
    roots = pcie_roots(DGX1)
    assert roots[0] == roots[1] != roots[2]  # the fake DGX-1: GPU pairs share a root
    d = place("dra-first-fit-pcieroot", DGX1, NodeState.whole([0]), Request(count=2))
    assert d.gpus == (2, 3)
    # one GPU: any free GPU satisfies it
    assert place("dra-first-fit-pcieroot", DGX1, NodeState.whole([0]),
                 Request(count=1)).gpus == (1,)
    # more GPUs than a root holds: the user writes no constraint, plain first fit
    d = place("dra-first-fit-pcieroot", DGX1, NodeState.whole([1]), Request(count=3))
    assert d.gpus == (0, 2, 3) and "exceed a PCIe root" in d.reason
    with pytest.raises(NoFit, match="share a PCIe root"):
        place("dra-first-fit-pcieroot", DGX1, NodeState.whole([0, 2, 4, 6]), Request(count=2))


def test_random_node_choice_is_seeded_and_spreads() -> None:
    wl = mapa(jobs=40, seed=3)
    runs = [Simulation(DGX1, 4, wl, "dra-first-fit").run() for _ in range(2)]
    nodes = [[r.node for r in run.records] for run in runs]
    assert nodes[0] == nodes[1]  # the same choice every run
    assert runs[0].node_choice == "random"
    assert len(set(nodes[0])) > 1
