"""Nodes whose kubelet aligns NUMA (``gputopo.io/topology-manager-policy`` other than ``none``):
the extender chooses GPUs on the NUMA mask the kubelet's Topology Manager will pick, and fails
filter where ``restricted`` / ``single-numa-node`` would reject the pod — through filter
(node names and Node objects), prioritize, bind and preempt, with the memory and Kubernetes
backends. The prediction itself is tested in tests/topology/test_numa_alignment*.py."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_extender.decision import Ask, Candidate, Decider
from scheduler_extender.kubernetes_state import KubernetesState
from scheduler_extender.podspec import pod_demand
from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs
from scheduler_extender.state import MemoryState
from scheduler_extender.verbs import Extender
from tests.scheduler_extender.fake_kube import FakeKubeAPI
from tests.scheduler_extender.helpers import bind_args, gpu_pod, names_args
from topology import catalog
from topology.contract import (
    ANN_TOPOLOGY,
    LABEL_CPU_MANAGER_POLICY,
    LABEL_TOPOLOGY_MANAGER_POLICY,
    RESOURCE_GPU,
)
from topology.numa_alignment import (
    POLICY_BEST_EFFORT,
    TOPOLOGY_MANAGER_POLICIES,
    KubeletConfig,
    PodDemand,
    align,
    kubelet_config_labels,
    kubelet_hands_over,
)
from topology.policies.base import FULL_CORE, GPUUsage, NodeState, Request
from topology.serialization import dumps

DGX1 = catalog.get("dgx1-v100")  # GPUs 0-3 on NUMA 0, 4-7 on NUMA 1
A100 = catalog.get("dgx-a100")  # GPUs on NUMA 3,3,1,1,7,7,5,5
SNN = KubeletConfig("single-numa-node")


def two_nodes(busy: tuple[int, ...] = (4,)) -> MemoryState:
    """``snn``: single-numa-node; ``plain``: the kubelet's default; both with ``busy``
    held by other pods."""
    state = MemoryState()
    state.add_node("snn", DGX1, kubelet=SNN)
    state.add_node("plain", DGX1)
    for node in ("snn", "plain"):
        for g in busy:
            ext_bind(state, node, g)
    return state


def ext_bind(state: MemoryState, node: str, gpu: int) -> None:
    """Hold GPU ``gpu`` of ``node`` with a 1-GPU pod (a reservation, as bind makes)."""
    from scheduler_extender.state import Allocation, PodRef

    state.book.add(Allocation(PodRef("default", f"{node}-{gpu}", f"{node}-{gpu}"), node,
                              (gpu,)), DGX1)


def filter_names(ext: Extender, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    return ext.filter(ExtenderArgs.model_validate(names_args(pod, nodes)))


def test_the_pod_goes_where_the_kubelet_will_put_it() -> None:
    """GPU 4 is busy. For a 2-GPU pod gputopo alone takes 6,7 (it keeps NUMA 0's NVLinked
    quartet whole), but the kubelet with single-numa-node picks NUMA 0 (the lowest node with
    two free GPUs) and would offer GetPreferredAllocation only GPUs 0-3: on ``snn`` the
    extender chooses there, on ``plain`` as before."""
    state = two_nodes()
    ext = Extender(state, "gputopo")
    pod = gpu_pod("pair", 2)
    reply = filter_names(ext, pod, ["snn", "plain"])
    assert reply["NodeNames"] == ["snn", "plain"]
    assert ext.bind(ExtenderBindingArgs.model_validate(bind_args(pod, "snn"))) == {"Error": ""}
    snn = state.allocation("uid-pair")
    assert snn is not None and set(snn.gpus) <= {0, 1, 2, 3}
    other = gpu_pod("pair2", 2)
    filter_names(ext, other, ["plain"])
    assert ext.bind(ExtenderBindingArgs.model_validate(bind_args(other, "plain"))) == \
        {"Error": ""}
    plain = state.allocation("uid-pair2")
    assert plain is not None and set(plain.gpus) == {6, 7}


def test_filter_fails_where_single_numa_node_rejects_with_the_reason() -> None:
    """One free GPU on each NUMA node: a 2-GPU pod fits the node by count, but
    single-numa-node would reject it at admission (TopologyAffinityError). Filter says so
    (resolvable: evictions change it); the node without the Topology Manager passes."""
    state = two_nodes(busy=(0, 1, 2, 4, 5, 6))
    reply = filter_names(Extender(state, "gputopo"), gpu_pod("pair", 2), ["snn", "plain"])
    assert reply["NodeNames"] == ["plain"]
    why = reply["FailedNodes"]["snn"]
    assert "TopologyAffinityError" in why and "single-numa-node" in why
    assert "free per NUMA node: 0: 1, 1: 1" in why
    assert not reply["FailedAndUnresolvableNodes"]


def test_node_objects_carry_the_settings_in_labels() -> None:
    """Without nodeCacheCapable the Node's labels decide (and are remembered for bind)."""
    def node(name: str, labels: dict[str, str]) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": labels,
                             "annotations": {ANN_TOPOLOGY: dumps(DGX1)}}}

    state = MemoryState()
    ext = Extender(state, "gputopo")
    items = [node("a", kubelet_config_labels(SNN)), node("b", {}),
             node("c", {LABEL_TOPOLOGY_MANAGER_POLICY: "strict"})]
    reply = ext.filter(ExtenderArgs.model_validate(
        {"Pod": gpu_pod("big", 5), "Nodes": {"items": items}, "NodeNames": None}))
    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["b"]
    assert "no single NUMA node can hold it" in reply["FailedNodes"]["a"]
    assert "unreadable" in reply["FailedAndUnresolvableNodes"]["c"]
    assert "strict" in reply["FailedAndUnresolvableNodes"]["c"]


