"""End to end: gangs (Indexed Jobs of several pods) admitted whole inside one rack by the real
``gputopo planner``, their pods created by the real kube-controller-manager's Job controller,
bound by kube-scheduler with the gputopo extender on the planned node of each completion
index, on kwok DGX-1 V100 nodes labelled with a hierarchy (one block, two racks of two).

Checked: a gang that fits a rack gets all its pods bound inside one rack, each on the node the
planner wrote for its index, with the GPUs the extender chose (consistent bookings); a gang
that does not fit waits suspended with no pod and no GPU; a gang of higher priority preempts
the most recently admitted gang of lower priority whole — all its pods go — and takes its rack;
a GPU pod the planner does not manage going while a gang waits wakes the planner.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s_client

from localcluster import Binaries, ControlPlane
from localcluster.controlplane import wait_until
from localcluster.gpucluster import GpuCluster, booking_problems
from localcluster.planning import PlannerProcess, gang_manifest, job_stages
from topology.contract import (
    ANN_COMPLETION_INDEX,
    ANN_GPU_INDICES,
    ANN_NETWORK,
    ANN_PLAN,
    ANN_PLANNED_NODES,
    LABEL_BLOCK,
    LABEL_RACK,
    parse_planned_nodes,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

NAMESPACE = "default"
RACKS = {"dgx-r0-a": "r0", "dgx-r0-b": "r0", "dgx-r1-a": "r1", "dgx-r1-b": "r1"}


@pytest.fixture(scope="module")
def cluster(binaries: Binaries) -> Iterator[tuple[GpuCluster, PlannerProcess]]:
    if binaries.kube_controller_manager is None:
        pytest.skip("kube-controller-manager not built (scripts/build-k8s-tools.sh)")
    with ControlPlane(binaries) as cp, GpuCluster(cp) as gc:
        cp.start_controller_manager(("job",))
        stages = job_stages(cp.default_kwok_stages(), cp.workdir / "kwok-job-stages.yaml")
        gc.start([(n, "dgx1-v100") for n in RACKS], kwok_stages=stages,
                 labels={n: {LABEL_BLOCK: "b0", LABEL_RACK: r} for n, r in RACKS.items()})
        cp.core_v1().create_namespace({"metadata": {"name": "gputopo-system"}})
        settings = cp.workdir / "planner.yaml"
        settings.write_text(yaml.safe_dump({"debounce_s": 0.2}))
        profiles = resources.files("simulator").joinpath("data/andreas-profiles.yaml")
        planner = PlannerProcess(cp.kubeconfig_path, cp.workdir / "logs" / "gputopo-planner.log",
                                 Path(str(profiles)), interval_s=2.0,
                                 extra_args=["--namespace", NAMESPACE, "--config", str(settings)]
                                 ).start()
        try:
            yield gc, planner
        finally:
            planner.stop()


def gang_pods(gc: GpuCluster, job: str) -> list[dict[str, Any]]:
    return [p for p in gc.list_pods(f"batch.kubernetes.io/job-name={job}")
            if not (p.get("metadata") or {}).get("deletionTimestamp")]


def wait_bound(gc: GpuCluster, planner: PlannerProcess, job: str, pods: int
               ) -> list[dict[str, Any]]:
    def bound() -> list[dict[str, Any]] | None:
        found = gang_pods(gc, job)
        ok = len(found) == pods and all((p.get("spec") or {}).get("nodeName") for p in found)
        return found if ok else None

    try:
        return wait_until(bound, 90, f"the {pods} pods of {job} bound", interval_s=0.3)
    except TimeoutError:
        pytest.fail(f"{job} not bound; planner log:\n{planner.log_tail(40)}")


def plan(batch: k8s_client.BatchV1Api, job: str) -> dict[str, Any]:
    ann = batch.read_namespaced_job(job, NAMESPACE).metadata.annotations or {}
    return json.loads(ann.get(ANN_PLAN, "{}"))  # type: ignore[no-any-return]


def check_whole_in_one_rack(gc: GpuCluster, job: str, pods: list[dict[str, Any]]) -> set[str]:
    """Every pod on the node planned for its index, all in one rack, 8 GPUs each."""
    nodes = set()
    for pod in pods:
        ann = pod["metadata"]["annotations"]
        planned = parse_planned_nodes(ann[ANN_PLANNED_NODES])
        assert pod["spec"]["nodeName"] == planned[int(ann[ANN_COMPLETION_INDEX])], pod
        assert len(ann[ANN_GPU_INDICES].split(",")) == 8
        nodes.add(pod["spec"]["nodeName"])
    assert len({RACKS[n] for n in nodes}) == 1, (job, nodes)
    assert booking_problems(gc.list_pods(), gc.nodes) == []
    return nodes


def test_gangs_are_admitted_whole_wait_holding_nothing_and_are_preempted_whole(
    cluster: tuple[GpuCluster, PlannerProcess],
) -> None:
    gc, planner = cluster
    batch = k8s_client.BatchV1Api(gc.cp.api_client())
    # the nodes publish their NICs (what the device plugin publishes for a catalog machine)
    assert ANN_NETWORK in gc.read_node("dgx-r0-a")["metadata"]["annotations"]

    batch.create_namespaced_job(NAMESPACE, gang_manifest("train-a", pods=2, gpus=8))
    a_nodes = check_whole_in_one_rack(gc, "train-a", wait_bound(gc, planner, "train-a", 2))
    batch.create_namespaced_job(NAMESPACE, gang_manifest("train-d", pods=2, gpus=8))
    d_nodes = check_whole_in_one_rack(gc, "train-d", wait_bound(gc, planner, "train-d", 2))
    assert not a_nodes & d_nodes  # the other rack

    # every GPU is held: a third gang waits suspended, with no pod and no GPU
    batch.create_namespaced_job(NAMESPACE, gang_manifest("train-b", pods=2, gpus=8))
    wait_until(lambda: plan(batch, "train-b").get("state") == "waiting", 30,
               "train-b marked waiting", interval_s=0.3)
    assert batch.read_namespaced_job("train-b", NAMESPACE).spec.suspend is True
    assert gc.list_pods("batch.kubernetes.io/job-name=train-b") == []

    # a gang of higher priority: the most recently admitted gang of lower priority goes, whole
    batch.create_namespaced_job(NAMESPACE, gang_manifest("train-c", pods=2, gpus=8,
                                                         priority=10))
    c_pods = wait_bound(gc, planner, "train-c", 2)
    c_nodes = check_whole_in_one_rack(gc, "train-c", c_pods)
    assert c_nodes == d_nodes
    d = batch.read_namespaced_job("train-d", NAMESPACE)
    # suspended whole, and waiting again (for room) once its pods were gone
    assert d.spec.suspend is True and plan(batch, "train-d")["state"] in ("preempted",
                                                                         "waiting")
    assert gang_pods(gc, "train-d") == []
    assert len(gang_pods(gc, "train-a")) == 2  # untouched
    events = gc.core.list_namespaced_event(NAMESPACE).items
    reasons = {(e.involved_object.name, e.reason) for e in events
               if e.source and e.source.component == "gputopo-planner"}
    assert {("train-a", "Admitted"), ("train-c", "Admitted"), ("train-d", "Preempted"),
            ("train-b", "Postponed")} <= reasons
    # train-b still waits for room and holds nothing
    assert batch.read_namespaced_job("train-b", NAMESPACE).spec.suspend is True
    assert gc.list_pods("batch.kubernetes.io/job-name=train-b") == []


def rescheduling_points(planner: PlannerProcess, trigger: str) -> float:
    """``gputopo_planner_rescheduling_points_total{trigger=...}`` as the planner serves it."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(planner.metrics()):
        for sample in family.samples:
            if sample.name == "gputopo_planner_rescheduling_points_total" and \
                    sample.labels.get("trigger") == trigger:
                return float(sample.value)
    return 0.0


