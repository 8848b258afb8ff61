"""Filter/prioritize decide once per group of equal nodes: by free-GPU mask for whole-GPU
requests to ``free_set_only`` policies, by full state otherwise (shares read the usage)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler_extender.metrics import Metrics
from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs
from scheduler_extender.state import MemoryState, PodRef
from scheduler_extender.verbs import Extender
from tests.scheduler_extender.helpers import gpu_pod, names_args
from topology import catalog
from topology.patterns import ring
from topology.policies.base import NodeState, Request
from topology.policies.evaluate import Evaluator

#: This module's own evaluator (decision cache and policy memo; nothing shared).
place = Evaluator().place

DGX = catalog.get("dgx1-v100")
NODES = ["sick", "shared"]


@pytest.fixture
def cluster() -> Iterator[tuple[Extender, MemoryState, list[int]]]:
    """GPU 0 is unavailable on both nodes: unhealthy on one, half used by a share on the
    other. Equal free masks, different states."""
    state = MemoryState({n: DGX for n in NODES})
    state.book.set_unhealthy("sick", [0])
    share = place("baseline", DGX, NodeState(), Request.fraction(0.5, memory_mib=1024))
    assert share.gpus == (0,)
    state.reserve("holder", "shared", share, pod=PodRef("default", "holder", "holder"))
    ext = Extender(state, "gputopo", Metrics())
    computed: list[int] = []
    real = ext.decider._compute

    def counting(*a, **kw):  # type: ignore[no-untyped-def]
        computed.append(1)
        return real(*a, **kw)

    ext.decider._compute = counting  # type: ignore[method-assign]
    yield ext, state, computed
    ext.close()


def test_whole_gpu_request_is_decided_once_for_nodes_with_equal_free_gpus(
    cluster: tuple[Extender, MemoryState, list[int]],
) -> None:
    ext, state, computed = cluster
    pod = gpu_pod("ring", 4, annotations={"gputopo.io/pattern": "ring"})
    args = ExtenderArgs.model_validate(names_args(pod, NODES))
    assert ext.filter(args)["NodeNames"] == NODES
    scores = {h["Host"]: h["Score"] for h in ext.prioritize(args)}
    assert len(computed) == 1  # one decision serves both nodes
    assert scores["sick"] == scores["shared"] > 0
    # and it is the decision the policy makes on each node's own state
    request = Request(4, pattern=ring(4))
    want = place("gputopo", DGX, NodeState.whole([0]), request)
    for node in NODES:
        assert place("gputopo", DGX, state.node_state(node), request).gpus == want.gpus
    res = ext.bind(ExtenderBindingArgs(PodName="ring", PodNamespace="default",
                                       PodUID="uid-ring", Node="shared"))
    assert res == {"Error": ""}
    assert state.allocation("uid-ring").gpus == want.gpus  # type: ignore[union-attr]


def test_shares_still_tell_the_nodes_apart(
    cluster: tuple[Extender, MemoryState, list[int]],
) -> None:
    ext, _state, computed = cluster
    res = {"limits": {"gputopo.io/vgpu-core": "25", "gputopo.io/vgpu-memory": "4"}}
    pod = gpu_pod("frac", resources=res)
    args = ExtenderArgs.model_validate(names_args(pod, NODES))
    assert ext.filter(args)["NodeNames"] == NODES
    scores = {h["Host"]: h["Score"] for h in ext.prioritize(args)}
    assert len(computed) == 2  # the usage matters: one decision per node
    # Gaia Fragment: the half-used GPU on "shared" is the better fit
    assert scores["shared"] > scores["sick"]

