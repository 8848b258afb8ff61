"""The Allocator's own part of each call (mutation round 14, docs/testing.md): what a pod
source that cannot be read, a pod listed late, several candidates without the kubelet's
view, a GetPreferredAllocation's pin, the order of the devices and a failed record do to
what Allocate hands the container, what PreStartContainer lets start, and what the metrics
count. The pod identification itself is ``test_allocation.py``'s."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from device_plugin import allocation
from device_plugin.allocation import Allocator, Inventory
from device_plugin.devices import RESOURCES
from device_plugin.identity import ANN_ALLOCATED, IdentityError, parse_record
from device_plugin.pods import MemoryPodSource, PodSourceError, make_pod
from gpunode.health import HealthState
from tests.device_plugin.helpers import NODE, FakeKubeletView, InProcessKubelet, bound_pod, decide
from tests.device_plugin.test_allocation import CORE, MEM, setup, visible
from topology.contract import ANN_GPU_UUIDS, RESOURCE_GPU, RESOURCE_GPU_SHARED
from topology.model import Topology
from topology.policies.base import NodeState, Request


def count(metric) -> float:  # type: ignore[no-untyped-def]
    return float(metric._value.get())


def observations(alloc: Allocator, resource: str) -> tuple[float, float]:
    """(number, sum) of the Allocate latency histogram's observations for ``resource``."""
    samples = {
        s.name: s.value
        for m in alloc.metrics.registry.collect()
        if m.name == "gputopo_dp_allocate_seconds"
        for s in m.samples
        if s.labels.get("resource") == resource and s.name.endswith(("_count", "_sum"))
    }
    return (
        samples.get("gputopo_dp_allocate_seconds_count", 0.0),
        samples.get("gputopo_dp_allocate_seconds_sum", 0.0),
    )


