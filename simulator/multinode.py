"""Multi-node simulation: single-node jobs and gangs on a cluster with a topology hierarchy,
under four ways of scheduling them.

Policies (:data:`POLICIES`):

* ``default`` — what a cluster does with no gang support: kube-scheduler places every *pod* on
  its own as soon as some node has room (the node with the most free GPUs: LeastAllocated,
  ties to the lowest index), NVIDIA's device plugin picks its GPUs (``nvidia-best-effort``).
  A gang runs once its last pod is placed; until then its placed pods hold their GPUs — a
  *partial hold*. A gang whose pods are not all placed :data:`RENDEZVOUS_TIMEOUT_S` after its
  first one fails (its placed pods' rendezvous times out) and its pods come back as new ones,
  behind the others — a *timeout*. When nothing runs and the waiting pods can only wait for
  GPUs that partial gangs hold, the cluster is *deadlocked* until a timeout breaks it; the
  simulator counts such episodes.
* ``gang`` — all-or-nothing without topology (the coscheduling plugin's PodGroup, Volcano's
  gang): a job's pods are placed as ``default`` would place them, but only if all of them fit
  at once; otherwise none is.
* ``kueue-tas`` — Kueue's Topology Aware Scheduling (:func:`topology.gang.choose_kueue`): best
  fit at the job's required or preferred level — a gang with none prefers the rack, what a
  Kueue user sets for a multi-node job; a single pod the node level — GPUs by
  ``nvidia-best-effort``.
* ``gputopo`` — :func:`topology.gang.choose`: the tightest domain, ranked by predicted
  bottleneck bandwidth and then by the PreservedBW it spends; GPUs by ``gputopo``. As the
  planner does, a job of one bandwidth-sensitive multi-GPU pod waits for a GPU set at its
  threshold of the ideal for up to ``postpone_max_s`` after it was first postponed
  (:func:`topology.gang.with_postponement`); an event at the end of that bound looks again.

The queue is FIFO with backfill for every policy (Kueue's BestEffortFIFO; kube-scheduler retries
pods that do not fit): a job that does not fit is passed over, later ones may start.

**Run time** (MAPA Fig. 16, as :mod:`simulator.runtime`): a job's bottleneck bandwidth is
predicted with :func:`topology.gang.predict` whoever placed it — the slower of its pods' EffBW
inside their nodes (gputopo-v1) and its inter-node ring through the NICs at the share of the
levels it crosses (or NVLink inside an NVLink domain) — and its run time is
``runtime_s · bandwidth_factor(bottleneck, ideal, comm_share)``, with *ideal* the bottleneck
gputopo's chooser reaches on the idle cluster.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from simulator import SimulationError
from simulator.multinode_workloads import ClusterSpec, MultiJob, MultiWorkload
from simulator.runtime import bandwidth_factor, ideal_effbw, judge_effbw, judge_name
from simulator.workloads import JobId
from topology import catalog
from topology.contract import LABEL_BLOCK, LABEL_CLIQUE, LABEL_RACK
from topology.gang import (
    Gang,
    GangNode,
    GangNoFit,
    choose,
    choose_kueue,
    predict,
    with_postponement,
)
from topology.hierarchy import Hierarchy, HierarchyError
from topology.model import Topology, TopologyError
from topology.network import NodeNetwork
from topology.policies.base import Decision, NodeState, NoFit, Request, RequestError
from topology.policies.common import MODEL_GPUTOPO
from topology.policies.default import POSTPONE_MAX_S
from topology.policies.evaluate import Evaluator
from topology.policies.memo import Memo
from topology.sources import load_topology

POLICIES = ("default", "gang", "kueue-tas", "gputopo")
#: How long a gang's placed pods wait for the rest before the job gives up and its pods are
#: recreated: torchrun's rendezvous join timeout (``join_timeout``, 600 s).
RENDEZVOUS_TIMEOUT_S = 600.0
#: GPU choice of the policies without gputopo (NVIDIA's device plugin).
BEST_EFFORT = "nvidia-best-effort"


@dataclass
class MultiRecord:
    """What happened to one job (a row of ``jobs-<policy>.csv``)."""

    job: MultiJob
    start_s: float = -1.0
    end_s: float = -1.0
    first_pod_s: float = -1.0
    nodes: tuple[int, ...] = ()
    gpus: tuple[tuple[int, ...], ...] = ()
    intra_gbps: float = math.inf
    inter_gbps: float = math.inf
    inter_over: str = "none"
    ideal_gbps: float = math.inf
    factor: float = 1.0
    decision_ms: float = 0.0
    partial_gpu_s: float = 0.0
    evictions: int = 0
    in_one_rack: bool = True
    in_one_nvlink_domain: bool = True

    @property
    def bottleneck_gbps(self) -> float:
        """The slower of the intra- and inter-node bandwidth (``inf``: nothing to send)."""
        return min(self.intra_gbps, self.inter_gbps)

    @property
    def jct_s(self) -> float:
        """Completion − start (the simulator's JCT, Tabrizian §6)."""
        return self.end_s - self.start_s

    @property
    def completion_s(self) -> float:
        """Completion − submission (waiting included)."""
        return self.end_s - self.job.arrival_s

    @property
    def queueing_s(self) -> float:
        """Start − submission."""
        return self.start_s - self.job.arrival_s


@dataclass
class MultiResult:
    """One policy's run."""

    policy: str
    records: list[MultiRecord]
    deadlocks: int = 0
    timeouts: int = 0
    partial_gangs: int = 0
    wall_s: float = 0.0
    rack_capacity: dict[int, int] = field(default_factory=dict)
    clique_capacity: dict[int, int] = field(default_factory=dict)


@dataclass
class Cluster:
    """The nodes of a :class:`ClusterSpec`: names, hierarchy paths, one topology and NICs."""

    spec: ClusterSpec
    hierarchy: Hierarchy
    topology: Topology
    network: NodeNetwork | None
    names: list[str]
    paths: list[tuple[str, ...]]

    @classmethod
    def build(cls, spec: ClusterSpec) -> Cluster:
        """Resolve the machine (catalog name or topology file; NICs from the catalog) and
        label every node ``b<i>``, ``b<i>-r<j>`` (and the rack's clique with ``cliques:
        rack``).

        Raises:
            SimulationError: an unknown machine or a malformed hierarchy.
        """
        try:
            topo = load_topology(spec.machine)
        except TopologyError as exc:
            raise SimulationError(str(exc)) from None
        try:
            network = catalog.network(spec.machine)
        except catalog.UnknownMachine:
            network = None
        hierarchy = spec.resolved_hierarchy()
        names, paths = [], []
        for b in range(spec.blocks):
            for r in range(spec.racks):
                for n in range(spec.nodes):
                    name = f"b{b}-r{r}-n{n}"
                    labels = {LABEL_BLOCK: f"b{b}", LABEL_RACK: f"b{b}-r{r}"}
                    if spec.cliques == "rack":
                        labels[LABEL_CLIQUE] = f"clique-b{b}-r{r}"
                    names.append(name)
                    paths.append(hierarchy.path(name, labels))
        return cls(spec, hierarchy, topo, network, names, paths)

    def nodes(self, states: Sequence[NodeState]) -> list[GangNode]:
        """The nodes in ``states`` as the gang choosers see them."""
        return [GangNode(n, p, self.topology, s, self.network)
                for n, p, s in zip(self.names, self.paths, states, strict=True)]

    def level(self, label: str) -> int | None:
        """Index of the level ``label`` (None when the hierarchy has no such level)."""
        try:
            return self.hierarchy.index(label)
        except HierarchyError:
            return None

    def span(self, nodes: Sequence[int], level: int | None) -> int:
        """How many domains of ``level`` the nodes span (1 when the level is absent)."""
        if level is None:
            return 1
        return len({self.paths[i][: level + 1] for i in nodes})

    def domain_capacity(self, level: int | None, gpus: int) -> int:
        """Pods of ``gpus`` GPUs one idle domain of ``level`` holds (the largest domain)."""
        per_node = self.topology.size // gpus
        if level is None:
            return per_node * len(self.names)
        sizes: dict[tuple[str, ...], int] = {}
        for p in self.paths:
            sizes[p[: level + 1]] = sizes.get(p[: level + 1], 0) + 1
        return per_node * max(sizes.values())


class MultiSimulation:
    """One policy on a multi-node workload.

    Args:
        workload: the jobs and their cluster.
        policy: one of :data:`POLICIES`.
        memo: per-class tables shared by a comparison's runs (None: this run's own).
        postpone_max_s: ``gputopo``: how long a job of one bandwidth-sensitive multi-GPU pod
            may wait for a better GPU set, s after its first postponement (0 = never).
        judge: the model that prices a pod's EffBW inside its node
            (:data:`simulator.runtime.JUDGES`): ``gputopo-v1`` (the default) on the pod's
            mapping, as :func:`topology.gang.predict`; ``mapa-eq2`` or ``bottleneck`` on the
            best arrangement of its pattern in its GPU set (:func:`simulator.runtime.judge_effbw`),
            its ideal the best an idle node offers. Between nodes, the same NIC ring.

    Raises:
        SimulationError: an unknown policy, a bad cluster, a pod larger than a node, a job the
            cluster cannot hold even idle, a level label the hierarchy lacks.
    """

    def __init__(self, workload: MultiWorkload, policy: str, *, memo: Memo | None = None,
                 cluster: Cluster | None = None,
                 postpone_max_s: float = POSTPONE_MAX_S, judge: str = MODEL_GPUTOPO) -> None:
        if policy not in POLICIES:
            raise SimulationError(f"unknown multi-node policy {policy!r}; use one of "
                                  f"{', '.join(POLICIES)}")
        try:
            self.judge = judge_name(judge)
        except ValueError as exc:
            raise SimulationError(str(exc)) from None
        self.workload = workload
        self.policy = policy
        self.postpone_max_s = postpone_max_s
        self.cluster = cluster or Cluster.build(workload.cluster)
        self.evaluator = Evaluator(memo=memo)
        self.requests: dict[JobId, Request] = {}
        self.ideal: dict[tuple[object, ...], float] = {}
        idle = self.cluster.nodes([NodeState()] * len(self.cluster.names))
        for job in workload.jobs:
            if job.gpus > self.cluster.topology.size:
                raise SimulationError(f"job {job.id}: a pod of {job.gpus} GPUs; a "
                                      f"{self.cluster.topology.name} node has "
                                      f"{self.cluster.topology.size}")
            req = job.request()
            self.requests[job.id] = req
            for label in (job.required, job.preferred):
                if label is not None and self.cluster.level(label) is None:
                    raise SimulationError(f"job {job.id}: no topology level {label!r}; levels: "
                                          f"{', '.join(self.cluster.hierarchy.labels)}")
            key = self._shape(job)
            if key not in self.ideal:
                try:
                    plan = choose(idle, self.cluster.hierarchy,
                                  Gang(job.pods, req, required=job.required),
                                  evaluator=self.evaluator)
                except GangNoFit as exc:
                    raise SimulationError(f"job {job.id}: even an idle cluster cannot hold "
                                          f"it: {exc}") from None
                except RequestError as exc:
                    raise SimulationError(f"job {job.id}: {exc}") from None
                self.ideal[key] = plan.bottleneck_gbps
                if self.judge != MODEL_GPUTOPO:
                    pattern = req.effective_pattern()
                    best = (ideal_effbw(self.cluster.topology, pattern, self.judge,
                                        self.evaluator.memo) if pattern.edges else math.inf)
                    if best is not None:
                        self.ideal[key] = min(best, plan.inter.gbps)

    @staticmethod
    def _shape(job: MultiJob) -> tuple[object, ...]:
        return (job.pods, job.gpus, job.pattern, job.sensitive, job.required)

    # ------------------------------------------------------------------ placement
    def _gang(self, job: MultiJob) -> Gang:
        preferred = job.preferred
        if self.policy == "kueue-tas" and job.gang and job.required is None and not preferred:
            preferred = LABEL_RACK if self.cluster.level(LABEL_RACK) is not None else None
        return Gang(job.pods, self.requests[job.id], required=job.required, preferred=preferred)

    def _pod_least_allocated(self, states: Sequence[NodeState],
                             request: Request) -> tuple[int, Decision] | None:
        """kube-scheduler without an extender: the node with the most free GPUs that the
        device plugin can serve (ties: lowest index); its GPUs by best effort."""
        topo = self.cluster.topology
        free = [(len(s.free_gpus(topo)), i) for i, s in enumerate(states)]
        tried: set[tuple[object, ...]] = set()
        for count, i in sorted(free, key=lambda fi: (-fi[0], fi[1])):
            if count < request.count:
                break
            key = states[i].key()
            if key in tried:
                continue
            try:
                return i, self.evaluator.place(BEST_EFFORT, topo, states[i], request)
            except NoFit:
                tried.add(key)
        return None

    def _place(self, job: MultiJob, states: list[NodeState], now: float,
               postponed_at: dict[JobId, float]) -> list[tuple[int, Decision]] | None:
        """The pods' nodes and decisions, or None when the job does not fit now or, under
        ``gputopo``, waits for a better GPU set: then ``postponed_at[job.id]`` is set to
        ``now`` unless its postponement already began."""
        if self.policy == "gang":
            scratch = list(states)
            out = []
            for _ in range(job.pods):
                got = self._pod_least_allocated(scratch, self.requests[job.id])
                if got is None:
                    return None
                i, d = got
                scratch[i] = scratch[i].with_allocation(d)
                out.append((i, d))
            return out
        chooser = choose if self.policy == "gputopo" else choose_kueue
        gang = self._gang(job)
        patient = None
        if self.policy == "gputopo":
            since = postponed_at.get(job.id, now)
            patient = with_postponement(gang, now - since, self.postpone_max_s)
        nodes = self.cluster.nodes(states)
        try:
            plan = chooser(nodes, self.cluster.hierarchy, patient or gang,
                           evaluator=self.evaluator)
        except GangNoFit as exc:
            if patient is not None and exc.postponed:  # it would start now without the wait
                postponed_at.setdefault(job.id, now)
            return None
        return [(p.node, p.decision) for p in plan.pods]

    # ------------------------------------------------------------------ run
    def run(self) -> MultiResult:
        """Simulate until every job has finished.

        Raises:
            SimulationError: jobs left that can never be placed, or a policy that handed out
                a busy GPU (a bug).
        """
        wall0 = time.perf_counter()
        cl = self.cluster
        n_nodes = len(cl.names)
        states: list[NodeState] = [NodeState()] * n_nodes
        records = {j.id: MultiRecord(j) for j in self.workload.jobs}
        events: list[tuple[float, int, int, JobId]] = []
        seq = 0
        for j in self.workload.jobs:
            heapq.heappush(events, (j.arrival_s, 1, seq, j.id))
            seq += 1
        queue: list[MultiJob] = []
        held: dict[JobId, list[tuple[int, Decision]]] = {}  # placed pods of unstarted jobs
        running: dict[JobId, list[tuple[int, Decision]]] = {}
        result = MultiResult(self.policy, [])
        rack = cl.level(LABEL_RACK)
        clique = cl.level(LABEL_CLIQUE)
        last_t = 0.0

        def allocate(i: int, d: Decision) -> None:
            for g in d.gpus:
                if g not in states[i].free_gpus(cl.topology):
                    raise SimulationError(f"policy {self.policy} gave GPU {g} of node "
                                          f"{cl.names[i]} twice")
            states[i] = states[i].with_allocation(d)

        def release(pods: Sequence[tuple[int, Decision]]) -> None:
            for i, d in pods:
                free = set(states[i].free_gpus(cl.topology)) | set(d.gpus)
                states[i] = NodeState.whole(g for g in range(cl.topology.size) if g not in free)

        def start(job: MultiJob, pods: list[tuple[int, Decision]], now: float,
                  ms: float) -> None:
            nonlocal seq
            rec = records[job.id]
            by_node: dict[int, list[Decision]] = {}
            for i, d in pods:
                by_node.setdefault(i, []).append(d)
            parts = [(GangNode(cl.names[i], cl.paths[i], cl.topology, states[i], cl.network),
                      ds) for i, ds in sorted(by_node.items(), key=lambda kv: cl.paths[kv[0]])]
            intra, inter = predict(cl.hierarchy, self.requests[job.id], parts)
            pattern = self.requests[job.id].effective_pattern()
            if self.judge != MODEL_GPUTOPO and pattern.edges:
                intra = min(judge_effbw(cl.topology, pattern, d.mapping, self.judge,
                                        self.evaluator.memo) for _, d in pods)
            rec.start_s, rec.decision_ms = now, rec.decision_ms + ms
            rec.nodes = tuple(i for i, _ in pods)
            rec.gpus = tuple(d.gpus for _, d in pods)
            rec.intra_gbps, rec.inter_gbps, rec.inter_over = intra, inter.gbps, inter.over
            rec.ideal_gbps = self.ideal[self._shape(job)]
            b, ideal = rec.bottleneck_gbps, rec.ideal_gbps
            rec.factor = 1.0 if not (math.isfinite(b) and math.isfinite(ideal)) else \
                bandwidth_factor(b, ideal, job.comm_share)
            rec.in_one_rack = cl.span(rec.nodes, rack) == 1
            rec.in_one_nvlink_domain = cl.span(rec.nodes, clique) == 1
            running[job.id] = list(pods)
            heapq.heappush(events, (now + job.runtime_s * rec.factor, 0, seq, job.id))
            seq += 1

        def pass_jobs(now: float) -> None:
            rejected: set[tuple[object, ...]] = set()
            i = 0
            while i < len(queue):
                job = queue[i]
                patient = now - postponed_at.get(job.id, now) < self.postpone_max_s
                shape = (self._shape(job), job.preferred, patient)
                cap = sum(len(s.free_gpus(cl.topology)) // job.gpus for s in states)
                if cap < job.pods or shape in rejected:
                    i += 1
                    continue
                t0 = time.perf_counter()
                pods = self._place(job, states, now, postponed_at)
                ms = (time.perf_counter() - t0) * 1000.0
                records[job.id].decision_ms += ms if pods is None else 0.0
                if pods is None:
                    rejected.add(shape)
                    if job.id in postponed_at and job.id not in woken:
                        # waiting for a better set: look again when the wait ends
                        woken.add(job.id)
                        heapq.heappush(events, (postponed_at[job.id] + self.postpone_max_s,
                                                2, seq_next(), job.id))
                    i += 1
                    continue
                for node, d in pods:
                    allocate(node, d)
                queue.pop(i)
                start(job, pods, now, ms)
                rejected.clear()

        def pass_pods(now: float) -> bool:
            """``default``: place waiting pods one at a time in kube-scheduler's order —
            creation time, i.e. by job arrival and, for jobs submitted together, pod index
            first (their controllers create the pods side by side); a pod that fits nowhere
            leaves its job's later pods waiting too. True when any pod was placed."""
            placed_any = False
            blocked: set[JobId] = set()
            order = {j.id: k for k, j in enumerate(queue)}
            while True:
                waiting = [j for j in queue if j.id not in blocked]
                if not waiting:
                    return placed_any
                job = min(waiting, key=lambda j: (submitted[j.id], records[j.id].evictions,
                                                  len(held.get(j.id, ())), order[j.id]))
                t0 = time.perf_counter()
                got = self._pod_least_allocated(states, self.requests[job.id])
                records[job.id].decision_ms += (time.perf_counter() - t0) * 1000.0
                if got is None:
                    blocked.add(job.id)
                    continue
                allocate(*got)
                mine = held.setdefault(job.id, [])
                mine.append(got)
                placed_any = True
                if records[job.id].first_pod_s < 0:
                    records[job.id].first_pod_s = now
                if len(mine) == 1 and job.pods > 1:  # the rendezvous starts waiting
                    due[job.id] = now + RENDEZVOUS_TIMEOUT_S
                    heapq.heappush(events, (due[job.id], 2, seq_next(), job.id))
                if len(mine) == job.pods:
                    queue.remove(job)
                    del held[job.id]
                    start(job, mine, now, 0.0)

        partial_ever: set[JobId] = set()
        woken: set[JobId] = set()  # jobs with an event at the end of their postponement
        postponed_at: dict[JobId, float] = {}  # job -> when gputopo first postponed it
        submitted: dict[JobId, float] = {j.id: j.arrival_s for j in self.workload.jobs}
        due: dict[JobId, float] = {}
        timed_out: list[JobId] = []
        deadlocked = False

        def seq_next() -> int:
            nonlocal seq
            seq += 1
            return seq

        while events:
            now = events[0][0]
            dt = now - last_t
            for jid, pods in held.items():  # GPU-seconds held by partially placed gangs
                records[jid].partial_gpu_s += dt * sum(len(d.gpus) for _, d in pods)
            last_t = now
            while events and events[0][0] <= now + 1e-9:
                _, kind, _, jid = heapq.heappop(events)
                if kind == 1:
                    queue.append(records[jid].job)
                elif kind == 0:
                    records[jid].end_s = now
                    release(running.pop(jid))
                elif jid in held and abs(due.get(jid, -1.0) - now) < 1e-6:
                    timed_out.append(jid)  # its rendezvous gave up: the pods fail
            if self.policy == "default":
                # gangs whose rendezvous times out at this instant fail one at a time, the
                # youngest first; one that the freed GPUs complete meanwhile is spared
                order = {j.id: k for k, j in enumerate(queue)}
                for jid in sorted(timed_out, key=lambda j: (submitted[j], order[j]),
                                  reverse=True):
                    if jid not in held:
                        continue
                    release(held.pop(jid))
                    records[jid].evictions += 1
                    result.timeouts += 1
                    submitted[jid] = now  # its pods come back as new ones: behind the rest
                    queue.remove(records[jid].job)
                    queue.append(records[jid].job)
                    pass_pods(now)
                timed_out.clear()
                pass_pods(now)
                partial_ever.update(jid for jid, pods in held.items() if pods)
                stuck = bool(queue and not running and held)
                if stuck and not deadlocked:
                    # nothing runs, so nothing will free GPUs: the waiting pods wait for GPUs
                    # partial gangs hold — a deadlock, until a rendezvous times out
                    result.deadlocks += 1
                deadlocked = stuck
            else:
                pass_jobs(now)
            if queue and not running and not any(e[1] == 1 for e in events) and \
                    not (self.policy == "default" and held):
                raise SimulationError(
                    f"{len(queue)} job(s) could never be placed by {self.policy} (e.g. job "
                    f"{queue[0].id}: {queue[0].pods} pod(s) of {queue[0].gpus} GPUs)")
        result.records = [records[j.id] for j in self.workload.jobs]
        result.partial_gangs = len(partial_ever)
        result.wall_s = time.perf_counter() - wall0
        return result
