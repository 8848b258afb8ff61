"""The Helm chart: lint, render variants, what the objects say, and deploy/ drift.

These need only the helm binary (no control plane); the API-server and kube-scheduler checks
are in test_deploy_apiserver.py, test_deploy_scheduler.py and test_deploy_stack.py.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from device_plugin.plugin import open_nvml
from device_plugin.settings import load_settings
from localcluster.chart import (
    CHART_DIR,
    DEPLOY_MANIFEST,
    ChartError,
    find_helm,
    helm_template,
    render_deploy_manifest,
    render_manifests,
    render_scheduler_config,
    scheduler_config_from_manifests,
)
from tests.deploy.helpers import (
    COLOCATION_VALUES,
    CUSTOM_TOPOLOGY,
    DRA_VALUES,
    EXTENDER_DNS,
    FAKE_VALUES,
    PRIVILEGED_VALUES,
    Obj,
    TlsMaterial,
    find,
    tls_values,
)
from topology import catalog
from topology.contract import MANAGED_RESOURCES, RESOURCE_GPU
from topology.discovery.fake_nvml import FakeNVML
from topology.policies.registry import get_policy
from topology.serialization import dumps
from topology.sources import load_topology

REPO = Path(__file__).resolve().parents[2]
def container(obj: Obj) -> Obj:
    containers = obj["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    c: Obj = containers[0]
    return c


def sched_config(objs: list[Obj]) -> Obj:
    cfg: Obj = yaml.safe_load(scheduler_config_from_manifests(objs))
    return cfg


def pinned_versions() -> dict[str, str]:
    out = {}
    for line in (REPO / "scripts" / "k8s-versions.env").read_text().splitlines():
        m = re.match(r"^([A-Z0-9_]+)=(\S+)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def values_defaults() -> Obj:
    data: Obj = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    return data


# ------------------------------------------------------------------ helm lint / template


@pytest.mark.parametrize("variant", ["default", "tls", "fake", "dra"])
def test_helm_lint_strict(helm_available: None, tls: TlsMaterial, variant: str,
                          tmp_path: Path) -> None:
    values = {"default": {}, "tls": tls_values(tls), "fake": FAKE_VALUES,
              "dra": DRA_VALUES}[variant]
    vfile = tmp_path / "values.yaml"
    vfile.write_text(yaml.safe_dump(values))
    proc = subprocess.run(
        [str(find_helm()), "lint", "--strict", str(CHART_DIR), "--values", str(vfile),
         "--kube-version", pinned_versions()["K8S_VERSION"]],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_every_variant_renders_namespaced_labelled_objects(
    variants: dict[str, list[Obj]],
) -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                      "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy",
                      "MutatingAdmissionPolicyBinding"}
    for name, objs in variants.items():
        assert objs, name
        for o in objs:
            meta = o["metadata"]
            assert meta["labels"]["app.kubernetes.io/part-of"] == "gputopo", (name, meta)
            if o["kind"] in cluster_scoped:
                assert "namespace" not in meta
            elif o["kind"] == "RoleBinding" and meta["namespace"] == "kube-system":
                assert meta["name"].endswith("extension-apiserver-authentication-reader")
            else:
                assert meta["namespace"] == "gputopo-system", (name, o["kind"], meta["name"])


def test_default_objects(variants: dict[str, list[Obj]]) -> None:
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in variants["default"])
    assert kinds == sorted([
        # the extender is a sidecar of the scheduler pods: no Deployment, Service or account
        ("ClusterRole", "gputopo-extender"),
        ("ClusterRoleBinding", "gputopo-extender"),
        ("ConfigMap", "gputopo-extender"),
        ("ServiceAccount", "gputopo-scheduler"),
        ("PodDisruptionBudget", "gputopo-scheduler"),
        ("NetworkPolicy", "gputopo-scheduler"),
        ("ClusterRoleBinding", "gputopo-scheduler-kube-scheduler"),
        ("ClusterRoleBinding", "gputopo-scheduler-volume-scheduler"),
        ("RoleBinding", "gputopo-scheduler-extension-apiserver-authentication-reader"),
        ("Role", "gputopo-scheduler-leader-election"),
        ("RoleBinding", "gputopo-scheduler-leader-election"),
        ("ConfigMap", "gputopo-scheduler"),
        ("Deployment", "gputopo-scheduler"),
        ("ServiceAccount", "gputopo-device-plugin"),
        ("ClusterRole", "gputopo-device-plugin"),
        ("ClusterRoleBinding", "gputopo-device-plugin"),
        ("DaemonSet", "gputopo-device-plugin"),
        ("ServiceAccount", "gputopo-planner"),
        ("ClusterRole", "gputopo-planner"),
        ("ClusterRoleBinding", "gputopo-planner"),
        ("Role", "gputopo-planner"),
        ("RoleBinding", "gputopo-planner"),
        ("ConfigMap", "gputopo-planner"),
        ("ConfigMap", "gputopo-planner-profiles"),
        ("Deployment", "gputopo-planner"),
        ("ValidatingAdmissionPolicy", "gputopo-device-plugin-own-nodes"),
        ("ValidatingAdmissionPolicyBinding", "gputopo-device-plugin-own-nodes"),
        ("ValidatingAdmissionPolicy", "gputopo-device-plugin-own-pods"),
        ("ValidatingAdmissionPolicyBinding", "gputopo-device-plugin-own-pods"),
        ("MutatingAdmissionPolicy", "gputopo-route-gpu-pods"),
        ("MutatingAdmissionPolicyBinding", "gputopo-route-gpu-pods"),
    ])


# ------------------------------------------------------------------ extender


def test_extender_deployment_probes_security_and_single_replica(
    variants: dict[str, list[Obj]],
) -> None:
    dep = find(variants["standalone"], "Deployment", "gputopo-extender")
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gputopo-extender"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    c = container(dep)
    assert c["args"][:2] == ["extender", "--config=/etc/gputopo/extender.yaml"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", "scheme": "HTTP"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", "scheme": "HTTP"}
    assert c["ports"] == [{"name": "http", "containerPort": 8888, "protocol": "TCP"}]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert {"cpu", "memory"} <= set(c["resources"]["requests"])
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/etc/gputopo", "/tmp"} <= mounts  # writable /tmp under a read-only root
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "8888"
    assert annotations["prometheus.io/path"] == "/metrics"
    svc = find(variants["standalone"], "Service", "gputopo-extender")
    assert svc["spec"]["ports"] == [
        {"name": "http", "port": 8888, "targetPort": "http", "protocol": "TCP"}
    ]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()


def settings_file(objs: list[Obj], program: str, tmp_path: Path,
                  reader: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """The chart's settings file of ``program`` (ConfigMap ``gputopo-<program>``, key
    ``<program>.yaml``) as the program's own ``reader`` reads it (unknown keys raise)."""
    cm = find(objs, "ConfigMap", f"gputopo-{program}")
    path = tmp_path / f"{program}.yaml"
    path.write_text(cm["data"][f"{program}.yaml"])
    return reader(path)