def test_binds_on_aligning_nodes_known_only_from_node_objects_read_each_nodes_state() -> None:
    """Two single-numa-node DGX-1s the state backend knows no topology of (it came in the
    Node objects; their pods are known): ``n1`` has GPUs 0-2 held, ``n2`` GPUs 4-6. A 2-GPU
    pod goes on NUMA 1 of ``n1``, the next on NUMA 0 of ``n2``: bind must judge each node on
    its own state, not reuse the other node's NUMA alignment."""
    from scheduler_extender.state import Allocation, PodRef

    state = MemoryState()
    for name, busy in (("n1", (0, 1, 2)), ("n2", (4, 5, 6))):
        for g in busy:
            state.book.add(Allocation(PodRef("default", f"{name}-{g}", f"{name}-{g}"), name,
                                      (g,)), DGX1)
    items = [{"metadata": {"name": n, "labels": kubelet_config_labels(SNN),
                           "annotations": {ANN_TOPOLOGY: dumps(DGX1)}}} for n in ("n1", "n2")]
    ext = Extender(state, "gputopo")
    for pod_name, target, numa_gpus in (("a", "n1", {4, 5, 6, 7}), ("b", "n2", {0, 1, 2, 3})):
        pod = gpu_pod(pod_name, 2)
        reply = ext.filter(ExtenderArgs.model_validate(
            {"Pod": pod, "Nodes": {"items": items}, "NodeNames": None}))
        assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["n1", "n2"]
        out = ext.bind(ExtenderBindingArgs.model_validate(bind_args(pod, target)))
        assert out == {"Error": ""}
        bound = state.allocation(f"uid-{pod_name}")
        assert bound is not None and bound.node == target and set(bound.gpus) <= numa_gpus


def test_prioritize_scores_the_constrained_decision() -> None:
    """A node where the kubelet rejects the pod scores 0."""
    state = two_nodes(busy=(0, 1, 2, 4, 5, 6))
    scores = Extender(state, "gputopo").prioritize(
        ExtenderArgs.model_validate(names_args(gpu_pod("pair", 2), ["snn", "plain"])))
    by = {s["Host"]: s["Score"] for s in scores}
    assert by["snn"] == 0 and by["plain"] > 0


def test_bind_refuses_what_the_kubelet_would_reject() -> None:
    state = two_nodes(busy=(0, 1, 2, 4, 5, 6))
    ext = Extender(state, "gputopo")
    pod = gpu_pod("pair", 2)
    filter_names(ext, pod, ["plain"])  # the scheduler saw it pass elsewhere
    out = ext.bind(ExtenderBindingArgs.model_validate(bind_args(pod, "snn")))
    assert "cannot bind" in out["Error"] and "TopologyAffinityError" in out["Error"]
    assert state.allocation("uid-pair") is None


