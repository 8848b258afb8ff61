"""The co-location model: each job's slow-down in a set sharing one GPU, and δ from it.

Tabrizian (2020) defines the gain of co-locating a set S on one GPU (§4.1, **Eq. 4.1**):

    δ_S = Σ_{j∈S} t_j / max_{j∈S} t'_{j,S}

with ``t_j`` the solo iteration time and ``t'_{j,S}`` the iteration time inside S; δ ≥ 1 means
the set finishes its iterations sooner together than one after the other. It summarises each
job by ``C`` (**Eq. 4.3**, occupancy-weighted kernel time) and ``M`` (**Eq. 4.2**,
DRAM-bandwidth-weighted kernel time), finds with MPS that sets with small ``ΣC`` gain and large
ones lose (**§4.2.4**, Fig. 4.12: "ΣC ≤ 4·10⁷" separates them) and schedules with
**Algorithm 2**, whose ``CalculateSpeedup(Node, C, M)`` predicts δ from those numbers ("it is
fairly easy to use a linear regression", §5.1). The thesis publishes no formula for it.

**gputopo's predictor** (this module; constants in :class:`ColocationModel`). From a profile
(:mod:`topology.colocation.profile`) it takes the job's time-averaged demands on the two
resources C and M measure:

* ``c_j = C_j / (100 · W · t_j · 10⁶)`` — mean fraction of warp slots resident over a solo
  iteration (what DCGM's ``SM_OCCUPANCY`` reports), and the compute demand
  ``d_j = min(1, c_j / q_sat)`` — the share of the GPU's usable warp residency it needs;
* ``m_j`` likewise from M, and the bandwidth demand ``b_j = min(1, m_j / p_sat)``.

For a set S on one GPU under MPS, job j's slow-down ``s_{j,S} = t'_{j,S} / t_j`` is

    s_{j,S} = max(1,  ρ_S,  1 + ε · Σ_{k∈S, k≠j} b_k),   ρ_S = max(Σ_{k∈S} d_k, Σ_{k∈S} b_k)

* **processor sharing** (ρ_S): when the set asks for more warp residency or DRAM bandwidth
  than the GPU has, MPS shares the SMs among its clients without priorities and every job's
  kernels stretch by the overload;
* **interference** (ε): below saturation each co-runner's memory traffic still delays job j's
  kernels in the shared L2 and DRAM queues, in proportion to the co-runners' bandwidth demand.

A job alone has s = 1 and δ = 1. The constants were calibrated to what the thesis states
(``topology/colocation/data/README.md``): with the shipped catalog, every equal-batch set of
two or three of its five models that the predictor says loses (δ < 1) is a batch-256 set above
the ``ΣC = 4·10⁷`` line (§4.2.4), the SENet-18 + ResNet-18 batch-256 pair gets δ = 1.04 (the
thesis measured 1.02, §6.3), sets with ResNet-50 are the slowest at every batch size and the
largest δ falls as the batch grows (§4.2); ``tests/topology/colocation`` holds each to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from topology.colocation.profile import RATIO_SECOND_TO_UNITS, JobProfile

#: Tabrizian §4.2.4 (Fig. 4.12): co-locate only while the set's ΣC stays at or below this
#: (Eq. 4.3 units, percent·µs over two iterations).
DEFAULT_THRESHOLD = 4e7
#: Co-location slots per GPU: the thesis' largest set (three jobs, Table 4.1).
DEFAULT_SLOTS = 3


@dataclass(frozen=True)
class ColocationModel:
    """The predictor's constants (module docstring).

    Attributes:
        q_sat: mean warp residency (fraction of the SMs' warp slots, time-averaged) at which a
            GPU is saturated for co-location: ``d = c / q_sat``. 0.5: beyond half the warp
            slots, co-resident kernels of CNN training run out of registers and shared memory.
        p_sat: mean DRAM-active ratio at which the memory system is saturated: ``b = m / p_sat``.
        interference: ε, slow-down per unit of co-runners' bandwidth demand below saturation.
    """

    q_sat: float = 0.5
    p_sat: float = 0.5
    interference: float = 0.6

    def __post_init__(self) -> None:
        if not (0 < self.q_sat <= 1 and 0 < self.p_sat <= 1):
            raise ValueError("q_sat and p_sat must be in (0, 1]")
        if not 0 <= self.interference < 100:
            raise ValueError("interference must be in [0, 100)")


DEFAULT_MODEL = ColocationModel()


def kernel_occupancy(kernels: Sequence[tuple[float, float]]) -> float:
    """Tabrizian **Eq. 4.3**: ``C = Σ_i q_i · t_i`` over a job's kernels.

    Args:
        kernels: ``(q_i, t_i)`` per kernel launch of the profiled window (two iterations):
            achieved occupancy in percent and duration in µs (Nsight Compute's
            ``sm__warps_active.avg.pct_of_peak_sustained_active`` and ``gpu__time_duration``).

    Returns:
        C in percent·µs.

    Raises:
        ValueError: a negative value or an occupancy above 100 %.
    """
    return _weighted(kernels, "occupancy")


def memory_bandwidth_utilization(kernels: Sequence[tuple[float, float]]) -> float:
    """Tabrizian **Eq. 4.2**: ``M = Σ_i p_i · t_i`` over a job's kernels.

    Args:
        kernels: ``(p_i, t_i)`` per kernel launch: percent of peak DRAM bandwidth and
            duration in µs.

    Returns:
        M in percent·µs.

    Raises:
        ValueError: a negative value or a utilisation above 100 %.
    """
    return _weighted(kernels, "bandwidth utilisation")


def _weighted(kernels: Sequence[tuple[float, float]], what: str) -> float:
    total = 0.0
    for share, duration in kernels:
        if not 0.0 <= share <= 100.0:
            raise ValueError(f"kernel {what} must be a percentage in [0, 100], got {share}")
        if duration < 0:
            raise ValueError(f"kernel duration must be >= 0 us, got {duration}")
        total += share * duration
    return total


def occupancy_ratio(profile: JobProfile) -> float:
    """``c_j``: the job's time-averaged warp residency (0–1) from C (Eq. 4.3) and ``t_j``.

    ``c = C / (100 · W · t · 10⁶)`` with W = 2 iterations; capped at 1 (a profile claiming
    more than full residency is read as full).
    """
    return min(1.0, profile.kernel_occupancy / (RATIO_SECOND_TO_UNITS * profile.iteration_s))


def bandwidth_ratio(profile: JobProfile) -> float:
    """``m_j``: the job's time-averaged DRAM-active ratio (0–1) from M (Eq. 4.2) and ``t_j``."""
    return min(1.0, profile.mem_bandwidth_util / (RATIO_SECOND_TO_UNITS * profile.iteration_s))


def compute_demand(profile: JobProfile, model: ColocationModel = DEFAULT_MODEL) -> float:
    """``d_j = min(1, c_j / q_sat)``: share of the GPU's usable warp residency (0–1)."""
    return min(1.0, occupancy_ratio(profile) / model.q_sat)


def bandwidth_demand(profile: JobProfile, model: ColocationModel = DEFAULT_MODEL) -> float:
    """``b_j = min(1, m_j / p_sat)``: share of the GPU's usable DRAM bandwidth (0–1)."""
    return min(1.0, bandwidth_ratio(profile) / model.p_sat)


def load(profiles: Sequence[JobProfile], model: ColocationModel = DEFAULT_MODEL) -> float:
    """``ρ_S = max(Σ d_k, Σ b_k)``: how many GPUs' worth of the scarcer resource S asks for."""
    return max(sum(compute_demand(p, model) for p in profiles),
               sum(bandwidth_demand(p, model) for p in profiles))


def slowdowns(profiles: Sequence[JobProfile],
              model: ColocationModel = DEFAULT_MODEL) -> tuple[float, ...]:
    """Each job's slow-down ``s_{j,S} = t'_{j,S} / t_j`` (≥ 1) in the set ``profiles``.

    Args:
        profiles: the jobs sharing one GPU (order kept in the result); empty → ``()``.
        model: the predictor's constants.

    Returns:
        One factor per job: ``max(1, ρ_S, 1 + ε · Σ_{k≠j} b_k)`` (module docstring).
    """
    if not profiles:
        return ()
    if len(profiles) == 1:
        return (1.0,)
    bw = [bandwidth_demand(p, model) for p in profiles]
    rho = max(sum(compute_demand(p, model) for p in profiles), sum(bw))
    total_bw = sum(bw)
    return tuple(
        max(1.0, rho, 1.0 + model.interference * (total_bw - b)) for b in bw
    )


def colocated_times(profiles: Sequence[JobProfile],
                    model: ColocationModel = DEFAULT_MODEL) -> tuple[float, ...]:
    """``t'_{j,S}`` (seconds) of each job in the set: ``t_j · s_{j,S}``."""
    return tuple(p.iteration_s * s for p, s in zip(profiles, slowdowns(profiles, model),
                                                    strict=True))


def speedup(solo_s: Sequence[float], colocated_s: Sequence[float]) -> float:
    """Tabrizian **Eq. 4.1**: ``δ = Σ_j t_j / max_j t'_{j,S}``.

    Args:
        solo_s: each job's solo iteration time ``t_j``, seconds.
        colocated_s: each job's iteration time in the set, ``t'_{j,S}``, seconds (same order).

    Raises:
        ValueError: empty or mismatched inputs, or a non-positive time.
    """
    if not solo_s or len(solo_s) != len(colocated_s):
        raise ValueError("δ needs one solo and one co-located time per job")
    if min(solo_s) <= 0 or min(colocated_s) <= 0:
        raise ValueError("iteration times must be positive")
    return sum(solo_s) / max(colocated_s)


def sum_occupancy(profiles: Sequence[JobProfile]) -> float:
    """``ΣC`` of a set (Eq. 4.3 units) — the quantity §4.2.4's threshold bounds."""
    return sum(p.kernel_occupancy for p in profiles)


def sum_bandwidth(profiles: Sequence[JobProfile]) -> float:
    """``ΣM`` of a set (Eq. 4.2 units)."""
    return sum(p.mem_bandwidth_util for p in profiles)


@dataclass(frozen=True)
class Prediction:
    """What the model predicts for a set of jobs on one GPU.

    Attributes:
        slowdowns: ``s_{j,S}`` per job (same order as the input).
        colocated_s: ``t'_{j,S}`` per job, seconds.
        delta: Eq. 4.1's δ (1.0 for a single job).
        sum_c: ΣC (Eq. 4.3 units).
        sum_m: ΣM (Eq. 4.2 units).
        load: ρ_S (GPUs' worth of the scarcer resource asked for).
        throughput: ``Σ_j 1 / s_{j,S}`` — solo-speed GPUs' worth of progress the set makes
            (1.0 for one job; n for n jobs that do not slow each other).
    """

    slowdowns: tuple[float, ...]
    colocated_s: tuple[float, ...]
    delta: float
    sum_c: float
    sum_m: float
    load: float
    throughput: float


def predict(profiles: Sequence[JobProfile],
            model: ColocationModel = DEFAULT_MODEL) -> Prediction:
    """Slow-downs, δ (Eq. 4.1), ΣC and ΣM of the set ``profiles``.

    Raises:
        ValueError: an empty set.
    """
    if not profiles:
        raise ValueError("a co-located set needs at least one job")
    s = slowdowns(profiles, model)
    times = tuple(p.iteration_s * x for p, x in zip(profiles, s, strict=True))
    return Prediction(
        slowdowns=s,
        colocated_s=times,
        delta=speedup([p.iteration_s for p in profiles], times),
        sum_c=sum_occupancy(profiles),
        sum_m=sum_bandwidth(profiles),
        load=load(profiles, model),
        throughput=sum(1.0 / x for x in s),
    )
