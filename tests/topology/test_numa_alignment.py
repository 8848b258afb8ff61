"""The kubelet NUMA-alignment model on hand cases, most of them the 1.36 source's own unit
tests (k8s.io/kubernetes@v1.36.3: topologymanager/policy_test.go, devicemanager/
topology_hints_test.go, manager_test.go), and gputopo nodes worked out by hand. The model is
also held to the real Go code on random cases in test_numa_alignment_kubelet.py."""

from __future__ import annotations

import pytest

from topology import catalog
from topology.contract import (
    LABEL_CPU_MANAGER_POLICY,
    LABEL_TOPOLOGY_MANAGER_POLICY,
    LABEL_TOPOLOGY_MANAGER_PREFER_CLOSEST,
    LABEL_TOPOLOGY_MANAGER_SCOPE,
)
from topology.numa_alignment import (
    Hint,
    KubeletConfig,
    KubeletConfigError,
    PodDemand,
    align,
    device_hints,
    devices_to_allocate,
    generate_hints,
    kubelet_config_from_labels,
    kubelet_config_labels,
    kubelet_free_gpus,
    mask_of,
    masks_over,
    merge,
    narrower,
    unit_views,
)
from topology.policies.base import GPUUsage, NodeState, Request

M = mask_of
NODES2 = [0, 1]
NODES4 = [0, 1, 2, 3]


def H(*nodes: int, preferred: bool = True) -> Hint:
    return Hint(M(nodes), preferred)


# ------------------------------------------------------------------ bitmask
def test_bitmask_order_is_the_kubelets() -> None:
    """IsNarrowerThan: fewer bits first, then the lower number ({1,2}=6 < {0,3}=9);
    IterateBitMasks: by size, then lexicographic combinations."""
    assert narrower(M([3]), M([0, 1]))
    assert narrower(M([1, 2]), M([0, 3]))
    assert not narrower(M([0, 3]), M([1, 2]))
    assert masks_over([0, 1, 2]) == [M([0]), M([1]), M([2]), M([0, 1]), M([0, 2]), M([1, 2]),
                                     M([0, 1, 2])]


# ------------------------------------------------------------------ device hints
def test_device_hints_from_topology_hints_test() -> None:
    """topology_hints_test.go: "Request for 2, optimal on 1 NUMA node, forced cross-NUMA"
    (Dev1-4 on NUMA 0,1,0,1; Dev1, Dev2 allocated) gives only {0,1}, not preferred; "2 device
    types, mixed configuration"; and the request-too-large and no-topology cases."""
    assert device_hints({0: 2, 1: 2}, {0: 1, 1: 1}, 2) == [H(0, 1, preferred=False)]
    assert device_hints({0: 2, 1: 2}, {0: 2, 1: 2}, 2) == [H(0), H(1), H(0, 1, preferred=False)]
    assert device_hints({0: 1}, {0: 1}, 1) == [H(0)]
    assert device_hints({0: 2, 1: 2}, {0: 1}, 2) == []  # more requested than available
    assert device_hints({None: 2}, {None: 2}, 1) is None  # no TopologyInfo: no preference


def test_device_hints_iterate_only_nodes_with_devices() -> None:
    """deviceNUMANodes (1.36): a DGX A100's GPUs sit on NUMA 1,3,5,7; masks are built over
    those four only, and a 2-GPU request prefers a single node."""
    hints = device_hints({1: 2, 3: 2, 5: 2, 7: 2}, {1: 1, 3: 2, 5: 2, 7: 0}, 2)
    assert hints is not None
    assert [h for h in hints if h.preferred] == [H(3), H(5)]
    assert all((h.mask or 0) & 0b01010101 == 0 for h in hints)


def test_cpu_hints_prefer_the_fewest_nodes_holding_the_request() -> None:
    """generateCPUTopologyHints: 20 CPUs on 2x16-CPU nodes need both (preferred), whatever
    is free; with 10 free on each, only {0,1} is a hint."""
    assert generate_hints({0: 16, 1: 16}, {0: 16, 1: 16}, 20) == [H(0, 1)]
    assert generate_hints({0: 16, 1: 16}, {0: 16, 1: 16}, 4) == [H(0), H(1),
                                                                H(0, 1, preferred=False)]