def test_guaranteed_cpus_make_restricted_reject_a_pod_spanning_nodes() -> None:
    """A Guaranteed pod with whole CPUs adds the static CPU manager's hints; its 4 CPUs fit
    one NUMA node but its 5 GPUs need two, so no merged hint is preferred: restricted rejects
    it, and the same pod with fractional CPUs (no CPU hints) is admitted."""
    state = MemoryState()
    state.add_node("r", DGX1, kubelet=KubeletConfig("restricted", cpu_manager_policy="static"))
    ext = Extender(state, "gputopo")
    limits = {RESOURCE_GPU: "5", "cpu": "4", "memory": "8Gi"}
    guaranteed = gpu_pod("g", resources={"limits": limits, "requests": dict(limits)})
    assert pod_demand(guaranteed) == PodDemand(4, 4, 1)
    reply = filter_names(ext, guaranteed, ["r"])
    assert "not preferred" in reply["FailedNodes"]["r"] and "4 exclusive CPUs" in \
        reply["FailedNodes"]["r"]
    # bind decides with the pod's CPUs too (kube-scheduler may bind without this filter)
    out = ext.bind(ExtenderBindingArgs.model_validate(bind_args(guaranteed, "r")))
    assert out["Error"] == f"cannot bind: {reply['FailedNodes']['r']}"
    assert state.allocation("uid-g") is None
    frac = {RESOURCE_GPU: "5", "cpu": "3500m", "memory": "8Gi"}
    burst = gpu_pod("f", resources={"limits": frac, "requests": dict(frac)})
    assert filter_names(ext, burst, ["r"])["NodeNames"] == ["r"]
    # with pod-level resources the CPU manager has no preference (PodLevelResourceManagers
    # is alpha, off): the same Guaranteed pod adds no CPU hints and is admitted
    pod_level = gpu_pod("pl", resources={"limits": limits, "requests": dict(limits)})
    pod_level["spec"]["resources"] = {"limits": {"cpu": "4", "memory": "8Gi"},
                                      "requests": {"cpu": "4", "memory": "8Gi"}}
    assert filter_names(ext, pod_level, ["r"])["NodeNames"] == ["r"]


def test_several_gpu_containers_under_the_container_scope_are_refused() -> None:
    state = MemoryState()
    state.add_node("c", DGX1, kubelet=SNN)
    state.add_node("p", DGX1, kubelet=KubeletConfig("single-numa-node", "pod"))
    pod = gpu_pod("two", 1)
    second = {"name": "side", "image": "x", "resources": {"limits": {RESOURCE_GPU: "1"}}}
    pod["spec"]["containers"].append(second)
    reply = filter_names(Extender(state, "gputopo"), pod, ["c", "p"])
    assert reply["NodeNames"] == ["p"]
    assert "topologyManagerScope pod" in reply["FailedAndUnresolvableNodes"]["c"]


def test_a_colocation_slot_goes_where_the_kubelet_offers_slots() -> None:
    """gputopo.io/gpu-shared: GPUs 0-3 held whole keep their slots free to the kubelet, which
    therefore offers a slot pod only NUMA 0's slots under single-numa-node: ``snn`` is
    refused with the reason; on ``plain`` the co-location policy places it on GPU 4-7."""
    state = two_nodes(busy=(0, 1, 2, 3))
    ext = Extender(state, "gputopo")
    limits = {"gputopo.io/gpu-shared": "1"}
    pod = gpu_pod("slot", resources={"limits": limits, "requests": dict(limits)},
                  annotations={"gputopo.io/profile": "resnet18:64"})
    reply = filter_names(ext, pod, ["snn", "plain"])
    assert reply["NodeNames"] == ["plain"]
    assert "co-location slot" in reply["FailedNodes"]["snn"]
    assert ext.bind(ExtenderBindingArgs.model_validate(bind_args(pod, "plain"))) == \
        {"Error": ""}
    alloc = state.allocation("uid-slot")
    assert alloc is not None and alloc.gpus[0] in {4, 5, 6, 7}


def test_preemption_judges_the_node_as_its_kubelet_would() -> None:
    """Victims freeing one GPU on each NUMA node do not help a 2-GPU pod on a
    single-numa-node node; victims freeing two on one node do."""
    from scheduler_extender.preemption import Preemption, Victim, VictimSet
    from scheduler_extender.state import Allocation, PodRef

    def victims(*uids: str) -> VictimSet:
        return VictimSet(tuple(Victim(u, frozenset({u})) for u in uids))

    state = MemoryState()
    state.add_node("snn", DGX1, kubelet=SNN)
    for g in range(8):
        state.book.add(Allocation(PodRef("default", f"v{g}", f"v{g}"), "snn", (g,)), DGX1)
    decider = Decider(state)
    judge = Preemption(decider)
    ask = Ask(Request(2), "gputopo")
    across = judge.judge(ask, {"snn": victims("v0", "v4")})
    same = judge.judge(ask, {"snn": victims("v0", "v1")})
    assert not across[0].keep and "TopologyAffinityError" in across[0].reason
    assert same[0].keep


