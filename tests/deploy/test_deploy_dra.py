"""The chart in DRA mode (``mode: dra``, docs/dra-driver.md): rendered, installed in the real
kube-apiserver v1.36 (every object accepted: ``helm template`` in DRA mode dry-runs), the
DeviceClasses equal to the contract's, RBAC exactly the driver's calls, and the admission
policies confining each driver pod to its own node's ResourceSlices and Node — with the
driver's own code and a token bound to its pod, as the kubelet projects it.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from dra_driver.slices import KubeSliceStore, SliceError, SlicePublisher
from gpunode.publish import KubeNodePublisher, NodeMetadata, PublishError
from localcluster import Binaries, ControlPlane
from localcluster.chart import DEFAULT_NAMESPACE, render_manifests
from localcluster.controlplane import wait_until
from tests.deploy.helpers import (
    DRA_VALUES,
    bound_token,
    find,
    install_chart,
    token_kubeconfig,
)
from tests.deploy.test_deploy_chart import api_calls
from tests.dra_driver.test_dra_driver_process import gputopo_command
from topology import catalog, dra
from topology.dra import DRIVER

NS = DEFAULT_NAMESPACE
SA = "gputopo-dra-driver"
NODE_A, NODE_B = "gpu-node-a", "gpu-node-b"
SLICE_POLICY = "gputopo-dra-driver-own-slices"
NODE_POLICY = "gputopo-dra-driver-own-nodes"
TOPO = catalog.get("dgx1-v100")


# ------------------------------------------------------------------ rendering (helm only)


def test_dra_mode_renders_the_driver_instead_of_the_device_plugin(helm_available: None) -> None:
    objs = render_manifests(DRA_VALUES)
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert ("DaemonSet", "gputopo-dra-driver") in kinds
    assert not any(k == "DaemonSet" and "device-plugin" in n for k, n in kinds)
    assert not any("device-plugin-own" in n for _k, n in kinds)
    classes = sorted((o for o in objs if o["kind"] == "DeviceClass"),
                     key=lambda o: o["metadata"]["name"])
    want = sorted(dra.device_classes(extended_resource_name="nvidia.com/gpu"),
                  key=lambda o: o["metadata"]["name"])
    assert [{"name": c["metadata"]["name"], "spec": c["spec"]} for c in classes] == [
        {"name": c["metadata"]["name"], "spec": c["spec"]} for c in want]
    plain = render_manifests({"mode": "dra"})
    assert "extendedResourceName" not in find(plain, "DeviceClass", dra.CLASS_GPU)["spec"]
    role = find(objs, "ClusterRole", SA)
    assert role["rules"] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
         "verbs": ["list", "create", "patch", "delete"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]},
    ]
    # the rules are exactly the driver's calls (gpunode: the Node patch)
    assert api_calls("dra_driver", "gpunode") == {
        "list_resource_slice", "patch_resource_slice", "delete_resource_slice",
        "read_namespaced_resource_claim", "patch_node"}
    ds = find(objs, "DaemonSet", SA)
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    assert c["args"][:5] == ["dra-driver", "--node-name=$(NODE_NAME)",
                             "--registry-dir=/var/lib/kubelet/plugins_registry",
                             f"--plugin-dir=/var/lib/kubelet/plugins/{DRIVER}",
                             "--cdi-dir=/var/run/cdi"]
    assert "--topology=dgx1-v100" in c["args"]
    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["readOnlyRootFilesystem"]
    assert sc["allowPrivilegeEscalation"] is False
    env = {e["name"] for e in c["env"]}
    # the allocator taint: on, and off without the allocator (kube-scheduler allocates then)
    assert {"name": "GPUTOPO_DRA_ALLOCATOR_TAINT", "value": "true"} in c["env"]
    lone = render_manifests({**DRA_VALUES, "draAllocator": {"enabled": False}})
    (lc,) = find(lone, "DaemonSet", SA)["spec"]["template"]["spec"]["containers"]
    assert {"name": "GPUTOPO_DRA_ALLOCATOR_TAINT", "value": "false"} in lc["env"]
    from dra_driver.settings import DRADriverSettings

    for name in env:
        if name.startswith("GPUTOPO_DRA_"):
            assert name.removeprefix("GPUTOPO_DRA_").lower() in DRADriverSettings.model_fields


def test_device_plugin_mode_renders_no_dra_object(helm_available: None) -> None:
    objs = render_manifests({})
    assert not [o for o in objs if o["kind"] == "DeviceClass" or "dra-driver" in
                o["metadata"]["name"]]


# ------------------------------------------------------------------ the real API server



@pytest.fixture(scope="module")
def cp(binaries: Binaries) -> Iterator[ControlPlane]:
    """The chart installed in DRA mode; kwok nodes A and B with a driver pod bound to each."""
    with ControlPlane(binaries) as plane:
        install_chart(plane, DRA_VALUES)
        core = plane.core_v1()
        for node in (NODE_A, NODE_B):
            plane.add_kwok_node(node, {"cpu": 8, "memory": "32Gi"})
            core.create_namespaced_pod(NS, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"driver-{node}", "namespace": NS},
                "spec": {"nodeName": node, "serviceAccountName": SA,
                         "containers": [{"name": "c", "image": "pause:3.10"}]}})
        yield plane


def _client(cp: ControlPlane, pod: str | None, name: str) -> Any:
    from gpunode.kube import api_client

    return api_client(token_kubeconfig(cp, bound_token(cp, SA, pod), name))


@pytest.fixture(scope="module")
def driver_a(cp: ControlPlane) -> Any:
    """The driver's own API client with a token bound to its pod on node A, once the slice
    policy is enforced (the API server's informers see it a moment after creation)."""
    client = _client(cp, f"driver-{NODE_A}", "driver-a")
    store = KubeSliceStore(client)
    body = dra.resource_slices(TOPO, NODE_B)[0]

    def refused() -> bool:
        try:
            store.apply(body)
        except SliceError as exc:
            return "403" in str(exc)
        store_admin = KubeSliceStore(cp.api_client())
        store_admin.delete(body["metadata"]["name"])
        return False

    wait_until(refused, 60, "the slice policy to be enforced", interval_s=0.5)
    return client


@pytest.mark.e2e
def test_installed_dra_objects_and_classes(cp: ControlPlane) -> None:
    """install_chart created every rendered object for real: the DeviceClasses are the
    contract's."""
    api = k8s_client.ResourceV1Api(cp.api_client())
    got: Any = api.list_device_class(_preload_content=False)
    names = sorted(c["metadata"]["name"] for c in json.loads(got.data)["items"])
    assert names == sorted([dra.CLASS_GPU, dra.CLASS_SHARE, dra.CLASS_SLOT])


def _allowed(cp: ControlPlane, verb: str, resource: str, group: str = "") -> bool:
    review = k8s_client.V1SubjectAccessReview(spec=k8s_client.V1SubjectAccessReviewSpec(
        user=f"system:serviceaccount:{NS}:{SA}",
        groups=["system:serviceaccounts", f"system:serviceaccounts:{NS}",
                "system:authenticated"],
        resource_attributes=k8s_client.V1ResourceAttributes(verb=verb, resource=resource,
                                                            group=group)))
    result = k8s_client.AuthorizationV1Api(cp.api_client()).create_subject_access_review(review)
    return bool(result.status and result.status.allowed)


@pytest.mark.e2e
def test_dra_driver_rbac(cp: ControlPlane) -> None:
    for verb in ("list", "create", "patch", "delete"):
        assert _allowed(cp, verb, "resourceslices", "resource.k8s.io"), verb
    assert _allowed(cp, "get", "resourceclaims", "resource.k8s.io")
    assert _allowed(cp, "patch", "nodes")
    for verb, res, group in (("update", "resourceclaims", "resource.k8s.io"),
                             ("list", "resourceclaims", "resource.k8s.io"),
                             ("create", "deviceclasses", "resource.k8s.io"),
                             ("list", "pods", ""), ("get", "secrets", ""),
                             ("delete", "nodes", "")):
        assert not _allowed(cp, verb, res, group), (verb, res)


@pytest.mark.e2e
def test_driver_writes_its_own_nodes_slices_only(cp: ControlPlane, driver_a: Any) -> None:
    store = KubeSliceStore(driver_a)
    pub_a = SlicePublisher(store, TOPO, NODE_A)
    assert pub_a.sync(frozenset()) is True
    assert len(store.list(NODE_A)) == 2
    # another node's pool: refused, by the policy, naming both nodes
    with pytest.raises(SliceError) as info:
        SlicePublisher(store, TOPO, NODE_B).sync(frozenset())
    assert "HTTP 403" in str(info.value) and SLICE_POLICY in str(info.value)
    assert f"DRA driver on node {NODE_A} may write only gpu.gputopo.io ResourceSlices of its " \
           f"node, not {DRIVER} slices of node {NODE_B}" in str(info.value)
    # a slice of its node taken over for another node, or another node's slice deleted
    admin = KubeSliceStore(cp.api_client())
    admin.apply(dra.resource_slices(TOPO, NODE_B)[0])
    with pytest.raises(SliceError, match="may not modify ResourceSlice"):
        store.delete(dra.slice_name(NODE_B, 0))
    body = dra.resource_slices(TOPO, NODE_A)[1]  # another driver's slice on its own node
    body["metadata"]["name"] = f"{NODE_A}-other"
    body["spec"]["driver"] = body["spec"]["pool"]["name"] = "other.example.com"
    with pytest.raises(SliceError, match="HTTP 403.*not other.example.com slices"):
        store.apply(body)
    # its own slices it may withdraw (a GPU that left the pool)
    assert pub_a.sync(frozenset({0, 1, 2, 3, 4, 5, 6, 7})) is True
    assert [len(s["spec"].get("devices", [])) for s in store.list(NODE_A)] == [0]


@pytest.mark.e2e
def test_driver_node_patches_and_unbound_tokens(cp: ControlPlane, driver_a: Any) -> None:
    core = k8s_client.CoreV1Api(driver_a)
    meta = NodeMetadata(annotations={"gputopo.io/t": "a"}, labels={"gputopo.io/t": "a"})
    publisher = KubeNodePublisher(core)
    publisher.publish(NODE_A, meta)
    deadline = time.monotonic() + 30
    while True:  # the node policy may be enforced a moment after the slice policy
        try:
            publisher.publish(NODE_B, meta)
        except PublishError as exc:
            assert "HTTP 403" in str(exc)
            break
        assert time.monotonic() < deadline, "the DRA driver's node policy is not enforced"
        time.sleep(0.5)
    with pytest.raises(ApiException) as info:
        core.patch_node(NODE_A, {"metadata": {"labels": {"node-role.kubernetes.io/x": ""}}})
    assert NODE_POLICY in json.loads(info.value.body)["message"]
    unbound = KubeSliceStore(_client(cp, None, "unbound"))
    with pytest.raises(SliceError, match="carry no node name"):
        unbound.apply(dra.resource_slices(TOPO, NODE_A)[0])


@pytest.mark.e2e
def test_the_real_driver_with_the_pod_bound_token(cp: ControlPlane, driver_a: Any,
                                                  tmp_path: Path) -> None:
    """``gputopo dra-driver --no-kubelet`` with nothing but the chart's RBAC and the policies
    publishes node A's pool and Node metadata without a single refused request."""
    kubeconfig = token_kubeconfig(cp, bound_token(cp, SA, f"driver-{NODE_A}"), "driver-proc")
    log = tmp_path / "driver.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*gputopo_command(), "dra-driver", "--node-name", NODE_A,
                                 "--topology", "dgx1-v100", "--kubeconfig", str(kubeconfig),
                                 "--no-kubelet"], stdout=out, stderr=subprocess.STDOUT)
        try:
            admin = KubeSliceStore(cp.api_client())
            wait_until(lambda: sum(len(s["spec"].get("devices", []))
                                   for s in admin.list(NODE_A)) == 24, 60, "node A's slices")
            wait_until(lambda: "gputopo.io/topology" in (
                cp.core_v1().read_node(NODE_A).metadata.annotations or {}), 30,
                "node A's topology")
        finally:
            proc.terminate()
            proc.wait(20)
    text = log.read_text()
    assert proc.returncode == 0, text[-2000:]
    assert "ERROR" not in text and "403" not in text, text[-2000:]