def test_extender_settings_file_is_accepted_by_the_extender(
    variants: dict[str, list[Obj]], tmp_path: Path
) -> None:
    from scheduler_extender.settings import read_config_file

    data = settings_file(variants["default"], "extender", tmp_path, read_config_file)
    assert data == {"host": "0.0.0.0", "port": 8888, "state": "kubernetes",
                    "policy": "gputopo", "log_level": "info", "vgpu_memory_unit_mib": 256,
                    "postpone_max_s": 1800,
                    "colocation_policy": "gputopo", "colocation_threshold": 4e7,
                    "profile_catalog": "v100-cifar10-w10",
                    # the lookahead reads the pending pods of the chart's scheduler profile
                    "scheduler_name": "gputopo-scheduler",
                    "auth": "loopback"}  # a sidecar: the verbs answer loopback callers only
    # standalone without clientAuth: none
    assert "auth" not in settings_file(variants["standalone"], "extender", tmp_path,
                                       read_config_file)
    # one unit for both programs: the device plugins' value
    dp = find(variants["default"], "DaemonSet", "gputopo-device-plugin")
    env = {e["name"]: e.get("value") for e in container(dp)["env"]}
    assert env["GPUTOPO_DP_VGPU_MEMORY_UNIT_MIB"] == str(data["vgpu_memory_unit_mib"])
    get_policy(data["policy"])  # the default policy is registered


def test_planner_settings_file_is_accepted_by_the_planner(
    variants: dict[str, list[Obj]], tmp_path: Path
) -> None:
    from planner.settings import read_config_file
    from scheduler_extender.settings import read_config_file as read_extender

    data = settings_file(variants["default"], "planner", tmp_path, read_config_file)
    extender = settings_file(variants["default"], "extender", tmp_path, read_extender)
    # the gangs of one sensitive pod wait as long as the extender lets such a pod wait
    assert data["postpone_max_s"] == extender["postpone_max_s"] == 1800
    assert data["leader_elect"] is True and data["move_penalty_eur"] == 0.02


