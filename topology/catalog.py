"""A catalog of named machines, usable wherever a topology is expected.

Every entry is data: GPUs (deterministic UUIDs from :func:`deterministic_uuid`), the NVLink
count and PCIe level of every pair, NUMA nodes and CPU affinity. Names are lower-case with
dashes (``dgx1-v100``); :func:`get` resolves a name, :func:`names` lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from topology.model import (
    GPU,
    PCIeLevel,
    Topology,
    TopologyError,
    deterministic_uuid,
)
from topology.network import NodeNetwork, rail_per_gpu, rail_per_group


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


def _pcie_by_groups(
    group_of: Sequence[int],
    numa_of: Sequence[int],
    *,
    same_group: PCIeLevel,
    same_numa: PCIeLevel = PCIeLevel.NODE,
) -> dict[tuple[int, int], PCIeLevel]:
    """PCIe levels of a tree described by two labels per GPU.

    GPUs with the same ``group_of`` share a PCIe switch (or switch hierarchy) and meet at
    ``same_group``; other GPUs of one NUMA node meet at ``same_numa`` (NODE: across host
    bridges; PHB: through one host bridge); GPUs of different NUMA nodes meet at SYS.
    """
    n = len(group_of)
    levels: dict[tuple[int, int], PCIeLevel] = {}
    for a in range(n):
        for b in range(a + 1, n):
            if group_of[a] == group_of[b]:
                levels[(a, b)] = same_group
            elif numa_of[a] == numa_of[b]:
                levels[(a, b)] = same_numa
            else:
                levels[(a, b)] = PCIeLevel.SYS
    return levels


def _one_based(edges: dict[tuple[int, int], int]) -> dict[tuple[int, int], int]:
    """Shift 1-based GPU pairs (as MAPA's sources number them) to our 0-based indices."""
    return {(a - 1, b - 1): count for (a, b), count in edges.items()}


# ---------------------------------------------------------------------------- DGX-1 P100
# The same hybrid cube-mesh wiring as the V100 machine, but the P100 has only 4 NVLink v1
# ports, so every NVLinked pair has one link: each GPU reaches the other three of its quad
# and its counterpart (i <-> i+4) in the other quad. MAPA's simulator source (``dgx-p`` in
# socal-ucr/MAPA src/GpuTopology.hh) lists exactly these 16 single links.
DGX1_P100_NVLINKS: dict[tuple[int, int], int] = {
    (0, 1): 1, (0, 2): 1, (0, 3): 1, (0, 4): 1,
    (1, 2): 1, (1, 3): 1, (1, 5): 1,
    (2, 3): 1, (2, 6): 1,
    (3, 7): 1,
    (4, 5): 1, (4, 6): 1, (4, 7): 1,
    (5, 6): 1, (5, 7): 1,
    (6, 7): 1,
}  # fmt: skip


def dgx1_p100() -> Topology:
    """NVIDIA DGX-1 with 8 Tesla P100-SXM2-16GB (MAPA Fig. 1b; Amaral et al. §1 / Fig. 1).

    NVLink 1 hybrid cube-mesh: "the 12 edges of the cube are connected via single lane
    NVLink, and the diagonals of two of six faces are also connected" (Amaral et al. §1),
    i.e. each GPU has 4 single links (NV1, 20 GB/s each, MAPA Table 1). Same chassis as
    the V100 DGX-1: PCIe switch pairs (0,1) (2,3) (4,5) (6,7), GPUs 0-3 on socket 0, 4-7 on
    socket 1; two 20-core Xeon E5-2698 v4 with hyper-threading (NUMA 0 = CPUs 0-19,40-59,
    NUMA 1 = CPUs 20-39,60-79), as ``nvidia-smi topo -m`` shows on that machine.
    """
    name = "dgx1-p100"
    cpus = {0: _cpus((0, 19), (40, 59)), 1: _cpus((20, 39), (60, 79))}
    bus = ["0000:06:00.0", "0000:07:00.0", "0000:0A:00.0", "0000:0B:00.0",
           "0000:85:00.0", "0000:86:00.0", "0000:89:00.0", "0000:8A:00.0"]  # fmt: skip
    gpus = _gpus(name, 8, "Tesla P100-SXM2-16GB", 16280, lambda i: i // 4, cpus, bus)
    return Topology.build(name, gpus, DGX1_P100_NVLINKS, _dgx1_pcie(), nvlink_generation=1)


# ---------------------------------------------------------------------------- DGX A100
#: NUMA node of each DGX A100 GPU with the EPYC 7742s in NPS4 mode (DGX A100 user guide;
#: ``nvidia-smi topo -m`` "NUMA Affinity" column on a DGX A100).
DGX_A100_NUMA = (3, 3, 1, 1, 7, 7, 5, 5)


def dgx_a100() -> Topology:
    """NVIDIA DGX A100: 8 A100-SXM4-40GB on six NVSwitches (NVLink 3).

    Every GPU has 12 NVLink 3 links into the NVSwitch fabric, so ``nvidia-smi topo -m``
    shows NV12 for every pair (12 × 25 = 300 GB/s per direction). Host: two 64-core AMD
    EPYC 7742 with SMT (256 logical CPUs). We model the NPS4 setting the DGX A100 user guide
    describes: 8 NUMA nodes of 16 cores, node ``k`` = CPUs ``16k..16k+15`` and their SMT
    siblings ``128+16k..128+16k+15``; GPU NUMA affinity 3,3,1,1,7,7,5,5 (sockets 0 and 1
    hold NUMA nodes 0-3 and 4-7). PCIe: GPU pairs (0,1) (2,3) (4,5) (6,7) sit under one
    two-level Broadcom switch complex with their NICs (PXB); any other pair is in different
    NUMA nodes (SYS).
    """
    name = "dgx-a100"
    cpus = {k: _cpus((16 * k, 16 * k + 15), (128 + 16 * k, 128 + 16 * k + 15)) for k in range(8)}
    bus = ["0000:07:00.0", "0000:0F:00.0", "0000:47:00.0", "0000:4E:00.0",
           "0000:87:00.0", "0000:90:00.0", "0000:B7:00.0", "0000:BD:00.0"]  # fmt: skip
    gpus = _gpus(name, 8, "NVIDIA A100-SXM4-40GB", 40536, lambda i: DGX_A100_NUMA[i], cpus, bus)
    nvlinks = {(a, b): 12 for a in range(8) for b in range(a + 1, 8)}
    pcie = _pcie_by_groups([i // 2 for i in range(8)], DGX_A100_NUMA, same_group=PCIeLevel.PXB)
    return Topology.build(name, gpus, nvlinks, pcie, nvlink_generation=3, nvswitch=True)


# ---------------------------------------------------------------------------- IBM Minsky
def minsky() -> Topology:
    """IBM Power System S822LC for HPC ("Minsky"), the testbed of Amaral et al. (SC'17) §3.

    "2 sockets and 8 cores per socket", "two NVIDIA GPU P100's per socket", intra-socket
    CPU-GPU and GPU-GPU links are dual NVLinks (NV2, 2 × 20 = 40 GB/s per direction;
    Amaral et al. §1, §3 and Fig. 1); the two sockets talk over the system bus, so
    cross-socket GPU pairs are SYS. Each P100 spends 2 of its 4 NVLink 1 ports on its
    sibling GPU and 2 on the CPU. POWER8 runs SMT8: 64 hardware threads per socket
    (CPUs 0-63 and 64-127). NUMA node ids are the POWER chip ids, 0 and 8, as Linux on
    OpenPOWER numbers them. Each GPU has its own PCIe host bridge (PCI domains 0002, 0003,
    000A, 000B), so GPUs of one socket meet at NODE.
    """
    name = "minsky"
    numa = (0, 0, 8, 8)
    cpus = {0: _cpus((0, 63)), 8: _cpus((64, 127))}
    bus = ["0002:01:00.0", "0003:01:00.0", "000A:01:00.0", "000B:01:00.0"]
    gpus = _gpus(name, 4, "Tesla P100-SXM2-16GB", 16280, lambda i: numa[i], cpus, bus)
    pcie = _pcie_by_groups(range(4), numa, same_group=PCIeLevel.NODE)
    return Topology.build(name, gpus, {(0, 1): 2, (2, 3): 2}, pcie, nvlink_generation=1)


# ---------------------------------------------------------------------------- Summit node
def summit() -> Topology:
    """One node of ORNL Summit (IBM Power System AC922, 8335-GTW); MAPA's ``summit``
    hardware graph (MAPA §5, simulator source ``summit``).

    Two 22-core POWER9 sockets (SMT4: CPUs 0-87 and 88-175; NUMA nodes 0 and 8, the chip
    ids), three Tesla V100-SXM2-16GB per socket. The three GPUs of a socket are fully
    connected with two NVLink 2 links per pair (NV2, 50 GB/s per direction) and each has two
    more links to its CPU (6 links per V100); GPUs of different sockets go through the
    X-Bus (SYS). Every GPU has its own PCIe host bridge (NODE within a socket).
    """
    name = "summit"
    numa = (0, 0, 0, 8, 8, 8)
    cpus = {0: _cpus((0, 87)), 8: _cpus((88, 175))}
    bus = ["0004:04:00.0", "0004:05:00.0", "0004:06:00.0",
           "0035:03:00.0", "0035:04:00.0", "0035:05:00.0"]  # fmt: skip
    gpus = _gpus(name, 6, "Tesla V100-SXM2-16GB", 16160, lambda i: numa[i], cpus, bus)
    nvlinks = {(0, 1): 2, (0, 2): 2, (1, 2): 2, (3, 4): 2, (3, 5): 2, (4, 5): 2}
    pcie = _pcie_by_groups(range(6), numa, same_group=PCIeLevel.NODE)
    return Topology.build(name, gpus, nvlinks, pcie, nvlink_generation=2)


# ---------------------------------------------------------------------------- PCIe 8-GPU
def pcie_8gpu() -> Topology:
    """A PCIe-only two-socket 8-GPU server (the common 4U layout, e.g. Supermicro
    SYS-4029GP-TRT): 8 × Tesla V100-PCIE-32GB, no NVLink.

    Each Xeon Gold 6148 socket (20 cores, hyper-threading: NUMA 0 = CPUs 0-19,40-59,
    NUMA 1 = CPUs 20-39,60-79) feeds two PCIe switches on separate root ports, two GPUs per
    switch: (0,1) (2,3) (4,5) (6,7) are PIX, other pairs of a socket cross host bridges
    inside the NUMA node (NODE), and pairs across sockets are SYS.
    """
    name = "pcie-8gpu"
    cpus = {0: _cpus((0, 19), (40, 59)), 1: _cpus((20, 39), (60, 79))}
    bus = ["0000:1A:00.0", "0000:1B:00.0", "0000:3D:00.0", "0000:3E:00.0",
           "0000:88:00.0", "0000:89:00.0", "0000:B1:00.0", "0000:B2:00.0"]  # fmt: skip
    gpus = _gpus(name, 8, "Tesla V100-PCIE-32GB", 32510, lambda i: i // 4, cpus, bus)
    pcie = _pcie_by_groups(
        [i // 2 for i in range(8)], [i // 4 for i in range(8)], same_group=PCIeLevel.PIX
    )
    return Topology.build(name, gpus, {}, pcie, nvlink_generation=2)


# ---------------------------------------------------------------------------- one V100
def v100_1gpu() -> Topology:
    """A one-GPU server with a Tesla V100-PCIE-16GB: each of the two machines of Tabrizian's
    evaluation ("two V100 GPUs ... placed in different machines connected to each other over
    the network", §6.1). One 8-core socket with hyper-threading (CPUs 0-15, NUMA 0); the
    thesis names neither the CPU nor the PCIe slot, so these are nominal.
    """
    name = "v100-1gpu"
    gpus = _gpus(name, 1, "Tesla V100-PCIE-16GB", 16160, lambda i: 0,
                 {0: _cpus((0, 15))}, ["0000:3B:00.0"])
    return Topology.build(name, gpus, {}, PCIeLevel.PIX, nvlink_generation=2)


# ---------------------------------------------------------------------------- Gaia testbed
def gaia_4gpu() -> Topology:
    """The 4-GPU node of Gaia's experiments (Song et al., §IV and Fig. 7 "the access cost
    tree for experiment"): 4 × Tesla P4 in a two-socket Xeon E5-2680 v4 server (56 logical
    CPUs: 2 × 14 cores with hyper-threading).

    Fig. 7 itself is an image; we reconstruct the tree from the experiments it supports.
    On the empty node a 1-GPU request gets gpu2 or gpu3 and a 2-GPU request always gets
    {gpu2, gpu3} (Exp. 1, Table I), so that pair is the cheapest subtree; with gpu2 busy, a
    1-GPU request takes gpu3 (Singular, Table III) and a 2-GPU request takes {gpu0, gpu1}
    (Link, Table IV), so gpu0/gpu1 are siblings too. Gaia's cost order is
    SOC > PHB > PXB > PIX (§III-B), hence: root SOC (the two sockets, NUMA 0 = CPUs
    0-13,28-41 and NUMA 1 = CPUs 14-27,42-55); gpu0 and gpu1 meet at the host bridge of
    socket 0 (PHB); gpu2 and gpu3 share one PCIe switch on socket 1 (PIX).
    """
    name = "gaia-4gpu"
    numa = (0, 0, 1, 1)
    cpus = {0: _cpus((0, 13), (28, 41)), 1: _cpus((14, 27), (42, 55))}
    bus = ["0000:02:00.0", "0000:03:00.0", "0000:84:00.0", "0000:85:00.0"]
    gpus = _gpus(name, 4, "Tesla P4", 7611, lambda i: numa[i], cpus, bus)
    pcie = _pcie_by_groups(
        (0, 1, 2, 2), numa, same_group=PCIeLevel.PIX, same_numa=PCIeLevel.PHB
    )
    return Topology.build(name, gpus, {}, pcie, nvlink_generation=2)


# ---------------------------------------------------------------------------- MAPA 16-GPU
#: MAPA's 16-GPU 2-D torus (MAPA §5.2 "Novel 16-GPU topologies", Fig. 17a), 1-based as in
#: the simulator source (socal-ucr/MAPA src/GpuTopology.hh, ``torus-2d``): a 4 × 4 grid,
#: row r holding GPUs 4r+1..4r+4, each GPU joined to its four torus neighbours. 50 GB/s
#: (double NVLink v2) edges are NV2, 25 GB/s (single) edges NV1. The source lists 31 of the
#: 32 torus edges — it omits 1-5; we restore it as a single link (the only count that keeps
#: GPU 1 within a V100's 6 NVLinks) so that every GPU has its 4 neighbours.
_MAPA_TORUS_1BASED: dict[tuple[int, int], int] = {
    (1, 2): 2, (2, 3): 2, (3, 4): 2, (1, 4): 1,
    (5, 6): 2, (6, 7): 2, (7, 8): 2, (5, 8): 1,
    (9, 10): 2, (10, 11): 2, (11, 12): 2, (9, 12): 1,
    (13, 14): 2, (14, 15): 2, (15, 16): 2, (13, 16): 1,
    (1, 5): 1, (5, 9): 1, (9, 13): 1, (1, 13): 2,
    (2, 6): 1, (6, 10): 1, (10, 14): 1, (2, 14): 1,
    (3, 7): 1, (7, 11): 1, (11, 15): 1, (3, 15): 1,
    (4, 8): 1, (8, 12): 1, (12, 16): 1, (4, 16): 2,
}  # fmt: skip
MAPA_TORUS_NVLINKS = _one_based(_MAPA_TORUS_1BASED)

#: MAPA's 16-GPU cube-mesh (MAPA §5.2, Fig. 17b), 1-based as in the simulator source
#: (``cubeMesh-16``). GPUs 1-8 and 9-16 are each a DGX-1-like cube-mesh that lost three
#: edges (local 1-5, 3-4, 4-8); six NVLinks join the halves (1-12, 3-10, 4-9, 5-16, 7-14,
#: 8-13). Counts follow the source's bandwidth figures (50 GB/s → NV2, 25 GB/s → NV1); four
#: edges the source labels "double" with 25 GB/s (1-12, 2-6, 4-9, 10-14) are therefore NV1.
#: As drawn, GPUs 13 and 16 carry 7 NVLinks — one more than a V100 has; the machine is
#: hypothetical and we keep MAPA's graph rather than invent another.
_MAPA_CUBEMESH_1BASED: dict[tuple[int, int], int] = {
    (1, 2): 1, (1, 3): 1, (1, 4): 2, (1, 12): 1,
    (2, 3): 2, (2, 4): 1, (2, 6): 1,
    (3, 7): 1, (3, 10): 1,
    (4, 9): 1,
    (5, 6): 2, (5, 7): 1, (5, 8): 1, (5, 16): 2,
    (6, 7): 1, (6, 8): 1,
    (7, 8): 2, (7, 14): 1,
    (8, 13): 2,
    (9, 10): 1, (9, 11): 2, (9, 12): 1,
    (10, 11): 2, (10, 12): 1, (10, 14): 1,
    (11, 15): 1,
    (13, 14): 2, (13, 15): 1, (13, 16): 2,
    (14, 15): 1, (14, 16): 1,
    (15, 16): 2,
}  # fmt: skip
MAPA_CUBEMESH_NVLINKS = _one_based(_MAPA_CUBEMESH_1BASED)

#: Host side shared by the two hypothetical 16-GPU machines, borrowed from the DGX-2 (the
#: real 16 × V100 box): two 24-core Xeon Platinum 8168 with hyper-threading, GPUs 0-7 on
#: socket 0 and 8-15 on socket 1, two GPUs per PCIe switch, and DGX-2 bus ids.
_SIXTEEN_BUS = [
    "0000:34:00.0", "0000:36:00.0", "0000:39:00.0", "0000:3B:00.0",
    "0000:57:00.0", "0000:59:00.0", "0000:5C:00.0", "0000:5E:00.0",
    "0000:B7:00.0", "0000:B9:00.0", "0000:BC:00.0", "0000:BE:00.0",
    "0000:E0:00.0", "0000:E2:00.0", "0000:E5:00.0", "0000:E7:00.0",
]  # fmt: skip


def _sixteen(name: str, nvlinks: dict[tuple[int, int], int]) -> Topology:
    cpus = {0: _cpus((0, 23), (48, 71)), 1: _cpus((24, 47), (72, 95))}
    gpus = _gpus(name, 16, "Tesla V100-SXM2-16GB", 16160, lambda i: i // 8, cpus, _SIXTEEN_BUS)
    pcie = _pcie_by_groups(
        [i // 2 for i in range(16)], [i // 8 for i in range(16)], same_group=PCIeLevel.PIX
    )
    return Topology.build(name, gpus, nvlinks, pcie, nvlink_generation=2)


def mapa_torus_16() -> Topology:
    """MAPA's simulated 16-GPU 2-D torus (MAPA §5.2, Fig. 17a) with NVLink v2 links.

    NVLinks: :data:`MAPA_TORUS_NVLINKS` (4 × 4 torus; row links double except the wrap-around
    ones, column links single except the wrap-around links of the first and last column).
    MAPA says nothing about the host, so we assume two sockets of 8 GPUs (rows 0-1 and
    2-3) in a DGX-2-like PCIe tree (see ``_SIXTEEN_BUS``); every non-NVLink pair costs the
    PCIe bandwidth, as in MAPA.
    """
    return _sixteen("mapa-torus-16", MAPA_TORUS_NVLINKS)


def mapa_cubemesh_16() -> Topology:
    """MAPA's simulated 16-GPU cube-mesh (MAPA §5.2, Fig. 17b) with NVLink v2 links.

    NVLinks: :data:`MAPA_CUBEMESH_NVLINKS` (two irregular DGX-1-like halves joined by six
    links, exactly as MAPA's simulator defines it). Host side as :func:`mapa_torus_16`:
    each half on its own socket.
    """
    return _sixteen("mapa-cubemesh-16", MAPA_CUBEMESH_NVLINKS)


# ---------------------------------------------------------------------------- ANDREAS nodes
#: Host of the ARMIDA cluster's GPU nodes (ANDREAS Appendix B): "2xMarvell TX2 sockets (per
#: socket: 64 cores ... 256 GB RAM, 1xMellanox IB 100Gb EDR)". NUMA node k = socket k =
#: CPUs 64k..64k+63, as Linux numbers a two-socket ThunderX2.
_TX2_CPUS = {0: _cpus((0, 63)), 1: _cpus((64, 127))}
#: Bus ids of the x16 slots, two per socket, in PCI bus order (socket 0's, then socket 1's).
_TX2_BUS = {0: ["0000:0B:00.0", "0000:0C:00.0"], 1: ["0000:8B:00.0", "0000:8C:00.0"]}


def _tx2_node(name: str, count: int, model: str, memory_mib: int) -> Topology:
    """``count`` (1, 2 or 4) PCIe GPUs in an ARMIDA-type two-socket ThunderX2 host, no NVLink.

    Table II gives GPU model and count only, so the layout is ours, that of two-socket servers
    that give each CPU its own x16 GPU slots: the GPUs are split evenly between the sockets
    (a one-GPU node has it on socket 0), every GPU on its own root port, so two GPUs of one
    socket meet at NODE and GPUs of different sockets at SYS. Indices follow PCI bus order.
    """
    per_socket = {0: (count + 1) // 2, 1: count // 2}
    numa = [s for s in (0, 1) for _ in range(per_socket[s])]
    bus = [b for s in (0, 1) for b in _TX2_BUS[s][: per_socket[s]]]
    gpus = _gpus(name, count, model, memory_mib, lambda i: numa[i], _TX2_CPUS, bus)
    pcie = _pcie_by_groups(range(count), numa, same_group=PCIeLevel.NODE)
    return Topology.build(name, gpus, {}, pcie, nvlink_generation=2)


#: NVML names and framebuffer sizes (MiB, as ``nvidia-smi`` reports them) of Table II's GPUs.
V100_PCIE_32GB = ("Tesla V100-PCIE-32GB", 32510)
T4_16GB = ("Tesla T4", 15360)


def v100_pcie_1() -> Topology:
    """One Tesla V100-PCIE-32GB in an ARMIDA-type host: armida-04 and armida-05 of ANDREAS
    Table II (layout: :func:`_tx2_node`)."""
    return _tx2_node("v100-pcie-1", 1, *V100_PCIE_32GB)


def v100_pcie_2() -> Topology:
    """Two Tesla V100-PCIE-32GB, one per socket (SYS between them): armida-06 of ANDREAS
    Table II, and the V100 nodes of §V-B's first scenario."""
    return _tx2_node("v100-pcie-2", 2, *V100_PCIE_32GB)


def v100_pcie_4() -> Topology:
    """Four Tesla V100-PCIE-32GB, two per socket (NODE within, SYS across): the V100 nodes of
    ANDREAS §V-B's second scenario ("nodes with four TeslaV100")."""
    return _tx2_node("v100-pcie-4", 4, *V100_PCIE_32GB)


def t4_1() -> Topology:
    """One Tesla T4 (Turing, 16 GB): armida-07 of ANDREAS Table II, and the T4 nodes of §V-B's
    first scenario."""
    return _tx2_node("t4-1", 1, *T4_16GB)


def t4_2() -> Topology:
    """Two Tesla T4, one per socket: the T4 nodes of ANDREAS §V-B's second scenario."""
    return _tx2_node("t4-2", 2, *T4_16GB)


# ---------------------------------------------------------------------------- HGX / DGX H100
#: Host of the DGX H100 / H200 and DGX B200: two 56-core Xeon Platinum (8480C in the H100/H200,
#: 8570 in the B200) with hyper-threading, NUMA 0 = CPUs 0-55,112-167 (GPUs 0-3), NUMA 1 =
#: CPUs 56-111,168-223 (GPUs 4-7).
_SPR_CPUS = {0: _cpus((0, 55), (112, 167)), 1: _cpus((56, 111), (168, 223))}
#: Bus ids of the eight SXM GPUs of a DGX H100, as ``nvidia-smi`` lists them.
_HGX_BUS = ["0000:1B:00.0", "0000:43:00.0", "0000:51:00.0", "0000:9B:00.0",
            "0000:C2:00.0", "0000:CA:00.0", "0000:DA:00.0", "0000:E2:00.0"]  # fmt: skip


def _hgx8(name: str, model: str, memory_mib: int, generation: int) -> Topology:
    """Eight SXM GPUs on NVSwitch, each with 18 NVLinks into the fabric (``nvidia-smi topo
    -m`` prints NV18 for every pair), each on its own PCIe switch with its own NIC: GPU pairs
    of one socket meet at NODE, across sockets at SYS. PCIe paths carry MAPA's 12 GB/s as on
    every machine (see :func:`h100_nvl`)."""
    numa = [i // 4 for i in range(8)]
    gpus = _gpus(name, 8, model, memory_mib, lambda i: numa[i], _SPR_CPUS, _HGX_BUS)
    nvlinks = {(a, b): 18 for a in range(8) for b in range(a + 1, 8)}
    pcie = _pcie_by_groups(range(8), numa, same_group=PCIeLevel.NODE)
    return Topology.build(name, gpus, nvlinks, pcie, nvlink_generation=generation,
                          nvswitch=True)


def hgx_h100() -> Topology:
    """NVIDIA HGX H100 8-GPU (DGX H100): 8 × H100 SXM5 80 GB on four NVSwitches, NVLink 4.

    NVLink: 18 links per GPU into the fabric, NV18 for every pair, 18 × 25 = 450 GB/s per
    direction (900 GB/s both ways: NVIDIA H100 datasheet). Host: ``_SPR_CPUS``. Memory: 81 559
    MiB, as ``nvidia-smi`` reports an "NVIDIA H100 80GB HBM3". NICs: :func:`network` (one
    400 Gb/s ConnectX-7 per GPU, its default RDMA device: DGX H100 User Guide, "Network
    Modules", Table 6).
    """
    return _hgx8("hgx-h100", "NVIDIA H100 80GB HBM3", 81559, 4)


def hgx_h200() -> Topology:
    """NVIDIA HGX H200 8-GPU (DGX H200): the H100 board with H200 GPUs — 141 GB HBM3e (NVIDIA
    H200 datasheet; 143 771 MiB as ``nvidia-smi`` reports it), the same NVLink 4 NVSwitch
    fabric (NV18, 450 GB/s per direction) and one 400 Gb/s NIC per GPU."""
    return _hgx8("hgx-h200", "NVIDIA H200", 143771, 4)


def hgx_b200() -> Topology:
    """NVIDIA HGX B200 8-GPU (DGX B200): 8 × B200 on NVLink 5 NVSwitches — 18 links per GPU at
    50 GB/s per direction, 1.8 TB/s per GPU both ways (DGX B200 User Guide: "1.8 TB/s ... GPU
    to GPU bandwidth"; per-link rate :data:`topology.model.NEWER_NVLINK_GBPS`). 180 GB HBM3e
    per GPU (1,440 GB for the eight; 183 359 MiB as ``nvidia-smi`` reports it). Host: two
    56-core Xeon Platinum 8570 (``_SPR_CPUS``). NICs: eight single-port 400 Gb/s ConnectX-7,
    one per GPU (the DGX B200 compute fabric).
    """
    return _hgx8("hgx-b200", "NVIDIA B200", 183359, 5)


def h100_nvl() -> Topology:
    """An 8-GPU PCIe server with NVIDIA H100 NVL cards: NVLink bridges join the cards in pairs.

    Each pair (0,1) (2,3) (4,5) (6,7) is bridged with three NVLink 4 bridges, 600 GB/s both
    ways, i.e. NV12 (12 × 25 = 300 GB/s per direction: NVIDIA H100 NVL product brief) and
    sits on one PCIe Gen5 switch with one 400 Gb/s NIC (PIX) — NVIDIA's PCIe reference layout
    of two GPUs and a NIC per switch, 200 Gb/s of network per GPU. Pairs of one socket meet at
    NODE, across sockets at SYS. 94 GB HBM3 per card (95 830 MiB as ``nvidia-smi`` reports an
    "NVIDIA H100 NVL"). Host: ``_SPR_CPUS`` (two 56-core Xeons, GPUs 0-3 on socket 0).

    PCIe between pairs is Gen5 here (usable ~48 GB/s: the 12/15.75 share MAPA's Table 1 gives
    Gen3, applied to Gen5's 63), but the model labels every PCIe path with MAPA's 12 GB/s, as
    NVML discovery does: it does not read the link generation, and a catalog machine must
    look like what its device plugin would publish. Cross-pair sets are undervalued 4x.
    """
    name = "h100-nvl"
    numa = [i // 4 for i in range(8)]
    gpus = _gpus(name, 8, "NVIDIA H100 NVL", 95830, lambda i: numa[i], _SPR_CPUS, _HGX_BUS)
    nvlinks = {(a, a + 1): 12 for a in range(0, 8, 2)}
    pcie = _pcie_by_groups([i // 2 for i in range(8)], numa, same_group=PCIeLevel.PIX)
    return Topology.build(name, gpus, nvlinks, pcie, nvlink_generation=4)


def gb200_tray() -> Topology:
    """One compute tray (one Kubernetes node) of an NVIDIA GB200 NVL72: two Grace CPUs and four
    B200 GPUs; 18 such trays share one NVLink domain of 72 GPUs through the rack's NVLink
    switch trays (NVIDIA GB200 NVL72 specification: 72 GPUs, 36 Grace CPUs, "1.8 TB/s"
    NVLink per GPU), which NVIDIA's GPU feature discovery labels ``nvidia.com/gpu.clique``.

    Inside the tray every pair is NV18 over the NVLink 5 fabric (18 × 50 = 900 GB/s per
    direction). GPUs 0-1 hang off Grace 0 (NUMA 0, CPUs 0-71), GPUs 2-3 off Grace 1 (NUMA 1,
    CPUs 72-143) over NVLink-C2C; 189 471 MiB each as ``nvidia-smi`` reports an "NVIDIA
    GB200". NICs: one 400 Gb/s ConnectX-7 per GPU (:func:`network`).
    """
    name = "gb200-tray"
    numa = (0, 0, 1, 1)
    cpus = {0: _cpus((0, 71)), 1: _cpus((72, 143))}
    bus = ["0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0"]
    gpus = _gpus(name, 4, "NVIDIA GB200", 189471, lambda i: numa[i], cpus, bus)
    nvlinks = {(a, b): 18 for a in range(4) for b in range(a + 1, 4)}
    pcie = _pcie_by_groups(range(4), numa, same_group=PCIeLevel.NODE)
    return Topology.build(name, gpus, nvlinks, pcie, nvlink_generation=5, nvswitch=True)


# ---------------------------------------------------------------------------- NICs
#: Gbit/s of the NICs of the catalog's machines, as GB/s per direction.
_EDR, _HDR, _NDR = 100 / 8, 200 / 8, 400 / 8


def _networks() -> dict[str, Callable[[], NodeNetwork]]:
    dgx1 = lambda: rail_per_group(8, 2, _EDR, numa=[i // 4 for i in range(8)])  # noqa: E731
    return {
        # DGX-1 System Architecture white paper (WP-08437): four 100 Gb/s EDR InfiniBand
        # ports, each on the PLX switch of one GPU pair.
        "dgx1-v100": dgx1,
        "dgx1-p100": dgx1,
        # DGX A100 user guide: eight single-port 200 Gb/s HDR ConnectX-6 for the compute
        # fabric, two per PCIe switch complex with their GPU pair (PXB).
        "dgx-a100": lambda: rail_per_group(8, 2, _HDR, PCIeLevel.PXB, nics_per_group=2,
                                           numa=list(DGX_A100_NUMA)),
        # DGX H100 User Guide, Table 6: each GPU's default RDMA device, a 400 Gb/s CX-7.
        "hgx-h100": lambda: rail_per_gpu(8, _NDR, numa=[i // 4 for i in range(8)]),
        "hgx-h200": lambda: rail_per_gpu(8, _NDR, numa=[i // 4 for i in range(8)]),
        "hgx-b200": lambda: rail_per_gpu(8, _NDR, numa=[i // 4 for i in range(8)]),
        # one 400 Gb/s NIC on each bridged pair's PCIe switch
        "h100-nvl": lambda: rail_per_group(8, 2, _NDR, numa=[i // 4 for i in range(8)]),
        # one 400 Gb/s CX-7 per GPU, reached through its Grace over NVLink-C2C and PCIe. NCCL
        # enables GPUDirect RDMA on this path (its C2C case of ncclTopoCheckGdr); we record
        # it as PXB, the farthest level our GPUDirect rule accepts.
        "gb200-tray": lambda: rail_per_gpu(4, _NDR, PCIeLevel.PXB, numa=[0, 0, 1, 1]),
    }


@cache
def network(name: str) -> NodeNetwork | None:
    """The compute-fabric NICs of catalog machine ``name`` and each GPU's path to them (None
    for machines whose NICs the catalog does not describe: the papers' testbeds).

    Raises:
        UnknownMachine: no such machine.
    """
    build = _networks().get(_key(name))
    return build() if build is not None else None


@dataclass(frozen=True)
class _Entry:
    build: Callable[[], Topology]
    interconnect: str  # one phrase for :func:`describe`


_MACHINES: dict[str, _Entry] = {
    "dgx1-v100": _Entry(dgx1_v100, "NVLink 2 hybrid cube-mesh (NV1/NV2), PCIe switch pairs"),
    "dgx1-p100": _Entry(dgx1_p100, "NVLink 1 hybrid cube-mesh (NV1), PCIe switch pairs"),
    "dgx-a100": _Entry(dgx_a100, "NVSwitch, NV12 between every pair (NVLink 3)"),
    "minsky": _Entry(minsky, "NVLink 1, NV2 pair per POWER8 socket, SYS across sockets"),
    "summit": _Entry(summit, "NVLink 2, NV2 triangle per POWER9 socket, SYS across sockets"),
    "pcie-8gpu": _Entry(pcie_8gpu, "PCIe only: PIX switch pairs, NODE in a socket, SYS across"),
    "gaia-4gpu": _Entry(gaia_4gpu, "PCIe only: Gaia Fig. 7 tree (PIX pair, PHB pair, SOC root)"),
    "v100-1gpu": _Entry(v100_1gpu, "one GPU, no peers (Tabrizian's evaluation machines)"),
    "mapa-torus-16": _Entry(mapa_torus_16, "NVLink 2 4x4 torus (NV1/NV2), MAPA simulation"),
    "mapa-cubemesh-16": _Entry(
        mapa_cubemesh_16, "NVLink 2 16-GPU cube-mesh (NV1/NV2), MAPA simulation"
    ),
    "v100-pcie-1": _Entry(v100_pcie_1, "PCIe only, one GPU (ANDREAS Table II armida-04/05)"),
    "v100-pcie-2": _Entry(v100_pcie_2, "PCIe only: one GPU per socket, SYS (ANDREAS armida-06)"),
    "v100-pcie-4": _Entry(v100_pcie_4, "PCIe only: two GPUs per socket, NODE within, SYS across"),
    "t4-1": _Entry(t4_1, "PCIe only, one GPU (ANDREAS Table II armida-07)"),
    "t4-2": _Entry(t4_2, "PCIe only: one GPU per socket, SYS"),
    "hgx-h100": _Entry(hgx_h100, "NVSwitch, NV18 between every pair (NVLink 4), a NIC per GPU"),
    "hgx-h200": _Entry(hgx_h200, "NVSwitch, NV18 between every pair (NVLink 4), a NIC per GPU"),
    "hgx-b200": _Entry(hgx_b200, "NVSwitch, NV18 between every pair (NVLink 5), a NIC per GPU"),
    "h100-nvl": _Entry(h100_nvl, "NVLink-bridged pairs (NV12) over PCIe Gen5, a NIC per pair"),
    "gb200-tray": _Entry(gb200_tray, "NVLink 5 NV18, one tray of a 72-GPU NVLink domain"),
}


def names() -> list[str]:
    """Catalog machine names, sorted."""
    return sorted(_MACHINES)


def _key(name: str) -> str:
    key = name.strip().lower()
    if key not in _MACHINES:
        raise UnknownMachine(f"unknown catalog machine {name!r}; known: {', '.join(names())}")
    return key


@cache
def get(name: str) -> Topology:
    """The catalog machine ``name`` (cached; topologies are immutable).

    Raises:
        UnknownMachine: no such machine (the message lists the known names).
    """
    return _MACHINES[_key(name)].build()


def describe(name: str) -> str:
    """One line about catalog machine ``name``: GPU count and model, interconnect, and how
    many NUMA nodes the GPUs hang off, e.g.
    ``8 x Tesla V100-SXM2-16GB, NVLink 2 hybrid cube-mesh ..., GPUs on 2 NUMA nodes``.

    Raises:
        UnknownMachine: no such machine.
    """
    key = _key(name)
    topo = get(key)
    numa = len(topo.numa_nodes(range(topo.size)))
    return (
        f"{topo.size} x {topo.gpus[0].name}, {_MACHINES[key].interconnect}, "
        f"GPUs on {numa} NUMA node{'s' if numa != 1 else ''}"
    )


def _model_key(model: str) -> str:
    return " ".join(model.split()).lower()


@cache
def _memory_by_model() -> dict[str, int]:
    return {_model_key(model): mib for model, mib in gpu_models().items()}


def gpu_memory_mib(model: str) -> int | None:
    """Framebuffer size, MiB, of the GPU model ``model`` as a catalog machine has it (what
    NVML reports as ``memory.total`` for that model), e.g. ``Tesla V100-SXM2-16GB`` → 16160.

    Matching ignores case and runs of whitespace. None when no catalog machine has that model
    (or ``model`` is empty).
    """
    if not model.strip():
        return None
    return _memory_by_model().get(_model_key(model))


def gpu_models() -> dict[str, int]:
    """Every GPU model of the catalog → its framebuffer size, MiB (first machine wins)."""
    out: dict[str, int] = {}
    for name in names():
        for g in get(name).gpus:
            if g.name and g.memory_mib > 0:
                out.setdefault(g.name, g.memory_mib)
    return out
