"""FROZEN COPY of ``topology/planning/andreas.py`` as of commit 8ab7812 (before issue 22's
rewrite): the reference implementation of ANDREAS' Algorithm 1 that the benchmark times the
fast one against (``benchmarks.bench_planner --timing``) and the tests pin the fast one's
decisions to (``tests/topology/planning/test_andreas_reference.py``). Not part of the product:
never imported by ``topology``, ``simulator`` or ``planner``. Do not edit, except to keep it
importable.

The original module docstring follows.

ANDREAS' Job Optimizer: the Randomized Greedy of Filippini et al. (§IV, Algorithm 1).

At every rescheduling point the optimizer decides, for every submitted and unfinished job,
whether it runs now and where: a node n and a GPU count g (a *configuration*), or nothing (the
job is postponed; a running job the plan leaves out is preempted and restarts later from its
last epoch snapshot). Notation is Table I's:

========  ==================================================================================
J, N      jobs to plan, nodes; G_n GPUs of node n
c_ng      energy cost of node n with g GPUs in use, EUR/h (:mod:`topology.planning.energy`)
d_j       due date of job j (absolute, s); ω_j its tardiness weight, EUR per hour late
t_jng     execution time of j's remaining epochs on g GPUs of n, s
ρ         penalty coefficient for postponed jobs (default 100, §V-B)
H         scheduling interval, s (default 300: "every 5 minutes", Appendix B)
T_c       the current time (the rescheduling point), s
========  ==================================================================================

**Proxy objective** (Eq. 1, Appendix A Eq. 3 and constraints 4i–4n), in EUR::

    f_OBJ = Σ_j (ω_j τ_j + ρ ω_j τ̂_j) + Σ_{j,n} α_jn π_jn

* τ_j = max(0, T_c + t_jng − d_j) for a job run on (n, g) — its tardiness if it runs there to
  the end (4i); for a postponed job, max(0, T_c − d_j), the lateness it already has. Hours.
* τ̂_j = max(0, T_c + H + M_j − d_j) for a postponed job, 0 for a job that runs (4j):
  postponed to the next period "after at most H time units, using the slowest possible
  configuration (M_j)". Hours.
* π_jn = t_jng · c_ng (4k) and α_jn = 1 for the *first-ending* job on each used node (the
  one with the smallest t_jng; §IV-A: "operation costs of the fastest jobs on all nodes").
  On equal times the cheaper job counts.

**Pressure** (Eq. 2): Δ_j = T_c + min_{n,g} t_jng − d_j, s; jobs are taken in decreasing
pressure (the most likely to miss their due date first).

**Algorithm 1** (§IV-B), MaxIt_RG iterations (default 1,000, §V), each building a schedule
from nothing and keeping the one with the lowest f_OBJ:

1. sort the jobs by Δ_j, decreasing; randomised iterations then walk the list once and swap
   each job with the next with probability inversely proportional to its tardiness weight,
   p = π · ω_min / ω_j (π = :attr:`PlannerSettings.swap_probability`);
2. for each job in that order, D*_j = {(n, g) : T_c + t_jng < d_j}; the best configuration
   (n*, g*) is the cheapest of D*_j by t_jng · c_ng, or, when D*_j is empty, the fastest of
   all (§IV-B). Randomised iterations deviate from that rule with probability α
   (:attr:`PlannerSettings.alpha`) and draw a configuration of D*_j (of all, when empty) with
   probability inversely proportional to its cost (its time, when empty);
3. ASSIGN: put the job on a node of configuration n* with g* free GPUs; else
   ASSIGN_TO_SUBOPTIMAL: try the other configurations of D*_j in increasing cost, then the
   rest in increasing time, and take the first that fits a node; if nothing fits, the job is
   postponed.

Choices the paper leaves open, and ours:

* **Nodes of one kind.** A configuration is (n, g); nodes with the same GPU model, GPU count
  and power profile have the same t_jng and c_ng, so the search runs over these *node
  classes*, and a configuration's node is chosen inside its class: the job's current node
  when it fits there (no needless migration), else the best fit (fewest free GPUs left,
  then the lowest index). This is the same search, without trying equal-cost nodes one by
  one.
* **The first iteration is the pure greedy** (no swap, no deviation), so the plan is never
  worse under f_OBJ than Algorithm 1's deterministic rule.
* **Ties in f_OBJ** (within 1e-9 EUR) go to the schedule that moves fewer running jobs.
* ASSIGN_TO_SUBOPTIMAL also tries configurations outside D*_j (as the fastest-first fallback
  does when D*_j is empty): a job is postponed only when no free GPUs can hold it.
* π = 0.1 and α = 0.1: the paper gives no values.

Pure: no I/O, no clock. Randomness comes from ``random.Random(settings.seed)``, created per
call: the same input gives the same plan.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from topology.planning.energy import EnergyPrice, PowerProfile, gpu_model_key, node_cost_eur_per_h
from topology.planning.profiles import Config

#: ANDREAS §V: "The Job Optimizer has been configured with MaxIt_RG = 1,000".
DEFAULT_MAX_ITERATIONS = 1000
#: ANDREAS §V-B: "The parameter ρ for penalizing jobs postponements has been set to 100".
DEFAULT_RHO = 100.0
#: ANDREAS Appendix B: "the Job Manager invokes the Job Optimizer periodically every 5 minutes".
DEFAULT_INTERVAL_S = 300.0
#: f_OBJ values closer than this (EUR) are equal.
TIE_EUR = 1e-9


class PlanningError(ValueError):
    """The planner's input is inconsistent (duplicate names, unknown current node, a running
    job on more GPUs than its node has, bad settings)."""


@dataclass(frozen=True)
class PlanNode:
    """One node the planner may use.

    Attributes:
        name: node name (unique).
        gpu_model: GPU model name or key (``"Tesla T4"`` / ``"t4"``); all GPUs of a node are
            the same model (§IV-A: "each node is characterized by a set G_n of identical GPUs").
        gpus: G_n, GPUs the planner may hand out (≥ 1).
        power: the node's :class:`PowerProfile` (gives c_ng).
    """

    name: str
    gpu_model: str
    gpus: int
    power: PowerProfile

    @property
    def model_key(self) -> str:
        """:func:`gpu_model_key` of :attr:`gpu_model`."""
        return gpu_model_key(self.gpu_model)


@dataclass(frozen=True)
class Placement:
    """Where a job runs: ``gpus`` GPUs of node ``node``."""

    node: str
    gpus: int


@dataclass(frozen=True)
class PlanJob:
    """One submitted, unfinished job.

    Attributes:
        id: unique id.
        due_s: d_j, absolute due date, s (same clock as ``now_s``).
        weight_eur_per_h: ω_j, tardiness weight, EUR per hour late (> 0).
        remaining_epochs: epochs still to run (> 0): total − done at the last snapshot.
        epoch_time_s: seconds per epoch by configuration ``(GPU model key, g)``; t_jng is
            ``remaining_epochs`` times the entry of n's model and g. Configurations missing
            here are not used for this job.
        current: where it runs now, or None when it waits.
        submitted_s: submission time, s (FIFO's order; Algorithm 1 does not use it).
        progress_s: seconds the job has run on ``current`` since its last epoch snapshot:
            work it keeps if it stays there and loses if it moves (0 when unknown).
    """

    id: str
    due_s: float
    weight_eur_per_h: float
    remaining_epochs: float
    epoch_time_s: Mapping[Config, float]
    current: Placement | None = None
    submitted_s: float = 0.0
    progress_s: float = 0.0


@dataclass(frozen=True)
class PlannerSettings:
    """Parameters of the optimizer (module docstring).

    Attributes:
        rho: ρ, postponement penalty coefficient (default 100, §V-B).
        max_iterations: MaxIt_RG (default 1,000, §V); 1 = the pure greedy.
        interval_s: H, time to the next periodic rescheduling point, s (default 300).
        price: PUE and EUR/kWh for c_ng (default 1.33 and 0.172, §V-A).
        swap_probability: π, the swap probability of the job with the lowest weight.
        alpha: probability that a randomised iteration deviates from the configuration rule.
        seed: seed of the per-call random generator.
        restart_s: time a running job loses when it is moved or resized (stop, reschedule,
            restart from its snapshot), s, added to t_jng of every configuration other than
            its current one; 0 as in ANDREAS' simulator.
        move_penalty_eur: a fixed charge per running job the plan moves, resizes or
            preempts, EUR (0 = the paper; see :func:`reconfiguration_eur`).
    """

    rho: float = DEFAULT_RHO
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    interval_s: float = DEFAULT_INTERVAL_S
    price: EnergyPrice = field(default_factory=EnergyPrice)
    swap_probability: float = 0.1
    alpha: float = 0.1
    seed: int = 0
    restart_s: float = 0.0
    move_penalty_eur: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rho) and self.rho >= 0):
            raise PlanningError("rho must be a non-negative number")
        if self.max_iterations < 1:
            raise PlanningError("max_iterations must be at least 1")
        if not (math.isfinite(self.interval_s) and self.interval_s >= 0):
            raise PlanningError("interval_s must be a non-negative number of seconds")
        if not (math.isfinite(self.restart_s) and self.restart_s >= 0):
            raise PlanningError("restart_s must be a non-negative number of seconds")
        if not (math.isfinite(self.move_penalty_eur) and self.move_penalty_eur >= 0):
            raise PlanningError("move_penalty_eur must be a non-negative number")
        for name in ("swap_probability", "alpha"):
            v = getattr(self, name)
            if not (0.0 <= v <= 1.0):
                raise PlanningError(f"{name} must be in [0, 1]")


@dataclass(frozen=True)
class Objective:
    """f_OBJ of a schedule, split into its terms (EUR).

    Attributes:
        tardiness_eur: Σ ω_j τ_j.
        worst_case_eur: Σ ρ ω_j τ̂_j.
        first_ending_eur: Σ α_jn π_jn.
        reconfiguration_eur: not in Eq. 1 — the cost of moving or preempting running jobs
            (:func:`reconfiguration_eur`); 0 for a schedule that keeps every running job.
    """

    tardiness_eur: float
    worst_case_eur: float
    first_ending_eur: float
    reconfiguration_eur: float = 0.0

    @property
    def total_eur(self) -> float:
        """f_OBJ of Eq. 1, EUR."""
        return self.tardiness_eur + self.worst_case_eur + self.first_ending_eur

    @property
    def selection_eur(self) -> float:
        """What Algorithm 1 minimises here: f_OBJ plus the reconfiguration term, EUR."""
        return self.total_eur + self.reconfiguration_eur


@dataclass(frozen=True)
class JobDecision:
    """The plan for one job.

    Attributes:
        job: job id.
        placement: where it runs from now, or None (postponed / preempted / waiting).
        exec_time_s: t_jng of that placement, s (None when postponed).
        predicted_finish_s: T_c + t_jng, s (None when postponed).
        energy_cost_eur: t_jng · c_ng, the job's energy cost on that placement (π_jn), EUR.
        tardiness_s: predicted lateness at finish, s (0 when on time; None when postponed).
        reason: one line on why (chosen rule, fallback, postponement).
    """

    job: str
    placement: Placement | None
    exec_time_s: float | None
    predicted_finish_s: float | None
    energy_cost_eur: float | None
    tardiness_s: float | None
    reason: str


@dataclass(frozen=True)
class Plan:
    """Algorithm 1's answer at one rescheduling point.

    Attributes:
        now_s: T_c.
        decisions: job id → :class:`JobDecision`, in the order the jobs were given.
        objective: f_OBJ of the plan.
        iterations: iterations run (those abandoned early included).
        best_iteration: the iteration that built the plan (0 = the pure greedy).
        greedy_objective: f_OBJ of the pure greedy (iteration 0).
        pressure_s: Δ_j of every job (Eq. 2), s (inf for a job no node can run).
    """

    now_s: float
    decisions: dict[str, JobDecision]
    objective: Objective
    iterations: int
    best_iteration: int
    greedy_objective: Objective
    pressure_s: dict[str, float]

    def placement(self, job: str) -> Placement | None:
        """Where ``job`` runs, or None."""
        return self.decisions[job].placement

    def changes(self, jobs: Sequence[PlanJob]) -> list[str]:
        """Ids of the jobs whose placement differs from their ``current`` one (started,
        moved, resized or preempted)."""
        return [j.id for j in jobs if self.decisions[j.id].placement != j.current]


# ------------------------------------------------------------------------------ formulas


def execution_time_s(job: PlanJob, node: PlanNode, gpus: int) -> float | None:
    """t_jng: ``remaining_epochs`` × seconds per epoch on ``gpus`` GPUs of the node's model,
    s; None when the job's profile lacks that configuration or ``gpus`` exceeds G_n."""
    if gpus < 1 or gpus > node.gpus:
        return None
    per_epoch = job.epoch_time_s.get((node.model_key, gpus))
    if per_epoch is None:
        return None
    return job.remaining_epochs * per_epoch


def pressure_s(job: PlanJob, nodes: Sequence[PlanNode], now_s: float) -> float:
    """Δ_j = T_c + min_{n, g} t_jng − d_j (Eq. 2), s; +inf when no node can run the job (it
    is then taken first and postponed)."""
    best = math.inf
    for node in nodes:
        for g in range(1, node.gpus + 1):
            t = execution_time_s(job, node, g)
            if t is not None and t < best:
                best = t
    return now_s + best - job.due_s if math.isfinite(best) else math.inf


def slowest_time_s(job: PlanJob, nodes: Sequence[PlanNode]) -> float | None:
    """M_j: the job's execution time on its slowest configuration, s (Appendix A, 4j)."""
    times = [t for n in nodes for g in range(1, n.gpus + 1)
             if (t := execution_time_s(job, n, g)) is not None]
    return max(times) if times else None


def reconfiguration_eur(job: PlanJob, nodes: Sequence[PlanNode],
                        settings: PlannerSettings | None = None) -> float:
    """What moving, resizing or preempting running job ``job`` throws away, EUR (0 for a job
    that does not run): the energy of the work since its last snapshot and of the restart,
    (progress_s + restart_s) · c_ng of its current placement, plus
    :attr:`PlannerSettings.move_penalty_eur`. Not part of Eq. 1 (ANDREAS' simulator ignores
    reconfiguration, §V-C); Algorithm 1 adds it to f_OBJ when it compares schedules, so that a
    move must pay for itself.
    """
    s = settings or PlannerSettings()
    if job.current is None:
        return 0.0
    node = next((n for n in nodes if n.name == job.current.node), None)
    if node is None:
        raise PlanningError(f"job {job.id}: runs on unknown node {job.current.node!r}")
    c = node_cost_eur_per_h(node.power, job.current.gpus, s.price) / 3600.0
    return (job.progress_s + s.restart_s) * c + s.move_penalty_eur


def objective(now_s: float, nodes: Sequence[PlanNode], jobs: Sequence[PlanJob],
              schedule: Mapping[str, Placement | None],
              settings: PlannerSettings | None = None) -> Objective:
    """f_OBJ of Eq. 1 for ``schedule`` (job id → placement or None), EUR; the module
    docstring gives each term, and ``reconfiguration_eur`` the cost of the running jobs it
    moves (:func:`reconfiguration_eur`). A reference implementation: Algorithm 1 accumulates
    the same sums while it builds a schedule.

    Raises:
        PlanningError: a placement on an unknown node, a configuration the job has no profile
            for, or more GPUs on a node than it has.
    """
    s = settings or PlannerSettings()
    by_name = {n.name: n for n in nodes}
    used: dict[str, int] = {}
    first: dict[str, tuple[float, float]] = {}  # node -> (t, π) of its first-ending job
    tard = worst = moves = 0.0
    for job in jobs:
        where = schedule.get(job.id)
        w = job.weight_eur_per_h / 3600.0  # EUR per second late
        if job.current is not None and where != job.current:
            moves += reconfiguration_eur(job, nodes, s)
        if where is None:
            m = slowest_time_s(job, nodes)
            tard += w * max(0.0, now_s - job.due_s)
            if m is not None:
                worst += s.rho * w * max(0.0, now_s + s.interval_s + m - job.due_s)
            continue
        node = by_name.get(where.node)
        if node is None:
            raise PlanningError(f"job {job.id}: unknown node {where.node!r}")
        t = execution_time_s(job, node, where.gpus)
        if t is None:
            raise PlanningError(f"job {job.id}: no profile for {where.gpus} x {node.model_key}")
        if job.current == where:
            t = max(t - job.progress_s, 1e-6)  # it keeps its work since the last snapshot
        elif job.current is not None:
            t += s.restart_s
        used[node.name] = used.get(node.name, 0) + where.gpus
        if used[node.name] > node.gpus:
            raise PlanningError(f"node {node.name}: {used[node.name]} GPUs planned, has "
                                f"{node.gpus}")
        tard += w * max(0.0, now_s + t - job.due_s)
        pi = t / 3600.0 * node_cost_eur_per_h(node.power, where.gpus, s.price)
        if node.name not in first or (t, pi) < first[node.name]:
            first[node.name] = (t, pi)
    return Objective(tard, worst, sum(pi for _, pi in first.values()), moves)


# ------------------------------------------------------------------------------ the search


@dataclass(frozen=True)
class _Option:
    """One configuration of one job: node class, GPUs, t_jng, π (= t · c_ng)."""

    cls: int
    gpus: int
    time_s: float
    cost_eur: float
    node: int = -1  # >= 0: only on this node (the job's current one: it keeps its progress)


@dataclass
class _JobData:
    job: PlanJob
    index: int
    weight: float  # EUR per second late
    due: float
    ordered: list[_Option]  # D* by cost, then the rest by time (ASSIGN_TO_SUBOPTIMAL order)
    in_dstar: int  # how many of ``ordered`` meet the due date
    draw: list[_Option]  # the randomised choice's candidates ...
    draw_cum: list[float]  # ... and their cumulative weights (∝ 1/cost or 1/time)
    postponed_eur: float  # ω τ + ρ ω τ̂ if postponed
    pressure: float  # Δ_j, s
    current_node: int  # node index or -1
    current_gpus: int
    stay: _Option | None  # the option bound to the current node, if the job runs
    move_eur: float  # reconfiguration_eur of the job


def _validate(nodes: Sequence[PlanNode], jobs: Sequence[PlanJob]) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, n in enumerate(nodes):
        if n.name in index:
            raise PlanningError(f"node {n.name!r} given twice")
        if n.gpus < 1:
            raise PlanningError(f"node {n.name}: needs at least one GPU")
        index[n.name] = i
    seen: set[str] = set()
    used: dict[str, int] = {}
    for j in jobs:
        if j.id in seen:
            raise PlanningError(f"job {j.id!r} given twice")
        seen.add(j.id)
        if not (math.isfinite(j.weight_eur_per_h) and j.weight_eur_per_h > 0):
            raise PlanningError(f"job {j.id}: tardiness weight must be positive")
        if not (math.isfinite(j.remaining_epochs) and j.remaining_epochs > 0):
            raise PlanningError(f"job {j.id}: remaining epochs must be positive")
        if not (math.isfinite(j.progress_s) and j.progress_s >= 0):
            raise PlanningError(f"job {j.id}: progress_s must be >= 0")
        if not math.isfinite(j.due_s):
            raise PlanningError(f"job {j.id}: due date must be finite")
        if j.current is not None:
            if j.current.node not in index:
                raise PlanningError(f"job {j.id}: runs on unknown node {j.current.node!r}")
            used[j.current.node] = used.get(j.current.node, 0) + j.current.gpus
            if used[j.current.node] > nodes[index[j.current.node]].gpus:
                raise PlanningError(f"node {j.current.node}: running jobs hold more GPUs "
                                    "than it has")
    return index


class _Classes:
    """Nodes grouped by (GPU model, GPU count, power): equal t_jng and c_ng."""

    def __init__(self, nodes: Sequence[PlanNode], price: EnergyPrice) -> None:
        keys: dict[tuple[str, int, PowerProfile], int] = {}
        self.members: list[list[int]] = []
        self.of: list[int] = []
        for i, n in enumerate(nodes):
            c = keys.setdefault((n.model_key, n.gpus, n.power), len(keys))
            if c == len(self.members):
                self.members.append([])
            self.members[c].append(i)
            self.of.append(c)
        self.info: list[tuple[str, int, PowerProfile]] = list(keys)
        #: c_ng per class and g, EUR per second
        self.cost_per_s = [[node_cost_eur_per_h(p, g, price) / 3600.0 for g in range(gmax + 1)]
                           for _, gmax, p in self.info]

    def buckets(self, free: Sequence[int]) -> list[list[list[int]]]:
        """buckets[c][k]: nodes of class c with exactly k free GPUs, highest index first (so
        that ``pop()`` gives the lowest)."""
        out: list[list[list[int]]] = [[[] for _ in range(gmax + 1)] for _, gmax, _ in self.info]
        for c, members in enumerate(self.members):
            for i in sorted(members, reverse=True):
                out[c][free[i]].append(i)
        return out


def _job_data(idx: int, job: PlanJob, classes: _Classes, node_index: Mapping[str, int],
              now_s: float, s: PlannerSettings) -> _JobData:
    w = job.weight_eur_per_h / 3600.0
    cur = job.current
    cur_node = node_index[cur.node] if cur else -1
    options: list[_Option] = []
    for c, (model, gmax, _) in enumerate(classes.info):
        for g in range(1, gmax + 1):
            per = job.epoch_time_s.get((model, g))
            if per is None:
                continue
            t = job.remaining_epochs * per
            if cur is not None and classes.of[cur_node] == c and cur.gpus == g:
                # staying put keeps the work done since the last snapshot
                stay = max(t - job.progress_s, 1e-6)
                options.append(_Option(c, g, stay, stay * classes.cost_per_s[c][g], cur_node))
            t += s.restart_s if cur is not None else 0.0
            options.append(_Option(c, g, t, t * classes.cost_per_s[c][g]))
    # among equally good configurations, the one the job runs on now comes first
    here = classes.of[cur_node] if cur else -1
    dstar = sorted((o for o in options if now_s + o.time_s < job.due_s),
                   key=lambda o: (o.cost_eur, o.time_s, o.cls != here, o.cls, o.gpus))
    rest = sorted((o for o in options if not now_s + o.time_s < job.due_s),
                  key=lambda o: (o.time_s, o.cost_eur, o.cls != here, o.cls, o.gpus))
    if dstar:
        draw, weights = dstar, [1.0 / max(o.cost_eur, 1e-12) for o in dstar]
    else:
        draw, weights = rest, [1.0 / max(o.time_s, 1e-12) for o in rest]
    fastest = min((o.time_s for o in options), default=math.inf)
    slowest = max((o.time_s for o in options), default=None)
    postponed = w * max(0.0, now_s - job.due_s)
    if slowest is not None:
        postponed += s.rho * w * max(0.0, now_s + s.interval_s + slowest - job.due_s)
    move = 0.0
    if cur is not None:
        c_now = classes.cost_per_s[classes.of[cur_node]][cur.gpus]
        move = (job.progress_s + s.restart_s) * c_now + s.move_penalty_eur
    return _JobData(
        job=job, index=idx, weight=w, due=job.due_s, ordered=dstar + rest,
        in_dstar=len(dstar), draw=draw, draw_cum=list(accumulate(weights)),
        postponed_eur=postponed, pressure=now_s + fastest - job.due_s if options else math.inf,
        current_node=cur_node, current_gpus=cur.gpus if cur else 0,
        stay=next((o for o in options if o.node >= 0), None), move_eur=move,
    )


def _take(d: _JobData, candidates: Sequence[_Option], classes: _Classes, free: list[int],
          buckets: list[list[list[int]]]) -> tuple[int, _Option] | None:
    """ASSIGN / ASSIGN_TO_SUBOPTIMAL: the first candidate that fits a node of its class (a
    candidate bound to the job's current node: that node; else the best fit); updates
    ``free`` and ``buckets``; None when nothing fits."""
    for opt in candidates:
        c, g = opt.cls, opt.gpus
        node = -1
        if opt.node >= 0:
            if free[opt.node] < g:
                continue
            node = opt.node
            buckets[c][free[node]].remove(node)
        else:
            levels = buckets[c]
            for k in range(g, len(levels)):
                if levels[k]:
                    node = levels[k].pop()
                    break
        if node < 0:
            continue
        free[node] -= g
        buckets[c][free[node]].append(node)
        if node == d.current_node and g == d.current_gpus and d.stay is not None:
            opt = d.stay  # landed where it runs: it stays, and keeps its progress
        return node, opt
    return None


def plan(now_s: float, nodes: Sequence[PlanNode], jobs: Sequence[PlanJob],
         settings: PlannerSettings | None = None) -> Plan:
    """Algorithm 1 at rescheduling point ``now_s`` (module docstring).

    Args:
        now_s: T_c, s.
        nodes: the nodes (names unique).
        jobs: every submitted, unfinished job, running or waiting.
        settings: :class:`PlannerSettings`; defaults are the paper's.

    Returns:
        the best schedule found, with f_OBJ and a decision per job.

    Raises:
        PlanningError: inconsistent input (:func:`_validate`).
    """
    s = settings or PlannerSettings()
    node_index = _validate(nodes, jobs)
    classes = _Classes(nodes, s.price)
    data = [_job_data(i, job, classes, node_index, now_s, s) for i, job in enumerate(jobs)]
    pressures = {d.job.id: d.pressure for d in data}

    # Eq. 2: decreasing pressure; ties by larger weight, then input order
    base_order = sorted(range(len(data)),
                        key=lambda i: (-pressures[data[i].job.id], -data[i].weight, i))
    min_weight = min((d.weight for d in data), default=1.0)
    rng = random.Random(s.seed)
    rand = rng.random
    # per job: the swap probability π · ω_min / ω_j, and its cost if the plan leaves it waiting
    # (ω τ, and ρ ω τ̂ − ... as Eq. 1 splits them), computed once instead of per iteration
    swap_p = [s.swap_probability * min_weight / d.weight for d in data]
    late_eur = [d.weight * max(0.0, now_s - d.due) for d in data]
    worst_eur = [d.postponed_eur - late for d, late in zip(data, late_eur, strict=True)]
    running = [d for d in data if d.current_node >= 0]

    best_f = math.inf
    best_changes = math.inf
    best_assign: list[tuple[int, int, _Option] | None] = []
    best_terms = (0.0, 0.0, 0.0, 0.0)
    best_iter = 0
    greedy_terms = (0.0, 0.0, 0.0, 0.0)
    n_nodes = len(nodes)
    total_gpus = sum(n.gpus for n in nodes)
    iterations = 0

    # the incumbent: running jobs stay where they are, waiting jobs fill the free GPUs by the
    # rule; built right after the pure greedy when some job runs
    running_first = sorted(base_order, key=lambda i: data[i].current_node < 0)
    incumbent_at = 1 if any(d.current_node >= 0 for d in data) else -1

    for it in range(s.max_iterations):
        iterations += 1
        incumbent = it == incumbent_at
        randomised = it > 0 and not incumbent
        order = running_first if incumbent else list(base_order)
        if randomised and s.swap_probability > 0:
            for k in range(len(order) - 1):
                if rand() < swap_p[order[k]]:
                    order[k], order[k + 1] = order[k + 1], order[k]
        free = [n.gpus for n in nodes]
        buckets = classes.buckets(free)
        free_total = total_gpus
        first_t = [math.inf] * n_nodes
        first_pi = [0.0] * n_nodes
        assign: list[tuple[int, int, _Option] | None] = [None] * len(data)
        tard = moves = 0.0
        changes = 0
        abandoned = False
        for i in order:
            d = data[i]
            if free_total == 0:
                break
            if not d.ordered:
                continue
            chosen: _Option | None = None
            if randomised and s.alpha > 0 and rand() < s.alpha and len(d.draw) > 1:
                r = rand() * d.draw_cum[-1]
                chosen = d.draw[min(bisect_right(d.draw_cum, r), len(d.draw) - 1)]
            if incumbent and d.stay is not None:
                chosen = d.stay
            candidates = d.ordered if chosen is None else [chosen, *d.ordered]
            placed = _take(d, candidates, classes, free, buckets)
            if placed is None:
                continue
            node, opt = placed
            free_total -= opt.gpus
            assign[i] = (node, opt.gpus, opt)
            tard += d.weight * max(0.0, now_s + opt.time_s - d.due)
            if opt.time_s < first_t[node] or (opt.time_s == first_t[node]
                                              and opt.cost_eur < first_pi[node]):
                first_t[node] = opt.time_s
                first_pi[node] = opt.cost_eur
            if d.current_node >= 0 and (node != d.current_node or opt.gpus != d.current_gpus):
                changes += 1
                moves += d.move_eur
            # Σ ω τ over placed jobs only grows, and every other term is >= 0: stop as soon
            # as this schedule can no longer beat (or tie) the best one
            if tard + moves > best_f + TIE_EUR:
                abandoned = True
                break
        if abandoned:
            continue
        for d in running:  # running jobs left waiting are preempted
            if assign[d.index] is None:
                changes += 1
                moves += d.move_eur
        first_total = sum(first_pi)
        worst = 0.0
        tard_total = tard
        for i, a in enumerate(assign):
            if a is None:
                tard_total += late_eur[i]
                worst += worst_eur[i]
        f = tard_total + worst + first_total + moves
        if it == 0:
            greedy_terms = (tard_total, worst, first_total, moves)
        if f < best_f - TIE_EUR or (abs(f - best_f) <= TIE_EUR and changes < best_changes):
            best_f, best_changes = f, changes
            best_assign = assign
            best_terms = (tard_total, worst, first_total, moves)
            best_iter = it

    decisions: dict[str, JobDecision] = {}
    for d in data:
        a = best_assign[d.index] if best_assign else None
        job = d.job
        if a is None:
            if not d.ordered:
                why = "postponed: no node has a GPU model and count this job has a profile for"
            elif d.current_node >= 0:
                why = "preempted: its GPUs go to jobs the plan ranks first"
            else:
                why = "postponed: no free GPUs left for it in this plan"
            decisions[job.id] = JobDecision(job.id, None, None, None, None, None, why)
            continue
        node, g, opt = a
        rank = d.ordered.index(opt)
        if rank == 0:
            why = ("cheapest configuration that meets the due date" if d.in_dstar
                   else "fastest configuration (none meets the due date)")
        elif rank < d.in_dstar:
            why = ("meets the due date; a cheaper configuration was full or gave a higher "
                   "f_OBJ")
        elif d.in_dstar:
            why = "misses the due date: every configuration that meets it was full"
        else:
            why = "none meets the due date; a faster configuration was full or gave a higher f_OBJ"
        finish = now_s + opt.time_s
        decisions[job.id] = JobDecision(
            job.id, Placement(nodes[node].name, g), opt.time_s, finish, opt.cost_eur,
            max(0.0, finish - d.due), why)
    return Plan(
        now_s=now_s, decisions=decisions, objective=Objective(*best_terms),
        iterations=iterations, best_iteration=best_iter,
        greedy_objective=Objective(*greedy_terms), pressure_s=pressures,
    )
