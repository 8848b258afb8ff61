"""``gputopo planner``: ANDREAS' Job Manager on Kubernetes — a controller that plans the
managed batch/v1 Jobs (:mod:`planner.jobs`) with the Randomized Greedy
(:func:`topology.planning.andreas.plan`) and acts on them.

**Rescheduling points** (ANDREAS §III): every ``interval_s`` (300 s, Appendix B), and when a
managed Job is created, finishes or — after the planner suspended it — has no pods left (so it
can be resumed elsewhere). Events closer than ``debounce_s`` make one point.

**One point** (:meth:`Planner.reconcile`):

1. read the Nodes (GPU model and count: :mod:`planner.cluster`), the managed Jobs, the pods
   that may hold GPUs and the profile document (ConfigMap or file);
2. sort the Jobs: *finished*, *running* (resumed by the planner: they keep their node and GPU
   count unless the plan moves them), *stopping* (suspended, pods still there: their GPUs stay
   held) and *waiting* (suspended, no pods: they may start anywhere);
3. plan running and waiting Jobs on the GPUs not held by other pods; a Job's per-epoch times
   are its profile's, corrected by what it and its profile's other Jobs measured
   (:class:`topology.planning.profiles.EpochTimeLearner`, from ``gputopo.io/epochs-done``);
4. act: suspend the running Jobs the plan moves, resizes or preempts (the Job controller
   deletes their pods; a moved Job is resumed at a later point, once its pods are gone), and
   resume the waiting Jobs it starts (:func:`planner.jobs.resume_patch`). Each action writes
   an Event and the ``gputopo.io/plan`` annotation on the Job;
5. update the metrics (:mod:`planner.metrics`), among them the predicted and the actual
   energy cost (:class:`planner.cluster.EnergyLedger`).

Only one replica acts: with ``leader_elect`` the planner holds a coordination.k8s.io Lease
(``kubernetes.leaderelection``) and steps down — exits — when it loses it.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.cluster import (
    EnergyLedger,
    GpuNode,
    held_gpus,
    job_of,
    parse_node,
    pod_gpus,
    pod_terminal,
)
from planner.gang import (
    admission_patch,
    decide,
    gang_nodes,
    gang_status,
    is_gang,
    parse_gang,
    promised_gpus,
)
from planner.jobs import (
    ManagedJob,
    annotation_patch,
    format_time,
    managed,
    plan_of,
    plan_status,
    resume_patch,
    suspend_patch,
)
from planner.kube import ApiError, KubeApi
from planner.metrics import Metrics
from planner.settings import PlannerSettings as Settings
from topology.contract import ANN_PLAN, LABEL_QUEUE
from topology.hierarchy import DEFAULT as DEFAULT_HIERARCHY
from topology.hierarchy import Hierarchy
from topology.planning.andreas import (
    Placement,
    PlanCache,
    PlanJob,
    PlannerSettings,
    PlanningError,
    PlanNode,
    plan,
)
from topology.planning.energy import (
    BUILTIN_POWER,
    EnergyError,
    EnergyPrice,
    PowerProfile,
    node_energy_eur,
)
from topology.planning.profiles import (
    Config,
    EpochObservation,
    EpochTimeLearner,
    ProfileDocument,
    ProfileError,
    load_profiles,
)
from topology.policies.evaluate import Evaluator
from topology.text import read_utf8

log = logging.getLogger("gputopo.planner")

PROFILES_KEY = "profiles.yaml"


@dataclass
class _Segment:
    """A run the planner started: where, and the job's epoch reports during it."""

    profile: str | None
    config: Config
    started_s: float
    observations: list[EpochObservation] = field(default_factory=list)


@dataclass
class RoundResult:
    """What one rescheduling point did (tests and logs)."""

    at_s: float
    trigger: str
    resumed: list[str] = field(default_factory=list)
    suspended: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)  # planned onto GPUs still being freed
    planned: int = 0
    objective_eur: float = 0.0
    skipped: bool = False


