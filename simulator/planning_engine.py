"""The planner's discrete-event loop: jobs arrive, run in segments on (node, GPUs), are
preempted and resumed, and finish; the energy they draw and their lateness are priced.

**Rescheduling points** (ANDREAS §III: "The Job Optimizer is invoked by the Job Manager
periodically, or in reaction to re-scheduling events (viz., a new job submission or
completion)"): every arrival and completion, and, for ``andreas``, every ``interval_s``
(300 s, Appendix B) while jobs are waiting or running. All events of one instant are applied,
then the policy runs once.

**Policies**: ``andreas`` (:func:`topology.planning.andreas.plan` with the given
:class:`~topology.planning.andreas.PlannerSettings`, by default gputopo's planner: every
submitted, unfinished job is re-planned; running jobs may move, resize or be preempted when
that pays for the work they lose), ``andreas-paper`` (the same settings with the paper's
choices, :meth:`~topology.planning.andreas.PlannerSettings.as_paper`: Algorithm 1 and Eq. 1
as published) and ``fifo``, ``edf``, ``ps`` with Algorithm 1's configuration rule or, suffixed
``-fastest``, the fastest configuration that fits
(:func:`topology.planning.baselines.plan_queue`: never re-configure a started job).

**Jobs** progress one epoch per ``epoch_time_s[(model, g)]`` seconds on their configuration.
The planner sees the epochs finished at the last snapshot (one per epoch, §V); a job stopped
(preempted, moved or resized) keeps the epochs it finished and loses the part of the epoch it
was in (§IV-A: "they will restart from the last snapshot"). Reconfiguration itself is
instantaneous, as in ANDREAS' simulator ("the reconfiguration costs that are not considered by
our simulator", §V-C).

**Costs.** Energy: each node draws c_ng (EUR/h, :mod:`topology.planning.energy`) while g ≥ 1
of its GPUs are busy; a node with no job costs nothing (it is not the workload's). Tardiness:
ω_j × hours between the due date and the completion. Total = energy + tardiness (§V-B's
"total cost, which is the sum of the energy cost plus the penalties due to jobs' due dates
violations").

**Plan time** is the wall-clock time of one policy call (build the input, plan), ms.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from simulator import SimulationError
from simulator.planning_workloads import ClusterNode, PlanningJob, PlanningWorkload
from topology.planning.andreas import (
    Placement,
    PlanCache,
    PlanJob,
    PlannerSettings,
    PlanNode,
    plan,
)
from topology.planning.baselines import METHODS, plan_queue
from topology.planning.energy import node_cost_eur_per_h

#: The ANDREAS policies: gputopo's planner and the paper's Algorithm 1.
ANDREAS_POLICIES = ("andreas", "andreas-paper")
POLICIES = (*METHODS, *ANDREAS_POLICIES)

_COMPLETION, _ARRIVAL, _TICK = 0, 1, 2


@dataclass
class Segment:
    """One uninterrupted run of a job on one configuration (a row of
    ``segments-<policy>.csv``)."""

    job: str
    node: str
    gpu_model: str
    gpus: int
    start_s: float
    end_s: float = -1.0
    epochs_done: int = 0  # epochs finished during this segment


@dataclass
class JobOutcome:
    """What happened to one job."""

    job: PlanningJob
    end_s: float = -1.0
    segments: list[Segment] = field(default_factory=list)

    @property
    def tardiness_s(self) -> float:
        """max(0, completion − due date), s."""
        return max(0.0, self.end_s - self.job.due_s)

    @property
    def tardiness_eur(self) -> float:
        """ω × hours late, EUR."""
        return self.job.tardiness_weight * self.tardiness_s / 3600.0

    @property
    def preemptions(self) -> int:
        """Segments stopped before the job finished (preempted, moved or resized)."""
        return max(0, len(self.segments) - 1)


@dataclass
class PlanningResult:
    """One policy's run."""

    policy: str
    workload: PlanningWorkload
    cluster: tuple[ClusterNode, ...]
    outcomes: list[JobOutcome]
    energy_cost_eur: float
    plan_ms: list[float]
    rescheduling_points: int
    wall_s: float
    node_energy_eur: dict[str, float]
    #: the workload's energy floor on this cluster at this price, EUR
    #: (:meth:`~simulator.planning_workloads.PlanningWorkload.energy_floor_eur`)
    energy_floor_eur: float = 0.0

    @property
    def tardiness_cost_eur(self) -> float:
        """Σ ω × hours late, EUR."""
        return sum(o.tardiness_eur for o in self.outcomes)

    @property
    def total_cost_eur(self) -> float:
        """Energy + tardiness, EUR."""
        return self.energy_cost_eur + self.tardiness_cost_eur

    @property
    def makespan_s(self) -> float:
        """Last completion − first submission, s."""
        return (max(o.end_s for o in self.outcomes)
                - min(o.job.arrival_s for o in self.outcomes))

    @property
    def segments(self) -> list[Segment]:
        """Every segment, by start time."""
        return sorted((s for o in self.outcomes for s in o.segments),
                      key=lambda s: (s.start_s, s.job))


