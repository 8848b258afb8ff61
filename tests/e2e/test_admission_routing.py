"""End to end: a GPU pod that names no scheduler reaches gputopo through the chart's
MutatingAdmissionPolicy, and is bound by the real kube-scheduler + extender with a GPU decision.

Two schedulers run, as in a real cluster: the default one (``default-scheduler``, no extender)
and ``gputopo-scheduler`` (the chart's configuration, the real extender). Without the policy a
GPU pod with no ``schedulerName`` is bound by the default scheduler with no GPU decision (what
the policy is for); with the chart's policy installed the same pod, and the pod a Job
controller creates from a template naming no scheduler, are bound by gputopo with GPUs in their
annotations, while a CPU-only pod still goes to the default scheduler.
Skipped only when the control-plane binaries or helm cannot be had.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client as k8s_client
from kubernetes.dynamic import DynamicClient

from localcluster import Binaries, ControlPlane
from localcluster.chart import render_manifests
from localcluster.controlplane import DEFAULT_SCHEDULER_CONFIG, wait_until
from localcluster.gpucluster import GpuCluster, GpuPod, booking_problems, placement_of
from topology.contract import AssignmentError, parse_assignment

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]

NODES = {"dgx-0": "dgx1-v100", "a100-0": "dgx-a100"}
WAIT_S = 90.0
POLICY = "gputopo-route-gpu-pods"


@pytest.fixture(scope="module")
def cluster(binaries: Binaries) -> Iterator[GpuCluster]:
    with ControlPlane(binaries) as cp, GpuCluster(cp) as gc:
        gc.start(NODES.items())
        cp.start_scheduler(DEFAULT_SCHEDULER_CONFIG, name="default-scheduler")
        cp.start_controller_manager(("job",))
        yield gc


def _unrouted(pod: GpuPod, namespace: str) -> dict[str, Any]:
    """``pod``'s manifest with no ``spec.schedulerName`` (what a user writes)."""
    body = pod.manifest(namespace)
    del body["spec"]["schedulerName"]
    return body


def _install_policy(cp: ControlPlane) -> None:
    dyn = DynamicClient(cp.api_client())
    for obj in render_manifests():
        if obj["kind"].startswith("MutatingAdmissionPolicy"):
            dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"]).create(body=obj)
    probe = _unrouted(GpuPod("probe", gpus=1), "default")

    def routed() -> bool:
        pod = cp.core_v1().create_namespaced_pod("default", cast(Any, probe), dry_run="All")
        return bool(pod.spec.scheduler_name == "gputopo-scheduler")

    wait_until(routed, 60, "the route-gpu-pods policy to act", interval_s=0.5)


def test_gpu_pods_without_a_scheduler_get_a_gputopo_decision(cluster: GpuCluster) -> None:
    core, ns = cluster.core, cluster.namespace
    # Without the policy: the default scheduler binds it, and nothing decides its GPUs.
    core.create_namespaced_pod(ns, cast(Any, _unrouted(GpuPod("blind", gpus=2), ns)))
    blind = cluster.wait_bound(["blind"], WAIT_S)["blind"]
    assert blind["spec"]["schedulerName"] == "default-scheduler"
    with pytest.raises(AssignmentError):
        parse_assignment(blind["metadata"].get("annotations"))
    cluster.delete_pods(["blind"])

    _install_policy(cluster.cp)
    core.create_namespaced_pod(ns, cast(Any, _unrouted(
        GpuPod("ring", gpus=4, pattern="ring", sensitive=True), ns)))
    core.create_namespaced_pod(ns, cast(Any, _unrouted(GpuPod("share", core_percent=30,
                                                                memory_mib=4096), ns)))
    core.create_namespaced_pod(ns, cast(Any, _unrouted(GpuPod("cpu-only"), ns)))
    batch = k8s_client.BatchV1Api(cluster.cp.api_client())
    template = _unrouted(GpuPod("job-pod", gpus=2, labels={"job": "trainer"}), ns)
    batch.create_namespaced_job(ns, cast(Any, {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "trainer", "namespace": ns},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": template["metadata"]["labels"]},
            "spec": template["spec"]}},
    }))
    job_pod = wait_until(lambda: cluster.list_pods("job=trainer"), WAIT_S,
                         "the Job controller to create its pod")[0]["metadata"]["name"]

    pods = cluster.wait_bound(["ring", "share", "cpu-only", job_pod], WAIT_S)
    for name in ("ring", "share", job_pod):
        assert pods[name]["spec"]["schedulerName"] == "gputopo-scheduler", name
        placement = placement_of(pods[name])
        assert placement is not None, name
        assert placement.assignment.node == placement.node
    assert len(cast(Any, placement_of(pods["ring"])).assignment.gpu_indices) == 4
    assert pods["cpu-only"]["spec"]["schedulerName"] == "default-scheduler"
    problems = booking_problems(cluster.list_pods(), cluster.nodes)
    assert not problems, "\n".join(problems)