# ------------------------------------------------------------------ the Kubernetes backend
@pytest.fixture
def kube() -> Iterator[tuple[FakeKubeAPI, KubernetesState]]:
    api = FakeKubeAPI()
    api.add_node("snn", DGX1)
    api.nodes["snn"]["metadata"]["labels"] = kubelet_config_labels(SNN)
    api.add_node("plain", DGX1)
    state = KubernetesState(api, watch_timeout_s=1)
    state.start()
    yield api, state
    api.close()
    state.stop()


def test_kubernetes_state_reads_the_labels(kube: tuple[FakeKubeAPI, KubernetesState]) -> None:
    api, state = kube
    assert state.node_kubelet_config("snn") == SNN
    assert state.node_kubelet_config("plain") == KubeletConfig()
    changed = dict(api.nodes["snn"])
    changed["metadata"] = {**changed["metadata"],
                           "labels": {LABEL_TOPOLOGY_MANAGER_POLICY: "restricted",
                                      LABEL_CPU_MANAGER_POLICY: "static"}}
    state.apply_node_event("MODIFIED", changed)
    assert state.node_kubelet_config("snn") == KubeletConfig("restricted",
                                                             cpu_manager_policy="static")
    state.apply_node_event("DELETED", changed)
    assert state.node_kubelet_config("snn") == KubeletConfig()


# ------------------------------------------------------------------ the property
def kubelet_accepts(topology: Any, state: NodeState, request: Request, config: KubeletConfig,
                    demand: PodDemand, gpus: tuple[int, ...]) -> bool:
    """:func:`topology.numa_alignment.kubelet_hands_over` (the device manager run device by
    device, an independent path to the extender's constraint)."""
    return kubelet_hands_over(topology, state, request, config, gpus, demand)


def assert_aligned_first(topo: Any, mask: int, free: frozenset[int],
                         gpus: tuple[int, ...]) -> None:
    """The device manager's ``devicesToAllocate``: the GPUs lie on the merged mask when its
    free GPUs can hold them; when they cannot (a hint best-effort admits although it is not
    preferred), every free GPU of the mask is among them and the rest come from elsewhere."""
    on_mask = {g for g in range(topo.size) if mask >> (topo.gpus[g].numa_node or 0) & 1}
    if len(on_mask & free) >= len(gpus):
        assert set(gpus) <= on_mask
    else:
        assert on_mask & free <= set(gpus)


def test_best_effort_mask_too_small_takes_its_gpus_first() -> None:
    """Found by the property below: DGX A100 with GPUs 2 and 3 (NUMA 1) busy, 3 GPUs and
    2 exclusive CPUs asked, best-effort. The merged hint is NUMA {1,3}, not preferred (its only
    free GPUs are 0 and 1); best-effort admits it, the device manager hands over 0 and 1 and
    one more GPU, and the extender predicts exactly that."""
    config = KubeletConfig(POLICY_BEST_EFFORT, "container", "static")
    demand = PodDemand(2, 2, 1)
    state = MemoryState()
    state.add_node("n", A100, kubelet=config)
    from scheduler_extender.state import Allocation, PodRef

    for g in (2, 3):
        state.book.add(Allocation(PodRef("default", f"h{g}", f"h{g}"), "n", (g,), 0, 0), A100)
    request = Request(3)
    row = Decider(state).decide(Ask(request, "gputopo", demand=demand), [Candidate("n")])[0]
    assert row.outcome.decision is not None
    gpus = tuple(row.outcome.decision.gpus)
    a = align(A100, state.node_state("n"), request, config, demand)
    assert a.admitted and a.hint.mask is not None and not a.hint.preferred
    assert {0, 1} < set(gpus) and len(gpus) == 3
    assert_aligned_first(A100, a.hint.mask, a.eligible, gpus)
    assert kubelet_accepts(A100, state.node_state("n"), request, config, demand, gpus)


