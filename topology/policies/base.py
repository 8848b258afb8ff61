"""Shared values of every placement policy: the request, the node's free state, the decision.

A policy is a pure function ``(Topology, NodeState, Request) -> Decision`` that raises
:class:`NoFit` (with a human-readable reason) when the node cannot host the request. No I/O,
no clocks, no randomness: equal inputs give equal decisions, in the extender, the CLI and the
simulator alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from topology.model import Topology, format_cpu_list
from topology.patterns import Pattern
from topology.policies.memo import Memo

#: One GPU's compute in vGPU-core units (percent of a GPU).
FULL_CORE = 100

#: Most GPUs one request may name: the largest node the topology schema describes. A larger
#: count is rejected up front, before anything sized by it (a pattern graph) is built.
MAX_GPUS_PER_REQUEST = 256


class NoFit(Exception):
    """The node cannot host the request; ``str(exc)`` says why (one line)."""


class RequestError(ValueError):
    """The request itself is invalid (bad pattern, fraction out of range, …)."""


@dataclass(frozen=True)
class GPUUsage:
    """What is already taken of one GPU.

    Attributes:
        core_percent: vGPU-core in use, percent of the GPU (0–100); 100 = held whole.
        memory_mib: GPU memory in use, MiB.
    """

    core_percent: int = 0
    memory_mib: int = 0

    @property
    def idle(self) -> bool:
        """Nothing of the GPU is in use."""
        return self.core_percent == 0 and self.memory_mib == 0


@dataclass(frozen=True)
class NodeState:
    """The used part of a node's GPUs; GPUs not listed are idle.

    Attributes:
        usage: GPU index → :class:`GPUUsage`.
        unhealthy: indices of GPUs that must not be handed out.
    """

    usage: Mapping[int, GPUUsage] = field(default_factory=dict)
    unhealthy: frozenset[int] = frozenset()
    #: (free_gpus(), mask()) per GPU count (a state is immutable; filter asks thousands of
    #: times)
    _free: dict[int, tuple[tuple[int, ...], int]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @classmethod
    def whole(cls, busy: Iterable[int]) -> NodeState:
        """A state where the GPUs ``busy`` are held whole."""
        return cls({i: GPUUsage(FULL_CORE, 0) for i in busy})

    def used(self, index: int) -> GPUUsage:
        """Usage of GPU ``index`` (idle if not listed)."""
        return self.usage.get(index, GPUUsage())

    def _free_and_mask(self, n: int) -> tuple[tuple[int, ...], int]:
        hit = self._free.get(n)
        if hit is None:
            taken = set(self.unhealthy)
            taken.update(i for i, u in self.usage.items() if not u.idle)
            free = tuple(i for i in range(n) if i not in taken)
            hit = self._free.setdefault(n, (free, sum(1 << i for i in free)))
        return hit

    def free_gpus(self, topology: Topology) -> tuple[int, ...]:
        """Indices of healthy GPUs with nothing in use, ascending (computed once per GPU
        count)."""
        return self._free_and_mask(topology.size)[0]

    def mask(self, topology: Topology) -> int:
        """Bit mask of :meth:`free_gpus` (bit i set = GPU i free)."""
        return self._free_and_mask(topology.size)[1]

    def key(self) -> tuple[tuple[int, int, int], ...]:
        """A hashable, canonical form (for caches)."""
        return tuple(
            sorted((i, u.core_percent, u.memory_mib) for i, u in self.usage.items() if not u.idle)
        ) + tuple((-1 - i, 0, 0) for i in sorted(self.unhealthy))

    def with_allocation(self, decision: Decision) -> NodeState:
        """The state after ``decision`` is allocated (whole GPUs or one GPU's share)."""
        usage = dict(self.usage)
        if decision.fractional:
            add_grant(usage, decision.gpus[:1], fractional=True,
                      core_percent=decision.core_percent, memory_mib=decision.memory_mib)
        else:
            add_grant(usage, decision.gpus, fractional=False)
        return replace(self, usage=usage)


def add_grant(
    usage: dict[int, GPUUsage], gpus: Iterable[int], *, fractional: bool,
    core_percent: int = 0, memory_mib: int = 0,
) -> None:
    """Add what one pod holds on a node to a usage map, in place — the one rule for how
    holdings add up on a GPU (decisions, the extender's allocation book, assignments read back
    from annotations all use it).

    Args:
        usage: GPU index → :class:`GPUUsage`, changed in place.
        gpus: the GPUs held (one for a share).
        fractional: a share of the GPU (Gaia §III: vGPU-core percent and memory MiB add up)
            rather than whole GPUs (taken entirely: core :data:`FULL_CORE`, memory as recorded).
        core_percent: the share's vGPU-core, percent of the GPU.
        memory_mib: the share's GPU memory, MiB.
    """
    for g in gpus:
        u = usage.get(g, GPUUsage())
        if fractional:
            usage[g] = GPUUsage(u.core_percent + core_percent, u.memory_mib + memory_mib)
        else:
            usage[g] = GPUUsage(FULL_CORE, u.memory_mib)


@dataclass(frozen=True)
class Request:
    """What a pod asks for.

    Whole-GPU requests set ``count >= 1``; fractional requests set ``count == 0`` and a
    ``core_percent`` in 1–99 and/or ``memory_mib`` (Gaia's m < 1; vGPU core/memory).

    Attributes:
        count: whole GPUs (``nvidia.com/gpu``).
        core_percent: percent of one GPU's compute for a fractional request.
        memory_mib: GPU memory for a fractional request, MiB (0 = any).
        pattern: the job's communication pattern graph (MAPA §3.1); default all-to-all.
        bandwidth_sensitive: MAPA's bwSensitive annotation; None = the default (true for
            multi-GPU requests).
        min_utility: the job's minimum acceptable placement utility in [0, 1] (Amaral et al.
            SC'17, Algorithm 1; pod annotation ``gputopo.io/min-utility``). Only
            ``topo-aware-p`` reads it: it rejects a node while the best utility there is
            below this value. None = the policy's default.
        profile: the job's performance profile name, e.g. ``alexnet/tiny`` (network and
            batch class; Amaral §4.2), used to estimate interference. None = a default
            profile derived from ``bandwidth_sensitive``. Policies that model no
            interference ignore it.
    """

    count: int = 1
    core_percent: int = 0
    memory_mib: int = 0
    pattern: Pattern | None = None
    bandwidth_sensitive: bool | None = None
    min_utility: float | None = None
    profile: str | None = None

    def __post_init__(self) -> None:
        if self.count < 0:
            raise RequestError("GPU count must not be negative")
        if self.count > MAX_GPUS_PER_REQUEST:
            raise RequestError(
                f"the pod asks for {self.count} GPUs; no node has more than "
                f"{MAX_GPUS_PER_REQUEST}"
            )
        if self.count == 0:
            if not (0 <= self.core_percent <= FULL_CORE) or self.memory_mib < 0:
                raise RequestError("fractional request needs 0-100 vGPU-core and memory >= 0")
            if self.core_percent == 0 and self.memory_mib == 0:
                raise RequestError("request asks for no GPU at all")
        if self.min_utility is not None and not 0.0 <= self.min_utility <= 1.0:
            raise RequestError(f"minimum utility must be in [0, 1], got {self.min_utility}")
        if self.profile is not None and not self.profile.strip():
            raise RequestError("empty job profile name")
        if self.pattern is not None and self.count > 0 and self.pattern.size != self.count:
            raise RequestError(
                f"pattern {self.pattern.name!r} has {self.pattern.size} GPUs but the request "
                f"asks for {self.count}"
            )

    @classmethod
    def fraction(cls, gpus: float, memory_mib: int = 0) -> Request:
        """A request for ``gpus`` (0 < gpus < 1) of one GPU, e.g. 0.3 → 30 % vGPU-core.

        Raises:
            RequestError: ``gpus`` is not in (0, 1).
        """
        if not 0 < gpus < 1:
            raise RequestError(f"a fraction of a GPU must be in (0, 1), got {gpus}")
        return cls(count=0, core_percent=max(1, round(gpus * FULL_CORE)), memory_mib=memory_mib)

    @property
    def fractional(self) -> bool:
        """True for a share of one GPU."""
        return self.count == 0

    @property
    def sensitive(self) -> bool:
        """Effective bandwidth sensitivity: the annotation, else true for multi-GPU."""
        if self.bandwidth_sensitive is not None:
            return self.bandwidth_sensitive
        return self.count > 1

    def effective_pattern(self) -> Pattern:
        """The pattern graph (all-to-all of ``count`` GPUs when none was given)."""
        from topology.patterns import all_to_all

        if self.pattern is not None:
            return self.pattern
        return all_to_all(max(self.count, 1))

    def key(self) -> tuple[object, ...]:
        """Hashable canonical form (for caches)."""
        p = self.pattern.key() if self.pattern is not None else ("all-to-all",)
        return (
            self.count, self.core_percent, self.memory_mib, p, self.sensitive,
            self.min_utility, self.profile,
        )  # fmt: skip


@dataclass(frozen=True)
class Candidate:
    """A scored GPU set (the runner-up of a decision, or any alternative)."""

    gpus: tuple[int, ...]
    aggregated_bandwidth_gbps: float
    effective_bandwidth_gbps: float
    preserved_bandwidth_gbps: float


@dataclass(frozen=True)
class Decision:
    """A placement and its explanation.

    Attributes:
        policy: name of the policy that decided.
        gpus: chosen GPU indices, ascending.
        uuids: their UUIDs, same order.
        mapping: pattern vertex → GPU (vertex ``i`` of the pattern runs on ``mapping[i]``).
        fractional: a share of one GPU (``gpus`` has one element).
        core_percent: for fractional decisions, the vGPU-core granted (percent).
        memory_mib: for fractional decisions, the GPU memory granted (MiB).
        aggregated_bandwidth_gbps: sum of link bandwidths over every pair of ``gpus``, GB/s.
        pattern_bandwidth_gbps: MAPA AggBW (Eq. 1) over the pattern's edges only, GB/s.
        effective_bandwidth_gbps: predicted EffBW by ``bandwidth_model``, GB/s.
        bandwidth_model: ``"mapa-eq2"`` or ``"gputopo-v1"`` (see topology.policies.bandwidth).
        preserved_bandwidth_gbps: MAPA PreservedBW (Eq. 3) of the free GPUs left, GB/s.
        access_cost: Gaia access cost of the set (sum over pairs of the PCIe level cost).
        cpu_affinity: cpulist of the chosen GPUs' NUMA-local CPUs (Gaia §III-A).
        numa_nodes: NUMA nodes of the chosen GPUs.
        runner_up: the best alternative with a different GPU set, if any.
        reason: one line on why this set won.
    """

    policy: str
    gpus: tuple[int, ...]
    uuids: tuple[str, ...]
    mapping: tuple[int, ...]
    aggregated_bandwidth_gbps: float
    pattern_bandwidth_gbps: float
    effective_bandwidth_gbps: float
    bandwidth_model: str
    preserved_bandwidth_gbps: float
    access_cost: float
    cpu_affinity: str
    numa_nodes: tuple[int, ...]
    fractional: bool = False
    core_percent: int = 0
    memory_mib: int = 0
    runner_up: Candidate | None = None
    reason: str = ""

    def to_json(self) -> dict[str, object]:
        """The CLI / API JSON form (snake_case keys; bandwidths rounded to 0.1 GB/s)."""
        out: dict[str, object] = {
            "policy": self.policy,
            "gpus": list(self.gpus),
            "uuids": list(self.uuids),
            "mapping": list(self.mapping),
            "aggregated_bandwidth_gbps": round(self.aggregated_bandwidth_gbps, 1),
            "pattern_bandwidth_gbps": round(self.pattern_bandwidth_gbps, 1),
            "effective_bandwidth_gbps": round(self.effective_bandwidth_gbps, 1),
            "bandwidth_model": self.bandwidth_model,
            "preserved_bandwidth_gbps": round(self.preserved_bandwidth_gbps, 1),
            "access_cost": self.access_cost,
            "cpu_affinity": self.cpu_affinity,
            "numa_nodes": list(self.numa_nodes),
            "fractional": self.fractional,
            "reason": self.reason,
        }
        if self.fractional:
            out["core_percent"] = self.core_percent
            out["memory_mib"] = self.memory_mib
        if self.runner_up is not None:
            r = self.runner_up
            out["runner_up"] = {
                "gpus": list(r.gpus),
                "aggregated_bandwidth_gbps": round(r.aggregated_bandwidth_gbps, 1),
                "effective_bandwidth_gbps": round(r.effective_bandwidth_gbps, 1),
                "preserved_bandwidth_gbps": round(r.preserved_bandwidth_gbps, 1),
            }
        else:
            out["runner_up"] = None
        return out


class Policy(Protocol):
    """A placement policy: pure ``(topology, state, request, memo) -> Decision``.

    ``memo`` (:class:`~topology.policies.memo.Memo`) is what the policy may remember per
    topology class (MAPA's subset tables); the runner owns it. A policy that remembers
    nothing ignores it.

    Raises:
        NoFit: the node cannot host the request (message = the reason).
        RequestError: the request is invalid for this topology.
    """

    def __call__(
        self, topology: Topology, state: NodeState, request: Request, memo: Memo, /
    ) -> Decision: ...


PolicyFn = Callable[[Topology, NodeState, Request, Memo], Decision]


def cpu_and_numa(topology: Topology, gpus: Iterable[int]) -> tuple[str, tuple[int, ...]]:
    """CPU list string and NUMA nodes near ``gpus`` (Gaia §III-A)."""
    gl = list(gpus)
    return format_cpu_list(topology.cpu_affinity(gl)), topology.numa_nodes(gl)
