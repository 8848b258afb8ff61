"""Node scores (topology.policies.scoring): range, the ideal reference, Singular/Fragment
preferences, fragmentation tables."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from tests.topology.strategies import states, topologies
from topology import catalog
from topology.model import GPU, PCIeLevel, Topology, deterministic_uuid
from topology.patterns import ring
from topology.policies.bandwidth import preserved_bandwidth
from topology.policies.base import GPUUsage, NodeState, NoFit, Request
from topology.policies.evaluate import Evaluator
from topology.policies.registry import DEFAULT_POLICY as POLICY
from topology.policies.scoring import (
    class_tables,
    fragmentation,
    node_score,
)

#: This module's own evaluator (decision cache and policy memo; nothing shared).
EV = Evaluator()
place = EV.place

DGX = catalog.get("dgx1-v100")


def score(state: NodeState, request: Request, topo: Topology = DGX, policy: str = POLICY) -> int:
    return node_score(policy, topo, state, request, place(policy, topo, state, request),
                      evaluator=EV).score


@given(topo=topologies(2, 8), data=st.data())
def test_scores_stay_in_range(topo: Topology, data: st.DataObject) -> None:
    state = data.draw(states(topo.size))
    req = data.draw(st.one_of(
        st.builds(lambda k, s: Request(count=k, bandwidth_sensitive=s),
                  st.integers(1, topo.size), st.booleans()),
        st.builds(lambda c: Request(count=0, core_percent=c), st.integers(1, 100)),
    ))
    for policy in ("baseline", POLICY):
        try:
            d = place(policy, topo, state, req)
        except NoFit:
            continue
        s = node_score(policy, topo, state, req, d, evaluator=EV)
        assert 0 <= s.score <= 10
        assert 0.0 <= s.quality <= 1.0 and 0.0 <= s.fragmentation <= 1.0


def test_idle_node_is_the_reference_for_sensitive_jobs() -> None:
    req = Request(count=4, pattern=ring(4), bandwidth_sensitive=True)
    d = place(POLICY, DGX, NodeState(), req)
    s = node_score(POLICY, DGX, NodeState(), req, d, evaluator=EV)
    assert s.kind == "bandwidth" and s.quality == 1.0
    # only the PCIe-separated half-pairs left: worse links, lower score
    poor = NodeState.whole([1, 3, 4, 6])  # free 0,2,5,7: no NV2 ring possible
    assert score(poor, req) < score(NodeState(), req)


def test_singular_prefers_a_gpu_whose_siblings_are_busy() -> None:
    req = Request(count=1)
    # node A: idle; node B: only GPU 7 free (last GPU; nothing to break)
    assert score(NodeState.whole(range(7)), req) > score(NodeState(), req)


def test_fragment_prefers_a_partly_used_gpu() -> None:
    req = Request(count=0, core_percent=30)
    shared = NodeState({2: GPUUsage(50, 0)})
    assert score(shared, req) > score(NodeState(), req)
    # best fit: the tighter the fit, the higher
    tighter = NodeState({2: GPUUsage(70, 0)})
    assert score(tighter, req) >= score(shared, req)


def test_insensitive_jobs_prefer_a_tight_fit() -> None:
    req = Request(count=2, bandwidth_sensitive=False)
    # two free GPUs left on this node: taking them destroys no bandwidth anyone could use
    tight = NodeState.whole([0, 1, 2, 3, 4, 5])
    assert score(tight, req) > score(NodeState(), req)


def test_exact_tables_match_brute_force() -> None:
    t = class_tables(DGX)
    assert t.exact
    for k in range(DGX.size + 1):
        values = [preserved_bandwidth(DGX, list(s)) for s in itertools.combinations(range(8), k)]
        assert abs(t.pb_max[k] - max(values)) < 1e-9
        assert abs(t.pb_min[k] - min(values)) < 1e-9
    assert fragmentation(DGX, [3]) == 0.0 and fragmentation(DGX, []) == 0.0
    best4 = max(itertools.combinations(range(8), 4), key=lambda s: preserved_bandwidth(DGX, s))
    assert fragmentation(DGX, list(best4)) == 0.0
    assert fragmentation(DGX, [0, 5]) > 0.0  # a PCIe-only pair where an NV2 pair could be


def test_greedy_tables_above_the_exact_limit() -> None:
    n = 18
    gpus = [GPU(i, deterministic_uuid("big", i), "", "G", 16384, i // 9, frozenset())
            for i in range(n)]
    nv = {(i, i + 1): 2 for i in range(n - 1)}
    topo = Topology.build("big", gpus, nv, PCIeLevel.SYS)
    t = class_tables(topo)
    assert not t.exact
    assert t.pb_max[n] == t.pb_min[n] == preserved_bandwidth(topo, list(range(n)))
    assert all(t.pb_max[k] >= t.pb_min[k] for k in range(n + 1))
    s = score(NodeState.whole(range(10)), Request(count=3), topo, "baseline")
    assert 0 <= s <= 10
