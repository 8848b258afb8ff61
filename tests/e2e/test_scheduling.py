"""End to end: GPU pods through the real kube-scheduler, the real extender and the API server.

One control plane per module (etcd, kube-apiserver, kwok, kube-scheduler running the Helm
chart's KubeSchedulerConfiguration, ``gputopo extender --state kubernetes`` as a child
process) with kwok GPU nodes carrying catalog topologies: two DGX-1 V100, one DGX A100, one
8-GPU PCIe box, and a tainted fifth DGX-1 V100 whose topology the real device plugin publishes
(``--fake-topology dgx1-v100``) and whose kubelet is the stand-in of
``tests/device_plugin/kubelet_stub.py``.

Every test starts and ends with no pods and the extender seeing every node idle. Checks go
through :func:`localcluster.gpucluster.booking_problems` (annotations parse, name real GPUs of
the node, nothing handed out twice, shares within one GPU) plus what each test is about.
Skipped only when the control-plane binaries or helm cannot be had.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from device_plugin.identity import ANN_ALLOCATED
from gputopo_cli.cluster_demo import gpu_pod
from gputopo_cli.demo import make_stream
from localcluster import Binaries, ControlPlane, ManagedProcess
from localcluster.controlplane import wait_until
from localcluster.gpucluster import (
    GpuCluster,
    GpuPod,
    Placement,
    booking_problems,
    gpu_capacity,
    gputopo_command,
    node_state,
    placement_of,
    pod_annotations,
    pod_node,
)
from scheduler_extender.podspec import request_from_pod
from tests.device_plugin.kubelet_stub import KubeletStub, remove_tree, short_tmpdir
from topology import catalog, serialization
from topology.contract import (
    ANN_CPU_AFFINITY,
    ANN_CUDA_VISIBLE_DEVICES,
    ANN_NUMA_NODES,
    ANN_POLICY_USED,
    ANN_TOPOLOGY,
    ANN_VGPU_MEMORY,
    LABEL_GPU_MODEL,
    LABEL_TOPOLOGY_CLASS,
    MANAGED_RESOURCES,
    RESOURCE_GPU,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
)
from topology.model import Topology
from topology.policies.evaluate import Evaluator

#: This module's own evaluator (decision cache and policy memo; nothing shared).
place = Evaluator().place

# A cold build of the binaries can happen inside the first test: allow for it.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]

POLICY = "gputopo"
NODES = {"dgx-0": "dgx1-v100", "dgx-1": "dgx1-v100", "a100-0": "dgx-a100", "pcie-0": "pcie-8gpu"}
DP_NODE = "dp-dgx-0"
DP_TAINT = {"key": "gputopo.io/e2e-device-plugin", "value": "true", "effect": "NoSchedule"}
DP_UNIT_MIB = 256  # the plugin's default vGPU-memory unit
WAIT_S = 90.0  # bounds every wait (kube-scheduler's pod backoff tops out at 10 s)


def on(node: str) -> dict[str, str]:
    return {"kubernetes.io/hostname": node}


def dp_pod(name: str, **fields: Any) -> GpuPod:
    """A pod for the device-plugin node (its selector and toleration)."""
    return GpuPod(name, node_selector=on(DP_NODE), tolerations=[DP_TAINT], **fields)


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def cluster(binaries: Binaries) -> Iterator[GpuCluster]:
    with ControlPlane(binaries) as cp, GpuCluster(cp, policy=POLICY) as gc:
        gc.start(NODES.items())
        yield gc


def _wait_idle(gc: GpuCluster) -> None:
    names = list(NODES)
    wait_until(lambda: gc.extender.idle_nodes(names) == set(names), 30,
               "the extender to see every node idle")  # fmt: skip


@pytest.fixture(autouse=True)
def clean(cluster: GpuCluster) -> Iterator[None]:
    """Each test starts and leaves with no pods and every node idle in the extender's eyes."""
    _wait_idle(cluster)
    yield
    if cluster.extender.process is None or cluster.extender.process.exited():
        cluster.extender.start()  # a test died with the extender down
    cluster.delete_all_pods()
    _wait_idle(cluster)


