"""Versioned JSON form of a node's topology: the ``gputopo.io/topology`` node annotation.

The device plugin writes it, the extender reads it. The schema is published as
``topology/schema/topology-v1.schema.json`` (regenerate with ``gputopo topology schema``);
a test fails when the published file and :class:`TopologyDocument` drift apart.

Version rule: ``schemaVersion`` is ``"gputopo.io/v1"``. A reader rejects any other version
with a clear error instead of guessing (a newer plugin on an older extender must not lead to
silent wrong placements).
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from topology.model import (
    GPU,
    LinkBandwidths,
    PCIeLevel,
    Topology,
    TopologyError,
    format_cpu_list,
    parse_cpu_list,
)
from topology.text import load_json

SCHEMA_VERSION: Literal["gputopo.io/v1"] = "gputopo.io/v1"
SUPPORTED_VERSIONS: tuple[str, ...] = (SCHEMA_VERSION,)

PCIeName = Literal["PIX", "PXB", "PHB", "NODE", "SYS"]


class GPUDoc(BaseModel):
    """One GPU in the annotation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: Annotated[int, Field(ge=0)]
    uuid: Annotated[str, Field(min_length=1, max_length=128)]
    pciBusId: Annotated[str, Field(max_length=32)] = ""
    name: Annotated[str, Field(max_length=128)] = ""
    memoryMiB: Annotated[int, Field(ge=0, description="total framebuffer memory, MiB")] = 0
    numaNode: int | None = None
    cpuAffinity: Annotated[str, Field(description="Linux cpulist, e.g. 0-19,40-59")] = ""

    @field_validator("cpuAffinity")
    @classmethod
    def _cpulist(cls, v: str) -> str:
        try:
            parse_cpu_list(v)
        except TopologyError as exc:
            raise ValueError(str(exc)) from None
        return v


class LinkDoc(BaseModel):
    """The link between GPUs ``a < b``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    a: Annotated[int, Field(ge=0)]
    b: Annotated[int, Field(ge=0)]
    nvlinks: Annotated[int, Field(ge=0, le=64)] = 0
    pcie: PCIeName


class BandwidthDoc(BaseModel):
    """Bandwidth table overrides, GB/s per direction."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nvlinkPerLinkGBps: dict[str, Annotated[float, Field(gt=0)]] | None = None
    pcieGBps: dict[PCIeName, Annotated[float, Field(gt=0)]] | None = None