# ------------------------------------------------------------------ merge
@pytest.mark.parametrize("policy", ["best-effort", "restricted"])
def test_merge_common_cases_from_policy_test(policy: str) -> None:
    """policy_test.go commonPolicyMergeTestCases."""
    def best(*providers: dict[str, list[Hint] | None]) -> Hint:
        return merge(policy, NODES2, list(providers)).hint

    # Two providers, 1 hint each, same mask, both preferred
    assert best({"r1": [H(0)]}, {"r2": [H(0)]}) == H(0)
    # Two providers, 1 no hints, 1 single hint preferred
    assert best({}, {"r": [H(1)]}) == H(1)
    # Two providers, 1 with 2 hints, 1 with single hint matching
    assert best({"r1": [H(0), H(1)]}, {"r2": [H(1)]}) == H(1)
    # matching narrower preferred hint from both
    assert best({"r1": [H(0), H(1)]}, {"r2": [H(0), H(0, 1, preferred=False)]}) == H(0)
    # less narrow preferred hints are chosen over narrower non-preferred hints
    assert best({"r1": [H(1), H(0, 1, preferred=False)]},
                {"r2": [H(0), H(1), H(0, 1, preferred=False)]}) == H(1)


def test_merge_best_effort_cases_from_policy_test() -> None:
    """policy_test.go bestEffortPolicy.mergeTestCases, including the
    bestNonPreferredAffinityCount cases over 4 NUMA nodes."""
    def best(providers: list[dict[str, list[Hint] | None]], nodes: list[int] = NODES2) -> Hint:
        return merge("best-effort", nodes, providers).hint

    assert best([]) == H(0, 1)  # TopologyHint not set
    assert best([{"resource": None}]) == H(0, 1)
    assert best([{"resource": []}]) == H(0, 1, preferred=False)
    assert best([{"r1": [H(0)]}, {"r2": [H(1)]}]) == H(0, 1, preferred=False)  # no common
    assert best([{"r1": [H(0)]}, {"r2": [H(0, preferred=False)]}]) == H(0, preferred=False)
    # 1 wider mask, both preferred: the AND is narrower but not preferred (masks differ)
    assert best([{"r1": [H(0)]}, {"r2": [H(0, 1)]}]) == H(0, preferred=False)
    assert best([{"r1": [H(0), H(1)]}, {"r2": [H(0, 1, preferred=False)]}]) == \
        H(0, preferred=False)
    np4 = [H(0, 1, 2, 3, preferred=False), H(0, 1, preferred=False)]
    assert best([{"r1": np4}, {"r2": [H(0, 1, preferred=False)]}], NODES4) == \
        H(0, 1, preferred=False)  # bestNonPreferredAffinityCount (1)
    assert best([{"r1": np4}, {"r2": [H(0, 3, preferred=False)]}], NODES4) == \
        H(0, 3, preferred=False)  # (2)
    assert best([{"r1": np4}, {"r2": [H(1, 2, preferred=False)]}], NODES4) == \
        H(1, 2, preferred=False)  # (3)


def test_merge_admission_by_policy() -> None:
    """best-effort admits everything; restricted only a preferred hint; single-numa-node only
    single-node preferred hints (filterSingleNumaHints), and turns the machine-wide mask into
    nil; none returns a nil hint and admits."""
    two = [{"gpu": [H(0, 1)]}]  # a request only both nodes can hold: preferred at {0,1}
    assert merge("best-effort", NODES2, two).admit
    assert merge("restricted", NODES2, two) .admit
    snn = merge("single-numa-node", NODES2, two)
    assert not snn.admit and snn.hint == Hint(None, False)
    split = [{"gpu": [H(0, 1, preferred=False)]}]
    assert merge("best-effort", NODES2, split).admit
    assert not merge("restricted", NODES2, split).admit
    assert merge("none", NODES2, split) .hint == Hint(None, False)
    assert merge("single-numa-node", [0], [{"gpu": [H(0)]}]).hint == Hint(None, True)


def test_merge_with_cpu_hints_rejects_a_gpu_request_spanning_nodes() -> None:
    """mergePermutation marks a hint preferred only when every provider's mask is the same:
    a Guaranteed container whose 4 CPUs fit one node but whose GPUs need two has no preferred
    hint, so restricted rejects it even with CPUs to spare."""
    gpu = [H(0, 1)]  # 5 GPUs on 4+4: both nodes, preferred
    cpu = generate_hints({0: 20, 1: 20}, {0: 20, 1: 20}, 4)
    result = merge("restricted", NODES2, [{"gpu": gpu}, {"cpu": cpu}])
    assert result.hint == H(0, 1, preferred=False) and not result.admit


def test_prefer_closest_uses_distances() -> None:
    """mergeTestCasesClosestNUMA: with prefer-closest-numa-nodes, of two 2-node masks the one
    with the shorter average distance wins over the lower number."""
    dist = {0: [10, 21, 11, 21], 1: [21, 10, 21, 11], 2: [11, 21, 10, 21],
            3: [21, 11, 21, 10]}
    providers = [{"r": [H(0, 1), H(0, 2)]}]
    assert merge("best-effort", NODES4, providers).hint == H(0, 1)
    assert merge("best-effort", NODES4, providers, prefer_closest=True,
                 distances=dist).hint == H(0, 2)
    with pytest.raises(KubeletConfigError, match="distance"):
        merge("best-effort", NODES4, providers, prefer_closest=True)