def _bound_placements(gc: GpuCluster) -> list[dict[str, Any]]:
    pods = list(gc.pods_by_name().values())
    problems = booking_problems(pods, gc.nodes)
    assert not problems, "\n".join(problems)
    return pods


def _nvlink_ring(topo: Topology, gpus: set[int]) -> bool:
    """Some cyclic order of ``gpus`` joins every neighbour pair by NVLink."""
    first, *rest = sorted(gpus)
    return any(
        all(topo.nvlinks(a, b) > 0 for a, b in zip(order, order[1:] + order[:1], strict=True))
        for order in ([first, *perm] for perm in itertools.permutations(rest))
    )


def _wait_failed_scheduling(gc: GpuCluster, pod: str) -> str:
    return wait_until(lambda: " | ".join(gc.scheduling_events(pod)), WAIT_S,
                      f"a FailedScheduling event for {pod}")  # fmt: skip


# ---------------------------------------------------------------------------- scheduling
MIXED = [
    GpuPod("a2a-5", gpus=5, pattern="all-to-all", sensitive=True),
    GpuPod("ring-4", gpus=4, pattern="ring", sensitive=True),
    GpuPod("tree-3", gpus=3, pattern="tree", sensitive=True),
    GpuPod("edges-3", gpus=3, pattern="0-1,1-2", sensitive=False),
    GpuPod("pair-2", gpus=2, pattern="pair", sensitive=True),
    GpuPod("ring-2-insensitive", gpus=2, pattern="ring", sensitive=False),
    GpuPod("one-a", gpus=1),
    GpuPod("one-b", gpus=1, sensitive=False),
    GpuPod("share-25", core_percent=25, memory_mib=2048),
    GpuPod("share-50", core_percent=50, memory_mib=8192),
    GpuPod("share-30", core_percent=30, memory_mib=4096),
    GpuPod("share-40", core_percent=40, memory_mib=3072),
]


def test_mixed_gpu_pods_are_placed_by_the_extender_consistently(cluster: GpuCluster) -> None:
    for p in MIXED:
        cluster.create_pod(p)
    names = [p.name for p in MIXED]
    running = cluster.wait_pods(
        names, lambda p: pod_node(p) is not None and p["status"].get("phase") == "Running",
        WAIT_S, "pods bound and Running",
    )  # fmt: skip
    pods = _bound_placements(cluster)
    assert set(names) <= {p["metadata"]["name"] for p in pods}
    for p in MIXED:
        pod = running[p.name]
        assert pod["spec"]["schedulerName"] == "gputopo-scheduler"
        ann = pod_annotations(pod)
        assert ann[ANN_POLICY_USED] == POLICY, ann
        pl = placement_of(pod)
        assert pl is not None
        if p.gpus > 1:
            assert pl.assignment.effective_bandwidth_gbps > 0, ann
        if p.fractional:  # kwok nodes publish 1 MiB units: granted == asked
            assert (pl.assignment.core_percent, pl.assignment.memory_mib) == (
                p.core_percent, p.memory_mib)
    # every node got work: the mix is spread over DGX-1, DGX A100 and PCIe machines
    used = {pod_node(running[n]) for n in names}
    assert len(used) >= 2, used


SEQUENCES = {
    "dgx-0": [
        GpuPod("ring-4", gpus=4, pattern="ring", sensitive=True),
        GpuPod("a2a-2", gpus=2, pattern="all-to-all", sensitive=True),
        GpuPod("one", gpus=1),
    ],
    "dgx-1": [
        GpuPod("tree-3", gpus=3, pattern="tree", sensitive=True),
        GpuPod("ring-5", gpus=5, pattern="ring", sensitive=True),
    ],
}


