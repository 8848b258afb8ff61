"""The discrete-event engine: arrivals, a FIFO queue with optional postponement, placements
through the extender's entry point, completions that free GPUs.

**Events.** Arrivals (from the workload) and completions. All events at one instant are
applied, then the scheduler makes one pass over the queue.

**Queue** (MAPA §4 and §5.2: FIFO). A pass walks the queue oldest first. A job that no node
has enough free GPUs for blocks the jobs behind it (``fifo``, the default) or is skipped
(``backfill``, as kube-scheduler treats unschedulable pods). A job that some node *could*
hold but every such node's policy rejects — TOPO-AWARE-P's "utility below minimum" — is
*postponed*: it keeps its place and the pass moves on to later jobs (Amaral Algorithm 1,
"out-of-order execution"); it is retried at the next event.

**Bounded postponement** (the default policy's, :func:`topology.policies.default.postpone_below`).
A bandwidth-sensitive multi-GPU job's request carries ``wait_for_better`` (as the extender's
does for a pod it has seen pending for less than ``postpone_max_s``): the default policy may
then refuse a busy node whose every free set is poor. ``postpone_max_s`` after its first
postponement the flag is cleared and the job takes what the rule gives it; ``0`` turns the
postponement off.

**Placement** — exactly what the extender does for a pod: for every node, the policy is run
through :meth:`topology.policies.evaluate.Evaluator.place` (the same cached entry point; each
run owns its evaluator), and one of the
nodes that accept is chosen. Nodes of one type in one state get the same decision, so the
engine keeps nodes grouped by ``(topology class, free mask)`` and asks once per group (1 000
idle machines are one call). Among the groups that accept, the *node choice* rule picks one
(lowest node index inside a group); rules, by policy:

* ``extender`` (gputopo, gaia, mapa-*): the extender's prioritize score,
  :func:`topology.policies.scoring.node_score` (0–10 from the decision's quality relative to
  the node type's idle-node decision and the fragmentation it leaves); equal scores go to the
  higher unrounded score, then the fullest node (kube-scheduler would pick at random);
* ``least-allocated`` (baseline, nvidia-best-effort): kube-scheduler's default scoring
  (NodeResourcesFit LeastAllocated) — the node with the most free GPUs;
* ``first-fit`` (fcfs): the lowest-index node that fits (Amaral §5.2's FCFS);
* ``most-allocated`` (best-fit): the fullest node that fits (Amaral's Best-Fit bin packing);
* ``utility`` (topo-aware, topo-aware-p): the highest Amaral utility (Eq. 2) without its
  fragmentation term — Eq. 5 averaged over all the cluster's sockets is the same whichever node
  takes the job — then the fullest node;
* ``random`` (dra-first-fit, dra-first-fit-pcieroot): a uniform pick among the nodes that fit
  (seeded): kube-scheduler on a DRA claim with exact counts, where no score plugin tells
  nodes apart (the DynamicResources score only ranks prioritized-list subrequests).

**Decision time** is the wall-clock time of that whole step for the placed attempt (every
group's ``place`` call, cache hits included, plus the node choice), per job.

**Co-location** (Tabrizian; shared jobs, ``Job.shared``). A shared job asks for one slot of a
GPU (``NodeState.slots_per_gpu``, default 3). The policy's decision names the GPU; the nodes'
decisions are compared by their ``colocation.rank`` (the same key the extender's prioritize
uses for shared pods), ties to the lowest node index. A GPU carrying co-located jobs is busy
for whole-GPU jobs. While jobs share a GPU, each progresses at ``1 / s_{j,S}`` of its solo
speed, ``s`` from :func:`topology.colocation.model.slowdowns` for the current set S; the rates
are recomputed whenever a job joins or leaves the GPU.
"""

from __future__ import annotations

import bisect
import heapq
import random
import time
from dataclasses import dataclass, field, replace

