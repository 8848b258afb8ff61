"""The run-time model: how long a job runs on the GPUs it got, and the placement scores the
simulator judges every policy by.

**One judge for every policy.** Each policy reports EffBW in its own model (MAPA's policies
Eq. 2, the others gputopo-v1), so the simulator re-scores every placement with one *judge*
model, independent of the model that decided: ``gputopo-v1`` (the default; monotone, fitted to
Eq. 2 where Eq. 2 is sound — see :mod:`topology.policies.bandwidth`), ``mapa-eq2`` (Eq. 2 as
published, which rewards PCIe links on some sets and can go negative) or ``bottleneck`` (the
slowest link of the pattern: what a ring all-reduce waits for). The judged EffBW of a job is
the best prediction the judge gives its pattern *on its GPU set*, over every arrangement of the
pattern in the set: NCCL builds its rings from the topology it detects, not from the order the
GPUs were handed out in, and NVIDIA's device plugin hands out a set with no pattern at all
(arrangements enumerated for patterns of up to 8 GPUs; larger ones are judged on the policy's
mapping). Its *ideal* is the best prediction any set of an idle node of its type gives the
pattern (exhaustive search; MAPA Fig. 4's ideal).

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
from topology.policies import robust
from topology.policies.amaral import INTERFERENCE_K, Profile
from topology.policies.bandwidth import all_pairs
from topology.policies.common import (
    MODEL_BOTTLENECK,
    MODEL_GPUTOPO,
    MODEL_MAPA,
    MODELS,
    effective_bandwidth,
)
from topology.policies.matching import MAX_ENUM_VERTICES, _arrangements_and_perms
from topology.policies.memo import Memo

#: EffBW past which communication stops getting faster (MAPA Fig. 16), GB/s.
B_SAT = 50.0
#: Largest interference slowdown (a job never runs slower than half speed from contention).
MAX_SLOWDOWN = 1.0
#: Judge models (``--judge``; ``eq2`` is accepted for ``mapa-eq2``).
JUDGES = MODELS
#: Short names the command line accepts for the judges.
JUDGE_ALIASES = {"eq2": MODEL_MAPA, "gputopo": MODEL_GPUTOPO, "slowest-link": MODEL_BOTTLENECK}
#: Most (subset × arrangement) pairs an exhaustive best-set search without a table scores.
EXHAUSTIVE_BUDGET = 5_000_000


def judge_name(text: str) -> str:
    """The judge model ``text`` names (an alias of :data:`JUDGE_ALIASES` or a model name).

    Raises:
        ValueError: no such judge.
    """
    name = JUDGE_ALIASES.get(text, text)
    if name not in JUDGES:
        raise ValueError(f"unknown EffBW model {text!r}; use gputopo-v1, eq2 (mapa-eq2) or "
                         "bottleneck")
    return name


@lru_cache(maxsize=65536)
def _set_effbw(topology: Topology, gpus: tuple[int, ...], pattern: Pattern, model: str) -> float:
    edge_pos, _ = _arrangements_and_perms(pattern.size, pattern.edges)
    return max(effective_bandwidth(topology, [(gpus[a], gpus[b]) for a, b in e], model)
               for e in edge_pos.tolist())


def judge_effbw(topology: Topology, pattern: Pattern, mapping: Sequence[int], model: str,
                memo: Memo | None = None) -> float:
    """Judged EffBW (GB/s) of ``pattern`` on the GPU set of ``mapping``: the best prediction of
    ``model`` over every arrangement of the pattern in the set (module docstring); for patterns
    of more than 8 GPUs, the prediction with vertex i on ``mapping[i]``. 0 without edges."""
    if not pattern.edges:
        return 0.0
    gpus = tuple(sorted(mapping))
    if memo is not None:
        table = robust.model_table(topology, pattern, memo)
        if table is not None:
            mask = sum(1 << g for g in gpus)
            return float(table.best[mask, MODELS.index(model)])
    if pattern.size <= MAX_ENUM_VERTICES:
        return _set_effbw(topology, gpus, pattern, model)
    edges = [(mapping[a], mapping[b]) for a, b in pattern.edges]
    return effective_bandwidth(topology, edges, model)


@lru_cache(maxsize=4096)
def best_effbw(topology: Topology, free: tuple[int, ...], pattern: Pattern,
               model: str, memo: Memo) -> float | None:
    """The highest judged EffBW any set of ``pattern``'s size in the GPUs ``free`` reaches
    (exhaustive over sets and arrangements, MAPA §3.3, with the run's ``memo``); None when
    that is not affordable (patterns > 8 GPUs, or more than :data:`EXHAUSTIVE_BUDGET` pairs on
    a machine without a table); 0 for patterns without edges."""
    if not pattern.edges:
        return 0.0
    if len(free) < pattern.size:
        return None
    table = robust.model_table(topology, pattern, memo)
    if table is not None:
        mask = sum(1 << g for g in free)
        return float(table.best[mask, MODELS.index(model)])
    if pattern.size > MAX_ENUM_VERTICES:
        return None
    edge_pos, _ = _arrangements_and_perms(pattern.size, pattern.edges)
    if math.comb(len(free), pattern.size) * edge_pos.shape[0] > EXHAUSTIVE_BUDGET:
        return None
    import itertools

    return max(_set_effbw(topology, s, pattern, model)
               for s in itertools.combinations(free, pattern.size))


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
