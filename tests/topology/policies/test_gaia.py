"""Gaia (Song et al., Tencent): the access-cost tree, Algorithm 1 and Fragment/Singular/Link.

The paper's own examples come first (Fig. 5, Experiments 1–4 on its 4-GPU Tesla P4 machine),
then DGX-1 V100 behaviour, then hypothesis invariants.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.topology.strategies import states, topologies
from topology import catalog
from topology.model import GPU, PCIeLevel, Topology, deterministic_uuid
from topology.patterns import ring
from topology.policies import gaia as G
from topology.policies.base import FULL_CORE, GPUUsage, NodeState, NoFit, Request, RequestError
from topology.policies.common import fits_share
from topology.policies.memo import Memo
from topology.policies.registry import get_policy

DGX = catalog.get("dgx1-v100")
P4_MIB = 7611


def _gpus(machine: str, n: int, numa: list[int], memory_mib: int = P4_MIB) -> list[GPU]:
    return [
        GPU(i, deterministic_uuid(machine, i), f"0000:{i + 2:02x}:00.0", "Tesla P4", memory_mib,
            numa[i], frozenset(range(numa[i] * 14, numa[i] * 14 + 14)))
        for i in range(n)
    ]


def _levels(n: int, rule: dict[tuple[int, int], PCIeLevel], default: PCIeLevel
            ) -> dict[tuple[int, int], PCIeLevel]:
    return {(a, b): rule.get((a, b), default) for a in range(n) for b in range(a + 1, n)}


def gaia_4gpu() -> Topology:
    """Gaia's experiment machine (Fig. 7): 4 Tesla P4 on two E5-2680 v4 sockets; gpu2 and
    gpu3 share a PCIe switch (the cheapest pair, Experiment 1), gpu0 and gpu1 meet at the
    host bridge, the two pairs only across sockets. The catalog entry is used when present."""
    if "gaia-4gpu" in catalog.names():
        return catalog.get("gaia-4gpu")
    pcie = _levels(4, {(0, 1): PCIeLevel.PHB, (2, 3): PCIeLevel.PIX}, PCIeLevel.SYS)
    return Topology.build("gaia-4gpu", _gpus("gaia-4gpu", 4, [0, 0, 1, 1]), {}, pcie)


def fig5_machine() -> Topology:
    """A Fig. 5-like tree: socket 0 has two PIX switches {0,1} and {2,3} under one host
    bridge; socket 1 has gpu4 and gpu5 behind a chain of switches (PXB)."""
    rule = {(0, 1): PCIeLevel.PIX, (2, 3): PCIeLevel.PIX, (4, 5): PCIeLevel.PXB}
    for a in range(4):
        for b in range(a + 1, 4):
            rule.setdefault((a, b), PCIeLevel.PHB)
    pcie = _levels(6, rule, PCIeLevel.SYS)
    return Topology.build("fig5", _gpus("fig5", 6, [0, 0, 0, 0, 1, 1]), {}, pcie)


GAIA4 = gaia_4gpu()


def place(topo: Topology, state: NodeState, req: Request):
    return G.gaia(topo, state, req, Memo())


# ============================================================================ the paper
def test_registered_under_gaia() -> None:
    assert get_policy("gaia").fn is G.gaia


def test_fig5_single_gpu_goes_to_the_free_gpu_whose_sibling_is_busy() -> None:
    topo = fig5_machine()
    tree = G.access_cost_tree(topo)
    state = NodeState.whole([2, 3, 4])
    # the plain lowest-access-cost choice would be gpu0/gpu1 (PIX) ...
    assert tree.gpu_access_cost(0) < tree.gpu_access_cost(5)
    d = place(topo, state, Request(count=1))
    # ... but Singular keeps the idle PIX pair {0,1} whole and takes gpu5
    assert d.gpus == (5,)
    assert "Singular" in d.reason and "sibling is busy" in d.reason
    assert d.runner_up is not None and d.runner_up.gpus in {(0,), (1,)}


def test_experiment1_simple_scheduling() -> None:
    idle = NodeState()
    one = place(GAIA4, idle, Request(count=1))
    assert one.gpus[0] in (2, 3)  # Table I: only gpu2 or gpu3
    assert one.gpus == (2,)  # ties: lowest index (the paper picks at random)
    two = place(GAIA4, idle, Request(count=2))
    assert two.gpus == (2, 3)  # Table I: always gpu2 & gpu3
    assert "Link" in two.reason


def test_experiment2_fragment_scheduling() -> None:
    state = NodeState()
    d1 = place(GAIA4, state, Request.fraction(0.5))
    assert d1.fractional and d1.gpus == (2,) and d1.core_percent == 50
    state = state.with_allocation(d1)
    d2 = place(GAIA4, state, Request.fraction(0.4))
    assert d2.gpus == (2,) and "best fit" in d2.reason  # Table II: 0.4 of gpu2
    state = state.with_allocation(d2)
    d3 = place(GAIA4, state, Request.fraction(0.1))
    assert d3.gpus == (2,)  # Table II: 0.1 of gpu2
    state = state.with_allocation(d3)
    assert state.used(2).core_percent == FULL_CORE
    # gpu2 is full now: the next share starts a new GPU, gpu3 (lowest cost, sibling used)
    assert place(GAIA4, state, Request.fraction(0.1)).gpus == (3,)


def test_experiment3_and_4_after_one_gpu_is_taken() -> None:
    state = NodeState.whole([2])  # Fig. 8(a)
    assert place(GAIA4, state, Request(count=1)).gpus == (3,)  # Table III
    assert place(GAIA4, state, Request(count=2)).gpus == (0, 1)  # Table IV


def test_fragment_best_fit_among_partly_used_gpus() -> None:
    state = NodeState({0: GPUUsage(60, 1000), 1: GPUUsage(30, 1000), 3: GPUUsage(80, 1000)})
    # remaining core: gpu0 40, gpu1 70, gpu3 20
    assert place(GAIA4, state, Request.fraction(0.2)).gpus == (3,)  # exact fit
    d = place(GAIA4, state, Request.fraction(0.25))
    assert d.gpus == (0,)  # 40 is the smallest remainder >= 25
    assert d.runner_up is not None and d.runner_up.gpus == (1,)
    assert place(GAIA4, state, Request.fraction(0.5)).gpus == (1,)
    # nothing partly used fits 0.8 → the idle GPU with the lowest access cost (gpu2, PIX)
    d = place(GAIA4, state, Request.fraction(0.8))
    assert d.gpus == (2,) and "no partly used GPU fits" in d.reason


def test_fragment_respects_memory() -> None:
    state = NodeState({0: GPUUsage(10, P4_MIB - 100), 1: GPUUsage(50, 0)})
    d = place(GAIA4, state, Request(count=0, core_percent=20, memory_mib=500))
    assert d.gpus == (1,)  # gpu0 has the better core fit but not the memory
    with pytest.raises(NoFit, match="MiB free"):
        place(GAIA4, NodeState(), Request(count=0, core_percent=10, memory_mib=P4_MIB + 1))


def test_fragment_never_shares_a_gpu_held_whole() -> None:
    state = NodeState({0: GPUUsage(FULL_CORE, 0), 1: GPUUsage(FULL_CORE, 0),
                       2: GPUUsage(FULL_CORE, 0), 3: GPUUsage(FULL_CORE, 0)})
    with pytest.raises(NoFit):
        place(GAIA4, state, Request(count=0, memory_mib=100))


def test_fragment_idle_fallback_prefers_a_gpu_whose_sibling_is_used() -> None:
    # dgx1: gpu2,3,6,7 share the lowest access cost (NV2); gpu6 is busy → gpu7
    state = NodeState.whole([6])
    assert place(DGX, state, Request.fraction(0.3)).gpus == (7,)


# ============================================================================ the tree
def test_dgx1_tree_shape() -> None:
    tree = G.access_cost_tree(DGX)
    root = tree.root
    assert root.level == PCIeLevel.SYS and root.cost == 5.0
    quads = [tree.nodes[c] for c in root.children]
    assert [q.gpus for q in quads] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert all(q.level == PCIeLevel.NODE and q.nvlinks == 1 and q.cost == 0.5 for q in quads)
    pairs = [tree.nodes[c] for q in quads for c in q.children]
    assert [p.gpus for p in pairs] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert [p.label for p in pairs] == ["PIX+NV1", "PIX+NV2", "PIX+NV1", "PIX+NV2"]
    assert [tree.gpu_access_cost(g) for g in range(8)] == [0.5, 0.5, 0.25, 0.25] * 2


def test_pcie_level_sets_are_subtrees_on_dgx1() -> None:
    """Gaia §III-B: GPUs meeting at or below a PCIe level L form one subtree."""
    tree = G.access_cost_tree(DGX)
    node_sets = {n.gpus for n in tree.nodes}
    for g in range(DGX.size):
        for level in PCIeLevel:
            group = tuple(sorted({g} | {h for h in range(DGX.size)
                                        if h != g and DGX.pcie_level(g, h) <= level}))
            assert group in node_sets


def test_nvlink_is_a_level_below_pix() -> None:
    """Four GPUs on one PIX switch, NVLink bridges 0-1 and 2-3: two NVLink groups under PIX."""
    pcie = _levels(4, {}, PCIeLevel.PIX)
    topo = Topology.build("bridged", _gpus("bridged", 4, [0] * 4), {(0, 1): 1, (2, 3): 4}, pcie)
    tree = G.access_cost_tree(topo)
    assert tree.root.label == "PIX" and tree.root.cost == 1.0
    kids = [tree.nodes[c] for c in tree.root.children]
    assert [(k.gpus, k.label, k.cost) for k in kids] == [
        ((0, 1), "PIX+NV1", 0.5), ((2, 3), "PIX+NV4", 0.125)]
    # Link takes the NV4 pair, Singular on an idle node too (lowest access cost)
    assert place(topo, NodeState(), Request(count=2)).gpus == (2, 3)
    assert place(topo, NodeState(), Request(count=1)).gpus == (2,)


def test_nvlink_never_breaks_the_pcie_hierarchy() -> None:
    """DGX-1's cross-socket NV2 link 0-4 does not pull gpu0 out of its socket's subtree."""
    tree = G.access_cost_tree(DGX)
    for n in tree.internal_nodes():
        assert not ({0, 4} <= set(n.gpus)) or n is tree.root


def test_single_gpu_machine() -> None:
    topo = Topology.build("one", _gpus("one", 1, [0]), {}, PCIeLevel.PIX)
    tree = G.access_cost_tree(topo)
    assert tree.root.is_leaf and tree.gpu_access_cost(0) == 0.0
    assert place(topo, NodeState(), Request(count=1)).gpus == (0,)
    assert place(topo, NodeState(), Request.fraction(0.5)).gpus == (0,)
    with pytest.raises(NoFit, match="node has 1 GPUs"):
        place(topo, NodeState(), Request(count=2))
    assert "gpu0" in tree.render()


def test_render_and_json() -> None:
    tree = G.AccessCostTree.build(DGX)
    assert tree is G.access_cost_tree(DGX)
    text = tree.render()
    assert text.splitlines()[1].startswith("SYS  cost 5")
    assert "PIX+NV2  cost 0.25  gpus 2-3" in text and "└── gpu7" in text
    state = NodeState({0: GPUUsage(100, 0), 3: GPUUsage(30, 512)}, frozenset({5}))
    shown = tree.render(state, ascii_only=True)
    assert "free 5/8" in shown and "gpu0  cost 0.5  busy" in shown
    assert "shared 30% core, 512 MiB" in shown and "gpu5  cost 0.5  unhealthy" in shown
    assert shown.isascii()
    j = tree.to_json(state)
    root = j["root"]
    assert isinstance(root, dict)
    assert root["level"] == "SYS" and root["free"] == 5 and root["gpus"] == list(range(8))
    leaf = root["children"][0]["children"][0]["children"][0]
    assert leaf == {"label": "gpu0", "gpu": 0, "uuid": DGX.gpus[0].uuid, "cost": 0.5,
                    "status": "busy"}
    g = tree.to_networkx()
    assert g.number_of_nodes() == len(tree.nodes) and g.number_of_edges() == len(tree.nodes) - 1


# ============================================================================ DGX-1
def test_dgx1_two_gpus_on_idle_node_get_a_pix_nvlink_pair() -> None:
    d = place(DGX, NodeState(), Request(count=2))
    a, b = d.gpus
    assert DGX.pcie_level(a, b) == PCIeLevel.PIX and DGX.nvlinks(a, b) == 2
    assert d.gpus == (2, 3) and d.bandwidth_model == "gputopo-v1"
    assert d.runner_up is not None and d.runner_up.gpus == (6, 7)
    assert d.effective_bandwidth_gbps > 0


def test_dgx1_four_gpus_get_a_quad_and_pattern_maps_in_order() -> None:
    d = place(DGX, NodeState(), Request(count=4, pattern=ring(4)))
    assert d.gpus == (0, 1, 2, 3) and d.mapping == (0, 1, 2, 3)
    assert d.runner_up is not None and d.runner_up.gpus == (4, 5, 6, 7)


def test_dgx1_link_prefers_nvlink_pair_inside_a_partly_used_quad() -> None:
    # free in quad 0: 1, 2 (NV2) and 0; quad 1 is busy except 4 → take the NV2 pair 1-2
    d = place(DGX, NodeState.whole([3, 5, 6, 7]), Request(count=2))
    assert d.gpus == (1, 2)
    assert d.runner_up is not None and d.runner_up.gpus != d.gpus


@pytest.mark.parametrize("busy", [(), (0,), (6,), (4, 5), (2,)])
def test_dgx1_singular_keeps_whole_quads_free(busy: tuple[int, ...]) -> None:
    """Single-GPU jobs fill one quad before breaking the other, so a 4-GPU job still fits."""
    state = NodeState.whole(busy)
    quads = [set(range(4)), set(range(4, 8))]
    while True:
        free = set(state.free_gpus(DGX))
        intact = [q for q in quads if q <= free]
        if len(free) <= 4:
            assert intact, f"no whole quad left with {sorted(free)} free"
            break
        d = place(DGX, state, Request(count=1))
        state = state.with_allocation(d)
        # the GPU came from a quad that was already broken whenever one was
        broken = [q for q in quads if not q <= free]
        if broken and any(q & free for q in broken):
            assert any(d.gpus[0] in q for q in broken)
    assert place(DGX, state, Request(count=4)).gpus in {(0, 1, 2, 3), (4, 5, 6, 7)}


def test_singular_on_dgx1_reasons() -> None:
    assert "idle node" in place(DGX, NodeState(), Request(count=1)).reason
    assert "sibling is busy" in place(DGX, NodeState.whole([0]), Request(count=1)).reason
    d = place(DGX, NodeState.whole([6, 7]), Request(count=1))
    assert d.gpus == (4,) and "smallest idle subtree" in d.reason


def test_sub_algorithms_check_their_request_and_name_the_caller() -> None:
    with pytest.raises(RequestError):
        G.singular(DGX, NodeState(), Request(count=2))
    with pytest.raises(RequestError):
        G.link(DGX, NodeState(), Request(count=1))
    with pytest.raises(RequestError):
        G.fragment(DGX, NodeState(), Request(count=1))
    d = G.fragment(DGX, NodeState(), Request.fraction(0.5), policy_name="gputopo")
    assert d.policy == "gputopo"
    assert G.singular(DGX, NodeState(), Request(count=1), policy_name="x").policy == "x"


def test_nofit_reasons() -> None:
    with pytest.raises(NoFit, match="only 2 of 8 GPUs free"):
        place(DGX, NodeState.whole(range(6)), Request(count=3))
    with pytest.raises(NoFit, match="node has 8 GPUs"):
        place(DGX, NodeState(), Request(count=9))
    full = NodeState({g: GPUUsage(90, 0) for g in range(8)})
    with pytest.raises(NoFit, match="Fragment"):
        place(DGX, full, Request.fraction(0.2))


# ============================================================================ invariants
def _machines() -> st.SearchStrategy[Topology]:
    return st.one_of(
        st.sampled_from([DGX, GAIA4, fig5_machine()]), topologies(min_gpus=1, max_gpus=9)
    )


@st.composite
def scenario(draw: st.DrawFn) -> tuple[Topology, NodeState, Request]:
    topo = draw(_machines())
    base = draw(states(topo.size))
    sick = draw(st.frozensets(st.integers(0, topo.size - 1), max_size=2))
    state = NodeState(base.usage, sick)
    if draw(st.booleans()):
        req = Request(count=0, core_percent=draw(st.integers(1, 99)),
                      memory_mib=draw(st.sampled_from([0, 0, 512, 4000, 9000])))
    else:
        req = Request(count=draw(st.integers(1, topo.size + 1)))
    return topo, state, req


def _share_capacity(topo: Topology, state: NodeState, req: Request) -> bool:
    return any(
        state.used(g).core_percent < FULL_CORE and fits_share(topo, state, req, g)
        for g in range(topo.size)
    )


@settings(max_examples=250, deadline=None)
@given(scenario())
def test_invariants(case: tuple[Topology, NodeState, Request]) -> None:
    topo, state, req = case
    free = set(state.free_gpus(topo))
    fits = _share_capacity(topo, state, req) if req.fractional else req.count <= len(free)
    try:
        d = place(topo, state, req)
    except NoFit as exc:
        assert not fits, f"NoFit although capacity exists: {exc}"
        assert str(exc)
        return
    assert fits
    if req.fractional:
        (g,) = d.gpus
        assert d.fractional and g not in state.unhealthy
        after = state.with_allocation(d).used(g)
        assert after.core_percent <= FULL_CORE
        assert after.memory_mib <= topo.gpus[g].memory_mib
        if any(not state.used(h).idle and state.used(h).core_percent < FULL_CORE
               and fits_share(topo, state, req, h) for h in range(topo.size)):
            assert not state.used(g).idle  # a fitting fragment exists → it is used
    else:
        assert len(d.gpus) == req.count == len(set(d.gpus))
        assert set(d.gpus) <= free  # never busy, shared or unhealthy
        assert sorted(d.mapping) == list(d.gpus)
    if d.runner_up is not None:
        assert d.runner_up.gpus != d.gpus
        if not req.fractional:
            assert set(d.runner_up.gpus) <= free
    # deterministic, also with a freshly built tree
    assert place(topo, state, req) == d
    G.access_cost_tree.cache_clear()
    assert place(topo, state, req) == d


@settings(max_examples=100, deadline=None)
@given(topologies(min_gpus=1, max_gpus=10))
def test_tree_is_well_formed(topo: Topology) -> None:
    tree = G.access_cost_tree(topo)
    leaves = [n.gpu for n in tree.nodes if n.is_leaf]
    assert sorted(leaves) == list(range(topo.size))
    for n in tree.nodes:
        assert n.id == tree.nodes.index(n)
        if n.is_leaf:
            parent = tree.parent(n)
            assert n.cost == (parent.cost if parent else 0.0)
            continue
        assert len(n.children) >= 2
        kids = [tree.nodes[c] for c in n.children]
        assert sorted(g for k in kids for g in k.gpus) == list(n.gpus)
        for k in kids:
            assert k.parent == n.id and k.cost <= n.cost
        for a, b in itertools.combinations(n.gpus, 2):
            assert topo.pcie_level(a, b) <= n.level  # type: ignore[operator]


@settings(max_examples=60, deadline=None)
@given(topologies(min_gpus=2, max_gpus=8), st.data())
def test_link_takes_a_cheapest_subtree(topo: Topology, data: st.DataObject) -> None:
    """Algorithm 4: no other subtree with enough free GPUs has a lower TotalCost."""
    state = data.draw(states(topo.size))
    free = set(state.free_gpus(topo))
    if len(free) < 2:
        return
    m = data.draw(st.integers(2, len(free)))
    d = place(topo, state, Request(count=m))
    tree = G.access_cost_tree(topo)
    best = min(n.cost for n in tree.internal_nodes() if len(free & set(n.gpus)) >= m)
    assert any(set(d.gpus) <= set(n.gpus) and n.cost == best for n in tree.internal_nodes())


# ============================================================================ fourth mutation round
PCIE8 = catalog.get("pcie-8gpu")


def test_render_whole_picture() -> None:
    """The full ``gputopo topology show`` picture of a two-socket PCIe machine (ASCII form),
    every internal node and leaf with its cost, the branch lines continuing past a non-last
    child, and the leaf statuses in the words the CLI shows."""
    state = NodeState({5: GPUUsage(100, 0)})
    assert G.access_cost_tree(PCIE8).render(state, ascii_only=True) == "\n".join([
        "access-cost tree of pcie-8gpu (8 GPUs)",
        "SYS  cost 5  gpus 0-7  free 7/8",
        "|-- NODE  cost 4  gpus 0-3  free 4/4",
        "|   |-- PIX  cost 1  gpus 0-1  free 2/2",
        "|   |   |-- gpu0  cost 1  free",
        "|   |   `-- gpu1  cost 1  free",
        "|   `-- PIX  cost 1  gpus 2-3  free 2/2",
        "|       |-- gpu2  cost 1  free",
        "|       `-- gpu3  cost 1  free",
        "`-- NODE  cost 4  gpus 4-7  free 3/4",
        "    |-- PIX  cost 1  gpus 4-5  free 1/2",
        "    |   |-- gpu4  cost 1  free",
        "    |   `-- gpu5  cost 1  busy",
        "    `-- PIX  cost 1  gpus 6-7  free 2/2",
        "        |-- gpu6  cost 1  free",
        "        `-- gpu7  cost 1  free",
    ])
    unicode = G.access_cost_tree(PCIE8).render().splitlines()
    assert unicode[3] == "│   ├── PIX  cost 1  gpus 0-1"
    assert unicode[9] == "└── NODE  cost 4  gpus 4-7"
    leaf = G.access_cost_tree(PCIE8).to_json(state)["root"]["children"][0]["children"][0]  # type: ignore[index]
    assert leaf["children"][0]["status"] == "free"  # type: ignore[index]


def test_link_breaks_the_smallest_idle_subtree_on_a_tie() -> None:
    """Algorithm 4 on a tie (two PIX pairs, same TotalCost, same pair cost, both wholly free):
    GPU 6 is busy, so taking 4-5 breaks only the pair itself while 0-1 would break the whole
    idle NODE 0-3 that a 4-GPU job still needs: 4-5 wins, 0-1 is the runner-up."""
    d = G.link(PCIE8, NodeState.whole([6]), Request(count=2))
    assert d.gpus == (4, 5)
    assert d.runner_up is not None and d.runner_up.gpus == (0, 1)
    after = NodeState.whole([6]).with_allocation(d)
    assert G.link(PCIE8, after, Request(count=4)).gpus == (0, 1, 2, 3)


def test_sub_algorithms_report_the_gputopo_bandwidth_model() -> None:
    """Gaia has no bandwidth model of its own: every decision states gputopo-v1's."""
    for req in (Request(count=1), Request(count=2), Request.fraction(0.5)):
        assert place(DGX, NodeState(), req).bandwidth_model == "gputopo-v1"


