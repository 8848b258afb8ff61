"""Helpers every policy uses to turn a chosen GPU set into a fully explained Decision."""

from __future__ import annotations

from collections.abc import Sequence

from topology.model import Topology
from topology.patterns import Pattern
from topology.policies.bandwidth import (
    access_cost,
    aggregated_bandwidth,
    all_pairs,
    count_links,
    effbw_bottleneck,
    effbw_gputopo,
    effbw_mapa,
    preserved_bandwidth,
)
from topology.policies.base import (
    FULL_CORE,
    Candidate,
    Decision,
    NodeState,
    NoFit,
    Request,
    cpu_and_numa,
)

MODEL_MAPA = "mapa-eq2"
MODEL_GPUTOPO = "gputopo-v1"
MODEL_BOTTLENECK = "bottleneck"
#: Every EffBW model the project has (:func:`effective_bandwidth`).
MODELS = (MODEL_GPUTOPO, MODEL_MAPA, MODEL_BOTTLENECK)


def mapped_edges(pattern: Pattern, mapping: Sequence[int]) -> list[tuple[int, int]]:
    """The hardware edges (GPU pairs) used by ``pattern`` when vertex i runs on mapping[i]."""
    return [(mapping[a], mapping[b]) for a, b in pattern.edges]


def effective_bandwidth(topology: Topology, edges: Sequence[tuple[int, int]], model: str) -> float:
    """Predicted EffBW (GB/s) of the matched pattern edges under ``model``.

    ``mapa-eq2``: MAPA Eq. 2 on the (x, y, z) counts; ``gputopo-v1``: the monotone model;
    ``bottleneck``: the slowest edge's GB/s. A pattern without edges (one GPU) predicts 0
    under every model.

    Raises:
        ValueError: an unknown model name.
    """
    if model not in MODELS:
        raise ValueError(f"unknown EffBW model {model!r}; known: {', '.join(MODELS)}")
    if not edges:
        return 0.0
    if model == MODEL_MAPA:
        return effbw_mapa(*count_links(topology, edges))
    bw = topology.bandwidth_matrix
    weights = [bw[a][b] for a, b in edges]
    if model == MODEL_BOTTLENECK:
        return effbw_bottleneck(weights)
    return effbw_gputopo(weights)


def candidate(
    topology: Topology,
    free: Sequence[int],
    gpus: Sequence[int],
    pattern: Pattern,
    mapping: Sequence[int],
    model: str,
) -> Candidate:
    """Score a GPU set (for runner-ups)."""
    edges = mapped_edges(pattern, mapping)
    chosen = set(gpus)
    return Candidate(
        gpus=tuple(sorted(gpus)),
        aggregated_bandwidth_gbps=aggregated_bandwidth(topology, all_pairs(sorted(gpus))),
        effective_bandwidth_gbps=effective_bandwidth(topology, edges, model),
        preserved_bandwidth_gbps=preserved_bandwidth(
            topology, [g for g in free if g not in chosen]
        ),
    )


def whole_decision(
    policy: str,
    topology: Topology,
    state: NodeState,
    request: Request,
    mapping: Sequence[int],
    model: str,
    *,
    runner_up: Candidate | None = None,
    reason: str = "",
) -> Decision:
    """A fully explained decision for whole GPUs; ``mapping[i]`` hosts pattern vertex i."""
    pattern = request.effective_pattern()
    gpus = tuple(sorted(mapping))
    free = state.free_gpus(topology)
    edges = mapped_edges(pattern, mapping)
    cpus, numa = cpu_and_numa(topology, gpus)
    chosen = set(gpus)
    return Decision(
        policy=policy,
        gpus=gpus,
        uuids=tuple(topology.gpus[g].uuid for g in gpus),
        mapping=tuple(mapping),
        aggregated_bandwidth_gbps=aggregated_bandwidth(topology, all_pairs(gpus)),
        pattern_bandwidth_gbps=aggregated_bandwidth(topology, edges),
        effective_bandwidth_gbps=effective_bandwidth(topology, edges, model),
        bandwidth_model=model,
        preserved_bandwidth_gbps=preserved_bandwidth(
            topology, [g for g in free if g not in chosen]
        ),
        access_cost=access_cost(topology, gpus),
        cpu_affinity=cpus,
        numa_nodes=numa,
        runner_up=runner_up,
        reason=reason,
    )


def fractional_decision(
    policy: str,
    topology: Topology,
    state: NodeState,
    request: Request,
    gpu: int,
    *,
    runner_up: Candidate | None = None,
    reason: str = "",
) -> Decision:
    """A decision granting ``request``'s share of one GPU."""
    free = state.free_gpus(topology)
    cpus, numa = cpu_and_numa(topology, [gpu])
    return Decision(
        policy=policy,
        gpus=(gpu,),
        uuids=(topology.gpus[gpu].uuid,),
        mapping=(gpu,),
        aggregated_bandwidth_gbps=0.0,
        pattern_bandwidth_gbps=0.0,
        effective_bandwidth_gbps=0.0,
        bandwidth_model=MODEL_GPUTOPO,
        preserved_bandwidth_gbps=preserved_bandwidth(topology, [g for g in free if g != gpu]),
        access_cost=0.0,
        cpu_affinity=cpus,
        numa_nodes=numa,
        fractional=True,
        core_percent=request.core_percent,
        memory_mib=request.memory_mib,
        runner_up=runner_up,
        reason=reason,
    )


def check_capacity(topology: Topology, state: NodeState, request: Request) -> tuple[int, ...]:
    """Free GPUs for a whole-GPU request, or raise :class:`NoFit` with the reason.

    Raises:
        NoFit: the node has fewer GPUs than requested, or fewer free ones.
    """
    if request.count > topology.size:
        raise NoFit(f"node has {topology.size} GPUs; the pod asks for {request.count}")
    free = state.free_gpus(topology)
    if len(free) < request.count:
        raise NoFit(
            f"only {len(free)} of {topology.size} GPUs free; the pod asks for {request.count}"
        )
    return free


def fits_share(topology: Topology, state: NodeState, request: Request, gpu: int) -> bool:
    """True when GPU ``gpu`` has room for the fractional ``request`` (core and memory); a GPU
    shared by co-located jobs takes no vGPU share (one mode per GPU)."""
    if gpu in state.unhealthy:
        return False
    u = state.used(gpu)
    if u.residents:
        return False
    if u.core_percent + request.core_percent > FULL_CORE:
        return False
    return u.memory_mib + request.memory_mib <= topology.gpus[gpu].memory_mib


def shareable_gpus(topology: Topology, state: NodeState, request: Request) -> list[int]:
    """GPUs that can take the fractional ``request``; raises :class:`NoFit` when none can."""
    fits = [g for g in range(topology.size) if fits_share(topology, state, request, g)]
    if not fits:
        raise NoFit(
            f"no GPU has {request.core_percent}% vGPU-core and {request.memory_mib} MiB free"
        )
    return fits
