"""End to end: GPU pods through the real kube-scheduler (the chart's configuration), the real
extender and kwok nodes whose device plugins publish ``topologyManagerPolicy:
single-numa-node`` with the static CPU manager (``gputopo.io/topology-manager-policy`` …
labels, as ``gpunode.publish.node_metadata`` writes them).

There is no kubelet here, so the kubelet's part is the model
(:func:`topology.numa_alignment.kubelet_hands_over`, held to the real 1.36 kubelet code in
tests/topology/test_numa_alignment_kubelet.py): for every pod bound, in the order bound, with
the node's state as the bound pods' annotations left it, the kubelet admits the pod and hands
its container exactly the GPUs (or the one GPU's units) gputopo chose. A pod no single NUMA node
can hold stays Pending with the kubelet's reason in its FailedScheduling event.

Skipped only when the control-plane binaries or helm cannot be had.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from localcluster import Binaries, ControlPlane
from localcluster.controlplane import wait_until
from localcluster.gpucluster import (
    GpuCluster,
    GpuPod,
    Placement,
    booking_problems,
    node_state,
    placement_of,
    pod_node,
)
from scheduler_extender.podspec import pod_demand, request_from_pod
from topology.contract import LABEL_TOPOLOGY_MANAGER_POLICY
from topology.numa_alignment import KubeletConfig, align, kubelet_hands_over

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]

NODES = {"snn-dgx-0": "dgx1-v100", "snn-dgx-1": "dgx1-v100", "snn-a100": "dgx-a100"}
KUBELET = KubeletConfig("single-numa-node", "container", "static")
WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(binaries: Binaries) -> Iterator[GpuCluster]:
    with ControlPlane(binaries) as cp, GpuCluster(cp, policy="gputopo") as gc:
        gc.start(NODES.items(), kubelet=dict.fromkeys(NODES, KUBELET))
        yield gc


def sees(cluster: GpuCluster, live: Mapping[str, Placement]) -> bool:
    """The extender's view of every node is what the ``live`` placements leave. (Its usual
    probe, an 8-GPU pod, is refused on these nodes whatever their state; a 5-GPU probe is
    refused too, naming the free GPUs per NUMA node as the kubelet counts them, which is what
    is compared.)"""
    probe = GpuPod("state-probe", gpus=5).manifest()
    reply = cluster.extender.post("filter", {"Pod": probe, "NodeNames": list(NODES)})
    for name in NODES:
        topo = cluster.nodes[name]
        busy = node_state(live.values(), name)
        per: dict[int | None, int] = {}
        for g in topo.gpus:
            per.setdefault(g.numa_node, 0)
            if g.index not in busy.usage:
                per[g.numa_node] += 1
        free = ", ".join(f"{n}: {c}" for n, c in sorted(per.items(), key=lambda kv: kv[0] or 0)
                         if c)
        if f"free per NUMA node: {free})" not in (reply.get("FailedNodes") or {}).get(name, ""):
            return False
    return True


def idle(cluster: GpuCluster) -> bool:
    """The extender sees every node idle."""
    return sees(cluster, {})


@pytest.fixture(autouse=True)
def clean(cluster: GpuCluster) -> Iterator[None]:
    yield
    cluster.delete_all_pods()
    wait_until(lambda: idle(cluster), 30, "the extender to see every node idle")


def manifest(cluster: GpuCluster, pod: GpuPod, cpus: int) -> dict[str, Any]:
    """``pod`` as a Guaranteed pod with ``cpus`` whole CPUs (0: Burstable, 10m CPU)."""
    body = pod.manifest(cluster.namespace, cluster.scheduler_name)
    res = body["spec"]["containers"][0]["resources"]
    if cpus:
        res["limits"] = {**res["limits"], "cpu": str(cpus), "memory": "1Gi"}
        res["requests"] = dict(res["limits"])
    return body


def create(cluster: GpuCluster, body: dict[str, Any]) -> None:
    cluster.core.create_namespaced_pod(cluster.namespace, body)


def test_published_labels_reach_the_api(cluster: GpuCluster) -> None:
    for name in NODES:
        labels = cluster.read_node(name)["metadata"]["labels"]
        assert labels[LABEL_TOPOLOGY_MANAGER_POLICY] == "single-numa-node"


def test_every_bound_pod_gets_gpus_the_kubelet_hands_over(cluster: GpuCluster) -> None:
    """A seeded stream of 1- and 2-GPU pods (and some 3- and 4-GPU pods, which fit a DGX-1
    NUMA node but no DGX A100 one), half of them Guaranteed with whole CPUs, arriving one at
    a time while earlier ones leave. Each bound pod is checked against the node's state just
    before it (the placements already bound there)."""
    rng = random.Random(14)
    live: dict[str, Placement] = {}
    checked = big = 0
    for i in range(24):
        gone = [n for n in live if rng.random() < 0.3]
        if gone:
            cluster.delete_pods(gone)
            for name in gone:
                del live[name]
            wait_until(lambda: sees(cluster, live), 30, "the extender to see them gone")
        gpus = rng.choice([1, 1, 2, 2, 2, 3, 4])
        pod = GpuPod(f"numa-{i}", gpus=gpus, pattern="ring" if gpus > 2 else None)
        body = manifest(cluster, pod, rng.choice([0, 4]))
        before = {n: node_state(live.values(), n) for n in NODES}
        create(cluster, body)
        bound = cluster.wait_bound([pod.name], WAIT_S)[pod.name]
        pl = placement_of(bound)
        assert pl is not None
        request = request_from_pod(bound)
        assert request is not None
        topo = cluster.nodes[pl.node]
        demand = pod_demand(bound)
        assert kubelet_hands_over(topo, before[pl.node], request, KUBELET,
                                  pl.assignment.gpu_indices, demand), (pod.name, pl, before)
        a = align(topo, before[pl.node], request, KUBELET, demand)
        assert a.hint.mask is not None and all(
            a.hint.mask >> n & 1 for n in pl.assignment.numa_nodes)
        assert len(pl.assignment.numa_nodes) == 1  # single-numa-node: one NUMA node
        if gpus > 2:  # the DGX A100 has 2 GPUs per NUMA node: single-numa-node refuses it
            assert NODES[pl.node] == "dgx1-v100", (pod.name, pl.node)
            big += 1
        live[pod.name] = pl
        checked += 1
    assert checked == 24
    assert big > 0
    pods = cluster.list_pods()
    assert booking_problems(pods, cluster.nodes) == []


def test_a_pod_no_numa_node_can_hold_stays_pending_with_the_reason(
    cluster: GpuCluster,
) -> None:
    """Five GPUs: every node has 8 free, so kube-scheduler's count says yes, but no NUMA node
    holds five, and single-numa-node would reject the pod at admission. The extender fails
    filter on every node with the kubelet's reason; the pod is not bound anywhere."""
    create(cluster, manifest(cluster, GpuPod("numa-five", gpus=5), 0))

    def reasons() -> list[str] | None:
        events = cluster.scheduling_events("numa-five")
        return events if any("no single NUMA node" in e for e in events) else None

    events = wait_until(reasons, WAIT_S, "a FailedScheduling event with the kubelet's reason",
                        interval_s=0.5)
    assert any("TopologyAffinityError" in e for e in events), events
    assert pod_node(cluster.pods_by_name(["numa-five"])["numa-five"]) is None
