"""End to end: co-location slots (``gputopo.io/gpu-shared``, Tabrizian's Algorithm 2) through
the real kube-scheduler (the chart's KubeSchedulerConfiguration, which hands
``gputopo.io/gpu-shared`` to the extender), the real ``gputopo extender --state kubernetes``
and kwok nodes that look as if the device plugin ran on them (``gputopo.io/gpu-shared`` =
3 slots per GPU, ``gputopo.io/gpu-shared-slots: 3``).

Two nodes: ``pair-0`` (two V100 PCIe 32 GB) and ``solo-0`` (one V100 16 GB). Pods name their
job with ``gputopo.io/profile`` (the shipped catalog, ``topology/colocation/data``) and ask
for the ``colocate`` policy (Algorithm 2) with ``gputopo.io/policy``.

* Every shared pod lands on the GPU Algorithm 2 picks: the one whose residents have the
  lowest ΣC in the whole cluster (Eq. 4.3; idle GPUs first), computed here by the core's
  policy from the bound pods' annotations before the pod is created.
* A pod that would push ΣC over the 4·10⁷ threshold (§4.2.4) on every GPU stays Pending, and
  its FailedScheduling event says so; deleting a resident lets it in.
* A GPU takes at most its three slots; deleting a pod frees its slot.
* After an extender restart its state (residents and their profiles) is rebuilt from the
  ``gputopo.io/colocation`` annotations, so the next decision is the same as before.

Each test ends with :func:`localcluster.gpucluster.booking_problems` (no GPU whole and shared,
never more jobs than slots or more memory than the GPU has). Skipped only when the
control-plane binaries or helm cannot be had.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from localcluster import Binaries, ControlPlane
from localcluster.controlplane import wait_until
from localcluster.gpucluster import (
    GpuCluster,
    GpuPod,
    booking_problems,
    node_state,
    placement_of,
    pod_annotations,
    pod_node,
)
from scheduler_extender.podspec import request_from_pod
from topology.colocation.model import DEFAULT_THRESHOLD
from topology.contract import ANN_COLOCATION, ANN_POLICY, ANN_POLICY_USED, parse_assignment
from topology.policies.base import NoFit
from topology.policies.evaluate import Evaluator

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]

NODES = {"pair-0": "v100-pcie-2", "solo-0": "v100-1gpu"}
WAIT_S = 90.0
COLOCATE = {ANN_POLICY: "colocate"}

#: This module's own evaluator (no cache shared with other tests).
place = Evaluator().place


def shared(name: str, profile: str, **fields: Any) -> GpuPod:
    """A co-location pod running ``profile`` under Algorithm 2."""
    return GpuPod(name, shared=True, profile=profile, annotations=COLOCATE, **fields)


@pytest.fixture(scope="module")
def cluster(binaries: Binaries) -> Iterator[GpuCluster]:
    with ControlPlane(binaries) as cp, GpuCluster(cp, policy="gputopo") as gc:
        gc.start(NODES.items())
        yield gc


def _idle(gc: GpuCluster) -> bool:
    return all(gc.extender.idle_nodes([n], gpus=t.size) == {n} for n, t in gc.nodes.items())


@pytest.fixture(autouse=True)
def clean(cluster: GpuCluster) -> Iterator[None]:
    wait_until(lambda: _idle(cluster), 30, "the extender to see every GPU idle")
    yield
    if cluster.extender.process is None or cluster.extender.process.exited():
        cluster.extender.start()
    cluster.delete_all_pods()
    wait_until(lambda: _idle(cluster), 30, "the extender to see every GPU idle")


def _check_bookings(gc: GpuCluster) -> list[dict[str, Any]]:
    pods = gc.list_pods()
    problems = booking_problems(pods, gc.nodes)
    assert not problems, "\n".join(problems)
    return pods


def _algorithm2(gc: GpuCluster, pod: GpuPod) -> tuple[float, dict[str, tuple[int, float]]]:
    """What Algorithm 2 says for ``pod`` on the cluster as the API shows it (the nodes its
    ``nodeSelector`` allows): the lowest ΣC any node offers, and per node that admits the pod
    the GPU it picks and that GPU's ΣC."""
    request = request_from_pod(pod.manifest())
    assert request is not None and request.shared is not None
    placements = [pl for p in gc.list_pods() if (pl := placement_of(p)) is not None]
    only = (pod.node_selector or {}).get("kubernetes.io/hostname")
    picks: dict[str, tuple[int, float]] = {}
    for name, topo in gc.nodes.items():
        if only is not None and name != only:
            continue
        try:
            d = place("colocate", topo, node_state(placements, name), request)
        except NoFit:
            continue
        assert d.colocation is not None
        picks[name] = (d.gpus[0], d.colocation.chosen.sum_c)
    assert picks, f"Algorithm 2 places {pod.name} nowhere"
    return min(c for _, c in picks.values()), picks


def _schedule(gc: GpuCluster, pod: GpuPod) -> tuple[str, int, dict[str, Any]]:
    """Create ``pod``, wait until it is bound, and check it is where Algorithm 2 puts it
    (a GPU of the lowest ΣC; on a node, the GPU the policy picks there)."""
    best, picks = _algorithm2(gc, pod)
    gc.create_pod(pod)
    bound = gc.wait_bound([pod.name], WAIT_S)[pod.name]
    node = pod_node(bound)
    assert node is not None
    a = parse_assignment(pod_annotations(bound))
    gpu = a.gpu_indices[0]
    assert node in picks, (pod.name, node, picks)
    assert (gpu, picks[node][1]) == picks[node] and picks[node][1] == best, (
        f"{pod.name} on {node} GPU {gpu}; Algorithm 2: {picks} (best ΣC {best})")
    assert a.shared and pod_annotations(bound)[ANN_POLICY_USED] == "colocate"
    return node, gpu, json.loads(pod_annotations(bound)[ANN_COLOCATION])


