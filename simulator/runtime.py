"""The run-time model: how long a job runs on the GPUs it got, and the placement scores the
simulator judges every policy by.

**One judge for every policy.** Each policy reports EffBW in its own model (MAPA's policies
Eq. 2, the others gputopo-v1), so the simulator re-scores every placement with one *judge*
model: by default ``gputopo-v1`` (monotone; fitted to Eq. 2 where Eq. 2 is sound — see
:mod:`topology.policies.bandwidth`), or ``mapa-eq2`` (Eq. 2 as published, which rewards PCIe
links on some sets and can go negative). The judged EffBW of a job is the prediction for its
pattern's edges on its GPUs (vertex i on ``mapping[i]``); its *ideal* is the best prediction any
set of an idle node of its type gives the pattern (exhaustive search; MAPA Fig. 4's ideal).

**Bandwidth → run time** (MAPA Fig. 16). A job's solo run time on the ideal set is
``runtime_s``, of which a share ``c`` (``comm_share``) is communication. Communication time
scales with 1 / EffBW, and stops improving past ``B_SAT`` = 50 GB/s ("the amount of execution
time improvement is limited once the effective bandwidth is past 50 GBps"):

    T = runtime_s · ((1 - c) + c · min(B_ideal, B_SAT) / min(B, B_SAT))

so a bandwidth-sensitive job slows as its EffBW drops below the ideal and an insensitive job
(c ≈ 0) does not (Fig. 16). One-GPU jobs do not communicate (factor 1).

**Interference** (Amaral §3.3, Fig. 6; workloads with ``interference``). Jobs whose GPUs share
a CPU socket contend for its bus: while they overlap, job v progresses at rate
``1 / (1 + s_v)`` with ``s_v = min(1, Σ_a K · sensitivity_v · pressure_a)`` over the co-located
jobs a (profiles and K from :mod:`topology.policies.amaral`). Unlike the policy, which only sees
busy GPUs, the simulator knows every job's real profile.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from topology.model import Topology
from topology.patterns import Pattern
from topology.policies.amaral import INTERFERENCE_K, Profile
from topology.policies.bandwidth import all_pairs
from topology.policies.common import MODEL_GPUTOPO, MODEL_MAPA, effective_bandwidth
from topology.policies.matching import search
from topology.policies.memo import Memo

#: EffBW past which communication stops getting faster (MAPA Fig. 16), GB/s.
B_SAT = 50.0
#: Largest interference slowdown (a job never runs slower than half speed from contention).
MAX_SLOWDOWN = 1.0
#: Judge models.
JUDGES = (MODEL_GPUTOPO, MODEL_MAPA)
#: Budget for "exhaustive" searches (every subset × arrangement for patterns up to 8 GPUs).
EXHAUSTIVE_BUDGET = 5_000_000

_OBJECTIVE = {MODEL_GPUTOPO: "effbw-gputopo", MODEL_MAPA: "effbw-mapa"}


def judge_effbw(topology: Topology, pattern: Pattern, mapping: Sequence[int], model: str) -> float:
    """Predicted EffBW (GB/s) of ``pattern`` with vertex i on GPU ``mapping[i]``; 0 without
    edges."""
    edges = [(mapping[a], mapping[b]) for a, b in pattern.edges]
    return effective_bandwidth(topology, edges, model)


@lru_cache(maxsize=4096)
def best_effbw(topology: Topology, free: tuple[int, ...], pattern: Pattern,
               model: str, memo: Memo) -> float | None:
    """The highest judged EffBW any match of ``pattern`` in the GPUs ``free`` reaches (exhaustive
    search, MAPA §3.3, with the run's ``memo``); None when the search would not be exhaustive
    (patterns > 8 GPUs or a budget overflow); 0 for patterns without edges."""
    if not pattern.edges:
        return 0.0
    if len(free) < pattern.size:
        return None
    result = search(topology, free, pattern, _OBJECTIVE[model],  # type: ignore[arg-type]
                    memo=memo, budget=EXHAUSTIVE_BUDGET)
    if not result.exact:
        return None
    return result.best.effbw_gputopo if model == MODEL_GPUTOPO else result.best.effbw_mapa


def ideal_effbw(topology: Topology, pattern: Pattern, model: str, memo: Memo) -> float | None:
    """The best judged EffBW an idle node of this type offers the pattern (MAPA Fig. 4)."""
    return best_effbw(topology, tuple(range(topology.size)), pattern, model, memo)


def bandwidth_factor(effbw: float, ideal: float | None, comm_share: float) -> float:
    """Run-time multiplier (≥ 1) of a job whose judged EffBW is ``effbw`` (module docstring)."""
    if comm_share <= 0 or ideal is None or ideal <= 0:
        return 1.0
    got = max(min(effbw, B_SAT), 1e-3)
    best = min(ideal, B_SAT)
    return max(1.0, (1.0 - comm_share) + comm_share * best / got)


def slowdown(victim: Profile, aggressors: Sequence[Profile]) -> float:
    """Interference slowdown of ``victim`` next to ``aggressors`` (module docstring)."""
    s = sum(INTERFERENCE_K * victim.sensitivity * a.pressure for a in aggressors)
    return min(MAX_SLOWDOWN, s)


@lru_cache(maxsize=64)
def _bandwidth_array(topology: Topology) -> np.ndarray:
    return np.array(topology.bandwidth_matrix, dtype=np.float64)


@lru_cache(maxsize=4096)
def best_preserved(topology: Topology, k: int) -> float:
    """Highest sum of link bandwidths among any ``k`` GPUs of the node (GB/s; exact up to
    ``C(n, k)`` = 200 000 subsets, else a greedy set)."""
    n = topology.size
    if k <= 1 or k > n:
        return 0.0
    w = _bandwidth_array(topology)
    if math.comb(n, k) <= 200_000:
        import itertools

        subs = np.array(list(itertools.combinations(range(n), k)), dtype=np.int64)
        return float(w[subs[:, :, None], subs[:, None, :]].sum(axis=(1, 2)).max() / 2.0)
    chosen = [int(np.argmax(w.sum(axis=1)))]
    while len(chosen) < k:
        rest = [g for g in range(n) if g not in chosen]
        chosen.append(max(rest, key=lambda g: (float(w[g, chosen].sum()), -g)))
    return float(sum(w[a, b] for a, b in all_pairs(chosen)))


@lru_cache(maxsize=65536)
def node_fragmentation(topology: Topology, free_mask: int) -> tuple[float, float]:
    """``(PreservedBW of the free GPUs, the best PreservedBW of that many GPUs)`` (GB/s).

    A node's fragmentation is ``1 - preserved / best``: 0 when its free GPUs are as well
    connected as any set of that size could be, 1 when none of them share a link (MAPA
    Eq. 3 against its ideal). The cluster's is ``1 - Σ preserved / Σ best``.
    """
    free = [g for g in range(topology.size) if free_mask >> g & 1]
    if len(free) <= 1:
        return 0.0, 0.0
    w = _bandwidth_array(topology)
    idx = np.array(free)
    preserved = float(w[np.ix_(idx, idx)].sum() / 2.0)
    return preserved, best_preserved(topology, len(free))
