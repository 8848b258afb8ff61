"""Node scores (topology.policies.scoring): range, the ideal reference, Singular/Fragment
preferences, fragmentation tables, and one scale across node classes (a sensitive pod prefers
the idle DGX to the idle PCIe box; insensitive, one-GPU and share pods the other way round;
Amaral's utility policies by utility)."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.topology.strategies import states, topologies
from topology import catalog
from topology.model import GPU, PCIeLevel, Topology, deterministic_uuid
from topology.patterns import ring
from topology.policies import amaral, robust
from topology.policies.bandwidth import pair_access_cost, preserved_bandwidth
from topology.policies.base import (
    Decision,
    GPUUsage,
    NodeState,
    NoFit,
    Request,
    SharedRequest,
    Upcoming,
)
from topology.policies.evaluate import Evaluator
from topology.policies.memo import Memo
from topology.policies.registry import DEFAULT_POLICY as POLICY
from topology.policies.scoring import (
    W_HARM,
    NodeScore,
    class_tables,
    colocation_score,
    fragmentation,
    node_score,
    quality,
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
    # the default policy's score is robust (issue 24): the worst model's share of the best
    # idle set, not gputopo-v1's alone
    assert s.kind == "robust" and s.quality == 1.0
    assert node_score("mapa-preserve", DGX, NodeState(), req,
                      place("mapa-preserve", DGX, NodeState(), req), evaluator=EV).kind \
        == "bandwidth"
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
    assert len(t.pb_max) == len(t.pb_min) == n + 1  # one entry per subset size 0..n
    some = [0, 1, 2, 9, 10, 17]
    assert t.preserved(topo, some) == preserved_bandwidth(topo, some)  # no table: computed
    assert fragmentation(topo, some, t) == pytest.approx(
        1.0 - preserved_bandwidth(topo, some) / t.pb_max[len(some)])
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
    # since issue 24 the default policy's quality is the worst model's share of the best
    # idle set of any class (here the bottleneck link: 25 GB/s NVLink against NVSwitch)
    memo = Memo()
    t_dgx, t_a100 = (robust.model_table(t, ring(4), memo) for t in (DGX, A100))
    assert t_dgx is not None and t_a100 is not None
    assert dgx3.quality == pytest.approx(
        float(np.min(t_dgx.ideal / np.maximum(t_dgx.ideal, t_a100.ideal))))
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


# ------------------------------------------------------------------ co-location slots
def _shared_decision(
    policy: str, rank: tuple[float, ...], *, threshold: float = 4e7, gain: float = 1.0
) -> Decision:
    """A real co-location decision of ``policy`` on an idle DGX, with its node-choice key,
    threshold and the chosen set's throughput gain set to the case under test."""
    from topology.colocation.profile import builtin_catalog

    p = builtin_catalog()["resnet18:128"]
    req = Request(count=1, shared=SharedRequest(p, p.gpu_memory_mib, name="new"))
    d = place(policy, DGX, NodeState(), req)
    c = d.colocation
    assert c is not None
    chosen = dataclasses.replace(c.chosen, throughput_gain=gain)
    return dataclasses.replace(
        d, colocation=dataclasses.replace(c, rank=rank, threshold=threshold, chosen=chosen))


@pytest.mark.parametrize(("rank", "threshold", "quality"), [
    ((0.0, 0.0), 4e7, 1.0),            # an idle GPU scores 10
    ((1e6, 0.0), 4e7, 0.5),            # one c0 = threshold / 40 of sum C: half
    ((4e6, 0.0), 4e7, 0.2),
    ((4e6, 0.0), 8e7, 1 / 3),          # c0 follows the threshold
    ((-5e6, 0.0), 4e7, 1.0),           # a negative key counts as 0
    ((), 4e7, 1.0),                    # no key: as an idle GPU
])
def test_colocate_scores_by_the_sum_of_c_against_the_threshold(
    rank: tuple[float, ...], threshold: float, quality: float
) -> None:
    s = colocation_score(_shared_decision("colocate", rank, threshold=threshold))
    assert s.quality == pytest.approx(quality)
    assert s.score == round(10 * quality)
    assert s.kind == "colocation" and s.fragmentation == 0.0


