"""The time budget: decisions not ready in time are provisional (filter passes on capacity,
prioritize scores 0), the workers finish them, and later answers are exact."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler_extender.metrics import Metrics
from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs
from scheduler_extender.state import MemoryState
from scheduler_extender.verbs import Extender
from tests.scheduler_extender.helpers import POLICY, gpu_pod, names_args
from topology import catalog
from topology.policies.base import NodeState

BIG = "mapa-cubemesh-16" if "mapa-cubemesh-16" in catalog.names() else "dgx1-v100"
NODES = [f"big-{i}" for i in range(6)]


def cluster() -> MemoryState:
    state = MemoryState({n: catalog.get(BIG) for n in NODES})
    # different unusable GPUs per node: six groups, none cached
    for i, n in enumerate(NODES):
        state.book.set_unhealthy(n, range(i))
    return state


@pytest.fixture(params=[0, 1], ids=["inline", "worker"])
def budgeted(request: pytest.FixtureRequest) -> Iterator[tuple[Extender, MemoryState]]:
    state = cluster()
    # nothing is ever on time
    ext = Extender(state, POLICY, Metrics(), budget_ms=0.001, workers=request.param)
    yield ext, state
    ext.close()


def wait_idle(ext: Extender) -> None:
    assert ext.decider.workers is not None
    deadline = time.monotonic() + 60
    while ext.decider.workers.backlog():
        if time.monotonic() > deadline:
            pytest.fail("evaluator did not drain")
        time.sleep(0.02)


def test_provisional_then_exact(budgeted: tuple[Extender, MemoryState]) -> None:
    ext, state = budgeted
    if ext.decider.workers is None:
        pytest.skip("only workers finish decisions after the deadline")
    pod = gpu_pod("p", 3, annotations={"gputopo.io/pattern": "ring"})
    args = ExtenderArgs.model_validate(names_args(pod, [*NODES, "ghost"]))
    first = ext.filter(args)
    # capacity decides at once (exact): every real node has room, the unknown one fails
    assert first["NodeNames"] == NODES
    assert "ghost" in first["FailedAndUnresolvableNodes"]
    prios = ext.prioritize(ExtenderArgs.model_validate(names_args(pod, NODES)))
    assert len(prios) == len(NODES) and all(0 <= p["Score"] <= 10 for p in prios)
    assert ext.metrics is not None and ext.metrics.provisional._value.get() > 0
    wait_idle(ext)
    # the workers finished: now the answers equal an unbudgeted extender's
    exact = Extender(state, POLICY)
    later = ext.prioritize(ExtenderArgs.model_validate(names_args(pod, NODES)))
    reference = exact.prioritize(ExtenderArgs.model_validate(names_args(pod, NODES)))
    assert later == reference
    assert any(p["Score"] > 0 for p in later)


def test_provisional_without_workers_and_exact_with_time() -> None:
    state = cluster()
    pod = gpu_pod("p", 3, annotations={"gputopo.io/pattern": "ring"})
    hurried = Extender(state, POLICY, Metrics(), budget_ms=0.001, workers=0)
    assert hurried.filter(ExtenderArgs.model_validate(names_args(pod, NODES)))["NodeNames"] == NODES
    prios = hurried.prioritize(ExtenderArgs.model_validate(names_args(pod, NODES)))
    assert [p["Score"] for p in prios] == [0] * len(NODES)  # all provisional
    assert hurried.metrics is not None and hurried.metrics.provisional._value.get() > 0
    # with time to spare the same inline path is exact
    patient = Extender(state, POLICY, Metrics(), budget_ms=60_000, workers=0)
    patient.filter(ExtenderArgs.model_validate(names_args(pod, NODES)))
    got = patient.prioritize(ExtenderArgs.model_validate(names_args(pod, NODES)))
    want = Extender(state, POLICY).prioritize(ExtenderArgs.model_validate(names_args(pod, NODES)))
    assert got == want and any(p["Score"] > 0 for p in got)


def test_capacity_failures_are_exact_even_without_budget(
    budgeted: tuple[Extender, MemoryState],
) -> None:
    ext, _ = budgeted
    size = catalog.get(BIG).size
    pod = gpu_pod("wide", size - 2)
    res = ext.filter(ExtenderArgs.model_validate(names_args(pod, NODES)))
    # nodes with more than 2 unhealthy GPUs cannot host size-2 GPUs: said at once, exactly
    assert res["NodeNames"] == NODES[:3]
    assert res["FailedNodes"] == {
        n: f"only {size - i} of {size} GPUs free; the pod asks for {size - 2}"
        for i, n in enumerate(NODES) if i >= 3
    }


def test_bind_is_always_exact(budgeted: tuple[Extender, MemoryState]) -> None:
    ext, state = budgeted
    pod = gpu_pod("b", 2)
    ext.filter(ExtenderArgs.model_validate(names_args(pod, NODES)))
    res = ext.bind(ExtenderBindingArgs(PodName="b", PodNamespace="default", PodUID="uid-b",
                                       Node=NODES[0]))
    assert res == {"Error": ""}
    held = state.allocations()
    assert len(held) == 1 and len(held[0].gpus) == 2
    assert state.node_state(NODES[0]) != NodeState()


_CHILD = """
import sys, time
from scheduler_extender.verbs import Extender
from scheduler_extender.state import MemoryState
ext = Extender(MemoryState.from_spec("dgx1-v100:1"), "baseline", budget_ms=5, workers=1)
ext.decider.workers.start()
deadline = time.monotonic() + 60
while not ext.decider.workers._pool._processes and time.monotonic() < deadline:
    time.sleep(0.05)
