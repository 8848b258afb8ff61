"""Co-location policies: which GPU a ``gputopo.io/gpu-shared`` pod shares (Tabrizian 2020).

A shared request (``Request.shared``) asks for one co-location slot: the job runs on one GPU
next to the jobs already there, under MPS. Its *feasible* GPUs on a node are the healthy ones
that are idle or already shared, with a free slot (``NodeState.slots_per_gpu``, default 3) and
room for its GPU memory; a GPU held whole or split into vGPU shares is never shared (one mode
per GPU). For each feasible GPU the model (:mod:`topology.colocation.model`) predicts the set
the job would join: ΣC (Eq. 4.3), δ (Eq. 4.1), every member's slow-down.

Policies (whole-GPU and vGPU requests go to the default ``gputopo`` policy in all of them, so
comparisons isolate how shared jobs are placed):

* ``colocate`` — **Algorithm 2** (§5.1) as a per-pod decision: take the feasible GPU whose
  residents have the lowest ΣC (then ΣM — ``SortByValueAscending(NodePerf)`` on (C, M) pairs —
  then the lowest index); join only if the predicted set keeps δ ≥ 1 (line 26,
  ``CalculateSpeedup(...) < 1 → break``) and ΣC ≤ the threshold (§4.2.4, default 4·10⁷);
  otherwise the pod stays Pending with that reason. An idle GPU has ΣC = 0, so Algorithm 2
  spreads jobs over idle GPUs before it packs. Across nodes the lowest ΣC wins (``rank``).
* ``random-colocate`` — Gandiva's random packing (Xiao et al. OSDI'18, as the thesis and Gavel
  describe it): a feasible GPU chosen pseudo-randomly — deterministically, from a hash of the
  request and the node state — with no interference model, the way GPU sharing without
  profiles (time-slicing, MPS in NVIDIA's plugin, HAMi) works.
* ``exclusive`` — FIFO with each job alone on a GPU (the thesis' baseline, §6.1): an idle GPU,
  lowest index, never a shared one.
* ``gputopo`` (the default policy; :func:`gputopo_shared`) — the same safety as Algorithm 2
  (δ ≥ 1, ΣC ≤ threshold), but it uses the predicted gain and keeps whole GPUs and NVLink
  groups free for exclusive multi-GPU jobs:

  0. an idle GPU whose taking costs no PreservedBW (MAPA Eq. 3) — a one-GPU node, or the last
     free GPU of a node: the job runs at full speed and no multi-GPU job loses anything;
  1. else the shared GPU where the job adds the most throughput (``Σ 1/s`` of the set after
     minus before, in solo-GPUs' worth) provided it adds at least
     :data:`JOIN_GAIN` = 0.5 of a GPU;
  2. else the idle GPU whose taking keeps the most PreservedBW (the single-GPU rule of the
     default policy: a GPU whose NVLink neighbours are busy);
  3. else the shared GPU with the largest gain that still keeps δ ≥ 1.

  ``rank`` orders those tiers across nodes too, so the extender packs shared jobs onto shared
  GPUs, and onto already busy nodes, before it breaks up an idle NVLink group.

All of them are pure and deterministic.
"""

from __future__ import annotations

import hashlib

from topology.colocation.model import predict
from topology.model import Topology
from topology.policies.bandwidth import preserved_bandwidth
from topology.policies.base import (
    Colocation,
    Decision,
    NodeState,
    NoFit,
    Request,
    RequestError,
    Resident,
    SetPrediction,
    SharedRequest,
    cpu_and_numa,
)
from topology.policies.common import MODEL_GPUTOPO
from topology.policies.memo import Memo
from topology.policies.registry import register

COLOCATE = "colocate"
RANDOM_COLOCATE = "random-colocate"
EXCLUSIVE = "exclusive"
#: gputopo joins a shared GPU before opening an idle one only when the job adds at least this
#: much throughput (solo GPUs' worth): co-location must at least halve the job's cost.
JOIN_GAIN = 0.5
#: Tolerance when comparing δ with 1.
EPS = 1e-9


def _label(r: Resident) -> str:
    return f"{r.name} ({r.profile.label()})" if r.name else r.profile.label()