@pytest.mark.parametrize(("rank", "quality"), [
    ((0.0,), 1.0), ((1.0,), 0.1), ((0.5,), 0.55), ((), 1.0),
])
def test_random_colocate_scores_1_to_10_from_its_random_rank(
    rank: tuple[float, ...], quality: float
) -> None:
    s = colocation_score(_shared_decision("random-colocate", rank))
    assert s.quality == pytest.approx(quality)
    assert s.score == round(10 * quality)


@pytest.mark.parametrize(("policy", "rank"), [
    ("exclusive", (0.0,)), ("exclusive", (3.0, 500.0)), ("gputopo", ()),
])
def test_exclusive_and_a_keyless_gputopo_slot_score_10(
    policy: str, rank: tuple[float, ...]
) -> None:
    s = colocation_score(_shared_decision(policy, rank, gain=0.0))
    assert s.quality == 1.0 and s.score == 10


@pytest.mark.parametrize(("rank", "gain", "quality"), [
    ((0.0,), 0.0, 1.0),                 # tier 0: an isolated idle GPU
    ((1.0, 0.0), 0.5, 0.8),             # tier 1: a worthwhile join, 7-9 by gain
    ((1.0, 0.0), 2.0, 0.9),             # ... the gain clamped to 1
    ((1.0, 0.0), -1.0, 0.7),            # ... and to 0
    ((2.0, 0.0), 1.0, 0.6),             # tier 2: an idle GPU breaking a group, nothing lost
    ((2.0, 100.0), 1.0, 0.45),          # ... 100 GB/s of PreservedBW lost
    ((2.0, 300.0), 1.0, 0.375),
    ((2.0,), 1.0, 0.6),                 # ... loss not given: none
    ((3.0, 0.0), 0.5, 0.15),            # tier 3: a small-gain join, 1-2 by gain
    ((3.0, 0.0), 4.0, 0.2),
    ((5.0, 0.0), -2.0, 0.1),            # any higher tier as tier 3, gain clamped to 0
])
def test_gputopo_slots_score_by_tier(
    rank: tuple[float, ...], gain: float, quality: float
) -> None:
    s = colocation_score(_shared_decision("gputopo", rank, gain=gain))
    assert s.quality == pytest.approx(quality)
    assert s.score == round(10 * quality)


def test_gputopo_tiers_rank_nodes_in_order() -> None:
    scores = [colocation_score(_shared_decision("gputopo", r, gain=g)).score
              for r, g in (((0.0,), 1.0), ((1.0, 0.0), 0.0), ((2.0, 0.0), 1.0),
                           ((3.0, 0.0), 1.0))]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == 4


def test_node_score_of_a_shared_slot_is_its_colocation_score() -> None:
    d = _shared_decision("gputopo", (2.0, 100.0))
    p = d.colocation
    assert p is not None
    req = Request(count=1, shared=SharedRequest(p.profile, p.memory_mib, name="new"))
    assert node_score("gputopo", DGX, NodeState(), req, d, evaluator=EV) == NodeScore(
        4, pytest.approx(0.45), 0.0, "colocation")  # type: ignore[arg-type]


def test_colocation_score_refuses_a_whole_gpu_decision() -> None:
    d = place(POLICY, DGX, NodeState(), Request(count=2))
    with pytest.raises(ValueError, match="not a co-location decision"):
        colocation_score(d)


