"""A node's NICs, the GPUDirect RDMA rails of its GPUs, and the bandwidth a job's GPUs get
off the node.

A multi-node job talks between nodes through the nodes' NICs (InfiniBand or RoCE). Which NICs
its GPUs use, and whether they reach them without going through the CPU, decides what the job
gets between nodes:

* **Rails.** NCCL sends each GPU's traffic through the NIC nearest it on the PCIe tree, and
  rail-optimised fabrics cable NIC *k* of every node to the same leaf switch, so that GPU *k*
  of one node reaches GPU *k* of another in one hop (NVIDIA DGX SuperPOD reference
  architecture; NCCL's topology search, ``src/graph/search.cc``). :attr:`NodeNetwork.rails`
  is each GPU's nearest NIC (lowest PCIe level; equal levels are shared out evenly, lowest NIC
  index first).
* **GPUDirect RDMA** is used only when the GPU-NIC path is at most PXB — NCCL's default
  ``NCCL_NET_GDR_LEVEL`` (``netGdrLevel = PATH_PXB`` in ``ncclTopoCheckGdr``,
  ``src/graph/paths.cc``). A GPU farther from its NIC stages data in host memory; we cap it at
  the PCIe bandwidth of that path (:meth:`NodeNetwork.reach_gbps`).
* **A ring crosses the node through every NIC its GPUs use.** NCCL runs one ring (channel)
  per NIC and splits the data among them, so the node's share of an inter-node ring runs at
  the *sum* of the distinct NICs the job's GPUs on that node use, each counted once
  (:meth:`NodeNetwork.job_gbps`): 8 GPUs with a 400 Gb/s NIC each move 8 × 50 GB/s, two GPUs
  sharing one NIC move one NIC's worth.

The model is pure data. It comes from the catalog (:func:`topology.catalog.network`), from
what a node publishes (:func:`dumps` / :func:`loads`: the ``gputopo.io/network`` node
annotation, schema ``gputopo.io/v1``), or, where nothing is published, from two node labels
(:func:`from_labels`).

Units: GB/s per direction (a 400 Gb/s port is 50 GB/s), as everywhere in the model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from topology.contract import ANN_NETWORK as ANN_NETWORK  # noqa: PLC0414 - re-exported
from topology.contract import LABEL_NIC_COUNT as LABEL_NIC_COUNT  # noqa: PLC0414
from topology.contract import LABEL_NIC_GBITS as LABEL_NIC_GBITS  # noqa: PLC0414
from topology.model import LinkBandwidths, PCIeLevel, Topology, TopologyError

#: NCCL's default ``NCCL_NET_GDR_LEVEL``: GPUDirect RDMA when the GPU-NIC path is at most this.
GDR_LEVEL = PCIeLevel.PXB
#: Gbit/s in one GB/s (a NIC's line rate in Gb/s divided by 8 gives GB/s).
BITS_PER_BYTE = 8.0

SCHEMA_VERSION: Literal["gputopo.io/v1"] = "gputopo.io/v1"


class NetworkError(TopologyError):
    """A network description (document, labels or arguments) is malformed or does not match
    the node's GPUs."""


@dataclass(frozen=True)
class NIC:
    """One network adapter port used for the job (compute) fabric.

    Attributes:
        name: its RDMA device name (``mlx5_0``) or a label.
        gbps: line rate, GB/s per direction (> 0; 400 Gb/s = 50).
        pci_bus_id: ``0000:18:00.0`` ("" when unknown).
        numa_node: NUMA node it hangs off (None when unknown).
    """

    name: str
    gbps: float
    pci_bus_id: str = ""
    numa_node: int | None = None