def test_pods_on_dgx1_get_the_gpus_the_policy_promises(cluster: GpuCluster) -> None:
    """Pods pinned to a DGX-1 V100 one after another: each gets exactly what
    ``place("gputopo", topology, state before, request)`` decides, the state being rebuilt
    from the annotations of the pods already there; the first, a 4-GPU ring on an idle node,
    lands on an NVLink-connected quartet."""
    for node, sequence in SEQUENCES.items():
        topo = cluster.nodes[node]
        placed: list[Placement] = []
        for p in sequence:
            pinned = GpuPod(p.name + "-" + node, gpus=p.gpus, pattern=p.pattern,
                            sensitive=p.sensitive, node_selector=on(node))
            cluster.create_pod(pinned)
            pod = cluster.wait_bound([pinned.name], WAIT_S)[pinned.name]
            pl = placement_of(pod)
            assert pl is not None and pl.node == node
            request = request_from_pod(pinned.manifest())
            assert request is not None
            expected = place(POLICY, topo, node_state(placed, node), request)
            assert pl.assignment.gpu_indices == expected.gpus, (pinned.name, expected.reason)
            assert pl.assignment.effective_bandwidth_gbps == pytest.approx(
                expected.effective_bandwidth_gbps, abs=0.05)
            placed.append(pl)
        if node == "dgx-0":
            quartet = set(placed[0].assignment.gpu_indices)
            assert _nvlink_ring(topo, quartet), f"4-GPU ring on {sorted(quartet)}"
    _bound_placements(cluster)


# ---------------------------------------------------------------------------- mixed classes
def _scores(gc: GpuCluster, pod: GpuPod, nodes: list[str]) -> dict[str, int]:
    """The extender's prioritize scores of ``pod`` over ``nodes`` (as kube-scheduler asks)."""
    reply = gc.extender.post("prioritize", {"Pod": pod.manifest(), "NodeNames": nodes})
    return {r["Host"]: r["Score"] for r in reply}


def test_a_sensitive_pod_prefers_the_idle_dgx_in_a_mixed_cluster(cluster: GpuCluster) -> None:
    """DGX-1 V100s, a DGX A100 and an 8-GPU PCIe box, scored on one EffBW scale: a
    bandwidth-sensitive ring goes to the best idle machine, and with only an idle DGX-1 and
    the idle PCIe box left it takes the DGX (scored per class, both were 10); an insensitive
    pod goes the other way, to the PCIe box."""
    everyone = ["dgx-0", "dgx-1", "a100-0", "pcie-0"]
    ring = GpuPod("ring-mixed", gpus=4, pattern="ring", sensitive=True)
    scores = _scores(cluster, ring, everyone)
    assert scores["a100-0"] == 10, scores
    assert scores["a100-0"] > scores["dgx-0"] == scores["dgx-1"] > scores["pcie-0"], scores
    loose = GpuPod("loose-mixed", gpus=2, pattern="ring", sensitive=False)
    loose_scores = _scores(cluster, loose, everyone)
    assert loose_scores["pcie-0"] > max(loose_scores[n] for n in everyone[:3]), loose_scores
    cluster.create_pod(ring)
    cluster.create_pod(loose)
    bound = cluster.wait_bound([ring.name, loose.name], WAIT_S)
    assert pod_node(bound[ring.name]) == "a100-0"
    assert pod_node(bound[loose.name]) == "pcie-0"
    cluster.delete_pods([loose.name])
    # the A100 and one DGX-1 full: the choice, an idle DGX-1 or the idle PCIe box
    fills = [GpuPod("fill-a100", gpus=4, node_selector=on("a100-0")),
             GpuPod("fill-dgx-1", gpus=8, node_selector=on("dgx-1"))]
    for p in fills:
        cluster.create_pod(p)
    cluster.wait_bound([p.name for p in fills], WAIT_S)
    second = GpuPod("ring-mixed-2", gpus=4, pattern="ring", sensitive=True)
    scores = _scores(cluster, second, ["dgx-0", "pcie-0"])
    assert scores["dgx-0"] == 10 and scores["pcie-0"] < 10, scores
    cluster.create_pod(second)
    assert pod_node(cluster.wait_bound([second.name], WAIT_S)[second.name]) == "dgx-0"
    _bound_placements(cluster)


