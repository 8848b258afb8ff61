"""The chart's DRA-mode control-plane pieces: the DRA allocator's Deployment, its RBAC (least
privilege, checked with SubjectAccessReviews against the real kube-apiserver) and the
MutatingAdmissionPolicy that gates pods with ResourceClaims (acting, in the real API server).
Skipped only when helm or the control-plane binaries cannot be had."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from localcluster import Binaries, ControlPlane
from localcluster.chart import DEFAULT_NAMESPACE, render_manifests
from localcluster.controlplane import wait_until
from scheduler_extender.dra.claims import SCHEDULING_GATE
from scheduler_extender.dra.settings import load_settings
from tests.deploy.helpers import Obj, find

NS = DEFAULT_NAMESPACE
NAME = "gputopo-dra-allocator"
DRA = {"mode": "dra"}


def _rules(objs: list[Obj], name: str) -> list[tuple[tuple[str, ...], tuple[str, ...],
                                                      tuple[str, ...]]]:
    role = find(objs, "ClusterRole", name)
    return [(tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"])))
            for r in role["rules"]]


def test_only_dra_mode_renders_the_allocator(helm_available: None) -> None:
    plain = render_manifests()
    assert not [o for o in plain if NAME in o["metadata"]["name"] or "gate-claim" in
                o["metadata"]["name"]]
    objs = render_manifests(DRA)
    dep = find(objs, "Deployment", NAME)
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][0] == "dra-allocator"
    args = dict(a.removeprefix("--").split("=", 1) for a in c["args"][1:])
    # the rendered flags are ones the allocator accepts
    settings = load_settings({"policy": args["policy"], "writers": int(args["writers"]),
                              "postpone_max_s": float(args["postpone-max-s"]),
                              "port": int(args["port"]), "lease_namespace": args[
                                  "lease-namespace"], "log_level": args["log-level"]})
    assert settings.policy == "gputopo" and settings.leader_elect
    assert settings.postpone_max_s == 1800
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert find(objs, "MutatingAdmissionPolicy", "gputopo-gate-claim-pods")
    off = render_manifests({**DRA, "draAllocator": {"gate": {"enabled": False}}})
    assert not [o for o in off if o["kind"] == "MutatingAdmissionPolicy"
                and "gate" in o["metadata"]["name"]]


def test_allocator_rbac_is_least_privilege(helm_available: None) -> None:
    objs = render_manifests(DRA)
    assert _rules(objs, NAME) == [
        (("",), ("nodes",), ("get", "list", "watch")),
        (("",), ("pods",), ("get", "list", "patch", "watch")),
        (("",), ("pods/status",), ("patch",)),  # the postponement's condition only
        (("resource.k8s.io",), ("resourceslices", "deviceclasses", "devicetaintrules"),
         ("get", "list", "watch")),
        (("resource.k8s.io",), ("resourceclaims",), ("get", "list", "patch", "watch")),
        (("resource.k8s.io",), ("resourceclaims/status", "resourceclaims/binding"),
         ("patch", "update")),
        (("",), ("events",), ("create", "patch")),
    ]
    role = find(objs, "Role", NAME)
    assert [(r["apiGroups"], r["resources"], sorted(r["verbs"])) for r in role["rules"]] == [
        (["coordination.k8s.io"], ["leases"], ["create", "get", "update"])]


# ------------------------------------------------------------------ the real API server
@pytest.fixture(scope="module")
def cp(binaries: Binaries) -> Iterator[ControlPlane]:
    with ControlPlane(binaries) as plane:
        plane.create_default_serviceaccount(NS)
        plane.create_default_serviceaccount("team-a")
        dyn = DynamicClient(plane.api_client())
        for obj in render_manifests(DRA):
            res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            try:
                res.create(body=obj, namespace=obj["metadata"].get("namespace")
                           if res.namespaced else None)
            except ApiException as exc:
                assert exc.status == 409, exc.body
        yield plane


def _allowed(cp: ControlPlane, verb: str, resource: str, *, group: str = "",
             namespace: str = "", subresource: str = "") -> bool:
    user = f"system:serviceaccount:{NS}:{NAME}"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"]
    review = k8s_client.V1SubjectAccessReview(spec=k8s_client.V1SubjectAccessReviewSpec(
        user=user, groups=groups, resource_attributes=k8s_client.V1ResourceAttributes(
            verb=verb, resource=resource, group=group, namespace=namespace or None,
            subresource=subresource or None)))
    result = k8s_client.AuthorizationV1Api(cp.api_client()).create_subject_access_review(
        review)
    return bool(result.status and result.status.allowed)


@pytest.mark.e2e
def test_the_allocator_may_do_exactly_its_writes(cp: ControlPlane) -> None:
    res = "resource.k8s.io"
    allowed = [
        ("watch", "resourceclaims", {"group": res}),
        ("patch", "resourceclaims", {"group": res, "namespace": "team-a",
                                     "subresource": "status"}),
        # DRAResourceClaimGranularStatusAuthorization: writing allocation/reservedFor needs
        # the synthetic binding subresource too
        ("patch", "resourceclaims", {"group": res, "subresource": "binding"}),
        ("patch", "resourceclaims", {"group": res, "namespace": "team-a"}),
        ("list", "resourceslices", {"group": res}), ("watch", "deviceclasses", {"group": res}),
        ("watch", "devicetaintrules", {"group": res}),
        ("patch", "pods", {"namespace": "team-a"}), ("watch", "pods", {}),
        ("patch", "pods", {"namespace": "team-a", "subresource": "status"}),
        ("create", "events", {"namespace": "team-a"}),
        ("update", "leases", {"group": "coordination.k8s.io", "namespace": NS}),
    ]
    denied = [
        ("delete", "resourceclaims", {"group": res, "namespace": "team-a"}),
        ("create", "resourceclaims", {"group": res, "namespace": "team-a"}),
        ("create", "resourceslices", {"group": res}),
        ("update", "resourceslices", {"group": res}),
        ("create", "deviceclasses", {"group": res}),
        ("create", "devicetaintrules", {"group": res}),
        ("delete", "pods", {"namespace": "team-a"}),
        ("create", "pods", {"namespace": "team-a", "subresource": "binding"}),
        ("update", "pods", {"namespace": "team-a", "subresource": "status"}),
        ("patch", "nodes", {}), ("get", "secrets", {"namespace": NS}),
        ("update", "leases", {"group": "coordination.k8s.io", "namespace": "team-a"}),
        # changing status.devices is the driver's (resourceclaims/driver, per driver)
        ("arbitrary-node-update", "resourceclaims", {"group": res, "subresource": "driver"}),
    ]
    wrong = [f"{v} {r} {kw} should be {'allowed' if ok else 'denied'}"
             for ok, checks in ((True, allowed), (False, denied))
             for v, r, kw in checks if _allowed(cp, v, r, **kw) is not ok]
    assert not wrong, "\n".join(wrong)


def _pod(name: str, claims: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    if claims:
        spec["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "one-gpu"}]
        spec["containers"][0]["resources"] = {"claims": [{"name": "g"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.mark.e2e
def test_pods_with_claims_are_gated_and_others_are_not(cp: ControlPlane) -> None:
    core = cp.core_v1()

    def gates(name: str, claims: bool) -> list[str]:
        pod = core.create_namespaced_pod("team-a", cast(Any, _pod(name, claims)),
                                         dry_run="All")
        return [g.name for g in (pod.spec.scheduling_gates or [])] if pod.spec else []

    wait_until(lambda: gates("probe", True) == [SCHEDULING_GATE], 60,
               "the gate policy to act", interval_s=0.5)
    assert gates("plain", False) == []
    # a pod that already has gates keeps them and gets gputopo's too
    body = _pod("gated", True)
    body["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    pod = core.create_namespaced_pod("team-a", cast(Any, body), dry_run="All")
    assert pod.spec is not None
    assert sorted(g.name for g in pod.spec.scheduling_gates or []) == sorted(
        ["example.com/other", SCHEDULING_GATE])
