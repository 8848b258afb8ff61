"""MAPA Greedy / Preserve, the default policy, and invariants every policy keeps."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.topology.strategies import states, topologies
from topology import catalog
from topology.model import Topology
from topology.patterns import all_to_all, ring, tree
from topology.policies.bandwidth import preserved_bandwidth
from topology.policies.base import FULL_CORE, GPUUsage, NodeState, NoFit, Request
from topology.policies.common import MODEL_GPUTOPO, effective_bandwidth
from topology.policies.evaluate import Evaluator
from topology.policies.memo import Memo
from topology.policies.registry import UnknownPolicy, get_policy, policies

#: This module's own evaluator (decision cache and policy memo; nothing shared).
place = Evaluator().place

DGX = catalog.get("dgx1-v100")
ALL = ["baseline", "gaia", "mapa-greedy", "mapa-preserve", "gputopo"]


def run(policy: str, req: Request, busy: tuple[int, ...] = (), topo: Topology = DGX):
    return get_policy(policy).fn(topo, NodeState.whole(busy), req, Memo())


def test_registry_lists_every_policy_and_rejects_unknown() -> None:
    assert set(ALL) <= set(policies())
    with pytest.raises(UnknownPolicy, match="known policies: .*gputopo"):
        get_policy("fastest")


def test_mapa_worked_example() -> None:
    """MAPA Fig. 10: with paper GPUs 2, 3, 4 free-able... the ideal 3-GPU set {1,3,4}
    (0-based {0,2,3}) has AggBW 125 GB/s; {1,2,5} (0-based {0,1,4}) has 87."""
    d = run("mapa-greedy", Request(count=3))
    assert d.gpus == (0, 2, 3) and d.aggregated_bandwidth_gbps == 125.0
    # make {0,1,4} the only choice: everything else busy
    d2 = run("mapa-greedy", Request(count=3), busy=(2, 3, 5, 6, 7))
    assert d2.gpus == (0, 1, 4) and d2.aggregated_bandwidth_gbps == 87.0


def test_mapa_preserve_keeps_eq2_exactly_including_its_trap() -> None:
    d = run("mapa-preserve", Request(count=4))  # all-to-all, sensitive
    assert d.gpus == (0, 2, 5, 7)
    assert d.effective_bandwidth_gbps == pytest.approx(73.85, abs=0.01)
    assert d.bandwidth_model == "mapa-eq2"


def test_default_avoids_the_eq2_trap() -> None:
    d = run("gputopo", Request(count=4))
    assert d.gpus in {(0, 1, 2, 3), (4, 5, 6, 7)}  # the fully NVLinked quads
    assert d.bandwidth_model == "gputopo-v1"


def test_default_4_gpu_ring_on_idle_dgx1_lands_on_an_nvlinked_quartet() -> None:
    d = run("gputopo", Request(count=4, pattern=ring(4)))
    edges = [(d.mapping[a], d.mapping[b]) for a, b in ring(4).edges]
    assert all(DGX.nvlinks(a, b) >= 1 for a, b in edges)


def test_default_beats_baseline_on_a_fragmented_node() -> None:
    busy = (0, 3, 5)
    base = run("baseline", Request(count=2), busy)
    best = run("gputopo", Request(count=2), busy)
    assert base.gpus == (1, 2)
    assert best.effective_bandwidth_gbps >= base.effective_bandwidth_gbps
    assert DGX.nvlinks(*best.gpus) == 2  # a free double-NVLink pair exists: 6-7 or 1-2


def test_baseline_takes_the_lowest_free_indices_and_names_itself() -> None:
    """baseline, the kubelet's choice: the lowest free GPUs in index order (pattern vertex i
    on the i-th), scored with gputopo's bandwidth model like every other whole decision; a
    share goes to the lowest-index GPU with room. Either decision carries the policy's name
    (what the annotations and metrics report) and a reason."""
    d = run("baseline", Request(count=3, pattern=ring(3)), busy=(0, 2))
    assert d.gpus == (1, 3, 4) and d.mapping == (1, 3, 4)
    assert d.policy == "baseline" and d.reason
    assert d.bandwidth_model == MODEL_GPUTOPO
    edges = [(d.mapping[a], d.mapping[b]) for a, b in ring(3).edges]
    assert d.effective_bandwidth_gbps == pytest.approx(
        effective_bandwidth(DGX, edges, MODEL_GPUTOPO))
    # GPU 0 held whole, GPU 1's vGPU-core nearly full: GPU 2 is the lowest with room for 25 %
    state = NodeState({0: GPUUsage(100, 0), 1: GPUUsage(80, 1024)})
    share = get_policy("baseline").fn(DGX, state, Request(0, core_percent=25, memory_mib=2048),
                                      Memo())
    assert share.gpus == (2,) and share.fractional and share.core_percent == 25
    assert share.policy == "baseline" and share.reason


def test_insensitive_jobs_preserve_bandwidth() -> None:
    sens = run("gputopo", Request(count=2, bandwidth_sensitive=True), busy=(0,))
    insens = run("gputopo", Request(count=2, bandwidth_sensitive=False), busy=(0,))
    assert insens.preserved_bandwidth_gbps >= sens.preserved_bandwidth_gbps


def test_default_single_gpu_prefers_gpu_whose_neighbours_are_busy() -> None:
    # GPU 1's PIX sibling 0 and NVLink peers 2,3,5 are busy → taking 1 removes the least
    d = run("gputopo", Request(count=1), busy=(0, 2, 3, 5))
    assert d.gpus == (1,)


def test_decision_explains_itself() -> None:
    d = run("gputopo", Request(count=3, pattern=tree(3)))
    j = d.to_json()
    for key in ("gpus", "uuids", "aggregated_bandwidth_gbps", "effective_bandwidth_gbps",
                "preserved_bandwidth_gbps", "cpu_affinity", "numa_nodes", "policy", "runner_up"):
        assert key in j
    assert j["cpu_affinity"] == "0-19,40-59" and j["numa_nodes"] == [0]
    assert j["runner_up"] is not None and j["runner_up"]["gpus"] != j["gpus"]
    assert len(j["uuids"]) == 3 and j["uuids"][0] == DGX.gpus[d.gpus[0]].uuid


@pytest.mark.parametrize("policy", ALL)
def test_no_fit_reasons(policy: str) -> None:
    with pytest.raises(NoFit, match="asks for 9"):
        run(policy, Request(count=9))
    with pytest.raises(NoFit, match="free"):
        run(policy, Request(count=3), busy=(0, 1, 2, 3, 4, 5))


@pytest.mark.parametrize("policy", ALL)
def test_cache_relabels_uuids_per_node(policy: str) -> None:
    other = catalog.get("dgx1-v100")
    from dataclasses import replace

    # the same class (CPU numbers are not part of it), other UUIDs and other CPU numbers
    twin = replace(other, name="twin", gpus=tuple(
        replace(g, uuid=g.uuid.replace("GPU-", "GPU-0"),
                cpu_affinity=frozenset(c + 100 for c in g.cpu_affinity)) for g in other.gpus))
    assert twin.topology_class == other.topology_class
    a = place(policy, other, NodeState(), Request(count=2))
    b = place(policy, twin, NodeState(), Request(count=2))
    assert a.gpus == b.gpus and a.uuids != b.uuids
    assert b.uuids == tuple(twin.gpus[g].uuid for g in b.gpus)
    # the cached decision is re-labelled with the twin's own CPUs, on the same NUMA nodes
    assert b.cpu_affinity != a.cpu_affinity and b.numa_nodes == a.numa_nodes
    first = min(min(twin.gpus[g].cpu_affinity) for g in b.gpus)
    assert b.cpu_affinity.startswith(str(first))


@given(topologies(max_gpus=8), st.data())
def test_invariants_every_policy(topo: Topology, data: st.DataObject) -> None:
    state = data.draw(states(topo.size))
    policy = data.draw(st.sampled_from(ALL))
    fractional = data.draw(st.booleans())
    if fractional:
        req = Request(count=0, core_percent=data.draw(st.integers(1, 99)),
                      memory_mib=data.draw(st.integers(0, 4096)))
    else:
        k = data.draw(st.integers(1, topo.size))
        pat = data.draw(st.sampled_from([None, ring(k), tree(k), all_to_all(k)]))
        req = Request(count=k, pattern=pat, bandwidth_sensitive=data.draw(st.booleans()))
    fn = get_policy(policy).fn
    free = state.free_gpus(topo)
    try:
        d = fn(topo, state, req, Memo())
    except NoFit:
        if fractional:
            assert not any(
                state.used(g).core_percent + req.core_percent <= FULL_CORE
                and state.used(g).memory_mib + req.memory_mib <= topo.gpus[g].memory_mib
                for g in range(topo.size)
            )
        else:
            assert len(free) < req.count
        return
    assert fn(topo, state, req, Memo()) == d  # deterministic
    if fractional:
        (g,) = d.gpus
        after = state.with_allocation(d).used(g)
        assert after.core_percent <= FULL_CORE
        assert after.memory_mib <= topo.gpus[g].memory_mib
    else:
        assert len(free) >= req.count
        assert len(d.gpus) == req.count == len(set(d.gpus))
        assert set(d.gpus) <= set(free)  # never a busy GPU
        assert sorted(d.mapping) == list(d.gpus)


FREE_SET_ONLY = sorted(n for n, spec in policies().items() if spec.free_set_only)


def test_free_set_only_is_declared_by_the_policies_that_read_only_free_gpus() -> None:
    assert {"baseline", "gaia", "mapa-greedy", "mapa-preserve", "gputopo"} <= set(FREE_SET_ONLY)
    # Amaral's interference term tells busy GPUs from unhealthy idle ones
    assert "topo-aware" not in FREE_SET_ONLY


@given(topologies(max_gpus=8), st.data())
def test_free_set_only_policies_decide_from_the_free_gpus_alone(
    topo: Topology, data: st.DataObject
) -> None:
    """What ``free_set_only`` promises (and what the per-free-mask cache relies on): a
    whole-GPU decision is the same whether the busy GPUs are held whole, shared or
    unhealthy."""
    state = data.draw(states(topo.size))
    sick = data.draw(st.frozensets(st.integers(0, topo.size - 1), max_size=2))
    state = NodeState(state.usage, sick)
    policy = data.draw(st.sampled_from(FREE_SET_ONLY))
    k = data.draw(st.integers(1, topo.size))
    pat = data.draw(st.sampled_from([None, ring(k), tree(k), all_to_all(k)]))
    req = Request(count=k, pattern=pat, bandwidth_sensitive=data.draw(st.booleans()))
    free = state.free_gpus(topo)
    plain = NodeState.whole(g for g in range(topo.size) if g not in free)
    fn = get_policy(policy).fn
    try:
        d = fn(topo, state, req, Memo())
    except NoFit as exc:
        with pytest.raises(NoFit) as again:
            fn(topo, plain, req, Memo())
        assert str(again.value) == str(exc)
        return
    assert fn(topo, plain, req, Memo()) == d
    assert place(policy, topo, state, req) == place(policy, topo, plain, req) == d


@pytest.mark.parametrize(("busy", "differs"), [
    ((), False), ((0,), True), ((0, 3, 5), False), ((1, 2, 6), True), ((4,), True)])
def test_mapa_preserve_insensitive_keeps_the_most_preserved_bandwidth(
    busy: tuple[int, ...], differs: bool,
) -> None:
    """MAPA Algorithm 1's insensitive branch: the 2-GPU set whose removal leaves the free GPUs
    the highest PreservedBW (Eq. 3), lexicographically first among equals — checked against
    every pair — where the EffBW branch (often) spends the NVLink the other keeps."""
    free = [g for g in range(8) if g not in busy]
    insens = run("mapa-preserve", Request(count=2, bandwidth_sensitive=False), busy)
    sens = run("mapa-preserve", Request(count=2, bandwidth_sensitive=True), busy)

    def left(pair: tuple[int, ...]) -> float:
        return preserved_bandwidth(DGX, [g for g in free if g not in pair])

    best = max(left(p) for p in itertools.combinations(free, 2))
    first = min(p for p in itertools.combinations(free, 2) if left(p) == pytest.approx(best))
    assert insens.gpus == first
    assert insens.preserved_bandwidth_gbps == pytest.approx(best)
    assert insens.reason.startswith("highest PreservedBW (Eq. 3)")
    assert sens.reason.startswith("highest predicted EffBW (Eq. 2)")
    assert (left(sens.gpus) < best) == differs
