"""ANDREAS' Job Optimizer: the Randomized Greedy of Filippini et al. (§IV, Algorithm 1).

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
  when it fits there (no needless migration), else the best fit (fewest free GPUs left). This
  is the same search, without trying equal-cost nodes one by one.
* **The first iteration is the pure greedy** (no swap, no deviation), so the plan is never
  worse under f_OBJ than Algorithm 1's deterministic rule; **the second is the incumbent**
  (running jobs stay, waiting jobs fill the free GPUs by the rule).
* **Ties in f_OBJ** (within 1e-9 EUR) go to the schedule that moves fewer running jobs.
* ASSIGN_TO_SUBOPTIMAL also tries configurations outside D*_j (as the fastest-first fallback
  does when D*_j is empty): a job is postponed only when no free GPUs can hold it.
* π = 0.1 and α = 0.1: the paper gives no values.

**Where the default planner departs from the paper** (each is a setting;
:meth:`PlannerSettings.paper` turns them all off, which is the simulator's
``andreas-paper``):

* **Moves are charged** (:attr:`PlannerSettings.move_penalty_eur`, ``restart_s``). ANDREAS'
  simulator ignores reconfiguration (§V-C) and Eq. 1 has no term for it, so Algorithm 1
  moves and preempts running jobs for any gain in f_OBJ, however small, each time throwing
  away the epoch in progress. Schedules are compared on f_OBJ plus, for every running job the
  schedule moves, resizes or preempts, its lost work and restart priced at its node's c_ng
  and a fixed charge (:func:`reconfiguration_eur`): a move must pay for itself.
* **Idle power is shared** (:attr:`PlannerSettings.shared_idle`). c_ng charges the whole
  idle power of node n to a job on g of its G_n GPUs, as if it ran there alone; on a node
  that runs several jobs they share it. The rule's cost of a configuration (and π) then uses
  g · c_{nG_n} / G_n, the job's share of a fully busy node: on 2-GPU T4 nodes the paper's
  c_ng makes two GPUs look cheaper than one for jobs that run 1.4× faster on two, while they
  cost half again as much energy on a node shared with another job.
* **Energy over every job** (:attr:`PlannerSettings.energy_term` = ``"all"``). Eq. 1's
  energy term counts each node's first-ending job only, so which configuration the other
  jobs get does not matter to it. The default counts every job's π — a waiting job at its
  cheapest configuration's, so that waiting earns nothing — plus, for each GPU a used node
  leaves free, its share of the idle power for :attr:`PlannerSettings.vacancy_s` (the power
  nobody's share pays; it keeps jobs packed).
* **Early stopping** (:attr:`PlannerSettings.patience`): the randomised iterations stop once
  that many in a row found no better schedule. Most points' best schedule is the greedy or
  the incumbent; this is where most of the time went.
* **Local search** (:attr:`PlannerSettings.local_search`): the best schedule is improved by
  moving one job to another configuration or node, and by swapping two jobs'
  configurations, while f_OBJ (with the move charge) goes down (:func:`_local_search`).
* **A pressing incumbent** (:attr:`PlannerSettings.pressing_incumbent`): a third
  deterministic schedule, running jobs preferring their place as in the incumbent but every
  job taken in Eq. 2's pressure order, so that a waiting job that cannot wait takes GPUs
  before the least pressing running jobs. Where such a job arrives the greedy (which
  rebuilds from nothing and moves a hundred running jobs) was the best schedule and the local
  search spent hundreds of changes undoing it; this schedule is one or two changes away from
  where they ended. It draws no random numbers: the randomised iterations are the same.
* **A shadow price on oversubscribed node classes**
  (:attr:`PlannerSettings.shadow_window_s`, :func:`shadow_prices`). Eq. 1 sees capacity only
  at T_c (Appendix A, 4g): while the work the jobs want of a node class over the next
  ``shadow_window_s`` exceeds what it can do, the rule and the energy term charge its GPU
  time the dual price of that capacity — what the marginal job loses per GPU-second by
  running elsewhere — so the jobs that lose least by leaving the class (on §V-B's first
  scenario: the LSTMs, onto the T4s) leave it first. It is not energy: the plan reports it
  apart (:attr:`Objective.shadow_eur`).

The search's randomness is Python's ``random.Random(settings.seed)``, created per call and
drawn in the same order as before issue 22's rewrite: with :meth:`PlannerSettings.paper`
the plan is exactly the one the earlier implementation made for the same seed
(``benchmarks/andreas_reference.py``; pinned by tests).

**Speed.** Per point, the configurations of every job are evaluated per node class with numpy
(t_jng · c_ng for all jobs and classes in a few array operations, and one ``lexsort`` for
every job's candidate order; per-epoch time rows are kept across points in a
:class:`PlanCache` the caller owns), each schedule is built on flat Python lists, and a
schedule is abandoned as soon as a lower bound of its f_OBJ exceeds the best one's.

Pure: no I/O, no clock. The same input gives the same plan.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import Any, Literal, NamedTuple

import numpy as np

from topology.planning.energy import EnergyPrice, PowerProfile, gpu_model_key, node_cost_eur_per_h
from topology.planning.profiles import Config

#: ANDREAS §V: "The Job Optimizer has been configured with MaxIt_RG = 1,000".
DEFAULT_MAX_ITERATIONS = 1000
#: ANDREAS §V-B: "The parameter ρ for penalizing jobs postponements has been set to 100".
DEFAULT_RHO = 100.0
#: ANDREAS Appendix B: "the Job Manager invokes the Job Optimizer periodically every 5 minutes".
DEFAULT_INTERVAL_S = 300.0
#: The fixed charge per running job moved, resized or preempted, EUR: about two 5-minute
#: intervals of a busy one-GPU V100 node at ARMIDA's price; picked from {0.005, 0.01, 0.02,
#: 0.04, 0.1} on andreas-s1/s2 at N = 10, seeds 1-2 (docs/planner.md).
DEFAULT_MOVE_PENALTY_EUR = 0.02
#: How long a GPU a used node leaves free is expected to stay free, s: picked from {300, 900,
#: 1800, 3600, 7200} on andreas-s1/s2 at N = 10, seeds 1-3 (docs/planner.md).
DEFAULT_VACANCY_S = 1800.0
#: Randomised iterations in a row without a better schedule before the search stops.
DEFAULT_PATIENCE = 50
#: The window over which a node class's capacity is held against the work pending for it,
#: s (:func:`shadow_prices`): the vacancy horizon's value, :data:`DEFAULT_VACANCY_S` (how
#: long the planner expects a GPU to wait for work); not tuned on the benchmark.
DEFAULT_SHADOW_WINDOW_S = DEFAULT_VACANCY_S
#: Regrets per GPU-second (:func:`shadow_prices`) closer than this share of a fully busy
#: GPU's energy cost are equal: profiles are not known that well.
REGRET_TOLERANCE = 0.01
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
        total_gpus: the node's GPUs when others hold some of them — the pods of gangs the
            planner admitted across nodes (:mod:`planner.gang`) — so that ``gpus`` is fewer;
            0 = ``gpus``. With :attr:`PlannerSettings.shared_idle` the node's idle power is
            shared by all of them: a gang's nodes are counted, and a job planned beside a gang
            pays its share of a node the gang keeps powered, not the whole idle power.
    """

    name: str
    gpu_model: str
    gpus: int
    power: PowerProfile
    total_gpus: int = 0

    @property
    def size(self) -> int:
        """The node's GPUs: :attr:`total_gpus`, else :attr:`gpus`."""
        return max(self.total_gpus, self.gpus)

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
    """Parameters of the optimizer (module docstring). The defaults are gputopo's planner;
    :meth:`paper` gives ANDREAS' Algorithm 1 as published.

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
            preempts, EUR (default :data:`DEFAULT_MOVE_PENALTY_EUR`; 0 = the paper; see
            :func:`reconfiguration_eur`).
        shared_idle: price a configuration at its share of a fully busy node, g · c_nG / G
            (True, default), or at c_ng as if the job ran alone on the node (False: the
            paper).
        energy_term: the energy term of f_OBJ: ``"first-ending"``, Eq. 1's Σ α_jn π_jn (the
            paper), or ``"all"`` (default), Σ_j π_j over every job — a running job at its
            configuration's π, a waiting one at its cheapest configuration's (the energy it
            will cost at best whenever it runs), so that only the energy a schedule spends
            above each job's cheapest configuration counts, and leaving GPUs idle earns
            nothing. Used nodes add, per GPU they leave free, its share of their idle power
            for ``vacancy_s`` (only with ``shared_idle``).
        vacancy_s: how long a free GPU of a used node is expected to stay free (until a new
            job takes it), s (default :data:`DEFAULT_VACANCY_S`).
        patience: stop the randomised iterations after this many in a row found no better
            schedule (default :data:`DEFAULT_PATIENCE`); None runs all ``max_iterations``
            (the paper).
        local_search: improve the best schedule by one-job moves and two-job swaps (default
            True; False: the paper).
        pressing_incumbent: after the incumbent (running jobs stay, waiting jobs fill the
            free GPUs), build a second one in Eq. 2's pressure order: a running job still
            prefers its place, but a waiting job more pressing than it takes GPUs first
            (default True; False: the paper's choices, see :func:`_search`).
        shadow_window_s: price a node class's GPU time at its shadow price while the work
            pending for it over this window exceeds its capacity (:func:`shadow_prices`),
            s (default :data:`DEFAULT_SHADOW_WINDOW_S`; 0 = off, the paper). Needs
            ``energy_term="all"``.
    """

    rho: float = DEFAULT_RHO
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    interval_s: float = DEFAULT_INTERVAL_S
    price: EnergyPrice = field(default_factory=EnergyPrice)
    swap_probability: float = 0.1
    alpha: float = 0.1
    seed: int = 0
    restart_s: float = 0.0
    move_penalty_eur: float = DEFAULT_MOVE_PENALTY_EUR
    shared_idle: bool = True
    energy_term: Literal["first-ending", "all"] = "all"
    vacancy_s: float = DEFAULT_VACANCY_S
    patience: int | None = DEFAULT_PATIENCE
    local_search: bool = True
    pressing_incumbent: bool = True
    shadow_window_s: float = DEFAULT_SHADOW_WINDOW_S

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
        if self.patience is not None and self.patience < 1:
            raise PlanningError("patience must be at least 1 (or None: every iteration)")
        if not (math.isfinite(self.vacancy_s) and self.vacancy_s >= 0):
            raise PlanningError("vacancy_s must be a non-negative number of seconds")
        if not (math.isfinite(self.shadow_window_s) and self.shadow_window_s >= 0):
            raise PlanningError("shadow_window_s must be a non-negative number of seconds")
        if self.energy_term not in ("first-ending", "all"):
            raise PlanningError("energy_term must be 'first-ending' or 'all'")
        if self.local_search and self.energy_term != "all":
            raise PlanningError("local_search needs energy_term='all' (a job's cost must not "
                                "depend on its neighbours)")
        if self.shadow_window_s and self.energy_term != "all":
            raise PlanningError("shadow_window_s needs energy_term='all' (0 turns it off)")
        for name in ("swap_probability", "alpha"):
            v = getattr(self, name)
            if not (0.0 <= v <= 1.0):
                raise PlanningError(f"{name} must be in [0, 1]")

    @classmethod
    def paper(cls, **overrides: Any) -> PlannerSettings:
        """ANDREAS' Algorithm 1 as published: no move charge (the lost epoch in progress
        only), c_ng with the node's whole idle power, every one of MaxIt_RG iterations, no
        local search; ``overrides`` set the other fields (rho, max_iterations, seed, ...).

        Raises:
            PlanningError: a bad value.
        """
        base: dict[str, Any] = {"move_penalty_eur": 0.0, "shared_idle": False,
                                "energy_term": "first-ending", "patience": None,
                                "local_search": False, "pressing_incumbent": False,
                                "shadow_window_s": 0.0}
        return cls(**{**base, **overrides})

    def as_paper(self) -> PlannerSettings:
        """These settings with the paper's choices (:meth:`paper`), the rest kept."""
        return replace(self, move_penalty_eur=0.0, shared_idle=False,
                       energy_term="first-ending", patience=None, local_search=False,
                       pressing_incumbent=False, shadow_window_s=0.0)