def _one_swap_improvable(topo: Topology, pool: list[int], chosen: tuple[int, ...]) -> bool:
    cost = round(G._pair_cost_sum(topo, chosen), 9)
    for out in chosen:
        for inn in pool:
            if inn in chosen:
                continue
            trial = sorted([c for c in chosen if c != out] + [inn])
            if round(G._pair_cost_sum(topo, trial), 9) < cost:
                return True
    return False


@pytest.mark.parametrize("machine", ["mapa-torus-16", "mapa-cubemesh-16"])
def test_link_above_the_exact_limit_on_16_gpus(machine: str) -> None:
    """Above EXACT_SUBSET_LIMIT (C(16, m) > 5000 for 6 ≤ m ≤ 10) Link's set inside the chosen
    subtree comes from greedy growth plus 1-swap descent: m distinct GPUs of the pool that no
    single swap improves, within 1 cost unit of the exhaustive optimum (brute force over all
    C(16, m) sets); on the torus it is the optimum itself."""
    topo = catalog.get(machine)
    pool = list(range(16))
    for m in range(6, 11):
        assert math.comb(16, m) > G.EXACT_SUBSET_LIMIT
        (got,) = G._cheapest_subsets(topo, pool, m)
        assert len(set(got)) == m and set(got) <= set(pool) and list(got) == sorted(got)
        assert not _one_swap_improvable(topo, pool, got)
        best = min(round(G._pair_cost_sum(topo, s), 9)
                   for s in itertools.combinations(pool, m))
        cost = round(G._pair_cost_sum(topo, got), 9)
        assert best <= cost <= best + 1.0
        if machine == "mapa-torus-16":
            assert cost == best
    d = place(topo, NodeState(), Request(count=9))
    assert d.gpus == G._cheapest_subsets(topo, pool, 9)[0]


