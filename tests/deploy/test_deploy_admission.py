"""The chart's admission policies, enforced by the real kube-apiserver (docs/security.md).

* ``gputopo-device-plugin-own-nodes`` and ``-own-pods`` (ValidatingAdmissionPolicies): with a
  token bound to
  the device-plugin pod of node A — what the kubelet projects into that pod — the plugin's own
  code (:class:`~gpunode.publish.KubeNodePublisher`,
  :class:`~device_plugin.pods.KubePodSource`) may patch node A and the pods bound to A, and is
  refused node B, pods on B and unbound pods with the policy's message; a token naming no node
  may patch nothing; other users are not affected.
* ``gputopo-route-gpu-pods`` (MutatingAdmissionPolicy): pods asking for gputopo-managed
  resources without choosing a scheduler are created with ``gputopo-scheduler``; CPU-only pods
  and pods naming another scheduler are left alone.

The whole default chart is installed (its RBAC grants the plugin patch on every node and pod,
so any refusal seen here is the policy's). Skipped only when the control-plane binaries or
helm cannot be had.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from device_plugin.identity import ANN_ALLOCATED, parse_record
from device_plugin.plugin import core_api
from device_plugin.pods import KubePodSource, PodSourceError
from gpunode.publish import KubeNodePublisher, NodeMetadata, PublishError
from localcluster import Binaries, ControlPlane
from localcluster.chart import DEFAULT_NAMESPACE, render_manifests
from localcluster.controlplane import wait_until
from tests.deploy.helpers import bound_token, find, install_chart, token_kubeconfig
from tests.device_plugin.helpers import bound_pod, decide
from tests.device_plugin.kubelet_stub import KubeletStub, remove_tree, short_tmpdir
from tests.device_plugin.test_plugin_process import gputopo_command
from topology import catalog
from topology.contract import (
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
)
from topology.policies.base import NodeState, Request

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

NS = DEFAULT_NAMESPACE
PLUGIN_SA = "gputopo-device-plugin"
NODE_A, NODE_B = "gpu-node-a", "gpu-node-b"
WORK_NS = "team-a"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
NODE_POLICY = "gputopo-device-plugin-own-nodes"
POD_POLICY = "gputopo-device-plugin-own-pods"
ROUTE_POLICY = "gputopo-route-gpu-pods"
SCHEDULER = "gputopo-scheduler"
TOPO = catalog.get("dgx1-v100")


def _pod(name: str, namespace: str, *, node: str = "", sa: str = "",
         limits: dict[str, str] | None = None, init_limits: dict[str, str] | None = None,
         requests: dict[str, str] | None = None, scheduler: str | None = None) -> Any:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "pause:3.10", "resources": {
            k: v for k, v in (("limits", limits), ("requests", requests)) if v}}],
    }
    if init_limits:
        spec["initContainers"] = [{"name": "init", "image": "pause:3.10",
                                   "resources": {"limits": init_limits}}]
    if node:
        spec["nodeName"] = node
    if sa:
        spec["serviceAccountName"] = sa
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


@pytest.fixture(scope="module")
def cp(binaries: Binaries) -> Iterator[ControlPlane]:
    """The control plane with the default chart installed, nodes A and B, a device-plugin pod
    on each, a workload pod on each and one unbound, in namespace ``team-a``."""
    with ControlPlane(binaries) as plane:
        install_chart(plane, {})
        core = plane.core_v1()
        core.create_namespace(k8s_client.V1Namespace(
            metadata=k8s_client.V1ObjectMeta(name=WORK_NS)))
        plane.create_default_serviceaccount(WORK_NS)
        for node in (NODE_A, NODE_B):
            plane.add_kwok_node(node, {"cpu": 8, "memory": "32Gi"})
            core.create_namespaced_pod(NS, _pod(f"plugin-{node}", NS, node=node, sa=PLUGIN_SA))
            core.create_namespaced_pod(WORK_NS, _pod(f"job-{node}", WORK_NS, node=node))
        core.create_namespaced_pod(WORK_NS, _pod("job-unbound", WORK_NS))
        yield plane


def _token(cp: ControlPlane, bound_pod: str | None) -> str:
    """A token of the plugin's ServiceAccount bound to ``bound_pod``, or unbound."""
    return bound_token(cp, PLUGIN_SA, bound_pod)