@dataclass(frozen=True)
class Objective:
    """f_OBJ of a schedule, split into its terms (EUR).

    Attributes:
        tardiness_eur: Σ ω_j τ_j.
        worst_case_eur: Σ ρ ω_j τ̂_j.
        energy_eur: Σ α_jn π_jn (Eq. 1, :attr:`PlannerSettings.energy_term` = first-ending)
            or Σ_j π_j (``all``: a waiting job at its cheapest configuration's π).
        reconfiguration_eur: not in Eq. 1 — the cost of moving or preempting running jobs
            (:func:`reconfiguration_eur`); 0 for a schedule that keeps every running job.
        shadow_eur: not in Eq. 1 — the GPU time the schedule takes on oversubscribed node
            classes at their shadow prices (:func:`shadow_prices`), less what each waiting
            job's cheapest configuration would take; not energy (0 without
            :attr:`PlannerSettings.shadow_window_s`).
    """

    tardiness_eur: float
    worst_case_eur: float
    energy_eur: float
    reconfiguration_eur: float = 0.0
    shadow_eur: float = 0.0

    @property
    def total_eur(self) -> float:
        """f_OBJ of Eq. 1, EUR."""
        return self.tardiness_eur + self.worst_case_eur + self.energy_eur

    @property
    def selection_eur(self) -> float:
        """What Algorithm 1 minimises here: f_OBJ plus the reconfiguration and shadow terms,
        EUR."""
        return self.total_eur + self.reconfiguration_eur + self.shadow_eur


@dataclass(frozen=True)
class JobDecision:
    """The plan for one job.

    Attributes:
        job: job id.
        placement: where it runs from now, or None (postponed / preempted / waiting).
        exec_time_s: t_jng of that placement, s (None when postponed).
        predicted_finish_s: T_c + t_jng, s (None when postponed).
        energy_cost_eur: t_jng · c_ng, the job's energy cost on that placement (π_jn), EUR
            (with :attr:`PlannerSettings.shared_idle`, its share of the node's idle power).
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
        best_iteration: the iteration that built the plan (0 = the pure greedy, 1 = the
            incumbent when a job runs, 2 = the pressing incumbent), before the local
            search.
        greedy_objective: f_OBJ of the pure greedy (iteration 0).
        pressure_s: Δ_j of every job (Eq. 2), s (inf for a job no node can run).
        local_moves: changes the local search made to the best schedule (0 without it).
    """

    now_s: float
    decisions: dict[str, JobDecision]
    objective: Objective
    iterations: int
    best_iteration: int
    greedy_objective: Objective
    pressure_s: dict[str, float]
    local_moves: int = 0

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


def cost_eur_per_h(node: PlanNode, gpus: int, settings: PlannerSettings | None = None) -> float:
    """The hourly energy cost the planner charges a job on ``gpus`` GPUs of ``node``, EUR/h:
    c_ng (Table I) or, with :attr:`PlannerSettings.shared_idle`, g · c_nG / G — the job's
    share of the node fully busy."""
    s = settings or PlannerSettings()
    if s.shared_idle:
        return gpus * node_cost_eur_per_h(node.power, node.size, s.price) / node.size
    return node_cost_eur_per_h(node.power, gpus, s.price)


def reconfiguration_eur(job: PlanJob, nodes: Sequence[PlanNode],
                        settings: PlannerSettings | None = None) -> float:
    """What moving, resizing or preempting running job ``job`` throws away, EUR (0 for a job
    that does not run): the energy of the work since its last snapshot and of the restart,
    (progress_s + restart_s) · c of its current placement (:func:`cost_eur_per_h`), plus
    :attr:`PlannerSettings.move_penalty_eur`. Not part of Eq. 1 (ANDREAS' simulator ignores
    reconfiguration, §V-C); Algorithm 1 adds it to f_OBJ when it compares schedules, so that a
    move must pay for itself.

    Raises:
        PlanningError: the job runs on a node not in ``nodes``.
    """
    s = settings or PlannerSettings()
    if job.current is None:
        return 0.0
    node = next((n for n in nodes if n.name == job.current.node), None)
    if node is None:
        raise PlanningError(f"job {job.id}: runs on unknown node {job.current.node!r}")
    c = cost_eur_per_h(node, job.current.gpus, s) / 3600.0
    return (job.progress_s + s.restart_s) * c + s.move_penalty_eur


def _job_times(job: PlanJob, nodes: Sequence[PlanNode],
               settings: PlannerSettings) -> list[tuple[float, float, str, int]]:
    """(t_jng, π_jng, node, g) of every configuration job ``job`` could take now: restart
    time added when it runs elsewhere, its progress kept on its current placement."""
    out: list[tuple[float, float, str, int]] = []
    for node in nodes:
        for g in range(1, node.gpus + 1):
            t = execution_time_s(job, node, g)
            if t is None:
                continue
            c = cost_eur_per_h(node, g, settings) / 3600.0
            if job.current is not None:
                if job.current == Placement(node.name, g):
                    stay = max(t - job.progress_s, 1e-6)
                    out.append((stay, stay * c, node.name, g))
                t += settings.restart_s
            out.append((t, t * c, node.name, g))
    return out


