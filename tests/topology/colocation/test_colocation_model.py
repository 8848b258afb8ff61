"""Tabrizian's equations and gputopo's slow-down predictor against hand-computed values."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology.colocation.model import (
    DEFAULT_MODEL,
    ColocationModel,
    bandwidth_demand,
    compute_demand,
    kernel_occupancy,
    memory_bandwidth_utilization,
    occupancy_ratio,
    predict,
    slowdowns,
    speedup,
    sum_occupancy,
)
from topology.colocation.profile import (
    RATIO_SECOND_TO_UNITS,
    JobProfile,
    ProfileError,
    from_ratios,
)


def prof(t: float, c: float, m: float, mem: int = 1000) -> JobProfile:
    """A profile from time-averaged ratios c, m (C = c · 100 · 2 · t · 10⁶)."""
    return JobProfile(t, c * 2e8 * t, m * 2e8 * t, mem)


A = prof(0.1, 0.1, 0.05)  # C = 2e6, M = 1e6; d = 0.2, b = 0.1
B = prof(0.2, 0.3, 0.2)  # C = 1.2e7, M = 8e6; d = 0.6, b = 0.4


def test_eq_4_1_speedup_hand_computed() -> None:
    # δ = Σ t_j / max t'_{j,S} = (2 + 3) / max(2.5, 4) = 1.25
    assert speedup([2.0, 3.0], [2.5, 4.0]) == pytest.approx(1.25)
    # one job alone: δ = 1
    assert speedup([0.7], [0.7]) == pytest.approx(1.0)
    # fully serialised pair of equal jobs: t' = 2t → δ = 1
    assert speedup([1.0, 1.0], [2.0, 2.0]) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        speedup([], [])
    with pytest.raises(ValueError):
        speedup([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        speedup([0.0, 1.0], [1.0, 1.0])


def test_eq_4_2_and_4_3_weighted_sums() -> None:
    # C = Σ q_i t_i = 50 % · 10 µs + 25 % · 40 µs = 1 500 %·µs
    assert kernel_occupancy([(50.0, 10.0), (25.0, 40.0)]) == pytest.approx(1500.0)
    # M = Σ p_i t_i = 90 % · 2 µs + 10 % · 100 µs = 1 180 %·µs
    assert memory_bandwidth_utilization([(90.0, 2.0), (10.0, 100.0)]) == pytest.approx(1180.0)
    assert kernel_occupancy([]) == 0.0
    with pytest.raises(ValueError):
        kernel_occupancy([(101.0, 1.0)])
    with pytest.raises(ValueError):
        memory_bandwidth_utilization([(10.0, -1.0)])


def test_eq_4_3_window_matches_the_time_average() -> None:
    """C over two iterations of a job whose kernels keep 30 % occupancy for 40 of every
    100 ms equals the time-averaged ratio (0.12) converted with from_ratios."""
    iteration_us = 100_000.0
    kernels = [(30.0, 40_000.0)] * 2  # one 40 ms kernel per iteration, two iterations
    c = kernel_occupancy(kernels)
    p = from_ratios(0.3 * 0.4, 0.0, iteration_us / 1e6, 0)
    assert c == pytest.approx(p.kernel_occupancy)
    assert occupancy_ratio(p) == pytest.approx(0.12)


def test_from_ratios_units() -> None:
    p = from_ratios(0.35, 0.2, 0.05, 1000, key="x:1")
    assert p.kernel_occupancy == pytest.approx(0.35 * 100 * 2 * 0.05 * 1e6)  # 3.5e6
    assert p.mem_bandwidth_util == pytest.approx(2e6)
    assert RATIO_SECOND_TO_UNITS == 2e8
    with pytest.raises(ProfileError):
        from_ratios(1.2, 0.1, 0.05, 0)
    with pytest.raises(ProfileError):
        from_ratios(0.2, 0.1, 0.0, 0)


def test_demands_hand_computed() -> None:
    assert compute_demand(A) == pytest.approx(0.2)  # c 0.1 / q_sat 0.5
    assert bandwidth_demand(A) == pytest.approx(0.1)
    assert compute_demand(B) == pytest.approx(0.6)
    assert bandwidth_demand(B) == pytest.approx(0.4)
    # beyond saturation the demand is one GPU
    assert compute_demand(prof(0.1, 0.9, 0.9)) == 1.0


def test_slowdowns_below_saturation_hand_computed() -> None:
    # Σd = 0.8 < 1, Σb = 0.5: only interference, ε = 0.6 × the co-runner's b
    s_a, s_b = slowdowns([A, B])
    assert s_a == pytest.approx(1 + 0.6 * 0.4)  # 1.24
    assert s_b == pytest.approx(1 + 0.6 * 0.1)  # 1.06
    p = predict([A, B])
    assert p.colocated_s == pytest.approx((0.124, 0.212))
    assert p.delta == pytest.approx(0.3 / 0.212)  # 1.415
    assert p.sum_c == pytest.approx(2e6 + 1.2e7)
    assert p.load == pytest.approx(0.8)
    assert p.throughput == pytest.approx(1 / 1.24 + 1 / 1.06)


def test_slowdowns_at_saturation_hand_computed() -> None:
    # three B: Σd = 1.8 > 1 → processor sharing 1.8 beats interference 1 + 0.6 · 0.8
    s = slowdowns([B, B, B])
    assert s == pytest.approx((1.8, 1.8, 1.8))
    assert predict([B, B, B]).delta == pytest.approx(0.6 / (0.2 * 1.8))  # 1.667


def test_single_job_is_not_slowed() -> None:
    assert slowdowns([B]) == (1.0,)
    assert predict([B]).delta == 1.0
    assert slowdowns([]) == ()
    with pytest.raises(ValueError):
        predict([])


def test_model_constants_validated() -> None:
    with pytest.raises(ValueError):
        ColocationModel(q_sat=0.0)
    with pytest.raises(ValueError):
        ColocationModel(interference=-1.0)
    gentle = ColocationModel(interference=0.0)
    assert slowdowns([A, B], gentle) == (1.0, 1.0)


def test_sum_occupancy_is_the_thresholded_quantity() -> None:
    assert sum_occupancy([A, B, B]) == pytest.approx(2e6 + 2 * 1.2e7)


profiles = st.builds(
    prof,
    t=st.floats(0.005, 2.0),
    c=st.floats(0.0, 1.0),
    m=st.floats(0.0, 1.0),
)


@given(st.lists(profiles, min_size=1, max_size=4), profiles)
def test_adding_a_job_never_speeds_the_others_up(members: list[JobProfile],
                                                 extra: JobProfile) -> None:
    """Monotonicity: a co-runner never makes a job faster, and every slow-down is ≥ 1."""
    before = slowdowns(members)
    after = slowdowns([*members, extra])
    assert all(x >= 1.0 for x in after)
    for b, a in zip(before, after, strict=False):
        assert a >= b - 1e-12


@given(st.lists(profiles, min_size=1, max_size=4))
def test_delta_bounds(members: list[JobProfile]) -> None:
    """δ ≤ n (no set runs faster than its jobs alone) and δ > 0; δ is order-independent."""
    d = predict(members).delta
    assert 0 < d <= len(members) + 1e-9
    assert predict(list(reversed(members))).delta == pytest.approx(d)
    assert math.isfinite(d)


def test_default_model_is_the_documented_one() -> None:
    assert (DEFAULT_MODEL.q_sat, DEFAULT_MODEL.p_sat, DEFAULT_MODEL.interference) == \
        (0.5, 0.5, 0.6)
