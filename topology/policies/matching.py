"""Pattern matching (MAPA §3.3) and exact/near-exact search for the best match.

MAPA finds every match M of the pattern graph P in the hardware graph G of the free GPUs
(a subgraph monomorphism; G is complete, so every injective map of P's vertices onto free GPUs
is a match) and scores each one. Enumerating matches one by one explodes: an 8-GPU ring has
C(16,8) · 7!/2 ≈ 32 million matches in a 16-GPU graph. This module splits a match into the
GPU *subset* it occupies and the *arrangement* of the pattern inside it:

* arrangements: the distinct edge sets of P under every permutation of its k vertices —
  k!/|Aut(P)| of them (ring: (k-1)!/2; all-to-all: 1). Computed once per pattern, cached.
* subsets: every k-subset of the free GPUs when ``subsets × arrangements`` fits the exact
  budget (always on 8-GPU machines); otherwise the subsets ranked best by the mapping-free
  all-pairs score of the same objective are kept, as many as the budget allows
  ("proxy pruning"). All scores are evaluated vectorised with numpy.

A subset's best arrangement does not depend on which other GPUs are free: AggBW and both
EffBW models are functions of the matched edges alone, and PreservedBW (Eq. 3) is the same for
every arrangement of one subset. So for each (topology class, pattern, objectives) whose
``C(n, k) × arrangements`` fits :data:`TABLE_BUDGET` a :class:`SubsetTable` holds every
k-subset of the machine with its best arrangement and scores, built once and kept in the
runner's :class:`~topology.policies.memo.Memo` (with the class's link matrices). A
decision then only keeps the table rows inside the free mask (a vectorised bit test, in the
same lexicographic order as ``itertools.combinations(free, k)``), computes PreservedBW for
those rows when an objective needs it, and ranks them — exact, and the same ranking rule as
the enumeration. On a 16-GPU machine this is what makes a decision cost tens of microseconds
instead of milliseconds, and it keeps rings of 6 on 16 GPUs exact where the per-decision
budget pruned.

:func:`search` is exact whenever ``exact`` is True in its result; the benchmark
``benchmarks/bench_matching.py`` measures the distance of the pruned search from the
exhaustive optimum on MAPA's 16-GPU torus and cube-mesh.

For a cross-check against networkx, :func:`networkx_matches` enumerates matches with
``networkx.algorithms.isomorphism.GraphMatcher.subgraph_monomorphisms_iter`` (used in tests).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from networkx.algorithms import isomorphism

from topology.model import Topology
from topology.patterns import Pattern
from topology.policies.bandwidth import (
    GPUTOPO_BETA,
    GPUTOPO_P,
    GPUTOPO_SCALE,
    effbw_mapa,
    link_class,
)
from topology.policies.memo import Memo

Objective = Literal["aggbw", "effbw-mapa", "effbw-gputopo", "preserved"]

#: Largest number of (subset, arrangement) pairs scored exactly for one decision.
EXACT_BUDGET = 400_000
#: Patterns with more vertices than this are arranged by local search, not enumeration.
MAX_ENUM_VERTICES = 8
#: Largest ``C(n, k) × arrangements`` for which a per-class :class:`SubsetTable` is built
#: (once; about 0.3 s of numpy at the limit). Covers every pattern of up to 6 GPUs on 16 GPUs.
TABLE_BUDGET = 1_000_000


@dataclass(frozen=True)
class Match:
    """One scored match.

    Attributes:
        mapping: pattern vertex i → GPU ``mapping[i]``.
        aggbw: pattern AggBW (Eq. 1), GB/s.
        effbw_mapa: Eq. 2 prediction, GB/s.
        effbw_gputopo: gputopo-v1 prediction, GB/s.
        preserved: PreservedBW (Eq. 3) of the free GPUs left, GB/s.
    """

    mapping: tuple[int, ...]
    aggbw: float
    effbw_mapa: float
    effbw_gputopo: float
    preserved: float

    @property
    def gpus(self) -> tuple[int, ...]:
        """The GPU set, ascending."""
        return tuple(sorted(self.mapping))

    def score(self, objective: Objective) -> float:
        """The value of ``objective`` for this match."""
        return {
            "aggbw": self.aggbw,
            "effbw-mapa": self.effbw_mapa,
            "effbw-gputopo": self.effbw_gputopo,
            "preserved": self.preserved,
        }[objective]


@dataclass(frozen=True)
class SearchResult:
    """Best and runner-up matches (different GPU sets), and whether the search was exact."""

    best: Match
    runner_up: Match | None
    exact: bool
    subsets_scored: int


@lru_cache(maxsize=256)
def arrangements(size: int, edges: tuple[tuple[int, int], ...]) -> np.ndarray:
    """Distinct placements of a pattern's edges on positions ``0..size-1``.

    Returns:
        ``int`` array of shape ``[A, m, 2]`` plus, in a parallel cached table, the permutation
        that produced each; ``A = size!/|Aut(P)|`` for ``size <= MAX_ENUM_VERTICES``.
    """
    return _arrangements_and_perms(size, edges)[0]


@lru_cache(maxsize=256)
def _arrangements_and_perms(
    size: int, edges: tuple[tuple[int, int], ...]
) -> tuple[np.ndarray, np.ndarray]:
    """The distinct images of ``edges`` under every permutation of ``0..size-1``, each with
    the first permutation (in ``itertools.permutations`` order) that produced it, in the
    order first produced: ``([A, m, 2] int64 edge arrays, [A, size] int64 permutations)``.

    Vectorised over all ``size!`` permutations (an edge image is its sorted list of
    ``lo * size + hi`` codes; ``np.unique`` finds the first occurrence of each): the same
    tables as mapping and comparing one permutation at a time, in 17–70 ms instead of
    0.2–0.7 s for an 8-GPU pattern (the first of a size also builds the permutation array,
    about 45 ms) — the first filter of each pattern size after a restart waited for them
    (``tests/topology/policies/test_matching_arrangements.py`` checks the equality).
    """
    perms = _permutations(size)
    if not edges:
        return np.zeros((1, 0, 2), dtype=np.int64), perms[:1].astype(np.int64)
    e = np.array(edges, dtype=np.int64)
    # narrow integers throughout (one byte an edge up to 16 GPUs): 40,320 × m codes for 8
    wide = np.int16 if size <= 127 else np.int64
    a, b = perms[:, e[:, 0]].astype(wide), perms[:, e[:, 1]].astype(wide)
    codes = (np.minimum(a, b) * size + np.maximum(a, b)).astype(
        np.uint8 if size <= 16 else wide)
    codes.sort(axis=1)
    rows = np.ascontiguousarray(codes)
    as_bytes = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1])))[:, 0]
    _, first = np.unique(as_bytes, return_index=True)
    first.sort()
    images = codes[first].astype(np.int64)
    return np.stack((images // size, images % size), axis=2), perms[first].astype(np.int64)


@lru_cache(maxsize=4)
def _permutations(size: int) -> np.ndarray:
    """Every permutation of ``0..size-1`` in ``itertools.permutations`` order, ``[size!,
    size]`` (int8: 320 KB for 8 GPUs)."""
    dtype = np.int8 if size <= 127 else np.int64
    return np.array(list(itertools.permutations(range(size))), dtype=dtype).reshape(-1, size)


def _matrices(topology: Topology, memo: Memo) -> tuple[np.ndarray, np.ndarray]:
    """Bandwidth (GB/s) and Eq. 2 link-class matrices ``[n, n]`` of ``topology``'s class
    (kept in ``memo`` per class: every node of a class shares them, whatever its UUIDs)."""
    return memo.per_class("matching-matrices", topology, _build_matrices)


def _build_matrices(topology: Topology) -> tuple[np.ndarray, np.ndarray]:
    n = topology.size
    w = np.array(topology.bandwidth_matrix, dtype=np.float64)
    cls = np.full((n, n), 3, dtype=np.int64)
    for i in range(n):
        for j in range(n):
            if i != j:
                cls[i, j] = link_class(topology.links[i][j].nvlinks)
    w.flags.writeable = False
    cls.flags.writeable = False
    return w, cls


def _scores(
    w: np.ndarray, cls: np.ndarray, subsets: np.ndarray, edge_pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AggBW, Eq. 2 and gputopo-v1 for every (subset, arrangement): arrays ``[S, A]``."""
    a = subsets[:, edge_pos[..., 0]]  # [S, A, m] GPU ids
    b = subsets[:, edge_pos[..., 1]]
    ew = w[a, b]
    m = edge_pos.shape[1]
    if m == 0:
        zeros = np.zeros(ew.shape[:2])
        return zeros, zeros, zeros
    agg = ew.sum(axis=2)
    ec = cls[a, b]
    x = (ec == 0).sum(axis=2).astype(np.float64)
    y = (ec == 1).sum(axis=2).astype(np.float64)
    z = (ec == 2).sum(axis=2).astype(np.float64)
    eq2: np.ndarray = effbw_mapa(x, y, z)  # type: ignore[assignment]  # elementwise
    pm = (np.power(ew, GPUTOPO_P).sum(axis=2) / m) ** (1.0 / GPUTOPO_P)
    gt = GPUTOPO_SCALE * (m**GPUTOPO_BETA) * pm
    return agg, eq2, gt