class TopologyDocument(BaseModel):
    """The ``gputopo.io/topology`` annotation (schema version ``gputopo.io/v1``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schemaVersion: Literal["gputopo.io/v1"]
    name: Annotated[str, Field(max_length=253)] = ""
    nvlinkGeneration: Annotated[int, Field(ge=1, le=16)] = 2
    nvswitch: bool = False
    gpus: Annotated[list[GPUDoc], Field(min_length=1, max_length=256)]
    links: list[LinkDoc]
    bandwidths: BandwidthDoc | None = None


def to_document(topo: Topology) -> TopologyDocument:
    """The annotation document of ``topo`` (links listed once per pair, ``a < b``)."""
    n = topo.size
    links = [
        LinkDoc(a=i, b=j, nvlinks=topo.links[i][j].nvlinks, pcie=topo.links[i][j].pcie.name)  # type: ignore[arg-type]
        for i in range(n)
        for j in range(i + 1, n)
    ]
    bw = topo.bandwidths
    default = LinkBandwidths()
    bw_doc = None
    if bw != default:
        bw_doc = BandwidthDoc(
            nvlinkPerLinkGBps={str(k): v for k, v in bw.nvlink_gbps_per_link.items()},
            pcieGBps={k.name: v for k, v in bw.pcie_gbps.items()},  # type: ignore[misc]
        )
    return TopologyDocument(
        schemaVersion=SCHEMA_VERSION,
        name=topo.name,
        nvlinkGeneration=topo.nvlink_generation,
        nvswitch=topo.nvswitch,
        gpus=[
            GPUDoc(
                index=g.index,
                uuid=g.uuid,
                pciBusId=g.pci_bus_id,
                name=g.name,
                memoryMiB=g.memory_mib,
                numaNode=g.numa_node,
                cpuAffinity=format_cpu_list(g.cpu_affinity),
            )
            for g in topo.gpus
        ],
        links=links,
        bandwidths=bw_doc,
    )


def from_document(doc: TopologyDocument) -> Topology:
    """Build the model from a validated document.

    Raises:
        TopologyError: links name GPUs that do not exist, a pair is listed twice or missing.
    """
    n = len(doc.gpus)
    gpus = sorted(doc.gpus, key=lambda g: g.index)
    nvl: dict[tuple[int, int], int] = {}
    pcie: dict[tuple[int, int], PCIeLevel] = {}
    for lk in doc.links:
        if lk.a >= n or lk.b >= n or lk.a == lk.b:
            raise TopologyError(f"link {lk.a}-{lk.b} names a GPU outside 0..{n - 1}")
        key = (min(lk.a, lk.b), max(lk.a, lk.b))
        if key in pcie:
            raise TopologyError(f"link {key[0]}-{key[1]} is listed twice")
        nvl[key] = lk.nvlinks
        pcie[key] = PCIeLevel[lk.pcie]
    expected = n * (n - 1) // 2
    if len(pcie) != expected:
        raise TopologyError(f"{len(pcie)} links listed; {n} GPUs need all {expected} pairs")
    bandwidths = LinkBandwidths()
    if doc.bandwidths is not None:
        nv = dict(bandwidths.nvlink_gbps_per_link)
        pc = dict(bandwidths.pcie_gbps)
        try:
            for k, v in (doc.bandwidths.nvlinkPerLinkGBps or {}).items():
                nv[int(k)] = v
        except ValueError:
            raise TopologyError("nvlinkPerLinkGBps keys must be NVLink generations") from None
        for name, v in (doc.bandwidths.pcieGBps or {}).items():
            pc[PCIeLevel[name]] = v
        bandwidths = LinkBandwidths(nv, pc)
    return Topology.build(
        doc.name,
        [
            GPU(
                index=g.index,
                uuid=g.uuid,
                pci_bus_id=g.pciBusId,
                name=g.name,
                memory_mib=g.memoryMiB,
                numa_node=g.numaNode,
                cpu_affinity=parse_cpu_list(g.cpuAffinity),
            )
            for g in gpus
        ],
        nvl,
        pcie,
        nvlink_generation=doc.nvlinkGeneration,
        bandwidths=bandwidths,
        nvswitch=doc.nvswitch,
    )


def dumps(topo: Topology) -> str:
    """Compact annotation JSON of ``topo`` (deterministic: same topology, same bytes)."""
    return to_document(topo).model_dump_json(exclude_none=True)


def loads(text: str | bytes) -> Topology:
    """Parse annotation JSON into a :class:`Topology`.

    Raises:
        TopologyError: not JSON, an unsupported ``schemaVersion`` (the message names it and the
            supported ones), a schema violation (first problem named), or inconsistent links.
    """
    try:
        raw = load_json(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TopologyError(
            f"topology is not valid JSON: {exc.msg if hasattr(exc, 'msg') else exc}"
        ) from None
    if not isinstance(raw, dict):
        raise TopologyError("topology JSON must be an object")
    version = raw.get("schemaVersion")
    if version not in SUPPORTED_VERSIONS:
        raise TopologyError(
            f"unsupported topology schemaVersion {version!r}; this gputopo reads "
            f"{', '.join(SUPPORTED_VERSIONS)}"
        )
    try:
        doc = TopologyDocument.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise TopologyError(f"invalid topology at {where or '<root>'}: {first['msg']}") from None
    return from_document(doc)


def json_schema() -> dict[str, object]:
    """The published JSON Schema (draft 2020-12) of the annotation."""
    schema = TopologyDocument.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://gputopo.io/schemas/topology-v1.schema.json"
    return schema