def test_extender_tls_mounts_secret_and_switches_to_https(
    variants: dict[str, list[Obj]], tls: TlsMaterial
) -> None:
    objs = variants["tls"]
    secret = find(objs, "Secret", "gputopo-extender-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert base64.b64decode(secret["data"]["tls.crt"]).decode() == tls.cert
    assert base64.b64decode(secret["data"]["tls.key"]).decode() == tls.key
    cm = yaml.safe_load(find(objs, "ConfigMap", "gputopo-extender")["data"]["extender.yaml"])
    assert cm["tls_cert"] == "/etc/gputopo-tls/tls.crt"
    assert cm["tls_key"] == "/etc/gputopo-tls/tls.key"
    dep = find(objs, "Deployment", "gputopo-extender")
    c = container(dep)
    assert {"name": "tls", "mountPath": "/etc/gputopo-tls", "readOnly": True} in c["volumeMounts"]
    vols = dep["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "gputopo-extender-tls"}} in vols
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert c["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    svc = find(objs, "Service", "gputopo-extender")
    assert svc["spec"]["ports"][0]["name"] == "https"

    ext = sched_config(objs)["extenders"][0]
    assert ext["urlPrefix"] == f"https://{EXTENDER_DNS}:8888"
    assert ext["enableHTTPS"] is True
    assert base64.b64decode(ext["tlsConfig"]["caData"]).decode() == tls.ca_cert
    assert "insecure" not in ext["tlsConfig"]


def test_extender_tls_with_existing_secret(helm_available: None, tls: TlsMaterial) -> None:
    objs = render_manifests(
        {"extender": {"mode": "standalone",
                      "tls": {"enabled": True, "secretName": "my-cert", "caCert": tls.ca_cert}}}
    )
    assert not [o for o in objs if o["kind"] == "Secret"]
    dep = find(objs, "Deployment", "gputopo-extender")
    vols = dep["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "my-cert"}} in vols


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"extender": {"mode": "standalone", "tls": {"enabled": True}}},
         "needs extender.tls.secretName"),
        ({"extender": {"mode": "standalone", "tls": {"enabled": True, "secretName": "s"}}},
         "caCert"),
        ({"extender": {"mode": "standalone", "tls": {"enabled": True, "secretName": "s",
                       "cert": "-----BEGIN CERTIFICATE-----"}}}, "not both"),
        ({"extender": {"tls": {"enabled": True, "secretName": "s", "insecureSkipVerify": True}}},
         "extender.tls is for extender.mode standalone"),
        ({"extender": {"mode": "both"}}, "mode"),
        ({"extender": {"mode": "standalone", "tls": {"clientAuth": {"enabled": True}}}},
         "extender.tls.clientAuth needs extender.tls.enabled"),
        ({"networkPolicy": {"metricsFrom": [{"podSelektor": {}}]}}, "podSelektor"),
        ({"scheduler": {"leaderElection": {"leaseDuration": "6 s"}}}, "leaseDuration"),
        ({"scheduler": {"podDisruptionBudget": {"maxUnavailable": 0}}}, "maxUnavailable"),
        ({"extender": {"replicas": 2}}, "/extender/replicas"),
        ({"extender": {"polcy": "gaia"}}, "polcy"),
        ({"extender": {"urlOverride": "ftp://x"}}, "urlOverride"),
        ({"scheduler": {"extender": {"httpTimeout": "5 seconds"}}}, "httpTimeout"),
        ({"scheduler": {"extender": {"weight": 0}}}, "weight"),
        ({"scheduler": {"extender": {"managedResources": [{"name": "nvidia.com/gpu"}]}}},
         "ignoredByScheduler"),
        ({"devicePlugin": {"fakeTopologyByNodeLabel": {"Bad_Key": "dgx1-v100"}}}, "Bad_Key"),
        ({"devicePlugin": {"kubeletRootDir": "relative/dir"}}, "kubeletRootDir"),
        ({"devicePlugin": {"kubelet": {"topologyManagerPolicy": "strict"}}},
         "topologyManagerPolicy"),
        ({"devicePlugin": {"kubelet": {"configFile": "config.yaml"}}}, "configFile"),
        ({"extender": {"enabled": False}}, "scheduler.enabled needs the extender"),
    ],
)
def test_bad_values_are_rejected_with_a_named_setting(
    helm_available: None, values: Obj, message: str
) -> None:
    with pytest.raises(ChartError, match=re.escape(message)):
        helm_template(values)


def test_tls_needs_https_override(helm_available: None, tls: TlsMaterial) -> None:
    with pytest.raises(ChartError, match="must be https://"):
        render_scheduler_config("http://127.0.0.1:1", **tls_values(tls))


# ------------------------------------------------------------------ RBAC