class FakeClock:
    """The allocation module's ``time``: ``sleep`` advances it, nothing else does."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(
        allocation, "time", SimpleNamespace(monotonic=c.monotonic, perf_counter=c.perf_counter)
    )
    return c


# ---------------------------------------------------------------------------- the pod source
class Unreadable(MemoryPodSource):
    def list_pods(self, node: str):  # type: ignore[no-untyped-def]
        raise PodSourceError("apiserver down")


def test_a_pod_source_that_cannot_be_read_refuses_each_call_naming_the_node(
    topo: Topology,
) -> None:
    d = decide(topo, NodeState(), Request(count=1))
    kview = FakeKubeletView()
    kview.pods[("default", "p")] = {"main": {RESOURCE_GPU: frozenset(d.uuids)}}
    alloc = Allocator(topo, NODE, Unreadable(), view=kview, allocate_wait_s=0)
    free = [g.uuid for g in topo.gpus]
    message = r"^cannot read the pods of node n1: apiserver down$"
    with pytest.raises(IdentityError, match=message):
        alloc.preferred(RESOURCE_GPU, free, [], 1)
    with pytest.raises(IdentityError, match=message):
        alloc.allocate(RESOURCE_GPU, free[:1])
    with pytest.raises(IdentityError, match=message):
        alloc.pre_start(RESOURCE_GPU, list(d.uuids))
    m = alloc.metrics
    assert count(m.preferred_errors.labels(RESOURCE_GPU)) == 1
    assert count(m.allocate_errors.labels(RESOURCE_GPU)) == 1
    assert count(m.preferred_errors.labels(CORE)) == 0


def test_an_unknown_resource_is_refused_by_name(topo: Topology) -> None:
    _src, alloc, _k = setup(topo, [])
    for call in (
        lambda: alloc.preferred("example.com/fpga", [], [], 1),
        lambda: alloc.allocate("example.com/fpga", ["x"]),
        lambda: alloc.pre_start("example.com/fpga", ["x"]),
    ):
        with pytest.raises(IdentityError, match=r"^unknown resource 'example.com/fpga'$"):
            call()


# ---------------------------------------------------------------------------- waiting for a pod
def test_allocate_re_lists_until_a_late_pod_appears(topo: Topology, clock: FakeClock) -> None:
    """The pod source may lag the kubelet: with nobody waiting, the Allocator re-lists (for
    up to ``allocate_wait_s``) instead of refusing at once."""
    d = decide(topo, NodeState(), Request(count=2))
    source = MemoryPodSource([])

    def late(seconds: float) -> None:
        clock.sleep(seconds)
        if len(clock.sleeps) == 3:
            source.add(bound_pod("late", d))

    alloc = Allocator(topo, NODE, source, allocate_wait_s=5.0, sleep=late)
    got = alloc.allocate(RESOURCE_GPU, list(d.uuids))
    assert got.pod.name == "late" and got.gpu_uuids == tuple(d.uuids)
    assert len(clock.sleeps) == 3
    assert all(0 < s <= 0.5 for s in clock.sleeps)  # a short poll, well inside the wait


def test_a_pod_already_listed_is_not_waited_for(topo: Topology, clock: FakeClock) -> None:
    d = decide(topo, NodeState(), Request(count=1))
    alloc = Allocator(
        topo, NODE, MemoryPodSource([bound_pod("p", d)]), allocate_wait_s=5.0, sleep=clock.sleep
    )
    assert alloc.allocate(RESOURCE_GPU, list(d.uuids)).pod.name == "p"
    assert clock.sleeps == []


def test_with_nobody_waiting_the_allocator_gives_up_after_its_wait(
    topo: Topology, clock: FakeClock
) -> None:
    alloc = Allocator(topo, NODE, MemoryPodSource([]), allocate_wait_s=2.0, sleep=clock.sleep)
    with pytest.raises(IdentityError, match=r"no pod on node n1 is waiting for 1 nvidia.com/gpu"):
        alloc.allocate(RESOURCE_GPU, [topo.gpus[0].uuid])
    assert 2.0 <= sum(clock.sleeps) < 2.5
    clock.sleeps.clear()
    at_once = Allocator(topo, NODE, MemoryPodSource([]), allocate_wait_s=0, sleep=clock.sleep)
    with pytest.raises(IdentityError, match=r"no pod on node n1 is waiting"):
        at_once.preferred(RESOURCE_GPU, [topo.gpus[0].uuid], [], 1)
    assert clock.sleeps == []


def test_the_default_wait_is_two_seconds(topo: Topology, clock: FakeClock) -> None:
    alloc = Allocator(topo, NODE, MemoryPodSource([]), sleep=clock.sleep)
    with pytest.raises(IdentityError):
        alloc.allocate(RESOURCE_GPU, [topo.gpus[0].uuid])
    assert 2.0 <= sum(clock.sleeps) < 2.5


# ---------------------------------------------------------------------------- no kubelet view
def test_the_fallback_is_counted_only_when_admission_order_decides(topo: Topology) -> None:
    """Without pod-resources, ``identity_fallback`` counts the calls where more than one pod
    could be the one in admission and none is mid-admission already."""
    d1 = decide(topo, NodeState(), Request(count=0, core_percent=30, memory_mib=4096))
    d2 = decide(topo, NodeState.whole(d1.gpus), Request(count=0, core_percent=30, memory_mib=4096))
    limits = {CORE: 30, MEM: 16}
    a = bound_pod("a", d1, limits=limits)
    b = bound_pod("b", d2, limits=limits, created="2026-01-01T00:00:01Z")
    _src, alloc, kubelet = setup(topo, [a, b], view=False)
    fallback = alloc.metrics.identity_fallback
    # a or b: admission order says a, in GetPreferredAllocation and in Allocate
    kubelet.allocate("default", "a", "main", CORE, 30)
    assert count(fallback.labels(CORE)) == 2
    kubelet.allocate("default", "a", "main", MEM, 16)  # a is mid-admission: no guess
    assert count(fallback.labels(MEM)) == 0
    kubelet.allocate("default", "b", "main", CORE, 30)  # b alone
    assert count(fallback.labels(CORE)) == 2


# ---------------------------------------------------------------------------- the kubelet's view
def test_a_pod_the_kubelet_admits_but_gputopo_does_not_list_is_named_so(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=1))
    _src, alloc, kubelet = setup(topo, [bound_pod("waiting", d)])
    kubelet.receive("default", "ghost", ["main"])
    with pytest.raises(
        IdentityError,
        match=r"^the kubelet is admitting a pod gputopo does not see for nvidia.com/gpu, but "
        r"gputopo has no unallocated assignment for it on node n1 \(already marked "
        r"gputopo.io/allocated\?\)$",
    ):
        alloc.preferred(RESOURCE_GPU, [g.uuid for g in topo.gpus], [], 1)


def test_the_pods_named_as_admitted_are_those_the_kubelet_has_without_devices(
    topo: Topology,
) -> None:
    d = decide(topo, NodeState(), Request(count=1))
    done = {ANN_ALLOCATED: json.dumps({RESOURCE_GPU: {"main": list(d.uuids)}})}
    pods = [
        bound_pod("d1", d, extra_annotations=done),
        bound_pod("d2", d, extra_annotations=done),
        bound_pod("held", d, extra_annotations=done),  # the kubelet gave it its GPU
        make_pod("cpu", NODE, limits={"cpu": 1}),  # asks for no GPU
        bound_pod("unseen", d, extra_annotations=done),  # the kubelet does not have it
        bound_pod("waiting", decide(topo, NodeState.whole(d.gpus), Request(count=1))),
    ]
    _src, alloc, kubelet = setup(topo, pods)
    for name in ("d1", "d2", "cpu"):
        kubelet.receive("default", name, ["main"])
    kubelet.view.pods[("default", "held")] = {"main": {RESOURCE_GPU: frozenset(d.uuids)}}
    with pytest.raises(IdentityError) as err:
        alloc.preferred(RESOURCE_GPU, [g.uuid for g in topo.gpus], [], 1)
    assert str(err.value).startswith(
        "the kubelet is admitting default/d1, default/d2 for nvidia.com/gpu, but"
    )


def test_a_pod_the_kubelet_gave_devices_is_no_candidate_though_its_record_was_lost(
    topo: Topology,
) -> None:
    """The older pod's Allocate was answered but its record never landed (apiserver down,
    then the plugin restarted): the kubelet's view says it holds its GPU, so the next
    GetPreferredAllocation is the newer pod's, not the older one's again."""
    d1 = decide(topo, NodeState(), Request(count=1))
    d2 = decide(topo, NodeState.whole(d1.gpus), Request(count=1))
    older = bound_pod("older", d1)
    newer = bound_pod("newer", d2, created="2026-01-01T00:00:01Z")
    _src, alloc, kubelet = setup(topo, [older, newer])
    kubelet.view.pods[("default", "older")] = {"main": {RESOURCE_GPU: frozenset(d1.uuids)}}
    kubelet.receive("default", "newer", ["main"])
    free = [g.uuid for g in topo.gpus if g.uuid not in d1.uuids]
    assert alloc.preferred(RESOURCE_GPU, free, [], 1) == list(d2.uuids)
    assert alloc.allocate(RESOURCE_GPU, list(d2.uuids)).pod.name == "newer"


# ---------------------------------------------------------------------------- the pin
def shares(topo: Topology) -> tuple[dict, dict]:
    """Two pods granted the same 30 % of one GPU (identical Allocate answers but whose)."""
    d = decide(topo, NodeState(), Request(count=0, core_percent=30))
    older = bound_pod("older", d, created="2026-01-01T00:00:00Z")
    newer = bound_pod("newer", d, created="2026-01-01T00:00:05Z")
    return older, newer


def test_allocate_goes_to_the_pod_its_preferred_allocation_was_for(topo: Topology) -> None:
    """Equal shares on one GPU match Allocate equally: the pod GetPreferredAllocation chose
    gets it, even when an older pod is listed in between (a lagging pod source)."""
    older, newer = shares(topo)
    source = MemoryPodSource([newer])
    alloc = Allocator(topo, NODE, source, allocate_wait_s=0)
    units = [d.id for d in alloc_devices(alloc, CORE)]
    chosen = alloc.preferred(CORE, units, [], 30)
    source.add(older)
    got = alloc.allocate(CORE, chosen)
    assert got.pod.name == "newer"
    assert got.grant.envs["GPUTOPO_POD"] == "default/newer"
    assert ANN_ALLOCATED in source.get("default/newer").annotations
    assert ANN_ALLOCATED not in source.get("default/older").annotations
    # the pin is spent: the next Allocate of those units is the older pod's
    assert alloc.allocate(CORE, chosen).pod.name == "older"


def test_the_pin_holds_only_for_the_devices_that_were_preferred(topo: Topology) -> None:
    older, newer = shares(topo)
    source = MemoryPodSource([newer])
    alloc = Allocator(topo, NODE, source, allocate_wait_s=0)
    units = [d.id for d in alloc_devices(alloc, CORE)]
    chosen = alloc.preferred(CORE, units, [], 30)
    source.add(older)
    other_units = [u for u in units if u.startswith(chosen[0].split("::")[0] + "::")][-30:]
    assert set(other_units) != set(chosen)
    assert alloc.allocate(CORE, other_units).pod.name == "older"
    assert alloc.allocate(CORE, chosen).pod.name == "newer"  # the one left


def test_a_refused_allocate_keeps_the_pin(topo: Topology) -> None:
    older, newer = shares(topo)
    source = MemoryPodSource([newer])
    alloc = Allocator(topo, NODE, source, allocate_wait_s=0)
    units = [d.id for d in alloc_devices(alloc, CORE)]
    chosen = alloc.preferred(CORE, units, [], 30)
    source.add(older)
    with pytest.raises(IdentityError):
        alloc.allocate(CORE, chosen[:10])
    assert alloc.allocate(CORE, chosen).pod.name == "newer"


def alloc_devices(alloc: Allocator, resource: str):  # type: ignore[no-untyped-def]
    from device_plugin.devices import build_devices

    spec = next(s for s in RESOURCES if s.name == resource)
    return build_devices(alloc.topology, spec, alloc.unit_mib)


# ---------------------------------------------------------------------------- the answer
def test_the_container_gets_its_gpus_in_the_assignments_order_whatever_the_kubelets(
    topo: Topology,
) -> None:
    d = decide(topo, NodeState(), Request(count=4))
    source, alloc, kubelet = setup(topo, [bound_pod("p", d)])
    kubelet.receive("default", "p", ["main"])
    got = alloc.allocate(RESOURCE_GPU, list(reversed(d.uuids)))
    assert got.gpu_uuids == tuple(d.uuids)
    assert got.container == "main"
    assert visible(got) == list(d.uuids)
    record = parse_record(source.get("default/p").annotations[ANN_ALLOCATED])
    assert record == {RESOURCE_GPU: {"main": list(d.uuids)}}


def test_a_unit_allocation_names_its_one_gpu(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=0, core_percent=20, memory_mib=1024))
    source, alloc, kubelet = setup(topo, [bound_pod("f", d, limits={CORE: 20, MEM: 4})])
    kubelet.receive("default", "f", ["main"])
    got = kubelet.allocate("default", "f", "main", MEM, 4)
    assert got.gpu_uuids == (d.uuids[0],)
    assert parse_record(source.get("default/f").annotations[ANN_ALLOCATED]) == {
        MEM: {"main": [d.uuids[0]]}
    }


def test_the_default_vgpu_memory_unit_is_256_mib(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=0, core_percent=20, memory_mib=4096))
    source = MemoryPodSource([bound_pod("f", d, limits={CORE: 20, MEM: 16})])
    alloc = Allocator(topo, NODE, source, allocate_wait_s=0)
    units = [f"{d.uuids[0]}::mem-{i}" for i in range(16)]
    assert alloc.allocate(MEM, units).pod.name == "f"


def test_device_nodes_follow_the_minor_numbers_and_the_filter(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=2))
    minors = {g.index: 10 + g.index for g in topo.gpus}
    alloc = Allocator(
        topo,
        NODE,
        MemoryPodSource([bound_pod("p", d)]),
        minors=minors,
        allocate_wait_s=0,
        device_exists=lambda p: p != "/dev/nvidia-uvm-tools",
    )
    got = alloc.allocate(RESOURCE_GPU, list(d.uuids))
    hosts = [h for _c, h, _p in got.grant.devices]
    assert hosts == [f"/dev/nvidia{10 + g}" for g in d.gpus] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]


def test_a_co_location_slot_gets_the_mps_directories_given(topo: Topology) -> None:
    from topology.colocation.profile import builtin_catalog
    from topology.policies.base import SharedRequest
    from topology.policies.evaluate import Evaluator

    profile = builtin_catalog()["vgg19:64"]
    shared = SharedRequest(profile, profile.gpu_memory_mib, name="default/s")
    d = Evaluator().place("gputopo", topo, NodeState(), Request(count=1, shared=shared))
    pod = bound_pod("s", d, limits={RESOURCE_GPU_SHARED: 1})
    alloc = Allocator(
        topo,
        NODE,
        MemoryPodSource([pod]),
        allocate_wait_s=0,
        mps_pipe_dir=Path("/var/mps/pipe"),
        mps_shm_dir=Path("/var/mps/shm"),
    )
    slot = next(x.id for x in alloc_devices(alloc, RESOURCE_GPU_SHARED) if x.uuid == d.uuids[0])
    got = alloc.allocate(RESOURCE_GPU_SHARED, [slot])
    assert got.grant.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/var/mps/pipe"
    mounts = {c: h for c, h, _ro in got.grant.mounts}
    assert mounts.get("/dev/shm") == "/var/mps/shm"


# ---------------------------------------------------------------------------- the record
def test_each_allocate_adds_to_the_pods_record(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=3))
    containers = [
        {"name": "a", "resources": {"limits": {RESOURCE_GPU: "1"}}},
        {"name": "b", "resources": {"limits": {RESOURCE_GPU: "2"}}},
    ]
    source, _alloc, kubelet = setup(topo, [bound_pod("p", d, containers=containers)])
    kubelet.receive("default", "p", ["a", "b"])
    kubelet.allocate("default", "p", "a", RESOURCE_GPU, 1)
    kubelet.allocate("default", "p", "b", RESOURCE_GPU, 2)
    record = parse_record(source.get("default/p").annotations[ANN_ALLOCATED])
    assert record == {RESOURCE_GPU: {"a": [d.uuids[0]], "b": list(d.uuids[1:])}}


def test_a_record_that_failed_to_land_is_written_with_the_next(topo: Topology) -> None:
    """The first container's record was lost (apiserver down): the second container's patch
    carries both, and an earlier resource's record on the pod is kept."""

    class OnceFlaky(MemoryPodSource):
        failures = 1

        def patch_annotations(self, pod, patch):  # type: ignore[no-untyped-def]
            if self.failures:
                self.failures -= 1
                raise PodSourceError("apiserver down")
            super().patch_annotations(pod, patch)

    d = decide(topo, NodeState(), Request(count=3))
    containers = [
        {"name": "a", "resources": {"limits": {RESOURCE_GPU: "1"}}},
        {"name": "b", "resources": {"limits": {RESOURCE_GPU: "2"}}},
    ]
    earlier = {ANN_ALLOCATED: json.dumps({CORE: {"x": ["GPU-old"]}})}
    source = OnceFlaky([bound_pod("p", d, containers=containers, extra_annotations=earlier)])
    alloc = Allocator(topo, NODE, source, allocate_wait_s=0)
    kubelet = InProcessKubelet(alloc)
    kubelet.receive("default", "p", ["a", "b"])
    kubelet.allocate("default", "p", "a", RESOURCE_GPU, 1)
    assert count(alloc.metrics.annotation_errors) == 1
    kubelet.allocate("default", "p", "b", RESOURCE_GPU, 2)
    record = parse_record(source.get("default/p").annotations[ANN_ALLOCATED])
    assert record == {
        CORE: {"x": ["GPU-old"]},
        RESOURCE_GPU: {"a": [d.uuids[0]], "b": list(d.uuids[1:])},
    }
    assert count(alloc.metrics.annotation_errors) == 1