def _preserved(w: np.ndarray, free: np.ndarray, subsets: np.ndarray) -> np.ndarray:
    """PreservedBW (Eq. 3) for each subset: bandwidth among free GPUs outside it, ``[S]``."""
    wf = w[np.ix_(free, free)]
    total = wf.sum() / 2.0
    deg = w[:, free].sum(axis=1)  # each GPU's bandwidth to the free GPUs
    inner = w[subsets[:, :, None], subsets[:, None, :]].sum(axis=(1, 2)) / 2.0
    out: np.ndarray = total - deg[subsets].sum(axis=1) + inner
    return out


def _objective_values(
    objective: Objective, agg: np.ndarray, eq2: np.ndarray, gt: np.ndarray, pres: np.ndarray
) -> np.ndarray:
    if objective == "aggbw":
        return agg
    if objective == "effbw-mapa":
        return eq2
    if objective == "effbw-gputopo":
        return gt
    return np.broadcast_to(pres[:, None], agg.shape)


def _subset_iter(free: Sequence[int], k: int) -> np.ndarray:
    return np.array(list(itertools.combinations(free, k)), dtype=np.int64).reshape(-1, k)


def _proxy_subsets(
    w: np.ndarray, cls: np.ndarray, free: Sequence[int], k: int, objective: Objective, keep: int
) -> np.ndarray:
    """The ``keep`` best k-subsets by the mapping-free (all-pairs) version of the objective,
    plus the best by PreservedBW, streamed in chunks so memory stays small."""
    free_arr = np.array(free, dtype=np.int64)
    pairs = np.array(list(itertools.combinations(range(k), 2)), dtype=np.int64).reshape(1, -1, 2)
    best: list[tuple[float, tuple[int, ...]]] = []
    it = itertools.combinations(free, k)
    while True:
        chunk = list(itertools.islice(it, 20000))
        if not chunk:
            break
        subs = np.array(chunk, dtype=np.int64)
        agg, eq2, gt = _scores(w, cls, subs, pairs)
        pres = _preserved(w, free_arr, subs)
        vals = _objective_values(objective, agg, eq2, gt, pres)[:, 0]
        top = np.argsort(-vals, kind="stable")[:keep]
        best.extend((float(vals[i]), chunk[i]) for i in top)
        best.sort(key=lambda t: (-t[0], t[1]))
        del best[keep:]
    return np.array([s for _, s in best], dtype=np.int64).reshape(-1, k)