Rule = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def rules(objs: list[Obj], name: str) -> list[Rule]:
    role = find(objs, "ClusterRole", name)
    return [
        (tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"])))
        for r in role["rules"]
    ]


def test_extender_rbac_is_least_privilege(variants: dict[str, list[Obj]]) -> None:
    assert rules(variants["default"], "gputopo-extender") == [
        (("",), ("nodes",), ("get", "list", "watch")),
        (("",), ("pods",), ("get", "list", "watch")),  # bind patches nothing: one Binding
        (("",), ("pods/binding",), ("create",)),
        (("",), ("pods/status",), ("patch",)),  # the postponement's condition only
        (("", "events.k8s.io"), ("events",), ("create", "patch")),
    ]


def api_calls(*packages: str) -> set[str]:
    """The Kubernetes client methods the code of ``packages`` calls (``api.<method>(``)."""
    calls: set[str] = set()
    for package in packages:
        for path in (REPO / package).glob("*.py"):
            calls |= set(re.findall(r"\bapi\.(\w+)\(", path.read_text()))
    return calls


def test_device_plugin_rbac_is_least_privilege(variants: dict[str, list[Obj]]) -> None:
    # exactly its calls: patch_node (gpunode/publish.py), one field-selected LIST of the pods on
    # its node and patch_namespaced_pod (pods.py); the admission policy confines the patches
    assert rules(variants["default"], "gputopo-device-plugin") == [
        (("",), ("nodes",), ("patch",)),
        (("",), ("pods",), ("list", "patch")),
    ]
    calls = api_calls("device_plugin", "gpunode")
    assert calls == {"patch_node", "list_pod_for_all_namespaces", "patch_namespaced_pod",
                     # profiling (the measured-profiles Role): read, patch, create one ConfigMap
                     "read_namespaced_config_map", "patch_namespaced_config_map",
                     "create_namespaced_config_map"}


def test_planner_rbac_is_least_privilege(variants: dict[str, list[Obj]]) -> None:
    assert rules(variants["default"], "gputopo-planner") == [
        (("",), ("nodes", "pods"), ("get", "list", "watch")),
        (("batch",), ("jobs",), ("get", "list", "patch", "watch")),
        (("",), ("events",), ("create", "patch")),
    ]
    role = find(variants["default"], "Role", "gputopo-planner")
    assert [(r["apiGroups"], r["resources"], sorted(r["verbs"])) for r in role["rules"]] == [
        (["coordination.k8s.io"], ["leases"], ["create", "get", "update"]),
        ([""], ["configmaps"], ["get"]),
    ]


def test_planner_settings_and_profiles_are_accepted_by_the_planner(
    variants: dict[str, list[Obj]], tmp_path: Path
) -> None:
    from planner.settings import load_settings
    from topology.planning.profiles import load_profiles

    cm = find(variants["default"], "ConfigMap", "gputopo-planner")
    path = tmp_path / "planner.yaml"
    path.write_text(cm["data"]["planner.yaml"])
    s = load_settings({}, path)  # unknown keys or bad values would raise
    assert (s.interval_s, s.rho, s.max_iterations, s.pue, s.eur_per_kwh) == (
        300, 100, 1000, 1.33, 0.172)
    assert s.leader_elect and s.lease_namespace == "gputopo-system"
    assert s.profiles_configmap == "gputopo-system/gputopo-planner-profiles"
    profiles = find(variants["default"], "ConfigMap", "gputopo-planner-profiles")
    doc = load_profiles(profiles["data"]["profiles.yaml"])
    assert set(doc.profiles) == {"efficientnet", "convnet", "lstm-big", "lstm-small"}
    dep = find(variants["default"], "Deployment", "gputopo-planner")
    c = container(dep)
    assert c["args"] == ["planner", "--config=/etc/gputopo/planner.yaml"]
    assert c["ports"][0]["containerPort"] == s.metrics_port
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9464"


def test_chart_states_its_minimum_kubernetes_version(helm_available: None) -> None:
    """The planner resizes suspended Jobs (KEP-5440, on by default from 1.36)."""
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.36.0-0"
    with pytest.raises(ChartError, match="kubeVersion"):
        helm_template(extra_args=["--kube-version", "v1.35.0"])


def test_scheduler_bindings(variants: dict[str, list[Obj]]) -> None:
    objs = variants["default"]
    sa = {"kind": "ServiceAccount", "name": "gputopo-scheduler", "namespace": "gputopo-system"}
    for binding, role in [
        ("gputopo-scheduler-kube-scheduler", "system:kube-scheduler"),
        ("gputopo-scheduler-volume-scheduler", "system:volume-scheduler"),
    ]:
        crb = find(objs, "ClusterRoleBinding", binding)
        assert crb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": role}
        assert crb["subjects"] == [sa]
    reader = find(objs, "RoleBinding",
                  "gputopo-scheduler-extension-apiserver-authentication-reader")
    assert reader["metadata"]["namespace"] == "kube-system"
    assert reader["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    lease_role = find(objs, "Role", "gputopo-scheduler-leader-election")
    named = [r for r in lease_role["rules"] if r.get("resourceNames")]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                      "resourceNames": ["gputopo-scheduler"],
                      "verbs": ["get", "list", "watch", "update"]}]


# ------------------------------------------------------------------ scheduler wiring


def test_scheduler_config_default(variants: dict[str, list[Obj]]) -> None:
    cfg = sched_config(variants["default"])
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    assert cfg["profiles"] == [{"schedulerName": "gputopo-scheduler"}]
    assert cfg["leaderElection"] == {
        "leaderElect": True,
        "resourceName": "gputopo-scheduler",
        "resourceNamespace": "gputopo-system",
    }
    assert "clientConnection" not in cfg  # in-cluster config
    [ext] = cfg["extenders"]
    assert ext == {
        "urlPrefix": "http://127.0.0.1:8888",  # its own sidecar
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "preemptVerb": "preempt",
        "bindVerb": "bind",
        "weight": 5,
        "httpTimeout": "5s",
        "nodeCacheCapable": True,
        "ignorable": False,
        "managedResources": [
            {"name": "nvidia.com/gpu", "ignoredByScheduler": False},
            {"name": "gputopo.io/vgpu-core", "ignoredByScheduler": True},
            {"name": "gputopo.io/vgpu-memory", "ignoredByScheduler": True},
            {"name": "gputopo.io/gpu-shared", "ignoredByScheduler": False},
        ],
    }
    # The managed resources are exactly the contract's, and whole GPUs stay counted by the
    # scheduler (the kubelet advertises them).
    assert tuple(r["name"] for r in ext["managedResources"]) == MANAGED_RESOURCES
    ignored = {r["name"]: r["ignoredByScheduler"] for r in ext["managedResources"]}
    assert ignored[RESOURCE_GPU] is False


