"""A catalog of named machines, usable wherever a topology is expected.

Every entry is data: GPUs (deterministic UUIDs from :func:`deterministic_uuid`), the NVLink
count and PCIe level of every pair, NUMA nodes and CPU affinity. Names are lower-case with
dashes (``dgx1-v100``); :func:`get` resolves a name, :func:`names` lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from topology.model import GPU, PCIeLevel, Topology, TopologyError, deterministic_uuid


class UnknownMachine(TopologyError):
    """No catalog machine has this name."""


def _gpus(
    machine: str,
    count: int,
    name: str,
    memory_mib: int,
    numa_of: Callable[[int], int],
    cpus_of_numa: dict[int, frozenset[int]],
    bus_ids: list[str],
) -> list[GPU]:
    return [
        GPU(
            index=i,
            uuid=deterministic_uuid(machine, i),
            pci_bus_id=bus_ids[i],
            name=name,
            memory_mib=memory_mib,
            numa_node=numa_of(i),
            cpu_affinity=cpus_of_numa[numa_of(i)],
        )
        for i in range(count)
    ]


def _cpus(*ranges: tuple[int, int]) -> frozenset[int]:
    out: set[int] = set()
    for lo, hi in ranges:
        out.update(range(lo, hi + 1))
    return frozenset(out)


# NVLink pairs of the DGX-1 hybrid cube-mesh (V100: 6 NVLinks per GPU; 2 = "NV2").
DGX1_V100_NVLINKS: dict[tuple[int, int], int] = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2,
    (1, 2): 2, (1, 3): 1, (1, 5): 2,
    (2, 3): 2, (2, 6): 1,
    (3, 7): 1,
    (4, 5): 1, (4, 6): 1, (4, 7): 2,
    (5, 6): 2, (5, 7): 1,
    (6, 7): 2,
}  # fmt: skip


def _dgx1_pcie() -> dict[tuple[int, int], PCIeLevel]:
    """DGX-1 PCIe tree: GPU pairs (0,1) (2,3) (4,5) (6,7) share a PLX switch; 0-3 hang off
    CPU socket 0, 4-7 off socket 1."""
    levels: dict[tuple[int, int], PCIeLevel] = {}
    for a in range(8):
        for b in range(a + 1, 8):
            if a // 2 == b // 2:
                levels[(a, b)] = PCIeLevel.PIX
            elif a // 4 == b // 4:
                levels[(a, b)] = PCIeLevel.NODE
            else:
                levels[(a, b)] = PCIeLevel.SYS
    return levels


def dgx1_v100() -> Topology:
    """NVIDIA DGX-1 with 8 Tesla V100-SXM2-16GB (MAPA Fig. 1c; NVLink 2, hybrid cube-mesh).

    Two 20-core Xeon E5-2698 v4 with hyper-threading: NUMA 0 = CPUs 0-19,40-59 (GPUs 0-3),
    NUMA 1 = CPUs 20-39,60-79 (GPUs 4-7).
    """
    name = "dgx1-v100"
    cpus = {0: _cpus((0, 19), (40, 59)), 1: _cpus((20, 39), (60, 79))}
    bus = ["0000:06:00.0", "0000:07:00.0", "0000:0A:00.0", "0000:0B:00.0",
           "0000:85:00.0", "0000:86:00.0", "0000:89:00.0", "0000:8A:00.0"]  # fmt: skip
    gpus = _gpus(name, 8, "Tesla V100-SXM2-16GB", 16160, lambda i: i // 4, cpus, bus)
    return Topology.build(name, gpus, DGX1_V100_NVLINKS, _dgx1_pcie(), nvlink_generation=2)


_MACHINES: dict[str, Callable[[], Topology]] = {
    "dgx1-v100": dgx1_v100,
}


def names() -> list[str]:
    """Catalog machine names, sorted."""
    return sorted(_MACHINES)


@cache
def get(name: str) -> Topology:
    """The catalog machine ``name`` (cached; topologies are immutable).

    Raises:
        UnknownMachine: no such machine (the message lists the known names).
    """
    key = name.strip().lower()
    if key not in _MACHINES:
        raise UnknownMachine(f"unknown catalog machine {name!r}; known: {', '.join(names())}")
    return _MACHINES[key]()
