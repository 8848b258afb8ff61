"""Node scores: how good a node is for a pod, 0–10 — pure (the extender's ``POST /prioritize``
and the simulator's node choice).

A score mixes two terms, each in [0, 1]:

``score = round(10 × (0.7 · quality + 0.3 · (1 − fragmentation)))``

**quality** — how good the GPUs the policy would take on this node are, for this kind of pod:

* *bandwidth-sensitive, several GPUs*: ``EffBW(decision on this node) / EffBW(decision on an
  idle node of the same class)`` (:meth:`topology.policies.evaluate.Evaluator.ideal`; MAPA Fig. 4's
  "ideal" allocation), both by the policy's own EffBW model (MAPA Eq. 2 or gputopo-v1),
  clamped to [0, 1]. 1 = this node still offers the best placement the hardware allows.
* *insensitive, several GPUs*: the PreservedBW the allocation destroys (MAPA Eq. 3),
  ``loss = PB(free before) − PB(free after)``, against the worst loss ``count`` GPUs can
  cause on an idle node of the class: ``quality = 1 − loss / max_loss``. Taking GPUs whose
  links to the rest are already useless (their neighbours are busy) costs nothing.
* *one whole GPU* — Gaia Singular (Gaia §III-C, "prefer a free GPU whose sibling is busy"),
  generalised by the access cost: the Gaia access cost (:func:`pair_access_cost`; NVLink 0.5/NV#,
  PCIe PIX 1 … SYS 5) from the chosen GPU to its *nearest other free GPU*, divided by the
  largest pair cost on the class. A GPU whose close siblings are all busy scores 1 (and so does
  the last free GPU of a node); one next to a free NVLink peer scores near 0.
* *a share of one GPU* — Gaia Fragment (Gaia §III-C, best fit on partly used GPUs): on a
  GPU already shared, ``0.5 + 0.5 · fill`` where ``fill`` is the larger of the core and memory
  fractions in use after the share (closest fit → 1); on an idle GPU, ``0.5 ×`` the Singular
  quality above (opening a fresh GPU is worse than filling a shared one).

**fragmentation** — how badly the free GPUs left behind are connected, against the best
any equally many GPUs of this class could be: ``1 − PB(free after) / max_{|S| = k} PB(S)``
with ``k`` = number of free GPUs after the allocation (MAPA Eq. 3 for PB). 0 when ``k ≤ 1``.
The per-class maxima (and minima, for the insensitive quality) are exact for up to
:data:`EXACT_TABLE_GPUS` GPUs (every subset, vectorised) and greedy (peeling the
least/most connected GPU) above; they are kept per topology class in the runner's
:class:`~topology.policies.memo.Memo`.

A node that cannot host the pod scores 0 (the caller's job).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from topology.model import Topology
from topology.policies.bandwidth import pair_access_cost, preserved_bandwidth
from topology.policies.base import FULL_CORE, Decision, NodeState, NoFit, Request
from topology.policies.evaluate import Evaluator
from topology.policies.memo import Memo

#: Highest node score: kube-scheduler's ``MaxExtenderPriority`` (k8s.io/kube-scheduler
#: ``extender/v1``), the scale of a prioritize reply. The extender's wire schema uses it too.
MAX_SCORE = 10
#: Weights of the two terms.
W_QUALITY = 0.7
W_FRAGMENTATION = 0.3
#: Up to this many GPUs the PreservedBW extremes per subset size are exact (2^n subsets).
EXACT_TABLE_GPUS = 16


@dataclass(frozen=True)
class ClassTables:
    """Per-class constants of the score.

    Attributes:
        pb_max: ``pb_max[k]`` = highest PreservedBW (GB/s) of any ``k`` GPUs of the class.
        pb_min: ``pb_min[k]`` = lowest PreservedBW (GB/s) of any ``k`` GPUs.
        max_pair_cost: largest Gaia pair access cost on the class (normaliser).
        exact: the tables are exact (else greedy bounds).
        pb_by_mask: PreservedBW of every GPU subset by bit mask (exact tables only).
    """

    pb_max: tuple[float, ...]
    pb_min: tuple[float, ...]
    max_pair_cost: float
    exact: bool
    pb_by_mask: np.ndarray | None = None

    def preserved(self, topology: Topology, gpus: Sequence[int]) -> float:
        """PreservedBW (GB/s) of ``gpus`` (table lookup when exact)."""
        if self.pb_by_mask is not None:
            m = 0
            for g in gpus:
                m |= 1 << g
            return float(self.pb_by_mask[m])
        return preserved_bandwidth(topology, list(gpus))


def _exact_tables(bw: np.ndarray) -> tuple[np.ndarray, list[float], list[float]]:
    n = bw.shape[0]
    masks = np.arange(1 << n, dtype=np.int64)
    bits = [((masks >> i) & 1).astype(np.float64) for i in range(n)]
    pb = np.zeros(1 << n, dtype=np.float64)
    for i in range(n):
        row = np.zeros(1 << n, dtype=np.float64)
        for j in range(i + 1, n):
            if bw[i, j]:
                row += bits[j] * bw[i, j]
        pb += bits[i] * row
    pop = np.zeros(1 << n, dtype=np.int64)
    for b in bits:
        pop += b.astype(np.int64)
    pb_max = [float(pb[pop == k].max()) for k in range(n + 1)]
    pb_min = [float(pb[pop == k].min()) for k in range(n + 1)]
    return pb, pb_max, pb_min


def _greedy_tables(bw: np.ndarray) -> tuple[list[float], list[float]]:
    n = bw.shape[0]

    def peel(pick_max: bool) -> list[float]:
        alive = list(range(n))
        values = [0.0] * (n + 1)
        total = float(bw.sum() / 2)
        values[n] = total
        while len(alive) > 1:
            deg = {g: float(sum(bw[g, o] for o in alive if o != g)) for g in alive}
            # to keep PB high drop the least connected GPU; to keep it low, the most
            drop = (min if pick_max else max)(alive, key=lambda g: (deg[g], g))
            total -= deg[drop]
            alive.remove(drop)
            values[len(alive)] = total
        return values

    return peel(True), peel(False)


def class_tables(topology: Topology, memo: Memo | None = None) -> ClassTables:
    """The :class:`ClassTables` of ``topology``'s class, kept in ``memo`` (computed once per
    class; None = computed now and not kept)."""
    if memo is None:
        return _build_class_tables(topology)
    return memo.per_class("score-tables", topology, _build_class_tables)


def _build_class_tables(topology: Topology) -> ClassTables:
    n = topology.size
    bw = np.array(topology.bandwidth_matrix, dtype=np.float64)
    costs = [pair_access_cost(topology, a, b) for a in range(n) for b in range(a + 1, n)]
    max_cost = max(costs) if costs else 1.0
    if n <= EXACT_TABLE_GPUS:
        pb, pb_max, pb_min = _exact_tables(bw)
        tables = ClassTables(tuple(pb_max), tuple(pb_min), max_cost, True, pb)
    else:
        gmax, gmin = _greedy_tables(bw)
        tables = ClassTables(tuple(gmax), tuple(gmin), max_cost, False, None)
    return tables


@dataclass(frozen=True)
class NodeScore:
    """A node's score and its parts.

    Attributes:
        score: 0–10 as sent to kube-scheduler.
        quality: the quality term, [0, 1].
        fragmentation: the fragmentation term, [0, 1].
        kind: which quality rule applied: ``bandwidth``, ``preserve``, ``singular``,
            ``share``.
    """

    score: int
    quality: float
    fragmentation: float
    kind: str


def _clamp(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def _isolation(topology: Topology, gpu: int, others: Sequence[int], tables: ClassTables) -> float:
    """Gaia-cost distance from ``gpu`` to its nearest GPU in ``others`` over the class
    maximum; 1 when ``others`` is empty."""
    if not others:
        return 1.0
    nearest = min(pair_access_cost(topology, gpu, o) for o in others)
    return _clamp(nearest / tables.max_pair_cost) if tables.max_pair_cost > 0 else 1.0


def fragmentation(
    topology: Topology, free_after: Sequence[int], tables: ClassTables | None = None
) -> float:
    """``1 − PB(free_after) / max PB of any len(free_after) GPUs`` of the class, in [0, 1]."""
    t = tables or class_tables(topology)
    k = len(free_after)
    best = t.pb_max[k]
    if k <= 1 or best <= 0:
        return 0.0
    return _clamp(1.0 - t.preserved(topology, free_after) / best)


def quality(
    policy: str, topology: Topology, state: NodeState, request: Request, decision: Decision,
    evaluator: Evaluator, tables: ClassTables | None = None,
) -> tuple[float, str]:
    """The quality term in [0, 1] and the rule used (see the module docstring);
    ``evaluator`` makes the idle-node reference decision, ``tables`` default to the class's
    in its memo.

    Raises:
        UnknownPolicy: ``policy`` is not registered (for the idle-node reference).
    """
    t = tables or class_tables(topology, evaluator.memo)
    free = state.free_gpus(topology)
    if request.fractional:
        g = decision.gpus[0]
        used = state.used(g)
        others = [f for f in free if f != g]
        if used.idle:
            return 0.5 * _isolation(topology, g, others, t), "share"
        core = (used.core_percent + request.core_percent) / FULL_CORE
        mem_total = topology.gpus[g].memory_mib
        mem = (used.memory_mib + request.memory_mib) / mem_total if mem_total > 0 else 0.0
        return 0.5 + 0.5 * _clamp(max(core, mem)), "share"
    if request.count == 1:
        g = decision.gpus[0]
        return _isolation(topology, g, [f for f in free if f != g], t), "singular"
    if request.sensitive:
        try:
            best = evaluator.ideal(policy, topology, request).effective_bandwidth_gbps
        except NoFit:
            return 0.0, "bandwidth"
        if best <= 0:
            return (1.0 if decision.effective_bandwidth_gbps >= best else 0.0), "bandwidth"
        return _clamp(decision.effective_bandwidth_gbps / best), "bandwidth"
    chosen = set(decision.gpus)
    before = t.preserved(topology, free)
    after = t.preserved(topology, [f for f in free if f not in chosen])
    n = topology.size
    max_loss = t.pb_max[n] - t.pb_min[n - request.count]
    if max_loss <= 0:
        return 1.0, "preserve"
    return _clamp(1.0 - (before - after) / max_loss), "preserve"


def node_score(
    policy: str, topology: Topology, state: NodeState, request: Request, decision: Decision,
    *, evaluator: Evaluator,
) -> NodeScore:
    """Score ``decision`` (made by ``policy`` on this node) 0–10.

    Args:
        policy: the policy that made ``decision`` (its idle-node decision is the reference).
        topology: the node.
        state: the node's used GPUs *before* the decision.
        request: the pod's request.
        decision: where the pod would go on this node.
        evaluator: the runner's evaluator: it makes the idle-node reference decision and its
            memo keeps the class's tables.

    Returns:
        ``round(10 × (0.7 · quality + 0.3 · (1 − fragmentation)))`` with its parts.
    """
    t = class_tables(topology, evaluator.memo)
    q, kind = quality(policy, topology, state, request, decision, evaluator, t)
    chosen = set(decision.gpus)
    free_after = [f for f in state.free_gpus(topology) if f not in chosen]
    frag = fragmentation(topology, free_after, t)
    raw = MAX_SCORE * (W_QUALITY * q + W_FRAGMENTATION * (1.0 - frag))
    score = max(0, min(MAX_SCORE, int(round(raw))))
    return NodeScore(score, q, frag, kind)