def test_bind_takes_the_gpus_filter_chose_where_best_effort_takes_its_mask_first() -> None:
    """The scene above through the verbs: a Guaranteed pod with 2 whole CPUs asks 3 GPUs of a
    best-effort DGX A100 whose merged mask holds only 2 free GPUs. Filter passes the node with
    the policy's choice completing the mask's GPUs; bind, deciding again on its own — here with
    the decision caches emptied in between (bounded: a busy extender forgets) — must bind
    exactly those GPUs: not refuse the pod, nor choose others."""
    config = KubeletConfig(POLICY_BEST_EFFORT, "container", "static")
    state = MemoryState()
    state.add_node("n", A100, kubelet=config)
    from scheduler_extender.state import Allocation, PodRef

    for g in (2, 3):
        state.book.add(Allocation(PodRef("default", f"h{g}", f"h{g}"), "n", (g,), 0, 0), A100)
    limits = {RESOURCE_GPU: "3", "cpu": "2", "memory": "8Gi"}
    pod = gpu_pod("trio", resources={"limits": limits, "requests": dict(limits)})
    assert pod_demand(pod) == PodDemand(2, 2, 1)
    ext = Extender(state, "gputopo")
    assert filter_names(ext, pod, ["n"])["NodeNames"] == ["n"]
    (row,) = Decider(state).decide(Ask(Request(3), "gputopo", demand=pod_demand(pod)),
                                   [Candidate("n")])
    assert row.outcome.decision is not None
    ext.decider.clear_caches()
    assert ext.bind(ExtenderBindingArgs.model_validate(bind_args(pod, "n"))) == {"Error": ""}
    bound = state.allocation("uid-trio")
    assert bound is not None and bound.gpus == row.outcome.decision.gpus
    assert {0, 1} < set(bound.gpus)


def test_each_policy_completes_a_best_effort_mask_its_own_way() -> None:
    """A best-effort DGX A100 with GPUs 1-3 busy and a Guaranteed pod asking 3 GPUs and 8
    CPUs: the kubelet takes GPU 0 (its merged mask's) whatever the plugin says, and the rest
    is the pod's policy's choice — gputopo and topo-aware complete it differently. One decider
    deciding the same request for both policies, in either order, gives each its own
    completion, as a fresh decider does (the cached completion is the policy's, not the
    request's)."""
    config = KubeletConfig(POLICY_BEST_EFFORT, "container", "static")
    demand = PodDemand(8, 8, 1)
    from scheduler_extender.state import Allocation, PodRef

    def state() -> MemoryState:
        s = MemoryState()
        s.add_node("n", A100, kubelet=config)
        for g in (1, 2, 3):
            s.book.add(Allocation(PodRef("default", f"h{g}", f"h{g}"), "n", (g,), 0, 0), A100)
        return s

    def gpus(decider: Decider, policy: str) -> tuple[int, ...]:
        (row,) = decider.decide(Ask(Request(3), policy, demand=demand), [Candidate("n")])
        assert row.outcome.decision is not None, row.outcome.reason
        return tuple(row.outcome.decision.gpus)

    alone = {p: gpus(Decider(state()), p) for p in ("gputopo", "topo-aware")}
    assert alone["gputopo"] != alone["topo-aware"]
    assert all(0 in g for g in alone.values())
    for order in (("gputopo", "topo-aware"), ("topo-aware", "gputopo")):
        shared = Decider(state())
        assert {p: gpus(shared, p) for p in order} == alone


@st.composite
def scenes(draw: st.DrawFn) -> tuple[Any, NodeState, Request, KubeletConfig, PodDemand]:
    topo = draw(st.sampled_from([DGX1, A100]))
    usage: dict[int, GPUUsage] = {}
    for g in range(topo.size):
        kind = draw(st.sampled_from(["idle", "idle", "whole", "share"]))
        if kind == "whole":
            usage[g] = GPUUsage(FULL_CORE, 0)
        elif kind == "share":
            usage[g] = GPUUsage(draw(st.integers(10, 90)), 256 * draw(st.integers(1, 20)))
    state = NodeState(usage)
    if draw(st.booleans()):
        request = Request(draw(st.integers(1, 5)))
    else:
        request = Request(0, core_percent=draw(st.integers(5, 60)),
                          memory_mib=256 * draw(st.integers(0, 8)))
    config = KubeletConfig(draw(st.sampled_from(TOPOLOGY_MANAGER_POLICIES)),
                           draw(st.sampled_from(["container", "pod"])),
                           draw(st.sampled_from(["none", "static"])))
    cpus = draw(st.sampled_from([0, 0, 2, 8]))
    return topo, state, request, config, PodDemand(cpus, cpus, 1)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes(), st.sampled_from(["gputopo", "baseline", "gaia", "mapa-preserve",
                                  "topo-aware"]))
