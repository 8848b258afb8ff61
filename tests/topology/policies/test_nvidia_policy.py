"""nvidia-best-effort: go-gpuallocator's best-effort allocation on our model."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.topology.strategies import states, topologies
from topology import catalog
from topology.model import GPU, PCIeLevel, Topology, deterministic_uuid
from topology.policies import nvidia
from topology.policies.base import NodeState, NoFit, Request
from topology.policies.memo import Memo
from topology.policies.registry import get_policy

DGX = catalog.get("dgx1-v100")


def upstream_dgx1_volta() -> Topology:
    """go-gpuallocator's DGX-1 Volta test node: NVLinks as ours, PCIe: switch pairs (0,1),
    (2,3), (4,5), (6,7); other pairs of a socket meet at the host bridge; SYS across."""
    gpus = [GPU(i, deterministic_uuid("upstream", i), f"0000:{i:02x}:00.0", "V100", 16160,
                i // 4, frozenset()) for i in range(8)]
    pcie = {}
    for a, b in itertools.combinations(range(8), 2):
        if a // 2 == b // 2:
            pcie[(a, b)] = PCIeLevel.PIX
        elif a // 4 == b // 4:
            pcie[(a, b)] = PCIeLevel.PHB
        else:
            pcie[(a, b)] = PCIeLevel.SYS
    return Topology.build("upstream-dgx1", gpus, catalog.DGX1_V100_NVLINKS, pcie)


UP = upstream_dgx1_volta()


def reference_partition(topology: Topology, free: list[int], size: int):
    """A direct transcription of upstream's exhaustive enumeration (iterateGPUPartitions +
    calculateGPUPartitionScore, first best partition kept)."""
    nil = None
    devices = list(free) + [nil] * ((-len(free)) % size)
    padding = devices.count(nil)
    best = [None, -1]

    def score(group):
        real = [g for g in group if g is not nil]
        return sum(nvidia.pair_score(topology, a, b) for a, b in itertools.combinations(real, 2))

    def iterate(devs, accum):
        if size == len(devs):
            part = accum + [devs]
            total = sum(score(g) for g in part)
            if total > best[1]:
                best[0], best[1] = part, total
            return
        if size > len(devs):
            return
        for combo in itertools.combinations(range(1, len(devs)), size - 1):
            group = [devs[0]] + [devs[i] for i in combo]
            p = group.count(nil)
            if not (p == 0 or p == padding):
                continue
            rest = [d for i, d in enumerate(devs) if i != 0 and i not in combo]
            iterate(rest, accum + [group])

    iterate(devices, [])
    part = [tuple(g for g in group if g is not nil) for group in best[0]]
    return best[1], part


@pytest.mark.parametrize(
    ("free", "size", "want"),
    [
        ([0, 2, 4, 5], 2, (4, 5)),  # single NVLink, prefer same switch
        ([0, 4, 5, 6], 2, (5, 6)),  # single NVLink, prefer same socket... and dual
        ([0, 3, 1], 2, (0, 3)),  # dual NVLink same socket
        ([0, 1, 4], 2, (0, 4)),  # dual NVLink cross socket
    ],
)
def test_upstream_best_effort_cases(free: list[int], size: int, want: tuple[int, ...]) -> None:
    busy = [g for g in range(8) if g not in free]
    d = get_policy("nvidia-best-effort").fn(UP, NodeState.whole(busy), Request(count=size),
                                         Memo())
    assert d.gpus == want


@pytest.mark.parametrize(
    ("size", "sequence"),
    [
        (1, [(0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,)]),
        (2, [(0, 3), (1, 2), (4, 7), (5, 6)]),
        (4, [(0, 1, 2, 3), (4, 5, 6, 7)]),
        (8, [tuple(range(8))]),
    ],
)
def test_upstream_allocator_sequences(size: int, sequence: list[tuple[int, ...]]) -> None:
    """Upstream TestBestEffortDGX1VoltaGPUAlloc{One,Two,Four,Eight}: repeated allocations."""
    fn = get_policy("nvidia-best-effort").fn
    state = NodeState()
    for want in sequence:
        d = fn(UP, state, Request(count=size, bandwidth_sensitive=False), Memo())
        assert d.gpus == want
        state = state.with_allocation(d)
    with pytest.raises(NoFit):
        fn(UP, state, Request(count=1), Memo())


def test_pair_scores_follow_the_link_table() -> None:
    assert nvidia.pair_score(DGX, 0, 3) == 200 + 20  # NV2 + same NUMA node
    assert nvidia.pair_score(DGX, 0, 1) == 100 + 50  # NV1 + same switch
    assert nvidia.pair_score(DGX, 0, 5) == 10  # across CPUs only
    a100 = catalog.get("dgx-a100")
    assert a100.links[0][1].nvswitch
    assert nvidia.pair_score(a100, 0, 1) == nvidia.PCIE_SCORE[a100.links[0][1].pcie]


def test_sixteen_gpu_machine_is_solved_exactly_and_quickly() -> None:
    cube = catalog.get("mapa-cubemesh-16")
    total, groups = nvidia.best_partition(cube, list(range(16)), 4)
    assert sorted(len(g) for g in groups) == [4, 4, 4, 4]
    assert total == sum(nvidia.set_score(cube, g) for g in groups)


@given(topologies(max_gpus=8), st.data())
def test_dynamic_programme_equals_upstream_enumeration(topo: Topology, data: st.DataObject) -> None:
    free = sorted(data.draw(st.sets(st.integers(0, topo.size - 1), min_size=1)))
    size = data.draw(st.integers(1, len(free)))
    want_total, want_groups = reference_partition(topo, free, size)
    total, groups = nvidia.best_partition(topo, free, size)
    assert total == want_total  # 0 for single GPUs: upstream scores no pair
    if size == 1:
        assert groups[0] == (free[0],)
        return
    assert groups == want_groups


@given(topologies(max_gpus=8), st.data())
def test_invariants(topo: Topology, data: st.DataObject) -> None:
    state = data.draw(states(topo.size))
    k = data.draw(st.integers(1, topo.size))
    fn = get_policy("nvidia-best-effort").fn
    free = state.free_gpus(topo)
    try:
        d = fn(topo, state, Request(count=k), Memo())
    except NoFit:
        assert len(free) < k
        return
    assert len(d.gpus) == k == len(set(d.gpus)) and set(d.gpus) <= set(free)
    assert fn(topo, state, Request(count=k), Memo()) == d


# ------------------------------------------------------------------ fourth mutation round
def interleaved_quads(n: int = 20) -> Topology:
    """n GPUs in n/4 NVLink quads {i, i+q, i+2q, i+3q} (q = n/4; NV2 inside a quad, all on
    one PCIe switch), every other pair across CPUs: the quads are not index-contiguous, so
    taking the lowest indices is wrong."""
    q = n // 4
    gpus = [GPU(i, deterministic_uuid("quads", i), f"0000:{i + 1:02x}:00.0", "V100", 16160,
                i % q, frozenset({i % q})) for i in range(n)]
    nv = {(a, b): 2 for a, b in itertools.combinations(range(n), 2) if a % q == b % q}
    pcie = {(a, b): PCIeLevel.PIX if a % q == b % q else PCIeLevel.SYS
            for a, b in itertools.combinations(range(n), 2)}
    return Topology.build(f"quads-{n}", gpus, nv, pcie)


def test_more_gpus_than_the_exact_limit_use_the_greedy_grouping() -> None:
    """Above MAX_EXACT_GPUS free GPUs the partition is grown greedily from the lowest free
    GPU, each time adding the GPU with the highest pair score to the group so far: on 20
    GPUs in interleaved NVLink quads that recovers the quads (the best partition, by hand:
    every group a quad scores 6 x (200 + 50)), returns the first and offers the second."""
    topo = interleaved_quads(20)
    assert topo.size > nvidia.MAX_EXACT_GPUS
    quads = [tuple(range(i, 20, 5)) for i in range(5)]
    chosen, others = nvidia.choose(topo, list(range(20)), 4)
    assert chosen == quads[0] and others == quads[1:]
    assert nvidia.set_score(topo, chosen) == 6 * 250
    d = get_policy("nvidia-best-effort").fn(topo, NodeState.whole([0]), Request(count=4),
                                         Memo())
    assert d.gpus == quads[1]  # 19 free: still greedy; quad 0 is broken, left for last
    assert d.runner_up is not None and d.runner_up.gpus == quads[2]
    pair, _ = nvidia.choose(topo, list(range(20)), 2)
    assert pair == (0, 5)


def test_runner_up_is_the_next_best_group_of_the_partition() -> None:
    """The runner-up is another full group of the chosen partition — the best-scoring one
    after the winner (upstream's partition from the direct transcription)."""
    for size in (2, 3, 4):
        _, groups = reference_partition(UP, list(range(8)), size)
        full = [g for g in groups if len(g) == size]
        ranked = sorted(full, key=lambda g: -nvidia.set_score(UP, g))
        chosen, others = nvidia.choose(UP, list(range(8)), size)
        assert chosen == tuple(sorted(ranked[0])) and chosen not in others
        assert others == ranked[1:]