from simulator import SimulationError
from simulator import runtime as rt
from simulator.workloads import Job, JobId, Workload
from topology.colocation.model import DEFAULT_SLOTS, DEFAULT_THRESHOLD, slowdowns
from topology.colocation.profile import JobProfile
from topology.model import Topology
from topology.patterns import Pattern
from topology.policies import amaral, robust
from topology.policies.base import (
    FULL_CORE,
    MAX_UPCOMING,
    Decision,
    GPUUsage,
    NodeState,
    NoFit,
    Request,
    RequestError,
    Resident,
    Upcoming,
)
from topology.policies.common import MODEL_MAPA
from topology.policies.default import POSTPONE_MAX_S
from topology.policies.evaluate import Evaluator
from topology.policies.memo import Memo
from topology.policies.registry import UnknownPolicy, get_policy
from topology.policies.scoring import W_FRAGMENTATION, W_HARM, W_QUALITY, node_score

NODE_CHOICES = ("extender", "least-allocated", "first-fit", "most-allocated", "utility",
                "random")
DEFAULT_NODE_CHOICE = {
    "baseline": "least-allocated",
    "nvidia-best-effort": "least-allocated",
    "fcfs": "first-fit",
    "best-fit": "most-allocated",
    "topo-aware": "utility",
    "topo-aware-p": "utility",
    "dra-first-fit": "random",
    "dra-first-fit-pcieroot": "random",
}
QUEUES = ("fifo", "backfill")


def node_choice_for(policy: str) -> str:
    """The default node-choice rule of ``policy`` (module docstring)."""
    return DEFAULT_NODE_CHOICE.get(policy, "extender")


@dataclass
class JobRecord:
    """What happened to one job (one row of ``jobs-<policy>.csv``)."""

    job: Job
    node: int = -1
    gpus: tuple[int, ...] = ()
    mapping: tuple[int, ...] = ()
    start_s: float = -1.0
    end_s: float = -1.0
    effbw_gbps: float = 0.0
    effbw_eq2_gbps: float = 0.0
    ideal_gbps: float | None = None
    best_available_gbps: float | None = None
    bandwidth_factor: float = 1.0
    decision_ms: float = 0.0
    attempts: int = 0
    postponements: int = 0
    policy_effbw_gbps: float = 0.0
    corunners: set[JobId] = field(default_factory=set)
    predicted_delta: float | None = None

    @property
    def queueing_s(self) -> float:
        """Time from submission to placement, seconds."""
        return self.start_s - self.job.arrival_s

    @property
    def run_s(self) -> float:
        """Time from placement to completion, seconds."""
        return self.end_s - self.start_s

    @property
    def jct_s(self) -> float:
        """Job completion time as Tabrizian §6 defines it: "the time between the time that the
        job starts running and the time that the job leaves the cluster" (= ``run_s``)."""
        return self.end_s - self.start_s

    @property
    def slowdown(self) -> float:
        """Run time over solo run time (≥ 1 when slowed by bandwidth or co-runners)."""
        return self.run_s / self.job.runtime_s if self.job.runtime_s > 0 else 1.0

    @property
    def measured(self) -> bool:
        """A bandwidth-sensitive multi-GPU job (its EffBW is reported)."""
        return self.job.sensitive and self.job.gpus > 1

    @property
    def ratio_to_ideal(self) -> float | None:
        """Judged EffBW / ideal, or None without an ideal."""
        if not self.ideal_gbps:
            return None
        return self.effbw_gbps / self.ideal_gbps

    @property
    def got_optimum(self) -> bool | None:
        """Reached the best EffBW the free GPUs offered when it was placed (None: unknown)."""
        if self.best_available_gbps is None:
            return None
        return self.effbw_gbps >= self.best_available_gbps - 1e-6


@dataclass
class Sample:
    """The cluster after the events of one instant."""

    time_s: float
    busy_gpus: int
    queued: int
    running: int
    fragmentation: float


