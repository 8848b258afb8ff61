"""Amaral SC'17: TOPO-AWARE, TOPO-AWARE-P, FCFS and Best-Fit."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.topology.strategies import states, topologies
from topology import catalog
from topology.model import Topology
from topology.patterns import all_to_all, ring, tree
from topology.policies import amaral
from topology.policies.base import (
    FULL_CORE,
    GPUUsage,
    NodeState,
    NoFit,
    Request,
    RequestError,
)
from topology.policies.memo import Memo
from topology.policies.registry import get_policy, policies

MINSKY = catalog.get("minsky")
DGX = catalog.get("dgx1-v100")
AMARAL = ["topo-aware", "topo-aware-p", "fcfs", "best-fit"]


def run(policy: str, req: Request, busy=(), topo: Topology = MINSKY):
    return get_policy(policy).fn(topo, NodeState.whole(busy), req, Memo())


def test_registered() -> None:
    assert set(AMARAL) <= set(policies())


def test_physical_graph_levels_on_minsky() -> None:
    """§4.1.2: the NVLinked sibling is near (NV2 → 0.5); the other socket's GPUs are reached
    through both sockets (1 + 20 + 1)."""
    pg = amaral.physical_graph(MINSKY)
    assert pg.socket == (0, 0, 1, 1)
    assert pg.distance[0][1] == 0.5
    assert pg.distance[0][2] == 22.0
    assert {pg.tree.children[0].gpus, pg.tree.children[1].gpus} == {(0, 1), (2, 3)}


def test_physical_graph_pcie_levels_on_dgx1() -> None:
    pg = amaral.physical_graph(DGX)
    assert pg.socket == (0, 0, 0, 0, 1, 1, 1, 1)
    assert pg.distance[0][3] == 0.5  # NV2
    assert pg.distance[0][1] == 1.0  # NV1 beats the shared switch (2)
    assert pg.distance[0][5] == 1.5  # NV2 to GPU 4, then NV1


def test_prototype_scenario_table1() -> None:
    """§5.2.2: Job 1 is kept off Job 0's socket (interference); Job 3 (2 GPUs), offered one
    GPU per socket, is postponed by TOPO-AWARE-P and placed anyway by TOPO-AWARE."""
    job0 = run("topo-aware-p", Request(count=1, profile="alexnet/tiny", min_utility=0.3))
    job1 = run("topo-aware-p", Request(count=1, profile="googlenet/small", min_utility=0.3),
               busy=job0.gpus)
    assert amaral.physical_graph(MINSKY).socket[job1.gpus[0]] != \
        amaral.physical_graph(MINSKY).socket[job0.gpus[0]]
    busy = (1, 2)  # Jobs 1 and 2 hold one GPU on each socket; Job 0 has finished
    job3 = Request(count=2, profile="alexnet/small", min_utility=0.5)
    with pytest.raises(NoFit, match=r"utility 0\.\d\d below minimum 0\.50"):
        run("topo-aware-p", job3, busy=busy)
    placed = run("topo-aware", job3, busy=busy)
    assert placed.gpus == (0, 3)
    # once a socket is whole again, the pair goes there (P2P over NVLink)
    assert run("topo-aware-p", job3, busy=(1,)).gpus == (2, 3)


def test_min_utility_comes_from_the_request_and_defaults_to_table1() -> None:
    job = Request(count=2, profile="alexnet/small")
    with pytest.raises(NoFit, match="minimum 0.50"):  # Table 1 default for 2 GPUs
        run("topo-aware-p", job, busy=(1, 2))
    ok = Request(count=2, profile="alexnet/small", min_utility=0.0)
    assert run("topo-aware-p", ok, busy=(1, 2)).gpus == (0, 3)


def test_never_postponed_on_an_idle_node() -> None:
    for k in range(1, 5):
        d = run("topo-aware-p", Request(count=k, profile="alexnet/tiny", min_utility=1.0))
        assert len(d.gpus) == k


def test_topo_aware_packs_a_pair_on_nvlink() -> None:
    assert run("topo-aware", Request(count=2, profile="alexnet/tiny")).gpus == (0, 1)
    d = run("topo-aware", Request(count=2, pattern=ring(2)), topo=DGX)
    assert DGX.nvlinks(*d.gpus) == 2


def test_fcfs_and_best_fit() -> None:
    assert run("fcfs", Request(count=2), busy=(0,), topo=DGX).gpus == (1, 2)
    # best fit: socket 1 has 2 free GPUs, socket 0 has 3 → the fuller socket 1
    d = run("best-fit", Request(count=2), busy=(0, 4, 5), topo=DGX)
    assert d.gpus == (6, 7)
    # no socket holds 4: most used socket first
    d = run("best-fit", Request(count=4), busy=(0, 4, 5), topo=DGX)
    assert d.gpus == (1, 2, 6, 7)
    share = Request(count=0, core_percent=30)
    state = NodeState({0: GPUUsage(50, 0), 1: GPUUsage(65, 0)})
    assert get_policy("best-fit").fn(MINSKY, state, share, Memo()).gpus == (1,)


def test_profiles() -> None:
    assert amaral.lookup_profile("AlexNet/Tiny").name == "alexnet/tiny"
    assert amaral.lookup_profile("caffenet").name == "cafferef/small"
    assert amaral.lookup_profile("vgg-16/big").comm_weight == 1
    with pytest.raises(RequestError, match="unknown job profile 'lenet'"):
        amaral.lookup_profile("lenet")
    with pytest.raises(RequestError, match="unknown job profile"):
        run("topo-aware", Request(count=1, profile="alexnet/huge"))
    assert amaral.profile_for(Request(count=2)) is amaral.DEFAULT_SENSITIVE
    assert amaral.profile_for(Request(count=1)) is amaral.DEFAULT_INSENSITIVE


def test_request_validates_min_utility() -> None:
    with pytest.raises(RequestError, match=r"\[0, 1\]"):
        Request(count=1, min_utility=1.5)
    a, b = Request(count=2, min_utility=0.3), Request(count=2, min_utility=0.5)
    assert a.key() != b.key()


@given(topologies(max_gpus=8), st.data())
def test_invariants(topo: Topology, data: st.DataObject) -> None:
    state = data.draw(states(topo.size))
    policy = data.draw(st.sampled_from(AMARAL))
    fractional = data.draw(st.booleans())
    if fractional:
        req = Request(count=0, core_percent=data.draw(st.integers(1, 99)))
    else:
        k = data.draw(st.integers(1, topo.size))
        pat = data.draw(st.sampled_from([None, ring(k), tree(k), all_to_all(k)]))
        req = Request(count=k, pattern=pat, bandwidth_sensitive=data.draw(st.booleans()),
                      min_utility=data.draw(st.none() | st.floats(0, 1)),
                      profile=data.draw(st.none() | st.sampled_from(sorted(amaral.PROFILES))))
    fn = get_policy(policy).fn
    free = state.free_gpus(topo)
    try:
        d = fn(topo, state, req, Memo())
    except NoFit as exc:
        if fractional:
            assert not any(state.used(g).core_percent + req.core_percent <= FULL_CORE
                           for g in range(topo.size))
        elif len(free) >= req.count:
            assert policy == "topo-aware-p" and "below minimum" in str(exc)
        return
    assert fn(topo, state, req, Memo()) == d
    if not fractional:
        assert len(d.gpus) == req.count == len(set(d.gpus))
        assert set(d.gpus) <= set(free)
        assert sorted(d.mapping) == list(d.gpus)
        u = amaral.utility(topo, state, req, d.mapping)
        for term in (u.communication, u.interference, u.fragmentation, u.total):
            assert 0.0 <= term <= 1.0 + 1e-9


@given(topologies(max_gpus=8), st.data())
def test_topo_aware_p_never_rejects_an_idle_node(topo: Topology, data: st.DataObject) -> None:
    k = data.draw(st.integers(1, topo.size))
    req = Request(count=k, pattern=data.draw(st.sampled_from([None, ring(k)])),
                  min_utility=data.draw(st.floats(0, 1)))
    assert len(get_policy("topo-aware-p").fn(topo, NodeState(), req, Memo()).gpus) == k


def test_decisions_carry_their_policy_name() -> None:
    """The decision names the policy that made it (the extender's explanation and metrics key
    on it), for whole GPUs and for a share."""
    for name in AMARAL:
        assert run(name, Request(count=2)).policy == name
        assert run(name, Request.fraction(0.5)).policy == name


# ------------------------------------------------------------------ seventh mutation round
def test_topo_aware_explains_whole_and_shared_decisions() -> None:
    """TOPO-AWARE's decisions say why: the utility and its terms for whole GPUs, the rule for
    a share (the lowest-index GPU with room)."""
    for name in ("topo-aware", "topo-aware-p"):
        assert run(name, Request(count=2)).reason.startswith("utility ")
        assert "lowest-index GPU with room" in run(name, Request.fraction(0.5)).reason


def test_topo_aware_takes_the_only_nvlinked_triangle() -> None:
    """A 3-GPU all-to-all job on a DGX-1 P100 with GPUs 1, 6 and 7 busy: of the free GPUs
    0, 2, 3, 4, 5 only 0, 2, 3 are NVLinked pairwise (checked over every triple), and DRB's
    communication estimate — each task's mean distance to its already placed neighbours —
    leads it there; a set with a PCIe-only pair scores a lower utility."""
    p100 = catalog.get("dgx1-p100")
    busy = (1, 6, 7)
    free = [g for g in range(8) if g not in busy]
    linked = [s for s in itertools.combinations(free, 3)
              if all(p100.nvlinks(a, b) >= 1 for a, b in itertools.combinations(s, 2))]
    assert linked == [(0, 2, 3)]
    state = NodeState.whole(busy)
    d = get_policy("topo-aware").fn(p100, state, Request(count=3), Memo())
    assert d.gpus == (0, 2, 3)
    u = amaral.utility(p100, state, Request(count=3), list(d.mapping)).total
    assert u > amaral.utility(p100, state, Request(count=3), [0, 2, 4]).total
