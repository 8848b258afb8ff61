"""The chart's high availability and caller authentication (issue 14): the extender as a
sidecar of each kube-scheduler replica (the default), the PodDisruptionBudget, the
NetworkPolicies, and mutual TLS for a standalone extender. helm only (no control plane); the
failover itself runs in tests/e2e/test_failover.py, mTLS end to end in
tests/e2e/test_extender_mtls.py.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.chart import render_manifests, scheduler_config_from_manifests
from localcluster.pki import ExtenderTls, generate_extender_tls
from scheduler_extender.settings import load_settings, read_config_file
from tests.deploy.helpers import Obj, find

SCHED = {"app.kubernetes.io/name": "gputopo", "app.kubernetes.io/instance": "gputopo",
         "app.kubernetes.io/component": "scheduler"}


def _pod(objs: list[Obj], name: str) -> Obj:
    spec: Obj = find(objs, "Deployment", name)["spec"]["template"]["spec"]
    return spec


def test_sidecar_extender_runs_in_every_scheduler_pod(variants: dict[str, list[Obj]]) -> None:
    objs = variants["default"]
    dep = find(objs, "Deployment", "gputopo-scheduler")
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    [ext] = pod["initContainers"]
    assert ext["name"] == "extender" and ext["restartPolicy"] == "Always"  # native sidecar
    # kube-scheduler starts once the extender has listed nodes and pods
    assert ext["startupProbe"]["httpGet"] == {"path": "/readyz", "port": "http",
                                              "scheme": "HTTP"}
    assert ext["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert ext["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert ext["args"][:2] == ["extender", "--config=/etc/gputopo/extender.yaml"]
    sc = ext["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False
    mounts = {m["name"]: m["mountPath"] for m in ext["volumeMounts"]}
    assert mounts == {"extender-config": "/etc/gputopo", "extender-tmp": "/tmp"}
    vols = {v["name"] for v in pod["volumes"]}
    assert vols == {"config", "extender-config", "extender-tmp"}
    ports = [p["name"] for c in (*pod["containers"], ext) for p in c.get("ports", [])]
    assert len(ports) == len(set(ports))  # unique port names within the pod
    # the scheduler calls its own sidecar; the settings make the verbs loopback-only
    cfg = yaml.safe_load(scheduler_config_from_manifests(objs))
    assert cfg["extenders"][0]["urlPrefix"] == "http://127.0.0.1:8888"
    settings = yaml.safe_load(find(objs, "ConfigMap", "gputopo-extender")["data"]
                              ["extender.yaml"])
    assert settings["auth"] == "loopback" and settings["host"] == "0.0.0.0"
    # the extender's role is bound to the pod's account (the scheduler's)
    crb = find(objs, "ClusterRoleBinding", "gputopo-extender")
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": "gputopo-scheduler",
                                "namespace": "gputopo-system"}]
    # a config change of either program rolls the pods
    ann = dep["spec"]["template"]["metadata"]["annotations"]
    assert {"checksum/config", "checksum/extender-config"} <= set(ann)
    assert ann["prometheus.io/port"] == "8888"
    other = render_manifests({"extender": {"policy": "baseline"}})
    assert find(other, "Deployment", "gputopo-scheduler")["spec"]["template"]["metadata"][
        "annotations"]["checksum/extender-config"] != ann["checksum/extender-config"]


def test_scheduler_replicas_spread_and_pdb(variants: dict[str, list[Obj]]) -> None:
    objs = variants["default"]
    pod = _pod(objs, "gputopo-scheduler")
    [term] = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == SCHED
    pdb = find(objs, "PodDisruptionBudget", "gputopo-scheduler")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": SCHED}}
    dep = find(objs, "Deployment", "gputopo-scheduler")
    assert dep["spec"]["template"]["metadata"]["labels"].items() >= SCHED.items()
    own = {"nodeAffinity": {"x": 1}}
    assert _pod(render_manifests({"scheduler": {"affinity": own}}),
                "gputopo-scheduler")["affinity"] == own
    off = render_manifests({"scheduler": {"podDisruptionBudget": {"enabled": False}}})
    assert not [o for o in off if o["kind"] == "PodDisruptionBudget"]


def test_lease_timing_values(helm_available: None) -> None:
    objs = render_manifests({"scheduler": {"leaderElection": {
        "leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"}}})
    le = yaml.safe_load(scheduler_config_from_manifests(objs))["leaderElection"]
    assert le == {"leaderElect": True, "resourceName": "gputopo-scheduler",
                  "resourceNamespace": "gputopo-system", "leaseDuration": "6s",
                  "renewDeadline": "4s", "retryPeriod": "1s"}


def test_network_policies(variants: dict[str, list[Obj]]) -> None:
    [np] = [o for o in variants["default"] if o["kind"] == "NetworkPolicy"]
    assert np["metadata"]["name"] == "gputopo-scheduler"
    assert np["spec"] == {"podSelector": {"matchLabels": SCHED}, "policyTypes": ["Ingress"],
                          "ingress": []}  # no metrics sources given: no ingress at all
    prom = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    objs = render_manifests({"networkPolicy": {"metricsFrom": prom}})
    np = find(objs, "NetworkPolicy", "gputopo-scheduler")
    assert np["spec"]["ingress"] == [{"from": prom, "ports": [
        {"port": 10259, "protocol": "TCP"}, {"port": 8888, "protocol": "TCP"}]}]
    # standalone: the extender's port from the scheduler pods (and the metrics sources) only
    objs = render_manifests({"extender": {"mode": "standalone"},
                             "networkPolicy": {"metricsFrom": prom}})
    ext = find(objs, "NetworkPolicy", "gputopo-extender")
    assert ext["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == \
        "extender"
    assert ext["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": SCHED}}, *prom],
                                       "ports": [{"port": 8888, "protocol": "TCP"}]}]
    assert find(objs, "NetworkPolicy", "gputopo-scheduler")["spec"]["ingress"][0]["ports"] == \
        [{"port": 10259, "protocol": "TCP"}]
    # without the chart's scheduler a sidecar has no pod: the extender runs standalone
    alone = render_manifests({"scheduler": {"enabled": False}})
    assert find(alone, "Deployment", "gputopo-extender")["spec"]["replicas"] == 1
    assert find(alone, "NetworkPolicy", "gputopo-extender")
    off = render_manifests({"networkPolicy": {"enabled": False}})
    assert not [o for o in off if o["kind"] == "NetworkPolicy"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ExtenderTls:
    return generate_extender_tls(tmp_path_factory.mktemp("pki"), ("gputopo-scheduler",))


def _mtls_values(pki: ExtenderTls, **client: Any) -> dict[str, Any]:
    ca = pki.ca_cert.read_text()
    cert, key = pki.clients["gputopo-scheduler"]
    return {"extender": {"mode": "standalone", "tls": {
        "enabled": True, "cert": pki.server_cert.read_text(),
        "key": pki.server_key.read_text(), "caCert": ca,
        "clientAuth": {"enabled": True, "caCert": ca,
                       **(client or {"cert": cert.read_text(), "key": key.read_text()})}}}}


def test_mutual_tls_values(helm_available: None, pki: ExtenderTls, tmp_path: Path) -> None:
    objs = render_manifests(_mtls_values(pki))
    cm = find(objs, "ConfigMap", "gputopo-extender")
    assert cm["data"]["client-ca.crt"].strip() == pki.ca_cert.read_text().strip()
    path = tmp_path / "extender.yaml"
    path.write_text(cm["data"]["extender.yaml"])
    data = read_config_file(path)
    assert (data["auth"], data["client_ca"], data["allowed_client_names"]) == \
        ("mtls", "/etc/gputopo/client-ca.crt", ["gputopo-scheduler"])
    # the extender accepts these settings (pod paths replaced by the files made here)
    settings = load_settings({"tls_cert": pki.server_cert, "tls_key": pki.server_key,
                              "client_ca": pki.ca_cert}, path)
    assert settings.auth == "mtls" and settings.allowed_client_names == ["gputopo-scheduler"]
    # kube-scheduler presents its client certificate from a mounted Secret
    ext = yaml.safe_load(scheduler_config_from_manifests(objs))["extenders"][0]
    assert ext["enableHTTPS"] is True
    assert ext["tlsConfig"]["certFile"] == "/etc/gputopo-scheduler-client/tls.crt"
    assert ext["tlsConfig"]["keyFile"] == "/etc/gputopo-scheduler-client/tls.key"
    secret = find(objs, "Secret", "gputopo-scheduler-extender-client")
    cert, _ = pki.clients["gputopo-scheduler"]
    assert base64.b64decode(secret["data"]["tls.crt"]).decode() == cert.read_text()
    pod = _pod(objs, "gputopo-scheduler")
    assert {"name": "extender-client", "secret": {
        "secretName": "gputopo-scheduler-extender-client"}} in pod["volumes"]
    [sched] = pod["containers"]
    assert {"name": "extender-client", "mountPath": "/etc/gputopo-scheduler-client",
            "readOnly": True} in sched["volumeMounts"]
    assert "initContainers" not in pod  # standalone: no sidecar
    # or an existing Secret
    objs = render_manifests(_mtls_values(pki, secretName="my-client-cert"))
    assert not [o for o in objs if o["metadata"]["name"].endswith("-extender-client")]
    assert {"name": "extender-client", "secret": {"secretName": "my-client-cert"}} in \
        _pod(objs, "gputopo-scheduler")["volumes"]