def feasible_gpus(topology: Topology, state: NodeState, shared: SharedRequest) -> list[int]:
    """GPUs that can take the slot: healthy, idle or co-located (never whole or vGPU-split),
    with a free slot and ``shared.memory_mib`` MiB free (module docstring).

    Raises:
        NoFit: no GPU qualifies (the message says what is missing).
    """
    out: list[int] = []
    slots_full = memory_short = 0
    for g in range(topology.size):
        if g in state.unhealthy:
            continue
        u = state.used(g)
        if u.core_percent or u.memory_mib:
            continue
        if len(u.residents) >= state.slots_per_gpu:
            slots_full += 1
            continue
        if u.resident_memory_mib + shared.memory_mib > topology.gpus[g].memory_mib:
            memory_short += 1
            continue
        out.append(g)
    if not out:
        why = []
        if slots_full:
            why.append(f"{slots_full} shared GPU(s) have all {state.slots_per_gpu} slots taken")
        if memory_short:
            why.append(f"{memory_short} lack {shared.memory_mib} MiB of free memory")
        detail = "; ".join(why) or "every GPU is held whole, split into vGPU shares or unhealthy"
        raise NoFit(f"no GPU has a free co-location slot: {detail}")
    return out


def predict_join(topology: Topology, state: NodeState, shared: SharedRequest,
                 gpu: int) -> SetPrediction:
    """The set on ``gpu`` were the job to join it: ΣC, δ, slow-downs, throughput gain."""
    residents = state.residents(gpu)
    members = [r.profile for r in residents]
    before = predict(members, shared.model) if members else None
    after = predict([*members, shared.profile], shared.model)
    gain = after.throughput - (before.throughput if before is not None else 0.0)
    used = sum(r.memory_mib for r in residents) + shared.memory_mib
    return SetPrediction(
        gpu=gpu,
        residents=tuple(_label(r) for r in residents),
        sum_c_before=before.sum_c if before is not None else 0.0,
        sum_c=after.sum_c,
        delta=after.delta,
        slowdowns=after.slowdowns,
        throughput_gain=gain,
        free_memory_mib=topology.gpus[gpu].memory_mib - used,
    )


def allowed(p: SetPrediction, threshold: float) -> str | None:
    """Why joining the predicted set is refused (Algorithm 2's checks), or None if allowed.

    A job alone on an idle GPU is always allowed (the threshold bounds co-located sets).
    """
    if not p.residents:
        return None
    if p.sum_c > threshold:
        return (f"sum of C would be {p.sum_c:.3g} > threshold {threshold:.3g} "
                "(Tabrizian §4.2.4)")
    if p.delta < 1.0 - EPS:
        return f"predicted δ {p.delta:.2f} < 1 (Eq. 4.1): the set would run slower together"
    return None


def _shared_of(request: Request) -> SharedRequest:
    if request.shared is None:
        raise RequestError("not a co-location request")
    return request.shared


def shared_decision(policy: str, topology: Topology, state: NodeState, request: Request,
                    chosen: SetPrediction, *, runner_up: SetPrediction | None,
                    rank: tuple[float, ...], reason: str) -> Decision:
    """A fully explained decision for one co-location slot on ``chosen.gpu``."""
    shared = _shared_of(request)
    g = chosen.gpu
    free = state.free_gpus(topology)
    cpus, numa = cpu_and_numa(topology, [g])
    return Decision(
        policy=policy,
        gpus=(g,),
        uuids=(topology.gpus[g].uuid,),
        mapping=(g,),
        aggregated_bandwidth_gbps=0.0,
        pattern_bandwidth_gbps=0.0,
        effective_bandwidth_gbps=0.0,
        bandwidth_model=MODEL_GPUTOPO,
        preserved_bandwidth_gbps=preserved_bandwidth(topology, [f for f in free if f != g]),
        access_cost=0.0,
        cpu_affinity=cpus,
        numa_nodes=numa,
        memory_mib=shared.memory_mib,
        reason=reason,
        colocation=Colocation(
            job=shared.name,
            profile=shared.profile,
            memory_mib=shared.memory_mib,
            chosen=chosen,
            threshold=shared.threshold,
            slots=state.slots_per_gpu,
            runner_up=runner_up,
            rank=rank,
        ),
    )