def test_runner_up_is_scored_with_the_jobs_own_pattern() -> None:
    """A 4-GPU ring on an idle DGX-1 takes quad 0-3; the runner-up, quad 4-7, has the same
    NVLink wiring (0-3 ↔ 4-7: NV1, NV1, NV2 from the first GPU, …), so scored with the same
    ring its EffBW is the decision's own — scored as all-to-all it would not be."""
    d = place(DGX, NodeState(), Request(count=4, pattern=ring(4)))
    assert d.runner_up is not None and d.runner_up.gpus == (4, 5, 6, 7)
    assert d.runner_up.effective_bandwidth_gbps == pytest.approx(d.effective_bandwidth_gbps)
    a2a = place(DGX, NodeState(), Request(count=4))
    assert a2a.effective_bandwidth_gbps != pytest.approx(d.effective_bandwidth_gbps)


def test_equal_merges_go_to_the_lowest_indices() -> None:
    """Ties in the clustering go to the lowest GPU index (module docstring). On a
    non-ultrametric 3-GPU report — 0–2 and 1–2 both PXB, 0–1 PHB — gpu2 pairs with gpu0
    first, so Link's 2-GPU job gets 0 and 2; preferring the later pair would give 1 and 2."""
    pcie = {(0, 1): PCIeLevel.PHB, (0, 2): PCIeLevel.PXB, (1, 2): PCIeLevel.PXB}
    topo = Topology.build("tie3", _gpus("tie3", 3, [0, 0, 0]), {}, pcie)
    tree = G.access_cost_tree(topo)
    assert [tree.nodes[c].gpus for c in tree.root.children] == [(0, 2), (1,)]
    assert place(topo, NodeState(), Request(count=2)).gpus == (0, 2)