def test_shared_pods_land_where_algorithm2_puts_them(cluster: GpuCluster) -> None:
    """Three jobs take the three idle GPUs (ΣC = 0 first), then each newcomer joins the GPU
    of the lowest ΣC with a free slot: vgg11:64 and vgg11:128 join vgg19:128 (ΣC 1.2·10⁶),
    which is then full; se_resnet18:64 joins resnet18:128 (2.4·10⁶) rather than
    resnet50:64 (5.3·10⁶)."""
    first = [shared("r50", "resnet50:64"), shared("r18", "resnet18:128"),
             shared("v19", "vgg19:128")]
    where = {p.name: _schedule(cluster, p)[:2] for p in first}
    assert len(set(where.values())) == 3  # one job per GPU
    for name in ("v11a", "v11b"):
        node, gpu, doc = _schedule(cluster, shared(name, "vgg11:64" if name == "v11a"
                                                   else "vgg11:128"))
        assert (node, gpu) == where["v19"]
        assert doc["delta"] >= 1.0 and doc["sum_c"] < DEFAULT_THRESHOLD
    node, gpu, doc = _schedule(cluster, shared("se18", "se_resnet18:64"))
    assert (node, gpu) == where["r18"]
    assert doc["residents"] == ["default/r18 (resnet18:128)"]
    _check_bookings(cluster)


def test_a_pod_over_the_threshold_everywhere_stays_pending(cluster: GpuCluster) -> None:
    """resnet50:256 alone holds ΣC = 4.1·10⁷ > 4·10⁷: with one on every GPU no GPU admits
    another job (§4.2.4), so the pod waits with the reason; deleting one frees its GPU."""
    heavy = [shared(f"heavy-{i}", "resnet50:256") for i in range(3)]
    for p in heavy:
        _schedule(cluster, p)
    cluster.create_pod(shared("late", "vgg11:64"))
    events = wait_until(lambda: " | ".join(cluster.scheduling_events("late")), WAIT_S,
                        "a FailedScheduling event for late")
    assert "threshold" in events and "Algorithm 2" in events, events
    assert pod_node(cluster.pods_by_name(["late"])["late"]) is None
    held = {p.name: placement_of(cluster.pods_by_name([p.name])[p.name]) for p in heavy}
    cluster.delete_pods(["heavy-1"])
    bound = cluster.wait_bound(["late"], WAIT_S)["late"]
    freed = held["heavy-1"]
    assert freed is not None
    assert pod_node(bound) == freed.node
    assert parse_assignment(pod_annotations(bound)).gpu_indices == freed.assignment.gpu_indices
    _check_bookings(cluster)


def test_slots_are_bounded_and_freed(cluster: GpuCluster) -> None:
    """solo-0's GPU has 3 slots: a fourth job waits (kube-scheduler counts
    ``gputopo.io/gpu-shared``), and gets in once a resident is deleted."""
    solo = {"kubernetes.io/hostname": "solo-0"}
    for i in range(3):
        cluster.create_pod(shared(f"s{i}", "vgg11:64", node_selector=solo))
    cluster.wait_bound([f"s{i}" for i in range(3)], WAIT_S)
    cluster.create_pod(shared("s3", "vgg11:64", node_selector=solo))
    events = wait_until(lambda: " | ".join(cluster.scheduling_events("s3")), WAIT_S,
                        "a FailedScheduling event for s3")
    assert "gputopo.io/gpu-shared" in events, events
    cluster.delete_pods(["s1"])
    assert pod_node(cluster.wait_bound(["s3"], WAIT_S)["s3"]) == "solo-0"
    pods = _check_bookings(cluster)
    assert sum(1 for p in pods if pod_node(p) == "solo-0") == 3


def test_whole_gpus_and_slots_share_nothing(cluster: GpuCluster) -> None:
    """A whole-GPU pod takes the GPU without residents; a GPU held whole takes no slot."""
    pair = {"kubernetes.io/hostname": "pair-0"}
    node, gpu, _ = _schedule(cluster, shared("job", "vgg19:64", node_selector=pair))
    cluster.create_pod(GpuPod("whole", gpus=1, node_selector=pair))
    w = cluster.wait_bound(["whole"], WAIT_S)["whole"]
    assert parse_assignment(pod_annotations(w)).gpu_indices == (1 - gpu,)
    node2, gpu2, _ = _schedule(cluster, shared("job2", "vgg11:64", node_selector=pair))
    assert (node2, gpu2) == (node, gpu)
    _check_bookings(cluster)


def test_restart_rebuilds_residents_and_profiles(cluster: GpuCluster) -> None:
    """After the extender restarts, residents and their profiles come back from the
    ``gputopo.io/colocation`` annotations: the newcomer still joins the lighter GPU (a
    restart that lost the profiles would see two equal GPUs and take the first)."""
    pair = {"kubernetes.io/hostname": "pair-0"}
    _, g_heavy, _ = _schedule(cluster, shared("heavy", "vgg19:256", node_selector=pair))
    _, g_light, _ = _schedule(cluster, shared("light", "resnet18:64", node_selector=pair))
    assert {g_heavy, g_light} == {0, 1} and g_heavy == 0
    cluster.extender.stop()
    cluster.extender.start()
    _, gpu, doc = _schedule(cluster, shared("newcomer", "vgg11:64", node_selector=pair))
    assert gpu == g_light and doc["residents"] == ["default/light (resnet18:64)"]
    _check_bookings(cluster)
