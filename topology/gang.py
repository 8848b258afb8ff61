"""Where a gang goes: the domain, the node of every pod, and the GPUs of every pod.

A *gang* is a job of ``pods`` identical pods (an Indexed batch/v1 Job with parallelism =
completions) that starts only when every pod has its GPUs. Two choosers, both pure:

:func:`choose_kueue` — **Kueue's Topology Aware Scheduling**, the reference
(kubernetes-sigs/kueue ``pkg/cache/tas_flavor_snapshot.go``, ``findTopologyAssignment``; read,
not copied). Capacity is counted per node (how many pods' GPUs fit); the level is the podset's
required or preferred one (else the node level); among the domains of that level the *best
fit* wins (the smallest capacity that still holds every pod, the first in path order); a
preferred level that no domain fits climbs one level and tries again, a required one fails.
Inside the domain it descends level by level, taking the children with the most capacity
first and the best-fitting one last. Each pod's GPUs are then picked on its node by the node
policy — ``nvidia-best-effort`` by default, what the GPUs get without gputopo.

:func:`choose` — **gputopo's**: the tightest domain that can hold every pod (the deepest level
with a domain of enough capacity, never above a required level), and among that level's
domains the one that

1. gives the job the highest predicted *bottleneck bandwidth* — the slower of its pods' GPU
   sets inside their nodes (the node policy's choice, judged with gputopo-v1) and its
   inter-node ring (:func:`topology.hierarchy.inter_node`: through the NICs its GPUs use, at
   the share of the levels it crosses, or over an NVLink domain); candidates within
   :data:`BOTTLENECK_TOLERANCE` of the best count as equal; then
2. spends the least of the free capacity's bandwidth: MAPA's PreservedBW (§3.4.2, Eq. 3: the
   sum of the link bandwidths among the GPUs left free) lifted to the cluster — every pair of
   free GPUs counts the bandwidth between them: the link inside a node, or the per-GPU NIC
   rate times the share of the level joining their nodes (:func:`preserved_loss_gbps`). Like
   MAPA's Preserve (Algorithm 1) it keeps the large, well-connected free blocks (whole nodes,
   whole racks) for the big jobs to come; insensitive gangs skip step 1, as MAPA's
   insensitive jobs do;
3. then Kueue's best fit (least capacity left in the domain) and path order.

Inside each candidate domain two node assignments are tried: Kueue's descent (fewest nodes)
and the same descent filling the fullest nodes first (fewer whole nodes broken); the better by
the same two keys is the domain's.

Pods are numbered along the chosen nodes in path order (Kueue numbers its assignment the same
way), so neighbouring ranks share a node or a rack. Everything is count-based first and then
checked by placing each pod's GPUs with the node policy; a pod the policy refuses makes the
candidate infeasible.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from topology.hierarchy import (
    Domain,
    DomainTree,
    Hierarchy,
    HierarchyError,
    InterNode,
    NodeLink,
    domains,
    inter_node,
)
from topology.model import Topology
from topology.network import NodeNetwork
from topology.policies.bandwidth import preserved_bandwidth
from topology.policies.base import (
    Decision,
    NodeState,
    NoFit,
    Postponed,
    Request,
    RequestError,
)
from topology.policies.common import MODEL_GPUTOPO, effective_bandwidth, mapped_edges
from topology.policies.evaluate import Evaluator

#: Bottleneck bandwidths closer than this share of the best are equal in :func:`choose` (the
#: judge's own resolution: gputopo-v1 is fitted to within 7.6 GB/s RMSE of Eq. 2 around
#: 25-50 GB/s, i.e. well over 2 %).
BOTTLENECK_TOLERANCE = 0.02

#: The node policy of :func:`choose_kueue` (NVIDIA's device plugin).
KUEUE_NODE_POLICY = "nvidia-best-effort"
#: The node policy of :func:`choose`.
GPUTOPO_NODE_POLICY = "gputopo"


class GangNoFit(NoFit):
    """No domain can hold the gang now; ``str(exc)`` says why (one line).

    Attributes:
        postponed: True when some domain had room and the node policy refused a pod there
            only to wait for a better GPU set (:class:`topology.policies.base.Postponed`,
            ``Request.wait_for_better``): the same gang without the wait would start now.
            Callers that bound the wait (:func:`with_postponement`) start its clock here.
    """

    def __init__(self, message: str, *, postponed: bool = False) -> None:
        super().__init__(message)
        self.postponed = postponed


@dataclass(frozen=True)
class GangNode:
    """One node as the choosers see it.

    Attributes:
        name: node name.
        path: its hierarchy path (:meth:`topology.hierarchy.Hierarchy.path`).
        topology: its GPUs.
        state: what is in use on it now.
        network: its NICs (None: unknown; it then moves nothing between nodes — a job that
            spans it is predicted at 0 GB/s between nodes unless an NVLink domain joins them).
    """

    name: str
    path: tuple[str, ...]
    topology: Topology
    state: NodeState
    network: NodeNetwork | None = None


@dataclass(frozen=True)
class Gang:
    """A job of ``pods`` identical pods that start together.

    Attributes:
        pods: number of pods (≥ 1).
        request: what each pod asks for (whole GPUs, pattern, sensitivity).
        required: a level label the whole gang must stay inside
            (``gputopo.io/topology-required``, as Kueue's podset-required-topology).
        preferred: a level label to stay inside if possible (``-preferred``).
    """

    pods: int
    request: Request
    required: str | None = None
    preferred: str | None = None

    def __post_init__(self) -> None:
        if self.pods < 1:
            raise RequestError("a gang needs at least one pod")
        if self.request.fractional or self.request.shared is not None or \
                self.request.count < 1:
            raise RequestError("a gang's pods ask for whole GPUs")
        if self.required is not None and self.preferred is not None:
            raise RequestError("a gang has a required or a preferred level, not both")


def with_postponement(gang: Gang, waited_s: float, postpone_max_s: float) -> Gang | None:
    """``gang`` with its pod allowed to wait for a better GPU set (``Request.wait_for_better``:
    the default policy's bounded postponement, Amaral et al. SC'17 Algorithm 1, as the extender
    lets a lone pod wait; :func:`topology.policies.default.postpone_below`), or None when it may
    not: a gang of several pods (they start together, and a gang's bandwidth is mostly its
    NICs'), an insensitive or one-GPU pod (its own bandwidth does not matter), or one that has
    waited ``postpone_max_s`` seconds or more (``waited_s``: s since it was first postponed,
    0 when it never was; the bound is on the delay the postponement adds)."""
    if gang.pods != 1 or not gang.request.postponable or waited_s >= postpone_max_s:
        return None
    return replace(gang, request=replace(gang.request, wait_for_better=True))


@dataclass(frozen=True)
class PodPlacement:
    """Pod ``index`` of the gang on ``node`` (an index into the chooser's node list), with the
    node policy's decision."""

    index: int
    node: int
    decision: Decision


@dataclass(frozen=True)
class GangPlan:
    """A chooser's answer.

    Attributes:
        chooser: ``gputopo`` or ``kueue-tas``.
        domain: the domain chosen (level -1, path ``()``: the whole cluster).
        pods: one placement per pod, index order.
        intra_gbps: the slowest pod's judged EffBW inside its node (gputopo-v1; ``inf`` for
            one-GPU pods, which talk only between nodes).
        inter: the inter-node ring (:class:`topology.hierarchy.InterNode`).
        preserved_loss_gbps: PreservedBW the placement takes from the cluster's free GPUs
            (:func:`preserved_loss_gbps`).
        reason: one line on why.
    """

    chooser: str
    domain: Domain
    pods: tuple[PodPlacement, ...]
    intra_gbps: float
    inter: InterNode
    preserved_loss_gbps: float
    reason: str = ""

    @property
    def bottleneck_gbps(self) -> float:
        """The job's predicted bottleneck: the slower of :attr:`intra_gbps` and the
        inter-node ring (``inf`` for one-GPU pods on one node: nothing to communicate)."""
        return min(self.intra_gbps, self.inter.gbps)

    @property
    def nodes(self) -> tuple[int, ...]:
        """The distinct nodes used, in pod order."""
        return tuple(dict.fromkeys(p.node for p in self.pods))


# ------------------------------------------------------------------------------ capacity

def capacity(node: GangNode, gang: Gang) -> int:
    """Pods of ``gang`` whose GPU count fits the node's free GPUs (count-based, as Kueue counts
    resources; the node policy may still refuse one, which :func:`choose` checks)."""
    return len(node.state.free_gpus(node.topology)) // gang.request.count


@dataclass
class _Cluster:
    """One call's view: nodes, their domains, capacities."""

    nodes: Sequence[GangNode]
    hierarchy: Hierarchy
    gang: Gang
    tree: DomainTree = field(init=False)
    caps: list[int] = field(init=False)
    children: dict[tuple[int, tuple[str, ...]], list[tuple[str, ...]]] = field(init=False)
    preserve: _Preserve = field(init=False)

    def __post_init__(self) -> None:
        depth = len(self.hierarchy.levels)
        for n in self.nodes:
            if len(n.path) != depth:
                raise HierarchyError(f"node {n.name}: path {n.path} has {len(n.path)} levels; "
                                     f"the hierarchy has {depth}")
        self.tree = domains(self.hierarchy, [n.path for n in self.nodes])
        self.caps = [capacity(n, self.gang) for n in self.nodes]
        self.children = {}
        for level in range(depth):
            for path in sorted(self.tree.by_level[level]):
                self.children.setdefault((level - 1, path[:-1]), []).append(path)
        self.preserve = _Preserve(self.nodes, self.hierarchy)

    def cap(self, domain: Domain) -> int:
        if domain.level < 0:
            return sum(self.caps)
        return sum(self.caps[i] for i in self.tree.members(domain))

    def kids(self, domain: Domain) -> list[Domain]:
        return [Domain(domain.level + 1, p)
                for p in self.children.get((domain.level, domain.path), [])]


def _best_fit(options: Sequence[tuple[int, Domain]], need: int) -> int:
    """Index, in ``options`` (sorted by capacity descending), of the first domain with the
    smallest capacity that still holds ``need`` (Kueue's findBestFitDomainIdx)."""
    best = 0
    for i, (cap, _) in enumerate(options):
        if cap >= need and cap != options[best][0]:
            best = i
    return best


def _descend(cl: _Cluster, domain: Domain, pods: int, *, fullest_first: bool) -> dict[int, int]:
    """Pods per node inside ``domain``: Kueue's descent (children with the most capacity
    first, the best-fitting one last) at every level; with ``fullest_first`` the step to
    single nodes (children of one node each) instead fills the nodes with the least capacity
    first."""
    current: list[tuple[Domain, int]] = [(domain, pods)]
    node_level = cl.hierarchy.node_level
    while current and current[0][0].level < node_level:
        nxt: list[tuple[Domain, int]] = []
        for dom, need in current:
            kids = [(cl.cap(k), k) for k in cl.kids(dom)]
            kids = [(c, k) for c, k in kids if c > 0]
            # the step to single nodes: children of one node each — the node level's parents,
            # or a level above it whose domains hold one node (a node without a clique label
            # is its own NVLink domain: in DEFAULT a clique-less rack's children hold one each)
            leaf = all(len(cl.tree.members(k)) == 1 for _, k in kids)
            if leaf and fullest_first:
                kids.sort(key=lambda ck: (ck[0], ck[1].path))
                for c, k in kids:
                    if need <= 0:
                        break
                    take = min(c, need)
                    nxt.append((k, take))
                    need -= take
                continue
            kids.sort(key=lambda ck: (-ck[0], ck[1].path))
            i = 0
            while need > 0 and i < len(kids):
                if kids[i][0] >= need:
                    j = i + _best_fit(kids[i:], need)
                    nxt.append((kids[j][1], need))
                    need = 0
                    break
                nxt.append((kids[i][1], kids[i][0]))
                need -= kids[i][0]
                i += 1
        current = nxt
    out: dict[int, int] = {}
    for dom, count in current:
        (idx,) = cl.tree.members(dom)
        out[idx] = out.get(idx, 0) + count
    return out


# ------------------------------------------------------------------------------ realising

def fabric_gbps(topology: Topology, gpus: Sequence[int]) -> float:
    """GB/s ``gpus`` move over an NVLink fabric that spans nodes: their NVSwitch links' sum (0
    for machines without NVSwitch, whose NVLinks stay inside the node)."""
    if not topology.nvswitch or topology.size < 2:
        return 0.0
    bw = topology.bandwidth_matrix
    return sum(max(bw[g][h] for h in range(topology.size) if h != g) for g in gpus)


def _pod_effbw(topology: Topology, request: Request, decision: Decision) -> float:
    pattern = request.effective_pattern()
    if not pattern.edges:
        return math.inf
    return effective_bandwidth(topology, mapped_edges(pattern, decision.mapping), MODEL_GPUTOPO)


def predict(hierarchy: Hierarchy, request: Request,
            parts: Sequence[tuple[GangNode, Sequence[Decision]]]) -> tuple[float, InterNode]:
    """The predicted bandwidth of a job whose pods got ``parts`` (each node and the decisions
    of the job's pods on it): the slowest pod's EffBW inside its node (gputopo-v1 on the pod's
    pattern; ``inf`` for one-GPU pods) and the inter-node ring
    (:func:`topology.hierarchy.inter_node`). Whoever placed the pods — any chooser, or
    kube-scheduler pod by pod — the same prediction judges them.

    Raises:
        HierarchyError: no parts.
    """
    intra = math.inf
    links: list[NodeLink] = []
    for node, decisions in parts:
        used: list[int] = []
        for d in decisions:
            used.extend(d.gpus)
            intra = min(intra, _pod_effbw(node.topology, request, d))
        nic = node.network.job_gbps(used, node.topology.bandwidths) if node.network else 0.0
        links.append(NodeLink(node.path, nic, fabric_gbps(node.topology, used)))
    return intra, inter_node(hierarchy, links)


def _realise(cl: _Cluster, counts: Mapping[int, int], policy: str,
             evaluator: Evaluator) -> tuple[list[PodPlacement], float, InterNode]:
    """Place each pod's GPUs with ``policy`` on its node (nodes in path order); raises NoFit
    when the policy refuses one."""
    order = sorted(counts, key=lambda i: cl.nodes[i].path)
    placements: list[PodPlacement] = []
    parts: list[tuple[GangNode, list[Decision]]] = []
    request = cl.gang.request
    for i in order:
        node = cl.nodes[i]
        state = node.state
        here: list[Decision] = []
        for _ in range(counts[i]):
            d = evaluator.place(policy, node.topology, state, request)
            state = state.with_allocation(d)
            placements.append(PodPlacement(len(placements), i, d))
            here.append(d)
        parts.append((node, here))
    intra, inter = predict(cl.hierarchy, request, parts)
    return placements, intra, inter


# ------------------------------------------------------------------------------ PreservedBW

def _unit_gbps(nodes: Sequence[GangNode]) -> tuple[float, float]:
    """(per-GPU NIC rate, per-GPU NVLink fabric rate), GB/s, the median over the nodes: the
    weight of a pair of free GPUs on different nodes before the level's share."""
    nic = [n.network.job_gbps(range(n.topology.size), n.topology.bandwidths) / n.topology.size
           for n in nodes if n.network is not None]
    fab = [fabric_gbps(n.topology, [0]) for n in nodes if n.topology.nvswitch]
    return (statistics.median(nic) if nic else 0.0, statistics.median(fab) if fab else 0.0)


class _Preserve:
    """The cluster's free GPUs per domain, to price what a placement takes
    (:func:`preserved_loss_gbps`) in time proportional to the domains it touches."""

    def __init__(self, nodes: Sequence[GangNode], hierarchy: Hierarchy) -> None:
        self.nodes = nodes
        self.depth = len(hierarchy.levels)
        self.free = [n.state.free_gpus(n.topology) for n in nodes]
        nic_unit, fab_unit = _unit_gbps(nodes)
        # table level L: domains keyed by path[:L] (L = 0 is the whole cluster; L = depth a
        # node); the weight of a pair whose deepest common domain is at table level L
        self.weight = []
        for level in range(self.depth):
            hier_level = level - 1
            self.weight.append(fab_unit if hierarchy.nvlink_between(hier_level)
                               else nic_unit * hierarchy.share(hier_level))
        self.count: list[dict[tuple[str, ...], int]] = [{} for _ in range(self.depth + 1)]
        for i, n in enumerate(nodes):
            for level in range(self.depth + 1):
                key = tuple(n.path[:level])
                self.count[level][key] = self.count[level].get(key, 0) + len(self.free[i])
        # Σ over a domain's children of (their free GPUs)²
        self.child_sq: list[dict[tuple[str, ...], int]] = [{} for _ in range(self.depth)]
        for level in range(self.depth):
            for key, f in self.count[level + 1].items():
                parent = key[:level]
                self.child_sq[level][parent] = self.child_sq[level].get(parent, 0) + f * f

    def loss(self, taken: Mapping[int, Sequence[int]]) -> float:
        loss = 0.0
        for i, gpus in taken.items():
            node = self.nodes[i]
            gone = set(gpus)
            left = [g for g in self.free[i] if g not in gone]
            loss += preserved_bandwidth(node.topology, self.free[i]) - \
                preserved_bandwidth(node.topology, left)
        # free GPUs taken per domain at every table level
        delta: list[dict[tuple[str, ...], int]] = [{} for _ in range(self.depth + 1)]
        for i, gpus in taken.items():
            for level in range(self.depth + 1):
                key = tuple(self.nodes[i].path[:level])
                delta[level][key] = delta[level].get(key, 0) + len(gpus)
        for level in range(self.depth):
            w = self.weight[level]
            if w <= 0:
                continue
            for key, d in delta[level].items():
                before = self.count[level][key]
                sq_before = self.child_sq[level][key]
                sq_after = sq_before
                for child, dc in delta[level + 1].items():
                    if child[:level] == key:
                        fc = self.count[level + 1][child]
                        sq_after += (fc - dc) ** 2 - fc * fc
                pairs_before = before * before - sq_before
                pairs_after = (before - d) ** 2 - sq_after
                loss += w * (pairs_before - pairs_after) / 2.0
        return loss


def preserved_loss_gbps(nodes: Sequence[GangNode], hierarchy: Hierarchy,
                        taken: Mapping[int, Sequence[int]]) -> float:
    """PreservedBW (MAPA §3.4.2, Eq. 3) the cluster's free GPUs lose when the GPUs ``taken``
    (node index → GPU indices) are handed out, GB/s.

    Eq. 3 sums the bandwidth of the links among the free GPUs of a node; at cluster scale
    every pair of free GPUs counts: inside a node, their link (Eq. 3 itself); on two nodes,
    the median per-GPU NIC rate times the share of the level their deepest common domain is
    at (:meth:`topology.hierarchy.Hierarchy.share`), or the per-GPU NVLink rate inside an
    NVLink domain. Only the nodes and domains that change are computed.
    """
    return _Preserve(nodes, hierarchy).loss(taken)


# ------------------------------------------------------------------------------ choosers

def _check_level(hierarchy: Hierarchy, gang: Gang) -> int | None:
    label = gang.required or gang.preferred
    return hierarchy.index(label) if label is not None else None


def _feasible(cl: _Cluster, level: int) -> list[Domain]:
    if level < 0:
        root = Domain(-1, ())
        return [root] if cl.cap(root) >= cl.gang.pods else []
    return [d for d in cl.tree.at(level) if cl.cap(d) >= cl.gang.pods]


def _no_fit(cl: _Cluster, why: str, *, postponed: bool = False) -> GangNoFit:
    total = sum(cl.caps)
    return GangNoFit(f"{cl.gang.pods} pod(s) of {cl.gang.request.count} GPU(s): {why} "
                     f"(room for {total} such pod(s) in the whole cluster)",
                     postponed=postponed)


def choose_kueue(nodes: Sequence[GangNode], hierarchy: Hierarchy, gang: Gang, *,
                 policy: str = KUEUE_NODE_POLICY,
                 evaluator: Evaluator | None = None) -> GangPlan:
    """Kueue TAS's choice (module docstring), each pod's GPUs by ``policy``.

    With no level given the node level is preferred (climbing as needed).

    Raises:
        GangNoFit: no domain of the required level (or, preferred, any level) has room, or
            the node policy refuses a pod.
        HierarchyError: an unknown level label, or node paths that do not match.
        RequestError: a malformed gang.
    """
    ev = evaluator or Evaluator()
    cl = _Cluster(nodes, hierarchy, gang)
    start = _check_level(hierarchy, gang)
    level = hierarchy.node_level if start is None else start
    while True:
        found = _feasible(cl, level)
        if found:
            break
        if gang.required is not None:
            raise _no_fit(cl, f"no {hierarchy.labels[level]} domain has room")
        if level < 0:
            raise _no_fit(cl, "the cluster has no room")
        level -= 1
    ordered = sorted(((cl.cap(d), d) for d in found), key=lambda cd: (-cd[0], cd[1].path))
    domain = ordered[_best_fit(ordered, gang.pods)][1]
    counts = _descend(cl, domain, gang.pods, fullest_first=False)
    try:
        pods, intra, inter = _realise(cl, counts, policy, ev)
    except NoFit as exc:
        raise GangNoFit(f"{policy} refused a pod in {_level_name(hierarchy, domain)}: "
                        f"{exc}", postponed=isinstance(exc, Postponed)) from None
    return GangPlan("kueue-tas", domain, tuple(pods), intra, inter,
                    cl.preserve.loss(_taken(pods)),
                    reason=f"best fit at {_level_name(hierarchy, domain)}")


def _taken(pods: Sequence[PodPlacement]) -> dict[int, list[int]]:
    taken: dict[int, list[int]] = {}
    for p in pods:
        taken.setdefault(p.node, []).extend(p.decision.gpus)
    return taken


def _level_name(hierarchy: Hierarchy, domain: Domain) -> str:
    return "the whole cluster" if domain.level < 0 else domain.describe(hierarchy)


def natural_level(cl: _Cluster) -> int:
    """The deepest level with a domain whose GPUs, all free, would hold the gang: the gang's
    own domain size (a gang of 4 whole DGX nodes: a rack; of 40: a block). -1 when only the
    whole cluster would."""
    need = cl.gang.pods
    per_node = [n.topology.size // cl.gang.request.count for n in cl.nodes]
    for level in range(cl.hierarchy.node_level, -1, -1):
        for d in cl.tree.at(level):
            if sum(per_node[i] for i in cl.tree.members(d)) >= need:
                return level
    return -1


def choose(nodes: Sequence[GangNode], hierarchy: Hierarchy, gang: Gang, *,
           policy: str = GPUTOPO_NODE_POLICY, evaluator: Evaluator | None = None,
           tolerance: float = BOTTLENECK_TOLERANCE, natural: bool = True) -> GangPlan:
    """gputopo's choice (module docstring), each pod's GPUs by ``policy``.

    A gang with neither a required nor a preferred level is held to its :func:`natural_level`
    (``natural``): a gang that an idle rack would hold goes into one rack or waits, rather than
    spill over the spine because no rack has room *now* (the wait is the planner's to judge;
    a preferred level lets it climb).

    Raises:
        GangNoFit: nothing at or below a required level has room (or nothing anywhere), or
            the node policy refuses a pod in every candidate (``postponed`` when it refused
            one only to wait for a better GPU set).
        HierarchyError: an unknown level label, or node paths that do not match.
        RequestError: a malformed gang.
    """
    ev = evaluator or Evaluator()
    cl = _Cluster(nodes, hierarchy, gang)
    required = _check_level(hierarchy, gang) if gang.required is not None else None
    if required is None and gang.preferred is None and natural:
        required = natural_level(cl)
    ceiling = -1 if required is None else required
    level = hierarchy.node_level
    refused: list[tuple[str, bool]] = []  # (why, only to wait for a better set)
    while level >= ceiling:
        found = _feasible(cl, level)
        if level == hierarchy.node_level:
            plans = _on_one_node(cl, found, policy, ev, refused)
        else:
            plans = [p for d in found if (p := _best_in(cl, d, policy, ev, tolerance, refused))]
        if plans:
            return _rank(plans, tolerance, cl.gang.request.sensitive, cl)
        level -= 1
    where = (f"no {hierarchy.labels[required]} domain has room"
             if required is not None and required >= 0 else "the cluster has no room")
    if refused and all(postponed for _, postponed in refused):
        # the policy postponed the pods (Request.wait_for_better) wherever there was room
        where = "every domain with room would give its pods a poor GPU set"
    if refused:
        where += f"; {refused[0][0]}"
    raise _no_fit(cl, where, postponed=any(postponed for _, postponed in refused))


def _on_one_node(cl: _Cluster, found: Sequence[Domain], policy: str, ev: Evaluator,
                 refused: list[tuple[str, bool]]) -> list[GangPlan]:
    """Candidates that are single nodes: nodes of one machine type in one state with the same
    NICs get the same GPUs, so the policy runs once per such group; the PreservedBW lost still
    differs by where the node sits."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for d in found:
        (i,) = cl.tree.members(d)
        n = cl.nodes[i]
        key = (n.topology.topology_class, n.state.key(), n.network)
        groups.setdefault(key, []).append(i)
    plans = []
    for members in groups.values():
        first = members[0]
        try:
            pods, intra, inter = _realise(cl, {first: cl.gang.pods}, policy, ev)
        except NoFit as exc:
            refused.append((f"{policy} refused a pod on {cl.nodes[first].name}: {exc}",
                            isinstance(exc, Postponed)))
            continue
        for i in members:
            if cl.nodes[i].topology is cl.nodes[first].topology:
                mine = [PodPlacement(p.index, i, p.decision) for p in pods]
            else:  # the same class, other UUIDs: the (cached) decisions relabelled for it
                mine = _realise(cl, {i: cl.gang.pods}, policy, ev)[0]
            domain = Domain(cl.hierarchy.node_level, cl.nodes[i].path)
            plans.append(GangPlan("gputopo", domain, tuple(mine), intra, inter,
                                  cl.preserve.loss(_taken(mine))))
    return plans


def _best_in(cl: _Cluster, domain: Domain, policy: str, ev: Evaluator, tolerance: float,
             refused: list[tuple[str, bool]]) -> GangPlan | None:
    plans = []
    seen: set[tuple[tuple[int, int], ...]] = set()
    for fullest in (False, True):
        counts = _descend(cl, domain, cl.gang.pods, fullest_first=fullest)
        key = tuple(sorted(counts.items()))
        if key in seen:
            continue
        seen.add(key)
        try:
            pods, intra, inter = _realise(cl, counts, policy, ev)
        except NoFit as exc:
            refused.append((f"{policy} refused a pod in {_level_name(cl.hierarchy, domain)}: "
                            f"{exc}", isinstance(exc, Postponed)))
            continue
        loss = cl.preserve.loss(_taken(pods))
        plans.append(GangPlan("gputopo", domain, tuple(pods), intra, inter, loss))
    if not plans:
        return None
    return _rank(plans, tolerance, cl.gang.request.sensitive, cl)


def _rank(plans: Sequence[GangPlan], tolerance: float, sensitive: bool,
          cl: _Cluster) -> GangPlan:
    """Bottleneck (within ``tolerance`` of the best: equal), then PreservedBW lost, then the
    capacity left in the domain (best fit), then path order."""
    pool = list(plans)
    if sensitive:
        top = max(_finite(p.bottleneck_gbps) for p in pool)
        pool = [p for p in pool if _finite(p.bottleneck_gbps) >= top * (1.0 - tolerance)]
    best = min(pool, key=lambda p: (round(p.preserved_loss_gbps, 6),
                                    cl.cap(p.domain) - cl.gang.pods, p.domain.path,
                                    tuple(cl.nodes[i].path for i in p.nodes)))
    where = "between nodes" if best.inter.gbps <= best.intra_gbps else "inside nodes"
    why = (f"tightest domain {_level_name(cl.hierarchy, best.domain)}; bottleneck "
           f"{_fmt(best.bottleneck_gbps)} ({where}), PreservedBW spent "
           f"{best.preserved_loss_gbps:.1f} GB/s")
    return GangPlan(best.chooser, best.domain, best.pods, best.intra_gbps, best.inter,
                    best.preserved_loss_gbps, reason=why)


def _finite(v: float) -> float:
    return v if math.isfinite(v) else 1e18


def _fmt(v: float) -> str:
    return "none (one node, one GPU per pod)" if not math.isfinite(v) else f"{v:.1f} GB/s"


#: The choosers by name.
CHOOSERS: dict[str, Callable[..., GangPlan]] = {"gputopo": choose, "kueue-tas": choose_kueue}
