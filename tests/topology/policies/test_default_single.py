"""The default policy's one-GPU rule (``topology/policies/default.py``): the free GPU whose
removal keeps the most PreservedBW (MAPA Eq. 3), ties to the one with most busy PIX siblings
(Gaia Singular), then the lowest index; its runner-up is the next by the same rule."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.topology.strategies import states, topologies
from topology import catalog
from topology.model import PCIeLevel, Topology
from topology.policies.bandwidth import preserved_bandwidth
from topology.policies.base import Decision, NodeState, Request
from topology.policies.common import MODEL_GPUTOPO
from topology.policies.memo import Memo
from topology.policies.registry import get_policy


def ranking(topo: Topology, state: NodeState) -> list[int]:
    """The rule, written out: each free GPU by (PreservedBW left, busy PIX siblings, index)."""
    free = state.free_gpus(topo)

    def left(g: int) -> float:
        return preserved_bandwidth(topo, [f for f in free if f != g])

    def busy_siblings(g: int) -> int:
        return sum(1 for o in range(topo.size) if o != g and o not in free
                   and topo.links[g][o].pcie == PCIeLevel.PIX)

    return sorted(free, key=lambda g: (-round(left(g), 9), -busy_siblings(g), g))


def decide(topo: Topology, state: NodeState) -> Decision:
    return get_policy("gputopo").fn(topo, state, Request(1), Memo())


@given(topologies(min_gpus=2, max_gpus=9), st.data())
def test_one_gpu_follows_the_rule_on_any_topology(topo: Topology, data: st.DataObject) -> None:
    state = data.draw(states(topo.size))
    ranked = ranking(topo, state)
    assume(ranked)
    d = decide(topo, state)
    assert d.gpus == (ranked[0],)
    assert d.policy == "gputopo" and d.reason.startswith("single GPU: keeps the most")
    assert d.bandwidth_model == MODEL_GPUTOPO
    assert d.preserved_bandwidth_gbps == pytest.approx(
        preserved_bandwidth(topo, [f for f in ranked if f != ranked[0]]))
    if len(ranked) == 1:
        assert d.runner_up is None
        return
    r = ranked[1]
    assert d.runner_up is not None and d.runner_up.gpus == (r,)
    assert d.runner_up.aggregated_bandwidth_gbps == 0.0
    assert d.runner_up.effective_bandwidth_gbps == 0.0
    assert d.runner_up.preserved_bandwidth_gbps == pytest.approx(
        preserved_bandwidth(topo, [f for f in ranked if f != r]))


@pytest.mark.parametrize(("machine", "busy", "expected"), [
    # DGX-1 V100, all idle: every GPU leaves the same PreservedBW, no sibling is busy -> GPU 0
    ("dgx1-v100", (), 0),
    # PCIe-only box: PreservedBW is flat, so the busy PIX sibling decides (Gaia Singular)
    ("pcie-8gpu", (2,), 3),
])
def test_one_gpu_hand_checked(machine: str, busy: tuple[int, ...], expected: int) -> None:
    topo = catalog.get(machine)
    state = NodeState.whole(busy)
    assert ranking(topo, state)[0] == expected
    assert decide(topo, state).gpus == (expected,)