# ------------------------------------------------------------------ devicesToAllocate
def _no_preference(available: frozenset[str], must: frozenset[str], size: int) -> list[str]:
    return []


def test_devices_to_allocate_from_manager_test() -> None:
    """manager_test.go TestGetPreferredAllocation-style cases: "Request for 4, unsatisfiable,
    prefer socket 0" takes all 3 aligned devices and one more; "Request for 2, socket 1"
    stays on socket 1; without a hint everything is offered."""
    devs = {f"Dev{i}": (0 if i % 2 else 1) for i in range(1, 7)}  # Dev1,3,5 on 0
    got = devices_to_allocate(M([0]), devs, 4, _no_preference)
    assert {d for d in got if devs[d] == 0} == {"Dev1", "Dev3", "Dev5"} and len(got) == 4
    four = {"Dev1": 0, "Dev2": 1, "Dev3": 0, "Dev4": 1}
    got = devices_to_allocate(M([1]), four, 2, _no_preference)
    assert got == {"Dev2", "Dev4"}
    offered: list[frozenset[str]] = []

    def spy(available: frozenset[str], must: frozenset[str], size: int) -> list[str]:
        offered.append(available)
        return ["Dev3"]

    assert devices_to_allocate(None, four, 1, spy) == {"Dev3"}
    assert offered == [frozenset(four)]
    offered.clear()
    devices_to_allocate(M([0]), {**four, "Dev5": 0}, 1, spy)
    assert offered == [frozenset({"Dev1", "Dev3", "Dev5"})]  # only the mask's devices


# ------------------------------------------------------------------ gputopo nodes
DGX1 = catalog.get("dgx1-v100")  # GPUs 0-3 on NUMA 0, 4-7 on NUMA 1
SNN = KubeletConfig("single-numa-node")


def test_align_keeps_a_pod_on_the_lowest_node_that_holds_it() -> None:
    """A 2-GPU pod on an idle DGX-1: the kubelet picks NUMA 0, so only GPUs 0-3 are
    eligible; with three of them busy it picks NUMA 1."""
    a = align(DGX1, NodeState(), Request(2), SNN)
    assert a.fits and a.hint == H(0) and a.eligible == {0, 1, 2, 3}
    a = align(DGX1, NodeState.whole([0, 1, 2]), Request(2), SNN)
    assert a.hint == H(1) and a.eligible == {4, 5, 6, 7}


def test_align_rejects_what_single_numa_node_rejects_and_says_why() -> None:
    a = align(DGX1, NodeState.whole([0, 1, 2, 4, 5, 6]), Request(2), SNN)
    assert not a.admitted and not a.fits and not a.unresolvable
    assert "TopologyAffinityError" in a.reason and "0: 1, 1: 1" in a.reason
    assert not align(DGX1, NodeState(), Request(5), SNN).admitted  # no node has 5
    assert align(DGX1, NodeState(), Request(5), KubeletConfig("restricted")).fits
    guaranteed = PodDemand(container_cpus=4, pod_cpus=4)
    static = KubeletConfig("restricted", cpu_manager_policy="static")
    assert not align(DGX1, NodeState(), Request(5), static, guaranteed).admitted


def test_align_counts_shared_gpus_as_free_to_the_kubelet() -> None:
    """vGPU shares are other resources to the kubelet: a GPU carrying a share is a free
    nvidia.com/gpu device there. NUMA 0 then looks like it holds 2 free GPUs ({2,3} are held
    whole, GPU 1 carries a share): the kubelet picks NUMA 0 and, needing all of its free
    GPUs, hands over GPU 1 too. So the pod cannot go to this node for now."""
    state = NodeState({1: GPUUsage(30, 1024), 2: GPUUsage(100, 0), 3: GPUUsage(100, 0)})
    assert kubelet_free_gpus(DGX1, state) == {0, 1, 4, 5, 6, 7}
    a = align(DGX1, state, Request(2), SNN)
    assert a.hint == H(0) and a.eligible == frozenset() and "carries vGPU shares" in a.reason
    # a 1-GPU pod: more free on NUMA 0 than needed, so the plugin may choose GPU 0
    assert align(DGX1, state, Request(1), SNN).eligible == {0}