@dataclass(frozen=True)
class NodeNetwork:
    """A node's compute NICs and how each GPU reaches each of them.

    Build with :meth:`build`.

    Attributes:
        nics: the NICs, index order.
        paths: ``paths[g][k]``: PCIe level between GPU ``g`` and NIC ``k`` (``nvidia-smi topo
            -m``'s GPU × NIC block).
    """

    nics: tuple[NIC, ...]
    paths: tuple[tuple[PCIeLevel, ...], ...]

    @classmethod
    def build(cls, nics: Sequence[NIC],
              paths: Sequence[Sequence[PCIeLevel]]) -> NodeNetwork:
        """Validate and build.

        Args:
            nics: the NICs (at least one).
            paths: one row per GPU, one PCIe level per NIC.

        Raises:
            NetworkError: no NIC, a non-positive or non-finite rate, rows of the wrong length.
        """
        if not nics:
            raise NetworkError("a node network needs at least one NIC")
        for nic in nics:
            if not (math.isfinite(nic.gbps) and nic.gbps > 0):
                raise NetworkError(f"NIC {nic.name}: rate must be a positive number of GB/s")
        if not paths:
            raise NetworkError("a node network needs a path row per GPU")
        for g, row in enumerate(paths):
            if len(row) != len(nics):
                raise NetworkError(f"GPU {g}: {len(row)} NIC paths for {len(nics)} NICs")
        return cls(tuple(nics), tuple(tuple(PCIeLevel(x) for x in row) for row in paths))

    @property
    def gpus(self) -> int:
        """Number of GPUs the paths describe."""
        return len(self.paths)

    @cached_property
    def rails(self) -> tuple[int, ...]:
        """Each GPU's NIC: the nearest (lowest PCIe level); among equally near NICs the one
        with the fewest GPUs so far, then the lowest index (GPUs in index order), so GPUs
        sharing a switch with several NICs spread over them."""
        load = [0] * len(self.nics)
        out: list[int] = []
        for row in self.paths:
            best = min(row)
            k = min((k for k, level in enumerate(row) if level == best),
                    key=lambda k: (load[k], k))
            load[k] += 1
            out.append(k)
        return tuple(out)

    def gdr(self, gpu: int) -> bool:
        """GPUDirect RDMA between ``gpu`` and its rail NIC (path at most :data:`GDR_LEVEL`)."""
        return self.paths[gpu][self.rails[gpu]] <= GDR_LEVEL

    def reach_gbps(self, gpu: int, bandwidths: LinkBandwidths) -> float:
        """GB/s ``gpu`` can push into its rail NIC: the NIC's rate with GPUDirect RDMA, else
        at most the PCIe bandwidth of the path (staged through host memory)."""
        k = self.rails[gpu]
        rate = self.nics[k].gbps
        if self.gdr(gpu):
            return rate
        return min(rate, bandwidths.pcie(self.paths[gpu][k]))

    def job_gbps(self, gpus: Iterable[int], bandwidths: LinkBandwidths) -> float:
        """GB/s a job's GPUs on this node (``gpus``) move off the node, per direction: the
        sum over the distinct rail NICs they use of that NIC's rate, where a NIC reached only
        without GPUDirect RDMA counts at most the PCIe bandwidth of its GPUs' paths (module
        docstring). 0 for no GPUs.

        Raises:
            NetworkError: a GPU index outside the node.
        """
        per_nic: dict[int, float] = {}
        for g in set(gpus):
            if not 0 <= g < self.gpus:
                raise NetworkError(f"GPU {g} is not on this node (0..{self.gpus - 1})")
            k = self.rails[g]
            per_nic[k] = max(per_nic.get(k, 0.0), self.reach_gbps(g, bandwidths))
        return sum(per_nic.values())

    def check(self, topology: Topology) -> None:
        """Raise :class:`NetworkError` when the paths do not describe ``topology``'s GPUs."""
        if self.gpus != topology.size:
            raise NetworkError(f"the network describes {self.gpus} GPUs; {topology.name} "
                               f"has {topology.size}")


# ------------------------------------------------------------------------------ layouts

def rail_per_gpu(gpus: int, gbps: float, level: PCIeLevel = PCIeLevel.PIX,
                 *, other: PCIeLevel = PCIeLevel.SYS, numa: Sequence[int] | None = None,
                 names: Sequence[str] | None = None) -> NodeNetwork:
    """One NIC per GPU on the GPU's own PCIe switch (DGX H100/B200-style rails): GPU ``g``
    reaches NIC ``g`` at ``level``; other NICs at ``NODE`` when on the same NUMA node (given
    ``numa``), else ``other``."""
    return rail_per_group(gpus, 1, gbps, level, other=other, numa=numa, names=names)


