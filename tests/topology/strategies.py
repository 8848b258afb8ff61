"""Hypothesis strategies for random topologies and states (shared by topology tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from topology.model import GPU, PCIeLevel, Topology, deterministic_uuid
from topology.policies.base import GPUUsage, NodeState


@st.composite
def topologies(draw: st.DrawFn, min_gpus: int = 2, max_gpus: int = 10) -> Topology:
    """Random topologies: NV counts 0..4, random PCIe levels, two NUMA nodes."""
    n = draw(st.integers(min_gpus, max_gpus))
    nv: dict[tuple[int, int], int] = {}
    pcie: dict[tuple[int, int], PCIeLevel] = {}
    for i in range(n):
        for j in range(i + 1, n):
            nv[(i, j)] = draw(st.integers(0, 4))
            pcie[(i, j)] = draw(st.sampled_from(list(PCIeLevel)))
    gpus = [
        GPU(i, deterministic_uuid("random", i), f"0000:{i:02x}:00.0", "Test GPU", 16384,
            i * 2 // n, frozenset(range((i * 2 // n) * 8, (i * 2 // n) * 8 + 8)))
        for i in range(n)
    ]
    return Topology.build("random", gpus, nv, pcie, nvlink_generation=draw(st.integers(1, 3)))


@st.composite
def states(draw: st.DrawFn, n: int) -> NodeState:
    """Random whole/partial usage on ``n`` GPUs."""
    usage = {}
    for i in range(n):
        kind = draw(st.sampled_from(["idle", "idle", "whole", "part"]))
        if kind == "whole":
            usage[i] = GPUUsage(100, 0)
        elif kind == "part":
            usage[i] = GPUUsage(draw(st.integers(1, 99)), draw(st.integers(0, 8000)))
    return NodeState(usage)
