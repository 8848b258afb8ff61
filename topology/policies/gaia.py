"""Gaia: the resource-access cost tree and its three schedulers (Song et al., Tencent).

Gaia §III-B turns a node's GPU topology into a *resource-access cost tree*: the leaves are
GPUs, each internal node groups the GPUs that meet at one point of the PCIe hierarchy, and
every node carries an access cost — SOC (SYS) > PHB > PXB > PIX. Algorithm 1 dispatches a
request of m GPUs to one of three sub-algorithms:

* 0 < m < 1 → **Fragment** (Algorithm 2): best fit among partly used GPUs, else the whole
  idle GPU with the lowest access cost.
* m = 1 → **Singular** (Algorithm 3): a free GPU whose sibling is busy, so idle subtrees
  stay whole for multi-GPU jobs (Fig. 5); else the idle GPU with the lowest access cost.
* m > 1 → **Link** (Algorithm 4): the subtree holding ≥ m free GPUs with the lowest
  ``TotalCost = m × (access cost of its children)``; the m GPUs are taken inside it.

How this module reads the paper (it is terse, and its figures are not in the text):

* **Tree shape.** Complete-linkage agglomerative clustering of the GPUs on the pairwise key
  ``(PCIe level, access cost)``, compared lexicographically, so a set of GPUs whose largest
  pairwise PCIe level is L is a subtree (exact for real PCIe trees, which are ultrametric).
  Merges at an equal key collapse into one n-ary node. NODE (newer drivers) sits between PHB
  and SYS; SOC is read as SYS.
* **NVLink** is a level *below* PIX inside the PCIe hierarchy: a pair's access cost is
  ``bandwidth.pair_access_cost`` (0.5 / number of NVLinks for NVLinked pairs, else
  ``ACCESS_COST[level]``). NVLink never moves a GPU out of its PCIe subtree — the cube-mesh
  links of a DGX-1 that cross sockets are not ultrametric and would make the tree
  arbitrary — but it (a) splits a PCIe group into NVLink groups (e.g. two NVLink-bridged
  pairs on one PIX switch), (b) lowers the cost of a node all of whose GPU pairs are
  NVLinked (a DGX-1 PIX pair with NV2 costs 0.25, the fully NVLinked quad 0.5), and (c)
  decides which m GPUs Link takes inside the chosen subtree, where cross links do count.
* **Costs.** An internal node's cost is the largest pairwise access cost among its GPUs (its
  "children's communication mode"), so costs never decrease towards the root. A GPU's own
  access cost (the number beside a leaf in Gaia Fig. 4) is the cost of its parent node —
  what it pays to reach its nearest peers; a one-GPU machine's GPU costs 0.
* **"Sibling busy"** (Algorithm 3's ``Cousin.Resources is 0``) is read as "the GPU's parent
  subtree is not wholly free" (a used, shared or unhealthy GPU makes a subtree not whole).

The tree depends only on the topology and is cached per :class:`Topology`; the free counts
Gaia stores in its nodes are computed from the :class:`NodeState` on each call. Everything
here is pure and deterministic (ties go to the lowest GPU index).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import networkx as nx

from topology.model import PCIeLevel, Topology
from topology.patterns import all_to_all
from topology.policies.bandwidth import all_pairs, pair_access_cost
from topology.policies.base import (
    FULL_CORE,
    Candidate,
    Decision,
    NodeState,
    NoFit,
    Request,
    RequestError,
)
from topology.policies.common import (
    MODEL_GPUTOPO,
    candidate,
    check_capacity,
    fits_share,
    fractional_decision,
    whole_decision,
)
from topology.policies.memo import Memo
from topology.policies.registry import register

NAME = "gaia"

#: Largest number of m-subsets Link scores exhaustively inside one subtree; above it a greedy
#: build plus 1-swap local search picks the set (still deterministic).
EXACT_SUBSET_LIMIT = 5000


# ============================================================================ the tree
@dataclass(frozen=True)
class TreeNode:
    """One node of the access-cost tree.

    Attributes:
        id: position in :attr:`AccessCostTree.nodes` (depth-first pre-order; the root is 0).
        gpus: GPU indices under this node, ascending (a leaf holds exactly its own GPU).
        children: ids of the child nodes, ordered by their lowest GPU index (empty for leaves).
        parent: id of the parent node, None for the root.
        level: for internal nodes, the largest PCIe level between two of its GPUs ("the GPU
            communication mode of the child nodes", Gaia §III-B); None for leaves.
        nvlinks: for internal nodes, the smallest NVLink count over all its GPU pairs (0 when
            some pair has no NVLink); 0 for leaves.
        nvswitch: every GPU pair of the node is joined through NVSwitch.
        cost: access cost. Internal: the largest pairwise access cost among its GPUs. Leaf:
            its parent's cost (0 for a lone GPU).
    """

    id: int
    gpus: tuple[int, ...]
    children: tuple[int, ...]
    parent: int | None
    level: PCIeLevel | None
    nvlinks: int
    nvswitch: bool
    cost: float

    @property
    def is_leaf(self) -> bool:
        """True for a GPU node."""
        return self.level is None

    @property
    def gpu(self) -> int:
        """The GPU of a leaf.

        Raises:
            ValueError: the node is internal.
        """
        if not self.is_leaf:
            raise ValueError("an internal node has no single GPU")
        return self.gpus[0]

    @property
    def label(self) -> str:
        """Short name: ``gpu3`` for leaves; ``PIX``, ``NODE`` or ``PIX+NV2`` /
        ``SYS+NVSwitch`` for internal nodes whose GPU pairs are all NVLinked."""
        if self.level is None:
            return f"gpu{self.gpus[0]}"
        if self.nvswitch:
            return f"{self.level.name}+NVSwitch"
        if self.nvlinks > 0:
            return f"{self.level.name}+NV{self.nvlinks}"
        return self.level.name


def _pair_key(topology: Topology, a: int, b: int) -> tuple[int, float]:
    return (int(topology.links[a][b].pcie), pair_access_cost(topology, a, b))


@dataclass
class _Proto:
    gpus: tuple[int, ...]
    children: list[_Proto]
    level: PCIeLevel | None
    nvlinks: int
    nvswitch: bool
    cost: float

    def signature(self) -> tuple[object, ...]:
        return (self.level, self.nvlinks, self.nvswitch, self.cost)


def _internal(topology: Topology, gpus: tuple[int, ...], children: list[_Proto]) -> _Proto:
    pairs = all_pairs(gpus)
    links = [topology.links[a][b] for a, b in pairs]
    return _Proto(
        gpus=gpus,
        children=children,
        level=PCIeLevel(max(int(lk.pcie) for lk in links)),
        nvlinks=min(lk.nvlinks for lk in links),
        nvswitch=all(lk.nvswitch for lk in links),
        cost=max(pair_access_cost(topology, a, b) for a, b in pairs),
    )


class AccessCostTree:
    """Gaia's resource-access cost tree of one topology (Gaia §III-B, Fig. 4).

    Build it with :func:`access_cost_tree` (cached). Nodes are :class:`TreeNode` values in
    depth-first pre-order; :meth:`leaf` finds a GPU's node. Free counts ("the number of
    available GPU resources" of Gaia's nodes) come from a :class:`NodeState` on demand.
    """

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        root = self._cluster(topology)
        nodes: list[TreeNode] = []

        def emit(p: _Proto, parent: int | None, parent_cost: float) -> int:
            my_id = len(nodes)
            nodes.append(TreeNode(my_id, p.gpus, (), parent, p.level, 0, False, 0.0))
            kids = [emit(c, my_id, p.cost) for c in p.children]
            nodes[my_id] = TreeNode(
                id=my_id,
                gpus=p.gpus,
                children=tuple(kids),
                parent=parent,
                level=p.level,
                nvlinks=p.nvlinks,
                nvswitch=p.nvswitch,
                cost=p.cost if p.level is not None else parent_cost,
            )
            return my_id

        emit(root, None, 0.0)
        self.nodes: tuple[TreeNode, ...] = tuple(nodes)
        self._leaf = {n.gpus[0]: n.id for n in self.nodes if n.is_leaf}

    # ---------------------------------------------------------------- construction
    @classmethod
    def build(cls, topology: Topology) -> AccessCostTree:
        """The tree of ``topology`` (cached per topology; same as :func:`access_cost_tree`)."""
        return access_cost_tree(topology)

    @staticmethod
    def _cluster(topology: Topology) -> _Proto:
        """Complete-linkage agglomerative clustering on ``(PCIe level, access cost)``."""
        clusters: list[_Proto] = [
            _Proto((g,), [], None, 0, False, 0.0) for g in range(topology.size)
        ]
        while len(clusters) > 1:
            best: tuple[tuple[int, float], int, int] | None = None
            for x, y in itertools.combinations(range(len(clusters)), 2):
                link = max(
                    _pair_key(topology, a, b)
                    for a in clusters[x].gpus
                    for b in clusters[y].gpus
                )
                # clusters are kept sorted by lowest GPU, so (x, y) order breaks ties by index
                if best is None or link < best[0]:
                    best = (link, x, y)
            assert best is not None
            _, x, y = best
            gpus = tuple(sorted(clusters[x].gpus + clusters[y].gpus))
            merged = _internal(topology, gpus, [])
            kids: list[_Proto] = []
            for c in (clusters[x], clusters[y]):
                if c.level is not None and c.signature() == merged.signature():
                    kids.extend(c.children)  # same key: one n-ary node, not a chain
                else:
                    kids.append(c)
            merged.children = sorted(kids, key=lambda c: c.gpus[0])
            clusters = [c for i, c in enumerate(clusters) if i not in (x, y)] + [merged]
            clusters.sort(key=lambda c: c.gpus[0])
        return clusters[0]

    # ---------------------------------------------------------------- navigation
    @property
    def root(self) -> TreeNode:
        """The root node (a leaf on a one-GPU machine)."""
        return self.nodes[0]

    def leaf(self, gpu: int) -> TreeNode:
        """The leaf of GPU ``gpu``.

        Raises:
            KeyError: no such GPU.
        """
        return self.nodes[self._leaf[gpu]]

    def parent(self, node: TreeNode) -> TreeNode | None:
        """The parent of ``node`` (None for the root)."""
        return None if node.parent is None else self.nodes[node.parent]

    def ancestors(self, node: TreeNode) -> list[TreeNode]:
        """``node``'s ancestors from its parent up to the root."""
        out: list[TreeNode] = []
        p = self.parent(node)
        while p is not None:
            out.append(p)
            p = self.parent(p)
        return out

    def internal_nodes(self) -> list[TreeNode]:
        """Internal nodes in depth-first pre-order (Algorithm 4's traversal order)."""
        return [n for n in self.nodes if not n.is_leaf]

    def gpu_access_cost(self, gpu: int) -> float:
        """A single GPU's access cost (Gaia §III-B, the number beside a GPU node in Fig. 4):
        the cost of its parent node, i.e. of reaching its nearest peers."""
        return self.leaf(gpu).cost

    # ---------------------------------------------------------------- state-dependent
    @staticmethod
    def free_count(node: TreeNode, free: Iterable[int]) -> int:
        """Free GPUs under ``node`` (Gaia's "number of available GPU resources")."""
        fs = free if isinstance(free, (set, frozenset)) else set(free)
        return sum(1 for g in node.gpus if g in fs)

    def intact_subtree(self, node: TreeNode, free: set[int]) -> TreeNode | None:
        """The largest wholly free subtree among ``node`` and its ancestors (None when
        ``node`` itself is not wholly free). Taking GPUs from ``node`` breaks this subtree."""
        if any(g not in free for g in node.gpus):
            return None
        best = node
        for a in self.ancestors(node):
            if any(g not in free for g in a.gpus):
                break
            best = a
        return best

    # ---------------------------------------------------------------- output
    def to_networkx(self) -> nx.DiGraph:
        """The tree as a networkx DiGraph (edges parent → child); node keys are node ids,
        attributes ``label``, ``gpus``, ``cost``, ``level`` (name or None), ``nvlinks``."""
        g = nx.DiGraph()
        for n in self.nodes:
            g.add_node(
                n.id, label=n.label, gpus=n.gpus, cost=n.cost,
                level=None if n.level is None else n.level.name, nvlinks=n.nvlinks,
            )
            if n.parent is not None:
                g.add_edge(n.parent, n.id)
        return g

    def _status(self, gpu: int, state: NodeState) -> str:
        if gpu in state.unhealthy:
            return "unhealthy"
        u = state.used(gpu)
        if u.idle:
            return "free"
        if u.residents:
            return f"co-located: {len(u.residents)} job(s), {u.resident_memory_mib} MiB"
        if u.core_percent >= FULL_CORE:
            return "busy"
        return f"shared {u.core_percent}% core, {u.memory_mib} MiB"

    def render(self, state: NodeState | None = None, *, ascii_only: bool = False) -> str:
        """A text picture of the tree, one node per line (for ``gputopo topology show``).

        Internal nodes show their label, access cost and GPUs; with ``state`` also their free
        count; leaves show the GPU, its access cost and (with ``state``) whether it is free,
        busy, shared or unhealthy.
        """
        tee, elbow, pipe, blank = ("|-- ", "`-- ", "|   ", "    ") if ascii_only else (
            "├── ", "└── ", "│   ", "    ")
        free = set(state.free_gpus(self.topology)) if state is not None else None
        lines = [f"access-cost tree of {self.topology.name} ({self.topology.size} GPUs)"]

        def text(n: TreeNode) -> str:
            if n.is_leaf:
                s = f"{n.label}  cost {_fmt(n.cost)}"
                if state is not None:
                    s += f"  {self._status(n.gpu, state)}"
                return s
            s = f"{n.label}  cost {_fmt(n.cost)}  gpus {_span(n.gpus)}"
            if free is not None:
                s += f"  free {self.free_count(n, free)}/{len(n.gpus)}"
            return s

        def walk(n: TreeNode, prefix: str, last: bool, top: bool) -> None:
            if top:
                lines.append(text(n))
                child_prefix = ""
            else:
                lines.append(prefix + (elbow if last else tee) + text(n))
                child_prefix = prefix + (blank if last else pipe)
            for i, c in enumerate(n.children):
                walk(self.nodes[c], child_prefix, i == len(n.children) - 1, False)

        walk(self.root, "", True, True)
        return "\n".join(lines)

    def to_json(self, state: NodeState | None = None) -> dict[str, object]:
        """Nested JSON form: ``{"topology", "gpus", "root": node}``; a node is
        ``{"label", "level", "nvlinks", "cost", "gpus", "children"}`` (internal) or
        ``{"label", "gpu", "uuid", "cost"}`` (leaf). With ``state``, internal nodes add
        ``"free"`` and leaves ``"status"``."""
        free = set(state.free_gpus(self.topology)) if state is not None else None

        def node(n: TreeNode) -> dict[str, object]:
            if n.is_leaf:
                out: dict[str, object] = {
                    "label": n.label, "gpu": n.gpu,
                    "uuid": self.topology.gpus[n.gpu].uuid, "cost": n.cost,
                }
                if state is not None:
                    out["status"] = self._status(n.gpu, state)
                return out
            out = {
                "label": n.label,
                "level": n.level.name if n.level is not None else None,
                "nvlinks": n.nvlinks,
                "nvswitch": n.nvswitch,
                "cost": n.cost,
                "gpus": list(n.gpus),
            }
            if free is not None:
                out["free"] = self.free_count(n, free)
            out["children"] = [node(self.nodes[c]) for c in n.children]
            return out

        return {"topology": self.topology.name, "gpus": self.topology.size,
                "root": node(self.root)}


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _span(gpus: Sequence[int]) -> str:
    g = list(gpus)
    if len(g) > 1 and g == list(range(g[0], g[-1] + 1)):
        return f"{g[0]}-{g[-1]}"
    return ",".join(map(str, g))


@lru_cache(maxsize=256)
def access_cost_tree(topology: Topology) -> AccessCostTree:
    """The (cached) access-cost tree of ``topology`` (Gaia §III-B)."""
    return AccessCostTree(topology)


# ============================================================================ helpers
def _pair_cost_sum(topology: Topology, gpus: Sequence[int]) -> float:
    return sum(pair_access_cost(topology, a, b) for a, b in all_pairs(gpus))


def _cheapest_subsets(
    topology: Topology, pool: Sequence[int], m: int
) -> list[tuple[int, ...]]:
    """The m GPUs of ``pool`` with the smallest sum of pairwise access costs (so NVLinked
    pairs first), then the second-best set (for the runner-up); ties → lexicographically
    lowest indices. Exhaustive up to :data:`EXACT_SUBSET_LIMIT` subsets; above it greedy
    growth + 1-swap descent gives the best set only."""
    pool = sorted(pool)
    if m >= len(pool):
        return [tuple(pool)]
    if math.comb(len(pool), m) <= EXACT_SUBSET_LIMIT:
        return heapq.nsmallest(
            2,
            itertools.combinations(pool, m),
            key=lambda s: (round(_pair_cost_sum(topology, s), 9), s),
        )
    a, b = min(all_pairs(pool), key=lambda p: (pair_access_cost(topology, *p), p))
    chosen = [a, b]
    while len(chosen) < m:
        nxt = min(
            (g for g in pool if g not in chosen),
            key=lambda g: (sum(pair_access_cost(topology, g, c) for c in chosen), g),
        )
        chosen.append(nxt)
    best = round(_pair_cost_sum(topology, chosen), 9)
    while True:  # 1-swap descent: first strictly improving swap, until none is left
        swap = next(
            (
                (trial, cost)
                for g_out in sorted(chosen)
                for g_in in pool
                if g_in not in chosen
                for trial in [sorted([c for c in chosen if c != g_out] + [g_in])]
                for cost in [round(_pair_cost_sum(topology, trial), 9)]
                if cost < best
            ),
            None,
        )
        if swap is None:
            break
        chosen, best = swap
    return [tuple(sorted(chosen))]


def _whole_candidate(
    topology: Topology, free: Sequence[int], request: Request, gpus: Sequence[int]
) -> Candidate:
    gs = tuple(sorted(gpus))
    pattern = request.effective_pattern() if len(gs) == request.count else all_to_all(len(gs))
    return candidate(topology, free, gs, pattern, gs, MODEL_GPUTOPO)


# ============================================================================ Fragment
def fragment(
    topology: Topology, state: NodeState, request: Request, *, policy_name: str = NAME
) -> Decision:
    """Gaia Fragment (Gaia §III-B, Algorithm 2): place a share (0 < m < 1) of one GPU.

    1. Candidates are the *fragment nodes*: healthy GPUs already partly used (some core or
       memory taken, core below 100 %) with room for the share (``common.fits_share``: core
       percent and memory MiB). The winner has the least core left that still holds m (best
       fit), then the least memory left, then the lowest index.
    2. If there is none, a whole idle GPU with room: the lowest access cost
       (:meth:`AccessCostTree.gpu_access_cost`), ties → the one whose wholly free subtree is
       smallest (a GPU whose sibling is already used first), then the lowest index.

    Args:
        topology: the node.
        state: its used GPUs.
        request: a fractional request (``count == 0``; core percent and/or memory MiB).
        policy_name: name written into the decision (the default policy reuses this).

    Returns:
        A fractional decision for one GPU; ``runner_up`` is the next-ranked GPU.

    Raises:
        RequestError: the request is not fractional.
        NoFit: no GPU has room for the share.
    """
    if not request.fractional:
        raise RequestError(f"Fragment places a share of one GPU; the pod asks for {request.count}")
    tree = access_cost_tree(topology)
    free = state.free_gpus(topology)
    free_set = set(free)

    frag: list[tuple[tuple[int, int, int], int]] = []
    for g in range(topology.size):
        u = state.used(g)
        if g in free_set or u.core_percent >= FULL_CORE:
            continue
        if fits_share(topology, state, request, g):
            core_left = FULL_CORE - u.core_percent - request.core_percent
            mem_left = topology.gpus[g].memory_mib - u.memory_mib - request.memory_mib
            frag.append(((core_left, mem_left, g), g))
    frag.sort()

    def idle_key(g: int) -> tuple[float, int, int]:
        intact = tree.intact_subtree(tree.leaf(g), free_set)
        return (tree.gpu_access_cost(g), len(intact.gpus) if intact else 0, g)

    idle = sorted((g for g in free if fits_share(topology, state, request, g)), key=idle_key)
    ranked = [g for _, g in frag] + idle
    if not ranked:
        raise NoFit(
            f"no GPU has {request.core_percent}% vGPU-core and {request.memory_mib} MiB free "
            f"(Gaia Fragment: no partly used GPU fits and no idle GPU has room)"
        )
    best = ranked[0]
    runner = None
    if len(ranked) > 1:
        r = ranked[1]
        runner = candidate(topology, free, (r,), all_to_all(1), (r,), MODEL_GPUTOPO)
    if frag:
        u = state.used(best)
        reason = (
            f"Gaia Fragment (Algorithm 2): best fit among {len(frag)} partly used GPU(s); "
            f"gpu{best} has {FULL_CORE - u.core_percent}% core left for {request.core_percent}%"
        )
    else:
        reason = (
            f"Gaia Fragment (Algorithm 2): no partly used GPU fits; idle gpu{best} with the "
            f"lowest access cost {_fmt(tree.gpu_access_cost(best))}"
        )
    return fractional_decision(
        policy_name, topology, state, request, best, runner_up=runner, reason=reason
    )


# ============================================================================ Singular
def _singular_ranking(
    topology: Topology, state: NodeState
) -> list[tuple[tuple[int, int, float, int], int]]:
    tree = access_cost_tree(topology)
    free = state.free_gpus(topology)
    free_set = set(free)
    ranked = []
    for g in free:
        leaf = tree.leaf(g)
        intact = tree.intact_subtree(leaf, free_set)
        assert intact is not None  # g is free
        above = tree.parent(intact)
        siblings_free = (
            tree.free_count(above, free_set) if above is not None else topology.size + 1
        )
        key = (len(intact.gpus), siblings_free, tree.gpu_access_cost(g), g)
        ranked.append((key, g))
    ranked.sort()
    return ranked


def singular(
    topology: Topology, state: NodeState, request: Request, *, policy_name: str = NAME
) -> Decision:
    """Gaia Singular (Gaia §III-B, Algorithm 3, Fig. 5): place a one-GPU job.

    Algorithm 3 takes a free GPU whose sibling ("cousin") has no free resources, so that
    wholly idle subtrees stay intact for multi-GPU jobs, and only when there is none the idle
    GPU with the lowest access cost. Ranking of each free GPU g, lowest first:

    1. the size of the largest wholly free subtree that contains g (1 = g's parent subtree
       already has a used, shared or unhealthy GPU: the paper's candidates). Applying the
       paper's rule recursively up the tree — rather than falling straight back to the lowest
       access cost — keeps e.g. a whole DGX-1 quad free while the other quad has room;
       on an idle node every GPU ties here and the paper's fallback decides;
    2. free GPUs left in the subtree just above (fewest first: "all siblings busy");
    3. g's access cost (Algorithm 3, line 6);
    4. the lowest index.

    Args:
        topology: the node.
        state: its used GPUs.
        request: a one-GPU request.
        policy_name: name written into the decision.

    Returns:
        A whole-GPU decision; ``runner_up`` is the next-ranked free GPU.

    Raises:
        RequestError: the request is not for exactly one GPU.
        NoFit: no free GPU.
    """
    if request.fractional or request.count != 1:
        raise RequestError(f"Singular places one whole GPU; the pod asks for {request.count}")
    free = check_capacity(topology, state, request)
    ranked = _singular_ranking(topology, state)
    size, _, cost, best = ranked[0][0]
    runner = None
    if len(ranked) > 1:
        runner = _whole_candidate(topology, free, request, (ranked[1][1],))
    if len(free) == topology.size:
        why = f"idle node: lowest access cost {_fmt(cost)}"
    elif size == 1:
        why = f"gpu{best}'s sibling is busy (keeps idle subtrees whole), access cost {_fmt(cost)}"
    else:
        why = f"no GPU with a busy sibling; smallest idle subtree broken ({size} GPUs)"
    return whole_decision(
        policy_name, topology, state, request, (best,), MODEL_GPUTOPO, runner_up=runner,
        reason=f"Gaia Singular (Algorithm 3): {why}",
    )


# ============================================================================ Link
@dataclass(frozen=True)
class _LinkCandidate:
    key: tuple[float, float, int, int, tuple[int, ...]]
    node: TreeNode
    gpus: tuple[int, ...]


def _link_candidates(topology: Topology, state: NodeState, m: int) -> list[_LinkCandidate]:
    tree = access_cost_tree(topology)
    free_set = set(state.free_gpus(topology))
    out: list[_LinkCandidate] = []
    for node in tree.internal_nodes():  # depth-first, Algorithm 4 lines 1-8
        pool = [g for g in node.gpus if g in free_set]
        if len(pool) < m:
            continue
        intact = tree.intact_subtree(node, free_set)
        for chosen in _cheapest_subsets(topology, pool, m):
            key = (
                round(m * node.cost, 9),  # TotalCost, Algorithm 4 line 10
                round(_pair_cost_sum(topology, chosen), 9),
                len(pool),  # best fit: fewest free GPUs in the subtree
                len(intact.gpus) if intact is not None else 0,  # smallest idle subtree broken
                chosen,
            )
            out.append(_LinkCandidate(key, node, chosen))
    out.sort(key=lambda c: c.key)
    return out


def link(
    topology: Topology, state: NodeState, request: Request, *, policy_name: str = NAME
) -> Decision:
    """Gaia Link (Gaia §III-B, Algorithm 4): place an m-GPU job (m > 1).

    A depth-first traversal collects every subtree holding at least m free GPUs. Each costs
    ``TotalCost = m × node.cost`` — Algorithm 4 line 10, ``m × n.Children.AccessCost``, where
    the access cost of a node's children is the cost of the communication mode joining them
    (here the node's largest pairwise access cost, so NVLinked nodes are cheaper than PIX).
    The lowest TotalCost wins; ties → the smaller sum of pairwise access costs of the GPUs
    taken, then the fewest free GPUs in the subtree (best fit), then the smallest wholly idle
    subtree broken, then the lowest indices.

    Algorithm 4 then takes "m different children" of the winner; children may themselves be
    subtrees, so this takes the m free GPUs under the winner with the smallest sum of
    pairwise access costs (NVLink pairs first; :func:`_cheapest_subsets`). Pattern vertex i
    runs on the i-th chosen GPU (ascending).

    Args:
        topology: the node.
        state: its used GPUs.
        request: ``count >= 2`` whole GPUs (any pattern; Gaia ignores it for the choice).
        policy_name: name written into the decision.

    Returns:
        A whole-GPU decision (EffBW by the gputopo-v1 model); ``runner_up`` is the best
        candidate with a different GPU set.

    Raises:
        RequestError: the request is not for two or more GPUs.
        NoFit: the node has too few (free) GPUs.
    """
    if request.fractional or request.count < 2:
        raise RequestError(f"Link places two or more GPUs; the pod asks for {request.count}")
    free = check_capacity(topology, state, request)
    cands = _link_candidates(topology, state, request.count)
    best = cands[0]
    runner = None
    for c in cands[1:]:
        if c.gpus != best.gpus:
            runner = _whole_candidate(topology, free, request, c.gpus)
            break
    n = best.node
    reason = (
        f"Gaia Link (Algorithm 4): cheapest subtree {n.label} [gpus {_span(n.gpus)}], "
        f"TotalCost {request.count} x {_fmt(n.cost)} = {_fmt(best.key[0])}"
    )
    return whole_decision(
        policy_name, topology, state, request, best.gpus, MODEL_GPUTOPO,
        runner_up=runner, reason=reason,
    )


# ============================================================================ Algorithm 1
@register(NAME, "Gaia: access-cost tree; Fragment for shares, Singular for 1 GPU, Link for more",
          free_set_only=True)
def gaia(topology: Topology, state: NodeState, request: Request, memo: Memo) -> Decision:
    """Gaia's scheduler (Gaia §III-B, Algorithm 1): dispatch on the requested amount m.

    0 < m < 1 → :func:`fragment` (Algorithm 2); m = 1 → :func:`singular` (Algorithm 3);
    m > 1 → :func:`link` (Algorithm 4).

    Raises:
        NoFit: the node cannot host the request (the reason names the sub-algorithm).
    """
    if request.fractional:
        return fragment(topology, state, request)
    if request.count == 1:
        return singular(topology, state, request)
    return link(topology, state, request)
