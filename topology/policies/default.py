"""``gputopo``, the default policy: Gaia for shares and single GPUs, MAPA Preserve with a
monotone bandwidth model for multi-GPU jobs.

Reasoning:

* **Fractional requests** (m < 1) — Gaia's Fragment (Gaia §III-C, Algorithm 1): best fit
  among partly used GPUs, else the cheapest whole GPU. Packing shares onto cards that are
  already shared keeps whole GPUs whole; MAPA has no notion of a share.
* **One GPU** — nothing to communicate, so the only question is what the job takes away from
  later jobs. We take the free GPU whose removal keeps the highest PreservedBW (MAPA Eq. 3): a
  GPU whose NVLink and PCIe neighbours are busy removes the least bandwidth. This generalises
  Gaia's Singular rule ("prefer a free GPU whose sibling is busy", Gaia §III-C) from the PCIe
  tree to NVLink; Gaia's rule itself breaks ties (more busy PIX siblings first), then the
  lowest index.
* **Several GPUs** — the robust rule (:mod:`topology.policies.robust`, issue 24): every set
  judged under gputopo-v1, MAPA Eq. 2 (§3.4.3) and the ring's bottleneck link, least worst-model
  regret of this job's cost and that of the pods waiting behind it, near-equal sets (within
  1 % of the ideal communication time) broken by what the leftover can still serve, then
  PreservedBW (MAPA Eq. 3). **Held to the incumbent**: a bandwidth-sensitive job never gets a
  set more than 1 % below NVIDIA best-effort's on the same free GPUs under Eq. 2 or the
  bottleneck (the guard; ``gputopo-unguarded`` is the rule without it). Patterns without a
  model table fall back to MAPA Preserve's branches below.
* **Bounded postponement** (Amaral et al. SC'17, Algorithm 1's postponement; issue 24) — when
  the caller allows it (``Request.wait_for_better``: the extender and the simulator, for a
  bounded time) and GPUs of the node are in use, a bandwidth-sensitive multi-GPU job is not
  placed where no free set reaches its threshold (:func:`postpone_below`) of the ideal EffBW
  under every model that judges it (Eq. 2 within its fit, the bottleneck): the node answers
  :class:`~topology.policies.base.Postponed` ("postponed: ...") and the job waits for GPUs to
  free up, or takes another node. The threshold depends on the job's share of the node:

  - a job of **fewer than half** the node's GPUs waits below :data:`POSTPONE_BELOW_SMALL`
    (50 %: communication at most twice the ideal). Its good sets lie inside one
    NVLink-connected half of the machine (on a DGX-1 V100: a 3-GPU ring waits for a set whose
    every hop is an NVLink, not {1,5,6} at 52 % / 48 %; a 2-GPU ring takes a single-NVLink
    pair, exactly half the bottleneck's ideal), and a single job ending on that half usually
    frees one, so the wait is short;
  - a job of **half the node or more** waits only below :data:`POSTPONE_BELOW` (40 %:
    communication at most 2.5× the ideal), i.e. for Eq. 2's pits (a 3-GPU ring over one
    single NVLink and two PCIe hops: 6 % of the ideal, 16× the communication time) and
    PCIe-only sets. Its good sets need most of the node idle at once, a long wait (on the
    streams, 40 % → 50 % for these jobs pushed the makespan behind on 14–16 of 20 seeds).

  An idle node is never refused (nothing it holds will free up), and once the wait bound
  passes the caller clears the flag and the rule places the job as it is. Both thresholds
  were picked on the stream seeds 0–19 (in sample) and checked on seeds 20–39 and on the
  DGX-1 P100, the 16-GPU cube mesh and a PCIe-only machine: ``benchmarks/results/ROBUST.md``
  (section 2, sessions 5 and 6).
* **Fallback, bandwidth-sensitive** — MAPA Preserve's sensitive branch (Algorithm 1), but
  scored with the monotone gputopo-v1 EffBW model instead of Eq. 2, which rewards PCIe links
  on 4-GPU all-to-all sets and is not monotone on 5-GPU rings (see
  :mod:`topology.policies.bandwidth`). Ties: higher PreservedBW, then the smallest GPU set.
* **Fallback, insensitive** — MAPA Preserve's insensitive branch: the highest PreservedBW
  (Eq. 3), ties broken by the higher gputopo-v1 EffBW, then the smallest GPU set.
* **Co-location slots** (``gputopo.io/gpu-shared``) — Tabrizian's safety rules (predicted
  δ ≥ 1, ΣC ≤ threshold) with the predicted throughput gain, keeping whole GPUs and NVLink
  groups free: :func:`topology.policies.colocate.gputopo_shared`.

Every branch is deterministic: equal inputs give equal decisions.
"""

