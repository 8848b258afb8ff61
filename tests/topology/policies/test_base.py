"""The policies' shared types: a decision's JSON form (what ``gputopo place --json`` and the
extender's explanation show) and the request validation that guards every policy.

Added in the fourth mutation round (docs/testing.md): mutmut showed that a key renamed, a
field dropped or a rounding changed in ``Decision.to_json`` went unnoticed, as did a fraction
of 1.0 accepted as a share or a threshold below 1 refused."""

from __future__ import annotations

import pytest

from topology import catalog
from topology.colocation.profile import JobProfile
from topology.patterns import all_to_all, ring
from topology.policies.base import (
    MAX_UPCOMING,
    Candidate,
    Colocation,
    Decision,
    GPUUsage,
    NodeState,
    Request,
    RequestError,
    Resident,
    SetPrediction,
    SharedRequest,
    Upcoming,
)
from topology.policies.evaluate import Evaluator
from topology.policies.memo import Memo
from topology.policies.registry import get_policy

DGX = catalog.get("dgx1-v100")
PROFILE = JobProfile(0.25, 12_345_678.9, 2_345_678.4, 3000, key="resnet18:64", source="catalog")


def decision(**kw: object) -> Decision:
    base: dict[str, object] = dict(
        policy="p", gpus=(1, 3), uuids=("GPU-a", "GPU-b"), mapping=(3, 1),
        aggregated_bandwidth_gbps=48.26, pattern_bandwidth_gbps=24.149,
        effective_bandwidth_gbps=21.931, bandwidth_model="gputopo-v1",
        preserved_bandwidth_gbps=150.34, access_cost=0.75, cpu_affinity="0-19,40-59",
        numa_nodes=(0,), reason="why",
    )
    base.update(kw)
    return Decision(**base)  # type: ignore[arg-type]


def test_whole_decision_json_rounds_bandwidths_to_a_tenth() -> None:
    """Every field, bandwidths to 0.1 GB/s (the docstring's contract); no share fields."""
    d = decision(runner_up=Candidate((0, 2), 36.44, 18.94, 99.94))
    assert d.to_json() == {
        "policy": "p", "gpus": [1, 3], "uuids": ["GPU-a", "GPU-b"], "mapping": [3, 1],
        "aggregated_bandwidth_gbps": 48.3, "pattern_bandwidth_gbps": 24.1,
        "effective_bandwidth_gbps": 21.9, "bandwidth_model": "gputopo-v1",
        "preserved_bandwidth_gbps": 150.3, "access_cost": 0.75,
        "cpu_affinity": "0-19,40-59", "numa_nodes": [0], "fractional": False,
        "reason": "why",
        "runner_up": {"gpus": [0, 2], "aggregated_bandwidth_gbps": 36.4,
                      "effective_bandwidth_gbps": 18.9, "preserved_bandwidth_gbps": 99.9},
    }


def test_share_decision_json_has_its_core_and_memory_and_no_runner_up() -> None:
    d = decision(gpus=(2,), uuids=("GPU-c",), mapping=(2,), fractional=True,
                 core_percent=30, memory_mib=4096)
    doc = d.to_json()
    assert doc["fractional"] is True
    assert (doc["core_percent"], doc["memory_mib"]) == (30, 4096)
    assert doc["runner_up"] is None and "colocation" not in doc


def test_colocation_json() -> None:
    """The co-location explanation: ΣC to a whole unit, δ, slow-downs and gain to 0.001."""
    chosen = SetPrediction(gpu=2, residents=("a (vgg11:64)",), sum_c_before=1_000_000.4,
                           sum_c=13_345_678.6, delta=1.23456, slowdowns=(1.11111, 1.23456),
                           throughput_gain=0.65432, free_memory_mib=9000)
    other = SetPrediction(gpu=5, residents=(), sum_c_before=0.0, sum_c=12_345_678.9,
                          delta=1.0, slowdowns=(1.0,), throughput_gain=1.0,
                          free_memory_mib=13160)
    col = Colocation(job="ml/p", profile=PROFILE, memory_mib=3000, chosen=chosen,
                     threshold=4e7, slots=3, runner_up=other, rank=(1.0,))
    doc = decision(colocation=col).to_json()["colocation"]
    assert doc == {
        "job": "ml/p", "profile": "resnet18:64", "profile_source": "catalog",
        "kernel_occupancy": 12_345_679, "mem_bandwidth_util": 2_345_678,
        "iteration_s": 0.25, "memory_mib": 3000, "threshold": 4e7, "slots": 3,
        "chosen": {"gpu": 2, "residents": ["a (vgg11:64)"], "sum_c_before": 1_000_000,
                   "sum_c": 13_345_679, "delta": 1.235, "slowdowns": [1.111, 1.235],
                   "throughput_gain": 0.654, "free_memory_mib": 9000},
        "runner_up": {"gpu": 5, "residents": [], "sum_c_before": 0, "sum_c": 12_345_679,
                      "delta": 1.0, "slowdowns": [1.0], "throughput_gain": 1.0,
                      "free_memory_mib": 13160},
    }
    assert Colocation(job="j", profile=PROFILE, memory_mib=0, chosen=chosen, threshold=1.0,
                      slots=1).to_json()["runner_up"] is None


@pytest.mark.parametrize(("gpus", "core"), [(0.3, 30), (0.004, 1), (0.006, 1), (0.994, 99),
                                            (0.5, 50)])
