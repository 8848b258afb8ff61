"""The topology model: GPUs, the links between every pair, and link bandwidths.

Everything in this module is a pure, immutable value. A :class:`Topology` is built once
(from the catalog, an ``nvidia-smi topo -m`` text, NVML or the annotation JSON) and then
read by the policies, which never mutate it.

Units: bandwidths in GB/s (unidirectional, per direction, as in MAPA Table 1), memory in MiB.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from typing import cast

import networkx as nx


class TopologyError(ValueError):
    """A topology (or its source text) is malformed or inconsistent."""


class PCIeLevel(IntEnum):
    """How two GPUs meet over PCIe, from nearest to farthest (``nvidia-smi topo -m`` legend).

    The integer order is the Gaia access-cost order (Gaia §III-B: SOC > PHB > PXB > PIX),
    extended with NODE, which newer drivers print for "across host bridges inside one NUMA
    node" and which sits between PHB and SYS. ``SOC`` (older drivers) is read as ``SYS``.
    """

    PIX = 1  # at most one PCIe switch between the two
    PXB = 2  # several PCIe switches, never the host bridge
    PHB = 3  # through a PCIe host bridge (the CPU's root complex)
    NODE = 4  # across PCIe host bridges inside one NUMA node
    SYS = 5  # across the SMP interconnect between NUMA nodes (QPI/UPI, X-Bus)

    @classmethod
    def parse(cls, text: str) -> PCIeLevel:
        """Read a legend token (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS`` or ``SOC``).

        Raises:
            TopologyError: the token is not a PCIe level.
        """
        token = text.strip().upper()
        if token == "SOC":
            return cls.SYS
        try:
            return cls[token]
        except KeyError:
            raise TopologyError(f"unknown PCIe level {text!r}") from None


#: Per-link NVLink bandwidth (GB/s, one direction) by NVLink generation. MAPA Table 1 gives
#: NVLink v1 = 20 and v2 = 25 GB/s per link; v3 (A100) and v4 (H100) keep 25 GB/s per link
#: per direction (they add links, not per-link speed).
DEFAULT_NVLINK_GBPS: dict[int, float] = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0}

#: Per-link bandwidth (GB/s, one direction) of NVLink generations newer than the table above:
#: NVLink 5 (Blackwell: B200, GB200) doubles the per-link rate, 18 links × 50 GB/s = 1.8 TB/s
#: per GPU both ways (NVIDIA DGX B200 / GB200 NVL72 specifications). Used when a table has no
#: entry for the generation; kept out of :data:`DEFAULT_NVLINK_GBPS` so that the default
#: table, and with it every existing machine's :attr:`Topology.topology_class`, is unchanged.
NEWER_NVLINK_GBPS: dict[int, float] = {5: 50.0}

#: PCIe Gen3 x16 usable bandwidth, MAPA Table 1 (GB/s). MAPA labels every non-NVLink pair
#: with this figure whatever the PCIe level; so do we by default.
DEFAULT_PCIE_GBPS = 12.0


@dataclass(frozen=True)
class LinkBandwidths:
    """The link-bandwidth table, GB/s per direction.

    Attributes:
        nvlink_gbps_per_link: bandwidth of one NVLink of each generation (MAPA Table 1).
        pcie_gbps: bandwidth of a PCIe path at each level; defaults to 12 GB/s everywhere
            (PCIe Gen3 x16, MAPA Table 1). Override e.g. ``{PCIeLevel.SYS: 9.0}``; levels left
            out keep the default.
    """

    nvlink_gbps_per_link: dict[int, float] = field(
        default_factory=lambda: dict(DEFAULT_NVLINK_GBPS)
    )
    pcie_gbps: dict[PCIeLevel, float] = field(
        default_factory=lambda: {level: DEFAULT_PCIE_GBPS for level in PCIeLevel}
    )

    def nvlink(self, generation: int) -> float:
        """GB/s of one NVLink of ``generation``: the table's entry, else the published figure
        of a newer generation (:data:`NEWER_NVLINK_GBPS`), else the table's newest."""
        if generation in self.nvlink_gbps_per_link:
            return self.nvlink_gbps_per_link[generation]
        if generation in NEWER_NVLINK_GBPS:
            return NEWER_NVLINK_GBPS[generation]
        return self.nvlink_gbps_per_link[max(self.nvlink_gbps_per_link)]

    def pcie(self, level: PCIeLevel) -> float:
        """GB/s of a PCIe path at ``level`` (default 12)."""
        return self.pcie_gbps.get(level, DEFAULT_PCIE_GBPS)

    def __hash__(self) -> int:  # dict fields: hash by content
        return hash(
            (
                tuple(sorted(self.nvlink_gbps_per_link.items())),
                tuple(sorted(self.pcie_gbps.items())),
            )
        )