# =========================================================================== seventh mutation round
def test_json_and_networkx_whole_tree() -> None:
    """The tree's JSON form (``gputopo topology show --json``) and its networkx graph, whole,
    on the two-socket PCIe machine with GPU 5 busy — the same tree as the rendered picture
    above: every internal node with its label, level, links, cost, GPUs and free count, every
    leaf with its UUID, cost and status; the graph has the same nodes (ids in pre-order) and
    the parent → child edges. On the DGX-1 a node's NVLink count is in both."""
    state = NodeState({5: GPUUsage(100, 0)})
    uuid = [PCIE8.gpus[g].uuid for g in range(8)]

    def leaf(g: int) -> dict[str, object]:
        return {"label": f"gpu{g}", "gpu": g, "uuid": uuid[g], "cost": 1.0,
                "status": "busy" if g == 5 else "free"}

    def inner(level: str, cost: float, gpus: list[int], children: list[dict[str, object]]
              ) -> dict[str, object]:
        return {"label": level, "level": level, "nvlinks": 0, "nvswitch": False, "cost": cost,
                "gpus": gpus, "free": len([g for g in gpus if g != 5]), "children": children}

    def pix(a: int) -> dict[str, object]:
        return inner("PIX", 1.0, [a, a + 1], [leaf(a), leaf(a + 1)])

    tree = G.access_cost_tree(PCIE8)
    assert tree.to_json(state) == {"topology": "pcie-8gpu", "gpus": 8, "root": inner(
        "SYS", 5.0, list(range(8)), [inner("NODE", 4.0, [0, 1, 2, 3], [pix(0), pix(2)]),
                                     inner("NODE", 4.0, [4, 5, 6, 7], [pix(4), pix(6)])])}
    graph = tree.to_networkx()
    order = ["SYS", "NODE", "PIX", "gpu0", "gpu1", "PIX", "gpu2", "gpu3",
             "NODE", "PIX", "gpu4", "gpu5", "PIX", "gpu6", "gpu7"]
    assert [graph.nodes[i]["label"] for i in range(15)] == order
    assert sorted(graph.edges) == [(0, 1), (0, 8), (1, 2), (1, 5), (2, 3), (2, 4), (5, 6),
                                   (5, 7), (8, 9), (8, 12), (9, 10), (9, 11), (12, 13),
                                   (12, 14)]
    assert graph.nodes[0] == {"label": "SYS", "gpus": tuple(range(8)), "cost": 5.0,
                              "level": "SYS", "nvlinks": 0}
    assert graph.nodes[12] == {"label": "PIX", "gpus": (6, 7), "cost": 1.0, "level": "PIX",
                               "nvlinks": 0}
    assert graph.nodes[14] == {"label": "gpu7", "gpus": (7,), "cost": 1.0, "level": None,
                               "nvlinks": 0}
    dgx = G.access_cost_tree(DGX)
    (pair,) = [n for n in dgx.nodes if n.gpus == (2, 3)]
    assert dgx.to_networkx().nodes[pair.id]["nvlinks"] == 2
    j = dgx.to_json()
    quad = j["root"]["children"][0]  # type: ignore[index]
    # NODE+NV1 over GPUs 0-3, then its pairs PIX+NV1 (0-1) and PIX+NV2 (2-3)
    assert [quad["nvlinks"]] + [c["nvlinks"] for c in quad["children"]] == [1, 1, 2]  # type: ignore[index]