def test_scheduler_deployment(variants: dict[str, list[Obj]]) -> None:
    objs = variants["default"]
    dep = find(objs, "Deployment", "gputopo-scheduler")
    c = container(dep)
    k8s = pinned_versions()["K8S_VERSION"]
    assert c["image"] == f"registry.k8s.io/kube-scheduler:{k8s}"
    assert values_defaults()["scheduler"]["image"]["tag"] == k8s
    assert c["command"][:2] == ["kube-scheduler",
                                "--config=/etc/kubernetes/gputopo-scheduler/config.yaml"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["ports"][0]["containerPort"] == 10259
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gputopo-scheduler"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["volumes"][0] == {"name": "config", "configMap": {"name": "gputopo-scheduler"}}
    assert {"name": "extender-config", "configMap": {"name": "gputopo-extender"}} in pod["volumes"]
    assert dep["spec"]["replicas"] == 2  # a hot standby, with its own extender
    # A config change rolls the scheduler.
    checksum = dep["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    other = render_manifests({"scheduler": {"extender": {"weight": 7}}})
    assert find(other, "Deployment", "gputopo-scheduler")["spec"]["template"]["metadata"][
        "annotations"]["checksum/config"] != checksum


def test_render_scheduler_config_api(helm_available: None) -> None:
    text = render_scheduler_config(
        "http://127.0.0.1:12345/",
        scheduler={"extender": {"weight": 9, "httpTimeout": "30s"},
                   "leaderElection": {"enabled": False}},
    )
    cfg = yaml.safe_load(text)
    ext = cfg["extenders"][0]
    assert ext["urlPrefix"] == "http://127.0.0.1:12345"
    assert ext["weight"] == 9 and ext["httpTimeout"] == "30s"
    assert cfg["leaderElection"] == {"leaderElect": False}
    # The text is the ConfigMap's, byte for byte.
    objs = render_manifests(
        {"scheduler": {"extender": {"weight": 9, "httpTimeout": "30s"},
                       "leaderElection": {"enabled": False}}},
        set_string={"extender.urlOverride": "http://127.0.0.1:12345/"},
    )
    assert scheduler_config_from_manifests(objs) == text
    # Other releases / namespaces move the lease.
    cfg2 = yaml.safe_load(render_scheduler_config("http://x:1", namespace="ops"))
    assert cfg2["leaderElection"]["resourceNamespace"] == "ops"


def test_preempt_verb_can_be_switched_off(helm_available: None) -> None:
    """``scheduler.extender.preemptVerb: ""`` leaves the verb out: kube-scheduler then
    preempts by GPU count alone (``HTTPExtender.SupportsPreemption`` is false)."""
    cfg = yaml.safe_load(render_scheduler_config(
        "http://x:1", scheduler={"extender": {"preemptVerb": ""}}))
    assert "preemptVerb" not in cfg["extenders"][0]
    with pytest.raises(ChartError, match="preemptVerb"):
        render_scheduler_config("http://x:1", scheduler={"extender": {"preemptVerb": "a/b"}})


def test_url_override_with_commas_is_kept_verbatim(helm_available: None) -> None:
    cfg = yaml.safe_load(render_scheduler_config("http://127.0.0.1:1/a,b"))
    assert cfg["extenders"][0]["urlPrefix"] == "http://127.0.0.1:1/a,b"


def test_scheduler_config_passthrough_and_insecure_tls(helm_available: None) -> None:
    cfg = yaml.safe_load(render_scheduler_config(
        "https://10.0.0.1:8443",
        extender={"mode": "standalone",
                  "tls": {"enabled": True, "secretName": "s", "insecureSkipVerify": True,
                          "serverName": "gputopo"}},
        scheduler={"percentageOfNodesToScore": 50,
                   "plugins": {"score": {"disabled": [{"name": "ImageLocality"}]}}},
    ))
    assert cfg["percentageOfNodesToScore"] == 50
    assert cfg["profiles"][0]["plugins"] == {"score": {"disabled": [{"name": "ImageLocality"}]}}
    assert cfg["extenders"][0]["tlsConfig"] == {"insecure": True, "serverName": "gputopo"}


# ------------------------------------------------------------------ device plugin


def test_device_plugin_daemonset(variants: dict[str, list[Obj]]) -> None:
    ds = find(variants["default"], "DaemonSet", "gputopo-device-plugin")
    pod = ds["spec"]["template"]["spec"]
    c = container(ds)
    assert c["args"] == ["device-plugin", "--node-name=$(NODE_NAME)",
                         "--device-plugin-dir=/var/lib/kubelet/device-plugins",
                         "--metrics-port=9445"]
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert {"name": "device-plugins", "hostPath": {
        "path": "/var/lib/kubelet/device-plugins", "type": "Directory"}} in pod["volumes"]
    assert {"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"} in c[
        "volumeMounts"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"]
    assert pod["serviceAccountName"] == "gputopo-device-plugin"
    assert "affinity" not in pod
    assert c["ports"] == [{"name": "metrics", "containerPort": 9445, "protocol": "TCP"}]


def test_device_plugin_settings_env_names_exist() -> None:
    from device_plugin.settings import DevicePluginSettings

    fields = set(DevicePluginSettings.model_fields)
    for env in ("POD_RESOURCES_SOCKET", "VGPU_MEMORY_UNIT_MIB", "LOG_LEVEL",
                "KUBELET_CONFIG_FILE", "KUBELET_TOPOLOGY_MANAGER_POLICY",
                "KUBELET_TOPOLOGY_MANAGER_SCOPE", "KUBELET_CPU_MANAGER_POLICY"):
        assert env.lower() in fields


def test_device_plugin_learns_the_kubelets_numa_settings(
    helm_available: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """devicePlugin.kubelet: the values become the plugin's settings, and the kubelet's own
    config file is mounted read-only as that one file (never its directory, which holds its
    credentials); the plugin resolves them as it will on the node. Default: nothing set, the
    kubelet's defaults published."""
    from device_plugin.plugin import kubelet_settings

    default = find(render_manifests({}), "DaemonSet", "gputopo-device-plugin")
    assert not [e for e in container(default)["env"] if "KUBELET" in e["name"]]
    values = {"devicePlugin": {"kubelet": {"configFile": "/var/lib/kubelet/config.yaml",
                                           "topologyManagerScope": "pod"}}}
    ds = find(render_manifests(values), "DaemonSet", "gputopo-device-plugin")
    c = container(ds)
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert env["GPUTOPO_DP_KUBELET_CONFIG_FILE"] == "/etc/gputopo/kubelet/config.yaml"
    assert env["GPUTOPO_DP_KUBELET_TOPOLOGY_MANAGER_SCOPE"] == "pod"
    assert "GPUTOPO_DP_KUBELET_TOPOLOGY_MANAGER_POLICY" not in env
    assert {"name": "kubelet-config", "mountPath": "/etc/gputopo/kubelet/config.yaml",
            "readOnly": True} in c["volumeMounts"]
    assert {"name": "kubelet-config", "hostPath": {"path": "/var/lib/kubelet/config.yaml",
                                                   "type": "File"}} in \
        ds["spec"]["template"]["spec"]["volumes"]
    host = tmp_path / "config.yaml"
    host.write_text("kind: KubeletConfiguration\ntopologyManagerPolicy: single-numa-node\n"
                    "cpuManagerPolicy: static\n")
    for key, value in env.items():
        if key.startswith("GPUTOPO_DP_KUBELET"):
            monkeypatch.setenv(key, str(host) if key.endswith("CONFIG_FILE") else value)
    settings = load_settings({"node_name": "n1"})
    config, _ = kubelet_settings(settings)
    assert (config.topology_manager_policy, config.topology_manager_scope,
            config.cpu_manager_policy) == ("single-numa-node", "pod", "static")


def test_fake_topologies(
    variants: dict[str, list[Obj]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objs = variants["fake"]
    main = find(objs, "DaemonSet", "gputopo-device-plugin")
    assert "--fake-topology=dgx1-v100" in container(main)["args"]
    env = {e["name"] for e in container(main)["env"]}
    assert "NVIDIA_VISIBLE_DEVICES" not in env  # a fake topology needs no driver
    terms = main["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "gputopo.io/fake-topology", "operator": "NotIn",
                                            "values": ["a100", "custom", "mine"]}]}]
    a100 = find(objs, "DaemonSet", "gputopo-device-plugin-fake-a100")
    assert "--fake-topology=dgx-a100" in container(a100)["args"]
    assert a100["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.present": "true", "gputopo.io/fake-topology": "a100"}
    assert "affinity" not in a100["spec"]["template"]["spec"]
    custom = find(objs, "DaemonSet", "gputopo-device-plugin-fake-custom")
    assert "--fake-topology=/etc/gputopo/topologies/custom.json" in container(custom)["args"]
    assert {"name": "topologies", "mountPath": "/etc/gputopo/topologies", "readOnly": True} in \
        container(custom)["volumeMounts"]
    cm = find(objs, "ConfigMap", "gputopo-device-plugin-topologies")
    # The mounted file is what the device plugin's fake NVML reads.
    path = tmp_path / "custom.json"
    path.write_text(cm["data"]["custom.json"])
    fake = FakeNVML.from_source(str(path))
    assert fake.topology == catalog.get(CUSTOM_TOPOLOGY)
    # A saved `nvidia-smi topo -m`, mounted the same way: the plugin, given the chart's
    # memory and health settings, publishes what `gputopo topology show` prints for it.
    mine = find(objs, "DaemonSet", "gputopo-device-plugin-fake-mine")
    assert "--fake-topology=/etc/gputopo/topologies/mine.txt" in container(mine)["args"]
    env = {e["name"]: e.get("value") for e in container(mine)["env"]}
    assert env["GPUTOPO_DP_GPU_MEMORY_MIB"] == "16160"
    assert env["GPUTOPO_DP_HEALTH_RECOVERY_S"] == "120"
    text = tmp_path / "mine.txt"
    text.write_text(cm["data"]["mine.txt"])
    for name, value in env.items():  # the container's environment, as the plugin reads it
        if name.startswith("GPUTOPO_DP_") and value is not None:
            monkeypatch.setenv(name, value)
    settings = load_settings({"node_name": "n1", "fake_topology": str(text)})
    assert settings.health_recovery_s == 120
    _nvml, published = open_nvml(settings)
    assert dumps(published) == dumps(load_topology(str(text), gpu_memory_mib=16160))
    assert [g.memory_mib for g in published.gpus] == [16160] * 8
    # selectors of the DaemonSets differ, so they do not fight over pods
    selectors = {json.dumps(o["spec"]["selector"], sort_keys=True)
                 for o in objs if o["kind"] == "DaemonSet"}
    assert len(selectors) == 4


def test_catalog_names_used_by_the_chart_exist() -> None:
    names = set(catalog.names())
    assert "dgx1-v100" in names and "dgx-a100" in names


def test_service_monitor_optional(helm_available: None) -> None:
    assert not [o for o in render_manifests() if o["apiVersion"].startswith("monitoring.")]
    objs = render_manifests({"metrics": {"serviceMonitor": {"enabled": True,
                                                            "labels": {"release": "prom"}}}})
    sidecars = find(objs, "PodMonitor", "gputopo-extender")  # scrapes every scheduler pod
    assert sidecars["spec"]["podMetricsEndpoints"][0]["port"] == "http"
    assert sidecars["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == \
        "scheduler"
    assert sidecars["metadata"]["labels"]["release"] == "prom"
    objs = render_manifests({"extender": {"mode": "standalone"},
                             "metrics": {"serviceMonitor": {"enabled": True,
                                                            "labels": {"release": "prom"}}}})
    sm = find(objs, "ServiceMonitor", "gputopo-extender")
    assert sm["spec"]["endpoints"][0]["port"] == "http"
    assert sm["metadata"]["labels"]["release"] == "prom"
    pm = find(objs, "PodMonitor", "gputopo-device-plugin")
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"


def test_components_can_be_switched_off(helm_available: None) -> None:
    objs = render_manifests({"devicePlugin": {"enabled": False}, "extender": {"mode": "standalone"},
                             "scheduler": {"enabled": False}, "planner": {"enabled": False}})
    assert {o["metadata"]["name"] for o in objs} == {"gputopo-extender"}
    objs = render_manifests({"extender": {"enabled": False,
                                          "urlOverride": "http://gputopo.example:8888"}})
    assert not [o for o in objs if "extender" in o["metadata"]["name"]]
    assert sched_config(objs)["extenders"][0]["urlPrefix"] == "http://gputopo.example:8888"


def test_other_release_names_do_not_collide(helm_available: None) -> None:
    objs = render_manifests(release="gpu-team", namespace="team")
    names = {o["metadata"]["name"] for o in objs if o["kind"].startswith("Cluster")}
    assert names and all(n.startswith("gpu-team-gputopo-") for n in names)
    # The schedulerName and lease are values, not derived from the release.
    cfg = sched_config(objs)
    assert cfg["profiles"][0]["schedulerName"] == "gputopo-scheduler"
    assert cfg["extenders"][0]["urlPrefix"] == "http://127.0.0.1:8888"  # the sidecar
    objs = render_manifests({"extender": {"mode": "standalone"}}, release="gpu-team",
                            namespace="team")
    assert sched_config(objs)["extenders"][0]["urlPrefix"] == \
        "http://gpu-team-gputopo-extender.team.svc:8888"


# ------------------------------------------------------------------ deploy/ drift


def test_deploy_manifest_matches_helm_template(helm_available: None) -> None:
    expected = render_deploy_manifest()
    actual = DEPLOY_MANIFEST.read_text()
    assert actual == expected, "deploy/gputopo.yaml drifted: run scripts/render-deploy.sh"


def test_render_deploy_script_check_mode(helm_available: None) -> None:
    proc = subprocess.run(
        [str(REPO / "scripts" / "render-deploy.sh"), "--check"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "up to date" in proc.stdout


# ------------------------------------------------------------------ least privilege


def _effective(pod: Obj, c: Obj, key: str) -> object:
    """A container's security setting: its own, else the pod's (where the pod has one)."""
    own = (c.get("securityContext") or {}).get(key)
    return own if own is not None else (pod.get("securityContext") or {}).get(key)


#: Containers that may not run non-root, and why (docs/security.md):
#: device-plugin: uid 0 without capabilities, to create its sockets in the kubelet's
#: root-owned 0750 device-plugins/ directory and connect to pod-resources/kubelet.sock;
#: mps-control-daemon: privileged, to set the GPUs' compute mode (NVML as root);
#: dra-driver: uid 0 without capabilities, to create its sockets in the kubelet's root-owned
#: plugins_registry/ and plugins/ and write CDI specs into the runtime's /var/run/cdi.
ROOT_CONTAINERS = {"device-plugin", "mps-control-daemon", "dra-driver"}


@pytest.mark.parametrize("variant", ["default", "tls", "fake", "colocation", "privileged",
                                     "dra"])
def test_every_container_runs_with_least_privilege(helm_available: None, tls: TlsMaterial,
                                                   variant: str) -> None:
    """Non-root, no capabilities, no privilege escalation, read-only root file system,
    RuntimeDefault seccomp, no host namespaces or host paths: every container of every
    workload, except the two root containers, each held to exactly what it needs."""
    values = {"default": {}, "tls": tls_values(tls), "fake": FAKE_VALUES,
              "colocation": COLOCATION_VALUES,
              "privileged": PRIVILEGED_VALUES, "dra": DRA_VALUES}[variant]
    workloads = [o for o in render_manifests(values) if o["kind"] in ("Deployment", "DaemonSet")]
    seen = set()
    for w in workloads:
        pod = w["spec"]["template"]["spec"]
        names = {c["name"] for c in pod["containers"] + pod.get("initContainers", [])}
        seen |= names
        hostpaths = {v["name"]: v["hostPath"]["path"] for v in pod.get("volumes", [])
                     if "hostPath" in v}
        for c in pod["containers"] + pod.get("initContainers", []):
            where = f"{w['metadata']['name']}/{c['name']}"
            sc = c.get("securityContext") or {}
            if c["name"] == "mps-control-daemon":
                assert sc == {"privileged": True}, where
                assert pod["automountServiceAccountToken"] is False, where  # no API access
                continue
            assert sc["readOnlyRootFilesystem"] is True, where
            assert _effective(pod, c, "seccompProfile") == {"type": "RuntimeDefault"}, where
            if c["name"] == "device-plugin":
                # root even when privileged: the image's user (65532) has no capabilities
                assert _effective(pod, c, "runAsUser") == 0, where
                mounts = {m["name"]: m.get("readOnly", False) for m in c["volumeMounts"]
                          if m["name"] in hostpaths}
                # write: only the kubelet's device-plugins/ (its sockets); the rest read-only
                assert {n for n, ro in mounts.items() if not ro} == {"device-plugins"}, where
                expected = {"device-plugins": "/var/lib/kubelet/device-plugins",
                            "pod-resources": "/var/lib/kubelet/pod-resources"}
                if variant == "privileged":
                    expected["kubelet-config"] = "/var/lib/kubelet/config.yaml"
                assert hostpaths == expected, where
                if variant == "privileged":
                    assert sc["privileged"] is True, where  # devicePlugin.privileged
                    continue
            elif c["name"] == "dra-driver":
                assert _effective(pod, c, "runAsUser") == 0, where
                assert hostpaths == {"plugins-registry": "/var/lib/kubelet/plugins_registry",
                                     "plugin-dir": "/var/lib/kubelet/plugins/gpu.gputopo.io",
                                     "cdi": "/var/run/cdi"}, where
            else:
                assert _effective(pod, c, "runAsNonRoot") is True, where
                assert _effective(pod, c, "runAsUser") not in (None, 0), where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert not sc.get("privileged"), where
        if not names & ROOT_CONTAINERS:
            assert not hostpaths, w["metadata"]["name"]
        for host in ("hostNetwork", "hostIPC"):
            assert not pod.get(host), w["metadata"]["name"]
        if "mps-control-daemon" not in names:
            assert not pod.get("hostPID"), w["metadata"]["name"]
    assert {"device-plugin" if variant != "dra" else "dra-driver", "kube-scheduler",
            "extender"} <= seen


# ------------------------------------------------------------------ co-location


def test_colocation_values_render(helm_available: None, tmp_path: Path) -> None:
    """The MPS control daemon per GPU node (host pipe, log and shm directories shared with
    the pods through the device plugin), slots and measured profiles on the device plugin,
    co-location settings and profile mounts on the extender, gpu-shared in the scheduler."""
    from scheduler_extender.settings import read_config_file

    objs = render_manifests(COLOCATION_VALUES)
    mps = find(objs, "DaemonSet", "gputopo-mps-control-daemon")
    pod = mps["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    c = container(mps)
    script = c["args"][0]
    assert "nvidia-cuda-mps-control -d" in script and "EXCLUSIVE_PROCESS" in script
    assert "echo quit | nvidia-cuda-mps-control" in script
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/nvidia/mps"
    assert env["CUDA_MPS_LOG_DIRECTORY"] == "/var/log/nvidia-mps"
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert host == {"mps-pipe": "/run/nvidia/mps", "mps-log": "/var/log/nvidia-mps",
                    "mps-shm": "/run/nvidia/mps-shm"}
    assert {m["mountPath"] for m in c["volumeMounts"]} >= {"/dev/shm", "/run/nvidia/mps"}

    dp = find(objs, "DaemonSet", "gputopo-device-plugin")
    env = {e["name"]: e.get("value") for e in container(dp)["env"]}
    assert env["GPUTOPO_DP_SHARED_SLOTS"] == "2"
    assert env["GPUTOPO_DP_MPS_PIPE_DIR"] == "/run/nvidia/mps"
    assert env["GPUTOPO_DP_MPS_SHM_DIR"] == "/run/nvidia/mps-shm"  # the daemon's /dev/shm
    assert env["GPUTOPO_DP_PROFILE_SINK"] == \
        "configmap:gputopo-system/gputopo-measured-profiles"
    assert env["GPUTOPO_DP_PROFILE_WINDOW"] == "4"
    assert env["GPUTOPO_DP_DCGM_EXPORTER_URL"] == "http://$(NODE_IP):9400/metrics"
    role = find(objs, "Role", "gputopo-device-plugin-profiles")
    assert role["rules"][0]["resourceNames"] == ["gputopo-measured-profiles"]
    load_settings({"node_name": "n", "shared_slots": env["GPUTOPO_DP_SHARED_SLOTS"],
                   "dcgm_exporter_url": "http://10.0.0.1:9400/metrics",
                   "profile_sink": env["GPUTOPO_DP_PROFILE_SINK"]})  # accepted

    cm = find(objs, "ConfigMap", "gputopo-extender")
    path = tmp_path / "extender.yaml"
    path.write_text(cm["data"]["extender.yaml"])
    data = read_config_file(path)
    assert data["colocation_policy"] == "colocate" and data["colocation_threshold"] == 3e7
    assert data["user_profiles"] == "/etc/gputopo-profiles/user"
    assert data["measured_profiles"] == "/etc/gputopo-profiles/measured"
    pod = find(objs, "Deployment", "gputopo-scheduler")["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in pod["volumes"]}  # the extender: a sidecar of the scheduler
    assert vols["measured-profiles"]["configMap"] == {"name": "gputopo-measured-profiles",
                                                       "optional": True}
    assert vols["user-profiles"]["configMap"]["name"] == "gputopo-extender-user-profiles"
    [ext] = pod["initContainers"]
    mounts = {m["name"]: m["mountPath"] for m in ext["volumeMounts"]}
    assert mounts["user-profiles"] == "/etc/gputopo-profiles/user"
    user = find(objs, "ConfigMap", "gputopo-extender-user-profiles")
    assert user["data"]["profiles.yaml"].startswith("apiVersion: gputopo.io/v1")
    managed = {r["name"]: r["ignoredByScheduler"]
               for r in sched_config(objs)["extenders"][0]["managedResources"]}
    assert managed["gputopo.io/gpu-shared"] is False


def test_colocation_is_off_by_default(variants: dict[str, list[Obj]]) -> None:
    objs = variants["default"]
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert ("DaemonSet", "gputopo-mps-control-daemon") not in kinds
    assert ("Role", "gputopo-device-plugin-profiles") not in kinds
    env = {e["name"]: e.get("value") for e in container(
        find(objs, "DaemonSet", "gputopo-device-plugin"))["env"]}
    assert env["GPUTOPO_DP_SHARED_SLOTS"] == "3" and "GPUTOPO_DP_MPS_SHM_DIR" not in env