# ------------------------------------------------------------------ each rule against a reference
#: Busy-GPU sets the reference checks below run over (idle, half, the NVLink pairs broken).
BUSY = [(), (7,), (0, 1, 2, 3), (1, 3, 4, 6), (0, 2, 5), tuple(range(6))]
NVLINK_ONLY = Topology.build(
    "nv-only",
    [GPU(i, deterministic_uuid("nv-only", i), "", "G", 16384, 0, frozenset()) for i in range(3)],
    {(0, 1): 2, (0, 2): 1, (1, 2): 1}, PCIeLevel.PIX)


def _max_pair_cost(topos: list[Topology]) -> float:
    return max(pair_access_cost(t, a, b) for t in topos
               for a, b in itertools.combinations(range(t.size), 2))


@pytest.mark.parametrize("topo", [DGX, PCIE, A100], ids=lambda t: t.name)
@pytest.mark.parametrize("busy", BUSY, ids=str)
def test_node_score_is_the_documented_mix_of_quality_and_fragmentation(
    topo: Topology, busy: tuple[int, ...]
) -> None:
    """``round(10 × (0.7 · quality + 0.3 · (1 − fragmentation)))``, the fragmentation being
    ``1 − PB(free after) / max PB of any k GPUs`` (brute force over every k-subset)."""
    state = NodeState.whole(busy)
    for req in (Request(count=1), Request(count=2), Request(count=2, bandwidth_sensitive=True),
                Request(count=0, core_percent=30)):
        d = place(POLICY, topo, state, req)
        s = node_score(POLICY, topo, state, req, d, evaluator=EV)
        after = [g for g in state.free_gpus(topo) if g not in d.gpus]
        best = max(preserved_bandwidth(topo, c)
                   for c in itertools.combinations(range(topo.size), len(after)))
        frag = 0.0 if len(after) <= 1 else 1.0 - preserved_bandwidth(topo, after) / best
        assert s.fragmentation == pytest.approx(frag)
        assert s.score == round(10 * (0.7 * s.quality + 0.3 * (1.0 - frag)))


@pytest.mark.parametrize("topo", [DGX, PCIE, A100, NVLINK_ONLY], ids=lambda t: t.name)
@pytest.mark.parametrize("busy", [*BUSY, (2,)], ids=str)
def test_one_gpu_quality_is_the_cost_to_the_nearest_free_peer_over_the_largest(
    topo: Topology, busy: tuple[int, ...]
) -> None:
    """Gaia Singular: the chosen GPU's access cost to its nearest other free GPU over the
    class's largest pair cost (1 for the last free GPU); a fresh share gets half of it.
    On ``NVLINK_ONLY`` every pair cost is below 1 (NVLink 0.5/NV#)."""
    busy = tuple(b for b in busy if b < topo.size)
    state = NodeState.whole(busy)
    if len(busy) == topo.size:
        return
    worst = _max_pair_cost([topo])
    for req, factor in ((Request(count=1), 1.0), (Request(count=0, core_percent=30), 0.5)):
        d = place(POLICY, topo, state, req)
        g = d.gpus[0]
        others = [f for f in state.free_gpus(topo) if f != g]
        nearest = min((pair_access_cost(topo, g, o) for o in others), default=worst)
        s = node_score(POLICY, topo, state, req, d, evaluator=EV)
        assert s.kind == ("singular" if factor == 1.0 else "share")
        assert s.quality == pytest.approx(factor * nearest / worst)


def test_one_gpu_next_to_a_double_nvlink_peer_scores_half_on_an_nvlink_only_node() -> None:
    # GPU 2 busy: 0 and 1 are left, NV2 apart (cost 0.25), the largest pair cost is NV1's 0.5
    s = score(NodeState.whole([2]), Request(count=1), NVLINK_ONLY)
    q = node_score(POLICY, NVLINK_ONLY, NodeState.whole([2]), Request(count=1),
                   place(POLICY, NVLINK_ONLY, NodeState.whole([2]), Request(count=1)),
                   evaluator=EV).quality
    assert q == pytest.approx(0.5) and s == round(10 * (0.7 * 0.5 + 0.3))