@dataclass(frozen=True)
class GPU:
    """One physical GPU.

    Attributes:
        index: NVML / nvidia-smi index (0-based, PCI bus order).
        uuid: ``GPU-xxxxxxxx-...`` as NVML reports it.
        pci_bus_id: ``0000:06:00.0`` (domain:bus:device.function).
        name: model name, e.g. ``Tesla V100-SXM2-16GB``.
        memory_mib: total framebuffer memory, MiB.
        numa_node: the NUMA node the GPU hangs off, or None when unknown.
        cpu_affinity: logical CPUs local to the GPU (its NUMA node's CPUs).
    """

    index: int
    uuid: str
    pci_bus_id: str
    name: str
    memory_mib: int
    numa_node: int | None
    cpu_affinity: frozenset[int]


@dataclass(frozen=True)
class Link:
    """The connection between two distinct GPUs.

    Attributes:
        nvlinks: number of NVLinks joining them directly (``NV#``); on NVSwitch systems the
            number of NVLinks each GPU has into the switch fabric.
        pcie: PCIe path level between them (PIX … SYS).
        nvswitch: the NVLinks go through an NVSwitch (shared fabric), not point to point.
    """

    nvlinks: int
    pcie: PCIeLevel
    nvswitch: bool = False

    @property
    def label(self) -> str:
        """How ``nvidia-smi topo -m`` prints the pair: ``NV#`` when NVLinked, else the PCIe
        level (``PIX`` … ``SYS``)."""
        return f"NV{self.nvlinks}" if self.nvlinks else self.pcie.name