def _claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    data: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return data


@pytest.fixture(scope="module")
def plugin_a(cp: ControlPlane) -> Any:
    """The device plugin's own ``CoreV1Api`` (``device_plugin.plugin.core_api``) with a token
    bound to the plugin pod on node A."""
    return core_api(token_kubeconfig(cp, _token(cp, f"plugin-{NODE_A}"), "plugin-a"))


@pytest.fixture(scope="module")
def policy_active(cp: ControlPlane, plugin_a: Any) -> None:
    """Wait until the API server enforces both policies: a patch of node B, and of the pod
    bound to B, by plugin A is refused. Its informers see each policy and binding a moment
    after they are created, and each on its own: CI once saw the node policy enforced while
    the pod policy was not yet (seven pod tests failed with no 403)."""
    core = cp.core_v1()
    probe = {"metadata": {"annotations": {"probe": "1"}}}
    undo = {"metadata": {"annotations": {"probe": None}}}

    def refused(patch: Callable[[Any], Any], undo_as_admin: Callable[[], Any],
                policy: str) -> bool:
        try:
            patch(probe)
        except ApiException as exc:
            return exc.status == 403 and policy in str(exc.body)
        undo_as_admin()
        return False

    wait_until(lambda: refused(lambda body: plugin_a.patch_node(NODE_B, body),
                               lambda: core.patch_node(NODE_B, undo), NODE_POLICY),
               60, "the node policy to be enforced", interval_s=0.5)
    pod = f"job-{NODE_B}"
    wait_until(lambda: refused(lambda body: plugin_a.patch_namespaced_pod(pod, WORK_NS, body),
                               lambda: core.patch_namespaced_pod(pod, WORK_NS, undo),
                               POD_POLICY),
               60, "the pod policy to be enforced", interval_s=0.5)


def _meta(value: str) -> NodeMetadata:
    return NodeMetadata(annotations={"gputopo.io/admission-test": value},
                        labels={"gputopo.io/admission-test": value})


def _annotation(obj: Any, key: str = "gputopo.io/admission-test") -> str | None:
    return cast(str | None, (obj.metadata.annotations or {}).get(key))


def test_the_bound_token_names_the_plugin_pods_node(cp: ControlPlane) -> None:
    """What the policy relies on: a token bound to a pod on a node carries the node, and the
    API server puts it in the request's user info (SelfSubjectReview)."""
    token = _token(cp, f"plugin-{NODE_A}")
    claims = _claims(token)["kubernetes.io"]
    assert claims["node"]["name"] == NODE_A and claims["pod"]["name"] == f"plugin-{NODE_A}"
    api = k8s_client.AuthenticationV1Api(
        k8s_client.ApiClient(_load(token_kubeconfig(cp, token, "review"))))
    user = api.create_self_subject_review(k8s_client.V1SelfSubjectReview()).status.user_info
    assert user.username == f"system:serviceaccount:{NS}:{PLUGIN_SA}"
    assert user.extra[NODE_NAME_KEY] == [NODE_A]
    unbound = _claims(_token(cp, None))["kubernetes.io"]
    assert "node" not in unbound and "pod" not in unbound


def _load(kubeconfig: Path) -> k8s_client.Configuration:
    from kubernetes import config

    cfg = k8s_client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return cfg


def test_plugin_publishes_its_own_node_only(cp: ControlPlane, plugin_a: Any,
                                            policy_active: None) -> None:
    publisher = KubeNodePublisher(plugin_a)
    publisher.publish(NODE_A, _meta("a"))
    node_a = cp.core_v1().read_node(NODE_A)
    assert _annotation(node_a) == "a" and node_a.metadata.labels["gputopo.io/admission-test"] == "a"

    with pytest.raises(PublishError, match=f"patching node {NODE_B}: HTTP 403"):
        publisher.publish(NODE_B, _meta("b"))
    assert _annotation(cp.core_v1().read_node(NODE_B)) is None
    try:
        plugin_a.patch_node(NODE_B, {"metadata": {"annotations": {"x": "y"}}})
    except ApiException as exc:
        body = json.loads(exc.body)
        assert exc.status == 403 and body["reason"] == "Forbidden"
        assert f"ValidatingAdmissionPolicy '{NODE_POLICY}'" in body["message"]
        assert f"device plugin on node {NODE_A} may not modify node {NODE_B}" in body["message"]
    else:
        pytest.fail("plugin A patched node B")


