"""The cluster's topology hierarchy from node labels, and the bandwidth between nodes.

**Levels, as Kueue's** ``Topology`` (kueue.x-k8s.io, KEP-2724 "Topology Aware Scheduling"):
an ordered list of node labels from the widest domain to the node itself, e.g.
``topology.gputopo.io/block`` > ``topology.gputopo.io/rack`` > ``nvidia.com/gpu.clique`` >
``kubernetes.io/hostname``. A node's *path* is its label values from the top; a *domain* of
level *i* is a path prefix of length *i + 1*, so a rack is always inside its block (two racks
with the same label value in different blocks are different domains). A node without a
level's label forms a domain of its own at that level (a DGX without a clique label is its own
NVLink domain), where Kueue would leave the node out.

**Bandwidth between nodes** (what Kueue's levels do not say). Two nodes whose deepest common
domain is at level *i* exchange data

* over the NICs at :attr:`Level.share` of the NICs' rate (1 = non-blocking under that level's
  switches — a rack's leaf; less where the switches above are oversubscribed), or
* over NVLink when the level is an NVLink domain (:attr:`Level.nvlink`: GB200 NVL72 trays of one
  ``nvidia.com/gpu.clique``), at the GPUs' own NVLink rate, no NIC involved;

and nodes with no common domain at :attr:`Hierarchy.across_share`. The defaults (:data:`DEFAULT`)
are ours: a rack is non-blocking (one leaf, rail-aligned), a block's spine 2:1 oversubscribed
(0.5), and the layer above blocks 4:1 (0.25). Large training fabrics are built this way —
non-blocking inside a zone, deliberately oversubscribed between zones, with a topology-aware
job scheduler keeping traffic inside (Gangidi et al., "RDMA over Ethernet for Distributed AI
Training at Meta Scale", SIGCOMM 2024) — but the ratios are a configuration
(:class:`HierarchySpec`), not measurements.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from topology.contract import LABEL_BLOCK as LABEL_BLOCK  # noqa: PLC0414 - re-exported
from topology.contract import LABEL_CLIQUE as LABEL_CLIQUE  # noqa: PLC0414
from topology.contract import LABEL_HOSTNAME
from topology.contract import LABEL_RACK as LABEL_RACK  # noqa: PLC0414
from topology.model import TopologyError

HOSTNAME = LABEL_HOSTNAME


class HierarchyError(TopologyError):
    """A hierarchy specification is malformed (``str(exc)`` names the field)."""


def _refusal(exc: ValidationError) -> HierarchyError:
    """The first problem of a hierarchy that does not validate, in one line naming its field
    (``hierarchy levels.1.share: …``; a problem of the whole: ``hierarchy: …``)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return HierarchyError(f"hierarchy {where}: {first['msg']}" if where else
                          f"hierarchy: {first['msg']}")


@dataclass(frozen=True)
class Level:
    """One level of the hierarchy.

    Attributes:
        label: the node label whose value names the node's domain at this level.
        share: share of the NICs' rate (0-1] two nodes keep when this level is their deepest
            common domain.
        nvlink: nodes of one domain of this level share an NVLink fabric (their GPUs talk over
            NVLink, not NICs).
    """

    label: str
    share: float = 1.0
    nvlink: bool = False


class LevelSpec(BaseModel):
    """One level of :class:`HierarchySpec`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: Annotated[str, Field(min_length=1, max_length=317)]
    share: Annotated[float, Field(gt=0, le=1)] = 1.0
    nvlink: bool = False


class HierarchySpec(BaseModel):
    """The hierarchy as configured (YAML/JSON): levels from the widest to the node.

    ``levels`` lists the labels above the node, widest first; ``kubernetes.io/hostname`` is
    appended when missing. ``acrossShare`` applies to nodes with no common domain at all.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    levels: Annotated[list[LevelSpec], Field(max_length=16)]
    acrossShare: Annotated[float, Field(gt=0, le=1)] = 0.25

    @model_validator(mode="after")
    def _distinct(self) -> HierarchySpec:
        labels = [lv.label for lv in self.levels]
        if len(set(labels)) != len(labels):
            raise ValueError("a label appears twice in the levels")
        if HOSTNAME in labels[:-1]:
            raise ValueError(f"{HOSTNAME} can only be the last level")
        return self