def _local_search_mapping(w: np.ndarray, subset: Sequence[int], pattern: Pattern) -> list[int]:
    """Arrangement of a large pattern inside ``subset`` by deterministic pairwise-swap hill
    climbing on the gputopo-v1 edge sum (used only when the pattern has > 8 vertices)."""
    order = list(subset)

    def cost(o: list[int]) -> float:
        return float(sum(w[o[a], o[b]] ** GPUTOPO_P for a, b in pattern.edges))

    current = cost(order)
    improved = True
    while improved:
        improved = False
        for i in range(len(order)):
            for j in range(i + 1, len(order)):
                order[i], order[j] = order[j], order[i]
                c = cost(order)
                if c < current - 1e-12:
                    current, improved = c, True
                else:
                    order[i], order[j] = order[j], order[i]
    return order


#: Seeds (best pruned candidates) from which :func:`_swap_climb` starts.
CLIMB_SEEDS = 4


def _swap_climb(
    rows: list[Any],
    evaluate: Callable[[np.ndarray], list[Any]],
    rank: Callable[[Any], tuple[float, float, tuple[int, ...]]],
    free: Sequence[int],
    k: int,
) -> list[Any]:
    """Steepest-ascent local search over GPU subsets from the best pruned candidates: swap
    one chosen GPU for one free GPU, score every neighbour exactly (all arrangements), move to
    the best neighbour while it improves. Repairs proxy pruning's misses (e.g. trees, whose
    best subsets are not the best all-pairs subsets). Deterministic."""
    found: list[Any] = []
    known: dict[tuple[int, ...], Any] = {r[2]: r for r in rows}
    for seed in sorted(rows, key=rank)[:CLIMB_SEEDS]:
        current = seed
        while True:
            cur = set(current[2])
            outside = [g for g in free if g not in cur]
            neigh = {tuple(sorted((cur - {a}) | {b})) for a in current[2] for b in outside}
            fresh = sorted(n for n in neigh if n not in known)
            if fresh:
                scored = evaluate(np.array(fresh, dtype=np.int64).reshape(-1, k))
                found.extend(scored)
                known.update((r[2], r) for r in scored)
            if not neigh:
                break
            best = min((known[n] for n in neigh), key=rank)
            if rank(best) < rank(current):
                current = best
            else:
                break
    return found


