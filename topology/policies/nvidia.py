"""``nvidia-best-effort``: the NVIDIA device plugin's preferred allocation, on our model.

The NVIDIA Kubernetes device plugin answers ``GetPreferredAllocation`` with
go-gpuallocator's *best-effort* policy (``gpuallocator/besteffort_policy.go``). We reimplement
its documented scoring — not its code — so gputopo can be compared with what a cluster gets
today without an extender:

* **Pair score** (``calculateGPUPairScore``): each link type between two GPUs adds points —
  100 per direct NVLink (1–18 links), and one PCIe term by how close the two GPUs sit:
  same board 60, one PCIe switch 50, several switches 40, host bridge 30, same CPU / NUMA
  node 20, across CPUs 10. On our model: ``NV#`` → ``100 × NV#``; PCIe level PIX → 50,
  PXB → 40, PHB → 30, NODE → 20, SYS → 10 (our model has no "same board" level). NVSwitch
  links score 0: go-gpuallocator counts an NVLink only when the link's remote PCI device is
  the other GPU, and behind an NVSwitch the remote device is the switch.
* **Set score**: the sum of the pair scores of every pair in the set.
* **Partition rule**: the policy does not take the single best set. It divides *all* free
  GPUs into groups of the requested size (the ``n mod k`` left-over GPUs form one short
  group), picks the division with the highest total set score, and returns the best-scoring
  full group of that division. This keeps the GPUs that are left well connected for the
  next request.
* **Ties**: the first partition in go-gpuallocator's enumeration order (each group holds the
  lowest GPU still unassigned; groups in lexicographic order), and the first best group in
  it. A 1-GPU request therefore gets the lowest free index.

Upstream enumerates every partition, which is exponential (≈2 million partitions for a
2-GPU request on 16 free GPUs). We compute the same maximum by dynamic programming over the
subsets of the free GPUs (:func:`best_partition`), trying candidates in upstream's order, so
the chosen partition — and the returned GPU set — is the one upstream returns (tested against
a direct transcription of the enumeration). Above :data:`MAX_EXACT_GPUS` free GPUs a greedy
grouping stands in. Two deliberate differences: the short,
padded group is never returned (upstream can return it when it outscores every full group,
handing out fewer GPUs than asked), and ``required`` devices are not supported (Kubernetes
passes ``mustIncludeDeviceIDs`` only for devices it already picked; the extender picks the
whole set).

The policy knows nothing of patterns or bandwidth sensitivity: pattern vertex ``i`` runs on
the ``i``-th chosen GPU (ascending), as with the kubelet. Fractional requests (outside the
NVIDIA plugin's scope) get the lowest-index GPU with room.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import cache, lru_cache

import numpy as np

from topology.model import PCIeLevel, Topology
from topology.policies.base import Candidate, Decision, NodeState, Request
from topology.policies.common import (
    MODEL_GPUTOPO,
    candidate,
    check_capacity,
    fractional_decision,
    shareable_gpus,
    whole_decision,
)
from topology.policies.memo import Memo
from topology.policies.registry import register

NAME = "nvidia-best-effort"

#: go-gpuallocator's points per PCIe relation (``P2PLink*``), keyed by our PCIe level.
PCIE_SCORE: dict[PCIeLevel, int] = {
    PCIeLevel.PIX: 50,  # P2PLinkSingleSwitch
    PCIeLevel.PXB: 40,  # P2PLinkMultiSwitch
    PCIeLevel.PHB: 30,  # P2PLinkHostBridge
    PCIeLevel.NODE: 20,  # P2PLinkSameCPU
    PCIeLevel.SYS: 10,  # P2PLinkCrossCPU
}
#: Points per direct NVLink (``SingleNVLINKLink`` = 100 … ``EighteenNVLINKLinks``).
NVLINK_SCORE = 100
MAX_NVLINKS = 18


def pair_score(topology: Topology, a: int, b: int) -> int:
    """go-gpuallocator's pair score of GPUs ``a`` and ``b`` (points; 0 when ``a == b``)."""
    if a == b:
        return 0
    lk = topology.links[a][b]
    score = PCIE_SCORE[lk.pcie]
    if lk.nvlinks > 0 and not lk.nvswitch:
        score += NVLINK_SCORE * min(lk.nvlinks, MAX_NVLINKS)
    return score


@lru_cache(maxsize=64)
def _pair_matrix(topology: Topology) -> tuple[tuple[int, ...], ...]:
    n = topology.size
    return tuple(tuple(pair_score(topology, a, b) for b in range(n)) for a in range(n))