def objective(now_s: float, nodes: Sequence[PlanNode], jobs: Sequence[PlanJob],
              schedule: Mapping[str, Placement | None],
              settings: PlannerSettings | None = None) -> Objective:
    """f_OBJ of Eq. 1 for ``schedule`` (job id → placement or None), EUR; the module
    docstring gives each term (the energy term per :attr:`PlannerSettings.energy_term`), and
    ``reconfiguration_eur`` the cost of the running jobs it moves
    (:func:`reconfiguration_eur`). A reference implementation: Algorithm 1 accumulates the
    same sums while it builds a schedule.

    Raises:
        PlanningError: a placement on an unknown node, a configuration the job has no profile
            for, or more GPUs on a node than it has.
    """
    s = settings or PlannerSettings()
    by_name = {n.name: n for n in nodes}
    lam = shadow_prices(nodes, jobs, s) if s.shadow_window_s and jobs else {}
    used: dict[str, int] = {}
    first: dict[str, tuple[float, float]] = {}  # node -> (t, π) of its first-ending job
    tard = worst = moves = energy = shadow = 0.0
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
            if s.energy_term == "all":
                options = _job_times(job, nodes, s)
                cheapest = min((pi for _, pi, _, _ in options), default=0.0)
                energy += cheapest
                if lam:
                    shadow += min((pi + t * g * lam[n] for t, pi, n, g in options),
                                  default=0.0) - cheapest
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
        pi = t / 3600.0 * cost_eur_per_h(node, where.gpus, s)
        energy += pi
        if lam:
            shadow += t * where.gpus * lam[node.name]
        if node.name not in first or (t, pi) < first[node.name]:
            first[node.name] = (t, pi)
    if s.energy_term == "first-ending":
        energy = sum(pi for _, pi in first.values())
    elif s.shared_idle:  # the idle power of the GPUs used nodes leave free
        for name, busy in used.items():
            node = by_name[name]
            if 0 < busy < node.gpus:
                idle = node_cost_eur_per_h(node.power, 0, s.price) / 3600.0
                energy += idle * s.vacancy_s / node.size * (node.gpus - busy)
    return Objective(tard, worst, energy, moves, shadow)


# ------------------------------------------------------------------------------ the search


class _Option(NamedTuple):
    """One configuration of one job: node class, GPUs, t_jng, π (= t · c), and the node it
    is bound to (>= 0: the job's current node, where it keeps its progress; -1: any node of
    the class). A configuration spanning several nodes (a gang) would add its node count
    here; the search below places an option on one node."""

    cls: int
    gpus: int
    time_s: float
    cost_eur: float
    node: int = -1


_NO_OPTIONS: tuple[_Option, ...] = ()


@dataclass(slots=True)
class _JobData:
    job: PlanJob
    index: int
    weight: float  # EUR per second late
    due: float
    ordered: tuple[_Option, ...]  # D* by cost, then the rest by time (ASSIGN_TO_SUBOPTIMAL)
    in_dstar: int  # how many of ``ordered`` meet the due date
    draw: tuple[_Option, ...]  # the randomised choice's candidates ...
    draw_cum: list[float]  # ... and their cumulative weights (∝ 1/cost or 1/time)
    postponed_eur: float  # ω τ + ρ ω τ̂ if postponed
    pressure: float  # Δ_j, s
    current_node: int  # node index or -1
    current_gpus: int
    stay: _Option | None  # the option bound to the current node, if the job runs
    move_eur: float  # reconfiguration_eur of the job
    min_cost: float  # the lowest π of its options (0 without options)


def _validate(nodes: Sequence[PlanNode], jobs: Sequence[PlanJob]) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, n in enumerate(nodes):
        if n.name in index:
            raise PlanningError(f"node {n.name!r} given twice")
        if n.gpus < 1:
            raise PlanningError(f"node {n.name}: needs at least one GPU")
        if n.total_gpus and n.total_gpus < n.gpus:
            raise PlanningError(f"node {n.name}: total_gpus {n.total_gpus} < gpus {n.gpus}")
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
    """Nodes grouped by (GPU model, GPU count, power): equal t_jng and c_ng.

    Attributes:
        members: node indices per class, ascending.
        of: the class of each node.
        info: (GPU model key, G, power) per class.
        cost_per_s: per class and g = 0..G, the hourly cost the rule charges / 3600 (EUR/s):
            c_ng, or g · c_nG / G with ``shared_idle``, plus g · :attr:`shadow_per_s` (set
            by :meth:`set_shadow`).
        energy_per_s: the same without the shadow price: the energy alone, EUR/s.
        shadow_per_s: per class, the shadow price of one GPU's time, EUR/s (0 = none).
        configs: every (class, g) with g = 1..G, class by class: the columns of the
            per-point time and cost arrays.
    """

    def __init__(self, nodes: Sequence[PlanNode], price: EnergyPrice,
                 shared_idle: bool = False) -> None:
        keys: dict[tuple[str, int, PowerProfile, int], int] = {}
        self.members: list[list[int]] = []
        self.of: list[int] = []
        for i, n in enumerate(nodes):
            c = keys.setdefault((n.model_key, n.gpus, n.power, n.size), len(keys))
            if c == len(self.members):
                self.members.append([])
            self.members[c].append(i)
            self.of.append(c)
        self.info: list[tuple[str, int, PowerProfile]] = [(m, g, p) for m, g, p, _ in keys]
        sizes = [size for *_, size in keys]
        if shared_idle:  # g GPUs' share of the whole node (its GPUs others hold included)
            self.cost_per_s = [[g * node_cost_eur_per_h(p, size, price) / size / 3600.0
                                for g in range(gmax + 1)]
                               for (_, gmax, p), size in zip(self.info, sizes, strict=True)]
        else:
            self.cost_per_s = [[node_cost_eur_per_h(p, g, price) / 3600.0
                                for g in range(gmax + 1)] for _, gmax, p in self.info]
        self.energy_per_s = [row[:] for row in self.cost_per_s]
        self.shadow_per_s = [0.0] * len(self.info)
        #: c_n0 / 3600 per class: the idle power's cost, EUR/s
        self.idle_per_s = [node_cost_eur_per_h(p, 0, price) / 3600.0 for _, _, p in self.info]
        self.configs: list[tuple[int, int]] = [(c, g) for c, (_, gmax, _) in
                                               enumerate(self.info)
                                               for g in range(1, gmax + 1)]
        self._template: list[list[list[int]]] = []
        for c, (_, gmax, _) in enumerate(self.info):
            levels: list[list[int]] = [[] for _ in range(gmax + 1)]
            levels[gmax] = sorted(self.members[c], reverse=True)
            self._template.append(levels)

    def set_shadow(self, per_gpu_s: Sequence[float]) -> None:
        """Charge g GPUs of class c ``per_gpu_s[c]`` · g EUR/s on top of their energy."""
        self.shadow_per_s = [float(x) for x in per_gpu_s]
        self.cost_per_s = [[e + g * lam for g, e in enumerate(row)]
                           for row, lam in zip(self.energy_per_s, self.shadow_per_s,
                                               strict=True)]

    def buckets(self, free: Sequence[int]) -> list[list[list[int]]]:
        """buckets[c][k]: nodes of class c with exactly k free GPUs, highest index first (so
        that ``pop()`` gives the lowest)."""
        out: list[list[list[int]]] = [[[] for _ in range(gmax + 1)] for _, gmax, _ in self.info]
        for c, members in enumerate(self.members):
            for i in sorted(members, reverse=True):
                out[c][free[i]].append(i)
        return out

    def empty_buckets(self) -> list[list[list[int]]]:
        """:meth:`buckets` of the cluster with every GPU free (a copy of a template)."""
        return [[lst[:] for lst in levels] for levels in self._template]


class PlanCache:
    """Per-epoch time rows of jobs kept across rescheduling points: a job's row (its seconds
    per epoch on every configuration of the node classes) is built once and reused while the
    job's ``epoch_time_s`` is the same object (the simulator's tables are; the controller's
    learner builds new ones when it learns). Owned by the caller — one per simulation run or
    controller — and passed to :func:`plan`; it never changes a plan, only how fast it comes.

    Args:
        max_rows: rows kept; the cache is emptied when full.
    """

    def __init__(self, max_rows: int = 50_000) -> None:
        self.max_rows = max_rows
        self._rows: dict[tuple[str, tuple[Config, ...]],
                         tuple[Mapping[Config, float], list[float]]] = {}

    def row(self, job: PlanJob, keys: tuple[Config, ...]) -> list[float]:
        """``job``'s seconds per epoch on each configuration of ``keys`` (NaN where its
        profile has none)."""
        ck = (job.id, keys)
        hit = self._rows.get(ck)
        table = job.epoch_time_s
        if hit is not None and hit[0] is table:
            return hit[1]
        row = _row(table, keys)
        if len(self._rows) >= self.max_rows:
            self._rows.clear()
        self._rows[ck] = (table, row)
        return row