@dataclass(frozen=True)
class SubsetTable:
    """Every k-subset of a machine's GPUs with its best arrangement of one pattern.

    Built once per (topology class, pattern, objective, secondary) by :func:`subset_table`.
    Rows are in lexicographic order of the GPU tuples (``itertools.combinations(range(n), k)``).

    Attributes:
        masks: ``[S]`` int64 bit masks of the subsets (bit g set = GPU g in the subset).
        gpus: ``[S, k]`` the subsets' GPU indices, ascending.
        arrangement: ``[S]`` index of the best arrangement (into the pattern's arrangement
            table) by the F-independent parts of the objectives.
        values: objective name → ``[S]`` values at that arrangement, GB/s (``aggbw``,
            ``effbw-mapa``, ``effbw-gputopo``).
    """

    masks: np.ndarray
    gpus: np.ndarray
    arrangement: np.ndarray
    values: dict[str, np.ndarray]


def _rows(table: SubsetTable | None) -> int:
    return 0 if table is None else int(table.masks.shape[0])


def subset_table(
    topology: Topology, pattern: Pattern, objective: Objective, secondary: Objective | None,
    memo: Memo,
) -> SubsetTable | None:
    """The :class:`SubsetTable` of ``pattern`` on ``topology``'s class, or None when it would
    exceed :data:`TABLE_BUDGET` (or the pattern has more than :data:`MAX_ENUM_VERTICES`
    vertices). Kept in ``memo`` per (class, pattern edges, objective, secondary), at most
    ``memo.max_rows`` rows in all (:meth:`Memo.bounded`); thread-safe."""
    key = ("subset-table", topology.topology_class, pattern.size, pattern.edges, objective,
           secondary)
    return memo.bounded(
        key, lambda: _build_table(topology, pattern, objective, secondary, memo), _rows
    )