# ---------------------------------------------------------------------------- metrics
def test_each_allocate_is_timed_refused_or_not(topo: Topology, clock: FakeClock) -> None:
    d = decide(topo, NodeState(), Request(count=1))
    source = MemoryPodSource([bound_pod("p", d)])

    class Slow(MemoryPodSource):
        def list_pods(self, node: str):  # type: ignore[no-untyped-def]
            clock.now += 0.25
            return source.list_pods(node)

        def patch_annotations(self, pod, patch):  # type: ignore[no-untyped-def]
            source.patch_annotations(pod, patch)

    alloc = Allocator(topo, NODE, Slow(), allocate_wait_s=0)
    alloc.allocate(RESOURCE_GPU, list(d.uuids))
    assert observations(alloc, RESOURCE_GPU) == (1.0, pytest.approx(0.25))
    with pytest.raises(IdentityError):
        alloc.allocate(RESOURCE_GPU, list(d.uuids))
    assert observations(alloc, RESOURCE_GPU) == (2.0, pytest.approx(0.5))
    assert observations(alloc, CORE) == (0.0, 0.0)
    assert count(alloc.metrics.allocate_errors.labels(RESOURCE_GPU)) == 1


# ---------------------------------------------------------------------------- pre-start
def test_pre_start_without_an_owner_cannot_check(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=1))
    _src, alloc, kubelet = setup(topo, [bound_pod("p", d)])
    kubelet.admit(bound_pod("p", d))
    other = [g.uuid for g in topo.gpus if g.uuid not in d.uuids][:1]
    assert alloc.pre_start(RESOURCE_GPU, other) is None
    assert alloc.pre_start(RESOURCE_GPU, list(d.uuids)) == "default/p"