# ---------------------------------------------------------------------------- pending, freed
def test_pods_that_cannot_fit_stay_pending_with_a_reason_until_gpus_are_freed(
    cluster: GpuCluster,
) -> None:
    pcie = on("pcie-0")
    cluster.create_pod(GpuPod("seven", gpus=7, node_selector=pcie))
    cluster.create_pod(GpuPod("share", core_percent=30, memory_mib=1024, node_selector=pcie))
    cluster.wait_bound(["seven", "share"], WAIT_S)
    # kube-scheduler counts one free nvidia.com/gpu on pcie-0; the extender knows the share
    # occupies it
    cluster.create_pod(GpuPod("one", gpus=1, node_selector=pcie))
    cluster.create_pod(GpuPod("nine", gpus=9))
    cluster.create_pod(GpuPod("huge-share", core_percent=50, memory_mib=65536))

    assert "only 0 of 8 GPUs free; the pod asks for 1" in _wait_failed_scheduling(cluster, "one")
    assert "Insufficient nvidia.com/gpu" in _wait_failed_scheduling(cluster, "nine")
    assert "no GPU on the node has 65536 MiB; the largest has 40536 MiB" in (
        _wait_failed_scheduling(cluster, "huge-share"))
    pending = cluster.pods_by_name(["one", "nine", "huge-share"])
    assert all(pod_node(p) is None for p in pending.values())

    cluster.delete_pods(["share"])
    freed = cluster.wait_bound(["one"], WAIT_S)["one"]
    assert pod_node(freed) == "pcie-0"

    # the rest of the cluster full: a 2-GPU pod waits until an 8-GPU pod goes
    fills = [GpuPod(f"fill-{n}", gpus=8, node_selector=on(n)) for n in ("dgx-0", "dgx-1", "a100-0")]
    for p in fills:
        cluster.create_pod(p)
    cluster.wait_bound([p.name for p in fills], WAIT_S)
    cluster.create_pod(GpuPod("late", gpus=2, pattern="ring"))
    assert "Insufficient nvidia.com/gpu" in _wait_failed_scheduling(cluster, "late")
    cluster.delete_pods(["fill-a100-0"])
    late = cluster.wait_bound(["late"], WAIT_S)["late"]
    assert pod_node(late) == "a100-0"
    assert pod_node(cluster.pods_by_name(["nine"])["nine"]) is None
    _bound_placements(cluster)


# ---------------------------------------------------------------------------- restart
def _stream() -> list[GpuPod]:
    """``gputopo demo``'s seeded stream, cut where it could stop fitting (≤ 15 GPUs held
    by whole GPUs or shares: some node always has 5 free)."""
    out: list[GpuPod] = []
    held = 0
    for d in make_stream(40, seed=7):
        p = gpu_pod(d)
        held += p.gpus or 1
        if held > 15:
            return out
        out.append(p)
    return out


def _assert_extender_state_matches_annotations(cluster: GpuCluster) -> None:
    """The extender's free-GPU count per node (``/filter`` probes) equals what the pods'
    annotations leave free."""
    placements = [pl for p in cluster.pods_by_name().values() if (pl := placement_of(p))]
    for node, topo in cluster.nodes.items():
        if node == DP_NODE:
            continue
        free = len(node_state(placements, node).free_gpus(topo))
        if free:
            assert node in cluster.extender.idle_nodes([node], gpus=free), (node, free)
        if free < topo.size:
            assert node not in cluster.extender.idle_nodes([node], gpus=free + 1), (node, free)