def _row(table: Mapping[Config, float], keys: tuple[Config, ...]) -> list[float]:
    nan = math.nan
    return [float(table.get(k, nan)) for k in keys]


def _epoch_rows(jobs: Sequence[PlanJob], classes: _Classes,
                cache: PlanCache | None = None) -> np.ndarray:
    """Seconds per epoch of every job (rows) on every configuration of ``classes.configs``
    (columns), NaN where the job has no profile for it; shape (J, len(configs))."""
    keys = tuple((classes.info[c][0], g) for c, g in classes.configs)
    rows = ([cache.row(j, keys) for j in jobs] if cache is not None
            else [_row(j.epoch_time_s, keys) for j in jobs])
    return np.array(rows, dtype=np.float64).reshape(len(jobs), len(keys))


def _class_shadow(per_epoch: np.ndarray, remaining: np.ndarray, classes: _Classes,
                  window_s: float) -> list[float]:
    """The shadow price of one GPU's time per node class, EUR/s (:func:`shadow_prices`):
    ``per_epoch`` and ``remaining`` as :func:`_epoch_rows` and the jobs' remaining epochs."""
    n_cls = len(classes.info)
    lam = [0.0] * n_cls
    if window_s <= 0 or per_epoch.size == 0:
        return lam
    cfg_cls = np.array([c for c, _ in classes.configs], dtype=np.int64)
    cfg_g = np.array([g for _, g in classes.configs], dtype=np.float64)
    rate = np.array([classes.energy_per_s[c][g] for c, g in classes.configs], dtype=np.float64)
    times = per_epoch * remaining[:, None]
    costs = np.where(np.isnan(times), np.inf, times * rate[None, :])
    valid = np.isfinite(costs).any(axis=1)
    costs, times = costs[valid], times[valid]
    if not len(costs):
        return lam
    k = np.argmin(costs, axis=1)  # each job's cheapest configuration
    rows = np.arange(len(costs))
    cls, g, t, c = cfg_cls[k], cfg_g[k], times[rows, k], costs[rows, k]
    need = g * np.minimum(t, window_s)  # GPU-seconds it wants of the window
    demand = np.bincount(cls, weights=need, minlength=n_cls)
    for ci, members in enumerate(classes.members):
        capacity = len(members) * classes.info[ci][1] * window_s
        if demand[ci] <= capacity:
            continue
        mine = np.flatnonzero(cls == ci)
        other = cfg_cls != ci
        alt = (costs[mine][:, other].min(axis=1) if other.any()
               else np.full(len(mine), np.inf))
        # what each job loses per GPU-second of the class it leaves for its best elsewhere
        regret = (alt - c[mine]) / (g[mine] * t[mine])
        order = np.argsort(-regret, kind="stable")
        ranked = regret[order]
        marginal_at = int(np.searchsorted(np.cumsum(need[mine][order]), capacity,
                                          side="right"))
        marginal = float(ranked[marginal_at])
        if not math.isfinite(marginal):  # every job that can leave must leave
            finite = ranked[np.isfinite(ranked)]
            lam[ci] = float(finite.max()) * (1 + REGRET_TOLERANCE) if len(finite) else 0.0
            continue
        # regrets closer than REGRET_TOLERANCE of a fully busy GPU's cost are equal
        tol = REGRET_TOLERANCE * classes.energy_per_s[ci][-1] / classes.info[ci][1]
        kept, rest = ranked[:marginal_at], ranked[marginal_at:]
        above = kept[np.isfinite(kept) & (kept > marginal + tol)]
        below = rest[rest < marginal - tol]
        if len(above):  # the marginal group leaves first, the fallback returns the rest
            lam[ci] = (marginal + float(above.min())) / 2
        elif len(below):  # the class cannot hold its top group: the jobs below it leave
            lam[ci] = (marginal + float(below.max())) / 2
        # else every job wanting the class loses the same by leaving: no price
    return lam


def shadow_prices(nodes: Sequence[PlanNode], jobs: Sequence[PlanJob],
                  settings: PlannerSettings | None = None) -> dict[str, float]:
    """The shadow price of one GPU-second of each node, EUR/s (0 on most nodes most of the
    time), with :attr:`PlannerSettings.shadow_window_s` = W > 0.

    Eq. 1 prices a configuration at its energy and sees capacity only at T_c (Appendix A,
    4g); §IV-A: the Job Optimizer "considers a problem with a much narrower scope making it
    challenging to estimate the impact of decisions on the overall cost". When the work the
    jobs want of a node class — each job at its cheapest configuration, g · min(t_jng, W)
    GPU-seconds — exceeds what the class can do in the window (its GPUs × W), some of it
    must run elsewhere, and a GPU-second of the class is worth what the job that gives it up
    loses. This is the dual price of the class's capacity constraint summed over the window,
    for the assignment that keeps the jobs which lose most by leaving: the jobs are ranked
    by their regret per GPU-second of the class, (π of the best configuration outside it −
    π of the cheapest) / (g · t_jng), the class is filled in that order, and the price lies
    between the regret of the first job that does not fit (the *marginal* one) and the next
    higher regret among those that do. We take the middle of that range, so the jobs as
    cheap to move as the marginal one prefer elsewhere (and take it while it has room; the
    rule's fallback puts the rest on the class) and the others stay. When no job that fits
    has a higher regret than the marginal one (regrets within :data:`REGRET_TOLERANCE` of a
    busy GPU's cost are equal) — the class cannot hold even the jobs that lose most by
    leaving — the price is the middle between the marginal regret and the next lower one,
    so that the jobs below the marginal group leave and it keeps the class; when every job
    wanting the class loses the same, which ones leave does not matter and the price is 0;
    when the marginal job has nowhere else to go, it is just above the highest finite
    regret. Nothing is fitted to a workload; W is the only parameter.

    Returns:
        node name → EUR per GPU-second (shared by every node of a node class).

    Raises:
        PlanningError: inconsistent input (as :func:`plan`).
    """
    s = settings or PlannerSettings()
    _validate(nodes, jobs)
    classes = _Classes(nodes, s.price, s.shared_idle)
    lam = _class_shadow(_epoch_rows(jobs, classes),
                        np.array([j.remaining_epochs for j in jobs], dtype=np.float64),
                        classes, s.shadow_window_s)
    return {n.name: lam[classes.of[i]] for i, n in enumerate(nodes)}