print(" ".join(str(p) for p in ext.decider.workers._pool._processes), flush=True)
time.sleep(600)
"""


def test_workers_exit_when_the_extender_is_killed() -> None:
    """A SIGKILLed extender must not leave its worker processes behind."""
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True,
                            cwd=str(Path(__file__).resolve().parents[2]))
    try:
        assert proc.stdout is not None
        workers = [int(p) for p in proc.stdout.readline().split()]
        assert workers
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purpose
            return f.read().split()[2] != "Z"

    deadline = time.monotonic() + 20
    while any(alive(p) for p in workers):
        if time.monotonic() > deadline:
            pytest.fail(f"worker processes {workers} outlived their killed parent")
        time.sleep(0.1)


def test_an_ample_budget_decides_every_node_of_one_shape_inline() -> None:
    """Without workers, the request thread decides what its cost model says fits the time
    left. Five 16-GPU nodes with one unusable GPU each (a different one): five groups of one
    shape (same class, same number of busy GPUs), so after the first the model has a measured
    estimate — milliseconds, far inside a 60 s budget — and filter decides the other three
    of its four too: nothing provisional, the scores an unbudgeted extender gives."""
    names = [f"one-down-{i}" for i in range(5)]
    state = MemoryState({n: catalog.get(BIG) for n in names})
    for i, n in enumerate(names):
        state.book.set_unhealthy(n, [i])
    pod = gpu_pod("p", 3, annotations={"gputopo.io/pattern": "ring"})
    patient = Extender(state, POLICY, Metrics(), budget_ms=60_000, workers=0)
    patient.filter(ExtenderArgs.model_validate(names_args(pod, names[:4])))
    assert patient.metrics is not None and patient.metrics.provisional._value.get() == 0
    # prioritize learns nothing itself, but it uses what filter measured: the fifth node,
    # which filter never saw, is of a measured shape and is decided too
    got = patient.prioritize(ExtenderArgs.model_validate(names_args(pod, names)))
    want = Extender(state, POLICY).prioritize(ExtenderArgs.model_validate(names_args(pod, names)))
    assert got == want and all(p["Score"] > 0 for p in got)
    assert patient.metrics.provisional._value.get() == 0
