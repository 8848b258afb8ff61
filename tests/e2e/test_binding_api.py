"""End-to-end: the extender's Binding call (``OfficialKubeAPI.create_binding``) against a real
kube-apiserver — one request that sets ``spec.nodeName`` and the assignment annotations
together, refused whole on a UID mismatch or an already-bound pod."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s_client

from localcluster import Binaries, ControlPlane
from scheduler_extender.kubernetes_state import ApiError, OfficialKubeAPI

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]

NAMESPACE = "default"
NODE = "kwok-bind-0"
ANNOTATIONS = {"gputopo.io/gpu-uuids": "GPU-a,GPU-b", "gputopo.io/node": NODE}


@pytest.fixture(scope="module")
def cp(binaries: Binaries) -> Iterator[ControlPlane]:
    with ControlPlane(binaries) as plane:
        plane.start_kwok()
        plane.create_default_serviceaccount(NAMESPACE)
        plane.add_kwok_node(NODE, capacity={"cpu": 32, "memory": "256Gi"})
        yield plane


def _unscheduled_pod(cp: ControlPlane, name: str) -> dict[str, Any]:
    """A pod no scheduler picks up; its JSON as the API stored it."""
    pod = k8s_client.V1Pod(
        metadata=k8s_client.V1ObjectMeta(name=name),
        spec=k8s_client.V1PodSpec(
            scheduler_name="nobody",
            containers=[k8s_client.V1Container(name="main", image="registry.k8s.io/pause:3.10")],
        ),
    )
    created = cp.core_v1().create_namespaced_pod(NAMESPACE, pod)
    data: dict[str, Any] = k8s_client.ApiClient().sanitize_for_serialization(created)
    return data


def _read(cp: ControlPlane, name: str) -> dict[str, Any]:
    data: dict[str, Any] = k8s_client.ApiClient().sanitize_for_serialization(
        cp.core_v1().read_namespaced_pod(name, NAMESPACE))
    return data


def test_binding_sets_node_and_annotations_in_one_request(cp: ControlPlane) -> None:
    pod = _unscheduled_pod(cp, "bind-ok")
    api = OfficialKubeAPI.from_config(cp.kubeconfig_path, bind_connections=2)
    api.create_binding(NAMESPACE, "bind-ok", pod["metadata"]["uid"], NODE, ANNOTATIONS)
    live = _read(cp, "bind-ok")
    assert live["spec"]["nodeName"] == NODE
    assert {k: live["metadata"]["annotations"].get(k) for k in ANNOTATIONS} == ANNOTATIONS


def test_binding_an_already_bound_pod_is_refused(cp: ControlPlane) -> None:
    pod = _unscheduled_pod(cp, "bind-twice")
    api = OfficialKubeAPI.from_config(cp.kubeconfig_path, bind_connections=2)
    api.create_binding(NAMESPACE, "bind-twice", pod["metadata"]["uid"], NODE, {})
    with pytest.raises(ApiError) as err:
        api.create_binding(NAMESPACE, "bind-twice", pod["metadata"]["uid"], NODE, ANNOTATIONS)
    assert err.value.status == 409
    assert "already assigned" in str(err.value)
    assert "gputopo.io/gpu-uuids" not in (_read(cp, "bind-twice")["metadata"].get(
        "annotations") or {})


def test_binding_with_a_stale_uid_writes_nothing(cp: ControlPlane) -> None:
    _unscheduled_pod(cp, "bind-stale")
    api = OfficialKubeAPI.from_config(cp.kubeconfig_path, bind_connections=2)
    with pytest.raises(ApiError) as err:
        api.create_binding(NAMESPACE, "bind-stale", "00000000-0000-0000-0000-000000000000",
                           NODE, ANNOTATIONS)
    assert err.value.status == 409
    live = _read(cp, "bind-stale")
    assert not live["spec"].get("nodeName")
    assert "gputopo.io/gpu-uuids" not in (live["metadata"].get("annotations") or {})


def test_binding_a_missing_pod_is_a_404(cp: ControlPlane) -> None:
    api = OfficialKubeAPI.from_config(cp.kubeconfig_path, bind_connections=2)
    with pytest.raises(ApiError) as err:
        api.create_binding(NAMESPACE, "no-such-pod", "", NODE, ANNOTATIONS)
    assert err.value.status == 404