def test_every_decision_is_one_the_kubelet_accepts(
    scene: tuple[Any, NodeState, Request, KubeletConfig, PodDemand], policy: str,
) -> None:
    """For any state, request, kubelet settings and policy: when the extender places the pod
    on a node whose kubelet aligns NUMA, its GPUs lie on the kubelet's predicted mask and the
    device manager (modelled) hands exactly them to the plugin; when the kubelet would reject
    the pod, the extender refuses the node."""
    topo, node_state, request, config, demand = scene
    state = MemoryState()
    state.add_node("n", topo, kubelet=config)
    for g, u in node_state.usage.items():
        from scheduler_extender.state import Allocation, PodRef

        whole = u.core_percent == FULL_CORE and u.memory_mib == 0
        state.book.add(Allocation(PodRef("default", f"h{g}", f"h{g}"), "n", (g,),
                                  0 if whole else u.core_percent, 0 if whole else u.memory_mib,
                                  fractional=not whole), topo)
    if request.fractional and policy == "topo-aware":
        policy = "gputopo"
    decider = Decider(state)
    try:
        row = decider.decide(Ask(request, policy, demand=demand), [Candidate("n")])[0]
    except Exception as exc:  # a request the policy finds invalid is not the point here
        from scheduler_extender.decision import BadRequest

        assert isinstance(exc, BadRequest)
        return
    decision = row.outcome.decision
    a = align(topo, state.node_state("n"), request, config, demand)
    if decision is None:
        return
    assert a.admitted, a.reason
    gpus = tuple(decision.gpus)
    assert set(gpus) <= a.eligible
    if a.hint.mask is not None and config.aligning:
        assert_aligned_first(topo, a.hint.mask, a.eligible, gpus)
    assert kubelet_accepts(topo, state.node_state("n"), request, config, demand, gpus)
    exact = decider.decide_exact(Ask(request, policy, demand=demand), decider.bind_view("n"))
    assert exact.decision is not None and exact.decision.gpus == decision.gpus


def test_the_property_can_fail() -> None:
    """Without the constraint the kubelet refuses some of gputopo's choices (GPU 4 busy, a
    2-GPU pod: 6,7 are not offered under single-numa-node)."""
    state = NodeState.whole([4])
    assert not kubelet_accepts(DGX1, state, Request(2), SNN, PodDemand(), (6, 7))
    assert kubelet_accepts(DGX1, state, Request(2), SNN, PodDemand(), (0, 1))


def test_a_random_stream_never_lands_off_the_mask() -> None:
    """300 pods arriving and leaving on two single-numa-node DGX A100 nodes: every bound pod's
    GPUs are ones the kubelet would hand it at that moment. (A DGX A100 has two GPUs per NUMA
    node, so single-numa-node never admits a pod of 3 or more GPUs: those are refused.)"""
    rng = random.Random(3)
    state = MemoryState()
    for n in ("a", "b"):
        state.add_node(n, A100, kubelet=SNN)
    ext = Extender(state, "gputopo")
    live: list[str] = []
    placed = 0
    for i in range(300):
        if live and rng.random() < 0.45:
            state.delete_pod("default", live.pop(rng.randrange(len(live))))
        pod = gpu_pod(f"p{i}", rng.choice([1, 1, 2, 2, 3, 4]))
        reply = filter_names(ext, pod, ["a", "b"])
        if not reply["NodeNames"]:
            if int(pod["spec"]["containers"][0]["resources"]["limits"][RESOURCE_GPU]) > 2:
                assert all("no single NUMA node" in why
                           for why in reply["FailedNodes"].values()), reply
            continue
        node = reply["NodeNames"][0]
        before = state.node_state(node)
        count = int(pod["spec"]["containers"][0]["resources"]["limits"][RESOURCE_GPU])
        out = ext.bind(ExtenderBindingArgs.model_validate(bind_args(pod, node)))
        assert out == {"Error": ""}
        alloc = state.allocation(f"uid-p{i}")
        assert alloc is not None
        assert kubelet_accepts(A100, before, Request(count), SNN, PodDemand(), alloc.gpus)
        live.append(f"p{i}")
        placed += 1
    assert placed > 100