def _all_job_data(jobs: Sequence[PlanJob], classes: _Classes, node_index: Mapping[str, int],
                  now_s: float, s: PlannerSettings,
                  cache: PlanCache | None = None,
                  per_epoch: np.ndarray | None = None) -> list[_JobData]:
    """:class:`_JobData` of every job, computed per node class with numpy: t_jng and π of
    every (job, class, g) and each job's stay option are arrays of shape (J, K + 1) (K
    configurations, plus the one bound to a running job's node), and one ``lexsort`` orders
    every job's candidates — D*_j by (π, t), then the rest by (t, π); ties go to the job's
    current class, then the lower class and GPU count, then the stay option. The same lists
    as :func:`_job_data`, job by job."""
    n_jobs, n_cfg = len(jobs), len(classes.configs)
    if n_jobs == 0:
        return []
    cfg_cls = np.array([c for c, _ in classes.configs] + [0], dtype=np.int64)
    cfg_g = np.array([g for _, g in classes.configs] + [0], dtype=np.int64)
    rate = np.array([classes.cost_per_s[c][g] for c, g in classes.configs], dtype=np.float64)
    if per_epoch is None:
        per_epoch = _epoch_rows(jobs, classes, cache)
    remaining = np.array([j.remaining_epochs for j in jobs], dtype=np.float64)
    times = np.empty((n_jobs, n_cfg + 1), dtype=np.float64)
    times[:, :n_cfg] = per_epoch * remaining[:, None]  # t_jng, s; NaN where no profile
    times[:, n_cfg] = np.nan
    costs = np.empty_like(times)
    here = np.full(n_jobs, -1, dtype=np.int64)  # the running job's class
    cur_k = np.full(n_jobs, -1, dtype=np.int64)  # ... and configuration column
    running = [i for i, j in enumerate(jobs) if j.current is not None]
    col = {cfg: k for k, cfg in enumerate(classes.configs)}
    for i in running:
        cur = jobs[i].current
        assert cur is not None
        c = classes.of[node_index[cur.node]]
        here[i] = c
        cur_k[i] = col.get((c, cur.gpus), -1)
    if running:
        rows = np.array(running, dtype=np.int64)
        ks = cur_k[rows]
        ok = ks >= 0
        r_ok, k_ok = rows[ok], ks[ok]
        progress = np.array([jobs[i].progress_s for i in r_ok], dtype=np.float64)
        # staying put keeps the work done since the last snapshot
        times[r_ok, n_cfg] = np.maximum(times[r_ok, k_ok] - progress, 1e-6)
        costs[r_ok, n_cfg] = times[r_ok, n_cfg] * rate[k_ok]
        if s.restart_s:
            times[rows, :n_cfg] += s.restart_s
    costs[:, :n_cfg] = times[:, :n_cfg] * rate[None, :]
    cfg_cls[n_cfg] = 0
    cls_cols = np.broadcast_to(cfg_cls, times.shape).copy()
    g_cols = np.broadcast_to(cfg_g, times.shape).copy()
    cls_cols[:, n_cfg] = np.where(cur_k >= 0, cfg_cls[np.maximum(cur_k, 0)], 0)
    g_cols[:, n_cfg] = np.where(cur_k >= 0, cfg_g[np.maximum(cur_k, 0)], 0)
    missing = np.isnan(times)
    t0 = np.where(missing, 1.0, times)
    c0 = np.where(missing, 1.0, costs)
    due = np.array([j.due_s for j in jobs], dtype=np.float64)
    in_dstar = (now_s + t0 < due[:, None]) & ~missing
    group = np.where(missing, 2, np.where(in_dstar, 0, 1))
    first = np.where(in_dstar, c0, t0)
    second = np.where(in_dstar, t0, c0)
    not_here = cls_cols != here[:, None]
    generic = np.ones(times.shape, dtype=np.int64)
    generic[:, n_cfg] = 0
    order = np.lexsort((generic, g_cols, cls_cols, not_here, second, first, group), axis=-1)
    n_valid = (~missing).sum(axis=1)
    n_dstar = in_dstar.sum(axis=1)
    # per job, in candidate order: the randomised draw's weights (∝ 1/π over D*_j, or 1/t
    # over all when D*_j is empty) and their running sums
    rows = np.arange(n_jobs)[:, None]
    t_s, c_s, grp_s = t0[rows, order], c0[rows, order], group[rows, order]
    has_dstar = (n_dstar > 0)[:, None]
    weight = np.where(has_dstar, np.where(grp_s == 0, 1.0 / np.maximum(c_s, 1e-12), 0.0),
                      np.where(grp_s == 1, 1.0 / np.maximum(t_s, 1e-12), 0.0))
    draw_cum = np.cumsum(weight, axis=1)
    n_draw = np.where(n_dstar > 0, n_dstar, n_valid)
    fastest = np.where(n_valid > 0, np.nanmin(np.where(missing, np.inf, times), axis=1), np.inf)
    slowest = np.nanmax(np.where(missing, -np.inf, times), axis=1)
    min_cost = np.where(n_valid > 0, np.min(np.where(missing, np.inf, costs), axis=1), 0.0)
    w = np.array([j.weight_eur_per_h for j in jobs], dtype=np.float64) / 3600.0
    postponed = w * np.maximum(0.0, now_s - due)
    postponed = np.where(n_valid > 0, postponed + s.rho * w * np.maximum(
        0.0, now_s + s.interval_s + slowest - due), postponed)
    pressure = np.where(n_valid > 0, now_s + fastest - due, np.inf)
    new = tuple.__new__
    order_l = order.tolist()
    t_l, c_l = times.tolist(), costs.tolist()
    cls_l, g_l = cls_cols.tolist(), g_cols.tolist()
    cum_l = draw_cum.tolist()
    out: list[_JobData] = []
    for idx, (job, nv, nd, ndraw, wi, post, pr, mc) in enumerate(zip(
            jobs, n_valid.tolist(), n_dstar.tolist(), n_draw.tolist(), w.tolist(),
            postponed.tolist(), pressure.tolist(), min_cost.tolist(), strict=True)):
        cur = job.current
        cur_node = node_index[cur.node] if cur is not None else -1
        ti, ci, cl, gl = t_l[idx], c_l[idx], cls_l[idx], g_l[idx]
        ordered = tuple([new(_Option, (cl[k], gl[k], ti[k], ci[k],
                                       cur_node if k == n_cfg else -1))
                         for k in order_l[idx][:nv]])
        stay = None
        move = 0.0
        if cur is not None:
            stay = next((o for o in ordered if o.node >= 0), None)
            c_now = classes.energy_per_s[classes.of[cur_node]][cur.gpus]
            move = (job.progress_s + s.restart_s) * c_now + s.move_penalty_eur
        out.append(_JobData(
            job=job, index=idx, weight=wi, due=job.due_s, ordered=ordered, in_dstar=nd,
            draw=ordered[:ndraw], draw_cum=cum_l[idx][:ndraw], postponed_eur=post,
            pressure=pr, current_node=cur_node, current_gpus=cur.gpus if cur else 0,
            stay=stay, move_eur=move, min_cost=mc))
    return out


def _one_job(idx: int, job: PlanJob, classes: _Classes, node_index: Mapping[str, int],
             now_s: float, s: PlannerSettings, times: list[float], costs: list[float],
             has: list[bool], cfg_cls: list[int], cfg_g: list[int], n_cfg: int) -> _JobData:
    w = job.weight_eur_per_h / 3600.0
    cur = job.current
    cur_node = node_index[cur.node] if cur else -1
    cur_cls = classes.of[cur_node] if cur else -1
    restart = s.restart_s if cur is not None else 0.0
    options: list[_Option] = []
    for k in range(n_cfg):
        if not has[k]:
            continue
        c, g, t = cfg_cls[k], cfg_g[k], times[k]
        if c == cur_cls and cur is not None and cur.gpus == g:
            # staying put keeps the work done since the last snapshot
            stay = max(t - job.progress_s, 1e-6)
            options.append(_Option(c, g, stay, stay * classes.cost_per_s[c][g], cur_node))
        if restart:
            t += restart
            options.append(_Option(c, g, t, t * classes.cost_per_s[c][g]))
        else:
            options.append(_Option(c, g, t, costs[k]))
    return _finish_job(idx, job, options, cur_node, cur_cls, w, now_s, classes, s)


def _finish_job(idx: int, job: PlanJob, options: list[_Option], cur_node: int, here: int,
                w: float, now_s: float, classes: _Classes, s: PlannerSettings) -> _JobData:
    cur = job.current
    # among equally good configurations, the one the job runs on now comes first
    due = job.due_s
    dstar = sorted((o for o in options if now_s + o.time_s < due),
                   key=lambda o: (o.cost_eur, o.time_s, o.cls != here, o.cls, o.gpus))
    rest = sorted((o for o in options if not now_s + o.time_s < due),
                  key=lambda o: (o.time_s, o.cost_eur, o.cls != here, o.cls, o.gpus))
    if dstar:
        draw, weights = dstar, [1.0 / max(o.cost_eur, 1e-12) for o in dstar]
    else:
        draw, weights = rest, [1.0 / max(o.time_s, 1e-12) for o in rest]
    fastest = min((o.time_s for o in options), default=math.inf)
    slowest = max((o.time_s for o in options), default=None)
    postponed = w * max(0.0, now_s - due)
    if slowest is not None:
        postponed += s.rho * w * max(0.0, now_s + s.interval_s + slowest - due)
    move = 0.0
    if cur is not None:
        c_now = classes.energy_per_s[classes.of[cur_node]][cur.gpus]
        move = (job.progress_s + s.restart_s) * c_now + s.move_penalty_eur
    return _JobData(
        job=job, index=idx, weight=w, due=due, ordered=(*dstar, *rest),
        in_dstar=len(dstar), draw=tuple(draw), draw_cum=list(accumulate(weights)),
        postponed_eur=postponed, pressure=now_s + fastest - due if options else math.inf,
        current_node=cur_node, current_gpus=cur.gpus if cur else 0,
        stay=next((o for o in options if o.node >= 0), None), move_eur=move,
        min_cost=min((o.cost_eur for o in options), default=0.0),
    )


def _job_data(idx: int, job: PlanJob, classes: _Classes, node_index: Mapping[str, int],
              now_s: float, s: PlannerSettings) -> _JobData:
    """:class:`_JobData` of one job (what :func:`_all_job_data` computes for many at once)."""
    return _single(idx, job, classes, node_index, now_s, s)