@pytest.mark.parametrize(("used", "request_", "fill"), [
    (GPUUsage(50, 4096), Request(count=0, core_percent=30, memory_mib=8192), 0.8),
    (GPUUsage(10, 8192), Request(count=0, core_percent=10, memory_mib=4096), 12288 / 16160),
    (GPUUsage(20, 0), Request(count=0, core_percent=30), 0.5),
])
def test_a_share_on_a_shared_gpu_scores_by_the_fuller_of_core_and_memory(
    used: GPUUsage, request_: Request, fill: float
) -> None:
    """Gaia Fragment: ``0.5 + 0.5 · fill``, fill the larger of the core and memory fractions
    in use after the share (the DGX-1's V100s have 16,160 MiB)."""
    state = NodeState({2: used})
    d = place(POLICY, DGX, state, request_)
    assert d.gpus == (2,)
    s = node_score(POLICY, DGX, state, request_, d, evaluator=EV)
    assert s.kind == "share" and s.quality == pytest.approx(0.5 + 0.5 * fill)


@pytest.mark.parametrize("topo", [DGX, PCIE, A100], ids=lambda t: t.name)
@pytest.mark.parametrize("busy", BUSY[:-1], ids=str)
def test_insensitive_quality_is_one_minus_the_preservedbw_lost_over_the_worst_loss(
    topo: Topology, busy: tuple[int, ...]
) -> None:
    """MAPA Eq. 3: ``1 − (PB(free before) − PB(free after)) / max loss``, the max loss being
    the most PreservedBW 2 GPUs take out of an idle node of the class (brute force)."""
    req = Request(count=2, bandwidth_sensitive=False)
    state = NodeState.whole(busy)
    d = place(POLICY, topo, state, req)
    free = state.free_gpus(topo)
    loss = preserved_bandwidth(topo, free) - preserved_bandwidth(
        topo, [f for f in free if f not in d.gpus])
    full = preserved_bandwidth(topo, range(topo.size))
    max_loss = full - min(preserved_bandwidth(topo, c)
                          for c in itertools.combinations(range(topo.size), topo.size - 2))
    s = node_score(POLICY, topo, state, req, d, evaluator=EV)
    assert s.kind == "preserve" and s.quality == pytest.approx(1.0 - loss / max_loss)
    assert score_scale(POLICY, [topo], req, EV).max_loss_gbps == pytest.approx(max_loss)


def test_a_node_type_too_small_for_the_pod_does_not_change_the_scale() -> None:
    """A class that cannot host the request (the 1-GPU box for a 4-GPU pod) adds nothing to
    any yardstick; alone it leaves the sensitive and utility references unset."""
    one = catalog.get("v100-1gpu")
    for sensitive in (True, False):
        req = Request(count=4, pattern=ring(4), bandwidth_sensitive=sensitive)
        for policy in (POLICY, "topo-aware"):
            both = score_scale(policy, [DGX, one], req, EV)
            dgx = score_scale(policy, [DGX], req, EV)
            assert both.classes == tuple(sorted((DGX.topology_class, one.topology_class)))
            assert (both.effbw_gbps, both.max_loss_gbps, both.max_pair_cost,
                    both.best_comm_cost) == (dgx.effbw_gbps, dgx.max_loss_gbps,
                                             dgx.max_pair_cost, dgx.best_comm_cost)
    alone = score_scale(POLICY, [one], Request(count=2, bandwidth_sensitive=True), EV)
    assert alone.effbw_gbps is None and alone.max_loss_gbps == 0.0
    assert score_scale("topo-aware", [one], Request(count=2), EV).best_comm_cost is None


def test_the_scale_is_taken_over_every_class_of_the_call() -> None:
    topos = [PCIE, DGX, A100]
    sens = Request(count=4, pattern=ring(4), bandwidth_sensitive=True)
    scale = score_scale(POLICY, topos, sens, EV)
    assert scale.effbw_gbps == max(
        place(POLICY, t, NodeState(), sens).effective_bandwidth_gbps for t in topos)
    assert scale.max_pair_cost == _max_pair_cost(topos)
    assert scale.best_comm_cost is None and scale.max_loss_gbps == 0.0
    # the order the nodes come in does not matter
    assert score_scale(POLICY, topos[::-1], sens, EV) == scale