class Planner:
    """The controller (thread-safe: a watch thread reports Job changes while the loop plans).

    Args:
        api: the API (:class:`planner.kube.KubeApi`).
        settings: :class:`planner.settings.PlannerSettings`.
        metrics: where to publish (a new registry when None).
        clock: Unix seconds (tests pass a fake clock).
    """

    def __init__(self, api: KubeApi, settings: Settings, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.price = EnergyPrice(pue=settings.pue, eur_per_kwh=settings.eur_per_kwh)
        self.plan_settings = PlannerSettings(
            rho=settings.rho, max_iterations=settings.max_iterations,
            interval_s=settings.interval_s, price=self.price, seed=settings.seed,
            restart_s=settings.restart_s, move_penalty_eur=settings.move_penalty_eur)
        if settings.paper:
            self.plan_settings = self.plan_settings.as_paper()
        self.plan_cache = PlanCache()
        self.learner = EpochTimeLearner()
        self.hierarchy = (Hierarchy.parse(settings.hierarchy) if settings.hierarchy is not None
                          else DEFAULT_HIERARCHY)
        self.gang_evaluator = Evaluator()
        self.ledger = EnergyLedger()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._trigger = "start"
        self._segments: dict[str, _Segment] = {}
        self._known: dict[str, ManagedJob] = {}  # uid -> last seen (watch)
        # uid -> the order the watch (or, for a Job it has not delivered yet, a list) first
        # showed the Job: the gangs' queue order within one creation second
        self._first_seen: dict[str, int] = {}
        self._next_seen = itertools.count()
        self._postponement_ends: float | None = None
        self._warned: set[str] = set()
        self._finished: dict[str, float] = {}  # uid -> tardiness cost, EUR
        self._profiles = ProfileDocument.model_validate({})
        self._profiles_text: str | None = None
        self._node_power: dict[str, PowerProfile] = {}
        self._models: dict[str, str] = {}  # node -> GPU model key

    # ------------------------------------------------------------------ triggers
    def wake(self, trigger: str) -> None:
        """Ask for a rescheduling point now (after the debounce)."""
        with self._lock:
            self._trigger = trigger
        self._wake.set()

    def stop(self) -> None:
        """End :meth:`run`."""
        self._stop.set()
        self._wake.set()

    def observe(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """A watch event on a managed Job: record epoch reports, and wake the loop when the
        Job is new, finished, deleted, or suspended with its pods gone."""
        job = managed([obj])[0] if obj else None
        if job is None:
            return
        now = self.clock()
        with self._lock:
            old = self._known.get(job.uid)
            if event_type == "DELETED":
                self._known.pop(job.uid, None)
                self._first_seen.pop(job.uid, None)
            else:
                self._known[job.uid] = job
                self._see(job.uid)
            self._record_epochs(job, now)
        if event_type == "DELETED":
            self.wake("job-deleted")
        elif old is None:
            self.wake("job-added")
        elif job.finished and not old.finished:
            self.wake("job-finished")
        elif job.waiting and not old.waiting:
            self.wake("job-stopped")

    def observe_pod(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """A watch event on a pod that may hold GPUs: when one bound to a node goes
        (``DELETED``: deleted, or ended — the watch's field selector drops Succeeded and Failed
        pods) or ends while a managed Job waits, wake the loop (trigger ``gpus-freed``). GPUs
        that pods outside the planner's Jobs free would otherwise wait for the next periodic
        point."""
        if event_type != "DELETED" and not pod_terminal(pod):
            return
        if not (pod.get("spec") or {}).get("nodeName") or pod_gpus(pod) < 1:
            return
        with self._lock:
            waiting = any(j.waiting for j in self._known.values())
        if waiting:
            self.wake("gpus-freed")

    def _see(self, uid: str) -> None:
        """Rank ``uid`` after every Job seen before it, the first time it is seen (caller
        holds the lock)."""
        if uid and uid not in self._first_seen:
            self._first_seen[uid] = next(self._next_seen)

    def _record_epochs(self, job: ManagedJob, now: float) -> None:
        seg = self._segments.get(job.uid)
        if seg is None or not job.running:
            return
        obs = seg.observations
        if not obs or job.epochs_done > obs[-1].epochs_done:
            obs.append(EpochObservation(now, job.epochs_done))

    @property
    def postponement_ends(self) -> float | None:
        """When the first bound of the gangs the last rescheduling point postponed ends (Unix
        seconds; ``postponedAt + postpone_max_s``), or None: :meth:`run` holds a point then
        (trigger ``postponement-ended``), so a gang's wait does not outlast its bound by up to
        ``interval_s``."""
        with self._lock:
            return self._postponement_ends

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        """Plan at every trigger, every ``interval_s`` and when a gang's postponement ends
        (:attr:`postponement_ends`) until :meth:`stop`."""
        next_periodic = self.clock()
        while not self._stop.is_set():
            ends = self.postponement_ends
            due = next_periodic if ends is None else min(next_periodic, ends)
            woke = self._wake.wait(max(0.0, due - self.clock()))
            if self._stop.is_set():
                break
            if woke and self.settings.debounce_s:
                time.sleep(self.settings.debounce_s)
            with self._lock:
                ended = ends is not None and self.clock() >= ends and \
                    self.clock() < next_periodic
                trigger = self._trigger if woke else \
                    ("postponement-ended" if ended else "periodic")
                self._trigger = "periodic"
            self._wake.clear()
            try:
                self.reconcile(trigger)
            except ApiError as exc:
                log.warning("rescheduling point failed: %s", exc)
            except Exception:  # noqa: BLE001 - the controller must keep running
                log.exception("rescheduling point failed")
            if not woke or self.clock() >= next_periodic:
                next_periodic = self.clock() + self.settings.interval_s

    # ------------------------------------------------------------------ inputs
    def _load_profiles(self) -> ProfileDocument:
        s = self.settings
        text: str | None = None
        try:
            if s.profiles_configmap:
                ns, name = s.profiles_configmap.split("/")
                data = self.api.read_configmap(ns, name)
                text = (data or {}).get(PROFILES_KEY)
            elif s.profiles_file is not None:
                text = read_utf8(s.profiles_file)
        except (ApiError, OSError) as exc:
            log.warning("profiles not read (keeping the last ones): %s", exc)
            return self._profiles
        if text is None or text == self._profiles_text:
            return self._profiles
        try:
            self._profiles = load_profiles(text)
            self._profiles_text = text
        except ProfileError as exc:
            log.warning("profile document rejected (keeping the last one): %s", exc)
        return self._profiles

    def _epoch_table(self, job: ManagedJob, doc: ProfileDocument) -> dict[Config, float]:
        declared: dict[Config, float] = {}
        if job.profile and job.profile in doc.profiles:
            declared.update(doc.profiles[job.profile].epoch_time_s)
        declared.update(job.epoch_time_s)
        key = job.profile or f"job:{job.uid}"
        return self.learner.epoch_times(key, declared)

    # ------------------------------------------------------------------ one point
    def reconcile(self, trigger: str = "manual") -> RoundResult:
        """One rescheduling point (module docstring). API errors of single actions are
        logged and reported as Events; a failed read raises :class:`ApiError`."""
        started = time.perf_counter()
        now = self.clock()
        result = RoundResult(now, trigger)
        self.metrics.points.labels(trigger).inc()
        nodes_json = self.api.list_nodes()
        with self._lock:
            mark = next(self._next_seen)  # Jobs first seen from here on may be newer than the list
        jobs_json, _ = self.api.list_jobs()
        listed = {str((o.get("metadata") or {}).get("uid", "")) for o in jobs_json}
        with self._lock:
            gone = [u for u, seq in self._first_seen.items() if seq < mark and u not in listed]
            for uid in gone:  # deleted while the watch was away
                del self._first_seen[uid]
            for o in jobs_json:  # Jobs the watch has not delivered yet: in the list's order
                self._see(str((o.get("metadata") or {}).get("uid", "")))
        pods = self.api.list_pods()
        doc = self._load_profiles()
        power_table = {**BUILTIN_POWER, **doc.power_profiles()}

        gang_objs = [o for o in jobs_json if is_gang(o)]
        jobs_json = [o for o in jobs_json if not is_gang(o)]
        objs = {str((o.get("metadata") or {}).get("uid", "")): o for o in jobs_json}
        jobs = [j for j in managed(jobs_json) if not self.settings.queue
                or j.queue == self.settings.queue]
        with self._lock:
            for j in jobs:
                self._known[j.uid] = j
                self._record_epochs(j, now)
        uids = {j.uid for j in jobs}
        job_pods = [p for p in self.api.list_job_pods() if job_of(p) in uids]
        self.ledger.see_pods(job_pods, now)
        self.ledger.vanished({str((p.get("metadata") or {}).get("uid", "")) for p in job_pods})

        gpu_nodes: dict[str, GpuNode] = {}
        for obj in nodes_json:
            n = parse_node(obj)
            if n is None:
                continue
            if n.gpu_model not in power_table:
                if f"node:{n.name}" not in self._warned:
                    self._warned.add(f"node:{n.name}")
                    log.warning("node %s: no power profile for GPU model %s; not planned",
                                n.name, n.gpu_model)
                continue
            gpu_nodes[n.name] = n
            self._node_power[n.name] = power_table[n.gpu_model]
            self._models[n.name] = n.gpu_model

        states = {"waiting": 0, "running": 0, "stopping": 0, "finished": 0, "invalid": 0}
        plannable: list[ManagedJob] = []
        running_uids: set[str] = set()
        for j in jobs:
            if j.finished:
                states["finished"] += 1
                self._job_finished(j, now)
                continue
            if j.error:
                states["invalid"] += 1
                if j.uid not in self._warned:
                    self._warned.add(j.uid)
                    self.api.event(objs[j.uid], "InvalidPlanningSpec", j.error, "Warning")
                continue
            if j.running:
                states["running"] += 1
                if j.node in gpu_nodes and j.gpus > 0:  # pinned by the planner: it plans it
                    running_uids.add(j.uid)
                    plannable.append(j)
                continue
            if j.stopping:
                states["stopping"] += 1
                continue
            states["waiting"] += 1
            plannable.append(j)
        for state, count in states.items():
            self.metrics.jobs.labels(state).set(count)

        held = held_gpus(pods, running_uids)
        singles = [(j.uid, str(j.node), j.gpus) for j in plannable if j.running and j.node]
        for node, gpus in self._gangs(gang_objs, nodes_json, pods, singles, now,
                                      result).items():
            held[node] = held.get(node, 0) + gpus
        plan_nodes = []
        for n in gpu_nodes.values():
            free = n.gpus - held.get(n.name, 0)
            if free > 0:  # the node's GPUs others hold (gangs) share its idle power
                plan_nodes.append(PlanNode(n.name, n.gpu_model, free, self._node_power[n.name],
                                           total_gpus=n.gpus))
        names = {n.name for n in plan_nodes}
        plan_jobs: list[PlanJob] = []
        for j in plannable:
            table = self._epoch_table(j, doc)
            current = Placement(j.node, j.gpus) if j.running and j.node else None
            if current is not None and current.node not in names:
                continue  # its node is gone or full of other pods: leave it be
            remaining = max(1, j.remaining_epochs)
            progress = 0.0
            seg = self._segments.get(j.uid)
            if current is not None and seg is not None:
                last = seg.observations[-1].time_s if seg.observations else seg.started_s
                per = table.get(seg.config)
                progress = max(0.0, now - last)
                if per:
                    progress = min(progress, per)
            plan_jobs.append(PlanJob(j.uid, j.due_s, j.weight, remaining, table, current,
                                     j.created_s, progress))
        # running jobs must fit their node, or Algorithm 1 refuses the input: a node whose
        # running jobs and other pods hold more than it has (a pod started before the
        # planner saw it, a node that shrank) is left alone this time
        used: dict[str, int] = {}
        for pj in plan_jobs:
            if pj.current is not None:
                used[pj.current.node] = used.get(pj.current.node, 0) + pj.current.gpus
        over = {n.name for n in plan_nodes if used.get(n.name, 0) > n.gpus}
        plan_nodes = [n for n in plan_nodes if n.name not in over]
        plan_jobs = [pj for pj in plan_jobs if pj.current is None or pj.current.node not in over]
        capacity = {n.name: n.gpus for n in plan_nodes}
        if not plan_jobs:
            self._publish(now, None)
            self.metrics.plan_seconds.observe(time.perf_counter() - started)
            result.skipped = True
            return result
        try:
            p = plan(now, plan_nodes, plan_jobs, self.plan_settings,
                     cache=self.plan_cache)
        except PlanningError as exc:
            log.warning("planning failed: %s", exc)
            result.skipped = True
            return result
        result.planned = len(plan_jobs)
        result.objective_eur = p.objective.total_eur
        by_uid = {j.uid: j for j in plannable}
        # GPUs free right now: a Job suspended in this point keeps its GPUs until its pods
        # are gone, so a start that needs them waits for the next point (its pods going
        # trigger one)
        free_now = dict(capacity)
        for pj in plan_jobs:
            if pj.current is not None:
                free_now[pj.current.node] -= pj.current.gpus
        f_obj = p.objective.total_eur
        for pj in plan_jobs:  # stops first
            job, d = by_uid[pj.id], p.decisions[pj.id]
            if job.running and d.placement != pj.current:
                self._suspend(job, objs[job.uid], d, f_obj, now, result)
        for pj in plan_jobs:
            job, d = by_uid[pj.id], p.decisions[pj.id]
            if not job.waiting:
                continue
            if d.placement is None:
                self._note_waiting(job, objs[job.uid], d, f_obj, now)
            elif free_now.get(d.placement.node, 0) >= d.placement.gpus:
                free_now[d.placement.node] -= d.placement.gpus
                self._resume(job, objs[job.uid], d, f_obj, now, result)
            else:
                result.deferred.append(job.key)
        self._publish(now, p.objective.tardiness_eur, p.objective.total_eur)
        self.metrics.plan_seconds.observe(time.perf_counter() - started)
        log.info("rescheduling point (%s): %d jobs planned, %d resumed, %d suspended, "
                 "f_OBJ %.4f EUR", trigger, result.planned, len(result.resumed),
                 len(result.suspended), result.objective_eur)
        return result

    # ------------------------------------------------------------------ gangs
    def _gangs(self, gang_objs: list[dict[str, Any]], nodes_json: list[dict[str, Any]],
               pods: list[dict[str, Any]], singles: list[tuple[str, str, int]], now: float,
               result: RoundResult) -> dict[str, int]:
        """Admit, preempt or keep waiting the gangs (:mod:`planner.gang`); returns the GPUs per
        node their pods hold without being bound yet (admitted now or earlier), which the
        single-pod plan must leave alone."""
        if not gang_objs:
            with self._lock:
                self._postponement_ends = None
            return {}
        objs = {str((o.get("metadata") or {}).get("uid", "")): o for o in gang_objs}
        labels = {uid: ((o.get("metadata") or {}).get("labels") or {}) for uid, o in objs.items()}
        gangs = [g for g in (parse_gang(o) for o in gang_objs)
                 if not self.settings.queue or labels[g.uid].get(LABEL_QUEUE)
                 == self.settings.queue]
        promised = promised_gpus(gangs, pods, singles)
        nodes, skipped = gang_nodes(nodes_json, pods, self.hierarchy, promised)
        for line in skipped:
            if line not in self._warned:
                self._warned.add(line)
                log.warning("gangs: %s; not used", line)
        with self._lock:
            first_seen = dict(self._first_seen)
        decision = decide(gangs, nodes, self.hierarchy, pods,
                          chooser=self.settings.gang_chooser, evaluator=self.gang_evaluator,
                          first_seen=first_seen, now_s=now,
                          postpone_max_s=self.settings.postpone_max_s)
        bounds = [since + self.settings.postpone_max_s
                  for g, _ in decision.waiting
                  if (since := decision.postponed.get(g.uid)) is not None
                  and since + self.settings.postpone_max_s > now]
        with self._lock:
            self._postponement_ends = min(bounds, default=None)
        for g in decision.invalid:
            if g.uid not in self._warned:
                self._warned.add(g.uid)
                self.api.event(objs[g.uid], "InvalidGang", g.error, "Warning")
        for victim, by in decision.preempt:
            ops = suspend_patch(objs[victim.uid]) + annotation_patch(objs[victim.uid], {
                ANN_PLAN: gang_status("preempted", decided_s=now,
                                      reason=f"gang {by.key} (priority {by.priority}) needs "
                                             "its GPUs")})
            try:
                self.api.patch_job(victim.namespace, victim.name, ops)
            except ApiError as exc:
                log.warning("preempt gang %s failed: %s", victim.key, exc)
                continue
            self.metrics.actions.labels("suspend").inc()
            result.suspended.append(victim.key)
            self.api.event(objs[victim.uid], "Preempted",
                           f"all {victim.pods} pods suspended at once: gang {by.key} "
                           f"(priority {by.priority}) needs their GPUs")
        for g, gplan in decision.admit:
            names = [nodes[p.node].name for p in gplan.pods]
            status = gang_status("running", decided_s=now, reason=gplan.reason, plan=gplan,
                                 nodes=names)
            ops = admission_patch(objs[g.uid], names) + annotation_patch(objs[g.uid],
                                                                         {ANN_PLAN: status})
            try:
                self.api.patch_job(g.namespace, g.name, ops)
            except ApiError as exc:
                log.warning("admit gang %s failed: %s", g.key, exc)
                continue
            self.metrics.actions.labels("resume").inc()
            result.resumed.append(g.key)
            for name in names:
                promised[name] = promised.get(name, 0) + g.gpus
            self.api.event(objs[g.uid], "Admitted",
                           f"{g.pods} pods of {g.gpus} GPU(s) on "
                           f"{', '.join(dict.fromkeys(names))}: {gplan.reason}")
        for g, why in decision.waiting:
            old = plan_of(objs[g.uid])
            since = decision.postponed.get(g.uid)
            if old is not None and old.get("state") == "waiting" and old.get("reason") == why \
                    and old.get("postponedAt") == (None if since is None else format_time(since)):
                continue
            try:
                self.api.patch_job(g.namespace, g.name, annotation_patch(objs[g.uid], {
                    ANN_PLAN: gang_status("waiting", decided_s=now, reason=why,
                                          postponed_s=since)}))
            except ApiError as exc:
                log.warning("status of gang %s not written: %s", g.key, exc)
                continue
            self.api.event(objs[g.uid], "Postponed", why)
        return promised

    # ------------------------------------------------------------------ actions
    def _resume(self, job: ManagedJob, obj: Mapping[str, Any], d: Any, f_obj: float,
                now: float, result: RoundResult) -> None:
        node, gpus = d.placement.node, d.placement.gpus
        status = plan_status(node, gpus, decided_s=now, predicted_finish_s=d.predicted_finish_s,
                             energy_cost_eur=d.energy_cost_eur, tardiness_s=d.tardiness_s,
                             objective_eur=f_obj, reason=d.reason, state="running")
        ops = resume_patch(obj, node, gpus) + annotation_patch(obj, {ANN_PLAN: status})
        try:
            self.api.patch_job(job.namespace, job.name, ops)
        except ApiError as exc:
            log.warning("resume %s failed: %s", job.key, exc)
            return
        self.metrics.actions.labels("resume").inc()
        result.resumed.append(job.key)
        model = self._models.get(node, "")
        self.ledger.planned(job, node, gpus, now, d.exec_time_s or 0.0)
        with self._lock:
            self._segments[job.uid] = _Segment(
                job.profile or f"job:{job.uid}", (model, gpus), now,
                [EpochObservation(now, job.epochs_done)])
        self.api.event(obj, "Resumed",
                       f"on {gpus} GPU(s) of {node}: {d.reason}; predicted finish "
                       f"{format_time(d.predicted_finish_s)}, energy "
                       f"{d.energy_cost_eur:.4f} EUR, {job.remaining_epochs} epochs left")

    def _suspend(self, job: ManagedJob, obj: Mapping[str, Any], d: Any, f_obj: float,
                 now: float, result: RoundResult) -> None:
        target = d.placement
        why = (f"moving to {target.gpus} GPU(s) of {target.node}" if target is not None
               else d.reason)
        status = plan_status(target.node if target else None, target.gpus if target else None,
                             decided_s=now, predicted_finish_s=d.predicted_finish_s,
                             energy_cost_eur=d.energy_cost_eur, tardiness_s=d.tardiness_s,
                             objective_eur=f_obj, reason=why,
                             state="moving" if target is not None else "preempted")
        ops = suspend_patch(obj) + annotation_patch(obj, {ANN_PLAN: status})
        try:
            self.api.patch_job(job.namespace, job.name, ops)
        except ApiError as exc:
            log.warning("suspend %s failed: %s", job.key, exc)
            return
        self.metrics.actions.labels("suspend").inc()
        result.suspended.append(job.key)
        self.ledger.stopped(job, now)
        self._end_segment(job.uid)
        self.api.event(obj, "Preempted" if target is None else "Moving",
                       f"suspended at epoch {job.epochs_done}/{job.epochs}: {why}")

    def _note_waiting(self, job: ManagedJob, obj: Mapping[str, Any], d: Any, f_obj: float,
                      now: float) -> None:
        old = plan_of(obj)
        if old is not None and old.get("state") == "waiting":
            return  # written once per wait, not at every point
        status = plan_status(None, None, decided_s=now, predicted_finish_s=None,
                             energy_cost_eur=None, tardiness_s=None, objective_eur=f_obj,
                             reason=d.reason, state="waiting")
        try:
            self.api.patch_job(job.namespace, job.name, annotation_patch(obj, {ANN_PLAN: status}))
        except ApiError as exc:
            log.warning("status of %s not written: %s", job.key, exc)
            return
        self.api.event(obj, "Postponed", d.reason)

    def _end_segment(self, uid: str) -> None:
        with self._lock:
            seg = self._segments.pop(uid, None)
        if seg is not None and seg.profile is not None:
            try:
                self.learner.observe(seg.profile, seg.config, seg.observations)
            except ProfileError as exc:
                log.debug("epoch reports of %s not used: %s", uid, exc)

    def _job_finished(self, job: ManagedJob, now: float) -> None:
        if job.uid in self._finished:
            return
        end = job.finished_s if job.finished_s is not None else now
        self._finished[job.uid] = job.weight * max(0.0, end - job.due_s) / 3600.0
        self._end_segment(job.uid)

    # ------------------------------------------------------------------ metrics
    def _energy(self, now: float) -> tuple[float, float]:
        power = dict(self._node_power)
        try:
            planned = node_energy_eur([iv for iv in self.ledger.predicted_intervals()
                                       if iv[0] in power], power, self.price)
            actual = node_energy_eur([iv for iv in self.ledger.actual_intervals(now)
                                      if iv[0] in power], power, self.price)
        except EnergyError as exc:
            log.warning("energy not accounted: %s", exc)
            return math.nan, math.nan
        return planned, actual

    def _publish(self, now: float, predicted_tardiness: float | None,
                 objective: float | None = None) -> None:
        planned, actual = self._energy(now)
        self.metrics.planned_energy.set(planned)
        self.metrics.actual_energy.set(actual)
        self.metrics.tardiness.set(sum(self._finished.values()))
        if predicted_tardiness is not None:
            self.metrics.predicted_tardiness.set(predicted_tardiness)
        if objective is not None:
            self.metrics.objective.set(objective)

    def costs(self, now: float | None = None) -> dict[str, float]:
        """Planned (predicted) and actual energy cost and the tardiness cost of finished
        Jobs so far, EUR — what the metrics publish."""
        planned, actual = self._energy(self.clock() if now is None else now)
        return {"planned_energy_eur": planned, "actual_energy_eur": actual,
                "tardiness_eur": sum(self._finished.values())}


def describe(result: RoundResult) -> str:
    """One line about a rescheduling point."""
    return json.dumps({"at": format_time(result.at_s), "trigger": result.trigger,
                       "resumed": result.resumed, "suspended": result.suspended})