def test_pre_start_refuses_a_holder_gputopo_does_not_list(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=2))
    _src, alloc, kubelet = setup(topo, [bound_pod("p", d)])
    kubelet.view.pods[("default", "ghost")] = {"main": {RESOURCE_GPU: frozenset(d.uuids)}}
    with pytest.raises(
        IdentityError,
        match=rf"^pod default/ghost holds nvidia.com/gpu {d.uuids[0]},{d.uuids[1]} but is not "
        r"listed on node n1$",
    ):
        alloc.pre_start(RESOURCE_GPU, list(d.uuids))


def test_pre_start_refuses_a_holder_without_a_usable_assignment(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=2))
    pod = bound_pod("p", d)
    pod["metadata"]["annotations"][ANN_GPU_UUIDS] = "GPU-1"
    _src, alloc, kubelet = setup(topo, [pod])
    kubelet.view.pods[("default", "p")] = {"main": {RESOURCE_GPU: frozenset(d.uuids)}}
    with pytest.raises(
        IdentityError,
        match=rf"^pod default/p \(container main\) is about to start on nvidia.com/gpu "
        rf"{d.uuids[0]},{d.uuids[1]} without a usable gputopo assignment: ",
    ):
        alloc.pre_start(RESOURCE_GPU, list(d.uuids))