def test_extender_restart_mid_stream_double_books_nothing(cluster: GpuCluster) -> None:
    stream = _stream()
    assert len(stream) >= 7
    first, during, after = stream[:4], stream[4:6], stream[6:]
    for p in first:
        cluster.create_pod(p)
    cluster.wait_bound([p.name for p in first], WAIT_S)
    old_pid = cluster.extender.pid
    cluster.extender.kill()  # by PID, SIGKILL: no goodbye
    for p in during:  # kube-scheduler cannot reach the extender: these wait
        cluster.create_pod(p)
    assert "connection refused" in _wait_failed_scheduling(cluster, during[0].name).lower()
    cluster.extender.start()
    assert cluster.extender.pid != old_pid
    # kube-scheduler retries the waiting pods as soon as the extender answers; compare once
    # they are bound, not while one may be bound between the pod listing and the probes
    cluster.wait_bound([p.name for p in during], WAIT_S)
    _assert_extender_state_matches_annotations(cluster)  # rebuilt from the annotations
    for p in after:
        cluster.create_pod(p)
    cluster.wait_bound([p.name for p in stream], WAIT_S)
    _bound_placements(cluster)
    _assert_extender_state_matches_annotations(cluster)


# ---------------------------------------------------------------------------- quantities
def test_round_memory_quantity_is_read_not_rejected(cluster: GpuCluster) -> None:
    """The API server canonicalises 1000 to "1k": the extender reads it as 1000 units
    (256,000 MiB) and explains that no GPU has that much, instead of failing to parse."""
    cluster.create_pod(GpuPod("share-1k", core_percent=25, memory_mib=1000 * 256))
    events = wait_until(lambda: cluster.scheduling_events("share-1k"), WAIT_S,
                        "share-1k refused")
    text = " ".join(events)
    assert "256000 MiB" in text, text
    assert "quantity" not in text, text


# ---------------------------------------------------------------------------- device plugin
@dataclass
class PluginNode:
    kubelet: KubeletStub
    process: ManagedProcess
    topology: Topology
    capacity: dict[str, str]


@pytest.fixture(scope="module")
def plugin_node(cluster: GpuCluster) -> Iterator[PluginNode]:
    """The device plugin (``--fake-topology dgx1-v100``) for node :data:`DP_NODE`, registered
    with the kubelet stand-in; the node's capacity is then set from the plugin's device
    lists, as the kubelet does."""
    cp = cluster.cp
    cp.add_kwok_node(DP_NODE, {"cpu": 80, "memory": "512Gi"})
    cluster.core.patch_node(DP_NODE, {"spec": {"taints": [DP_TAINT]}})
    workdir = short_tmpdir()
    kubelet = KubeletStub(workdir)
    kubelet.start()
    proc = ManagedProcess(
        "device-plugin",
        gputopo_command() + [
            "device-plugin", "--fake-topology", "dgx1-v100", "--node-name", DP_NODE,
            "--device-plugin-dir", str(workdir), "--kubeconfig", str(cp.kubeconfig_path),
            "--pod-resources-socket", str(kubelet.pod_resources_socket),
            "--metrics-port", "0", "--watch-interval", "0.2",
        ],
        cp.workdir / "logs" / "device-plugin.log",
    ).start()  # fmt: skip
    try:
        kubelet.wait_registered(MANAGED_RESOURCES, timeout=60)
        counts = {}
        for r in MANAGED_RESOURCES:
            kubelet.watch(r)
            counts[r] = str(len(kubelet.wait_devices(r, lambda ds: len(ds) > 0)))

        def published() -> str | None:
            ann = cluster.read_node(DP_NODE)["metadata"].get("annotations") or {}
            return ann.get(ANN_TOPOLOGY)

        topo = serialization.loads(wait_until(published, 60, "the plugin to publish its topology"))
        cluster.nodes[DP_NODE] = topo
        status = {"capacity": {"cpu": "80", "memory": "512Gi", "pods": "110", **counts}}
        status["allocatable"] = dict(status["capacity"])
        cluster.core.patch_node_status(DP_NODE, {"status": status})
        yield PluginNode(kubelet, proc, topo, counts)
    except BaseException:
        print(proc.log_tail(60))
        raise
    finally:
        proc.stop()
        kubelet.stop()
        remove_tree(workdir)


