"""The shared decision builders of ``topology/policies/common.py``: a runner-up's scores, a
share's decision and whether a share fits a GPU, each checked field by field."""

from __future__ import annotations

import pytest

from topology import catalog
from topology.patterns import ring
from topology.policies.bandwidth import aggregated_bandwidth, all_pairs, preserved_bandwidth
from topology.policies.base import GPUUsage, NodeState, NoFit, Request
from topology.policies.common import (
    MODEL_GPUTOPO,
    MODEL_MAPA,
    candidate,
    effective_bandwidth,
    fits_share,
    fractional_decision,
    mapped_edges,
    shareable_gpus,
)

DGX = catalog.get("dgx1-v100")


def test_candidate_scores_the_pattern_edges_and_what_it_leaves() -> None:
    """A 4-ring on GPUs 0, 1, 2, 4 (mapping order): EffBW over the ring's edges as mapped, AggBW
    over every pair, PreservedBW of the free GPUs outside the set."""
    free = (0, 1, 2, 3, 4, 5)
    mapping = (0, 1, 2, 4)
    c = candidate(DGX, free, mapping, ring(4), mapping, MODEL_GPUTOPO)
    edges = mapped_edges(ring(4), mapping)
    assert c.gpus == (0, 1, 2, 4)
    assert c.effective_bandwidth_gbps == pytest.approx(
        effective_bandwidth(DGX, edges, MODEL_GPUTOPO))
    assert c.aggregated_bandwidth_gbps == pytest.approx(
        aggregated_bandwidth(DGX, all_pairs([0, 1, 2, 4])))
    assert c.preserved_bandwidth_gbps == pytest.approx(preserved_bandwidth(DGX, [3, 5]))
    assert c.effective_bandwidth_gbps > 0
    eq2 = candidate(DGX, free, mapping, ring(4), mapping, MODEL_MAPA)
    assert eq2.effective_bandwidth_gbps == pytest.approx(
        effective_bandwidth(DGX, edges, MODEL_MAPA))
    assert eq2.effective_bandwidth_gbps != pytest.approx(c.effective_bandwidth_gbps)
    assert c.preserved_bandwidth_gbps > 0  # GPUs 3 and 5 are NVLinked on the DGX-1


def test_fractional_decision_fields() -> None:
    state = NodeState({0: GPUUsage(100, 0), 3: GPUUsage(30, 4096)})
    request = Request(0, core_percent=25, memory_mib=2048)
    d = fractional_decision("gputopo", DGX, state, request, 3)
    assert d.policy == "gputopo" and d.gpus == (3,) and d.mapping == (3,)
    assert d.uuids == (DGX.gpus[3].uuid,)
    assert d.fractional and d.core_percent == 25 and d.memory_mib == 2048
    assert d.bandwidth_model == MODEL_GPUTOPO
    assert (d.aggregated_bandwidth_gbps, d.pattern_bandwidth_gbps,
            d.effective_bandwidth_gbps, d.access_cost) == (0.0, 0.0, 0.0, 0.0)
    free = state.free_gpus(DGX)  # 3 is partly used, so not free: PreservedBW of the free GPUs
    assert 3 not in free and d.preserved_bandwidth_gbps == pytest.approx(
        preserved_bandwidth(DGX, list(free)))
    assert d.reason == "" and d.runner_up is None
    assert d.cpu_affinity == "0-19,40-59" and d.numa_nodes == (0,)  # GPU 3: socket 0
    idle = fractional_decision("gputopo", DGX, NodeState({}), request, 5)
    assert idle.preserved_bandwidth_gbps == pytest.approx(
        preserved_bandwidth(DGX, [g for g in range(8) if g != 5]))


def test_a_share_fits_up_to_the_last_mib_and_percent() -> None:
    mib = DGX.gpus[2].memory_mib
    state = NodeState({2: GPUUsage(50, mib - 1024)})
    assert fits_share(DGX, state, Request(0, core_percent=50, memory_mib=1024), 2)
    assert not fits_share(DGX, state, Request(0, core_percent=50, memory_mib=1025), 2)
    assert not fits_share(DGX, state, Request(0, core_percent=51, memory_mib=0), 2)


def test_no_gpu_for_a_share_says_what_was_asked() -> None:
    full = NodeState({g: GPUUsage(100, 0) for g in range(8)})
    with pytest.raises(NoFit, match="no GPU has 25% vGPU-core and 2048 MiB free"):
        shareable_gpus(DGX, full, Request(0, core_percent=25, memory_mib=2048))