def test_pre_start_names_the_stray_gpus_and_the_assigned_ones(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=2))
    _src, alloc, kubelet = setup(topo, [bound_pod("p", d)])
    stray = sorted(g.uuid for g in topo.gpus if g.uuid not in d.uuids)[:2]
    kubelet.view.pods[("default", "p")] = {"c": {RESOURCE_GPU: frozenset([d.uuids[0], *stray])}}
    with pytest.raises(
        IdentityError,
        match=rf"^pod default/p \(container c\) is about to start on GPU {','.join(stray)} but "
        rf"gputopo assigned it {','.join(d.uuids)}$",
    ):
        alloc.pre_start(RESOURCE_GPU, [d.uuids[0], *stray])


def test_pre_start_finds_the_holder_by_namespace_and_name(topo: Topology) -> None:
    d1 = decide(topo, NodeState(), Request(count=1))
    d2 = decide(topo, NodeState.whole(d1.gpus), Request(count=1))
    pods = [bound_pod("p", d2, namespace="a"), bound_pod("p", d1, namespace="b"),
            bound_pod("q", d2, namespace="b")]
    _src, alloc, kubelet = setup(topo, pods)
    kubelet.view.pods[("b", "p")] = {"main": {RESOURCE_GPU: frozenset(d1.uuids)}}
    assert alloc.pre_start(RESOURCE_GPU, list(d1.uuids)) == "b/p"