def test_a_sensitive_pod_scores_0_where_no_node_type_of_the_call_can_host_it() -> None:
    one = catalog.get("v100-1gpu")
    req = Request(count=2, bandwidth_sensitive=True)
    d = place(POLICY, DGX, NodeState(), req)
    scale = score_scale(POLICY, [one], req, EV)
    s = node_score(POLICY, DGX, NodeState(), req, d, evaluator=EV, scale=scale)
    assert s.kind == "bandwidth" and s.quality == 0.0


def test_a_score_scale_needs_a_topology() -> None:
    with pytest.raises(ValueError, match="at least one topology"):
        score_scale(POLICY, [], Request(count=2), EV)


def test_quality_alone_is_the_node_scores_quality_term() -> None:
    """``quality`` called without the class tables or a scale takes this node's class's own."""
    for busy, req in (((1, 3, 4, 6), Request(count=2, bandwidth_sensitive=False)),
                      ((), Request(count=1)),
                      ((0, 2), Request(count=2, bandwidth_sensitive=True))):
        state = NodeState.whole(busy)
        d = place(POLICY, DGX, state, req)
        s = node_score(POLICY, DGX, state, req, d, evaluator=EV)
        assert quality(POLICY, DGX, state, req, d, Evaluator()) == (s.quality, s.kind)


@pytest.mark.parametrize("busy", [(1, 3, 4, 6), (0, 2, 5)], ids=str)
def test_utility_quality_on_a_busy_node_is_half_communication_half_interference(
    busy: tuple[int, ...]
) -> None:
    """Amaral Eq. 2 without fragmentation, ``(C + I) / 2``, where the GPUs already held cost
    the pod some interference (I < 1)."""
    req = Request(count=2, bandwidth_sensitive=True)
    state = NodeState.whole(busy)
    d = place("topo-aware", DGX, state, req)
    t_star = score_scale("topo-aware", [DGX], req, EV).best_comm_cost
    u = amaral.utility(DGX, state, req, d.mapping, best=t_star)
    assert u.interference < 1.0
    s = node_score("topo-aware", DGX, state, req, d, evaluator=EV)
    assert s.kind == "utility"
    assert s.quality == pytest.approx((u.communication + u.interference) / 2)