def rail_per_group(gpus: int, group: int, gbps: float, level: PCIeLevel = PCIeLevel.PIX,
                   *, nics_per_group: int = 1, other: PCIeLevel = PCIeLevel.SYS,
                   numa: Sequence[int] | None = None,
                   names: Sequence[str] | None = None) -> NodeNetwork:
    """``nics_per_group`` NICs per ``group`` consecutive GPUs sharing a PCIe switch (DGX-1:
    one NIC per GPU pair; DGX A100: two NICs per GPU pair): GPU ``g`` reaches the NICs of
    group ``g // group`` at ``level``, other NICs at ``NODE`` on the same NUMA node (given
    ``numa``, the NUMA node of each GPU) and at ``other`` elsewhere.

    Raises:
        NetworkError: ``group`` does not divide ``gpus``, or non-positive counts.
    """
    if group < 1 or nics_per_group < 1 or gpus < 1 or gpus % group:
        raise NetworkError(f"{gpus} GPUs cannot be split in groups of {group}")
    groups = gpus // group
    count = groups * nics_per_group
    nic_numa = [numa[(k // nics_per_group) * group] if numa else None for k in range(count)]
    nics = [NIC(names[k] if names else f"mlx5_{k}", gbps, numa_node=nic_numa[k])
            for k in range(count)]
    paths: list[list[PCIeLevel]] = []
    for g in range(gpus):
        row = []
        for k in range(count):
            if k // nics_per_group == g // group:
                row.append(level)
            elif numa is not None and numa[g] == nic_numa[k]:
                row.append(PCIeLevel.NODE)
            else:
                row.append(other)
        paths.append(row)
    return NodeNetwork.build(nics, paths)


def from_labels(labels: Mapping[str, str], topology: Topology) -> NodeNetwork | None:
    """A node's network from its labels when it publishes none: :data:`LABEL_NIC_COUNT` NICs
    of :data:`LABEL_NIC_GBITS` Gb/s, spread evenly over the GPUs in index order (GPU ``g`` on
    NIC ``g × count // gpus``) on the GPUs' PCIe switches (PIX). None when the labels are
    absent.

    Raises:
        NetworkError: a label is malformed, or more NICs than GPUs are not a whole multiple.
    """
    if LABEL_NIC_COUNT not in labels and LABEL_NIC_GBITS not in labels:
        return None
    try:
        count = int(labels.get(LABEL_NIC_COUNT, "1"))
        gbits = float(labels[LABEL_NIC_GBITS])
    except KeyError:
        raise NetworkError(f"label {LABEL_NIC_COUNT} needs {LABEL_NIC_GBITS} (Gb/s per "
                           "NIC)") from None
    except ValueError:
        raise NetworkError(f"labels {LABEL_NIC_COUNT}/{LABEL_NIC_GBITS} must be numbers") \
            from None
    if count < 1 or not (math.isfinite(gbits) and gbits > 0):
        raise NetworkError(f"{LABEL_NIC_COUNT} must be >= 1 and {LABEL_NIC_GBITS} > 0")
    n = topology.size
    nics = [NIC(f"nic{k}", gbits / BITS_PER_BYTE) for k in range(count)]
    if count >= n:
        owner = [min(k * n // count, n - 1) for k in range(count)]
        paths = [[PCIeLevel.PIX if owner[k] == g else PCIeLevel.SYS for k in range(count)]
                 for g in range(n)]
    else:
        paths = [[PCIeLevel.PIX if g * count // n == k else PCIeLevel.SYS
                  for k in range(count)] for g in range(n)]
    return NodeNetwork.build(nics, paths)


# ------------------------------------------------------------------------------ document

PCIeName = Literal["PIX", "PXB", "PHB", "NODE", "SYS"]


class NICDoc(BaseModel):
    """One NIC of the ``gputopo.io/network`` annotation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(min_length=1, max_length=64)]
    gbps: Annotated[float, Field(gt=0, description="line rate, GB/s per direction")]
    pciBusId: Annotated[str, Field(max_length=32)] = ""
    numaNode: int | None = None
    gpus: Annotated[list[PCIeName], Field(
        min_length=1, max_length=256,
        description="PCIe level from each GPU (index order) to this NIC")]


class NetworkDocument(BaseModel):
    """The ``gputopo.io/network`` node annotation (schema ``gputopo.io/v1``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schemaVersion: Literal["gputopo.io/v1"]
    nics: Annotated[list[NICDoc], Field(min_length=1, max_length=64)]


def dumps(network: NodeNetwork) -> str:
    """Compact annotation JSON of ``network`` (deterministic)."""
    doc = NetworkDocument(schemaVersion=SCHEMA_VERSION, nics=[
        NICDoc(name=nic.name, gbps=nic.gbps, pciBusId=nic.pci_bus_id, numaNode=nic.numa_node,
               gpus=[network.paths[g][k].name for g in range(network.gpus)])  # type: ignore[misc]
        for k, nic in enumerate(network.nics)])
    return doc.model_dump_json(exclude_none=True)


def loads(text: str | bytes) -> NodeNetwork:
    """Parse the annotation.

    Raises:
        NetworkError: not JSON, another schema version, a schema violation (the first named),
            or NICs that disagree on the GPU count.
    """
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise NetworkError("network annotation is not valid JSON") from None
    if not isinstance(raw, dict) or raw.get("schemaVersion") != SCHEMA_VERSION:
        version = raw.get("schemaVersion") if isinstance(raw, dict) else None
        raise NetworkError(f"unsupported network schemaVersion {version!r}; this gputopo "
                           f"reads {SCHEMA_VERSION}")
    try:
        doc = NetworkDocument.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise NetworkError(f"invalid network annotation at {where}: {first['msg']}") from None
    counts = {len(n.gpus) for n in doc.nics}
    if len(counts) != 1:
        raise NetworkError("the NICs of a network annotation list different GPU counts")
    gpus = counts.pop()
    nics = [NIC(n.name, n.gbps, n.pciBusId, n.numaNode) for n in doc.nics]
    paths = [[PCIeLevel[n.gpus[g]] for n in doc.nics] for g in range(gpus)]
    return NodeNetwork.build(nics, paths)