def _single(idx: int, job: PlanJob, classes: _Classes, node_index: Mapping[str, int],
            now_s: float, s: PlannerSettings) -> _JobData:
    times: list[float] = []
    costs: list[float] = []
    has: list[bool] = []
    for c, g in classes.configs:
        per = job.epoch_time_s.get((classes.info[c][0], g))
        if per is None:
            times.append(math.nan)
            costs.append(math.nan)
            has.append(False)
        else:
            t = job.remaining_epochs * per
            times.append(t)
            costs.append(t * classes.cost_per_s[c][g])
            has.append(True)
    cfg_cls = [c for c, _ in classes.configs]
    cfg_g = [g for _, g in classes.configs]
    return _one_job(idx, job, classes, node_index, now_s, s, times, costs, has, cfg_cls,
                    cfg_g, len(cfg_cls))


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


#: One job's place in a schedule: (node index, GPUs, option) or None (waits).
_Assign = tuple[int, int, _Option] | None


@dataclass
class _Best:
    """The best schedule of the search."""

    assign: list[_Assign]
    terms: tuple[float, float, float, float]  # tardiness, worst case, first ending, moves
    iteration: int
    greedy_terms: tuple[float, float, float, float]
    iterations: int
    greedy_assign: list[_Assign] = field(default_factory=list)


def _vacancy_eur_per_gpu(nodes: Sequence[PlanNode], classes: _Classes,
                         s: PlannerSettings) -> list[float]:
    """Per node, what one free GPU of a node in use costs, EUR: its share of the idle power
    for :attr:`PlannerSettings.vacancy_s`, c_n0 · vacancy_s / G_n (with ``shared_idle`` a job
    pays its share of its node's idle power, and the shares of the GPUs left free are paid
    by nobody; 0 without)."""
    return [classes.idle_per_s[classes.of[i]] * s.vacancy_s / n.gpus
            if s.shared_idle else 0.0 for i, n in enumerate(nodes)]


def _search(now_s: float, nodes: Sequence[PlanNode], classes: _Classes, data: list[_JobData],
            s: PlannerSettings) -> _Best:
    """Algorithm 1's iterations (module docstring): the pure greedy, the incumbent (and
    the pressing incumbent, :attr:`PlannerSettings.pressing_incumbent`), then randomised
    schedules until MaxIt_RG or :attr:`PlannerSettings.patience`. Random numbers
    are drawn in the order of the implementation before issue 22's rewrite
    (``benchmarks/andreas_reference.py``), so the same seed builds the same schedules."""
    n_jobs = len(data)
    # Eq. 2: decreasing pressure; ties by larger weight, then input order
    base_order = sorted(range(n_jobs), key=lambda i: (-data[i].pressure, -data[i].weight, i))
    min_weight = min((d.weight for d in data), default=1.0)
    rng = random.Random(s.seed)
    rand = rng.random
    # per job: the swap probability π · ω_min / ω_j, and its cost if the plan leaves it waiting
    # (ω τ, and ρ ω τ̂ − ... as Eq. 1 splits them), computed once instead of per iteration
    swap_p = [s.swap_probability * min_weight / d.weight for d in data]
    late_eur = [d.weight * max(0.0, now_s - d.due) for d in data]
    worst_eur = [d.postponed_eur - late for d, late in zip(data, late_eur, strict=True)]
    running = [d.index for d in data if d.current_node >= 0]
    ordered = [d.ordered for d in data]
    draws = [d.draw for d in data]
    draw_cum = [d.draw_cum for d in data]
    n_draw = [len(d.draw) for d in data]
    stay = [d.stay for d in data]
    cur_node = [d.current_node for d in data]
    cur_gpus = [d.current_gpus for d in data]
    weight = [d.weight for d in data]
    due = [d.due for d in data]
    move_eur = [d.move_eur for d in data]
    gpus = [n.gpus for n in nodes]
    n_nodes = len(nodes)
    total_gpus = sum(gpus)
    alpha = s.alpha
    swapping = s.swap_probability > 0
    patience = s.patience
    inf = math.inf
    # the energy term: Eq. 1's first-ending jobs, or every job's π (module docstring); with
    # the latter a schedule is bounded below by Σ π_min + what its placed jobs spend above it
    first_ending = s.energy_term == "first-ending"
    min_cost = [d.min_cost for d in data]
    base = 0.0 if first_ending else math.fsum(min_cost)
    vacancy = _vacancy_eur_per_gpu(nodes, classes, s)
    limit = inf  # abandon a schedule once its lower bound exceeds this

    best_f = inf
    best_changes = inf
    best_assign: list[_Assign] = []
    best_terms = (0.0, 0.0, 0.0, 0.0)
    best_iter = 0
    greedy_terms = (0.0, 0.0, 0.0, 0.0)
    greedy_assign: list[_Assign] = []
    iterations = 0
    last_better = 0

    # the incumbent: running jobs stay where they are, waiting jobs fill the free GPUs by the
    # rule; built right after the pure greedy when some job runs
    running_first = sorted(base_order, key=lambda i: cur_node[i] < 0)
    incumbent_at = 1 if running else -1
    # the pressing incumbent (:attr:`PlannerSettings.pressing_incumbent`): the same
    # preference in Eq. 2's order, so that a waiting job whose due date cannot wait takes
    # GPUs before the running jobs less pressing than it; it draws no random numbers
    pressing_at = 2 if running and s.pressing_incumbent and len(running) < n_jobs else -1

    for it in range(s.max_iterations):
        if patience is not None and it > 1 and it - last_better > patience:
            break
        iterations += 1
        incumbent = it == incumbent_at or it == pressing_at
        randomised = it > 0 and not incumbent
        order = running_first if it == incumbent_at else base_order[:]
        if randomised and swapping:
            for k in range(n_jobs - 1):
                if rand() < swap_p[order[k]]:
                    order[k], order[k + 1] = order[k + 1], order[k]
        deviate = randomised and alpha > 0
        free = gpus[:]
        buckets = classes.empty_buckets()
        free_total = total_gpus
        first_t = [inf] * n_nodes
        first_pi = [0.0] * n_nodes
        assign: list[_Assign] = [None] * n_jobs
        tard = moves = excess = 0.0
        changes = 0
        abandoned = False
        for i in order:
            if free_total == 0:
                break
            cands = ordered[i]
            if not cands:
                continue
            chosen: _Option | None = None
            if deviate and rand() < alpha and n_draw[i] > 1:
                cum = draw_cum[i]
                r = rand() * cum[-1]
                chosen = draws[i][min(bisect_right(cum, r), n_draw[i] - 1)]
            if incumbent and stay[i] is not None:
                chosen = stay[i]
            if chosen is not None:
                cands = (chosen, *cands)
            # ASSIGN / ASSIGN_TO_SUBOPTIMAL (:func:`_take`, inlined)
            node = -1
            for opt in cands:
                c, g, t, pi, bound = opt
                if bound >= 0:
                    have = free[bound]
                    if have < g:
                        continue
                    node = bound
                    buckets[c][have].remove(node)
                else:
                    levels = buckets[c]
                    for k in range(g, len(levels)):
                        if levels[k]:
                            node = levels[k].pop()
                            break
                    if node < 0:
                        continue
                left = free[node] - g
                free[node] = left
                buckets[c][left].append(node)
                here = stay[i]
                if here is not None and node == cur_node[i] and g == cur_gpus[i]:
                    opt = here  # landed where it runs: it stays, and keeps its progress
                    t, pi = here.time_s, here.cost_eur
                break
            if node < 0:
                continue
            free_total -= g
            assign[i] = (node, g, opt)
            late = now_s + t - due[i]
            if late > 0.0:
                tard += weight[i] * late
            if first_ending:
                ft = first_t[node]
                if t < ft or (t == ft and pi < first_pi[node]):
                    first_t[node] = t
                    first_pi[node] = pi
            else:
                excess += pi - min_cost[i]
            if cur_node[i] >= 0 and (node != cur_node[i] or g != cur_gpus[i]):
                changes += 1
                moves += move_eur[i]
            # Σ ω τ over placed jobs only grows, and every other term is >= 0: stop as soon
            # as this schedule can no longer beat (or tie) the best one
            if tard + moves + excess > limit:
                abandoned = True
                break
        if abandoned:
            continue
        for i in running:  # running jobs left waiting are preempted
            if assign[i] is None:
                changes += 1
                moves += move_eur[i]
        if first_ending:
            first_total = sum(first_pi)
        else:
            first_total = base + excess + sum(
                v * f for v, f, g in zip(vacancy, free, gpus, strict=True) if f < g)
        worst = 0.0
        tard_total = tard
        for i, a in enumerate(assign):
            if a is None:
                tard_total += late_eur[i]
                worst += worst_eur[i]
        f = tard_total + worst + first_total + moves
        if it == 0:
            greedy_terms = (tard_total, worst, first_total, moves)
            greedy_assign = assign
        if f < best_f - TIE_EUR or (abs(f - best_f) <= TIE_EUR and changes < best_changes):
            best_f, best_changes = f, changes
            best_assign = assign
            best_terms = (tard_total, worst, first_total, moves)
            best_iter = it
            last_better = it
            limit = best_f + TIE_EUR - base
    return _Best(best_assign, best_terms, best_iter, greedy_terms, iterations, greedy_assign)


