"""Prioritize answers from the same pod's filter (issue 24, the lookahead's latency): the
homes, the split of the candidates and every decision are made once per scheduling cycle, and
made again whenever something filter read has changed since (a bind, a pod ending, the queue,
the candidates, a node's settings)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler_extender.decision import Decider
from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs
from scheduler_extender.state import MemoryState
from scheduler_extender.verbs import Extender
from tests.scheduler_extender.helpers import gpu_pod, names_args
from tests.scheduler_extender.test_extender_lookahead import RING, waiting
from topology import catalog
from topology.numa_alignment import KubeletConfig

NODES = ("n1", "n2", "n3", "n4")


def cluster(pending: bool = True) -> tuple[MemoryState, Extender]:
    """Four DGX-1 nodes: n1 idle, n2 full, n3 and n4 with 6 GPUs taken; a sensitive 3-GPU
    ring pending, whose one home is n1 (the only node with 3 free GPUs): a pod there weighs
    it, on n3 and n4 not."""
    st = MemoryState({n: catalog.get("dgx1-v100") for n in NODES})
    ext = Extender(st, "gputopo")
    for name, node, gpus in (("full", "n2", 8), ("six", "n3", 6), ("six-too", "n4", 6)):
        place(ext, gpu_pod(name, gpus), node)
    if pending:
        st.pending.observe(waiting("three", 3))
    return st, ext


def place(ext: Extender, pod: dict[str, Any], node: str) -> None:
    ext.filter(ExtenderArgs.model_validate(names_args(pod, [node])))
    meta = pod["metadata"]
    assert ext.bind(ExtenderBindingArgs(PodName=meta["name"], PodNamespace="default",
                                        PodUID=meta["uid"], Node=node)) == {"Error": ""}


def passed(ext: Extender, pod: dict[str, Any], nodes: tuple[str, ...] = NODES) -> list[str]:
    names = ext.filter(ExtenderArgs.model_validate(names_args(pod, nodes)))["NodeNames"]
    assert isinstance(names, list)
    return names


def scores(ext: Extender, pod: dict[str, Any], nodes: list[str]) -> dict[str, int]:
    reply = ext.prioritize(ExtenderArgs.model_validate(names_args(pod, nodes)))
    return {r["Host"]: r["Score"] for r in reply}


@pytest.fixture
def decided(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the decision layer decided candidates (``Decider._grouped`` calls)."""
    calls = [0]
    real: Callable[..., Any] = Decider._grouped

    def counted(self: Decider, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Decider, "_grouped", counted)
    return calls


@pytest.mark.parametrize("pending", [True, False])
def test_prioritize_answers_from_filter_when_nothing_changed(
    decided: list[int], pending: bool,
) -> None:
    """Filter then prioritize of one pod on an unchanged state: prioritize decides nothing
    again, and its scores are those of a prioritize with no filter before it."""
    st, ext = cluster(pending)
    pod = gpu_pod("two", 2, annotations=RING)
    feasible = passed(ext, pod)
    assert feasible == ["n1", "n3", "n4"]
    parts = ext.decider._asked.get(("uid-two", "parts"))
    assert parts == ({"n1": st.pending.upcoming()} if pending else None)
    before = decided[0]
    got = scores(ext, pod, feasible)
    assert decided[0] == before  # filter's answer served prioritize
    _, fresh = cluster(pending)
    assert got == scores(fresh, pod, feasible)
    assert decided[0] > before  # the fresh extender had no filter answer to reuse


def test_prioritize_decides_again_after_a_bind(decided: list[int]) -> None:
    """A pod bound between filter and prioritize (kube-scheduler's bind of an earlier pod,
    another replica's bind seen through the watch): prioritize decides again on the new
    state. n3, which filter passed, is now full and scores 0."""
    st, ext = cluster()
    pod = gpu_pod("two", 2, annotations=RING)
    feasible = passed(ext, pod)
    place(ext, gpu_pod("last-two", 2), "n3")
    before = decided[0]
    got = scores(ext, pod, feasible)
    assert decided[0] > before
    assert got["n3"] == 0
    fresh_state, fresh = cluster()
    place(fresh, gpu_pod("last-two", 2), "n3")
    assert got == scores(fresh, pod, feasible)


def test_prioritize_decides_again_after_a_pod_ends(decided: list[int]) -> None:
    st, ext = cluster()
    pod = gpu_pod("two", 2, annotations=RING)
    feasible = passed(ext, pod)
    assert st.delete_pod("default", "full")
    before = decided[0]
    got = scores(ext, pod, feasible + ["n2"])  # n2 is free now (not filtered: decided)
    assert decided[0] > before
    assert got["n2"] > 0


def test_prioritize_decides_again_when_the_queue_moved(decided: list[int]) -> None:
    """Another pod became pending between filter and prioritize: the waiting jobs differ,
    so the request does."""
    st, ext = cluster()
    pod = gpu_pod("two", 2, annotations=RING)
    feasible = passed(ext, pod)
    st.pending.observe(waiting("four-ring", 4, created="2024-01-01T00:00:01Z"))
    before = decided[0]
    got = scores(ext, pod, feasible)
    assert decided[0] > before
    fresh_state, fresh = cluster()
    fresh_state.pending.observe(waiting("four-ring", 4, created="2024-01-01T00:00:01Z"))
    assert got == scores(fresh, pod, feasible)


def test_prioritize_decides_again_for_nodes_filter_did_not_see(decided: list[int]) -> None:
    _, ext = cluster()
    pod = gpu_pod("two", 2, annotations=RING)
    passed(ext, pod, ("n1", "n3"))
    before = decided[0]
    got = scores(ext, pod, ["n1", "n3", "n4"])
    assert decided[0] > before
    assert set(got) == {"n1", "n3", "n4"} and got["n4"] > 0


def test_prioritize_decides_again_after_a_node_settings_change(decided: list[int]) -> None:
    """A node's kubelet settings changed between filter and prioritize (its view is dropped
    like on any other change a decision reads)."""
    st, ext = cluster()
    pod = gpu_pod("two", 2, annotations=RING)
    feasible = passed(ext, pod)
    st.set_kubelet_config("n1", KubeletConfig(topology_manager_policy="single-numa-node"))
    before = decided[0]
    scores(ext, pod, feasible)
    assert decided[0] > before


def test_a_backend_without_a_change_log_is_never_reused(decided: list[int]) -> None:
    """A state backend that keeps no log of dropped views (``view_changes``) cannot say the
    state is unchanged: prioritize always decides."""
    st, ext = cluster()

    class NoLog:
        def __getattr__(self, name: str) -> Any:
            if name == "view_changes":
                raise AttributeError(name)
            return getattr(st, name)

    ext.decider.state = NoLog()
    pod = gpu_pod("two", 2, annotations=RING)
    feasible = passed(ext, pod)
    before = decided[0]
    scores(ext, pod, feasible)
    assert decided[0] > before
