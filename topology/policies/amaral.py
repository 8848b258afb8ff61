"""Amaral et al., "Topology-Aware GPU Scheduling for Learning Workloads in Cloud Environments"
(SC'17): TOPO-AWARE, TOPO-AWARE-P, and the paper's FCFS and Best-Fit baselines (§5.2).

**Physical topology graph** (§4.1.2, Fig. 7). A multi-level weighted graph per node: GPU
vertices; one vertex per PCIe switch group (GPUs pairwise PIX), per multi-switch group (PXB)
and per host bridge (PHB) that holds more than one GPU; one vertex per CPU socket. Each edge
from a level to the next one up weighs 1 ("each level right after the GPU level has weight
1"); socket vertices are joined to each other with weight 20 (the SMP bus, "the socket level
… weight 20"). Direct NVLink pairs get a GPU–GPU edge of weight ``1 / NV#`` (a double NVLink
is "closer" than a single one). Sockets are the groups of GPUs that reach each other below
SYS. Distances ``p_ij`` are shortest paths (e.g. Minsky: NV2 sibling 0.5, other socket 22).

**Job graph** (§4.1.1, §5.1): the request's pattern (all-to-all by default, as Caffe's
data-parallel jobs), every edge with the profile's communication weight (4 = smallest batch
… 1 = largest).

**Utility** (Eq. 2), three terms each in [0, 1] (1 = best) and ``U = α_cc·C + α_b·I + α_d·F``
with α = 1/3 each (§5.2.1: "equal weights (0.33)"):

* ``C`` — communication (Eq. 3). ``t = Σ_edges p(i, j)`` over the pattern's mapped edges
  (for all-to-all exactly Eq. 3's sum over all pairs). Eq. 1 normalises every term; we
  normalise ``t`` by ``t*``, the lowest cost any set of the node's GPUs could give the
  pattern when idle (exhaustive when affordable), so ``1/t`` becomes ``t*/t``, and weigh it
  by the job's communication intensity ``w = weight/4``: ``C = 1 - w·(1 - t*/t)``. One-GPU
  jobs have ``C = 1``.
* ``I`` — interference (Eq. 4): the mean of ``solo_time / collocated_time`` over the new
  job and the running jobs it shares a CPU socket with (the bus they contend for, §3.3).
  Eq. 4 as printed is already "higher is better", so it is used directly. A policy sees only
  the node's busy GPUs, not which jobs hold them, so each touched socket with busy GPUs
  counts as one running job with the :data:`NEIGHBOUR` profile; the new job's slowdown is
  ``K · sensitivity · NEIGHBOUR.pressure · (busy share of the other GPUs in its sockets)``,
  each neighbour's is ``K · NEIGHBOUR.sensitivity · pressure``, with ``K = 0.30`` (§3.3,
  Fig. 6: two tiny-batch AlexNets sharing a socket slow down by ≈30%).
* ``F`` — fragmentation (Eq. 5): the mean over the node's sockets of
  ``free GPUs / GPUs`` after the placement, as printed (higher = more room left). On a node
  whose sockets are equal it does not change with *which* GPUs are taken; across nodes it
  favours the emptier node, which also limits interference.

Because every term lies in [0, 1], so does ``U``, and a job's minimum utility (Table 1:
0.3 for 1-GPU jobs, 0.5 for 2-GPU jobs) is meaningful.

**Mapping** (Algorithms 2–3, dual recursive bi-partitioning). The node's GPUs are split in two
recursively (a Kernighan–Lin / Fiduccia–Mattheyses min-cut bisection of the affinity graph
``1 / p_ij``, seeded with the socket order; cached per topology). At each split the job's tasks
(pattern vertices, in order) go one by one to the half with the higher task utility — the same
three terms, with the communication cost measured to the tasks already placed (for each free
GPU of the half, the distance to the nearest free GPU of the neighbour's half, averaged) — as
long as that half has free GPUs left; the recursion
continues inside each half down to single GPUs.

**Policies.**

* ``topo-aware`` — the DRB mapping, placed whatever its utility.
* ``topo-aware-p`` — the same, but raises :class:`NoFit` (``"utility X below minimum Y"``)
  while ``U`` is below the job's minimum: ``Request.min_utility`` (pod annotation
  ``gputopo.io/min-utility``), else Table 1's values (0.3 for one GPU, 0.5 for more). In the
  extender the filter rejects the node and the pod stays Pending until a node offers a good
  enough set (Algorithm 1's postponement). The threshold is capped at the utility the policy
  reaches on an idle node of the same type, so a job is never postponed forever.
* ``fcfs`` — §5.2's First-Come-First-Served: the first free GPUs in index order (the queue
  discipline, FIFO, is the scheduler's; the simulator takes the first node that fits).
* ``best-fit`` — §5.2's Best Fit, bin packing "allocating first the GPUs from highly used
  domains": the socket with the fewest free GPUs that still holds the whole job; if none
  does, GPUs from the most used sockets first.

**Profiles** (§4.2). :data:`PROFILES` holds the networks of the Amaral and MAPA workloads by
batch class; a profile gives the job-graph weight and interference sensitivity / pressure.
``Request.profile`` names one (``alexnet/tiny``, ``googlenet``, …; a network alone means its
``small`` batch). With no profile, a bandwidth-sensitive request uses :data:`DEFAULT_SENSITIVE`
(an AlexNet-like small batch) and an insensitive one :data:`DEFAULT_INSENSITIVE` (a large
batch: little to lose, still some traffic).

Fractional requests: Amaral does not share GPUs; they get the lowest-index GPU with room
(``best-fit``: the GPU with the least room that still fits). All functions are pure.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import networkx as nx
import numpy as np
from networkx.algorithms.community import kernighan_lin_bisection

from topology.model import PCIeLevel, Topology
from topology.patterns import Pattern
from topology.policies.base import Decision, NodeState, NoFit, Request, RequestError
from topology.policies.common import (
    MODEL_GPUTOPO,
    check_capacity,
    fits_share,
    fractional_decision,
    shareable_gpus,
    whole_decision,
)
from topology.policies.matching import arrangements
from topology.policies.memo import Memo
from topology.policies.registry import register

# ------------------------------------------------------------------------------ profiles


@dataclass(frozen=True)
class Profile:
    """A job's performance profile (Amaral §4.2).

    Attributes:
        name: ``network/batch``.
        comm_weight: job-graph edge weight, 4 (smallest batch) … 1 (largest) (§5.1).
        sensitivity: how much the job suffers from a co-located job's bus traffic, 0–1.
        pressure: how much bus traffic it causes, 0–1.
    """

    name: str
    comm_weight: int
    sensitivity: float
    pressure: float


#: Batch classes of §3 / §5.3 (tiny, small, medium, big): job-graph weight, sensitivity and
#: pressure factors. Fig. 6: tiny-batch jobs suffer most (≈30 % next to another tiny one),
#: big-batch jobs barely suffer but still cause traffic (≈24 % on a tiny neighbour).
BATCHES: dict[str, tuple[int, float, float]] = {
    "tiny": (4, 1.0, 1.0),
    "small": (3, 0.7, 0.9),
    "medium": (2, 0.35, 0.85),
    "big": (1, 0.05, 0.8),
}
#: Communication intensity of each network relative to AlexNet (Amaral §3.2: GoogLeNet
#: communicates least; MAPA Fig. 5b: VGG-16, Inception-v3, ResNet-50 are bandwidth
#: sensitive, CaffeNet and GoogleNet are not).
NETWORKS: dict[str, float] = {
    "alexnet": 1.0,
    "cafferef": 0.9,
    "googlenet": 0.4,
    "vgg16": 1.0,
    "resnet50": 0.8,
    "inception-v3": 0.7,
}
_ALIASES = {
    "caffenet": "cafferef", "caffe-ref": "cafferef", "vgg-16": "vgg16", "resnet-50": "resnet50",
    "inception": "inception-v3", "inceptionv3": "inception-v3", "inception_v3": "inception-v3",
}  # fmt: skip
#: Interference scale K (Fig. 6: two tiny-batch AlexNets on one socket, ≈30 % slowdown).
INTERFERENCE_K = 0.30


def _make(network: str, batch: str) -> Profile:
    weight, sens, press = BATCHES[batch]
    f = NETWORKS[network]
    return Profile(f"{network}/{batch}", weight, round(sens * f, 4), round(press * f, 4))


#: Every ``network/batch`` profile.
PROFILES: dict[str, Profile] = {
    f"{n}/{b}": _make(n, b) for n in NETWORKS for b in BATCHES
}
#: No profile, bandwidth-sensitive request: like an AlexNet small batch.
DEFAULT_SENSITIVE = Profile("default-sensitive", 3, 0.7, 0.9)
#: No profile, insensitive request (e.g. one GPU): like a big batch.
DEFAULT_INSENSITIVE = Profile("default-insensitive", 1, 0.05, 0.8)
#: What a policy assumes about an unknown running job (a medium-batch AlexNet).
NEIGHBOUR = Profile("neighbour", 2, 0.35, 0.85)

#: Utility weights α_cc, α_b, α_d (§5.2.1: equal, 0.33 each).
ALPHA = (1 / 3, 1 / 3, 1 / 3)
#: Table 1's minimum utilities, used when the request names none.
DEFAULT_MIN_UTILITY_SINGLE = 0.3
DEFAULT_MIN_UTILITY_MULTI = 0.5
#: Physical-graph edge weights (§4.1.2, Fig. 7).
LEVEL_WEIGHT = 1.0
SOCKET_WEIGHT = 20.0
#: Most (subset, arrangement) pairs scored when computing the idle optimum t*.
T_BEST_BUDGET = 400_000


def lookup_profile(name: str) -> Profile:
    """The profile called ``name`` (``network/batch`` or ``network`` = its small batch;
    case-insensitive; ``caffenet``/``vgg-16``/… aliases accepted).

    Raises:
        RequestError: unknown network or batch class (the message lists the known ones).
    """
    text = name.strip().lower()
    network, _, batch = text.partition("/")
    network = _ALIASES.get(network, network)
    batch = batch or "small"
    if network not in NETWORKS or batch not in BATCHES:
        raise RequestError(
            f"unknown job profile {name!r}; networks: {', '.join(NETWORKS)}; "
            f"batch classes: {', '.join(BATCHES)}"
        )
    return PROFILES[f"{network}/{batch}"]


def profile_for(request: Request) -> Profile:
    """The request's profile, or the documented default by bandwidth sensitivity.

    Raises:
        RequestError: the request names an unknown profile.
    """
    if request.profile is not None:
        return lookup_profile(request.profile)
    return DEFAULT_SENSITIVE if request.sensitive else DEFAULT_INSENSITIVE


# ------------------------------------------------------------------------------ physical graph


@dataclass(frozen=True)
class _Part:
    """A node of the bi-partition tree: a set of GPUs and its two halves (None at a leaf)."""

    gpus: tuple[int, ...]
    children: tuple[_Part, _Part] | None


@dataclass(frozen=True)
class PhysicalGraph:
    """Amaral's physical topology graph of one node, reduced to what the mapping needs.

    Attributes:
        distance: ``distance[i][j]`` shortest-path distance between GPUs (§4.1.2).
        socket: socket id of every GPU (0-based, by lowest GPU).
        socket_sizes: GPUs per socket.
        tree: the recursive bisection of the GPUs (Algorithm 2's ``physicalGraphBiPartition``).
        min_distance: the smallest distance between two distinct GPUs.
    """

    distance: tuple[tuple[float, ...], ...]
    socket: tuple[int, ...]
    socket_sizes: tuple[int, ...]
    tree: _Part
    min_distance: float


def _components(items: Sequence[int], close: object) -> list[tuple[int, ...]]:
    """Connected components of ``items`` under the symmetric relation ``close(a, b)``."""
    g = nx.Graph()
    g.add_nodes_from(items)
    for a, b in itertools.combinations(items, 2):
        if close(a, b):  # type: ignore[operator]
            g.add_edge(a, b)
    return sorted(tuple(sorted(c)) for c in nx.connected_components(g))


def _hierarchy_graph(topology: Topology) -> tuple[nx.Graph, list[int]]:
    """The multi-level graph of §4.1.2 and the socket of every GPU."""
    n = topology.size
    gpus = list(range(n))
    sockets = _components(gpus, lambda a, b: topology.links[a][b].pcie < PCIeLevel.SYS)
    socket_of = [0] * n
    for s, members in enumerate(sockets):
        for g in members:
            socket_of[g] = s
    graph = nx.Graph()
    graph.add_nodes_from(("gpu", g) for g in gpus)
    for s, members in enumerate(sockets):
        sv = ("socket", s)
        parent: dict[int, object] = {g: ("gpu", g) for g in members}
        for level in (PCIeLevel.PIX, PCIeLevel.PXB, PCIeLevel.PHB):
            groups = _components(
                list(members), lambda a, b, lv=level: topology.links[a][b].pcie <= lv
            )
            for group in groups:
                if len(group) < 2 or len(group) == len(members):
                    continue
                vertex = (level.name, group)
                if all(parent[g] == vertex for g in group):
                    continue
                for top in {parent[g] for g in group}:
                    graph.add_edge(top, vertex, weight=LEVEL_WEIGHT)
                for g in group:
                    parent[g] = vertex
        for top in {parent[g] for g in members}:
            graph.add_edge(top, sv, weight=LEVEL_WEIGHT)
    for s1, s2 in itertools.combinations(range(len(sockets)), 2):
        graph.add_edge(("socket", s1), ("socket", s2), weight=SOCKET_WEIGHT)
    for a, b in itertools.combinations(gpus, 2):
        lk = topology.links[a][b]
        if lk.nvlinks > 0:
            graph.add_edge(("gpu", a), ("gpu", b), weight=1.0 / lk.nvlinks)
    return graph, socket_of


def _bisect(gpus: tuple[int, ...], dist: np.ndarray, socket_of: Sequence[int]) -> _Part:
    if len(gpus) == 1:
        return _Part(gpus, None)
    order = sorted(gpus, key=lambda g: (socket_of[g], g))
    half = len(order) // 2
    g = nx.Graph()
    g.add_nodes_from(order)
    for a, b in itertools.combinations(order, 2):
        g.add_edge(a, b, weight=1.0 / dist[a, b])
    left, right = kernighan_lin_bisection(
        g, partition=(set(order[:half]), set(order[half:])), weight="weight"
    )
    a_part, b_part = tuple(sorted(left)), tuple(sorted(right))
    if not a_part or not b_part:  # pragma: no cover - KL keeps both sides non-empty
        a_part, b_part = tuple(sorted(order[:half])), tuple(sorted(order[half:]))
    if b_part[0] < a_part[0]:
        a_part, b_part = b_part, a_part
    return _Part(gpus, (_bisect(a_part, dist, socket_of), _bisect(b_part, dist, socket_of)))


@lru_cache(maxsize=64)
def physical_graph(topology: Topology) -> PhysicalGraph:
    """Amaral's physical graph of ``topology`` (cached: it depends on the topology only)."""
    graph, socket_of = _hierarchy_graph(topology)
    n = topology.size
    lengths = dict(nx.all_pairs_dijkstra_path_length(graph, weight="weight"))
    dist = np.zeros((n, n))
    for a in range(n):
        for b in range(n):
            if a != b:
                dist[a, b] = lengths[("gpu", a)][("gpu", b)]
    tree = _bisect(tuple(range(n)), dist, socket_of)
    sizes = [0] * (max(socket_of) + 1)
    for s in socket_of:
        sizes[s] += 1
    min_d = float(dist[~np.eye(n, dtype=bool)].min()) if n > 1 else 1.0
    return PhysicalGraph(
        distance=tuple(tuple(float(x) for x in row) for row in dist),
        socket=tuple(socket_of),
        socket_sizes=tuple(sizes),
        tree=tree,
        min_distance=min_d,
    )


# ------------------------------------------------------------------------------ utility


@dataclass(frozen=True)
class Utility:
    """Amaral's utility of a placement (Eq. 2) and its three terms, each in [0, 1]."""

    communication: float
    interference: float
    fragmentation: float

    @property
    def total(self) -> float:
        """``U = α_cc·C + α_b·I + α_d·F``."""
        a, b, c = ALPHA
        return a * self.communication + b * self.interference + c * self.fragmentation


def _is_busy(state: NodeState, g: int) -> bool:
    return not state.used(g).idle


def _comm_term(cost: float, best: float, weight: int) -> float:
    if cost <= 0:
        return 1.0
    w = weight / 4.0
    return 1.0 - w * (1.0 - min(1.0, best / cost))


def _interference(
    pg: PhysicalGraph, state: NodeState, gpus: Sequence[int], profile: Profile
) -> float:
    """Eq. 4 estimated from the node state (module docstring)."""
    chosen = set(gpus)
    sockets = {pg.socket[g] for g in chosen}
    others = [h for h in range(len(pg.socket)) if pg.socket[h] in sockets and h not in chosen]
    busy = [h for h in others if _is_busy(state, h)]
    share = len(busy) / len(others) if others else 0.0
    victims = len({pg.socket[h] for h in busy})
    k = INTERFERENCE_K
    own = 1.0 / (1.0 + k * profile.sensitivity * NEIGHBOUR.pressure * share)
    theirs = 1.0 / (1.0 + k * NEIGHBOUR.sensitivity * profile.pressure)
    return (own + victims * theirs) / (1 + victims)


def _fragmentation(pg: PhysicalGraph, state: NodeState, taken: Sequence[int]) -> float:
    """Eq. 5 after taking ``taken``: mean over sockets of free / total GPUs."""
    free = [0] * len(pg.socket_sizes)
    chosen = set(taken)
    for g, s in enumerate(pg.socket):
        if g not in chosen and g not in state.unhealthy and not _is_busy(state, g):
            free[s] += 1
    return sum(f / t for f, t in zip(free, pg.socket_sizes, strict=True)) / len(free)


def _pattern_cost(pg: PhysicalGraph, pattern: Pattern, mapping: Sequence[int]) -> float:
    d = pg.distance
    return float(sum(d[mapping[a]][mapping[b]] for a, b in pattern.edges))


@lru_cache(maxsize=1024)
def best_cost(topology: Topology, size: int, edges: tuple[tuple[int, int], ...]) -> float:
    """``t*``: the lowest communication cost (Eq. 3 over the pattern's edges) any ``size`` GPUs
    of the idle node can give the pattern. Exhaustive over subsets × arrangements when at most
    :data:`T_BEST_BUDGET` pairs, else the DRB mapping on the idle node."""
    if not edges:
        return 0.0
    pg = physical_graph(topology)
    n = topology.size
    d = np.array(pg.distance)
    arr = arrangements(size, edges) if size <= 8 else None
    n_sub = math.comb(n, size)
    if arr is not None and n_sub * arr.shape[0] <= T_BEST_BUDGET:
        best = math.inf
        it = itertools.combinations(range(n), size)
        while True:
            chunk = list(itertools.islice(it, 4096))
            if not chunk:
                break
            subs = np.array(chunk, dtype=np.int64)
            cost = d[subs[:, arr[..., 0]], subs[:, arr[..., 1]]].sum(axis=2)
            best = min(best, float(cost.min()))
        return best
    pattern = Pattern("custom", size, edges)
    mapping = _drb(topology, NodeState(), Request(count=size, pattern=pattern), DEFAULT_SENSITIVE)
    return _pattern_cost(pg, pattern, mapping)


def utility(
    topology: Topology, state: NodeState, request: Request, mapping: Sequence[int],
    best: float | None = None,
) -> Utility:
    """Amaral's utility (Eq. 2–5, as read in the module docstring) of running ``request`` with
    pattern vertex ``i`` on GPU ``mapping[i]`` of a node in ``state``.

    Args:
        best: the ``t*`` that normalises the communication term (physical-graph distance
            units). None = this node type's own idle optimum (:func:`best_cost`), as in the
            module docstring; the lowest ``t*`` over several node types puts their
            communication terms on one scale (:mod:`topology.policies.scoring`).

    Raises:
        RequestError: the request names an unknown profile.
    """
    prof = profile_for(request)
    pg = physical_graph(topology)
    pattern = request.effective_pattern()
    cost = _pattern_cost(pg, pattern, mapping)
    if best is None:
        best = best_cost(topology, pattern.size, pattern.edges)
    return Utility(
        communication=_comm_term(cost, best, prof.comm_weight) if pattern.edges else 1.0,
        interference=_interference(pg, state, mapping, prof),
        fragmentation=_fragmentation(pg, state, mapping),
    )


# ------------------------------------------------------------------------------ mapping


def _drb(topology: Topology, state: NodeState, request: Request, prof: Profile) -> list[int]:
    """Algorithms 2–3: map the pattern's tasks onto free GPUs by recursive bi-partitioning."""
    pg = physical_graph(topology)
    free = set(state.free_gpus(topology))
    pattern = request.effective_pattern()
    k = pattern.size
    neighbours: list[list[int]] = [[] for _ in range(k)]
    for a, b in pattern.edges:
        neighbours[a].append(b)
        neighbours[b].append(a)
    d = pg.distance
    where: dict[int, tuple[int, ...]] = {}  # task -> free GPUs of its current partition
    mapping = [-1] * k

    def mean_distance(x: tuple[int, ...], y: tuple[int, ...]) -> float:
        """Mean over x's free GPUs of the distance to the nearest other free GPU of y."""
        vals = [min((d[a][b] for b in y if b != a), default=0.0) for a in x]
        return sum(vals) / len(vals) if vals else 0.0

    def task_utility(task: int, part: tuple[int, ...], already: int) -> float:
        placed = [where[t] for t in neighbours[task] if t in where]
        if placed:
            cost = sum(mean_distance(part, other) for other in placed) / len(placed)
            comm = _comm_term(cost, pg.min_distance, prof.comm_weight)
        else:
            comm = 1.0
        # the GPUs the half's tasks would take: best fit, fullest socket of the half first
        per_socket: dict[int, int] = {}
        for g in part:
            per_socket[pg.socket[g]] = per_socket.get(pg.socket[g], 0) + 1
        order = sorted(part, key=lambda g: (per_socket[pg.socket[g]], g))
        taken = order[: already + 1]
        inter = _interference(pg, state, [taken[-1]], prof)
        frag = _fragmentation(pg, state, taken)
        return Utility(comm, inter, frag).total

    def assign(node: _Part, tasks: list[int]) -> None:
        if not tasks:
            return
        if node.children is None:
            (task,) = tasks
            mapping[task] = node.gpus[0]
            return
        halves = [tuple(g for g in child.gpus if g in free) for child in node.children]
        groups: list[list[int]] = [[], []]
        for task in tasks:
            scores = []
            for side in (0, 1):
                if len(groups[side]) < len(halves[side]):
                    scores.append(task_utility(task, halves[side], len(groups[side])))
                else:
                    scores.append(-math.inf)
            side = 0 if scores[0] >= scores[1] else 1
            groups[side].append(task)
            where[task] = halves[side]
        for side in (0, 1):
            assign(node.children[side], groups[side])

    assign(pg.tree, list(range(k)))
    return mapping


def _min_utility(request: Request) -> float:
    if request.min_utility is not None:
        return request.min_utility
    return DEFAULT_MIN_UTILITY_SINGLE if request.count <= 1 else DEFAULT_MIN_UTILITY_MULTI


def _topo_aware(name: str, postpone: bool, topology: Topology, state: NodeState,
                request: Request) -> Decision:
    if request.fractional:
        gpu = shareable_gpus(topology, state, request)[0]
        return fractional_decision(name, topology, state, request, gpu,
                                   reason="fractional request: lowest-index GPU with room")
    prof = profile_for(request)
    check_capacity(topology, state, request)
    mapping = _drb(topology, state, request, prof)
    u = utility(topology, state, request, mapping)
    why = (f"utility {u.total:.3f} (communication {u.communication:.2f}, interference "
           f"{u.interference:.2f}, fragmentation {u.fragmentation:.2f}); recursive "
           f"bi-partitioning, profile {prof.name}")
    if postpone:
        floor = _min_utility(request)
        if u.total < floor:
            idle = utility(topology, NodeState(), request,
                           _drb(topology, NodeState(), request, prof)).total
            if u.total < min(floor, idle) - 1e-9:
                raise NoFit(f"utility {u.total:.2f} below minimum {floor:.2f}")
        why += f"; minimum {floor:.2f}"
    return whole_decision(name, topology, state, request, mapping, MODEL_GPUTOPO, reason=why)


@register("topo-aware", "Amaral SC'17 TOPO-AWARE: utility-driven recursive bi-partitioning "
          "(communication, interference, fragmentation)", utility_scored=True)
def topo_aware(topology: Topology, state: NodeState, request: Request, memo: Memo) -> Decision:
    """TOPO-AWARE (Amaral §4.4): the DRB mapping, placed whatever its utility.

    Raises:
        NoFit: not enough free GPUs (or no GPU with room for a share).
        RequestError: unknown profile name.
    """
    return _topo_aware("topo-aware", False, topology, state, request)


@register("topo-aware-p", "Amaral SC'17 TOPO-AWARE-P: TOPO-AWARE that rejects a node while the "
          "utility is below the job's minimum (gputopo.io/min-utility)", utility_scored=True)
def topo_aware_p(topology: Topology, state: NodeState, request: Request, memo: Memo) -> Decision:
    """TOPO-AWARE-P (Amaral §4.4, Algorithm 1 with postponement).

    Raises:
        NoFit: not enough free GPUs, or ``"utility X below minimum Y"`` (the scheduler
            retries later; the minimum is capped at what an idle node of this type gives).
        RequestError: unknown profile name.
    """
    return _topo_aware("topo-aware-p", True, topology, state, request)


@register("fcfs", "Amaral SC'17 FCFS baseline: first free GPUs in index order", free_set_only=True)
def fcfs(topology: Topology, state: NodeState, request: Request, memo: Memo) -> Decision:
    """FCFS (Amaral §5.2): the lowest-index free GPUs (a share: the lowest GPU with room).

    Raises:
        NoFit: not enough free GPUs / no GPU with room for the share.
    """
    if request.fractional:
        gpu = shareable_gpus(topology, state, request)[0]
        return fractional_decision("fcfs", topology, state, request, gpu,
                                   reason="first GPU with room")
    free = check_capacity(topology, state, request)
    return whole_decision("fcfs", topology, state, request, free[: request.count],
                          MODEL_GPUTOPO, reason="first free GPUs (FCFS)")


@register("best-fit", "Amaral SC'17 Best-Fit baseline: GPUs from the most used socket first",
          free_set_only=True)
def best_fit(topology: Topology, state: NodeState, request: Request, memo: Memo) -> Decision:
    """Best Fit (Amaral §5.2): bin packing by CPU socket (module docstring).

    Raises:
        NoFit: not enough free GPUs / no GPU with room for the share.
    """
    if request.fractional:
        fits = [g for g in range(topology.size) if fits_share(topology, state, request, g)]
        if not fits:
            shareable_gpus(topology, state, request)  # raises NoFit with the reason
        gpu = min(fits, key=lambda g: (100 - state.used(g).core_percent
                                       - request.core_percent, g))
        return fractional_decision("best-fit", topology, state, request, gpu,
                                   reason="the GPU with the least room that fits")
    free = check_capacity(topology, state, request)
    pg = physical_graph(topology)
    per_socket: dict[int, list[int]] = {}
    for g in free:
        per_socket.setdefault(pg.socket[g], []).append(g)
    fitting = [s for s, gs in per_socket.items() if len(gs) >= request.count]
    if fitting:
        s = min(fitting, key=lambda s: (len(per_socket[s]), s))
        chosen = per_socket[s][: request.count]
        why = f"socket {s}: the fullest socket that holds the whole job"
    else:
        order = sorted(per_socket, key=lambda s: (len(per_socket[s]), s))
        chosen = [g for s in order for g in per_socket[s]][: request.count]
        why = "no socket holds the job: GPUs from the most used sockets first"
    return whole_decision("best-fit", topology, state, request, sorted(chosen), MODEL_GPUTOPO,
                          reason=why)