@dataclass(frozen=True)
class Hierarchy:
    """The levels, widest first; the last is always the node (:data:`HOSTNAME`).

    Build with :meth:`build` or :meth:`from_spec`.
    """

    levels: tuple[Level, ...]
    across_share: float = 0.25

    @classmethod
    def build(cls, levels: Sequence[Level], across_share: float = 0.25) -> Hierarchy:
        """Validate and append the node level.

        Raises:
            HierarchyError: a repeated label, the node label not last, a share outside (0, 1].
        """
        try:
            spec = HierarchySpec(levels=[LevelSpec(label=lv.label, share=lv.share,
                                                   nvlink=lv.nvlink) for lv in levels],
                                 acrossShare=across_share)
        except ValidationError as exc:
            raise _refusal(exc) from None
        return cls.from_spec(spec)

    @classmethod
    def from_spec(cls, spec: HierarchySpec) -> Hierarchy:
        """The hierarchy of a validated spec."""
        levels = [Level(lv.label, lv.share, lv.nvlink) for lv in spec.levels]
        if not levels or levels[-1].label != HOSTNAME:
            levels.append(Level(HOSTNAME))
        return cls(tuple(levels), spec.acrossShare)

    @classmethod
    def parse(cls, doc: Mapping[str, object]) -> Hierarchy:
        """From a mapping (a YAML/JSON document).

        Raises:
            HierarchyError: the document does not match :class:`HierarchySpec`.
        """
        try:
            return cls.from_spec(HierarchySpec.model_validate(doc))
        except ValidationError as exc:
            raise _refusal(exc) from None

    @property
    def labels(self) -> tuple[str, ...]:
        """The level labels, widest first."""
        return tuple(lv.label for lv in self.levels)

    @property
    def node_level(self) -> int:
        """Index of the node level (the last)."""
        return len(self.levels) - 1

    def index(self, label: str) -> int:
        """Index of the level named ``label``.

        Raises:
            HierarchyError: no such level (the message lists them).
        """
        try:
            return self.labels.index(label)
        except ValueError:
            raise HierarchyError(f"no topology level {label!r}; levels: "
                                 f"{', '.join(self.labels)}") from None

    def path(self, name: str, labels: Mapping[str, str]) -> tuple[str, ...]:
        """The node's path: its value of every level's label, widest first (the node level is
        its name). A missing label gives a value of the node's own (``~<name>``): a domain
        holding only this node at that level and below."""
        out = []
        for lv in self.levels[:-1]:
            value = labels.get(lv.label)
            out.append(str(value) if value else f"~{name}")
        out.append(name)
        return tuple(out)

    def common_level(self, paths: Iterable[Sequence[str]]) -> int:
        """The deepest level whose domain holds every path; -1 when they share none (and the
        node level for a single path)."""
        items = list(paths)
        if not items:
            raise HierarchyError("no nodes")
        depth = len(self.levels)
        first = items[0]
        common = depth
        for p in items[1:]:
            i = 0
            while i < common and p[i] == first[i]:
                i += 1
            common = i
        return common - 1

    def share(self, level: int) -> float:
        """NIC share of nodes whose deepest common domain is at ``level`` (-1: none)."""
        if level < 0:
            return self.across_share
        return self.levels[level].share

    def nvlink_between(self, level: int) -> bool:
        """Nodes whose deepest common domain is at ``level`` share an NVLink fabric: that level
        or a wider one is an NVLink domain."""
        return level >= 0 and any(lv.nvlink for lv in self.levels[: level + 1])


#: gputopo's default levels (module docstring).
DEFAULT = Hierarchy.build([
    Level(LABEL_BLOCK, 0.5), Level(LABEL_RACK, 1.0), Level(LABEL_CLIQUE, 1.0, nvlink=True),
], across_share=0.25)


@dataclass(frozen=True)
class NodeLink:
    """What one node contributes to a job spanning several nodes.

    Attributes:
        path: the node's hierarchy path (:meth:`Hierarchy.path`).
        nic_gbps: GB/s the job's GPUs on it move through its NICs
            (:meth:`topology.network.NodeNetwork.job_gbps`).
        nvlink_gbps: GB/s the job's GPUs on it move over an NVLink fabric spanning nodes (the
            sum of those GPUs' NVLink bandwidth into the fabric; 0 without one).
    """

    path: tuple[str, ...]
    nic_gbps: float
    nvlink_gbps: float = 0.0


@dataclass(frozen=True)
class InterNode:
    """The predicted inter-node bandwidth of a job (:func:`inter_node`).

    Attributes:
        gbps: GB/s of the job's slowest node-to-node stage (``inf`` on one node).
        level: deepest common level of its nodes (the node level on one node, -1 for none).
        over: ``"nvlink"``, ``"nic"`` or ``"none"`` (one node).
    """

    gbps: float
    level: int
    over: str


def inter_node(hierarchy: Hierarchy, nodes: Sequence[NodeLink]) -> InterNode:
    """A ring over a job's nodes moves data off each node through what joins them: over NVLink
    when their deepest common domain is an NVLink domain, else through the NICs at the level's
    share. The ring runs at its slowest node's stage: ``min`` over the nodes.

    Raises:
        HierarchyError: no nodes.
    """
    level = hierarchy.common_level(n.path for n in nodes)
    if len(nodes) == 1 or level == hierarchy.node_level:
        return InterNode(math.inf, hierarchy.node_level, "none")
    if hierarchy.nvlink_between(level) and all(n.nvlink_gbps > 0 for n in nodes):
        return InterNode(min(n.nvlink_gbps for n in nodes), level, "nvlink")
    share = hierarchy.share(level)
    return InterNode(min(n.nic_gbps for n in nodes) * share, level, "nic")


@dataclass(frozen=True)
class Domain:
    """A domain: its level and its path prefix (``path[: level + 1]`` of its nodes)."""

    level: int
    path: tuple[str, ...]

    def holds(self, node_path: Sequence[str]) -> bool:
        """``node_path`` is inside this domain."""
        return tuple(node_path[: self.level + 1]) == self.path

    def describe(self, hierarchy: Hierarchy) -> str:
        """``topology.gputopo.io/rack=r1`` (the domain's own label and value)."""
        return f"{hierarchy.levels[self.level].label}={self.path[-1]}"


@dataclass
class DomainTree:
    """Domains of a set of nodes, per level (built by :func:`domains`)."""

    hierarchy: Hierarchy
    by_level: list[dict[tuple[str, ...], list[int]]] = field(default_factory=list)

    def members(self, domain: Domain) -> list[int]:
        """Indices of the nodes inside ``domain`` (input order)."""
        return self.by_level[domain.level].get(domain.path, [])

    def at(self, level: int) -> list[Domain]:
        """The domains of ``level``, in path order."""
        return [Domain(level, p) for p in sorted(self.by_level[level])]


def domains(hierarchy: Hierarchy, paths: Sequence[Sequence[str]]) -> DomainTree:
    """Group node indices by domain at every level."""
    tree = DomainTree(hierarchy, [{} for _ in hierarchy.levels])
    for i, p in enumerate(paths):
        for level in range(len(hierarchy.levels)):
            tree.by_level[level].setdefault(tuple(p[: level + 1]), []).append(i)
    return tree