@dataclass
class RunResult:
    """One policy's run."""

    policy: str
    node_choice: str
    records: list[JobRecord]
    timeline: list[Sample]
    total_gpus: int
    wall_s: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass
class _Running:
    record: JobRecord
    sockets: frozenset[int]
    profile: amaral.Profile | None
    work_left: float  # seconds of solo progress left
    rate: float = 1.0
    last_s: float = 0.0
    version: int = 0
    colo: JobProfile | None = None
    gpu: int = -1


class Simulation:
    """One policy on one cluster and workload.

    Args:
        topology: every node's topology (the cluster is homogeneous).
        nodes: node count (≥ 1).
        workload: the jobs.
        policy: a registered policy name.
        queue: ``fifo`` or ``backfill``.
        node_choice: a rule of :data:`NODE_CHOICES`, or None for the policy's default.
        judge: the EffBW model every placement is scored with (:data:`runtime.JUDGES`).
        group_nodes: ask the policy once per ``(class, free mask)`` group (default); False asks
            every node, as the extender's filter does (cache hits), to time that path.
        memo: the policies' per-class tables, shared on purpose by the runs of one
            :func:`simulator.run.simulate` (None = this run's own). Each run owns its
            :class:`~topology.policies.evaluate.Evaluator` (decisions, hit counts).
        slots: co-location slots per GPU (shared jobs; default 3).
        threshold: the ΣC threshold of co-location (Tabrizian §4.2.4; default 4·10⁷).

    Raises:
        SimulationError: unknown policy / rule / queue / judge, a job larger than a node, a
            job the policy cannot place even on an idle node, shared jobs for a policy that
            does not co-locate, or bad co-location settings.
    """

    def __init__(self, topology: Topology, nodes: int, workload: Workload, policy: str, *,
                 queue: str = "fifo", node_choice: str | None = None,
                 judge: str = rt.JUDGES[0], group_nodes: bool = True,
                 memo: Memo | None = None, slots: int = DEFAULT_SLOTS,
                 threshold: float = DEFAULT_THRESHOLD,
                 postpone_max_s: float = POSTPONE_MAX_S) -> None:
        try:
            get_policy(policy)
        except UnknownPolicy as exc:
            raise SimulationError(str(exc)) from None
        if nodes < 1:
            raise SimulationError("the cluster needs at least one node")
        if queue not in QUEUES:
            raise SimulationError(f"unknown queue {queue!r}; use {' or '.join(QUEUES)}")
        rule = node_choice or node_choice_for(policy)
        if rule not in NODE_CHOICES:
            raise SimulationError(f"unknown node choice {rule!r}; use one of "
                                  f"{', '.join(NODE_CHOICES)}")
        try:
            judge = rt.judge_name(judge)
        except ValueError as exc:
            raise SimulationError(str(exc)) from None
        self.evaluator = Evaluator(memo=memo)
        if slots < 1:
            raise SimulationError("--slots must be at least 1")
        if not threshold > 0:
            raise SimulationError("--threshold must be positive")
        if postpone_max_s < 0:
            raise SimulationError("--postpone-max-s must not be negative")
        self.slots = slots
        self.threshold = threshold
        self.postpone_max_s = postpone_max_s
        self.topology = topology
        self.n_nodes = nodes
        self.workload = workload
        self.policy = policy
        self.queue_mode = queue
        self.rule = rule
        self.judge = judge
        self.group_nodes = group_nodes
        self._rng = random.Random(0)  # the random node choice, the same for every run
        self.size = topology.size
        self.full_mask = (1 << self.size) - 1
        self.requests: dict[JobId, Request] = {}
        self.request_keys: dict[JobId, tuple[object, ...]] = {}
        self._check_jobs()
        self.sockets = amaral.physical_graph(topology).socket
        self.lookahead = get_policy(policy).lookahead
        self.upcoming_of: dict[JobId, Upcoming] = {
            j.id: Upcoming(j.gpus, self.requests[j.id].pattern, self.requests[j.id].sensitive)
            for j in workload.jobs if not j.shared}
        self._queue: list[Job] = []

    # ------------------------------------------------------------------ set-up
    def _check_jobs(self) -> None:
        seen: dict[tuple[object, ...], Request] = {}
        waits = get_policy(self.policy).lookahead  # as the extender's with_lookahead
        for job in self.workload.jobs:
            if job.gpus > self.size:
                raise SimulationError(
                    f"job {job.id} asks for {job.gpus} GPUs; a {self.topology.name} node has "
                    f"{self.size}")
            req = job.request(self.threshold)
            if self.postpone_max_s > 0 and waits and not job.shared and req.postponable:
                req = replace(req, wait_for_better=True)
            key = req.key()
            self.requests[job.id] = req
            self.request_keys[job.id] = key
            if key in seen:
                continue
            seen[key] = req
            try:
                self.evaluator.ideal(self.policy, self.topology, req)
            except NoFit as exc:
                what = "a co-location slot" if job.shared else f"{job.gpus} GPUs"
                raise SimulationError(
                    f"job {job.id} ({what}): policy {self.policy} cannot place it even "
                    f"on an idle {self.topology.name} node: {exc}") from None
            except RequestError as exc:
                raise SimulationError(f"job {job.id}: {exc}") from None

    # ------------------------------------------------------------------ state helpers
    # A node's group key is its free mask (an int) while no GPU of it is shared, else
    # ``(mask, ((gpu, resident names), ...))``: nodes with co-located jobs are grouped only
    # with nodes holding the very same jobs (i.e. never), the others exactly as before.
    @staticmethod
    def _mask_of(nk: object) -> int:
        if isinstance(nk, int):
            return nk
        assert isinstance(nk, tuple) and isinstance(nk[0], int)
        return nk[0]

    def _key_of(self, node: int, mask: int) -> object:
        shared = self.shared_on[node]
        if not shared:
            return mask
        return (mask, tuple(sorted((g, tuple(r.name for r in res))
                                   for g, res in shared.items())))

    def _state(self, nk: object, node: int) -> NodeState:
        st = self._states.get(nk)
        if st is None:
            mask = self._mask_of(nk)
            shared = self.shared_on[node] if not isinstance(nk, int) else {}
            usage = {g: GPUUsage(FULL_CORE, 0) for g in range(self.size)
                     if not mask >> g & 1 and g not in shared}
            usage.update({g: GPUUsage(residents=res) for g, res in shared.items()})
            st = NodeState(usage, slots_per_gpu=self.slots)
            if isinstance(nk, int):  # shared states are one node's: not worth caching
                self._states[nk] = st
        return st

    def _move(self, node: int, new_mask: int) -> None:
        old = self.masks[node]
        old_key = self.keys[node]
        new_key = self._key_of(node, new_mask)
        group = self.groups[old_key]
        group.remove(node)
        if not group:
            del self.groups[old_key]
        bisect.insort(self.groups.setdefault(new_key, []), node)
        self.keys[node] = new_key
        self.masks[node] = new_mask
        self.free_count[old.bit_count()] -= 1
        self.free_count[new_mask.bit_count()] += 1
        p_old, b_old = rt.node_fragmentation(self.topology, old)
        p_new, b_new = rt.node_fragmentation(self.topology, new_mask)
        self.preserved_sum += p_new - p_old
        self.best_sum += b_new - b_old

    def _shared_capacity(self, job: Job) -> bool:
        """Some node has an idle GPU, or a shared GPU with a free slot and the job's memory."""
        if self._max_free() > 0:
            return True
        need = job.gpu_memory_mib or 0
        for shared in self.shared_on:
            for g, res in shared.items():
                if len(res) < self.slots and sum(r.memory_mib for r in res) + need <= \
                        self.topology.gpus[g].memory_mib:
                    return True
        return False

    def _max_free(self) -> int:
        for k in range(self.size, -1, -1):
            if self.free_count[k]:
                return k
        return 0

    def _fragmentation(self) -> float:
        if self.best_sum <= 1e-9:
            return 0.0
        return max(0.0, 1.0 - self.preserved_sum / self.best_sum)

    # ------------------------------------------------------------------ placement
    def _score(self, decision: Decision, nk: object, node: int,
               req: Request) -> tuple[float, ...]:
        if decision.colocation is not None:  # shared: the policy's own cross-node rank
            return decision.colocation.rank
        mask = self._mask_of(nk)
        free_before = mask.bit_count()
        rule = self.rule
        if rule == "least-allocated":
            return (-free_before,)
        if rule == "most-allocated" or rule == "first-fit":
            return (free_before,) if rule == "most-allocated" else ()
        if rule == "utility":
            # Eq. 5 over all of the cluster's sockets is the same whichever node is chosen, so
            # nodes are ranked by the communication and interference terms, then fullest first
            u = amaral.utility(self.topology, self._state(nk, node), req, decision.mapping)
            a_cc, a_b, _ = amaral.ALPHA
            return (-round(a_cc * u.communication + a_b * u.interference, 9), free_before)
        # extender: the extender's own prioritize score (0-10), its unrounded value, then
        # the fullest node (kube-scheduler breaks equal scores at random; we stay deterministic)
        ns = node_score(self.policy, self.topology, self._state(nk, node), req, decision,
                        evaluator=self.evaluator)
        raw = (W_QUALITY * ns.quality + W_FRAGMENTATION * (1.0 - ns.fragmentation)
               - W_HARM * ns.harm)
        return (-ns.score, -round(raw, 9), free_before)

    def _upcoming(self, job: Job) -> tuple[Upcoming, ...]:
        """The whole-GPU jobs queued behind ``job`` (queue order, at most ``MAX_UPCOMING``):
        what the extender's pending-pod view hands a lookahead policy."""
        out: list[Upcoming] = []
        behind = False
        for other in self._queue:
            if other is job:
                behind = True
                continue
            if not behind or other.shared:
                continue
            out.append(self.upcoming_of[other.id])
            if len(out) == MAX_UPCOMING:
                break
        return tuple(out)

    def _waiting(self, job: Job) -> dict[object, Request]:
        """Per node group, ``job``'s request with the waiting jobs that group's decision
        weighs (:func:`topology.policies.robust.waiting_by_node`: the jobs queued behind it
        whose one best home is that node), as the extender hands them a lookahead policy."""
        base = self.requests[job.id]
        queued = self._upcoming(job)
        keys = list(self.groups)
        lists = robust.waiting_by_node(
            [(self.topology, self._mask_of(nk), len(self.groups[nk])) for nk in keys],
            queued, self.evaluator.memo)
        return {nk: replace(base, upcoming=w) if w else base
                for nk, w in zip(keys, lists, strict=True)}

    def _try_place(self, job: Job) -> tuple[int, Decision, float] | None:
        t0 = time.perf_counter()
        req = self.requests[job.id]
        per_group = self._waiting(job) if self.lookahead and not job.shared else {}
        best: tuple[tuple[float, ...], int, Decision] | None = None
        pairs: list[tuple[object, int]]
        if self.group_nodes:
            pairs = [(nk, members[0]) for nk, members in self.groups.items()]
        else:
            pairs = list(zip(self.keys, range(self.n_nodes), strict=True))
        feasible: list[tuple[int, Decision]] = []
        for nk, node in pairs:
            if not job.shared and self._mask_of(nk).bit_count() < job.gpus:
                continue
            req = per_group.get(nk, self.requests[job.id])
            try:
                decision = self.evaluator.place(self.policy, self.topology,
                                                self._state(nk, node), req)
            except NoFit:
                continue
            except RequestError as exc:
                raise SimulationError(f"job {job.id}: {exc}") from None
            if self.rule == "random":  # every node of the group, picked below
                members = self.groups[nk] if self.group_nodes else [node]
                feasible += [(m, decision) for m in members]
                continue
            key = (*self._score(decision, nk, node, req), node)
            if best is None or key < best[0]:
                best = (key, node, decision)
        if feasible:  # kube-scheduler when every score is equal: a uniform pick
            node, decision = self._rng.choice(sorted(feasible, key=lambda f: f[0]))
            best = ((), node, decision)
        elapsed = (time.perf_counter() - t0) * 1000.0
        if best is None:
            return None
        return best[1], best[2], elapsed

    # ------------------------------------------------------------------ run
    def run(self) -> RunResult:
        """Simulate until every job has finished.

        Raises:
            SimulationError: a policy handed out a busy GPU (a bug), or jobs are left that can
                never be placed.
        """
        self.evaluator.clear_decisions()
        wall0 = time.perf_counter()
        self._states: dict[object, NodeState] = {}
        self.masks = [self.full_mask] * self.n_nodes
        self.shared_on: list[dict[int, tuple[Resident, ...]]] = [
            {} for _ in range(self.n_nodes)]
        self.keys: list[object] = [self.full_mask] * self.n_nodes
        self.groups: dict[object, list[int]] = {self.full_mask: list(range(self.n_nodes))}
        gpu_jobs: dict[tuple[int, int], list[_Running]] = {}
        self.free_count = [0] * (self.size + 1)
        self.free_count[self.size] = self.n_nodes
        p0, b0 = rt.node_fragmentation(self.topology, self.full_mask)
        self.preserved_sum = p0 * self.n_nodes
        self.best_sum = b0 * self.n_nodes
        self.running_on: list[list[_Running]] = [[] for _ in range(self.n_nodes)]
        records = {j.id: JobRecord(job=j) for j in self.workload.jobs}
        events: list[tuple[float, int, int, JobId, int]] = []  # time, kind, seq, job, version
        seq = 0
        for job in self.workload.jobs:
            heapq.heappush(events, (job.arrival_s, 1, seq, job.id, 0))
            seq += 1
        queue: list[Job] = []
        self._queue = queue
        first_postponed: dict[JobId, float] = {}  # job -> when a policy first postponed it
        running: dict[JobId, _Running] = {}
        timeline: list[Sample] = []
        busy = 0
        done = 0
        interference = self.workload.interference

        def push_completion(r: _Running, now: float) -> None:
            nonlocal seq
            r.version += 1
            heapq.heappush(events, (now + r.work_left / r.rate, 0, seq, r.record.job.id,
                                    r.version))
            seq += 1

        def rerate(node: int, now: float) -> None:
            if not interference:
                return
            jobs_here = self.running_on[node]
            for r in jobs_here:
                if r.profile is None:
                    continue
                aggressors = [o.profile for o in jobs_here if o is not r and o.profile
                              is not None and o.sockets & r.sockets]
                rate = 1.0 / (1.0 + rt.slowdown(r.profile, aggressors))
                if abs(rate - r.rate) > 1e-12:
                    r.work_left -= (now - r.last_s) * r.rate
                    r.last_s, r.rate = now, rate
                    push_completion(r, now)

        def rerate_gpu(node: int, g: int, now: float) -> None:
            jobs_here = gpu_jobs.get((node, g), [])
            factors = slowdowns([x.colo for x in jobs_here if x.colo is not None])
            for x, f in zip(jobs_here, factors, strict=True):
                rate = 1.0 / f
                if abs(rate - x.rate) > 1e-12:
                    x.work_left -= (now - x.last_s) * x.rate
                    x.last_s, x.rate = now, rate
                    push_completion(x, now)

        def start_shared(job: Job, node: int, decision: Decision, ms: float,
                         now: float) -> None:
            nonlocal busy
            assert decision.colocation is not None
            g = decision.gpus[0]
            mask = self.masks[node]
            residents = self.shared_on[node].get(g, ())
            if not mask >> g & 1 and not residents:
                raise SimulationError(f"policy {self.policy} gave shared job {job.id} GPU {g} "
                                      f"of node {node}, which is held whole")
            try:  # the state's own checks: slots, one mode per GPU
                self._state(self.keys[node], node).with_allocation(decision)
            except ValueError as exc:
                raise SimulationError(f"policy {self.policy}, job {job.id}: {exc}") from None
            prof = job.colocation_profile()
            if sum(r.memory_mib for r in residents) + prof.gpu_memory_mib > \
                    self.topology.gpus[g].memory_mib:
                raise SimulationError(f"policy {self.policy} overcommitted GPU {g}'s memory "
                                      f"on node {node} with job {job.id}")
            rec = records[job.id]
            for other in gpu_jobs.get((node, g), []):
                other.record.corunners.add(job.id)
                rec.corunners.add(other.record.job.id)
            self.shared_on[node][g] = residents + (
                Resident(f"job-{job.id}", prof, prof.gpu_memory_mib),)
            if mask >> g & 1:
                busy += 1
            self._move(node, mask & ~(1 << g))
            rec.node, rec.gpus, rec.mapping = node, (g,), (g,)
            rec.start_s, rec.decision_ms = now, ms
            rec.predicted_delta = decision.colocation.chosen.delta
            r = _Running(rec, frozenset({self.sockets[g]}), None, job.runtime_s, 1.0, now,
                         colo=prof, gpu=g)
            running[job.id] = r
            self.running_on[node].append(r)
            gpu_jobs.setdefault((node, g), []).append(r)
            push_completion(r, now)
            rerate_gpu(node, g, now)

        def finish_shared(r: _Running, now: float) -> None:
            nonlocal busy, done
            rec = r.record
            rec.end_s = now
            node, g = rec.node, r.gpu
            self.running_on[node].remove(r)
            del running[rec.job.id]
            gpu_jobs[(node, g)].remove(r)
            kept = tuple(x for x in self.shared_on[node][g] if x.name != f"job-{rec.job.id}")
            mask = self.masks[node]
            if kept:
                self.shared_on[node][g] = kept
            else:
                del self.shared_on[node][g]
                del gpu_jobs[(node, g)]
                mask |= 1 << g
                busy -= 1
            self._move(node, mask)
            done += 1
            rerate_gpu(node, g, now)

        def start(job: Job, node: int, decision: Decision, ms: float, now: float) -> None:
            nonlocal busy
            if decision.colocation is not None:
                start_shared(job, node, decision, ms, now)
                return
            mask = self.masks[node]
            for g in decision.gpus:
                if not mask >> g & 1:
                    raise SimulationError(
                        f"policy {self.policy} gave job {job.id} GPU {g} of node {node}, "
                        "which is busy")
            rec = records[job.id]
            req = self.requests[job.id]
            pattern = req.effective_pattern()
            if rec.measured:  # before the placement changes the free GPUs
                rec.best_available_gbps = self._best_available(pattern)
            new_mask = mask
            for g in decision.gpus:
                new_mask &= ~(1 << g)
            self._move(node, new_mask)
            busy += len(decision.gpus)
            rec.node, rec.gpus, rec.mapping = node, decision.gpus, decision.mapping
            rec.start_s, rec.decision_ms = now, ms
            rec.policy_effbw_gbps = decision.effective_bandwidth_gbps
            if pattern.edges:
                memo = self.evaluator.memo
                rec.effbw_gbps = rt.judge_effbw(self.topology, pattern, decision.mapping,
                                                self.judge, memo)
                rec.effbw_eq2_gbps = rt.judge_effbw(self.topology, pattern, decision.mapping,
                                                    MODEL_MAPA, memo)
                rec.ideal_gbps = rt.ideal_effbw(self.topology, pattern, self.judge,
                                                self.evaluator.memo)
            rec.bandwidth_factor = rt.bandwidth_factor(rec.effbw_gbps, rec.ideal_gbps,
                                                       job.comm_share)
            prof = amaral.lookup_profile(job.profile) if (interference and job.profile) else None
            r = _Running(rec, frozenset(self.sockets[g] for g in decision.gpus), prof,
                         job.runtime_s * rec.bandwidth_factor, 1.0, now)
            running[job.id] = r
            self.running_on[node].append(r)
            push_completion(r, now)
            rerate(node, now)

        def finish(r: _Running, now: float) -> None:
            nonlocal busy, done
            if r.colo is not None:
                finish_shared(r, now)
                return
            rec = r.record
            rec.end_s = now
            node = rec.node
            self.running_on[node].remove(r)
            del running[rec.job.id]
            mask = self.masks[node]
            for g in rec.gpus:
                mask |= 1 << g
            self._move(node, mask)
            busy -= len(rec.gpus)
            done += 1
            rerate(node, now)

        def schedule(now: float) -> None:
            i = 0
            rejected: set[tuple[object, ...]] = set()
            max_free = self._max_free()
            while i < len(queue):
                job = queue[i]
                if (job.gpus > max_free) if not job.shared else \
                        not self._shared_capacity(job):
                    if self.queue_mode == "fifo":
                        break
                    i += 1
                    continue
                rec = records[job.id]
                first = first_postponed.get(job.id)
                if first is not None and now - first >= self.postpone_max_s - 1e-9 and \
                        self.requests[job.id].wait_for_better:
                    req = replace(self.requests[job.id], wait_for_better=False)
                    self.requests[job.id], self.request_keys[job.id] = req, req.key()
                key = self.request_keys[job.id]
                if key in rejected:
                    rec.postponements += 1
                    i += 1
                    continue
                rec.attempts += 1
                found = self._try_place(job)
                if found is None:
                    rejected.add(key)
                    rec.postponements += 1
                    if self.requests[job.id].wait_for_better:
                        first_postponed.setdefault(job.id, now)
                    i += 1
                    continue
                node, decision, ms = found
                queue.pop(i)
                start(job, node, decision, ms, now)
                rejected.clear()
                max_free = self._max_free()

        while events:
            now = events[0][0]
            while events and events[0][0] <= now + 1e-9:
                _, kind, _, jid, version = heapq.heappop(events)
                if kind == 1:
                    queue.append(records[jid].job)
                else:
                    r = running.get(jid)
                    if r is not None and r.version == version:
                        finish(r, now)
            schedule(now)
            timeline.append(Sample(now, busy, len(queue), len(running), self._fragmentation()))
        if queue or running:
            raise SimulationError(
                f"{len(queue)} job(s) could never be placed by {self.policy} (e.g. job "
                f"{queue[0].id if queue else '?'})")
        return RunResult(
            policy=self.policy, node_choice=self.rule,
            records=[records[j.id] for j in self.workload.jobs], timeline=timeline,
            total_gpus=self.size * self.n_nodes, wall_s=time.perf_counter() - wall0,
            cache_hits=self.evaluator.hits, cache_misses=self.evaluator.misses,
        )

    def _best_available(self, pattern: Pattern) -> float | None:
        """Best judged EffBW any node's free GPUs offer ``pattern`` right now (exhaustive per
        distinct free mask); None when some search cannot be exhaustive."""
        best = 0.0
        for mask in {self._mask_of(nk) for nk in self.groups}:
            if mask.bit_count() < pattern.size:
                continue
            free = tuple(g for g in range(self.size) if mask >> g & 1)
            value = rt.best_effbw(self.topology, free, pattern, self.judge, self.evaluator.memo)
            if value is None:
                return None
            best = max(best, value)
        return best