def plan(now_s: float, nodes: Sequence[PlanNode], jobs: Sequence[PlanJob],
         settings: PlannerSettings | None = None, *, cache: PlanCache | None = None) -> Plan:
    """Algorithm 1 at rescheduling point ``now_s`` (module docstring).

    Args:
        now_s: T_c, s.
        nodes: the nodes (names unique).
        jobs: every submitted, unfinished job, running or waiting.
        settings: :class:`PlannerSettings`; the defaults are gputopo's planner,
            :meth:`PlannerSettings.paper` the paper's.
        cache: a :class:`PlanCache` the caller keeps across points (faster; same plan).

    Returns:
        the best schedule found, with f_OBJ and a decision per job.

    Raises:
        PlanningError: inconsistent input (duplicate names, unknown current node, a running
            job on more GPUs than its node has, a non-positive weight or epoch count).
    """
    s = settings or PlannerSettings()
    node_index = _validate(nodes, jobs)
    classes = _Classes(nodes, s.price, s.shared_idle)
    per_epoch = None
    if s.shadow_window_s and jobs:
        per_epoch = _epoch_rows(jobs, classes, cache)
        classes.set_shadow(_class_shadow(
            per_epoch, np.array([j.remaining_epochs for j in jobs], dtype=np.float64),
            classes, s.shadow_window_s))
    data = _all_job_data(jobs, classes, node_index, now_s, s, cache, per_epoch)
    best = _search(now_s, nodes, classes, data, s)
    local_moves = 0
    if s.local_search and best.assign:
        best, local_moves = _local_search(now_s, nodes, classes, data, s, best)
    return _decide(now_s, nodes, data, best, local_moves, classes.shadow_per_s)


def _shadow_eur(opt: _Option, lam: Sequence[float]) -> float:
    """The shadow part of an option's π (:func:`shadow_prices`), EUR."""
    return opt.time_s * opt.gpus * lam[opt.cls] if lam[opt.cls] else 0.0


def _split(terms: tuple[float, float, float, float], data: list[_JobData],
           assign: list[_Assign], lam: Sequence[float]) -> Objective:
    """The search's terms as an :class:`Objective`, the shadow part of its energy term
    apart: each placed job's, and for each waiting job its cheapest option's π with the
    shadow price less its cheapest energy."""
    tard, worst, energy, moves = terms
    if not any(lam) or not assign:
        return Objective(tard, worst, energy, moves)
    shadow = 0.0
    for d, a in zip(data, assign, strict=True):
        if a is not None:
            shadow += _shadow_eur(a[2], lam)
        elif d.ordered:
            shadow += d.min_cost - min(o.cost_eur - _shadow_eur(o, lam) for o in d.ordered)
    return Objective(tard, worst, energy - shadow, moves, shadow)


def _decide(now_s: float, nodes: Sequence[PlanNode], data: list[_JobData], best: _Best,
            local_moves: int, lam: Sequence[float]) -> Plan:
    decisions: dict[str, JobDecision] = {}
    for d in data:
        a = best.assign[d.index] if best.assign else None
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
        rank = d.ordered.index(opt) if opt in d.ordered else 0
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
            job.id, Placement(nodes[node].name, g), opt.time_s, finish,
            opt.cost_eur - _shadow_eur(opt, lam), max(0.0, finish - d.due), why)
    return Plan(
        now_s=now_s, decisions=decisions, objective=_split(best.terms, data, best.assign, lam),
        iterations=best.iterations, best_iteration=best.iteration,
        greedy_objective=_split(best.greedy_terms, data, best.greedy_assign, lam),
        pressure_s={d.job.id: d.pressure for d in data}, local_moves=local_moves,
    )


def _local_search(now_s: float, nodes: Sequence[PlanNode], classes: _Classes,
                  data: list[_JobData], s: PlannerSettings, best: _Best) -> tuple[_Best, int]:
    """Improve the search's best schedule while f_OBJ (with the move charge; energy term
    ``all``, where a job's cost does not depend on its neighbours, only the vacancy of the
    nodes it leaves and takes) goes down, by four kinds of change:

    * **move one job** to its cheapest configuration among the GPUs free (best fit) — another
      GPU count or node class, or back onto its current node;
    * **send a running job home**: a running job the schedule moved goes back to its
      current node, and the job that took its place there takes its place instead;
    * **swap two jobs' configurations**: jobs on (n_a, g_a) and (n_b, g_b) exchange them
      (each needs a profile for the other's); for every pair of configurations the jobs that
      gain most from the exchange are paired first;
    * **start a waiting job** on GPUs a change freed, when that costs no more than waiting.

    Every change lowers f_OBJ (a start keeps it or lowers it), so the result is never worse
    than the search's. Rounds repeat while something changed (at most 8).

    Returns:
        the improved schedule (its terms recomputed) and the number of changes made.
    """
    ls = _Improver(now_s, nodes, classes, data, s, best.assign)
    changes = 0
    for _ in range(8):
        changed = ls.relocate() + ls.send_home() + ls.swap()
        if changed:
            changed += ls.start_waiting()
        changes += changed
        if not changed:
            break
    if not changes:
        return best, 0
    energy_free = sum(ls.vac(n, f) for n, f in enumerate(ls.free))
    return replace(best, assign=ls.assign,
                   terms=_terms(now_s, data, ls.assign, energy_free)), changes