def test_plugin_annotates_pods_on_its_node_only(cp: ControlPlane, plugin_a: Any,
                                                policy_active: None) -> None:
    source = KubePodSource(plugin_a)
    # the one LIST the plugin makes, field-selected on its node
    pods = {p.name: p for p in source.list_pods(NODE_A)}
    assert set(pods) == {f"job-{NODE_A}", f"plugin-{NODE_A}"}
    source.patch_annotations(pods[f"job-{NODE_A}"], {ANN_ALLOCATED: "a"})
    assert _annotation(cp.core_v1().read_namespaced_pod(f"job-{NODE_A}", WORK_NS),
                       ANN_ALLOCATED) == "a"

    on_b = {p.name: p for p in source.list_pods(NODE_B)}[f"job-{NODE_B}"]
    with pytest.raises(PodSourceError, match="HTTP 403"):
        source.patch_annotations(on_b, {ANN_ALLOCATED: "a"})
    assert _annotation(cp.core_v1().read_namespaced_pod(f"job-{NODE_B}", WORK_NS),
                       ANN_ALLOCATED) is None

    messages = {}
    for name in (f"job-{NODE_B}", "job-unbound"):
        with pytest.raises(ApiException) as info:
            plugin_a.patch_namespaced_pod(name, WORK_NS,
                                          {"metadata": {"annotations": {"x": "y"}}})
        assert info.value.status == 403
        messages[name] = json.loads(info.value.body)["message"]
        assert f"ValidatingAdmissionPolicy '{POD_POLICY}'" in messages[name]
    assert (f"device plugin on node {NODE_A} may not modify pod {WORK_NS}/job-{NODE_B} on node "
            f"{NODE_B}") in messages[f"job-{NODE_B}"]
    assert (f"may not modify pod {WORK_NS}/job-unbound (not bound to a node)"
            in messages["job-unbound"])


def _refusal(call: Callable[[], Any]) -> str:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 403, info.value.body
    return str(json.loads(info.value.body)["message"])