def test_gpus_freed_by_a_pod_outside_the_planners_jobs_wake_the_planner(
    cluster: tuple[GpuCluster, PlannerProcess],
) -> None:
    """While a gang waits, a GPU pod the planner does not manage goes: the planner's pod watch
    (the real apiserver's watch, field-selected to pods that may hold GPUs) holds a
    rescheduling point for it (trigger ``gpus-freed``), not only its periodic ones."""
    gc, planner = cluster
    batch = k8s_client.BatchV1Api(gc.cp.api_client())
    # five 8-GPU pods never fit four nodes: it waits for as long as this test runs
    batch.create_namespaced_job(NAMESPACE, gang_manifest("too-wide", pods=5, gpus=8))
    try:
        wait_until(lambda: plan(batch, "too-wide").get("state") == "waiting", 30,
                   "too-wide marked waiting", interval_s=0.3)
        before = rescheduling_points(planner, "gpus-freed")
        gc.core.create_namespaced_pod(NAMESPACE, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "bare-gpu", "namespace": NAMESPACE},
            "spec": {"nodeName": "dgx-r1-b", "containers": [{
                "name": "c", "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
        gc.core.delete_namespaced_pod("bare-gpu", NAMESPACE, grace_period_seconds=0)
        wait_until(lambda: rescheduling_points(planner, "gpus-freed") > before, 30,
                   "a gpus-freed rescheduling point", interval_s=0.3)
    finally:
        batch.delete_namespaced_job("too-wide", NAMESPACE, propagation_policy="Background")
