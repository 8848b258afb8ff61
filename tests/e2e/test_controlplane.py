"""End-to-end: the local control plane schedules a plain pod onto a kwok node and runs it.

Skipped only when the control-plane binaries cannot be had (``GPUTOPO_SKIP_E2E=1``, no Go
toolchain, or the build failed); any failure after that fails the test.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from localcluster import (
    DEFAULT_SCHEDULER_CONFIG,
    Binaries,
    ControlPlane,
)
from localcluster.controlplane import wait_until

# A cold build of the binaries can happen inside the first test: allow for it.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]

NAMESPACE = "default"
NODE = "kwok-gpu-0"
WAIT_S = 90.0


def _as_dict(obj: object) -> dict[str, Any]:
    """An API object as the JSON dict the server sent (camelCase keys)."""
    data: dict[str, Any] = k8s_client.ApiClient().sanitize_for_serialization(obj)
    return data


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind:
            return str(cond.get("status"))
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_default_scheduler_binds_cpu_pod_and_kwok_runs_it(binaries: Binaries) -> None:
    cp = ControlPlane(binaries)
    with cp:
        assert cp.kubeconfig_path.is_file()
        cp.start_kwok()
        cp.start_scheduler(DEFAULT_SCHEDULER_CONFIG)
        cp.create_default_serviceaccount(NAMESPACE)
        node = _as_dict(
            cp.add_kwok_node(
                NODE,
                capacity={"cpu": 32, "memory": "256Gi", "nvidia.com/gpu": 8},
                annotations={"gputopo.io/test": "controlplane"},
                labels={"gputopo.io/gpu-model": "fake"},
            )
        )
        assert not node["spec"].get("taints"), f"node must be taint-free: {node['spec']}"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
        assert node["metadata"]["labels"]["gputopo.io/gpu-model"] == "fake"

        core = cp.core_v1()
        pod = k8s_client.V1Pod(
            metadata=k8s_client.V1ObjectMeta(name="cpu-only"),
            spec=k8s_client.V1PodSpec(
                containers=[
                    k8s_client.V1Container(
                        name="main",
                        image="registry.k8s.io/pause:3.10",
                        resources=k8s_client.V1ResourceRequirements(
                            requests={"cpu": "1"}, limits={"cpu": "1"}
                        ),
                    )
                ],
            ),
        )
        core.create_namespaced_pod(NAMESPACE, pod)

        def running() -> dict[str, Any] | None:
            p = _as_dict(core.read_namespaced_pod("cpu-only", NAMESPACE))
            bound = p["spec"].get("nodeName")
            return p if bound and p["status"].get("phase") == "Running" else None

        live = wait_until(running, WAIT_S, "pod cpu-only to be bound and Running")
        assert live["spec"]["nodeName"] == NODE
        assert live["spec"]["schedulerName"] == "default-scheduler"
        assert _condition(live, "PodScheduled") == "True"
        assert live["status"].get("podIP"), "kwok should assign a pod IP"

        def scheduled_event() -> bool:
            events = core.list_namespaced_event(
                NAMESPACE, field_selector="involvedObject.name=cpu-only"
            )
            return any(e.reason == "Scheduled" for e in events.items)

        wait_until(scheduled_event, WAIT_S, "the scheduler's Scheduled event")

        # kwok keeps its node Ready.
        assert _condition(_as_dict(core.read_node(NODE)), "Ready") == "True"

        core.delete_namespaced_pod("cpu-only", NAMESPACE)

        def gone() -> bool:
            try:
                core.read_namespaced_pod("cpu-only", NAMESPACE)
            except ApiException as exc:
                return exc.status == 404
            return False

        wait_until(gone, WAIT_S, "pod cpu-only to be deleted (kwok finalises it)")
        pids = [p.pid for p in cp.processes if p.pid is not None]
        workdir = cp.workdir
        assert {p.name for p in cp.processes} >= {
            "etcd",
            "kube-apiserver",
            "kube-scheduler",
            "kwok",
        }

    # __exit__ tore everything down.
    assert not any(_pid_alive(pid) for pid in pids)
    assert not workdir.exists()