def test_fragment_breaks_a_core_tie_by_the_least_memory_left() -> None:
    """Algorithm 2's best fit on a tie: GPUs 0 and 1 both have 50 % core left for a 25 %
    share; GPU 1 has less memory left (4 GiB of 7.4 used against 1 GiB), so it wins although GPU 0
    has the lower index, and GPU 0 is the runner-up."""
    state = NodeState({0: GPUUsage(50, 1024), 1: GPUUsage(50, 4096)})
    d = place(GAIA4, state, Request(count=0, core_percent=25, memory_mib=512))
    assert d.gpus == (1,) and "best fit" in d.reason
    assert d.runner_up is not None and d.runner_up.gpus == (0,)


def test_free_count_takes_any_iterable_of_free_gpus() -> None:
    """``free_count`` counts the free GPUs under a node from a set or any other iterable
    (list, tuple, generator) alike: 3 of the SYS root's 8, 2 of NODE 0-3, 1 of PIX 4-5."""
    tree = G.access_cost_tree(PCIE8)
    node_03, node_47 = (tree.nodes[c] for c in tree.root.children)
    pix_45 = tree.nodes[node_47.children[0]]
    free = [0, 2, 5]
    for form in (set(free), frozenset(free), free, tuple(free), iter(free)):
        assert tree.free_count(tree.root, form) == 3
    for form in (set(free), free, (g for g in free)):
        assert (tree.free_count(node_03, form), tree.free_count(pix_45, free)) == (2, 1)