from __future__ import annotations

import numpy as np

from topology.model import PCIeLevel, Topology
from topology.policies import robust
from topology.policies.bandwidth import preserved_bandwidth
from topology.policies.base import Candidate, Decision, NodeState, Postponed, Request
from topology.policies.common import MODEL_GPUTOPO, candidate, check_capacity, whole_decision
from topology.policies.matching import search
from topology.policies.memo import Memo
from topology.policies.registry import register

NAME = "gputopo"
#: Bounded postponement: a sensitive multi-GPU job of at least half the node's GPUs waits
#: (when allowed) while no free set of the node gives at least this share of the ideal EffBW
#: under every judging model (module docstring). 0.4 = communication at most 2.5× the
#: ideal's; picked among 0.3–0.5 on the stream seeds 0–19 (in sample; seeds 20–39 out of
#: sample in ROBUST.md).
POSTPONE_BELOW = 0.4
#: The same for a job of fewer than half the node's GPUs: 0.5 = communication at most twice
#: the ideal's; picked among 0.5–0.8 on the stream seeds 0–19 of the DGX-1 V100 and the
#: 16-GPU cube mesh (0.5–0.75 give the same streams on a DGX-1 but for 2-GPU rings, which
#: from 0.55 on wait for a double NVLink; 0.7 and up lengthen the cube mesh's makespan).
POSTPONE_BELOW_SMALL = 0.5
#: How long a caller lets a job wait for a better set before it clears
#: ``Request.wait_for_better`` (s; the extender's ``postpone_max_s``, the simulator's).
POSTPONE_MAX_S = 1800.0
#: The same rule without the incumbent guard (what ``gputopo`` was before it was held to
#: NVIDIA best-effort per decision; kept selectable for comparison).
UNGUARDED = "gputopo-unguarded"


def postpone_below(topology: Topology, count: int) -> float:
    """The bounded postponement's threshold for a job of ``count`` GPUs on ``topology``: the
    share of the ideal EffBW (0–1) below which it waits (module docstring):
    :data:`POSTPONE_BELOW_SMALL` for fewer than half the node's GPUs, else
    :data:`POSTPONE_BELOW`."""
    return POSTPONE_BELOW_SMALL if 2 * count < topology.size else POSTPONE_BELOW


def _single(name: str, topology: Topology, state: NodeState, request: Request,
            memo: Memo) -> Decision:
    free = check_capacity(topology, state, request)
    free_set = set(free)
    pool = list(free)
    why = "single GPU: keeps the most PreservedBW (Eq. 3); ties by Gaia Singular"
    if request.upcoming and len(free) > 1:
        # the waiting jobs first: the GPUs whose loss costs them least under every model
        fmask = sum(1 << g for g in free)
        leftover = np.array([fmask & ~(1 << g) for g in free], dtype=np.int64)
        total = robust.lookahead_cost(topology, leftover, request.upcoming, memo)
        regret = (total - total.min(axis=0)).max(axis=1)
        keep = regret <= float(regret.min()) + robust.TOLERANCE + 1e-12
        pool = [g for g, k in zip(free, keep, strict=True) if k]
        if len(pool) < len(free):
            why = ("single GPU: least harm to the waiting jobs under every EffBW model, then "
                   "the most PreservedBW (Eq. 3); ties by Gaia Singular")

    def key(g: int) -> tuple[float, int, int]:
        preserved = preserved_bandwidth(topology, [f for f in free if f != g])
        siblings = [
            o for o in range(topology.size)
            if o != g and topology.links[g][o].pcie == PCIeLevel.PIX
        ]
        busy_siblings = sum(1 for o in siblings if o not in free_set)
        return (-round(preserved, 9), -busy_siblings, g)

    ranked = sorted(pool, key=key) + sorted((g for g in free if g not in pool), key=key)
    best = ranked[0]
    runner = None
    if len(ranked) > 1:
        r = ranked[1]
        runner = Candidate(
            gpus=(r,), aggregated_bandwidth_gbps=0.0, effective_bandwidth_gbps=0.0,
            preserved_bandwidth_gbps=preserved_bandwidth(topology, [f for f in free if f != r]),
        )
    return whole_decision(
        name, topology, state, request, (best,), MODEL_GPUTOPO, runner_up=runner,
        reason=why,
    )


