"""Node scores: how good a node is for a pod, 0–10 — pure (the extender's ``POST /prioritize``
and the simulator's node choice).

A score mixes two terms, each in [0, 1], and for a policy that weighs the waiting jobs a third:

``score = round(10 × (0.7 · quality + 0.3 · (1 − fragmentation) − 0.3 · harm))``

**One scale across node types.** kube-scheduler compares the scores of one call's nodes with
each other, and a cluster may mix machine types. So every yardstick of the quality term that
depends on the hardware is taken over *all* the node classes of the call at once (a
:class:`ScoreScale`, built by :func:`score_scale` from the candidates' topologies): a PCIe box
and a DGX are measured in the same GB/s (or Gaia cost, or Amaral distance) units against the
same reference, so a bandwidth-sensitive pod's idle DGX outscores the PCIe box rather than
both scoring 10 against the best of their own kind. With one class (a homogeneous cluster, the
simulator) the scale is that class's own and the scores are exactly the per-class ones.

**quality** — how good the GPUs the policy would take on this node are, for this kind of pod:

* *bandwidth-sensitive, several GPUs*: ``EffBW(decision on this node) / EffBW*``, where
  ``EffBW*`` is the best EffBW the policy reaches on an *idle* node of any class of the call
  (:meth:`topology.policies.evaluate.Evaluator.ideal`; MAPA Fig. 4's "ideal" allocation,
  taken over the cluster's machine types), both by the policy's own EffBW model (MAPA Eq. 2
  or gputopo-v1), clamped to [0, 1]. 1 = no node type offers this pod better links. For the
  default policy, which decides on every model (:mod:`topology.policies.robust`), the node is
  judged the same way (kind ``robust``): the *worst* model's share, over the models that judge
  the pattern, of the best set an idle node of any class of the call offers, each set at its
  best arrangement — a node that is good under one model and poor under another ranks by the
  poor one.
* *insensitive, several GPUs*: the PreservedBW the allocation destroys (MAPA Eq. 3),
  ``loss = PB(free before) − PB(free after)`` in GB/s, against the worst loss ``count`` GPUs
  can cause on an idle node of any class of the call: ``quality = 1 − loss / max_loss``.
  Taking GPUs whose links to the rest are already useless (their neighbours are busy, or they
  only ever had PCIe) costs nothing, so an insensitive pod leaves the NVLink machines to those
  that need them.
* *one whole GPU* — Gaia Singular (Gaia §III-C, "prefer a free GPU whose sibling is busy"),
  generalised by the access cost: the Gaia access cost (:func:`pair_access_cost`; NVLink 0.5/NV#,
  PCIe PIX 1 … SYS 5) from the chosen GPU to its *nearest other free GPU*, divided by the
  largest pair cost on any class of the call. A GPU whose close siblings are all busy scores 1
  (and so does the last free GPU of a node); one next to a free NVLink peer scores near 0, and
  one on a PCIe box, whose nearest peer is a PCIe switch away, above one on an NVSwitch box.
* *a share of one GPU* — Gaia Fragment (Gaia §III-C, best fit on partly used GPUs): on a
  GPU already shared, ``0.5 + 0.5 · fill`` where ``fill`` is the larger of the core and memory
  fractions in use after the share (closest fit → 1; fractions of the GPU, so the same on every
  type); on an idle GPU, ``0.5 ×`` the Singular quality above (opening a fresh GPU is worse than
  filling a shared one).
* *whole GPUs under a utility policy* (Amaral's ``topo-aware``, ``topo-aware-p``): the
  placement's Amaral utility without its fragmentation term, ``(C + I) / 2`` (Eq. 2 with equal
  weights; Eq. 5, the socket-fill term, is left to the fragmentation term below), where the
  communication term ``C`` is normalised by the lowest idle-node cost ``t*`` of any class of the
  call (Amaral's physical-graph distances — NVLink 1/NV#, a level 1, the SMP bus 20 — are the
  same units on every machine). The policy chose the GPUs by utility; the node ranking follows.

**fragmentation** — how badly the free GPUs left behind are connected, against the best
any equally many GPUs of this class could be: ``1 − PB(free after) / max_{|S| = k} PB(S)``
with ``k`` = number of free GPUs after the allocation (MAPA Eq. 3 for PB). 0 when ``k ≤ 1``.
It stays per class on purpose: it measures how much of *this node's* future the allocation
spoils (a PCIe box can never offer NVLink leftovers; it cannot be blamed for that), while the
cross-type comparison is the quality term's. The per-class maxima (and minima, for the
insensitive quality) are exact for up to :data:`EXACT_TABLE_GPUS` GPUs (every subset,
vectorised) and greedy (peeling the least/most connected GPU) above; they are kept per
topology class in the runner's :class:`~topology.policies.memo.Memo`, and so is each
:class:`ScoreScale`, per (policy, classes, request).

**harm** — for a policy that weighs the waiting jobs (``PolicySpec.lookahead``; issue 24): the
waiting jobs' worst-model cost, in ideal communication times, placed in order on what the
decision leaves (:func:`topology.policies.robust.lookahead_cost`), at most 1. The runner hands
a node only the waiting jobs whose one best home it is
(:func:`topology.policies.robust.waiting_by_node`), so harm is what this node's choice takes
from jobs that cannot go elsewhere as well. Measured in the simulator against kube-scheduler's
spreading (LeastAllocated) and packing (MostAllocated): ``benchmarks/results/ROBUST.md``.

A node that cannot host the pod scores 0 (the caller's job).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from topology.model import Topology
from topology.policies import amaral, robust
from topology.policies.bandwidth import pair_access_cost, preserved_bandwidth
from topology.policies.base import FULL_CORE, Decision, NodeState, NoFit, Request
from topology.policies.evaluate import Evaluator
from topology.policies.memo import Memo
from topology.policies.registry import get_policy

#: Highest node score: kube-scheduler's ``MaxExtenderPriority`` (k8s.io/kube-scheduler
#: ``extender/v1``), the scale of a prioritize reply. The extender's wire schema uses it too.
MAX_SCORE = 10
#: Weights of the two terms.
W_QUALITY = 0.7
W_FRAGMENTATION = 0.3
#: Weight of the harm to the waiting jobs (a lookahead policy's decisions; module docstring).
W_HARM = 0.3
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
class ScoreScale:
    """The yardsticks one request's node scores share across the node classes of one call
    (module docstring, "One scale across node types").

    Attributes:
        classes: the topology classes it was taken over (sorted; part of cache keys).
        effbw_gbps: the best EffBW (GB/s) the policy predicts for the request on an idle node
            of any of the classes; None when no class can host it or the request is not a
            bandwidth-sensitive multi-GPU one.
        max_loss_gbps: the most PreservedBW (GB/s, MAPA Eq. 3) ``count`` GPUs take out of an
            idle node of any of the classes (insensitive multi-GPU requests; else 0).
        max_pair_cost: the largest Gaia pair access cost on any of the classes.
        best_comm_cost: Amaral's ``t*``, the lowest pattern cost (physical-graph distance
            units) an idle node of any of the classes gives the request (utility-scored
            policies, multi-GPU requests; else None).
        ideal_by_model: for a lookahead policy's bandwidth-sensitive multi-GPU request, the
            best EffBW (GB/s) of each model of :data:`topology.policies.common.MODELS` an
            idle node of any of the classes offers (the best arrangement of the pattern in
            the best set: :mod:`topology.policies.robust`); else None.
    """

    classes: tuple[str, ...]
    effbw_gbps: float | None
    max_loss_gbps: float
    max_pair_cost: float
    best_comm_cost: float | None
    ideal_by_model: tuple[float, ...] | None = None


def score_scale(
    policy: str, topologies: Iterable[Topology], request: Request, evaluator: Evaluator
) -> ScoreScale:
    """The :class:`ScoreScale` of ``request`` under ``policy`` over the classes of
    ``topologies``, kept in ``evaluator``'s memo (one per policy, set of classes and
    request); ``evaluator`` also makes the idle-node reference decisions.

    Raises:
        UnknownPolicy: ``policy`` is not registered.
        ValueError: ``topologies`` is empty.
    """
    by_class = {t.topology_class: t for t in topologies}
    if not by_class:
        raise ValueError("a score scale needs at least one topology")
    classes = tuple(sorted(by_class))

    def build() -> ScoreScale:
        return _build_scale(policy, classes, list(by_class.values()), request, evaluator)

    key = ("score-scale", policy, classes, request.key())
    return evaluator.memo.bounded(key, build, lambda _: 1)


def _build_scale(
    policy: str, classes: tuple[str, ...], topos: list[Topology], request: Request,
    evaluator: Evaluator,
) -> ScoreScale:
    spec = get_policy(policy)
    whole_multi = not request.fractional and request.count > 1
    effbw: float | None = None
    if whole_multi and request.sensitive and not spec.utility_scored:
        for t in topos:
            try:
                e = evaluator.ideal(policy, t, request).effective_bandwidth_gbps
            except NoFit:
                continue
            effbw = e if effbw is None else max(effbw, e)
    max_loss = 0.0
    if whole_multi and not request.sensitive and not spec.utility_scored:
        for t in topos:
            if t.size >= request.count:
                tables = class_tables(t, evaluator.memo)
                loss = tables.pb_max[t.size] - tables.pb_min[t.size - request.count]
                max_loss = max(max_loss, loss)
    best_comm: float | None = None
    if whole_multi and spec.utility_scored:
        pattern = request.effective_pattern()
        costs = [
            amaral.best_cost(t, pattern.size, pattern.edges)
            for t in topos if t.size >= pattern.size
        ]  # fmt: skip
        best_comm = min(costs) if costs else None
    max_cost = max(class_tables(t, evaluator.memo).max_pair_cost for t in topos)
    ideal: tuple[float, ...] | None = None
    if whole_multi and request.sensitive and spec.lookahead:
        found = [robust.model_table(t, request.effective_pattern(), evaluator.memo)
                 for t in topos if t.size >= request.count]
        ideals = [tab.ideal for tab in found if tab is not None]
        if ideals and len(ideals) == len(found):
            ideal = tuple(float(x) for x in np.max(ideals, axis=0))
    return ScoreScale(classes, effbw, max_loss, max_cost, best_comm, ideal)


@dataclass(frozen=True)
class NodeScore:
    """A node's score and its parts.

    Attributes:
        score: 0–10 as sent to kube-scheduler.
        quality: the quality term, [0, 1].
        fragmentation: the fragmentation term, [0, 1].
        kind: which quality rule applied: ``bandwidth``, ``robust``, ``preserve``,
            ``singular``, ``share``, ``utility``, ``colocation``.
        harm: the waiting jobs' worst-model cost on what the decision leaves (ideal
            communication times, at most 1 counted; lookahead policies only, else 0).
    """

    score: int
    quality: float
    fragmentation: float
    kind: str
    harm: float = 0.0


def _clamp(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def _isolation(topology: Topology, gpu: int, others: Sequence[int], max_cost: float) -> float:
    """Gaia-cost distance from ``gpu`` to its nearest GPU in ``others`` over ``max_cost``
    (the largest pair cost of the scale); 1 when ``others`` is empty."""
    if not others:
        return 1.0
    nearest = min(pair_access_cost(topology, gpu, o) for o in others)
    return _clamp(nearest / max_cost) if max_cost > 0 else 1.0


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
    evaluator: Evaluator, tables: ClassTables | None = None, scale: ScoreScale | None = None,
) -> tuple[float, str]:
    """The quality term in [0, 1] and the rule used (see the module docstring);
    ``evaluator`` makes the idle-node reference decisions, ``tables`` default to the class's
    in its memo.

    Args:
        scale: the call's cross-class yardsticks (None: this node's class alone).

    Raises:
        UnknownPolicy: ``policy`` is not registered (for the idle-node reference).
    """
    t = tables or class_tables(topology, evaluator.memo)
    sc = scale or score_scale(policy, (topology,), request, evaluator)
    free = state.free_gpus(topology)
    if request.fractional:
        g = decision.gpus[0]
        used = state.used(g)
        others = [f for f in free if f != g]
        if used.idle:
            return 0.5 * _isolation(topology, g, others, sc.max_pair_cost), "share"
        core = (used.core_percent + request.core_percent) / FULL_CORE
        mem_total = topology.gpus[g].memory_mib
        mem = (used.memory_mib + request.memory_mib) / mem_total if mem_total > 0 else 0.0
        return 0.5 + 0.5 * _clamp(max(core, mem)), "share"
    if get_policy(policy).utility_scored:
        u = amaral.utility(topology, state, request, decision.mapping, best=sc.best_comm_cost)
        a_cc, a_b, _ = amaral.ALPHA
        return _clamp((a_cc * u.communication + a_b * u.interference) / (a_cc + a_b)), "utility"
    if request.count == 1:
        g = decision.gpus[0]
        return _isolation(topology, g, [f for f in free if f != g], sc.max_pair_cost), "singular"
    if request.sensitive and sc.ideal_by_model is not None:
        table = robust.model_table(topology, request.effective_pattern(), evaluator.memo)
        if table is not None:
            v = table.best[sum(1 << g for g in decision.gpus)]
            cols = list(table.columns)
            ratio = v[cols] / np.maximum(np.array(sc.ideal_by_model)[cols], 1e-9)
            return _clamp(float(ratio.min())), "robust"
    if request.sensitive:
        best = sc.effbw_gbps
        if best is None:
            return 0.0, "bandwidth"
        if best <= 0:
            return (1.0 if decision.effective_bandwidth_gbps >= best else 0.0), "bandwidth"
        return _clamp(decision.effective_bandwidth_gbps / best), "bandwidth"
    chosen = set(decision.gpus)
    before = t.preserved(topology, free)
    after = t.preserved(topology, [f for f in free if f not in chosen])
    if sc.max_loss_gbps <= 0:
        return 1.0, "preserve"
    return _clamp(1.0 - (before - after) / sc.max_loss_gbps), "preserve"


def colocation_score(decision: Decision) -> NodeScore:
    """Score a co-location decision 0–10 from the policy's own cross-node preference
    (``Decision.colocation.rank``, lower = better), so kube-scheduler ranks nodes as the
    policy would:

    * ``colocate`` (Tabrizian Algorithm 2: the GPU with the lowest ΣC): ``10 · c₀ / (c₀ + ΣC)``
      with ``c₀ = threshold / 40`` (1·10⁶ at the default): an idle GPU scores 10, a GPU whose
      jobs hold one ``c₀`` of C scores 5;
    * ``gputopo`` (tiers, :mod:`topology.policies.colocate`): tier 0 (an isolated idle GPU) 10;
      tier 1 (a worthwhile join) 7–9 by throughput gain; tier 2 (an idle GPU that breaks a
      group) 3–6, lower for more PreservedBW lost; tier 3 (a small-gain join) 1–2;
    * ``exclusive``: 10; ``random-colocate``: 1–10 from its random rank.

    Fragmentation is left out: where a shared job goes is the policy's whole answer (its
    tiers already weigh the PreservedBW an idle GPU costs).

    Raises:
        ValueError: ``decision`` is not a co-location decision.
    """
    c = decision.colocation
    if c is None:
        raise ValueError("not a co-location decision")
    rank = c.rank
    policy = decision.policy
    if policy == "colocate":
        c0 = c.threshold / 40.0
        q = c0 / (c0 + max(0.0, rank[0] if rank else 0.0))
    elif policy == "random-colocate":
        q = 1.0 - 0.9 * (rank[0] if rank else 0.0)
    elif policy == "exclusive" or not rank:
        q = 1.0
    else:  # gputopo's tiers
        tier = int(rank[0])
        if tier == 0:
            q = 1.0
        elif tier == 1:
            q = 0.7 + 0.2 * _clamp(c.chosen.throughput_gain)
        elif tier == 2:
            lost = rank[1] if len(rank) > 1 else 0.0
            q = 0.3 + 0.3 / (1.0 + lost / 100.0)
        else:
            q = 0.1 + 0.1 * _clamp(c.chosen.throughput_gain)
    q = _clamp(q)
    return NodeScore(score=int(round(10 * q)), quality=q, fragmentation=0.0, kind="colocation")


def node_score(
    policy: str, topology: Topology, state: NodeState, request: Request, decision: Decision,
    *, evaluator: Evaluator, scale: ScoreScale | None = None,
) -> NodeScore:
    """Score ``decision`` (made by ``policy`` on this node) 0–10.

    Args:
        policy: the policy that made ``decision`` (its idle-node decisions are the
            references).
        topology: the node.
        state: the node's used GPUs *before* the decision.
        request: the pod's request.
        decision: where the pod would go on this node.
        evaluator: the runner's evaluator: it makes the idle-node reference decisions and its
            memo keeps the class's tables and the scales.
        scale: the yardsticks shared by every node of the call (:func:`score_scale` over
            their topologies); None = this node's class alone.

    Returns:
        ``round(10 × (0.7 · quality + 0.3 · (1 − fragmentation)))`` with its parts; for a
        co-location slot :func:`colocation_score`.

    Raises:
        UnknownPolicy: ``policy`` is not registered.
    """
    if decision.colocation is not None:
        return colocation_score(decision)
    t = class_tables(topology, evaluator.memo)
    q, kind = quality(policy, topology, state, request, decision, evaluator, t, scale)
    chosen = set(decision.gpus)
    free_after = [f for f in state.free_gpus(topology) if f not in chosen]
    frag = fragmentation(topology, free_after, t)
    harm = 0.0
    if request.upcoming and not request.fractional and get_policy(policy).lookahead:
        left = np.array([sum(1 << g for g in free_after)], dtype=np.int64)
        cost = robust.lookahead_cost(topology, left, request.upcoming, evaluator.memo)[0]
        harm = min(1.0, float(cost.max()))
    raw = MAX_SCORE * (W_QUALITY * q + W_FRAGMENTATION * (1.0 - frag) - W_HARM * harm)
    score = max(0, min(MAX_SCORE, int(round(raw))))
    return NodeScore(score, q, frag, kind, harm)