def test_an_insensitive_pod_on_a_node_past_the_exact_tables() -> None:
    """Above EXACT_TABLE_GPUS the PreservedBW before and after comes from the topology itself
    (no subset table): the quality is still ``1 − loss / max loss``."""
    n = 18
    gpus = [GPU(i, deterministic_uuid("big", i), "", "G", 16384, i // 9, frozenset())
            for i in range(n)]
    topo = Topology.build("big", gpus, {(i, i + 1): 2 for i in range(n - 1)}, PCIeLevel.SYS)
    req = Request(count=2, bandwidth_sensitive=False)
    state = NodeState.whole(range(4))
    d = place(POLICY, topo, state, req)
    free = state.free_gpus(topo)
    loss = preserved_bandwidth(topo, free) - preserved_bandwidth(
        topo, [f for f in free if f not in d.gpus])
    max_loss = score_scale(POLICY, [topo], req, EV).max_loss_gbps
    s = node_score(POLICY, topo, state, req, d, evaluator=EV)
    assert s.kind == "preserve" and max_loss > 0
    assert s.quality == pytest.approx(1.0 - loss / max_loss)


def test_one_gpu_on_a_two_gpu_nvlink_node_scores_by_its_only_pair() -> None:
    """The largest pair cost of a 2-GPU class is its one pair's (NV2: 0.25): the GPU whose
    only peer is free is as far from it as the class allows."""
    two = Topology.build(
        "nv-pair",
        [GPU(i, deterministic_uuid("nv-pair", i), "", "G", 16384, 0, frozenset())
         for i in range(2)], {(0, 1): 2}, PCIeLevel.PIX)
    assert class_tables(two).max_pair_cost == 0.25
    req = Request(count=1)
    s = node_score(POLICY, two, NodeState(), req, place(POLICY, two, NodeState(), req),
                   evaluator=EV)
    assert s.kind == "singular" and s.quality == 1.0


def test_tables_are_exact_up_to_16_gpus() -> None:
    gpus = [GPU(i, deterministic_uuid("sixteen", i), "", "G", 16384, i // 8, frozenset())
            for i in range(16)]
    topo = Topology.build("sixteen", gpus, {(i, i + 1): 1 for i in range(15)}, PCIeLevel.SYS)
    t = class_tables(topo)
    assert t.exact and t.pb_by_mask is not None
    # the best 3 GPUs: three in a row, two NV1 pairs and one PCIe pair (25 + 25 + 12 GB/s)
    assert t.pb_max[3] == pytest.approx(
        max(preserved_bandwidth(topo, c) for c in itertools.combinations(range(16), 3)))


@pytest.mark.parametrize(("policy", "request_", "rule"), [
    (POLICY, Request(count=2, bandwidth_sensitive=True), "bandwidth"),
    (POLICY, Request(count=2, bandwidth_sensitive=False), "preserve"),
    (POLICY, Request(count=1, bandwidth_sensitive=True), "singular"),
    (POLICY, Request(count=1, bandwidth_sensitive=False), "singular"),
    (POLICY, Request(count=0, core_percent=30), "share"),
    ("topo-aware", Request(count=2, bandwidth_sensitive=True), "utility"),
    ("topo-aware", Request(count=2, bandwidth_sensitive=False), "utility"),
])
def test_a_scale_sets_only_the_yardstick_of_the_requests_rule(
    policy: str, request_: Request, rule: str
) -> None:
    """ScoreScale's documented fields: the EffBW reference only for a bandwidth-sensitive
    multi-GPU pod, the worst PreservedBW loss only for an insensitive one, Amaral's t* only
    for a multi-GPU pod under a utility policy; the pair cost always."""
    scale = score_scale(policy, [DGX, PCIE], request_, Evaluator())
    assert (scale.effbw_gbps is not None) == (rule == "bandwidth")
    assert (scale.max_loss_gbps > 0) == (rule == "preserve")
    assert (scale.best_comm_cost is not None) == (rule == "utility")
    assert scale.max_pair_cost == _max_pair_cost([DGX, PCIE])


def test_a_node_type_too_small_for_the_pod_listed_first_is_skipped_not_the_end() -> None:
    one = catalog.get("v100-1gpu")
    req = Request(count=4, pattern=ring(4), bandwidth_sensitive=True)
    first = score_scale(POLICY, [one, DGX], req, Evaluator())
    assert first.effbw_gbps == score_scale(POLICY, [DGX], req, EV).effbw_gbps


def test_an_insensitive_pod_taking_a_whole_node_destroys_all_its_preservedbw() -> None:
    """A class with exactly ``count`` GPUs is in the worst-loss reference: taking all 8 of an
    idle DGX-1 loses everything, quality 0."""
    req = Request(count=8, bandwidth_sensitive=False)
    s = score(NodeState(), req)
    q = node_score(POLICY, DGX, NodeState(), req, place(POLICY, DGX, NodeState(), req),
                   evaluator=EV).quality
    assert q == 0.0 and s == 3  # 0.7 · 0 + 0.3 · (1 − 0), nothing left to fragment


def test_one_gpu_on_a_node_past_the_exact_tables_scores_by_its_nearest_peer() -> None:
    n = 18
    gpus = [GPU(i, deterministic_uuid("big", i), "", "G", 16384, i // 9, frozenset())
            for i in range(n)]
    topo = Topology.build("big", gpus, {(i, i + 1): 2 for i in range(n - 1)}, PCIeLevel.SYS)
    state = NodeState.whole([g for g in range(n) if g not in (3, 4, 12)])
    req = Request(count=1)
    d = place(POLICY, topo, state, req)
    s = node_score(POLICY, topo, state, req, d, evaluator=EV)
    others = [g for g in (3, 4, 12) if g != d.gpus[0]]
    nearest = min(pair_access_cost(topo, d.gpus[0], o) for o in others)
    assert class_tables(topo).max_pair_cost == 5.0  # SYS
    assert s.kind == "singular" and s.quality == pytest.approx(nearest / 5.0)


def test_a_utility_pod_as_large_as_the_node_has_a_reference() -> None:
    """A class with exactly as many GPUs as the pattern has vertices gives Amaral's t*."""
    two = Topology.build(
        "nv-pair",
        [GPU(i, deterministic_uuid("nv-pair", i), "", "G", 16384, 0, frozenset())
         for i in range(2)], {(0, 1): 2}, PCIeLevel.PIX)
    req = Request(count=2, bandwidth_sensitive=True)
    pattern = req.effective_pattern()
    assert score_scale("topo-aware", [two], req, Evaluator()).best_comm_cost == (
        amaral.best_cost(two, 2, pattern.edges))


def test_the_worst_node_scores_0_not_1() -> None:
    """The score's floor is kube-scheduler's 0: quality 0 (no class of the call can host this
    sensitive pod) and the two GPUs left linked far below the best pair (NV4 vs PCIe)."""
    four = Topology.build(
        "nv4-pair",
        [GPU(i, deterministic_uuid("nv4-pair", i), "", "G", 16384, 0, frozenset())
         for i in range(4)], {(0, 1): 4}, PCIeLevel.SYS)
    req = Request(count=2, bandwidth_sensitive=True)
    d = place(POLICY, four, NodeState(), req)
    scale = score_scale(POLICY, [catalog.get("v100-1gpu")], req, Evaluator())
    s = node_score(POLICY, four, NodeState(), req, d, evaluator=EV, scale=scale)
    assert d.gpus == (0, 1) and s.quality == 0.0 and s.fragmentation > 5 / 6
    assert s.score == 0


def test_the_score_counts_the_harm_to_the_waiting_jobs() -> None:
    """Issue 24's node choice: a lookahead decision's score loses W_HARM × the waiting jobs'
    worst-model cost on what it leaves (at most 1). The 5-GPU ring's {0,2,3,4,7} leaves a
    waiting 3-GPU ring {1,5,6} (bottleneck 12 of 25 GB/s: cost above 1), {0,1,2,3,4} leaves
    it the triangle {5,6,7} (cost 0)."""
    wait = (Upcoming(3, ring(3)),)
    req = Request(count=5, pattern=ring(5), bandwidth_sensitive=True, upcoming=wait)
    plain = dataclasses.replace(req, upcoming=())
    robust_set = place(POLICY, DGX, NodeState(), plain)
    assert robust_set.gpus == (0, 2, 3, 4, 7)
    harmful = node_score(POLICY, DGX, NodeState(), req, robust_set, evaluator=EV)
    assert harmful.harm == 1.0
    kind = node_score(POLICY, DGX, NodeState(), req, place(POLICY, DGX, NodeState(), req),
                      evaluator=EV)
    assert kind.harm == 0.0
    alone = node_score(POLICY, DGX, NodeState(), plain, robust_set, evaluator=EV)
    assert alone.harm == 0.0 and alone.score - harmful.score == round(10 * W_HARM)
    # policies that read no queue are not charged
    be = place("nvidia-best-effort", DGX, NodeState(), req)
    assert node_score("nvidia-best-effort", DGX, NodeState(), req, be, evaluator=EV).harm == 0
