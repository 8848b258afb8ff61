"""Shared values of every placement policy: the request, the node's free state, the decision.

A policy is a pure function ``(Topology, NodeState, Request) -> Decision`` that raises
:class:`NoFit` (with a human-readable reason) when the node cannot host the request. No I/O,
no clocks, no randomness: equal inputs give equal decisions, in the extender, the CLI and the
simulator alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol

from topology.colocation.model import (
    DEFAULT_MODEL,
    DEFAULT_SLOTS,
    DEFAULT_THRESHOLD,
    ColocationModel,
)
from topology.colocation.profile import JobProfile
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


class Postponed(NoFit):
    """The node could host the request, but the policy holds the job back for a better GPU
    set (``Request.wait_for_better``: the default policy's bounded postponement, Amaral et al.
    SC'17 Algorithm 1; :func:`topology.policies.robust.postpone_reason`). ``str(exc)`` starts
    with ``"postponed: "``. Callers that bound the wait start its clock at the first one."""


class RequestError(ValueError):
    """The request itself is invalid (bad pattern, fraction out of range, …)."""


@dataclass(frozen=True)
class Resident:
    """One co-located job on a shared GPU (Tabrizian: a member of the set S of Eq. 4.1).

    Attributes:
        name: the job's name (pod ``namespace/name``, simulator job id), unique on the GPU.
        profile: its solo profile (t_j, C, M, memory).
        memory_mib: GPU memory reserved for it, MiB.
    """

    name: str
    profile: JobProfile
    memory_mib: int

    def key(self) -> tuple[object, ...]:
        """Hashable form for cache keys."""
        return (self.name, self.profile.key, self.profile.identity(), self.memory_mib)


@dataclass(frozen=True)
class GPUUsage:
    """What is already taken of one GPU.

    A GPU is in at most one mode: idle, held whole (``core_percent == 100`` from
    ``nvidia.com/gpu``), split into vGPU shares (``core_percent``/``memory_mib``), or shared by
    co-located jobs (``residents``, each holding one ``gputopo.io/gpu-shared`` slot).

    Attributes:
        core_percent: vGPU-core in use, percent of the GPU (0–100); 100 = held whole.
        memory_mib: GPU memory in use by whole/vGPU holders, MiB.
        residents: co-located jobs sharing the GPU, in arrival order.
    """

    core_percent: int = 0
    memory_mib: int = 0
    residents: tuple[Resident, ...] = ()

    @property
    def idle(self) -> bool:
        """Nothing of the GPU is in use."""
        return self.core_percent == 0 and self.memory_mib == 0 and not self.residents

    @property
    def shared(self) -> bool:
        """The GPU carries co-located jobs."""
        return bool(self.residents)

    @property
    def resident_memory_mib(self) -> int:
        """GPU memory reserved by the residents, MiB."""
        return sum(r.memory_mib for r in self.residents)

    @property
    def memory_used_mib(self) -> int:
        """All GPU memory in use, MiB."""
        return self.memory_mib + self.resident_memory_mib


@dataclass(frozen=True)
class NodeState:
    """The used part of a node's GPUs; GPUs not listed are idle.

    Attributes:
        usage: GPU index → :class:`GPUUsage`.
        unhealthy: indices of GPUs that must not be handed out.
        slots_per_gpu: co-location slots of each GPU (``gputopo.io/gpu-shared`` devices the
            node's device plugin advertises per GPU; default 3, Tabrizian's largest set).
    """

    usage: Mapping[int, GPUUsage] = field(default_factory=dict)
    unhealthy: frozenset[int] = frozenset()
    slots_per_gpu: int = DEFAULT_SLOTS
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

    def key(self) -> tuple[tuple[Any, ...], ...]:
        """A hashable, canonical form (for caches): ``(index, core %, MiB)`` per GPU in use,
        then, when GPUs are shared or slots differ from the default, ``("slots", n)`` and
        ``("shared", index, …, resident keys)`` entries."""
        out: tuple[tuple[Any, ...], ...] = tuple(
            sorted((i, u.core_percent, u.memory_mib) for i, u in self.usage.items()
                   if not u.idle and not u.residents)
        ) + tuple((-1 - i, 0, 0) for i in sorted(self.unhealthy))
        shared = tuple(
            ("shared", i, u.core_percent, u.memory_mib, tuple(r.key() for r in u.residents))
            for i, u in sorted(self.usage.items()) if u.residents
        )
        if shared or self.slots_per_gpu != DEFAULT_SLOTS:
            out += (("slots", self.slots_per_gpu),) + shared
        return out

    def residents(self, index: int) -> tuple[Resident, ...]:
        """The co-located jobs on GPU ``index`` (empty when it is not shared)."""
        return self.used(index).residents

    def with_allocation(self, decision: Decision) -> NodeState:
        """The state after ``decision`` is allocated (whole GPUs, one GPU's share, or one
        co-location slot).

        Raises:
            ValueError: the decision does not fit this state (a whole GPU that is not idle, a
                slot on a GPU held whole or split into vGPU shares, more residents than
                slots): a policy bug, never silently absorbed.
        """
        usage = dict(self.usage)
        if decision.colocation is not None:
            info = decision.colocation
            add_resident(usage, decision.gpus[0], Resident(info.job, info.profile,
                                                           info.memory_mib),
                         slots=self.slots_per_gpu)
        else:
            for g in decision.gpus:
                if usage.get(g, GPUUsage()).residents:
                    raise ValueError(f"GPU {g} is shared by co-located jobs; "
                                     + ("no vGPU share fits" if decision.fractional
                                        else "it is not free"))
            if decision.fractional:
                add_grant(usage, decision.gpus[:1], fractional=True,
                          core_percent=decision.core_percent, memory_mib=decision.memory_mib)
            else:
                add_grant(usage, decision.gpus, fractional=False)
        return replace(self, usage=usage)

    def without_resident(self, index: int, name: str) -> NodeState:
        """The state after co-located job ``name`` left GPU ``index`` (a no-op if absent)."""
        u = self.used(index)
        kept = tuple(r for r in u.residents if r.name != name)
        if len(kept) == len(u.residents):
            return self
        usage = dict(self.usage)
        if kept or u.core_percent or u.memory_mib:
            usage[index] = replace(u, residents=kept)
        else:
            usage.pop(index, None)
        return replace(self, usage=usage)


@dataclass(frozen=True)
class SharedRequest:
    """A request for one co-location slot on one GPU (``gputopo.io/gpu-shared: 1``).

    Attributes:
        profile: the job's solo profile (Tabrizian §4.2; :mod:`topology.colocation.sources`).
        memory_mib: GPU memory to reserve, MiB (``gputopo.io/vgpu-memory``, else the
            profile's); MPS caps the client to it.
        name: the job's name, recorded as the GPU's resident (``namespace/pod``).
        threshold: ΣC threshold, Eq. 4.3 units (Tabrizian §4.2.4; default 4·10⁷).
        model: the slow-down predictor's constants (:mod:`topology.colocation.model`).
    """

    profile: JobProfile
    memory_mib: int = 0
    name: str = ""
    threshold: float = DEFAULT_THRESHOLD
    model: ColocationModel = DEFAULT_MODEL

    def __post_init__(self) -> None:
        if self.memory_mib < 0:
            raise RequestError("a shared request's GPU memory must be >= 0 MiB")
        if not self.threshold > 0:
            raise RequestError("the co-location threshold (sum of C) must be > 0")

    def key(self) -> tuple[object, ...]:
        """Hashable form for cache keys."""
        return (self.profile.key, self.profile.identity(), self.memory_mib, self.name,
                self.threshold, self.model)


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


def add_resident(usage: dict[int, GPUUsage], gpu: int, resident: Resident, *,
                 slots: int | None) -> None:
    """Add one co-located job to a usage map, in place — the one rule for how co-location
    slots add up on a GPU (decisions, the extender's allocation book, assignments read back
    from annotations).

    Args:
        usage: GPU index → :class:`GPUUsage`, changed in place.
        gpu: the GPU.
        resident: the job.
        slots: refuse a job beyond this many on the GPU; None records what was found (a
            state rebuilt from the API may show more than the node advertises today).

    Raises:
        ValueError: with ``slots``: the GPU is held whole or split into vGPU shares (one
            mode per GPU), all slots are taken, or a job of that name already shares it.
    """
    u = usage.get(gpu, GPUUsage())
    if slots is None:
        usage[gpu] = replace(u, residents=u.residents + (resident,))
        return
    if u.core_percent or u.memory_mib:
        raise ValueError(f"GPU {gpu} is held whole or split into vGPU shares; it cannot take "
                         "a co-location slot")
    if len(u.residents) >= slots:
        raise ValueError(f"GPU {gpu} has no free co-location slot")
    if resident.name and any(r.name == resident.name for r in u.residents):
        raise ValueError(f"job {resident.name} already shares GPU {gpu}")
    usage[gpu] = replace(u, residents=u.residents + (resident,))


@dataclass(frozen=True)
class Upcoming:
    """A job waiting behind the one being placed (a pending GPU pod the extender watches, a
    queued job of the simulator): what the lookahead of the default policy weighs.

    Attributes:
        count: whole GPUs it asks for (>= 1).
        pattern: its communication pattern graph (None = all-to-all of ``count``).
        sensitive: ``gputopo.io/bandwidth-sensitive`` (the default: true for several GPUs).
    """

    count: int
    pattern: Pattern | None = None
    sensitive: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_GPUS_PER_REQUEST:
            raise RequestError(f"an upcoming job asks for {self.count} GPUs; it must ask for "
                               f"1-{MAX_GPUS_PER_REQUEST}")
        if self.pattern is not None and self.pattern.size != self.count:
            raise RequestError(f"an upcoming job's pattern has {self.pattern.size} GPUs but "
                               f"it asks for {self.count}")

    def effective_pattern(self) -> Pattern:
        """The pattern graph (all-to-all of ``count`` GPUs when none was given)."""
        from topology.patterns import all_to_all

        return self.pattern if self.pattern is not None else all_to_all(self.count)

    @property
    def measured(self) -> bool:
        """Several GPUs and bandwidth sensitive: a job whose EffBW the lookahead prices."""
        return self.sensitive and self.count > 1

    def key(self) -> tuple[object, ...]:
        """Hashable canonical form (for caches; computed once: the lookahead asks it for every
        waiting job on every filter and prioritize)."""
        key: tuple[object, ...] | None = self.__dict__.get("_key")
        if key is None:
            key = (self.count, self.effective_pattern().key(), self.sensitive)
            object.__setattr__(self, "_key", key)
        return key


#: Most upcoming jobs a request may carry (the lookahead is linear in them).
MAX_UPCOMING = 8


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
        shared: for a co-location slot (``gputopo.io/gpu-shared``), the job's profile and
            settings; then ``count`` is 1 and only co-location policies place it.
        upcoming: the whole-GPU jobs waiting behind this one that could land on the same
            node, in the order they will be placed (at most :data:`MAX_UPCOMING`): data for
            the default policy's lookahead (:mod:`topology.policies.robust`), which the
            caller (the extender's pending-pod view, the simulator's queue) fills in; other
            policies ignore it.
        wait_for_better: the job may be postponed for a better set (the default policy's
            bounded postponement, :func:`topology.policies.default.postpone_below`): set only
            by a caller that retries the job and bounds its wait — the extender for a pod it
            has seen pending for less than ``postpone_max_s``, the simulator likewise. False
            (a one-shot decision: the CLI, the per-decision benchmarks) never postpones.
    """

    count: int = 1
    core_percent: int = 0
    memory_mib: int = 0
    pattern: Pattern | None = None
    bandwidth_sensitive: bool | None = None
    min_utility: float | None = None
    profile: str | None = None
    shared: SharedRequest | None = None
    upcoming: tuple[Upcoming, ...] = ()
    wait_for_better: bool = False

    def __post_init__(self) -> None:
        if len(self.upcoming) > MAX_UPCOMING:
            raise RequestError(f"{len(self.upcoming)} upcoming jobs; the lookahead takes at "
                               f"most {MAX_UPCOMING}")
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
        if self.shared is not None and (self.count != 1 or self.core_percent
                                        or self.memory_mib):
            raise RequestError("a co-location slot is one GPU: count 1, no vGPU share")
        if self.pattern is not None and self.count > 0 and self.pattern.size != self.count:
            raise RequestError(
                f"pattern {self.pattern.name!r} has {self.pattern.size} GPUs but the request "
                f"asks for {self.count}"
            )

    def with_queue(self, upcoming: tuple[Upcoming, ...], wait_for_better: bool) -> Request:
        """This request with ``upcoming`` and ``wait_for_better`` in place of its own: what
        ``dataclasses.replace(self, upcoming=..., wait_for_better=...)`` gives, at a sixth of
        its cost (the extender swaps the queue on every filter and prioritize; the other
        fields are copied as they are, already validated).

        Raises:
            RequestError: more than :data:`MAX_UPCOMING` upcoming jobs.
        """
        if len(upcoming) > MAX_UPCOMING:
            raise RequestError(f"{len(upcoming)} upcoming jobs; the lookahead takes at "
                               f"most {MAX_UPCOMING}")
        out = object.__new__(Request)
        mine, theirs = self.__dict__, out.__dict__
        for name in _REQUEST_FIELDS:  # the fields only: nothing a method may have cached
            theirs[name] = mine[name]
        theirs["upcoming"] = upcoming
        theirs["wait_for_better"] = wait_for_better
        return out

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

    @property
    def postponable(self) -> bool:
        """Bandwidth sensitive and for several GPUs: a request the default policy's bounded
        postponement may make wait for a better set (``wait_for_better``; the callers add their
        own conditions: the wait bound, whether the pod may wait at all)."""
        return self.count > 1 and self.sensitive

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
            self.shared.key() if self.shared is not None else None,
            tuple(u.key() for u in self.upcoming),
            *(("wait-for-better",) if self.wait_for_better else ()),
        )  # fmt: skip


#: :class:`Request`'s field names (:meth:`Request.with_queue` copies these).
_REQUEST_FIELDS = tuple(f.name for f in fields(Request))


@dataclass(frozen=True)
class Candidate:
    """A scored GPU set (the runner-up of a decision, or any alternative)."""

    gpus: tuple[int, ...]
    aggregated_bandwidth_gbps: float
    effective_bandwidth_gbps: float
    preserved_bandwidth_gbps: float


@dataclass(frozen=True)
class SetPrediction:
    """The predicted co-located set on one candidate GPU, were the job to join it.

    Attributes:
        gpu: the GPU index.
        residents: labels of the jobs already on it (``name (profile key)``).
        sum_c_before: ΣC of the residents (Eq. 4.3 units); 0 for an idle GPU.
        sum_c: ΣC with the job (the quantity Tabrizian §4.2.4 bounds).
        delta: predicted δ of the set with the job (Eq. 4.1); 1.0 alone.
        slowdowns: predicted slow-down of each member, residents first, the job last.
        throughput_gain: solo-GPUs' worth of progress the job adds net of what it costs the
            residents (``Σ 1/s`` after minus before; 1.0 on an idle GPU).
        free_memory_mib: GPU memory left after the job joins, MiB.
    """

    gpu: int
    residents: tuple[str, ...]
    sum_c_before: float
    sum_c: float
    delta: float
    slowdowns: tuple[float, ...]
    throughput_gain: float
    free_memory_mib: int

    def to_json(self) -> dict[str, object]:
        """JSON form (numbers rounded for display)."""
        return {
            "gpu": self.gpu,
            "residents": list(self.residents),
            "sum_c_before": round(self.sum_c_before),
            "sum_c": round(self.sum_c),
            "delta": round(self.delta, 3),
            "slowdowns": [round(x, 3) for x in self.slowdowns],
            "throughput_gain": round(self.throughput_gain, 3),
            "free_memory_mib": self.free_memory_mib,
        }


@dataclass(frozen=True)
class Colocation:
    """A co-location decision's explanation (Tabrizian Algorithm 2 and gputopo's variant).

    Attributes:
        job: the job's name (becomes the GPU's resident).
        profile: the job's profile.
        memory_mib: GPU memory reserved, MiB.
        chosen: the predicted set on the chosen GPU.
        threshold: the ΣC threshold applied (Eq. 4.3 units).
        slots: co-location slots per GPU.
        runner_up: the best other candidate GPU on this node, if any.
        rank: the node-choice key, lower = better, comparable between nodes for one policy
            and request (the simulator's and the extender's node choice for shared pods).
    """

    job: str
    profile: JobProfile
    memory_mib: int
    chosen: SetPrediction
    threshold: float
    slots: int
    runner_up: SetPrediction | None = None
    rank: tuple[float, ...] = ()

    def to_json(self) -> dict[str, object]:
        """JSON form."""
        return {
            "job": self.job,
            "profile": self.profile.label(),
            "profile_source": self.profile.source,
            "kernel_occupancy": round(self.profile.kernel_occupancy),
            "mem_bandwidth_util": round(self.profile.mem_bandwidth_util),
            "iteration_s": self.profile.iteration_s,
            "memory_mib": self.memory_mib,
            "threshold": self.threshold,
            "slots": self.slots,
            "chosen": self.chosen.to_json(),
            "runner_up": self.runner_up.to_json() if self.runner_up is not None else None,
        }


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
        colocation: for a co-location slot (``Request.shared``), the predicted set and why;
            ``gpus`` then holds the one GPU and ``memory_mib`` the memory reserved.
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
    colocation: Colocation | None = None

    @property
    def shared(self) -> bool:
        """A co-location slot on one GPU."""
        return self.colocation is not None

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
        if self.colocation is not None:
            out["colocation"] = self.colocation.to_json()
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