def _robust_reason(request: Request, choice: robust.Choice) -> str:
    own = ", ".join(f"{m} {v:.1f}" for m, v in choice.own.items())
    what = "bandwidth-sensitive" if request.sensitive else "insensitive"
    if choice.held:
        what += (f" (held to best-effort's set: within {robust.GUARD_MARGIN:.0%} of it under "
                 "Eq. 2 and the bottleneck)")
    text = (f"{what}: least worst-model regret ({choice.regret:.3f}) under {own} GB/s; "
            f"{choice.band} of {choice.candidates} sets within {robust.TOLERANCE}, ties by "
            "the leftover")
    if request.upcoming:
        look = max(choice.lookahead.values()) if choice.lookahead else 0.0
        text += f"; {len(request.upcoming)} waiting job(s) weighed (their cost {look:.3f})"
    return text


@register(NAME, "default: Gaia Fragment for shares, PreservedBW for 1 GPU, MAPA Preserve "
          "with the robust rule for multi-GPU, held to NVIDIA best-effort per decision, "
          "gain-aware co-location for shared GPUs", free_set_only=True, colocation=True,
          lookahead=True)
def gputopo(topology: Topology, state: NodeState, request: Request, memo: Memo) -> Decision:
    """The default policy (see the module docstring for the reasoning), with the incumbent
    guard: a bandwidth-sensitive multi-GPU job never gets a set more than 1 % below NVIDIA
    best-effort's on the same free GPUs under MAPA Eq. 2 or the ring's bottleneck link
    (:func:`topology.policies.robust.guarded`; issue 24's per-decision target).

    Args:
        topology: the node.
        state: its used GPUs.
        request: whole GPUs (``count >= 1``), a share (``count == 0``) or a co-location
            slot (``shared``).

    Returns:
        A decision whose EffBW is the gputopo-v1 prediction (GB/s).

    Raises:
        NoFit: not enough free GPUs, or no GPU with room for the share.
    """
    return _decide(NAME, topology, state, request, memo, guard=True)


@register(UNGUARDED, "gputopo without the incumbent guard: the robust rule alone, which may "
          "trade up to a few % of Eq. 2 for gputopo-v1 (benchmarks/results/ROBUST.md)",
          free_set_only=True, lookahead=True)
def gputopo_unguarded(topology: Topology, state: NodeState, request: Request,
                      memo: Memo) -> Decision:
    """:func:`gputopo` without the incumbent guard: the robust rule's pick as it is (the
    default before the guard; section 5 of ``benchmarks/results/ROBUST.md``). Same shapes,
    units and errors as :func:`gputopo`."""
    return _decide(UNGUARDED, topology, state, request, memo, guard=False)


def _decide(name: str, topology: Topology, state: NodeState, request: Request, memo: Memo,
            *, guard: bool) -> Decision:
    if request.shared is not None:
        from topology.policies.colocate import gputopo_shared

        return gputopo_shared(topology, state, request, name)
    if request.fractional:
        from topology.policies import gaia

        return gaia.fragment(topology, state, request, policy_name=name)
    if request.count == 1:
        return _single(name, topology, state, request, memo)
    free = check_capacity(topology, state, request)
    pattern = request.effective_pattern()
    if request.wait_for_better and request.sensitive:
        why = robust.postpone_reason(topology, state, free, pattern,
                                     postpone_below(topology, request.count), memo)
        if why is not None:
            raise Postponed(why)
    choice = robust.choose(topology, free, pattern, request.sensitive, request.upcoming, memo,
                           guard=guard)
    if choice is not None:
        runner_up = None
        if choice.runner_up is not None:
            runner_up = candidate(topology, free, sorted(choice.runner_up), pattern,
                                  choice.runner_up, MODEL_GPUTOPO)
        return whole_decision(name, topology, state, request, choice.mapping, MODEL_GPUTOPO,
                              runner_up=runner_up,
                              reason=_robust_reason(request, choice))
    if request.sensitive:
        result = search(topology, free, pattern, "effbw-gputopo", "preserved", memo=memo)
        why = "bandwidth-sensitive: highest EffBW (gputopo-v1), ties by PreservedBW"
    else:
        result = search(topology, free, pattern, "preserved", "effbw-gputopo", memo=memo)
        why = "insensitive: highest PreservedBW (MAPA Eq. 3), ties by EffBW"
    runner = None
    if result.runner_up is not None:
        r = result.runner_up
        runner = Candidate(r.gpus, r.aggbw, r.effbw_gputopo, r.preserved)
    exact = "" if result.exact else " (pruned search)"
    return whole_decision(
        name, topology, state, request, result.best.mapping, MODEL_GPUTOPO,
        runner_up=runner, reason=why + exact,
    )