def set_score(topology: Topology, gpus: Sequence[int]) -> int:
    """Sum of :func:`pair_score` over every pair of ``gpus`` (``calculateGPUSetScore``)."""
    m = _pair_matrix(topology)
    return sum(m[a][b] for a, b in itertools.combinations(gpus, 2))


#: Largest free-GPU count solved exactly (the DP holds arrays over all 2**n subsets).
MAX_EXACT_GPUS = 18


@cache
def _combos(m: int, c: int) -> np.ndarray:
    """All c-combinations of range(m) in lexicographic order, ``[C(m, c), c]``."""
    if c == 0:
        return np.zeros((1, 0), dtype=np.int64)
    return np.array(list(itertools.combinations(range(m), c)), dtype=np.int64).reshape(-1, c)


@cache
def _masks_with_pop(n: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Masks over n bits with p bits set, ascending, and their set-bit positions ``[M, p]``."""
    allm = np.arange(1 << n, dtype=np.int64)
    pop = np.zeros(1 << n, dtype=np.int64)
    for i in range(n):
        pop += (allm >> i) & 1
    ms = allm[pop == p]
    bits = np.zeros((len(ms), p), dtype=np.int64)
    col = np.zeros(len(ms), dtype=np.int64)
    for i in range(n):
        has = ((ms >> i) & 1).astype(bool)
        bits[has, col[has]] = i
        col += has
    return ms, bits


def _subset_scores(m: np.ndarray) -> np.ndarray:
    """Set score of every subset of the n free GPUs, indexed by bit mask, ``[2**n]``."""
    n = m.shape[0]
    score = np.zeros(1 << n, dtype=np.int64)
    for j in range(1, n):
        low = np.arange(1 << j, dtype=np.int64)
        contrib = np.zeros(1 << j, dtype=np.int64)
        for i in range(j):
            contrib += ((low >> i) & 1) * m[i, j]
        score[(1 << j) + low] = score[low] + contrib
    return score


def best_partition(
    topology: Topology, free: Sequence[int], size: int
) -> tuple[int, list[tuple[int, ...]]]:
    """The best division of ``free`` into groups of ``size`` (go-gpuallocator's partition rule).

    Dynamic programming over subsets of the free GPUs, layer by layer (subset size), every
    subset's candidates scored at once with numpy. A subset's first group always holds its
    lowest GPU; candidates are tried in upstream's order (lexicographic positions, the padded
    short group's padding sorting last) and the first best one is kept, so the partition is
    the one upstream's exhaustive enumeration finds first. Cost: ``O(Σ_p C(n,p)·C(p-1,k-1))``
    array operations — under 0.1 s for 16 free GPUs.

    Args:
        topology: the node.
        free: free GPU indices.
        size: the requested GPU count, ``1 <= size <= len(free)``.

    Returns:
        ``(total score, groups)``; groups in upstream's enumeration order, the short group
        (the ``len(free) mod size`` left-over GPUs) included as a shorter tuple.

    Raises:
        ValueError: ``size`` is out of range, or more than :data:`MAX_EXACT_GPUS` are free.
    """
    free = sorted(free)
    n = len(free)
    if not 1 <= size <= n:
        raise ValueError(f"cannot divide {n} GPUs into groups of {size}")
    if size == 1:  # upstream: every single-GPU "partition" scores 0; the first wins
        return 0, [(g,) for g in free]
    if n > MAX_EXACT_GPUS:
        raise ValueError(f"{n} free GPUs: the exact partition search is limited to "
                         f"{MAX_EXACT_GPUS}")
    pm = _pair_matrix(topology)
    m = np.array([[pm[a][b] for b in free] for a in free], dtype=np.int64)
    score = _subset_scores(m)
    pad = (-n) % size
    short = size - pad if pad else 0
    neg = -(1 << 60)
    best = np.full(1 << n, neg, dtype=np.int64)
    choice = np.zeros(1 << n, dtype=np.int64)
    best[0] = 0
    for p in range(1, n + 1):
        if p % size == 0:
            families = [size]
        elif pad and p % size == short:
            families = [size, short] if p >= size else [short]
        else:
            continue
        ms, bits = _masks_with_pop(n, p)
        low = np.left_shift(1, bits[:, 0])
        rest = np.left_shift(1, bits[:, 1:])
        rows = np.arange(len(ms))
        found = []
        for g in families:
            idx = _combos(p - 1, g - 1)
            groups = low[:, None] | (rest[:, idx].sum(axis=2) if g > 1 else 0)
            sub = best[ms[:, None] ^ groups]
            vals = np.where(sub == neg, neg, score[groups] + sub)
            a = vals.argmax(axis=1)  # first best candidate = upstream's first
            found.append((vals[rows, a], groups[rows, a], idx[a]))
        if len(found) == 1:
            best[ms], choice[ms] = found[0][0], found[0][1]
            continue
        (v_full, g_full, i_full), (v_short, g_short, i_short) = found
        take_short = v_short > v_full
        for t in np.nonzero(v_short == v_full)[0].tolist():  # tie: upstream order decides
            key_full = tuple(i_full[t].tolist())
            key_short = tuple(i_short[t].tolist()) + (n + 1,) * pad
            take_short[t] = key_short < key_full
        best[ms] = np.where(take_short, v_short, v_full)
        choice[ms] = np.where(take_short, g_short, g_full)
    full_mask = (1 << n) - 1
    if best[full_mask] == neg:  # pragma: no cover - padding always allows a partition
        raise ValueError("no partition found")
    out: list[tuple[int, ...]] = []
    mask = full_mask
    while mask:
        g = int(choice[mask])
        out.append(tuple(free[i] for i in range(n) if g >> i & 1))
        mask ^= g
    return int(best[full_mask]), out


def _greedy_partition(topology: Topology, free: list[int], size: int) -> list[tuple[int, ...]]:
    """Fallback for more than :data:`MAX_EXACT_GPUS` free GPUs (no such machine in the
    catalog): grow each group from the lowest unassigned GPU, adding the GPU with the highest
    pair score to the group so far (ties: lowest index)."""
    pm = _pair_matrix(topology)
    left = list(free)
    groups: list[tuple[int, ...]] = []
    while left:
        group = [left.pop(0)]
        while len(group) < size and left:
            nxt = max(left, key=lambda g: (sum(pm[g][h] for h in group), -g))
            left.remove(nxt)
            group.append(nxt)
        groups.append(tuple(sorted(group)))
    return groups


def choose(
    topology: Topology, free: Sequence[int], size: int
) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """The GPU set go-gpuallocator's best-effort policy returns, and the full groups of the
    best partition (for the runner-up).

    Raises:
        ValueError: ``size`` is out of range.
    """
    if len(free) > MAX_EXACT_GPUS and size > 1:
        groups = _greedy_partition(topology, sorted(free), size)
    else:
        _, groups = best_partition(topology, free, size)
    full = [g for g in groups if len(g) == size]
    best_set = full[0]
    best_score = set_score(topology, best_set)
    for g in full[1:]:
        s = set_score(topology, g)
        if s > best_score:
            best_set, best_score = g, s
    others = sorted((g for g in full if g != best_set), key=lambda g: -set_score(topology, g))
    return tuple(sorted(best_set)), others


@register(NAME, "NVIDIA device plugin's best-effort preferred allocation (go-gpuallocator "
          "link scores, best partition of the free GPUs)", free_set_only=True)
def nvidia_best_effort(
    topology: Topology, state: NodeState, request: Request, memo: Memo
) -> Decision:
    """go-gpuallocator's best-effort allocation reimplemented on our model (module docstring).

    Args:
        topology: the node.
        state: its used GPUs.
        request: whole GPUs (pattern and sensitivity are ignored), or a share.

    Returns:
        A decision whose EffBW is the gputopo-v1 prediction of the pattern on the chosen
        GPUs (vertex i on the i-th GPU).

    Raises:
        NoFit: not enough free GPUs, or no GPU with room for the share.
    """
    if request.fractional:
        gpu = shareable_gpus(topology, state, request)[0]
        return fractional_decision(NAME, topology, state, request, gpu,
                                   reason="fractional request: lowest-index GPU with room")
    free = check_capacity(topology, state, request)
    chosen, others = choose(topology, free, request.count)
    runner: Candidate | None = None
    pattern = request.effective_pattern()
    if others:
        runner = candidate(topology, free, others[0], pattern, others[0], MODEL_GPUTOPO)
    score = set_score(topology, chosen)
    return whole_decision(
        NAME, topology, state, request, chosen, MODEL_GPUTOPO, runner_up=runner,
        reason=f"go-gpuallocator best effort: set score {score} in the best partition of "
        f"{len(free)} free GPUs into groups of {request.count}",
    )