def test_fraction_to_core_percent(gpus: float, core: int) -> None:
    """A fraction becomes whole percent of the GPU's compute, at least 1 %."""
    r = Request.fraction(gpus, 512)
    assert (r.count, r.core_percent, r.memory_mib) == (0, core, 512)


@pytest.mark.parametrize("gpus", [0.0, 1.0, 1.5, -0.2])
def test_fraction_outside_zero_one_is_refused(gpus: float) -> None:
    with pytest.raises(RequestError, match=r"\(0, 1\)"):
        Request.fraction(gpus)


def test_shared_request_threshold_and_memory_bounds() -> None:
    """Any positive ΣC threshold is valid (a fraction of one included); 0, a negative one or
    negative memory is refused with its reason."""
    assert SharedRequest(PROFILE, 0, threshold=0.5).threshold == 0.5
    assert SharedRequest(PROFILE, 0, threshold=1e-3).memory_mib == 0
    for bad in (0.0, -1.0):
        with pytest.raises(RequestError, match="threshold"):
            SharedRequest(PROFILE, 0, threshold=bad)
    with pytest.raises(RequestError, match="memory must be >= 0 MiB"):
        SharedRequest(PROFILE, -1)


# ------------------------------------------------------------------ seventh mutation round
def test_cached_decisions_tell_patterns_apart() -> None:
    """``Request.key`` keys the decision cache: a 4-GPU ring asked after a 4-GPU all-to-all
    on the same idle DGX-1 gets its own decision (the ring's 4 edges: 175 GB/s of pattern
    bandwidth on quad 0-3, against the all-to-all's 6 edges, 225), not the cached one."""
    ev = Evaluator()
    a2a = ev.place("gputopo", DGX, NodeState(), Request(count=4))
    ring4 = ev.place("gputopo", DGX, NodeState(), Request(count=4, pattern=ring(4)))
    assert (a2a.pattern_bandwidth_gbps, ring4.pattern_bandwidth_gbps) == (225.0, 175.0)
    assert ring4 == get_policy("gputopo").fn(DGX, NodeState(), Request(count=4, pattern=ring(4)),
                                             Memo())


def test_cached_decisions_tell_states_with_shared_gpus_apart() -> None:
    """``NodeState.key`` keys the decision cache of co-location requests: with GPU 0 shared
    in both states, a state where GPUs 1-7 are held whole and one where they are idle are
    different states. Algorithm 2 joins GPU 0 in the first and opens idle GPU 1 in the
    second — the second answer is not the first one's cached."""
    prof = JobProfile(0.1, 0.1 * 2e8 * 0.1, 0.01 * 2e8 * 0.1, 1000)
    resident = (Resident("ml/a", prof, 1000),)
    shared = Request(count=1, shared=SharedRequest(prof, 1000, name="ml/b"))
    crowded = NodeState({0: GPUUsage(residents=resident),
                         **{g: GPUUsage(100, 0) for g in range(1, 8)}})
    roomy = NodeState({0: GPUUsage(residents=resident)})
    ev = Evaluator()
    assert ev.place("colocate", DGX, crowded, shared).gpus == (0,)
    assert ev.place("colocate", DGX, roomy, shared).gpus == (1,)


@pytest.mark.parametrize(("core", "mib"), [(101, 0), (-1, 1024), (50, -1), (0, -1)])
def test_a_share_out_of_bounds_on_either_axis_is_refused(core: int, mib: int) -> None:
    """A share needs 0-100 % vGPU-core *and* memory ≥ 0: either one out of bounds alone is
    refused (the other within bounds); a share of nothing is refused with its own reason."""
    with pytest.raises(RequestError, match="0-100 vGPU-core and memory >= 0"):
        Request(0, core_percent=core, memory_mib=mib)
    assert Request(0, core_percent=100, memory_mib=0).fractional
    with pytest.raises(RequestError, match="asks for no GPU at all"):
        Request(0)


def test_a_pattern_must_match_the_gpu_count_even_for_one_gpu() -> None:
    """A pattern's size must equal the GPU count for every whole request, a 1-GPU request
    included; a co-location slot is one GPU with no vGPU share, refused with that reason."""
    with pytest.raises(RequestError, match="has 2 GPUs but the request asks for 1"):
        Request(count=1, pattern=all_to_all(2))
    assert Request(count=1, pattern=all_to_all(1)).count == 1
    assert Request(count=0, core_percent=30, pattern=all_to_all(2)).fractional
    with pytest.raises(RequestError, match="co-location slot is one GPU"):
        Request(count=2, shared=SharedRequest(PROFILE, 0))


def test_with_queue_is_replace_of_the_queue() -> None:
    """``Request.with_queue`` gives what ``dataclasses.replace`` gives (every other field
    kept, equal and with an equal key) and refuses a queue longer than the lookahead takes."""
    from dataclasses import replace

    req = Request(4, pattern=ring(4), bandwidth_sensitive=True, min_utility=0.5,
                  profile="alexnet/tiny", upcoming=(Upcoming(2, ring(2)),))
    queue = (Upcoming(3, ring(3)), Upcoming(1))
    for wait in (False, True):
        got = req.with_queue(queue, wait)
        want = replace(req, upcoming=queue, wait_for_better=wait)
        assert got == want and got.key() == want.key() and hash(got) == hash(want)
        assert vars(got) == vars(want)
    assert req.with_queue((), False) == replace(req, upcoming=())
    with pytest.raises(RequestError, match="upcoming jobs"):
        req.with_queue((Upcoming(1),) * (MAX_UPCOMING + 1), False)
