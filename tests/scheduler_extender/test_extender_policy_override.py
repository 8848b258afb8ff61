"""The per-pod ``gputopo.io/policy`` override, through every verb: filter, prioritize and bind
decide with the pod's policy, not the extender's default (and bind without a filter call reads
it from the fetched pod)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from scheduler_extender.kubernetes_state import KubernetesState
from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs
from scheduler_extender.state import MemoryState, PodRef
from scheduler_extender.verbs import Extender
from tests.scheduler_extender.fake_kube import FakeKubeAPI
from tests.scheduler_extender.helpers import bind_args, gpu_pod, names_args
from topology import catalog
from topology.contract import ANN_MIN_UTILITY, ANN_POLICY, ANN_VGPU_MEMORY, parse_assignment
from topology.policies.base import NodeState, Request
from topology.policies.evaluate import Evaluator
from topology.policies.scoring import node_score

DGX = catalog.get("dgx1-v100")
EV = Evaluator()
place = EV.place
DEFAULT = "gputopo"


def occupy(state: MemoryState, node: str, busy: tuple[int, ...]) -> None:
    """Hold ``busy`` GPUs of ``node`` with one pod."""
    d = place("baseline", DGX, NodeState.whole(set(range(8)) - set(busy)), Request(len(busy)))
    assert d.gpus == busy
    ref = PodRef("default", f"holder-{node}", f"uid-holder-{node}")
    state.reserve(ref.key, node, d, pod=ref)


def bound_gpus(state: MemoryState, name: str) -> tuple[tuple[int, ...], str]:
    rec = state.bound_pod("default", name)
    assert rec is not None
    a = parse_assignment(rec.annotations)
    return a.gpu_indices, rec.annotations["gputopo.io/decided-by"]


def test_bind_decides_with_the_pods_policy() -> None:
    """On an idle DGX-1 a 4-GPU all-to-all pod gets an NVLinked quad from the default, but
    MAPA Preserve's published Eq. 2 picks {0,2,5,7} (the trap the README explains)."""
    state = MemoryState({"n0": DGX, "n1": DGX})
    ext = Extender(state, DEFAULT)
    own = gpu_pod("own", 4, annotations={ANN_POLICY: "mapa-preserve"})
    plain = gpu_pod("plain", 4)
    for pod, node in ((own, "n0"), (plain, "n1")):
        ext.filter(ExtenderArgs.model_validate(names_args(pod, [node])))
        assert ext.bind(ExtenderBindingArgs.model_validate(bind_args(pod, node))) == {
            "Error": ""}
    assert bound_gpus(state, "own") == ((0, 2, 5, 7), "mapa-preserve")
    assert bound_gpus(state, "plain") == ((0, 1, 2, 3), DEFAULT)


def test_filter_decides_with_the_pods_policy() -> None:
    """TOPO-AWARE-P refuses a node whose best utility is below the pod's minimum; the default
    policy has no such rule and passes it."""
    state = MemoryState({"busy": DGX, "idle": DGX})
    occupy(state, "busy", (0, 1, 4, 5))
    ext = Extender(state, DEFAULT)
    picky = gpu_pod("picky", 2, annotations={ANN_POLICY: "topo-aware-p", ANN_MIN_UTILITY: "0.95"})
    res = ext.filter(ExtenderArgs.model_validate(names_args(picky, ["busy", "idle"])))
    assert res["NodeNames"] == ["idle"]
    assert res["FailedNodes"] == {"busy": "utility 0.71 below minimum 0.95"}
    plain = gpu_pod("plain", 2, annotations={ANN_MIN_UTILITY: "0.95"})
    res = ext.filter(ExtenderArgs.model_validate(names_args(plain, ["busy", "idle"])))
    assert res["NodeNames"] == ["busy", "idle"]


@pytest.mark.parametrize("policy", ["baseline", "mapa-preserve"])
def test_prioritize_scores_with_the_pods_policy(policy: str) -> None:
    """With GPUs 2, 6, 7 busy the three policies score a 2-GPU pod 10, 8 and 9: each reply
    is the pod's policy's score."""
    state = MemoryState({"n0": DGX})
    busy = (2, 6, 7)
    d = place("baseline", DGX, NodeState.whole(set(range(8)) - set(busy)), Request(3))
    ref = PodRef("default", "holder", "uid-holder")
    state.reserve(ref.key, "n0", d, pod=ref)
    ext = Extender(state, DEFAULT)
    st, req = NodeState.whole(busy), Request(2)
    expected = {p: node_score(p, DGX, st, req, place(p, DGX, st, req), evaluator=EV).score
                for p in (DEFAULT, policy)}
    assert expected[DEFAULT] != expected[policy]
    for pod, want in ((gpu_pod("own", 2, annotations={ANN_POLICY: policy}), expected[policy]),
                      (gpu_pod("plain", 2), expected[DEFAULT])):
        reply = ext.prioritize(ExtenderArgs.model_validate(names_args(pod, ["n0"])))
        assert reply == [{"Host": "n0", "Score": want}]


@pytest.fixture
def kube() -> Iterator[tuple[FakeKubeAPI, KubernetesState]]:
    api = FakeKubeAPI()
    api.add_node("n0", DGX)
    state = KubernetesState(api, watch_timeout_s=1)
    state.start()
    yield api, state
    api.close()
    state.stop()


