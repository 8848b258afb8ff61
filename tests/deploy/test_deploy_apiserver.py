"""Every rendered manifest is accepted by the real kube-apiserver, and its RBAC grants what each
component needs and nothing more (SubjectAccessReview against the installed objects).

Skipped only when the control-plane binaries cannot be had (``GPUTOPO_SKIP_E2E=1``, no Go
toolchain, or the build failed).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from localcluster import Binaries, ControlPlane
from localcluster.chart import DEFAULT_NAMESPACE, render_manifests
from tests.deploy.helpers import (
    COLOCATION_VALUES,
    DRA_VALUES,
    FAKE_VALUES,
    PRIVILEGED_VALUES,
    Obj,
    TlsMaterial,
    make_tls,
    tls_values,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]

REPO = Path(__file__).resolve().parents[2]
NS = DEFAULT_NAMESPACE
RESTRICTED_NS = "psa-restricted"


@pytest.fixture(scope="module")
def cp(binaries: Binaries) -> Iterator[ControlPlane]:
    with ControlPlane(binaries) as plane:
        core = plane.core_v1()
        core.create_namespace(k8s_client.V1Namespace(metadata=k8s_client.V1ObjectMeta(name=NS)))
        core.create_namespace(k8s_client.V1Namespace(metadata=k8s_client.V1ObjectMeta(
            name=RESTRICTED_NS,
            labels={"pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest"},
        )))
        yield plane


@pytest.fixture(scope="module")
def dyn(cp: ControlPlane) -> DynamicClient:
    return DynamicClient(cp.api_client())


@pytest.fixture(scope="module")
def tls_material() -> TlsMaterial:
    return make_tls()


def _create(dyn: DynamicClient, obj: Obj, dry_run: bool) -> Any:
    resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    namespace = obj["metadata"].get("namespace") if resource.namespaced else None
    kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
    return resource.create(body=obj, namespace=namespace, **kwargs)


def _dry_run_all(dyn: DynamicClient, objs: list[Obj]) -> None:
    errors = []
    for obj in objs:
        try:
            _create(dyn, obj, dry_run=True)
        except ApiException as exc:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.status} {exc.body}")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("variant", ["default", "tls", "fake", "colocation", "privileged",
                                     "dra"])
def test_every_rendered_object_passes_server_side_dry_run(
    dyn: DynamicClient, tls_material: TlsMaterial, variant: str
) -> None:
    """Every object, the admission policies included: the API server compiles their CEL (a
    typo is a 422 here)."""
    values = {"default": {}, "tls": tls_values(tls_material), "fake": FAKE_VALUES,
              "colocation": COLOCATION_VALUES, "privileged": PRIVILEGED_VALUES,
              "dra": DRA_VALUES}[variant]
    objs = render_manifests(values)
    assert len(objs) >= 18
    kinds = {o["kind"] for o in objs}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
            "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} <= kinds
    _dry_run_all(dyn, objs)


def test_deploy_manifest_passes_server_side_dry_run(dyn: DynamicClient) -> None:
    objs = [o for o in yaml.safe_load_all((REPO / "deploy" / "gputopo.yaml").read_text()) if o]
    _dry_run_all(dyn, objs)


def _pod_from_template(workload: Obj, namespace: str, service_account: str | None) -> Obj:
    template = copy.deepcopy(workload["spec"]["template"])
    spec = template["spec"]
    if service_account is not None:
        spec["serviceAccountName"] = service_account
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": workload["metadata"]["name"] + "-probe",
            "namespace": namespace,
            "labels": template["metadata"].get("labels", {}),
            "annotations": template["metadata"].get("annotations", {}),
        },
        "spec": spec,
    }


def test_workload_pods_pass_admission(cp: ControlPlane, dyn: DynamicClient,
                                      tls_material: TlsMaterial) -> None:
    """The pods the Deployments/DaemonSet would create pass admission (incl. the priority
    class and service accounts); the extender and scheduler even under the "restricted" Pod
    Security Standard. The device plugin needs hostPath, i.e. a "privileged" namespace."""
    cp.create_default_serviceaccount(RESTRICTED_NS)
    cp.create_default_serviceaccount(NS)  # the MPS daemon runs as the namespace's default
    for values in ({}, tls_values(tls_material), FAKE_VALUES, COLOCATION_VALUES,
                   PRIVILEGED_VALUES, DRA_VALUES):
        objs = render_manifests(values)
        for sa in [o for o in objs if o["kind"] == "ServiceAccount"]:
            try:
                _create(dyn, sa, dry_run=False)
            except ApiException as exc:
                assert exc.status == 409, exc.body
        workloads = [o for o in objs if o["kind"] in ("Deployment", "DaemonSet")]
        assert len(workloads) >= 3
        for w in workloads:
            _create(dyn, _pod_from_template(w, NS, None), dry_run=True)
            if w["kind"] == "Deployment":
                _create(dyn, _pod_from_template(w, RESTRICTED_NS, "default"), dry_run=True)


def test_device_plugin_misses_baseline_only_by_its_host_paths(
    cp: ControlPlane, dyn: DynamicClient
) -> None:
    """The real Pod Security admission names everything the device plugin does beyond the
    "baseline" standard: the kubelet's directories (hostPath) and nothing else: no host
    namespaces, no capabilities, no privilege (unless devicePlugin.privileged)."""
    ns = "psa-baseline"
    cp.core_v1().create_namespace(k8s_client.V1Namespace(metadata=k8s_client.V1ObjectMeta(
        name=ns, labels={"pod-security.kubernetes.io/enforce": "baseline",
                         "pod-security.kubernetes.io/enforce-version": "latest"})))
    cp.create_default_serviceaccount(ns)
    for values, extra in (({}, ""), (PRIVILEGED_VALUES, "privileged")):
        ds = next(o for o in render_manifests(values) if o["kind"] == "DaemonSet"
                  and o["metadata"]["name"] == "gputopo-device-plugin")
        with pytest.raises(ApiException) as info:
            _create(dyn, _pod_from_template(ds, ns, "default"), dry_run=True)
        assert info.value.status == 403
        message = json.loads(info.value.body)["message"]
        violations = message.split('violates PodSecurity "baseline:latest": ')[1]
        found = sorted(v.split(" (")[0] for v in violations.split("), ") if v)
        assert found == sorted(["hostPath volumes", *([extra] if extra else [])]), message


def test_example_pods_pass_server_side_dry_run(cp: ControlPlane, dyn: DynamicClient) -> None:
    cp.create_default_serviceaccount("default")
    examples = sorted((REPO / "examples").glob("*.yaml"))
    assert len(examples) >= 4
    for path in examples:
        for obj in yaml.safe_load_all(path.read_text()):
            if obj:
                obj.setdefault("metadata", {}).setdefault("namespace", "default")
                _create(dyn, obj, dry_run=True)


# ------------------------------------------------------------------ RBAC, for real


def _sa_user(name: str) -> tuple[str, list[str]]:
    return (f"system:serviceaccount:{NS}:{name}",
            ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"])


def _allowed(cp: ControlPlane, sa: str, verb: str, resource: str, *, group: str = "",
             namespace: str = "", subresource: str = "", name: str = "") -> bool:
    user, groups = _sa_user(sa)
    review = k8s_client.V1SubjectAccessReview(spec=k8s_client.V1SubjectAccessReviewSpec(
        user=user, groups=groups,
        resource_attributes=k8s_client.V1ResourceAttributes(
            verb=verb, resource=resource, group=group, namespace=namespace or None,
            subresource=subresource or None, name=name or None,
        ),
    ))
    api = k8s_client.AuthorizationV1Api(cp.api_client())
    result = api.create_subject_access_review(review)
    return bool(result.status and result.status.allowed)


@pytest.fixture(scope="module")
def installed(cp: ControlPlane, dyn: DynamicClient) -> None:
    """The manifests with a standalone extender (its own ServiceAccount), created for real
    (RBAC objects must exist for the reviews)."""
    for obj in render_manifests({"extender": {"mode": "standalone"}}):
        try:
            _create(dyn, obj, dry_run=False)
        except ApiException as exc:
            assert exc.status == 409, exc.body  # ServiceAccounts from an earlier test


Check = tuple[str, str, dict[str, str]]


def _check_all(cp: ControlPlane, sa: str, allowed: list[Check], denied: list[Check]) -> None:
    wrong = []
    for expect, checks in ((True, allowed), (False, denied)):
        for verb, resource, kw in checks:
            if _allowed(cp, sa, verb, resource, **kw) is not expect:
                wrong.append(f"{sa}: {verb} {resource} {kw} should be "
                             f"{'allowed' if expect else 'denied'}")
    assert not wrong, "\n".join(wrong)


def test_extender_rbac(cp: ControlPlane, installed: None) -> None:
    _check_all(
        cp, "gputopo-extender",
        allowed=[
            ("list", "nodes", {}), ("watch", "nodes", {}), ("get", "nodes", {}),
            ("list", "pods", {}), ("watch", "pods", {}),
            ("get", "pods", {"namespace": "team-a"}),
            ("create", "pods", {"namespace": "team-a", "subresource": "binding"}),
            ("create", "events", {"namespace": "team-a"}),
            ("create", "events", {"namespace": "team-a", "group": "events.k8s.io"}),
            # the postponement's condition (scheduler_extender.pending.CONDITION_POSTPONED)
            ("patch", "pods", {"namespace": "team-a", "subresource": "status"}),
        ],
        denied=[
            ("delete", "pods", {"namespace": "team-a"}),
            ("create", "pods", {"namespace": "team-a"}),
            ("update", "pods", {"namespace": "team-a"}),
            ("patch", "pods", {"namespace": "team-a"}),  # the Binding carries the annotations
            ("patch", "nodes", {}), ("update", "nodes", {}), ("delete", "nodes", {}),
            ("get", "secrets", {"namespace": NS}), ("list", "configmaps", {}),
            ("update", "pods", {"namespace": "team-a", "subresource": "status"}),
        ],
    )


def test_device_plugin_rbac(cp: ControlPlane, installed: None) -> None:
    _check_all(
        cp, "gputopo-device-plugin",
        # its calls only (the admission policy then confines the patches to its node)
        allowed=[
            ("patch", "nodes", {"name": "gpu-node-1"}),
            ("list", "pods", {}),
            ("patch", "pods", {"namespace": "team-a"}),
        ],
        denied=[
            ("get", "nodes", {"name": "gpu-node-1"}), ("watch", "pods", {}),
            ("get", "pods", {"namespace": "team-a"}),
            ("list", "nodes", {}), ("delete", "nodes", {}), ("update", "nodes", {}),
            ("patch", "nodes", {"subresource": "status"}),
            ("create", "pods", {"namespace": "team-a", "subresource": "binding"}),
            ("delete", "pods", {"namespace": "team-a"}),
            ("get", "secrets", {"namespace": NS}),
        ],
    )


def test_scheduler_rbac(cp: ControlPlane, installed: None) -> None:
    lease = {"group": "coordination.k8s.io", "namespace": NS}
    _check_all(
        cp, "gputopo-scheduler",
        allowed=[
            ("create", "leases", lease),
            ("get", "leases", {**lease, "name": "gputopo-scheduler"}),
            ("update", "leases", {**lease, "name": "gputopo-scheduler"}),
            ("get", "configmaps", {"namespace": "kube-system",
                                   "name": "extension-apiserver-authentication"}),
            ("create", "pods", {"namespace": "team-a", "subresource": "binding"}),
            ("list", "nodes", {}), ("watch", "pods", {}),
            ("list", "storageclasses", {"group": "storage.k8s.io"}),
        ],
        denied=[
            ("update", "leases", {**lease, "name": "someone-else"}),
            ("get", "secrets", {"namespace": NS}),
            ("patch", "nodes", {}),
            ("get", "configmaps", {"namespace": NS}),
        ],
    )


def test_device_plugin_profiles_rbac(cp: ControlPlane, dyn: DynamicClient) -> None:
    """With measured profiles on, the device plugin may read and patch the one ConfigMap it
    records into (and create it), nothing else of ConfigMaps."""
    for obj in render_manifests(COLOCATION_VALUES):
        if obj["kind"] in ("Role", "RoleBinding", "ServiceAccount"):
            try:
                _create(dyn, obj, dry_run=False)
            except ApiException as exc:
                assert exc.status == 409, exc.body
    cm = {"namespace": NS, "name": "gputopo-measured-profiles"}
    _check_all(
        cp, "gputopo-device-plugin",
        allowed=[("get", "configmaps", cm), ("patch", "configmaps", cm),
                 ("create", "configmaps", {"namespace": NS})],
        denied=[("get", "configmaps", {"namespace": NS, "name": "gputopo-extender"}),
                ("patch", "configmaps", {"namespace": NS, "name": "gputopo-extender"}),
                ("delete", "configmaps", cm), ("list", "configmaps", {"namespace": NS}),
                ("get", "configmaps", {"namespace": "team-a",
                                       "name": "gputopo-measured-profiles"})],
    )