@pytest.mark.parametrize(("what", "patch"), [
    ("a foreign label", {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}),
    ("an existing label", {"metadata": {"labels": {"kubernetes.io/hostname": "elsewhere"}}}),
    ("a label removed", {"metadata": {"labels": {"type": None}}}),
    ("a foreign annotation", {"metadata": {"annotations": {"example.com/owner": "me"}}}),
    ("a taint", {"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}}),
    ("unschedulable", {"spec": {"unschedulable": True}}),
    ("a finalizer", {"metadata": {"finalizers": ["example.com/keep"]}}),
])
def test_on_its_own_node_the_plugin_changes_only_gputopo_keys(
    cp: ControlPlane, plugin_a: Any, policy_active: None, what: str, patch: dict[str, Any],
) -> None:
    """A compromised plugin must not make its node attract other workloads (labels,
    taints) or wedge it (finalizers): only gputopo.io/ labels and annotations."""
    before = cp.core_v1().read_node(NODE_A)
    message = _refusal(lambda: plugin_a.patch_node(NODE_A, patch))
    assert "may change only the gputopo.io/ labels and annotations of its node" in message, what
    after = cp.core_v1().read_node(NODE_A)
    assert after.metadata.labels == before.metadata.labels
    assert after.spec == before.spec


@pytest.mark.parametrize(("what", "patch"), [
    ("a label", {"metadata": {"labels": {"app": "frontend"}}}),
    ("the extender's decision", {"metadata": {"annotations": {"gputopo.io/gpu-indices": "0"}}}),
    ("a foreign annotation", {"metadata": {"annotations": {"example.com/x": "y"}}}),
    ("the image", {"spec": {"containers": [{"name": "main", "image": "evil:1"}]}}),
    ("a finalizer", {"metadata": {"finalizers": ["example.com/keep"]}}),
])
def test_on_its_own_pods_the_plugin_changes_only_the_allocated_record(
    cp: ControlPlane, plugin_a: Any, policy_active: None, what: str, patch: dict[str, Any],
) -> None:
    name = f"job-{NODE_A}"
    before = cp.core_v1().read_namespaced_pod(name, WORK_NS)
    message = _refusal(lambda: plugin_a.patch_namespaced_pod(name, WORK_NS, patch))
    assert "may change only the gputopo.io/allocated annotation of a pod" in message, what
    after = cp.core_v1().read_namespaced_pod(name, WORK_NS)
    assert after.metadata.labels == before.metadata.labels
    assert after.spec.containers[0].image == before.spec.containers[0].image
    # and what it needs still goes through, clearing it too
    plugin_a.patch_namespaced_pod(name, WORK_NS, {"metadata": {"annotations": {
        ANN_ALLOCATED: "x"}}})
    plugin_a.patch_namespaced_pod(name, WORK_NS, {"metadata": {"annotations": {
        ANN_ALLOCATED: None}}})


def test_a_token_without_a_node_may_change_nothing(cp: ControlPlane, policy_active: None) -> None:
    unbound = core_api(token_kubeconfig(cp, _token(cp, None), "plugin-unbound"))
    with pytest.raises(PublishError, match="HTTP 403"):
        KubeNodePublisher(unbound).publish(NODE_A, _meta("x"))
    with pytest.raises(ApiException) as info:
        unbound.patch_namespaced_pod(f"job-{NODE_A}", WORK_NS,
                                     {"metadata": {"annotations": {"x": "y"}}})
    assert info.value.status == 403
    assert "credentials carry no node name" in json.loads(info.value.body)["message"]
    # reads are not admission's business: the plugin still lists (RBAC allows it)
    assert KubePodSource(unbound).list_pods(NODE_A)


def test_the_policy_binds_only_the_plugin(cp: ControlPlane, policy_active: None) -> None:
    """Admin (and every other user) is not matched: the policy narrows the plugin, no one
    else."""
    core = cp.core_v1()
    core.patch_node(NODE_B, {"metadata": {"annotations": {"gputopo.io/admission-test": "admin"}}})
    core.patch_node(NODE_B, {"metadata": {"annotations": {"gputopo.io/admission-test": None}}})
    core.patch_namespaced_pod("job-unbound", WORK_NS,
                              {"metadata": {"annotations": {"by": "admin"}}})


def test_plugin_on_node_b_is_confined_to_b(cp: ControlPlane, policy_active: None) -> None:
    plugin_b = core_api(token_kubeconfig(cp, _token(cp, f"plugin-{NODE_B}"), "plugin-b"))
    KubeNodePublisher(plugin_b).publish(NODE_B, _meta("b"))
    assert _annotation(cp.core_v1().read_node(NODE_B)) == "b"
    with pytest.raises(PublishError, match="HTTP 403"):
        KubeNodePublisher(plugin_b).publish(NODE_A, _meta("b"))
    assert _annotation(cp.core_v1().read_node(NODE_A)) != "b"


def test_the_real_plugin_process_works_under_the_charts_rbac_and_policies(
    cp: ControlPlane, policy_active: None,
) -> None:
    """``gputopo device-plugin`` as the chart runs it on node A, minus the container: its
    ServiceAccount's token bound to its pod on A (what the kubelet projects), so only the
    chart's narrowed ClusterRole and the policies apply. It registers, publishes node A and
    records the GPUs it hands a pod bound to A, with not one refused request."""
    workdir = short_tmpdir()
    kubelet = KubeletStub(workdir)
    kubelet.start()
    log = workdir / "plugin.log"
    proc: subprocess.Popen[bytes] | None = None
    kubeconfig = token_kubeconfig(cp, _token(cp, f"plugin-{NODE_A}"), "plugin-process")
    try:
        decision = decide(TOPO, NodeState(), Request(count=2))
        body = bound_pod("trainer", decision, node=NODE_A, namespace=WORK_NS)
        for key in ("uid", "creationTimestamp"):
            body["metadata"].pop(key)
        cp.core_v1().create_namespaced_pod(WORK_NS, body)
        proc = subprocess.Popen(
            gputopo_command() + [
                "device-plugin", "--fake-topology", "dgx1-v100", "--node-name", NODE_A,
                "--device-plugin-dir", str(workdir), "--kubeconfig", str(kubeconfig),
                "--pod-resources-socket", str(kubelet.pod_resources_socket),
                "--metrics-port", "0", "--watch-interval", "0.2",
            ],
            stdout=log.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        kubelet.wait_registered((RESOURCE_GPU,), timeout=60)
        kubelet.watch(RESOURCE_GPU)
        kubelet.wait_devices(RESOURCE_GPU, lambda ds: len(ds) == 8)
        wait_until(lambda: "gputopo.io/topology" in (
            cp.core_v1().read_node(NODE_A).metadata.annotations or {}), 60,
            "node A's topology published")
        got = kubelet.admit_pod(WORK_NS, "trainer", {RESOURCE_GPU: 2})[RESOURCE_GPU]
        assert got.envs["CUDA_VISIBLE_DEVICES"] == ",".join(decision.uuids)
        ann = cp.core_v1().read_namespaced_pod("trainer", WORK_NS).metadata.annotations
        assert parse_record(ann[ANN_ALLOCATED]) == {RESOURCE_GPU: {"main": list(decision.uuids)}}
        text = log.read_text()
        # Each line starts with a timestamp whose milliseconds can read ",403": look for a
        # refusal only in what follows it.
        messages = re.sub(r"(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", "", text)
        assert not re.search(r"\b403\b|forbidden", messages, re.IGNORECASE), text[-3000:]
    except BaseException:
        print(log.read_text() if log.exists() else "(no plugin log)")
        raise
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
        kubelet.stop()
    assert proc is not None and proc.returncode == 0
    remove_tree(workdir)


def test_the_policies_type_check_against_nodes_and_pods(cp: ControlPlane) -> None:
    """kube-controller-manager's status controller type-checks each policy's validations
    against its kind's schema: no warning (a misspelt field would otherwise be found only when
    a request fails; checked to catch ``oldObject.metadata.nam`` or ``spec.?nodeNam``)."""
    cp.start_controller_manager(("validatingadmissionpolicy-status-controller",))
    policies = DynamicClient(cp.api_client()).resources.get(
        api_version="admissionregistration.k8s.io/v1", kind="ValidatingAdmissionPolicy")
    for name in (NODE_POLICY, POD_POLICY):
        def checked(name: str = name) -> Any:
            status = policies.get(name=name).to_dict().get("status") or {}
            return status if "typeChecking" in status else None

        status = wait_until(checked, 60, f"{name}'s type checking")
        assert status["typeChecking"].get("expressionWarnings") is None, status


def test_rendered_policies_name_the_plugins_service_account(helm_available: None) -> None:
    objs = render_manifests()
    for name, kind in ((NODE_POLICY, "nodes"), (POD_POLICY, "pods")):
        vap = find(objs, "ValidatingAdmissionPolicy", name)
        assert vap["spec"]["matchConditions"][0]["expression"] == (
            f'request.userInfo.username == "system:serviceaccount:{NS}:{PLUGIN_SA}"')
        assert vap["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == [
            kind, f"{kind}/status"]
        assert vap["spec"]["failurePolicy"] == "Fail"
        binding = find(objs, "ValidatingAdmissionPolicyBinding", name)
        assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    other = render_manifests(release="gpu-team", namespace="team")
    vap = find(other, "ValidatingAdmissionPolicy", "gpu-team-gputopo-device-plugin-own-pods")
    assert "system:serviceaccount:team:gpu-team-gputopo-device-plugin" in (
        vap["spec"]["matchConditions"][0]["expression"])
    off = render_manifests({"admission": {"devicePluginNodeRestriction": {"enabled": False}}})
    assert not [o for o in off if o["kind"].startswith("ValidatingAdmissionPolicy")]


# ------------------------------------------------------------------ GPU pods that miss the extender


@pytest.fixture(scope="module")
def route_active(cp: ControlPlane) -> None:
    """Wait until the mutating policy acts (server-side dry-run creates of a GPU pod)."""
    core = cp.core_v1()

    def routed() -> bool:
        pod = core.create_namespaced_pod(WORK_NS, _pod("probe", WORK_NS,
                                                       limits={RESOURCE_GPU: "1"}),
                                         dry_run="All")
        return bool(pod.spec.scheduler_name == SCHEDULER)

    wait_until(routed, 60, "the route-gpu-pods policy to act", interval_s=0.5)


@pytest.mark.parametrize(("name", "pod_kw"), [
    ("limits-gpu", {"limits": {RESOURCE_GPU: "2"}}),
    ("default-named", {"limits": {RESOURCE_GPU: "1"}, "scheduler": "default-scheduler"}),
    ("empty-named", {"limits": {RESOURCE_GPU: "1"}, "scheduler": ""}),
    ("share", {"limits": {RESOURCE_VGPU_CORE: "30", RESOURCE_VGPU_MEMORY: "8"}}),
    ("memory-only-request", {"requests": {RESOURCE_VGPU_MEMORY: "4", "cpu": "10m"},
                             "limits": {RESOURCE_VGPU_MEMORY: "4"}}),
    ("slot", {"limits": {RESOURCE_GPU_SHARED: "1"}}),
    ("init-container", {"init_limits": {RESOURCE_GPU: "1"}, "limits": {"cpu": "1"}}),
])
def test_gpu_pods_without_a_scheduler_are_routed_to_gputopo(
    cp: ControlPlane, route_active: None, name: str, pod_kw: dict[str, Any],
) -> None:
    core = cp.core_v1()
    pod = core.create_namespaced_pod(WORK_NS, _pod(f"routed-{name}", WORK_NS, **pod_kw))
    assert pod.spec.scheduler_name == SCHEDULER
    # nothing else of the pod changed
    assert pod.spec.containers[0].image == "pause:3.10"
    core.delete_namespaced_pod(f"routed-{name}", WORK_NS, grace_period_seconds=0)


@pytest.mark.parametrize(("name", "pod_kw", "expected"), [
    ("cpu-only", {"limits": {"cpu": "1", "memory": "1Gi"}}, "default-scheduler"),
    ("no-resources", {}, "default-scheduler"),
    ("other-gpu-vendor", {"limits": {"amd.com/gpu": "1"}}, "default-scheduler"),
    ("named-other", {"limits": {RESOURCE_GPU: "1"}, "scheduler": "volcano"}, "volcano"),
    ("named-gputopo", {"limits": {RESOURCE_GPU: "1"}, "scheduler": SCHEDULER}, SCHEDULER),
])
def test_other_pods_are_left_alone(
    cp: ControlPlane, route_active: None, name: str, pod_kw: dict[str, Any], expected: str,
) -> None:
    core = cp.core_v1()
    pod = core.create_namespaced_pod(WORK_NS, _pod(f"alone-{name}", WORK_NS, **pod_kw))
    assert pod.spec.scheduler_name == expected
    core.delete_namespaced_pod(f"alone-{name}", WORK_NS, grace_period_seconds=0)


def test_route_policy_rendering(helm_available: None) -> None:
    objs = render_manifests()
    map_ = find(objs, "MutatingAdmissionPolicy", ROUTE_POLICY)
    assert map_["apiVersion"] == "admissionregistration.k8s.io/v1"
    conditions = {c["name"]: c["expression"] for c in map_["spec"]["matchConditions"]}
    for resource in (RESOURCE_GPU, RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY,
                     RESOURCE_GPU_SHARED):
        assert f"'{resource}'" in conditions["asks-for-gputopo-resources"]
    assert map_["spec"]["failurePolicy"] == "Fail"
    assert find(objs, "MutatingAdmissionPolicyBinding", ROUTE_POLICY)["spec"] == {
        "policyName": ROUTE_POLICY}
    renamed = render_manifests({"scheduler": {"schedulerName": "gpu-sched"},
                                "admission": {"routeGpuPods": {
                                    "namespaceSelector": {"matchLabels": {"gpu": "yes"}}}}})
    map_ = find(renamed, "MutatingAdmissionPolicy", ROUTE_POLICY)
    assert '"gpu-sched"' in map_["spec"]["mutations"][0]["applyConfiguration"]["expression"]
    assert map_["spec"]["matchConstraints"]["namespaceSelector"] == {
        "matchLabels": {"gpu": "yes"}}
    for off in ({"admission": {"routeGpuPods": {"enabled": False}}},
                {"scheduler": {"enabled": False}}):
        objs = render_manifests(off)
        assert not [o for o in objs if o["kind"].startswith("MutatingAdmissionPolicy")]