def format_cpu_list(cpus: Iterable[int]) -> str:
    """Format CPUs as a Linux cpulist, e.g. ``{0,1,2,3,8}`` → ``"0-3,8"``; empty → ``""``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def parse_cpu_list(text: str) -> frozenset[int]:
    """Parse a Linux cpulist (``"0-19,40-59"``); ``""`` or ``"N/A"`` → empty set.

    Raises:
        TopologyError: the text is not a cpulist.
    """
    text = text.strip()
    if not text or text.upper() == "N/A":
        return frozenset()
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(p) for p in part.split("-", 1))
                if hi < lo:
                    raise ValueError(part)
                cpus.update(range(lo, hi + 1))
            else:
                cpus.add(int(part))
    except ValueError:
        raise TopologyError(f"not a CPU list: {text!r}") from None
    return frozenset(cpus)


@dataclass(frozen=True, eq=False)
class Topology:
    """A node's GPUs and the link between every pair of them.

    Build it with :meth:`Topology.build`; indices of ``gpus`` must be ``0..n-1`` in order.

    Attributes:
        name: a label (catalog name or host name); not part of equality.
        gpus: the GPUs, ``gpus[i].index == i``.
        links: ``links[i][j]`` for ``i != j`` (symmetric); ``links[i][i]`` is unused.
        nvlink_generation: NVLink generation of the machine (1 = P100, 2 = V100, 3 = A100, …).
        bandwidths: the link-bandwidth table used to label edges in GB/s.
        nvswitch: every GPU pair is reachable through NVSwitch.
    """

    name: str
    gpus: tuple[GPU, ...]
    links: tuple[tuple[Link, ...], ...]
    nvlink_generation: int = 2
    bandwidths: LinkBandwidths = field(default_factory=LinkBandwidths)
    nvswitch: bool = False

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(
        cls,
        name: str,
        gpus: Sequence[GPU],
        nvlinks: dict[tuple[int, int], int],
        pcie: dict[tuple[int, int], PCIeLevel] | PCIeLevel,
        *,
        nvlink_generation: int = 2,
        bandwidths: LinkBandwidths | None = None,
        nvswitch: bool = False,
    ) -> Topology:
        """Build and validate a topology from pairwise dictionaries.

        Args:
            name: label.
            gpus: GPUs in index order.
            nvlinks: NVLink count for pairs ``(i, j)``; missing pairs have 0. Either order.
            pcie: PCIe level per pair (either order; every pair must be present), or one level
                for every pair.
            nvlink_generation: NVLink generation for the bandwidth table.
            bandwidths: bandwidth table; default MAPA Table 1.
            nvswitch: the NVLinks go through NVSwitch.

        Raises:
            TopologyError: indices are not 0..n-1, duplicate UUIDs, a pair is missing a PCIe
                level, a count is negative, or the two orders of a pair disagree.
        """
        n = len(gpus)
        if n == 0:
            raise TopologyError("a topology needs at least one GPU")
        for i, gpu in enumerate(gpus):
            if gpu.index != i:
                raise TopologyError(f"GPU at position {i} has index {gpu.index}; expected {i}")
        uuids = [g.uuid for g in gpus]
        if len(set(uuids)) != n:
            raise TopologyError("duplicate GPU UUIDs")

        def pair_value(table: dict[tuple[int, int], object], i: int, j: int) -> object:
            a, b = table.get((i, j)), table.get((j, i))
            if a is not None and b is not None and a != b:
                raise TopologyError(f"GPU pair {i},{j} is asymmetric: {a} vs {b}")
            return a if a is not None else b

        rows: list[tuple[Link, ...]] = []
        for i in range(n):
            row: list[Link] = []
            for j in range(n):
                if i == j:
                    row.append(Link(0, PCIeLevel.PIX, False))
                    continue
                count = pair_value(nvlinks, i, j)  # type: ignore[arg-type]
                count_i = int(count) if count is not None else 0  # type: ignore[call-overload]
                if count_i < 0:
                    raise TopologyError(f"negative NVLink count for GPUs {i},{j}")
                if isinstance(pcie, PCIeLevel):
                    level = pcie
                else:
                    found = pair_value(pcie, i, j)  # type: ignore[arg-type]
                    if found is None:
                        raise TopologyError(f"no PCIe level for GPU pair {i},{j}")
                    level = PCIeLevel(cast(int, found))
                row.append(Link(count_i, level, nvswitch and count_i > 0))
            rows.append(tuple(row))
        return cls(
            name=name,
            gpus=tuple(gpus),
            links=tuple(rows),
            nvlink_generation=nvlink_generation,
            bandwidths=bandwidths or LinkBandwidths(),
            nvswitch=nvswitch,
        )

    # ------------------------------------------------------------------ basic queries
    @property
    def size(self) -> int:
        """Number of GPUs."""
        return len(self.gpus)

    def link(self, i: int, j: int) -> Link:
        """The link between GPUs ``i`` and ``j`` (``i != j``).

        Raises:
            IndexError: an index is out of range.
            ValueError: ``i == j``.
        """
        if i == j:
            raise ValueError("a GPU has no link to itself")
        return self.links[i][j]

    def nvlinks(self, i: int, j: int) -> int:
        """NVLink count (NV#) between two GPUs."""
        return self.link(i, j).nvlinks

    def pcie_level(self, i: int, j: int) -> PCIeLevel:
        """PCIe path level between two GPUs."""
        return self.link(i, j).pcie

    def link_bandwidth(self, i: int, j: int) -> float:
        """Best link bandwidth between two GPUs, GB/s (MAPA §3.2: edges carry the fastest
        available link). NVLink: count × per-link GB/s of the generation; else the PCIe level's."""
        lk = self.link(i, j)
        if lk.nvlinks > 0:
            return lk.nvlinks * self.bandwidths.nvlink(self.nvlink_generation)
        return self.bandwidths.pcie(lk.pcie)

    @cached_property
    def bandwidth_matrix(self) -> tuple[tuple[float, ...], ...]:
        """``n × n`` matrix of :meth:`link_bandwidth` in GB/s, 0 on the diagonal."""
        n = self.size
        return tuple(
            tuple(0.0 if i == j else self.link_bandwidth(i, j) for j in range(n)) for i in range(n)
        )

    def hardware_graph(self, gpus: Iterable[int] | None = None) -> nx.Graph:
        """MAPA's hardware graph (§3.2): the complete graph on ``gpus`` (default all), each
        edge with attribute ``weight`` = best link bandwidth in GB/s, plus ``nvlinks`` and
        ``pcie`` (the :class:`PCIeLevel`)."""
        nodes = sorted(range(self.size) if gpus is None else set(gpus))
        g = nx.Graph()
        g.add_nodes_from(nodes)
        for a_pos, a in enumerate(nodes):
            for b in nodes[a_pos + 1 :]:
                lk = self.links[a][b]
                g.add_edge(
                    a, b, weight=self.bandwidth_matrix[a][b], nvlinks=lk.nvlinks, pcie=lk.pcie
                )
        return g

    # ------------------------------------------------------------------ CPU / NUMA
    def cpu_affinity(self, gpus: Iterable[int]) -> frozenset[int]:
        """Union of the NUMA-local CPUs of ``gpus`` (Gaia §III-A: bind a job to the CPU cores
        nearest its GPUs)."""
        cpus: set[int] = set()
        for i in gpus:
            cpus |= self.gpus[i].cpu_affinity
        return frozenset(cpus)

    def numa_nodes(self, gpus: Iterable[int]) -> tuple[int, ...]:
        """Sorted NUMA nodes of ``gpus`` (unknown NUMA nodes are left out)."""
        return tuple(
            sorted({g.numa_node for i in gpus if (g := self.gpus[i]).numa_node is not None})
        )

    # ------------------------------------------------------------------ identity
    def link_signature(self) -> list[list[list[int | str | bool]]]:
        """The pairwise link matrix as plain data: ``[[nvlinks, pcie_name, nvswitch], ...]``."""
        return [[[lk.nvlinks, lk.pcie.name, lk.nvswitch] for lk in row] for row in self.links]

    @cached_property
    def topology_class(self) -> str:
        """A short stable hash of what placement depends on: GPU count, model names, memory,
        the link matrix, NVLink generation, NVSwitch and the bandwidth table — not UUIDs,
        bus ids or CPU numbers. Nodes with equal classes get equal placements for equal free
        state, so decisions can be cached per class."""
        payload = {
            "names": [g.name for g in self.gpus],
            "memory": [g.memory_mib for g in self.gpus],
            "numa": [g.numa_node for g in self.gpus],
            "links": self.link_signature(),
            "gen": self.nvlink_generation,
            "nvswitch": self.nvswitch,
            "bw": [
                sorted(self.bandwidths.nvlink_gbps_per_link.items()),
                sorted((k.name, v) for k, v in self.bandwidths.pcie_gbps.items()),
            ],
        }
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
        return digest[:12]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Topology):
            return NotImplemented
        return (
            self.gpus == other.gpus
            and self.links == other.links
            and self.nvlink_generation == other.nvlink_generation
            and self.nvswitch == other.nvswitch
            and self.bandwidths == other.bandwidths
        )

    def __hash__(self) -> int:
        return hash((self.topology_class, tuple(g.uuid for g in self.gpus)))

    def with_bandwidths(self, bandwidths: LinkBandwidths) -> Topology:
        """The same machine with another bandwidth table."""
        return Topology(
            name=self.name,
            gpus=self.gpus,
            links=self.links,
            nvlink_generation=self.nvlink_generation,
            bandwidths=bandwidths,
            nvswitch=self.nvswitch,
        )


def deterministic_uuid(machine: str, index: int) -> str:
    """A stable, NVML-shaped GPU UUID (``GPU-8-4-4-4-12`` hex) for fake machines.

    The same ``(machine, index)`` always gives the same UUID; different machines differ.
    """
    h = hashlib.sha256(f"gputopo:{machine}:{index}".encode()).hexdigest()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