class _Improver:
    """The local search's state: a schedule, the free GPUs and residents of every node, and
    each placed job's share of f_OBJ (:func:`_local_search`)."""

    def __init__(self, now_s: float, nodes: Sequence[PlanNode], classes: _Classes,
                 data: list[_JobData], s: PlannerSettings, assign: list[_Assign]) -> None:
        self.now_s = now_s
        self.classes = classes
        self.data = data
        self.assign = list(assign)
        self.gpus = [n.gpus for n in nodes]
        self.free = self.gpus[:]
        self.residents: list[set[int]] = [set() for _ in nodes]
        for i, a in enumerate(self.assign):
            if a is not None:
                self.free[a[0]] -= a[1]
                self.residents[a[0]].add(i)
        # buckets[c][k]: nodes of class c with k free GPUs
        self.buckets: list[list[set[int]]] = [[set() for _ in range(gmax + 1)]
                                              for _, gmax, _ in classes.info]
        for node, f in enumerate(self.free):
            self.buckets[classes.of[node]][f].add(node)
        # each job's option per (class, g), not bound to a node
        self.generic: list[dict[tuple[int, int], _Option]] = [
            {(o.cls, o.gpus): o for o in d.ordered if o.node < 0} for d in data]
        self.waiting_eur = [d.postponed_eur + d.min_cost for d in data]
        self.vacancy = _vacancy_eur_per_gpu(nodes, classes, s)
        # per class: g -> (k, node), the lowest k >= g with nodes of k free GPUs and the
        # lowest such node (what :meth:`fit` scans for); emptied when the class changes
        self._first: list[dict[int, tuple[float, int]]] = [{} for _ in classes.info]
        # per job, its options with their share of f_OBJ (:meth:`cost`) away from its
        # current placement, and its share where it runs now (the stay option's, if any)
        self.choices: list[list[tuple[_Option, int, int, int, float]]] = []
        self.home_eur: list[float] = []
        for d in data:
            row = []
            for o in d.ordered:
                late = now_s + o.time_s - d.due
                c = o.cost_eur + (d.weight * late if late > 0.0 else 0.0)
                if d.current_node >= 0 and (o.node != d.current_node
                                            or o.gpus != d.current_gpus):
                    c += d.move_eur
                row.append((o, o.cls, o.gpus, o.node, c))
            self.choices.append(row)
            home = math.nan
            if d.current_node >= 0:
                at = d.stay or self.generic[d.index].get(
                    (classes.of[d.current_node], d.current_gpus))
                if at is not None:
                    late = now_s + at.time_s - d.due
                    home = at.cost_eur + (d.weight * late if late > 0.0 else 0.0)
            self.home_eur.append(home)

    # -------------------------------------------------------------- evaluation

    def vac(self, node: int, f: int) -> float:
        """The vacancy term of ``node`` with ``f`` free GPUs."""
        return self.vacancy[node] * f if f < self.gpus[node] else 0.0

    def cost(self, i: int, opt: _Option, node: int) -> tuple[float, _Option]:
        """Job i's share of f_OBJ on ``opt`` at ``node`` (and the option it then takes: the
        stay option on its current node with its current GPUs)."""
        d = self.data[i]
        if d.stay is not None and node == d.current_node and opt.gpus == d.current_gpus:
            opt = d.stay
        late = self.now_s + opt.time_s - d.due
        c = opt.cost_eur + (d.weight * late if late > 0.0 else 0.0)
        if d.current_node >= 0 and (node != d.current_node or opt.gpus != d.current_gpus):
            c += d.move_eur
        return c, opt

    def share(self, i: int) -> float:
        """Job i's share of f_OBJ where the schedule has it now."""
        a = self.assign[i]
        if a is None:
            return self.waiting_eur[i]
        return self.cost(i, a[2], a[0])[0]

    def _first_fit(self, cls: int, g: int) -> tuple[float, int]:
        """(k, node): the fewest free GPUs k >= g any node of class ``cls`` has, and the
        lowest such node; (inf, -1) when none has g."""
        got = self._first[cls].get(g)
        if got is None:
            got = (math.inf, -1)
            levels = self.buckets[cls]
            for k in range(g, len(levels)):
                if levels[k]:
                    got = (k, min(levels[k]))
                    break
            self._first[cls][g] = got
        return got

    def apply(self, moves: Sequence[tuple[int, int, _Option | None]], *,
              allow_equal: bool = False) -> bool:
        """Make the changes ``moves`` (job, node, option; option None: the job waits) when
        they lower f_OBJ (or keep it, with ``allow_equal``) and fit; returns whether made."""
        delta = 0.0
        free: dict[int, int] = {}
        for i, _, _ in moves:
            a = self.assign[i]
            delta -= self.share(i)
            if a is not None:
                free[a[0]] = free.get(a[0], self.free[a[0]]) + a[1]
        placed: list[tuple[int, int, _Option] | None] = []
        for i, node, opt in moves:
            if opt is None:
                delta += self.waiting_eur[i]
                placed.append(None)
                continue
            c, taken = self.cost(i, opt, node)
            delta += c
            free[node] = free.get(node, self.free[node]) - opt.gpus
            placed.append((node, opt.gpus, taken))
        if any(f < 0 for f in free.values()):
            return False
        delta += sum(self.vac(n, f) - self.vac(n, self.free[n]) for n, f in free.items())
        if not (delta < -TIE_EUR or (allow_equal and delta <= TIE_EUR)):
            return False
        for (i, _, _), new in zip(moves, placed, strict=True):
            a = self.assign[i]
            if a is not None:
                self.residents[a[0]].discard(i)
            self.assign[i] = new
            if new is not None:
                self.residents[new[0]].add(i)
        for n, f in free.items():
            c = self.classes.of[n]
            b = self.buckets[c]
            b[self.free[n]].discard(n)
            self.free[n] = f
            b[f].add(n)
            self._first[c].clear()
        return True

    def best_place(self, i: int, release: tuple[int, int] = (-1, 0)
                   ) -> tuple[int, _Option] | None:
        """Job i's cheapest place on the GPUs free (plus ``release``: a node and the GPUs
        about to be freed there), or None: its share of f_OBJ (:meth:`cost`) and the change
        of the vacancy term of the node it lands on."""
        free, gpus, vacancy, of = self.free, self.gpus, self.vacancy, self.classes.of
        rel_node, rel_g = release
        d = self.data[i]
        here, here_g = d.current_node, d.current_gpus
        home = self.home_eur[i]
        found_c = math.inf
        found: tuple[int, _Option] | None = None
        for opt, cls, g, bound, away in self.choices[i]:
            if bound >= 0:
                node = bound
                f = free[node] + rel_g if node == rel_node else free[node]
                if f < g:
                    continue
            else:
                # :meth:`fit` with the released node
                best, best_free = -1, math.inf
                if rel_node >= 0 and of[rel_node] == cls:
                    f = free[rel_node] + rel_g
                    if g <= f:
                        best, best_free = rel_node, f
                k, node = self._first_fit(cls, g)
                if not k < best_free:
                    node = best
                if node < 0:
                    continue
                f = free[node] + rel_g if node == rel_node else free[node]
            c = home if node == here and g == here_g else away
            v, size = vacancy[node], gpus[node]
            c = c + (v * (f - g) if f - g < size else 0.0) - (v * f if f < size else 0.0)
            if found is None or c < found_c - TIE_EUR:
                found_c, found = c, (node, opt)
        return found

    # -------------------------------------------------------------- changes

    def relocate(self) -> int:
        """Move each placed job to its cheapest place, if that lowers f_OBJ."""
        made = 0
        for i, a in enumerate(self.assign):
            if a is None:
                continue
            where = self.best_place(i, (a[0], a[1]))
            if where is not None and (where[0], where[1].gpus) != (a[0], a[1]) and self.apply(
                    [(i, where[0], where[1])]):
                made += 1
        return made

    def send_home(self) -> int:
        """Send moved running jobs back to their node, where another job took their GPUs:
        that job takes the moved job's place (or its own cheapest one)."""
        made = 0
        for i, d in enumerate(self.data):
            a = self.assign[i]
            if d.stay is None or a is None or (a[0], a[1]) == (d.current_node, d.current_gpus):
                continue
            home = d.current_node
            for j in sorted(self.residents[home]):
                b = self.assign[j]
                if b is None or j == i:
                    continue
                opt_j = self.generic[j].get((self.classes.of[a[0]], b[1]))
                if opt_j is not None and self.apply([(i, home, d.stay), (j, a[0], opt_j)]):
                    made += 1
                    break
        return made

    def swap(self) -> int:
        """Exchange the configurations of two jobs where both together gain."""
        made = 0
        groups: dict[tuple[int, int], list[int]] = {}
        now_eur: dict[int, float] = {}
        for i, a in enumerate(self.assign):
            if a is not None:
                groups.setdefault((a[2].cls, a[1]), []).append(i)
                now_eur[i] = self.share(i)
        keys = sorted(groups)
        generic = self.generic
        for x, kx in enumerate(keys):
            for ky in keys[x + 1:]:
                gain_x = sorted((self.cost(i, generic[i][ky], -1)[0] - now_eur[i], i)
                                for i in groups[kx] if ky in generic[i])
                gain_y = sorted((self.cost(j, generic[j][kx], -1)[0] - now_eur[j], j)
                                for j in groups[ky] if kx in generic[j])
                for (dx, i), (dy, j) in zip(gain_x, gain_y, strict=False):
                    if dx + dy >= -TIE_EUR:
                        break
                    ai, aj = self.assign[i], self.assign[j]
                    if ai is None or aj is None or (ai[2].cls, ai[1]) != kx or (
                            aj[2].cls, aj[1]) != ky:
                        continue  # one of them changed already in this round
                    if self.apply([(i, aj[0], generic[i][ky]), (j, ai[0], generic[j][kx])]):
                        made += 1
        return made

    def start_waiting(self) -> int:
        """Start waiting jobs, most pressing first, where GPUs are free for them and that
        costs no more than waiting."""
        made = 0
        if not any(self.free):
            return 0
        for i in sorted(range(len(self.data)), key=lambda k: -self.data[k].pressure):
            if self.assign[i] is not None or not self.data[i].ordered:
                continue
            where = self.best_place(i)
            if where is not None and self.apply([(i, where[0], where[1])], allow_equal=True):
                made += 1
        return made


def _terms(now_s: float, data: list[_JobData], assign: list[_Assign],
           vacancy_eur: float) -> tuple[float, float, float, float]:
    """f_OBJ's terms (tardiness, worst case, energy, moves) of ``assign`` with the energy
    term ``all`` (``vacancy_eur``: the term of the GPUs used nodes leave free)."""
    tard = worst = moves = 0.0
    energy = vacancy_eur
    for d, a in zip(data, assign, strict=True):
        if a is None:
            tard += d.weight * max(0.0, now_s - d.due)
            worst += d.postponed_eur - d.weight * max(0.0, now_s - d.due)
            energy += d.min_cost
            if d.current_node >= 0:
                moves += d.move_eur
            continue
        node, g, opt = a
        tard += d.weight * max(0.0, now_s + opt.time_s - d.due)
        energy += opt.cost_eur
        if d.current_node >= 0 and (node != d.current_node or g != d.current_gpus):
            moves += d.move_eur
    return tard, worst, energy, moves