def test_align_shares_follow_the_kubelets_unit_count() -> None:
    """A 50 % share: the kubelet's vgpu-core devices on NUMA 0 are 100 per GPU minus what
    shares hold; GPUs held whole keep their 100 units free to it. NUMA 0 has room, so the
    share must go to a GPU there that has the core free."""
    state = NodeState({0: GPUUsage(100, 0), 1: GPUUsage(70, 0)})
    views = unit_views(DGX1, state, 256)
    assert views["gputopo.io/vgpu-core"].free[0] == 100  # held whole: units free to the kubelet
    assert views["gputopo.io/vgpu-core"].free[1] == 30
    a = align(DGX1, state, Request(0, core_percent=50), SNN)
    assert a.fits and a.hint == H(0) and a.eligible == {2, 3}


def test_align_share_the_kubelet_would_spread() -> None:
    """When a NUMA node's free units are exactly the request, the kubelet takes them all
    without asking the plugin: that is only a gputopo share if they sit on one GPU. Here
    NUMA 0 has 10 % free on GPUs 0 and 1 (the rest full), so the kubelet picks NUMA 0 for a
    20 % share and takes both GPUs' units, although GPU 4 on NUMA 1 is idle: the node must be
    refused until that changes."""
    full = GPUUsage(100, 256)  # shares that fill the GPU (memory > 0: not held whole)
    state = NodeState({0: GPUUsage(90, 256), 1: GPUUsage(90, 256), 2: full, 3: full,
                       5: full, 6: full, 7: full})
    a = align(DGX1, state, Request(0, core_percent=20), KubeletConfig("restricted"))
    assert a.hint == H(0)
    assert not a.fits and "spread over GPUs 0,1" in a.reason
    # with 30 % asked NUMA 0 no longer holds it: the kubelet picks NUMA 1 and GPU 4
    assert align(DGX1, state, Request(0, core_percent=30), KubeletConfig("restricted")
                 ).eligible == {4}


def test_align_slots_on_gpus_held_whole_look_free_to_the_kubelet() -> None:
    """A co-location slot (gputopo.io/gpu-shared) is a device of its GPU: the slots of GPUs
    0-3, held whole, are free to the kubelet. So single-numa-node picks NUMA 0 for a slot pod
    and offers only NUMA 0's slots, where no GPU can take it: the node is refused, although
    GPUs 4-7 are idle. With GPU 0 free the slot goes there."""
    from scheduler_extender.podspec import request_from_pod

    pod = {"metadata": {"name": "j", "namespace": "default",
                        "annotations": {"gputopo.io/profile": "resnet18:64"}},
           "spec": {"containers": [{"name": "c", "resources": {
               "limits": {"gputopo.io/gpu-shared": "1"}}}]}}
    request = request_from_pod(pod)
    assert request is not None and request.shared is not None
    a = align(DGX1, NodeState.whole([0, 1, 2, 3]), request, SNN)
    assert a.hint == H(0) and not a.fits and "co-location slot" in a.reason
    a = align(DGX1, NodeState.whole([1, 2, 3]), request, SNN)
    assert a.fits and a.eligible == {0}
    views = unit_views(DGX1, NodeState.whole([1]), 256)
    assert views["gputopo.io/gpu-shared"].free[1] == 3


def test_align_refuses_what_it_cannot_predict() -> None:
    two = PodDemand(device_containers=2)
    a = align(DGX1, NodeState(), Request(2), SNN, two)
    assert not a.fits and a.unresolvable and "topologyManagerScope pod" in a.reason
    assert align(DGX1, NodeState(), Request(2), KubeletConfig("single-numa-node", "pod"),
                 two).fits


def test_align_does_nothing_without_the_topology_manager() -> None:
    a = align(DGX1, NodeState.whole([0]), Request(2), KubeletConfig())
    assert a.fits and a.eligible == set(range(8)) and a.hint.mask is None


# ------------------------------------------------------------------ the contract
def test_labels_round_trip_and_defaults() -> None:
    cfg = KubeletConfig("restricted", "pod", "static", prefer_closest_numa=True)
    labels = kubelet_config_labels(cfg)
    assert labels == {LABEL_TOPOLOGY_MANAGER_POLICY: "restricted",
                      LABEL_TOPOLOGY_MANAGER_SCOPE: "pod", LABEL_CPU_MANAGER_POLICY: "static",
                      LABEL_TOPOLOGY_MANAGER_PREFER_CLOSEST: "true"}
    assert kubelet_config_from_labels(labels) == cfg
    assert kubelet_config_from_labels({}) == KubeletConfig()
    assert kubelet_config_from_labels(None) == KubeletConfig()


def test_bad_labels_are_named() -> None:
    with pytest.raises(KubeletConfigError, match="strict"):
        kubelet_config_from_labels({LABEL_TOPOLOGY_MANAGER_POLICY: "strict"})
    with pytest.raises(KubeletConfigError, match="prefer-closest"):
        kubelet_config_from_labels({LABEL_TOPOLOGY_MANAGER_PREFER_CLOSEST: "maybe"})
