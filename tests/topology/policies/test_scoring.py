"""Node scores (topology.policies.scoring): range, the ideal reference, Singular/Fragment
preferences, fragmentation tables, and one scale across node classes (a sensitive pod prefers
the idle DGX to the idle PCIe box; insensitive, one-GPU and share pods the other way round;
Amaral's utility policies by utility)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.topology.strategies import states, topologies
from topology import catalog
from topology.model import GPU, PCIeLevel, Topology, deterministic_uuid
from topology.patterns import ring
from topology.policies import amaral
from topology.policies.bandwidth import preserved_bandwidth
from topology.policies.base import GPUUsage, NodeState, NoFit, Request
from topology.policies.evaluate import Evaluator
from topology.policies.registry import DEFAULT_POLICY as POLICY
from topology.policies.scoring import (
    NodeScore,
    class_tables,
    fragmentation,
    node_score,
    score_scale,
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


# ------------------------------------------------------------------ one scale across classes
PCIE = catalog.get("pcie-8gpu")
A100 = catalog.get("dgx-a100")


def scores_on(
    topos: list[Topology], request: Request, policy: str = POLICY,
    states_: list[NodeState] | None = None,
) -> list[NodeScore]:
    """Each node's score on the scale shared by all of them (as one prioritize call)."""
    sts = states_ or [NodeState()] * len(topos)
    scale = score_scale(policy, topos, request, EV)
    return [node_score(policy, t, s, request, place(policy, t, s, request), evaluator=EV,
                       scale=scale)
            for t, s in zip(topos, sts, strict=True)]


@given(topo=topologies(2, 8), data=st.data())
def test_a_scale_of_one_class_gives_the_classes_own_scores(
    topo: Topology, data: st.DataObject
) -> None:
    """Homogeneous clusters and the simulator score exactly as per class."""
    state = data.draw(states(topo.size))
    req = data.draw(st.one_of(
        st.builds(lambda k, s: Request(count=k, bandwidth_sensitive=s),
                  st.integers(1, topo.size), st.booleans()),
        st.builds(lambda c: Request(count=0, core_percent=c), st.integers(1, 100)),
    ))
    for policy in ("baseline", POLICY, "topo-aware"):
        try:
            d = place(policy, topo, state, req)
        except NoFit:
            continue
        own = score_scale(policy, [topo], req, EV)
        assert node_score(policy, topo, state, req, d, evaluator=EV, scale=own) == node_score(
            policy, topo, state, req, d, evaluator=EV)


@given(a=topologies(2, 8), b=topologies(2, 8), data=st.data())
def test_scores_on_a_shared_scale_stay_in_range(
    a: Topology, b: Topology, data: st.DataObject
) -> None:
    k = data.draw(st.integers(1, min(a.size, b.size)))
    req = Request(count=k, bandwidth_sensitive=data.draw(st.booleans()))
    for policy in ("baseline", POLICY, "topo-aware"):
        scale = score_scale(policy, [a, b], req, EV)
        for topo in (a, b):
            state = data.draw(states(topo.size))
            try:
                d = place(policy, topo, state, req)
            except NoFit:
                continue
            s = node_score(policy, topo, state, req, d, evaluator=EV, scale=scale)
            assert 0 <= s.score <= 10
            assert 0.0 <= s.quality <= 1.0 and 0.0 <= s.fragmentation <= 1.0


def test_a_sensitive_pod_prefers_the_idle_dgx_to_the_idle_pcie_box() -> None:
    """The issue's case: each alone scores 10 against its own best; on one scale the PCIe box's
    links (12 GB/s class) score far below the DGX's NVLinks."""
    req = Request(count=4, pattern=ring(4), bandwidth_sensitive=True)
    assert score(NodeState(), req, PCIE) == score(NodeState(), req, DGX) == 10
    dgx, pcie = scores_on([DGX, PCIE], req)
    assert dgx.score == 10 and dgx.quality == 1.0
    assert pcie.score < dgx.score and pcie.quality < 0.5
    # the reference is the best idle node of any class: an A100 (NVSwitch) beats both
    a100, dgx3, pcie3 = scores_on([A100, DGX, PCIE], req)
    assert a100.score == 10 and a100.score > dgx3.score > pcie3.score
    d_dgx = place(POLICY, DGX, NodeState(), req)
    d_a100 = place(POLICY, A100, NodeState(), req)
    assert dgx3.quality == pytest.approx(
        d_dgx.effective_bandwidth_gbps / d_a100.effective_bandwidth_gbps)
    # a half-used DGX still offers the pod more than the idle PCIe box
    half = NodeState.whole([1, 3, 4, 6])
    dgx_half, pcie_idle = scores_on([DGX, PCIE], req, states_=[half, NodeState()])
    assert dgx_half.score > pcie_idle.score