def test_bind_without_filter_reads_the_policy_from_the_pod(
    kube: tuple[FakeKubeAPI, KubernetesState],
) -> None:
    """An extender restarted between filter and bind fetches the pod: its policy still
    decides."""
    api, state = kube
    api.add_pod("late", "u-late", gpus=4, annotations={ANN_POLICY: "mapa-preserve"})
    ext = Extender(state, DEFAULT)
    res = ext.bind(ExtenderBindingArgs(PodName="late", PodNamespace="default", PodUID="u-late",
                                       Node="n0"))
    assert res == {"Error": ""}
    ann = api.pods["u-late"]["metadata"]["annotations"]
    assert parse_assignment(ann).gpu_indices == (0, 2, 5, 7)
    assert ann["gputopo.io/decided-by"] == "mapa-preserve"


class _FetchingState(MemoryState):
    """The memory backend with pods to fetch, as the API backend has; counts fetches."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        super().__init__({"n0": DGX})
        self.pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}
        self.fetched: list[str] = []

    def fetch_pod(self, namespace: str, name: str) -> Mapping[str, object] | None:
        self.fetched.append(f"{namespace}/{name}")
        return self.pods.get(f"{namespace}/{name}")


def test_bind_prepare_leaves_the_fetch_of_an_unfiltered_pod_to_bind() -> None:
    """The first half of a bind runs on the extender's event loop and makes no API call: a
    pod no filter call was seen for is left to :meth:`Extender.bind` (a bind thread), which
    fetches it once and reads its policy."""
    pod = gpu_pod("late", 4, annotations={ANN_POLICY: "mapa-preserve"})
    state = _FetchingState([pod])
    ext = Extender(state, DEFAULT)
    args = ExtenderBindingArgs.model_validate(bind_args(pod, "n0"))
    assert ext.bind_prepare(args) is None
    assert state.fetched == [] and state.allocation("uid-late") is None
    assert ext.bind(args) == {"Error": ""}
    assert state.fetched == ["default/late"]
    assert bound_gpus(state, "late") == ((0, 2, 5, 7), "mapa-preserve")


@pytest.mark.parametrize("form", ["names", "nodes"])
def test_an_invalid_pod_scores_zero_on_every_named_node(form: str) -> None:
    """prioritize answers a pod it cannot parse with 0 for every node it was given, in either
    request form (a Node without a name, or without usable metadata, is left out), so
    kube-scheduler still gets a reply."""
    ext = Extender(MemoryState({"n0": DGX, "n1": DGX}), DEFAULT)
    bad = gpu_pod("bad", "lots")
    if form == "names":
        args = names_args(bad, ["n0", "n1"])
    else:
        items = [{"metadata": {"name": "n0"}}, {"metadata": {}}, {"metadata": "n2"},
                 {"metadata": {"name": "n1"}}]
        args = {"Pod": bad, "Nodes": {"items": items}, "NodeNames": None}
    reply = ext.prioritize(ExtenderArgs.model_validate(args))
    assert reply == [{"Host": "n0", "Score": 0}, {"Host": "n1", "Score": 0}]


def test_bind_without_filter_counts_memory_in_the_extenders_unit(
    kube: tuple[FakeKubeAPI, KubernetesState],
) -> None:
    """A share pod fetched at bind (no filter call seen) is read in the extender's vGPU-memory
    unit, as filter would have: 16 units of 128 MiB are 2 GiB."""
    api, state = kube
    pod = api.add_pod("share", "u-share", gpus=0)
    pod["spec"]["containers"][0]["resources"]["limits"] = {
        "gputopo.io/vgpu-core": "25", "gputopo.io/vgpu-memory": "16"}
    ext = Extender(state, DEFAULT, memory_unit_mib=128)
    res = ext.bind(ExtenderBindingArgs(PodName="share", PodNamespace="default", PodUID="u-share",
                                       Node="n0"))
    assert res == {"Error": ""}
    ann = api.pods["u-share"]["metadata"]["annotations"]
    assert ann[ANN_VGPU_MEMORY] == "2048" and ann["gputopo.io/vgpu-core-granted"] == "25"


def test_a_bind_without_pod_uid_is_keyed_by_the_live_pods_uid(
    kube: tuple[FakeKubeAPI, KubernetesState],
) -> None:
    """A bind request with no PodUID for a pod the watch knows takes the live pod's UID: the
    reservation, the Binding's precondition and the memo of its filter call all use it."""
    api, state = kube
    pod = api.add_pod("nouid", "u-nouid", gpus=4, annotations={ANN_POLICY: "mapa-preserve"},
                      emit=True)
    deadline = time.monotonic() + 10
    while state.pod_uid("default", "nouid") != "u-nouid":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    ext = Extender(state, DEFAULT)
    ext.filter(ExtenderArgs.model_validate(names_args(pod, ["n0"])))
    res = ext.bind(ExtenderBindingArgs(PodName="nouid", PodNamespace="default", PodUID="",
                                       Node="n0"))
    assert res == {"Error": ""}
    held = state.allocation("u-nouid")
    assert held is not None and held.gpus == (0, 2, 5, 7)  # the filtered pod's own policy
    assert held.pod == PodRef("default", "nouid", "u-nouid")