def test_pre_start_checks_units_by_their_gpu(topo: Topology) -> None:
    d = decide(topo, NodeState(), Request(count=0, core_percent=20))
    _src, alloc, kubelet = setup(topo, [bound_pod("f", d)])
    mine = [f"{d.uuids[0]}::core-{i}" for i in range(20)]
    kubelet.view.pods[("default", "f")] = {"main": {CORE: frozenset(mine)}}
    assert alloc.pre_start(CORE, mine) == "default/f"
    other = next(g.uuid for g in topo.gpus if g.uuid != d.uuids[0])
    theirs = [f"{other}::core-{i}" for i in range(20)]
    kubelet.view.pods[("default", "f")] = {"main": {CORE: frozenset(theirs)}}
    with pytest.raises(IdentityError, match=rf"about to start on GPU {other} but"):
        alloc.pre_start(CORE, theirs)


# ---------------------------------------------------------------------------- inventory
def test_the_inventory_lists_every_device_with_its_gpus_health(topo: Topology) -> None:
    health = HealthState()
    sick = topo.gpus[3].uuid
    health.set_health(sick, False, xid=79)
    inv = Inventory(topo, health, unit_mib=1024, slots=2)
    for spec in RESOURCES:
        listing = inv.listing(spec.name)
        assert listing, spec.name
        assert all(ok == (dev.uuid != sick) for dev, ok in listing)
    assert len(inv.listing(RESOURCE_GPU)) == len(topo.gpus)
    assert len(inv.listing(RESOURCE_GPU_SHARED)) == 2 * len(topo.gpus)
    per_gpu = topo.gpus[0].memory_mib // 1024
    assert sum(1 for d, _ok in inv.listing(MEM) if d.uuid == topo.gpus[0].uuid) == per_gpu