def _whole(topology: Topology, state: NodeState, request: Request, memo: Memo | None,
           name: str) -> Decision:
    from dataclasses import replace

    from topology.policies.default import gputopo

    d = gputopo(topology, state, request, memo if memo is not None else Memo())
    return replace(d, policy=name)


# ------------------------------------------------------------------------------ colocate


@register(COLOCATE, "Tabrizian Algorithm 2: the GPU whose jobs have the lowest sum of C, "
          "joining while predicted δ >= 1 and sum of C <= threshold", colocation=True)
def colocate(topology: Topology, state: NodeState, request: Request,
             memo: Memo | None = None) -> Decision:
    """Tabrizian **Algorithm 2** (§5.1) for one pod (module docstring).

    Args:
        topology: the node.
        state: its GPUs in use, with co-located residents.
        request: a co-location slot (whole-GPU and vGPU requests use the ``gputopo`` policy).

    Returns:
        The lowest-ΣC feasible GPU; ``colocation.rank = (ΣC, ΣM)`` of its residents.

    Raises:
        NoFit: no feasible GPU, or joining the lowest-ΣC one would push ΣC over the threshold
            or predicted δ below 1 (Algorithm 2 stops there rather than trying another GPU).
    """
    if request.shared is None:
        return _whole(topology, state, request, memo, COLOCATE)
    shared = request.shared
    feasible = feasible_gpus(topology, state, shared)
    preds = [predict_join(topology, state, shared, g) for g in feasible]

    def node_perf(p: SetPrediction) -> tuple[float, float, int]:
        sum_m = sum(r.profile.mem_bandwidth_util for r in state.residents(p.gpu))
        return (p.sum_c_before, sum_m, p.gpu)

    order = sorted(preds, key=node_perf)
    best = order[0]
    refusal = allowed(best, shared.threshold)
    if refusal is not None:
        raise NoFit(f"Algorithm 2: least-loaded GPU {best.gpu} "
                    f"({len(best.residents)} job(s)): {refusal}")
    if best.residents:
        what = (f"joins {len(best.residents)} job(s): predicted δ {best.delta:.2f} >= 1, "
                f"sum of C {best.sum_c:.3g} <= {shared.threshold:.3g}")
    else:
        what = "alone on an idle GPU"
    perf = node_perf(best)
    return shared_decision(
        COLOCATE, topology, state, request, best,
        runner_up=order[1] if len(order) > 1 else None,
        rank=(perf[0], perf[1]),
        reason=f"Algorithm 2: lowest sum of C of the GPU's jobs ({best.sum_c_before:.3g}); "
               f"{what}",
    )


# ------------------------------------------------------------------------------ random


def _hash_unit(*parts: object) -> float:
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@register(RANDOM_COLOCATE, "Gandiva-style random packing: any GPU with a free slot, no "
          "interference model", colocation=True)
def random_colocate(topology: Topology, state: NodeState, request: Request,
                    memo: Memo | None = None) -> Decision:
    """A pseudo-random feasible GPU (module docstring); deterministic for equal inputs.

    Raises:
        NoFit: no GPU has a free slot and the memory.
    """
    if request.shared is None:
        return _whole(topology, state, request, memo, RANDOM_COLOCATE)
    shared = request.shared
    feasible = feasible_gpus(topology, state, shared)
    seed = (request.key(), state.key(), topology.topology_class)
    pick = feasible[int(_hash_unit(*seed) * len(feasible))]
    chosen = predict_join(topology, state, shared, pick)
    others = [g for g in feasible if g != pick]
    runner = predict_join(topology, state, shared, others[0]) if others else None
    return shared_decision(
        RANDOM_COLOCATE, topology, state, request, chosen, runner_up=runner,
        rank=(_hash_unit(*seed, "node"),),
        reason=f"random packing among {len(feasible)} GPU(s) with a free slot "
               f"(predicted δ {chosen.delta:.2f}, not consulted)",
    )


# ------------------------------------------------------------------------------ exclusive