@dataclass
class _Run:
    outcome: JobOutcome
    node: int
    gpus: int
    start_s: float
    epochs_at_start: int
    per_epoch_s: float
    version: int


class PlanningSimulation:
    """One policy on one planning workload.

    Args:
        workload: cluster and jobs.
        policy: one of :data:`POLICIES`.
        cluster: the nodes (None: the workload's own).
        settings: planner settings (ρ, MaxIt_RG, H = the periodic interval, price, seed).

    Raises:
        SimulationError: unknown policy, no cluster, a job no node can run, a GPU model with no
            power profile.
    """

    def __init__(self, workload: PlanningWorkload, policy: str, *,
                 cluster: tuple[ClusterNode, ...] | None = None,
                 settings: PlannerSettings | None = None) -> None:
        if policy not in POLICIES:
            raise SimulationError(f"unknown planning policy {policy!r}; use one of "
                                  f"{', '.join(POLICIES)}")
        nodes = cluster if cluster is not None else workload.cluster
        if not nodes:
            raise SimulationError(f"{workload.name}: no cluster; give --topology (and --nodes)")
        self.workload = workload
        self.policy = policy
        self.cluster = tuple(nodes)
        self.settings = settings or PlannerSettings()
        if policy == "andreas-paper":
            self.settings = self.settings.as_paper()
        self.cache = PlanCache()  # per-epoch time rows across this run's points
        self.plan_nodes = [PlanNode(n.name, n.gpu_model, n.gpus, workload.power_for(n.gpu_model))
                           for n in self.cluster]
        self.cost_per_s = [[node_cost_eur_per_h(p.power, g, self.settings.price) / 3600.0
                            for g in range(p.gpus + 1)] for p in self.plan_nodes]
        models = {(n.gpu_model, g) for n in self.cluster for g in range(1, n.gpus + 1)}
        for job in workload.jobs:
            if not models & set(job.epoch_time_s):
                raise SimulationError(
                    f"job {job.id}: no node of the cluster has a GPU model and count its "
                    f"profile covers ({', '.join(f'{m}:{g}' for m, g in job.epoch_time_s)})")

    def run(self) -> PlanningResult:
        """Simulate until every job has finished.

        Raises:
            SimulationError: the policy left jobs that can never run (a bug).
        """
        wall0 = time.perf_counter()
        s = self.settings
        index = {n.name: i for i, n in enumerate(self.cluster)}
        outcomes = {j.id: JobOutcome(j) for j in self.workload.jobs}
        done_epochs = {j.id: 0 for j in self.workload.jobs}
        running: dict[str, _Run] = {}
        waiting: set[str] = set()
        busy = [0] * len(self.cluster)
        node_eur = [0.0] * len(self.cluster)
        last = [0.0] * len(self.cluster)
        events: list[tuple[float, int, int, str, int]] = []
        seq = 0
        for job in self.workload.jobs:
            heapq.heappush(events, (job.arrival_s, _ARRIVAL, seq, job.id, 0))
            seq += 1
        plan_ms: list[float] = []
        points = 0
        finished = 0
        next_tick = math.inf

        def account(node: int, now: float) -> None:
            if busy[node]:
                node_eur[node] += self.cost_per_s[node][busy[node]] * (now - last[node])
            last[node] = now

        def stop(jid: str, now: float) -> None:
            r = running.pop(jid)
            seg = r.outcome.segments[-1]
            epochs = min(r.outcome.job.epochs - r.epochs_at_start,
                         int((now - r.start_s) / r.per_epoch_s + 1e-9))
            seg.end_s = now
            seg.epochs_done = epochs
            done_epochs[jid] = r.epochs_at_start + epochs
            account(r.node, now)
            busy[r.node] -= r.gpus

        def start(jid: str, where: Placement, now: float) -> None:
            nonlocal seq
            node = index[where.node]
            job = outcomes[jid].job
            per = job.epoch_time_s[(self.cluster[node].gpu_model, where.gpus)]
            account(node, now)
            busy[node] += where.gpus
            if busy[node] > self.cluster[node].gpus:
                raise SimulationError(f"{self.policy}: node {where.node} over-committed")
            version = len(outcomes[jid].segments) + 1  # a stale completion has an older one
            r = _Run(outcomes[jid], node, where.gpus, now, done_epochs[jid], per, version)
            running[jid] = r
            outcomes[jid].segments.append(Segment(jid, where.node, self.cluster[node].gpu_model,
                                                  where.gpus, now))
            end = now + (job.epochs - done_epochs[jid]) * per
            heapq.heappush(events, (end, _COMPLETION, seq, jid, version))
            seq += 1

        while events:
            now = events[0][0]
            changed = False
            while events and events[0][0] <= now:
                _, kind, _, jid, version = heapq.heappop(events)
                if kind == _ARRIVAL:
                    waiting.add(jid)
                    changed = True
                elif kind == _COMPLETION:
                    r = running.get(jid)
                    if r is None or r.version != version:
                        continue  # stale: the segment was stopped earlier
                    stop(jid, now)
                    outcomes[jid].end_s = now
                    finished += 1
                    changed = True
                else:
                    changed = True
            if not changed:
                continue
            if not running and not waiting:
                next_tick = math.inf
                continue
            t0 = time.perf_counter()
            self._reschedule(now, running, waiting, done_epochs, stop, start)
            plan_ms.append((time.perf_counter() - t0) * 1000.0)
            points += 1
            if self.policy in ANDREAS_POLICIES and s.interval_s > 0:
                tick = (math.floor(now / s.interval_s) + 1) * s.interval_s
                if tick < next_tick or next_tick <= now:
                    next_tick = tick
                    heapq.heappush(events, (tick, _TICK, seq, "", 0))
                    seq += 1
        for i in range(len(self.cluster)):
            account(i, last[i])
        if finished != len(outcomes):
            left = sorted(set(outcomes) - {j for j, o in outcomes.items() if o.end_s >= 0})
            raise SimulationError(f"{self.policy}: {len(left)} job(s) never finished: "
                                  f"{', '.join(left[:5])}")
        return PlanningResult(
            policy=self.policy, workload=self.workload, cluster=self.cluster,
            outcomes=[outcomes[j.id] for j in self.workload.jobs],
            energy_cost_eur=sum(node_eur), plan_ms=plan_ms, rescheduling_points=points,
            wall_s=time.perf_counter() - wall0,
            node_energy_eur={n.name: e for n, e in zip(self.cluster, node_eur, strict=True)},
            energy_floor_eur=self.workload.energy_floor_eur(s.price, self.cluster),
        )

    def _reschedule(self, now: float, running: dict[str, _Run], waiting: set[str],
                    done_epochs: dict[str, int], stop: Callable[[str, float], None],
                    start: Callable[[str, Placement, float], None]) -> None:
        jobs: list[PlanJob] = []
        by_id = {j.id: j for j in self.workload.jobs}
        for jid in sorted(set(running) | waiting, key=lambda j: (by_id[j].arrival_s, j)):
            job = by_id[jid]
            r = running.get(jid)
            done = done_epochs[jid]
            current = None
            progress = 0.0
            if r is not None:
                ran = min(job.epochs - r.epochs_at_start - 1,
                          int((now - r.start_s) / r.per_epoch_s + 1e-9))
                done = r.epochs_at_start + ran
                progress = max(0.0, now - r.start_s - ran * r.per_epoch_s)
                current = Placement(self.cluster[r.node].name, r.gpus)
            jobs.append(PlanJob(jid, job.due_s, job.tardiness_weight, job.epochs - done,
                                job.epoch_time_s, current, job.arrival_s, progress))
        if self.policy in ANDREAS_POLICIES:
            result = plan(now, self.plan_nodes, jobs, self.settings, cache=self.cache)
            target = {d.job: d.placement for d in result.decisions.values()}
        else:
            target = plan_queue(self.policy, now, self.plan_nodes, jobs, self.settings)
        for j in jobs:  # stop first, so that the GPUs are free for the starts
            if j.current is not None and target[j.id] != j.current:
                stop(j.id, now)
                waiting.add(j.id)
        for j in jobs:
            where = target[j.id]
            if where is not None and where != j.current:
                waiting.discard(j.id)
                start(j.id, where, now)


assert set(METHODS) | set(ANDREAS_POLICIES) == set(POLICIES)
