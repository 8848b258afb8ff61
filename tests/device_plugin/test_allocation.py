"""Pod identity and Allocate, in process: the Allocator driven by the device manager's flow,
pods annotated by the extender's own bind code (``contract.assignment_annotations``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from device_plugin.allocation import Allocator
from device_plugin.identity import ANN_ALLOCATED, IdentityError, parse_record
from device_plugin.pods import MemoryPodSource, PodSourceError, make_pod
from tests.device_plugin.helpers import (
    NODE,
    FakeKubeletView,
    InProcessKubelet,
    bound_pod,
    decide,
)
from topology import catalog
from topology.contract import (
    ANN_CPU_AFFINITY,
    ANN_GPU_INDICES,
    ANN_GPU_UUIDS,
    ANN_NODE,
    ANN_VGPU_CORE,
    RESOURCE_GPU,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
)
from topology.model import Topology
from topology.policies.base import NodeState, Request

CORE, MEM = RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY


def setup(
    topo: Topology, pods: list[dict], *, view: bool = True
) -> tuple[MemoryPodSource, Allocator, InProcessKubelet]:
    source = MemoryPodSource(pods)
    kview = FakeKubeletView()
    kview.available = view
    alloc = Allocator(topo, NODE, source, view=kview, unit_mib=256, allocate_wait_s=0)
    return source, alloc, InProcessKubelet(alloc, kview)


def visible(allocation) -> list[str]:
    return allocation.grant.envs["CUDA_VISIBLE_DEVICES"].split(",")


# ---------------------------------------------------------------------------- whole GPUs
def test_whole_gpu_pod_gets_exactly_its_assignment_and_environment(topo: Topology) -> None:
    d = decide(topo, NodeState.whole([0, 1]), Request(count=2))
    pod = bound_pod("train", d)
    source, alloc, kubelet = setup(topo, [pod])
    a = kubelet.admit(pod)[RESOURCE_GPU]
    assert visible(a) == list(d.uuids)
    envs = a.grant.envs
    assert envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(d.uuids)
    assert envs["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert envs["GPUTOPO_CPU_AFFINITY"] == pod["metadata"]["annotations"][ANN_CPU_AFFINITY]
    assert envs["GPUTOPO_NUMA_NODES"] == ",".join(str(n) for n in d.numa_nodes)
    assert envs["GPUTOPO_POD"] == "default/train"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in envs
    host_devices = [h for _c, h, _p in a.grant.devices]
    assert host_devices == [f"/dev/nvidia{g}" for g in d.gpus] + [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    assert a.grant.mounts == ()
    record = parse_record(source.get("default/train").annotations[ANN_ALLOCATED])
    assert record == {RESOURCE_GPU: {"main": list(d.uuids)}}


def test_preferred_allocation_is_the_schedulers_choice_not_the_first_free(topo: Topology) -> None:
    from topology.policies.evaluate import Evaluator

    place = Evaluator().place

    d = place("gputopo", topo, NodeState.whole([0]), Request(count=2))  # the default policy
    first_free = [g.uuid for g in topo.gpus[1:]]
    assert list(d.uuids) != first_free[:2]
    _src, alloc, kubelet = setup(topo, [bound_pod("p", d)])
    kubelet.receive("default", "p", ["main"])
    assert alloc.preferred(RESOURCE_GPU, first_free, [], 2) == list(d.uuids)


def test_two_pods_of_the_same_size_never_swap_even_admitted_out_of_creation_order(
    topo: Topology,
) -> None:
    d1 = decide(topo, NodeState(), Request(count=2))
    d2 = decide(topo, NodeState.whole(d1.gpus), Request(count=2))
    older = bound_pod("older", d1, created="2026-01-01T00:00:00Z")
    newer = bound_pod("newer", d2, created="2026-01-01T00:00:05Z")
    _src, _alloc, kubelet = setup(topo, [older, newer])
    # The kubelet received the newer pod first (e.g. it was bound first).
    got_newer = kubelet.admit(newer)[RESOURCE_GPU]
    got_older = kubelet.admit(older)[RESOURCE_GPU]
    assert visible(got_newer) == list(d2.uuids)
    assert visible(got_older) == list(d1.uuids)
    assert got_newer.pod.name == "newer" and got_older.pod.name == "older"


def test_without_pod_resources_same_size_pods_follow_creation_order(topo: Topology) -> None:
    d1 = decide(topo, NodeState(), Request(count=1))
    d2 = decide(topo, NodeState.whole(d1.gpus), Request(count=1))
    a = bound_pod("a", d1, created="2026-01-01T00:00:00Z")
    b = bound_pod("b", d2, created="2026-01-01T00:00:01Z")
    _src, alloc, kubelet = setup(topo, [a, b], view=False)
    assert visible(kubelet.admit(a)[RESOURCE_GPU]) == list(d1.uuids)
    assert visible(kubelet.admit(b)[RESOURCE_GPU]) == list(d2.uuids)
    assert alloc.metrics.identity_fallback.labels(RESOURCE_GPU)._value.get() >= 1


def test_allocate_refuses_devices_that_are_not_the_pods_and_names_it(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=2))
    _src, alloc, kubelet = setup(topo, [bound_pod("mine", d)])
    others = [g.uuid for g in topo.gpus if g.uuid not in d.uuids][:2]
    kubelet.receive("default", "mine", ["main"])
    with pytest.raises(IdentityError, match=r"pod default/mine \(container main\).*assigned GPUs"):
        alloc.allocate(RESOURCE_GPU, others)
    assert alloc.metrics.allocate_errors.labels(RESOURCE_GPU)._value.get() == 1


def test_allocate_without_preferred_call_matches_by_device_set(topo: Topology) -> None:
    """The kubelet skips GetPreferredAllocation when the available set is exactly the size."""
    d1 = decide(topo, NodeState(), Request(count=2))
    d2 = decide(topo, NodeState.whole(d1.gpus), Request(count=2))
    a, b = bound_pod("a", d1), bound_pod("b", d2, created="2026-01-01T00:00:01Z")
    _src, alloc, kubelet = setup(topo, [a, b], view=False)
    kubelet.receive("default", "b", ["main"])
    got = kubelet.allocate("default", "b", "main", RESOURCE_GPU, 2, override=list(d2.uuids))
    assert got.pod.name == "b" and visible(got) == list(d2.uuids)


def test_a_restarted_plugin_remembers_allocated_pods(topo: Topology) -> None:
    d1 = decide(topo, NodeState(), Request(count=1))
    d2 = decide(topo, NodeState.whole(d1.gpus), Request(count=1))
    a, b = bound_pod("a", d1), bound_pod("b", d2, created="2026-01-01T00:00:01Z")
    source, _alloc, kubelet = setup(topo, [a, b], view=False)
    kubelet.admit(a)
    restarted = Allocator(topo, NODE, source, unit_mib=256, allocate_wait_s=0)
    free = [g.uuid for g in topo.gpus if g.uuid not in d1.uuids]
    assert restarted.preferred(RESOURCE_GPU, free, [], 1) == list(d2.uuids)


def test_patch_failure_does_not_fail_the_allocation(topo: Topology) -> None:
    class Flaky(MemoryPodSource):
        def patch_annotations(self, pod, patch):  # type: ignore[no-untyped-def]
            raise PodSourceError("apiserver down")

    d1 = decide(topo, NodeState(), Request(count=1))
    d2 = decide(topo, NodeState.whole(d1.gpus), Request(count=1))
    source = Flaky([bound_pod("a", d1), bound_pod("b", d2, created="2026-01-01T00:00:01Z")])
    alloc = Allocator(topo, NODE, source, unit_mib=256, allocate_wait_s=0)
    kubelet = InProcessKubelet(alloc)
    assert visible(kubelet.admit(bound_pod("a", d1))[RESOURCE_GPU]) == list(d1.uuids)
    # in memory, a is allocated: the next request goes to b
    assert visible(kubelet.admit(bound_pod("b", d2))[RESOURCE_GPU]) == list(d2.uuids)
    assert alloc.metrics.annotation_errors._value.get() == 2


# ---------------------------------------------------------------------------- annotations
@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda ann: ann.clear(), r"has no gputopo.io/gpu-uuids annotation"),
        (lambda ann: ann.pop(ANN_NODE), r"missing annotation gputopo.io/node"),
        (lambda ann: ann.__setitem__(ANN_GPU_INDICES, "0,x"), r"not a comma-separated list"),
        (
            lambda ann: ann.__setitem__(ANN_GPU_UUIDS, "GPU-1,GPU-2"),
            r"entries but gputopo.io/gpu-uuids",
        ),
        (lambda ann: ann.__setitem__(ANN_NODE, "elsewhere"), r"on node 'elsewhere'.*bound to 'n1'"),
        (lambda ann: ann.__setitem__(ANN_VGPU_CORE, "40"), r"fraction of GPU"),
    ],
)
def test_missing_or_garbled_annotations_fail_loudly_naming_the_pod(topo, mutate, message) -> None:  # type: ignore[no-untyped-def]
    d = decide(topo, NodeState(), Request(count=1))
    pod = bound_pod("broken", d)
    mutate(pod["metadata"]["annotations"])
    _src, alloc, kubelet = setup(topo, [pod])
    kubelet.receive("default", "broken", ["main"])
    free = [g.uuid for g in topo.gpus]
    with pytest.raises(IdentityError, match=r"pod default/broken \(container main\)") as err:
        alloc.preferred(RESOURCE_GPU, free, [], 1)
    assert err.match(message)
    with pytest.raises(IdentityError, match=r"pod default/broken"):
        alloc.allocate(RESOURCE_GPU, [free[0]])


def test_unknown_gpu_and_count_mismatch_are_contradictions(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=2))
    pod = bound_pod("p", d, limits={RESOURCE_GPU: 3})
    _src, alloc, kubelet = setup(topo, [pod])
    kubelet.receive("default", "p", ["main"])
    with pytest.raises(
        IdentityError, match=r"requests 3 nvidia.com/gpu but its gputopo assignment names 2"
    ):
        alloc.preferred(RESOURCE_GPU, [g.uuid for g in topo.gpus], [], 3)
    other = catalog.get("dgx1-p100")
    foreign = bound_pod("q", decide(other, NodeState(), Request(count=1)))
    _src, alloc, kubelet = setup(topo, [foreign])
    kubelet.receive("default", "q", ["main"])
    with pytest.raises(IdentityError, match=r"pod default/q .*which is not on node n1"):
        alloc.preferred(RESOURCE_GPU, [g.uuid for g in topo.gpus], [], 1)


def test_assigned_gpu_not_offered_by_the_kubelet(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=2))
    _src, alloc, kubelet = setup(topo, [bound_pod("p", d)])
    kubelet.receive("default", "p", ["main"])
    offered = [g.uuid for g in topo.gpus if g.uuid != d.uuids[0]]
    with pytest.raises(IdentityError, match=rf"does not offer {d.uuids[0]}"):
        alloc.preferred(RESOURCE_GPU, offered, [], 2)


def test_no_pending_pod(topo: Topology) -> None:
    _src, alloc, _k = setup(topo, [])
    with pytest.raises(IdentityError, match=r"no pod on node n1 is waiting for 1 nvidia.com/gpu"):
        alloc.preferred(RESOURCE_GPU, [g.uuid for g in topo.gpus], [], 1)


def test_kubelet_admitting_a_pod_gputopo_considers_allocated(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=1))
    done = bound_pod(
        "done",
        d,
        extra_annotations={ANN_ALLOCATED: json.dumps({RESOURCE_GPU: {"main": list(d.uuids)}})},
    )
    d2 = decide(topo, NodeState.whole(d.gpus), Request(count=1))
    waiting = bound_pod("waiting", d2, created="2026-01-01T00:00:01Z")
    _src, alloc, kubelet = setup(topo, [done, waiting])
    kubelet.receive("default", "done", ["main"])  # the kubelet admits "done" (again?)
    with pytest.raises(IdentityError, match=r"admitting default/done .*no unallocated assignment"):
        alloc.preferred(RESOURCE_GPU, [g.uuid for g in topo.gpus], [], 1)


# ---------------------------------------------------------------------------- fractions
def test_fractional_pod_gets_units_on_its_gpu_and_mps_limits(topo: Topology) -> None:
    d1 = decide(topo, NodeState(), Request(count=0, core_percent=30, memory_mib=4096))
    state = NodeState().with_allocation(d1)
    d2 = decide(topo, state, Request(count=0, core_percent=30, memory_mib=4096))
    limits = {CORE: 30, MEM: 4096 // 256}
    a = bound_pod("a", d1, limits=limits)
    b = bound_pod("b", d2, limits=limits, created="2026-01-01T00:00:01Z")
    _src, _alloc, kubelet = setup(topo, [a, b])
    for pod, d in ((b, d2), (a, d1)):  # out of creation order
        got = kubelet.admit(pod)
        for res in (CORE, MEM):
            g = got[res].grant
            assert got[res].pod.name == pod["metadata"]["name"]
            assert g.envs["CUDA_VISIBLE_DEVICES"] == d.uuids[0]
            assert g.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
            assert g.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
            assert g.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/run/nvidia/mps"
            assert g.mounts == (("/run/nvidia/mps", "/run/nvidia/mps", False),)
        units = kubelet.view.pods[("default", pod["metadata"]["name"])]["main"]
        assert len(units[CORE]) == 30 and len(units[MEM]) == 16
        assert {u.split("::")[0] for u in units[CORE] | units[MEM]} == {d.uuids[0]}


def test_fractional_units_on_another_gpu_are_refused(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=0, core_percent=20))
    _src, alloc, kubelet = setup(topo, [bound_pod("f", d)])
    kubelet.receive("default", "f", ["main"])
    other = next(g.uuid for g in topo.gpus if g.uuid != d.uuids[0])
    with pytest.raises(IdentityError, match=r"pod default/f .*share of GPU"):
        alloc.allocate(CORE, [f"{other}::core-{i}" for i in range(20)])


def test_fractional_request_that_contradicts_the_grant(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=0, core_percent=20, memory_mib=1000))
    pod = bound_pod("f", d, limits={CORE: 20, MEM: 4})
    _src, alloc, kubelet = setup(topo, [pod])
    kubelet.receive("default", "f", ["main"])
    with pytest.raises(IdentityError, match=r"1000 MiB of GPU memory, not a multiple of the 256"):
        kubelet.allocate("default", "f", "main", MEM, 4)
    whole = bound_pod("w", decide(topo, NodeState(), Request(count=1)), limits={CORE: 50})
    _src, alloc, kubelet = setup(topo, [whole])
    kubelet.receive("default", "w", ["main"])
    with pytest.raises(IdentityError, match=r"whole GPU\(s\), not a share"):
        kubelet.allocate("default", "w", "main", CORE, 50)


def test_a_pod_rejected_mid_admission_does_not_capture_the_next_one(topo: Topology) -> None:
    d1 = decide(topo, NodeState(), Request(count=0, core_percent=40, memory_mib=2048))
    d2 = decide(
        topo, NodeState.whole([d1.gpus[0]]), Request(count=0, core_percent=40, memory_mib=2048)
    )
    assert d1.gpus != d2.gpus
    limits = {CORE: 40, MEM: 8}
    a = bound_pod("a", d1, limits=limits)
    b = bound_pod("b", d2, limits=limits, created="2026-01-01T00:00:01Z")
    _src, alloc, kubelet = setup(topo, [a, b])
    kubelet.receive("default", "a", ["main"])
    kubelet.allocate("default", "a", "main", CORE, 40)  # a is now mid-admission ...
    kubelet.view.pods.pop(("default", "a"))  # ... and rejected (say its memory Allocate failed)
    got = kubelet.admit(b)
    assert got[CORE].pod.name == "b" and visible(got[CORE]) == [d2.uuids[0]]
    assert got[MEM].pod.name == "b"


# ---------------------------------------------------------------------------- containers
def test_two_containers_split_the_pods_gpus(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=4))
    containers = [
        {"name": "a", "resources": {"limits": {RESOURCE_GPU: "1"}}},
        {"name": "b", "resources": {"limits": {RESOURCE_GPU: "3"}}},
    ]
    pod = bound_pod("multi", d, containers=containers)
    _src, _alloc, kubelet = setup(topo, [pod])
    kubelet.receive("default", "multi", ["a", "b"])
    ga = visible(kubelet.allocate("default", "multi", "a", RESOURCE_GPU, 1))
    gb = visible(kubelet.allocate("default", "multi", "b", RESOURCE_GPU, 3))
    assert ga == [d.uuids[0]] and gb == list(d.uuids[1:])


# ---------------------------------------------------------------------------- pre-start
def test_pre_start_verifies_the_kubelets_final_assignment(topo: Topology) -> None:
    d1 = decide(topo, NodeState(), Request(count=1))
    d2 = decide(topo, NodeState.whole(d1.gpus), Request(count=1))
    _src, alloc, kubelet = setup(topo, [bound_pod("a", d1), bound_pod("b", d2)])
    kubelet.admit(bound_pod("a", d1))
    assert alloc.pre_start(RESOURCE_GPU, list(d1.uuids)) == "default/a"
    # Pretend the kubelet had given a's GPU to b: the container must not start.
    kubelet.view.pods[("default", "b")] = {"main": {RESOURCE_GPU: frozenset(d1.uuids)}}
    kubelet.view.pods.pop(("default", "a"))
    with pytest.raises(
        IdentityError, match=r"pod default/b \(container main\) is about to start on GPU"
    ):
        alloc.pre_start(RESOURCE_GPU, list(d1.uuids))
    kubelet.view.available = False
    assert alloc.pre_start(RESOURCE_GPU, list(d1.uuids)) is None


# ---------------------------------------------------------------------------- property
@given(
    sizes=st.lists(st.sampled_from([1, 1, 2, 2, 4]), min_size=2, max_size=6),
    seconds=st.lists(st.integers(0, 3), min_size=6, max_size=6),
    order=st.randoms(use_true_random=False),
    oracle=st.booleans(),
)
def test_every_pod_gets_exactly_its_own_gpus(sizes, seconds, order, oracle) -> None:  # type: ignore[no-untyped-def]
    """Pods placed one after another by the extender, created in the same second or not,
    admitted in any order (with the kubelet's pod-resources view) or in the kubelet's own
    creation order (without it): each container sees exactly its pod's assigned GPUs."""
    topo = catalog.get("dgx1-v100")
    state = NodeState()
    pods, decisions = [], {}
    for i, size in enumerate(sizes):
        try:
            d = decide(topo, state, Request(count=size))
        except Exception:
            break
        state = state.with_allocation(d)
        name = f"p{i}"
        pods.append(bound_pod(name, d, created=f"2026-01-01T00:00:0{seconds[i]}Z"))
        decisions[name] = d
    _src, _alloc, kubelet = setup(topo, pods, view=oracle)
    if oracle:
        order.shuffle(pods)
    else:  # the kubelet's order: PodsByCreationTime; equal timestamps keep name order here
        pods.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
    for pod in pods:
        got = kubelet.admit(pod)[RESOURCE_GPU]
        assert got.pod.name == pod["metadata"]["name"]
        assert visible(got) == list(decisions[got.pod.name].uuids)


def test_pods_on_other_nodes_terminal_or_deleting_are_ignored(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=1))
    elsewhere = bound_pod("x", d, node="n2")
    done = bound_pod("y", d, created="2025-01-01T00:00:00Z")
    done["status"]["phase"] = "Succeeded"
    going = bound_pod("z", d, created="2025-01-01T00:00:00Z")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    live = bound_pod("live", d, created="2026-06-01T00:00:00Z")
    cpu_only = make_pod("cpu", NODE, limits={"cpu": 2})
    _src, alloc, _k = setup(topo, [elsewhere, done, going, live, cpu_only], view=False)
    assert alloc.preferred(RESOURCE_GPU, [g.uuid for g in topo.gpus], [], 1) == list(d.uuids)
    assert alloc._pinned[RESOURCE_GPU][0] == "uid-default-live"


def test_grant_can_omit_device_nodes_missing_on_the_host() -> None:
    """Test nodes (fake topology, e.g. kind) have no /dev/nvidia*: with the filter, the
    container gets only the device nodes that exist; without it, all of them."""
    from pathlib import Path

    from gpunode.container import grant
    from topology import catalog
    from topology.contract import Assignment

    topo = catalog.get("dgx1-v100")
    a = Assignment("n1", (0, 1), (topo.gpus[0].uuid, topo.gpus[1].uuid), "", (0,), 0.0)
    kwargs = {"minors": {0: 0, 1: 1}, "mps_pipe_dir": Path("/run/nvidia/mps")}
    full = grant(topo, "ns/p", a, a.gpu_uuids, **kwargs)  # type: ignore[arg-type]
    assert {d[1] for d in full.devices} >= {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}
    some = grant(topo, "ns/p", a, a.gpu_uuids, device_exists=lambda p: p == "/dev/nvidiactl",
                 **kwargs)  # type: ignore[arg-type]
    assert [d[1] for d in some.devices] == ["/dev/nvidiactl"]
    assert some.envs["CUDA_VISIBLE_DEVICES"] == full.envs["CUDA_VISIBLE_DEVICES"]
