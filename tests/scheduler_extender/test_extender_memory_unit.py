"""The vGPU-memory unit: pods count ``gputopo.io/vgpu-memory`` in the extender's unit (MiB
per device), and a node whose device plugin publishes another unit
(``gputopo.io/vgpu-memory-unit-mib``) is refused — unresolvable, both units named — to pods
that ask vGPU memory, in filter (node names or Node objects) and in bind. Pods that ask no vGPU
memory do not depend on the unit."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler_extender.kubernetes_state import KubernetesState
from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs
from scheduler_extender.settings import load_settings
from scheduler_extender.state import MemoryState
from scheduler_extender.verbs import Extender
from tests.scheduler_extender.fake_kube import FakeKubeAPI
from tests.scheduler_extender.helpers import bind_args, gpu_pod, names_args
from topology import catalog
from topology.contract import ANN_TOPOLOGY, ANN_VGPU_MEMORY, ANN_VGPU_MEMORY_UNIT
from topology.serialization import dumps

DGX = catalog.get("dgx1-v100")
#: node -> what it publishes as its unit (None: no annotation, as a plugin without vgpu-memory)
UNITS: dict[str, str | None] = {"same": "256", "none": None, "half": "128", "junk": "lots"}


def share_pod(name: str = "infer", memory_units: int = 16) -> dict[str, Any]:
    limits = {"gputopo.io/vgpu-core": "30", "gputopo.io/vgpu-memory": str(memory_units)}
    return gpu_pod(name, resources={"limits": limits, "requests": dict(limits)})


def memory_state() -> MemoryState:
    state = MemoryState()
    for name, unit in UNITS.items():
        state.add_node(name, DGX, memory_unit_mib=unit)
    return state


def filter_names(ext: Extender, pod: dict[str, Any]) -> dict[str, Any]:
    return ext.filter(ExtenderArgs.model_validate(names_args(pod, list(UNITS))))


def test_nodes_with_another_unit_are_refused_to_memory_pods() -> None:
    reply = filter_names(Extender(memory_state(), "gputopo"), share_pod())
    assert reply["Error"] == ""
    assert reply["NodeNames"] == ["same", "none"]
    assert reply["FailedNodes"] == {}
    refused = reply["FailedAndUnresolvableNodes"]
    assert set(refused) == {"half", "junk"}
    assert "128-MiB units" in refused["half"] and "256-MiB units" in refused["half"]
    assert ANN_VGPU_MEMORY_UNIT in refused["half"] and "--vgpu-memory-unit-mib" in refused["half"]
    assert "invalid unit 'lots'" in refused["junk"]


def test_prioritize_scores_nodes_with_another_unit_zero() -> None:
    """Prioritize gets the same refusals as filter: the nodes with another unit score 0 (not
    a 500), the others as usual (a refused row still carries its node's view, which
    prioritize reads for every node)."""
    reply = Extender(memory_state(), "gputopo").prioritize(
        ExtenderArgs.model_validate(names_args(share_pod(), list(UNITS))))
    scores = {h["Host"]: h["Score"] for h in reply}
    assert list(scores) == list(UNITS)
    assert scores["half"] == scores["junk"] == 0
    assert scores["same"] == scores["none"] > 0


@pytest.mark.parametrize("pod", [gpu_pod("whole", 2), share_pod("core-only", 0)],
                         ids=["whole-gpus", "vgpu-core-only"])  # fmt: skip
def test_pods_asking_no_vgpu_memory_do_not_depend_on_the_unit(pod: dict[str, Any]) -> None:
    pod = copy.deepcopy(pod)  # the parameter is shared by every run of this test
    if "core-only" in pod["metadata"]["name"]:
        for key in ("limits", "requests"):
            pod["spec"]["containers"][0]["resources"][key].pop("gputopo.io/vgpu-memory")
    state = memory_state()
    ext = Extender(state, "gputopo")
    reply = filter_names(ext, pod)
    assert reply["NodeNames"] == list(UNITS) and not reply["FailedAndUnresolvableNodes"]
    # nor at bind: a node with another unit takes it
    assert ext.bind(ExtenderBindingArgs.model_validate(bind_args(pod, "half"))) == {"Error": ""}
    assert state.allocation(pod["metadata"]["uid"]) is not None


def test_the_smallest_memory_request_depends_on_the_unit() -> None:
    """One unit of 1 MiB (``--vgpu-memory-unit-mib 1``) is still vGPU memory: every node
    publishing another unit is refused."""
    reply = filter_names(Extender(memory_state(), "gputopo", memory_unit_mib=1),
                         share_pod(memory_units=1))
    assert reply["NodeNames"] == ["none"]
    assert set(reply["FailedAndUnresolvableNodes"]) == {"same", "half", "junk"}


def test_the_extender_counts_in_its_own_unit() -> None:
    """With --vgpu-memory-unit-mib 128 the 128-MiB node is the right one, and 16 units are
    2 GiB."""
    state = memory_state()
    ext = Extender(state, "gputopo", memory_unit_mib=128)
    reply = filter_names(ext, share_pod())
    assert reply["NodeNames"] == ["none", "half"]
    assert set(reply["FailedAndUnresolvableNodes"]) == {"same", "junk"}
    out = ext.bind(ExtenderBindingArgs.model_validate(bind_args(share_pod(), "half")))
    assert out == {"Error": ""}
    assert state.allocation("uid-infer").memory_mib == 16 * 128  # type: ignore[union-attr]


def test_node_objects_carry_their_unit() -> None:
    """Without nodeCacheCapable the scheduler sends Node objects: their annotation counts."""
    def node(name: str, unit: str | None) -> dict[str, Any]:
        ann = {ANN_TOPOLOGY: dumps(DGX)}
        if unit is not None:
            ann[ANN_VGPU_MEMORY_UNIT] = unit
        return {"metadata": {"name": name, "annotations": ann}}

    ext = Extender(MemoryState(), "gputopo")
    pod = share_pod()
    args = {"Pod": pod, "Nodes": {"items": [node("a", "256"), node("b", "512"),
                                            node("c", None)]},
            "NodeNames": None}
    reply = ext.filter(ExtenderArgs.model_validate(args))
    # a Node that publishes no unit is not refused, as with node names
    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["a", "c"]
    assert set(reply["FailedAndUnresolvableNodes"]) == {"b"}
    assert "512-MiB units" in reply["FailedAndUnresolvableNodes"]["b"]
    # the same node fixed: accepted (what a Node object says replaces what was seen)
    fixed = copy.deepcopy(args)
    fixed["Nodes"]["items"][1] = node("b", "256")
    reply = ext.filter(ExtenderArgs.model_validate(fixed))
    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["a", "b", "c"]


def test_bind_refuses_a_node_with_another_unit() -> None:
    state = memory_state()
    ext = Extender(state, "gputopo")
    pod = share_pod()
    filter_names(ext, pod)
    out = ext.bind(ExtenderBindingArgs.model_validate(bind_args(pod, "half")))
    assert "cannot bind" in out["Error"] and "128-MiB units" in out["Error"]
    assert state.allocation("uid-infer") is None
    assert ext.bind(ExtenderBindingArgs.model_validate(bind_args(pod, "same"))) == {"Error": ""}
    bound = state.allocation("uid-infer")
    assert bound is not None and bound.memory_mib == 16 * 256


def test_unknown_gpu_memory_is_said_as_such() -> None:
    """A node whose plugin could not know its GPU memory publishes memoryMiB 0 and no unit."""
    from dataclasses import replace

    unknown = replace(DGX, gpus=tuple(replace(g, memory_mib=0) for g in DGX.gpus))
    state = MemoryState({"mystery": unknown})
    reply = Extender(state, "gputopo").filter(
        ExtenderArgs.model_validate(names_args(share_pod(), ["mystery"])))
    assert "GPU memory is unknown" in reply["FailedAndUnresolvableNodes"]["mystery"]


def test_a_share_larger_than_every_gpu_is_refused_unresolvably_with_both_sizes() -> None:
    """A vGPU share asking more memory than any GPU of a node has: no eviction frees memory a
    GPU does not have, so the node is refused unresolvably (kube-scheduler does not preempt
    for it), and the Error names what the pod asks and what the node's largest GPU has; a
    node with larger GPUs takes the pod."""
    state = MemoryState({"v100": DGX, "a100": catalog.get("dgx-a100")})
    pod = share_pod(memory_units=80)  # 80 x 256 MiB = 20480 MiB > a V100's 16160
    reply = Extender(state, "gputopo").filter(
        ExtenderArgs.model_validate(names_args(pod, ["v100", "a100"])))
    assert reply["Error"] == "" and reply["NodeNames"] == ["a100"]
    assert reply["FailedNodes"] == {}
    reason = reply["FailedAndUnresolvableNodes"]["v100"]
    assert "20480 MiB" in reason and "16160 MiB" in reason


# ------------------------------------------------------------------ the Kubernetes backend
@pytest.fixture
def kube() -> Iterator[tuple[FakeKubeAPI, KubernetesState]]:
    api = FakeKubeAPI()
    for name, unit in UNITS.items():
        api.add_node(name, DGX)
        if unit is not None:
            api.nodes[name]["metadata"]["annotations"][ANN_VGPU_MEMORY_UNIT] = unit
    state = KubernetesState(api, watch_timeout_s=1)
    state.start()
    yield api, state
    api.close()
    state.stop()


def test_kubernetes_state_reads_the_published_unit(
    kube: tuple[FakeKubeAPI, KubernetesState],
) -> None:
    api, state = kube
    assert {n: state.node_memory_unit(n) for n in UNITS} == UNITS
    ext = Extender(state, "gputopo")
    pod = api.add_pod("infer", "u-infer", emit=True)
    pod["spec"]["containers"][0]["resources"] = share_pod()["spec"]["containers"][0]["resources"]
    reply = ext.filter(ExtenderArgs.model_validate(names_args(pod, list(UNITS))))
    assert reply["NodeNames"] == ["same", "none"]
    out = ext.bind(ExtenderBindingArgs(PodName="infer", PodNamespace="default",
                                       PodUID="u-infer", Node="same"))  # fmt: skip
    assert out == {"Error": ""}
    assert api.pods["u-infer"]["metadata"]["annotations"][ANN_VGPU_MEMORY] == str(16 * 256)


def test_the_unit_is_a_setting() -> None:
    assert load_settings({}).vgpu_memory_unit_mib == 256
    assert load_settings({"vgpu_memory_unit_mib": 128}).vgpu_memory_unit_mib == 128