def test_device_plugin_publishes_the_topology_and_capacity(
    cluster: GpuCluster, plugin_node: PluginNode
) -> None:
    node = cluster.read_node(DP_NODE)
    ann, labels = node["metadata"]["annotations"], node["metadata"]["labels"]
    expected = catalog.get("dgx1-v100")
    # a fake node keeps the catalog name: byte-identical to the catalog entry
    assert ann[ANN_TOPOLOGY] == serialization.dumps(expected)
    assert ann["gputopo.io/vgpu-memory-unit-mib"] == str(DP_UNIT_MIB)
    assert labels[LABEL_TOPOLOGY_CLASS] == expected.topology_class
    assert labels[LABEL_GPU_MODEL] == "Tesla-V100-SXM2-16GB"
    # the kubelet's capacity from the plugin's devices is what kwok GPU nodes are given
    assert plugin_node.capacity == gpu_capacity(expected, DP_UNIT_MIB)
    assert {r: node["status"]["allocatable"][r] for r in MANAGED_RESOURCES} == plugin_node.capacity


def test_device_plugin_allocate_returns_what_the_scheduler_annotated(
    cluster: GpuCluster, plugin_node: PluginNode
) -> None:
    pods = [dp_pod("dp-ring", gpus=4, pattern="ring", sensitive=True), dp_pod("dp-pair", gpus=2)]
    for p in pods:
        cluster.create_pod(p)
    bound = cluster.wait_bound([p.name for p in pods], WAIT_S)
    _bound_placements(cluster)
    kubelet = plugin_node.kubelet
    try:
        for p in pods:  # the kubelet admits in creation order
            ann = pod_annotations(bound[p.name])
            pl = placement_of(bound[p.name])
            assert pl is not None and pl.node == DP_NODE
            resp = kubelet.admit_pod(cluster.namespace, p.name, {RESOURCE_GPU: p.gpus})
            envs = dict(resp[RESOURCE_GPU].envs)
            uuids = ",".join(pl.assignment.gpu_uuids)
            assert envs["CUDA_VISIBLE_DEVICES"] == ann[ANN_CUDA_VISIBLE_DEVICES] == uuids
            assert envs["NVIDIA_VISIBLE_DEVICES"] == uuids
            assert envs["GPUTOPO_CPU_AFFINITY"] == ann[ANN_CPU_AFFINITY]
            assert envs["GPUTOPO_NUMA_NODES"] == ann[ANN_NUMA_NODES]
            # GetPreferredAllocation proposed, and Allocate took, exactly the annotated GPUs
            key = (cluster.namespace, p.name, "main", RESOURCE_GPU)
            assert kubelet.assigned[key] == set(pl.assignment.gpu_uuids)
        ring = placement_of(cluster.pods_by_name(["dp-ring"])["dp-ring"])
        assert ring is not None
        assert _nvlink_ring(plugin_node.topology, set(ring.assignment.gpu_indices))
        for p in pods:  # the plugin recorded each allocation on its pod
            assert ANN_ALLOCATED in pod_annotations(cluster.pods_by_name([p.name])[p.name])
    finally:
        for p in pods:
            kubelet.forget_pod(cluster.namespace, p.name)


def test_device_plugin_allocates_a_share_in_memory_units(
    cluster: GpuCluster, plugin_node: PluginNode
) -> None:
    units = 16  # 4 GiB at 256 MiB per unit (docs/device-plugin.md)
    pod = dp_pod("dp-share", core_percent=50, memory_mib=units * DP_UNIT_MIB)
    cluster.create_pod(pod)
    bound = cluster.wait_bound([pod.name], WAIT_S)[pod.name]
    kubelet = plugin_node.kubelet
    try:
        assert pod_annotations(bound)[ANN_VGPU_MEMORY] == str(units * DP_UNIT_MIB)
        resp = kubelet.admit_pod(cluster.namespace, pod.name,
                                 {RESOURCE_VGPU_CORE: 50, RESOURCE_VGPU_MEMORY: units})
        envs = dict(resp[RESOURCE_VGPU_MEMORY].envs)
        assert envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={units * DP_UNIT_MIB}M"
    finally:
        kubelet.forget_pod(cluster.namespace, pod.name)