def test_an_insensitive_pod_leaves_the_nvlink_machines_alone() -> None:
    req = Request(count=2, bandwidth_sensitive=False)
    # per class the PCIe box scored below the DGX (3 < 4): it loses a bigger share of its own
    assert score(NodeState(), req, PCIE) < score(NodeState(), req, DGX)
    pcie, dgx, a100 = scores_on([PCIE, DGX, A100], req)
    assert pcie.kind == dgx.kind == a100.kind == "preserve"
    assert pcie.score > a100.score and pcie.quality > dgx.quality > a100.quality


def test_one_gpu_and_a_fresh_share_go_where_the_nearest_peer_is_farthest() -> None:
    for req in (Request(count=1), Request(count=0, core_percent=30, memory_mib=4096)):
        # per class the A100 (all peers equally close) scored best
        assert score(NodeState(), req, A100) > score(NodeState(), req, PCIE)
        pcie, dgx, a100 = scores_on([PCIE, DGX, A100], req)
        assert pcie.quality > dgx.quality > a100.quality
        assert pcie.score > a100.score


def test_a_share_still_fills_a_shared_gpu_first_across_types() -> None:
    req = Request(count=0, core_percent=30)
    shared = NodeState({2: GPUUsage(50, 0)})
    a100_shared, pcie_idle = scores_on([A100, PCIE], req, states_=[shared, NodeState()])
    assert a100_shared.quality > 0.5 > pcie_idle.quality
    assert a100_shared.score > pcie_idle.score


def test_utility_policies_rank_nodes_by_amaral_utility_on_one_scale() -> None:
    req = Request(count=4, pattern=ring(4), bandwidth_sensitive=True)
    topos = [A100, DGX, PCIE]
    ss = scores_on(topos, req, "topo-aware")
    assert all(s.kind == "utility" for s in ss)
    assert ss[0].quality > ss[1].quality > ss[2].quality
    # the quality is (C + I) / 2 with C normalised by the lowest t* of the three types
    pattern = req.effective_pattern()
    t_star = min(amaral.best_cost(t, 4, pattern.edges) for t in topos)
    for t, s in zip(topos, ss, strict=True):
        d = place("topo-aware", t, NodeState(), req)
        u = amaral.utility(t, NodeState(), req, d.mapping, best=t_star)
        assert s.quality == pytest.approx((u.communication + u.interference) / 2)
    assert score_scale("topo-aware", topos, req, EV).best_comm_cost == t_star


@given(topo=topologies(4, 8))
def test_greedy_tables_are_exact_one_and_two_gpus_below_full(topo: Topology) -> None:
    """The greedy peel (used above EXACT_TABLE_GPUS) drops the least (max table) or most (min
    table) connected GPU first: one GPU below full that is exact, and every value it gives is
    the PreservedBW of a real subset, so it lies between the exact extremes."""
    import numpy as np

    from topology.policies.scoring import _exact_tables, _greedy_tables

    bw = np.array(topo.bandwidth_matrix, dtype=np.float64)
    gmax, gmin = _greedy_tables(bw)
    _, emax, emin = _exact_tables(bw)
    n = topo.size
    assert gmax[n] == gmin[n] == pytest.approx(emax[n])
    assert gmax[n - 1] == pytest.approx(emax[n - 1]) and gmin[n - 1] == pytest.approx(emin[n - 1])
    for k in range(n + 1):
        assert emin[k] - 1e-9 <= gmin[k] <= gmax[k] + 1e-9 <= emax[k] + 2e-9
    assert gmax[0] == gmax[1] == gmin[0] == gmin[1] == 0.0