@register(EXCLUSIVE, "FIFO, every job alone on its GPU (Tabrizian's baseline): shared pods "
          "get an idle GPU, lowest index", colocation=True)
def exclusive(topology: Topology, state: NodeState, request: Request,
              memo: Memo | None = None) -> Decision:
    """Each shared job alone on an idle GPU, lowest index (the thesis' FIFO baseline, §6.1).

    Raises:
        NoFit: no idle GPU with the memory.
    """
    if request.shared is None:
        return _whole(topology, state, request, memo, EXCLUSIVE)
    shared = request.shared
    idle = [g for g in range(topology.size)
            if g not in state.unhealthy and state.used(g).idle
            and shared.memory_mib <= topology.gpus[g].memory_mib]
    if not idle:
        raise NoFit("exclusive: no idle GPU (each job runs alone)")
    chosen = predict_join(topology, state, shared, idle[0])
    runner = predict_join(topology, state, shared, idle[1]) if len(idle) > 1 else None
    return shared_decision(EXCLUSIVE, topology, state, request, chosen, runner_up=runner,
                           rank=(0.0,), reason="exclusive: alone on the lowest idle GPU")


# ------------------------------------------------------------------------------ gputopo


def gputopo_shared(topology: Topology, state: NodeState, request: Request,
                   policy_name: str = "gputopo") -> Decision:
    """The default policy's co-location branch (module docstring, tiers 0-3).

    Args:
        topology: the node.
        state: its GPUs in use.
        request: a co-location slot.
        policy_name: the name written into the decision.

    Returns:
        A decision whose ``colocation.rank`` is ``(tier, …)`` (lower is better).

    Raises:
        NoFit: no feasible GPU, or every shared GPU would break δ ≥ 1 or the threshold and
            no GPU is idle.
    """
    shared = _shared_of(request)
    feasible = feasible_gpus(topology, state, shared)
    preds = [predict_join(topology, state, shared, g) for g in feasible]
    free = list(state.free_gpus(topology))
    free_set = set(free)
    kept = preserved_bandwidth(topology, free)

    def cost(g: int) -> float:
        return kept - preserved_bandwidth(topology, [f for f in free if f != g])

    def busy_siblings(g: int) -> int:
        return sum(1 for o in range(topology.size) if o != g and o not in free_set
                   and topology.links[g][o].nvlinks > 0)

    idle = [p for p in preds if not p.residents]
    joins = [p for p in preds if p.residents and allowed(p, shared.threshold) is None]
    ranked: list[tuple[tuple[float, ...], SetPrediction, str]] = []
    for p in idle:
        c = round(cost(p.gpu), 9)
        if c <= 0:
            ranked.append(((0.0, float(p.gpu)), p,
                           "alone on an idle GPU that costs no PreservedBW (MAPA Eq. 3)"))
        else:
            ranked.append(((2.0, c, -float(busy_siblings(p.gpu)), float(p.gpu)), p,
                           f"alone on the idle GPU that keeps the most PreservedBW "
                           f"(-{c:.1f} GB/s); no shared GPU gains >= {JOIN_GAIN} GPU"))
    for p in joins:
        tier = 1.0 if p.throughput_gain >= JOIN_GAIN else 3.0
        if tier == 3.0 and p.throughput_gain <= EPS:
            continue
        ranked.append(((tier, -round(p.throughput_gain, 9), -round(p.delta, 9), float(p.gpu)),
                       p, f"joins {len(p.residents)} job(s): +{p.throughput_gain:.2f} GPU of "
                          f"throughput, predicted δ {p.delta:.2f}"))
    if not ranked:
        refusals = sorted({r for p in preds if (r := allowed(p, shared.threshold))})
        raise NoFit("no shared GPU keeps the set worthwhile and none is idle: "
                    + ("; ".join(refusals) if refusals else "no gain from joining"))
    ranked.sort(key=lambda item: item[0])
    rank, best, why = ranked[0]
    runner = ranked[1][1] if len(ranked) > 1 else None
    return shared_decision(policy_name, topology, state, request, best, runner_up=runner,
                           rank=rank, reason=f"gputopo co-location tier {int(rank[0])}: {why}")