def _build_table(
    topology: Topology, pattern: Pattern, objective: Objective, secondary: Objective | None,
    memo: Memo,
) -> SubsetTable | None:
    n, k = topology.size, pattern.size
    if not 0 < k <= min(n, MAX_ENUM_VERTICES) or n > 62:  # masks are int64
        return None
    edge_pos, _ = _arrangements_and_perms(k, pattern.edges)
    n_arr = edge_pos.shape[0]
    if math.comb(n, k) * n_arr > TABLE_BUDGET:
        return None
    w, cls = _matrices(topology, memo)
    subsets = _subset_iter(range(n), k)
    masks = (np.int64(1) << subsets).sum(axis=1, dtype=np.int64)
    arrangement = np.zeros(subsets.shape[0], dtype=np.int64)
    values = {name: np.zeros(subsets.shape[0]) for name in ("aggbw", "effbw-mapa",
                                                           "effbw-gputopo")}
    chunk = max(1, 2_000_000 // max(1, n_arr * max(1, edge_pos.shape[1])))
    rows = np.arange(chunk)
    for start in range(0, subsets.shape[0], chunk):
        subs = subsets[start : start + chunk]
        agg, eq2, gt = _scores(w, cls, subs, edge_pos)
        # PreservedBW is constant over a subset's arrangements: it cannot pick one
        zeros = np.zeros_like(agg)
        prim = zeros if objective == "preserved" else _objective_values(
            objective, agg, eq2, gt, zeros[:, 0])
        sec = zeros if secondary in (None, "preserved") else _objective_values(
            secondary, agg, eq2, gt, zeros[:, 0])
        idx = _best_arrangement(prim, sec, n_arr)
        r = rows[: subs.shape[0]]
        arrangement[start : start + subs.shape[0]] = idx
        for name, arr in (("aggbw", agg), ("effbw-mapa", eq2), ("effbw-gputopo", gt)):
            values[name][start : start + subs.shape[0]] = arr[r, idx]
    return SubsetTable(masks, subsets, arrangement, values)


def _best_arrangement(prim: np.ndarray, sec: np.ndarray, n_arr: int) -> np.ndarray:
    """Per row of ``[S, A]`` scores: the arrangement with the highest primary, then secondary,
    then the lowest index."""
    order = np.lexsort((np.broadcast_to(-np.arange(n_arr), prim.shape), sec, prim), axis=-1)
    return order[:, -1]


def _search_table(
    topology: Topology, table: SubsetTable, free: Sequence[int], pattern: Pattern,
    objective: Objective, secondary: Objective | None, memo: Memo,
) -> SearchResult:
    """:func:`search` through a :class:`SubsetTable` (exact)."""
    w, _ = _matrices(topology, memo)
    fmask = 0
    for g in free:
        fmask |= 1 << g
    sel = np.flatnonzero((table.masks & ~fmask) == 0)  # lexicographic, like combinations()
    free_arr = np.array(free, dtype=np.int64)
    pres: np.ndarray | None = None
    if objective == "preserved" or secondary == "preserved":
        pres = _preserved(w, free_arr, table.gpus[sel])

    def vals(obj: Objective) -> np.ndarray:
        return pres if obj == "preserved" else table.values[obj][sel]  # type: ignore[return-value]

    prim = vals(objective)
    sec = vals(secondary) if secondary else np.zeros(sel.shape[0])
    # primary desc, secondary desc (rounded to kill float noise), then the lexicographically
    # smallest GPU set: lexsort is stable and the rows are already in that order
    order = np.lexsort((-np.round(sec, 9), -np.round(prim, 9)))
    _, perms = _arrangements_and_perms(pattern.size, pattern.edges)

    def build(pos: int) -> Match:
        row = int(sel[pos])
        subset = table.gpus[row]
        perm = perms[int(table.arrangement[row])]
        p = float(pres[pos]) if pres is not None else float(
            _preserved(w, free_arr, subset.reshape(1, -1))[0])
        return Match(
            mapping=tuple(int(subset[perm[v]]) for v in range(pattern.size)),
            aggbw=float(table.values["aggbw"][row]),
            effbw_mapa=float(table.values["effbw-mapa"][row]),
            effbw_gputopo=float(table.values["effbw-gputopo"][row]),
            preserved=p,
        )

    best = build(int(order[0]))
    runner = build(int(order[1])) if order.shape[0] > 1 else None
    return SearchResult(best, runner, True, int(sel.shape[0]))


def search(
    topology: Topology,
    free: Sequence[int],
    pattern: Pattern,
    objective: Objective,
    secondary: Objective | None = None,
    *,
    memo: Memo | None = None,
    budget: int = EXACT_BUDGET,
    table: bool = True,
) -> SearchResult:
    """Best match of ``pattern`` in the free GPUs by ``objective`` (ties: ``secondary``, then
    the lexicographically smallest GPU set, then the first arrangement).

    Args:
        topology: the node.
        free: free GPU indices (ascending); ``len(free) >= pattern.size``.
        pattern: the pattern graph P (k vertices).
        objective: what to maximise: ``aggbw`` (MAPA Eq. 1), ``effbw-mapa`` (Eq. 2),
            ``effbw-gputopo`` (monotone model) or ``preserved`` (Eq. 3).
        secondary: tie-breaker objective.
        memo: where the class's matrices and subset tables are kept (the runner's; None = a
            fresh one for this call: same result, built from scratch).
        budget: most (subset, arrangement) pairs to score exactly per decision.
        table: use the class's :class:`SubsetTable` when it fits :data:`TABLE_BUDGET`
            (exact; False forces the per-decision enumeration, for tests and benchmarks).

    Returns:
        The best and runner-up matches; ``exact`` tells whether every match was considered.

    Raises:
        ValueError: fewer free GPUs than pattern vertices.

    Notes:
        Cost with a table: ``C(|free|, k)`` rows; without: ``C(|free|, k) · k!/|Aut(P)| · m``
        array operations when exact.
    """
    k = pattern.size
    free = sorted(free)
    if len(free) < k or k == 0:
        raise ValueError(f"{len(free)} free GPUs cannot host a {k}-GPU pattern")
    if memo is None:
        memo = Memo()
    if table:
        tab = subset_table(topology, pattern, objective, secondary, memo)
        if tab is not None:
            return _search_table(topology, tab, free, pattern, objective, secondary, memo)
    w, cls = _matrices(topology, memo)
    free_arr = np.array(free, dtype=np.int64)
    enum = k <= MAX_ENUM_VERTICES
    if enum:
        edge_pos, perms = _arrangements_and_perms(k, pattern.edges)
    else:
        edge_pos = np.array(pattern.edges, dtype=np.int64).reshape(1, -1, 2)
        perms = np.arange(k, dtype=np.int64).reshape(1, k)
    n_arr = edge_pos.shape[0]
    n_subsets = math.comb(len(free), k)
    exact = enum and n_subsets * n_arr <= budget
    if exact or not enum and n_subsets <= budget:
        subsets = _subset_iter(free, k)
    else:
        keep = max(8, budget // n_arr)
        proxy_obj: Objective = objective if objective != "aggbw" else "aggbw"
        subsets = _proxy_subsets(w, cls, free, k, proxy_obj, keep)
    if not enum:
        exact = False

    Row = tuple[float, float, tuple[int, ...], int, int]
    all_subsets: list[np.ndarray] = []
    pres_parts: list[np.ndarray] = []

    def evaluate(cands: np.ndarray) -> list[Row]:
        """Best arrangement of each candidate subset: rows (primary, secondary, GPU tuple,
        row id into the concatenated subset table, arrangement index)."""
        if not enum:
            cands = np.array(
                [_local_search_mapping(w, list(c), pattern) for c in cands], dtype=np.int64
            ).reshape(-1, k)
        base = sum(a.shape[0] for a in all_subsets)
        pres_all = _preserved(w, free_arr, cands)
        all_subsets.append(cands)
        pres_parts.append(pres_all)
        out: list[Row] = []
        chunk = max(1, 2_000_000 // max(1, n_arr * max(1, edge_pos.shape[1])))
        for start in range(0, cands.shape[0], chunk):
            subs = cands[start : start + chunk]
            agg, eq2, gt = _scores(w, cls, subs, edge_pos)
            pres = pres_all[start : start + chunk]
            prim = _objective_values(objective, agg, eq2, gt, pres)
            sec = (
                _objective_values(secondary, agg, eq2, gt, pres)
                if secondary
                else np.zeros_like(prim)
            )
            # best arrangement per subset: max primary, then secondary, then first arrangement
            idx = _best_arrangement(prim, sec, n_arr)
            for r in range(subs.shape[0]):
                a = int(idx[r])
                out.append(
                    (
                        float(prim[r, a]),
                        float(sec[r, a]),
                        tuple(sorted(subs[r].tolist())),
                        base + start + r,
                        a,
                    )
                )
        return out

    def rank(row: Row) -> tuple[float, float, tuple[int, ...]]:
        # primary desc, secondary desc, GPU tuple asc (rounded to kill float noise)
        return (-round(row[0], 9), -round(row[1], 9), row[2])

    best_rows = evaluate(subsets)
    if not exact:
        best_rows.extend(_swap_climb(best_rows, evaluate, rank, free, k))
        # one row per GPU set (the climb may revisit a pruned candidate)
        unique: dict[tuple[int, ...], Row] = {}
        for row in best_rows:
            if row[2] not in unique or rank(row) < rank(unique[row[2]]):
                unique[row[2]] = row
        best_rows = list(unique.values())
    best_rows.sort(key=rank)
    subset_rows = np.concatenate(all_subsets)
    pres_table = np.concatenate(pres_parts)

    def build(row: Row) -> Match:
        _, _, _, si, ai = row
        subset = subset_rows[si]
        perm = perms[ai] if enum else np.arange(k)
        mapping = tuple(int(subset[perm[v]]) for v in range(k))
        e = edge_pos[ai : ai + 1] if enum else edge_pos
        agg, eq2, gt = _scores(w, cls, subset.reshape(1, -1), e)
        return Match(
            mapping=mapping,
            aggbw=float(agg[0, 0]),
            effbw_mapa=float(eq2[0, 0]),
            effbw_gputopo=float(gt[0, 0]),
            preserved=float(pres_table[si]),
        )

    best = build(best_rows[0])
    runner = build(best_rows[1]) if len(best_rows) > 1 else None
    return SearchResult(best, runner, exact, len(best_rows))


def networkx_matches(
    topology: Topology, free: Sequence[int], pattern: Pattern
) -> Iterator[dict[int, int]]:
    """Every match of ``pattern`` in the free GPUs' hardware graph, as networkx finds them
    (``GraphMatcher.subgraph_monomorphisms_iter``): dicts GPU → pattern vertex. Exponential;
    for tests and small cases."""
    g = topology.hardware_graph(free)
    gm = isomorphism.GraphMatcher(g, pattern.graph())
    yield from gm.subgraph_monomorphisms_iter()
