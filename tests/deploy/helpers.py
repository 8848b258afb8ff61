"""Helpers shared by the deployment tests: TLS material, value sets, object lookups."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client as k8s_client
from kubernetes.dynamic import DynamicClient

from localcluster import ControlPlane
from localcluster.chart import DEFAULT_NAMESPACE, render_manifests
from localcluster.controlplane import SERVICE_ACCOUNT_ISSUER
from topology import catalog
from topology.serialization import dumps

EXTENDER_DNS = f"gputopo-extender.{DEFAULT_NAMESPACE}.svc"


@dataclass(frozen=True)
class TlsMaterial:
    """PEM texts: a CA and a serving cert for the extender Service and 127.0.0.1."""

    ca_cert: str
    cert: str
    key: str


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def make_tls(dns_names: tuple[str, ...] = (EXTENDER_DNS,)) -> TlsMaterial:
    """A fresh CA and a server certificate for ``dns_names`` plus IP 127.0.0.1."""
    now = dt.datetime.now(dt.UTC)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gputopo-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = _key()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return TlsMaterial(
        ca_cert=ca.public_bytes(serialization.Encoding.PEM).decode(),
        cert=cert.public_bytes(serialization.Encoding.PEM).decode(),
        key=_pem_key(key),
    )


def tls_values(tls: TlsMaterial) -> dict[str, Any]:
    """Chart values enabling TLS with a chart-created Secret (a standalone extender: a
    sidecar is called on loopback)."""
    return {
        "extender": {
            "mode": "standalone",
            "tls": {"enabled": True, "cert": tls.cert, "key": tls.key, "caCert": tls.ca_cert},
        }
    }


#: The extender as its own Deployment behind a Service (not a sidecar of the scheduler).
STANDALONE_VALUES: dict[str, Any] = {"extender": {"mode": "standalone"}}


CUSTOM_TOPOLOGY = "gaia-4gpu"
"""Catalog machine whose annotation JSON the "fake" variant mounts as a custom topology file."""

#: A saved ``nvidia-smi topo -m`` mounted as a fake topology (how one models one's machine).
TOPO_M_TEXT = (
    Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi" / "dgx1-v100-driver535.txt"
).read_text()

#: Co-location on: the MPS control daemon, 2 slots per GPU, measured profiles from
#: dcgm-exporter into a ConfigMap, Algorithm 2 for shared pods with the user's profiles.
COLOCATION_VALUES: dict[str, Any] = {
    "mps": {"enabled": True},
    "devicePlugin": {"sharedSlots": 2, "profiling": {"enabled": True, "window": 4}},
    "extender": {"colocation": {"policy": "colocate", "threshold": 3.0e7,
                                "userProfiles": "apiVersion: gputopo.io/v1\n"}},
}

FAKE_VALUES: dict[str, Any] = {
    "devicePlugin": {
        "fakeTopology": "dgx1-v100",
        "fakeTopologyByNodeLabel": {"a100": "dgx-a100",
                                    "custom": "/etc/gputopo/topologies/custom.json",
                                    "mine": "/etc/gputopo/topologies/mine.txt"},
        "topologyFiles": {"custom.json": dumps(catalog.get(CUSTOM_TOPOLOGY)),
                          "mine.txt": TOPO_M_TEXT},
        "gpuMemoryMiB": 16160,
        "healthRecoverySeconds": 120,
    },
    "metrics": {"serviceMonitor": {"enabled": False}},
}

#: The device plugin without the NVIDIA container runtime (privileged), reading its kubelet's
#: config file, and the MPS control daemon: every host access the chart can ask for.
PRIVILEGED_VALUES: dict[str, Any] = {
    "devicePlugin": {"privileged": True,
                     "kubelet": {"configFile": "/var/lib/kubelet/config.yaml"}},
    "mps": {"enabled": True},
}


#: DRA mode (docs/dra-driver.md): the DRA driver with fake DGX-1 GPUs instead of the device
#: plugin, the whole-GPU DeviceClass serving nvidia.com/gpu (KEP-5004).
DRA_VALUES: dict[str, Any] = {
    "mode": "dra",
    "draDriver": {"fakeTopology": "dgx1-v100", "extendedResourceName": "nvidia.com/gpu"},
}


Obj = dict[str, Any]


def find(objs: Iterable[Obj], kind: str, name: str) -> Obj:
    """The object of ``kind`` called ``name`` (AssertionError listing what there is)."""
    objs = list(objs)
    for o in objs:
        if o["kind"] == kind and o["metadata"]["name"] == name:
            return o
    present = [(o["kind"], o["metadata"]["name"]) for o in objs]
    raise AssertionError(f"no {kind}/{name} in {present}")


# ------------------------------------------------------------------ control-plane helpers

POD_NS = "default"
NODES = ("gpu-node-a", "gpu-node-b")


def sa_kubeconfig(cp: ControlPlane, sa: str) -> Path:
    """A kubeconfig authenticating as ServiceAccount ``sa`` of the release namespace (a
    TokenRequest token), so the chart's RBAC is all it has."""
    status = cp.core_v1().create_namespaced_service_account_token(
        sa, DEFAULT_NAMESPACE,
        k8s_client.AuthenticationV1TokenRequest(spec=k8s_client.V1TokenRequestSpec(
            audiences=[SERVICE_ACCOUNT_ISSUER], expiration_seconds=3600)),
    ).status
    assert status is not None and status.token
    token = status.token
    path = cp.workdir / f"{sa}.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": cp.server_url,
                                               "certificate-authority": str(cp.ca_path)}}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": sa}}],
        "current-context": "c",
    }))
    path.chmod(0o600)
    return path


def bound_token(cp: ControlPlane, sa: str, bound_pod: str | None) -> str:
    """A TokenRequest token of ServiceAccount ``sa`` (release namespace), bound to the pod
    ``bound_pod`` there as the kubelet's projected token is (it then names the pod's node), or
    unbound."""
    core = cp.core_v1()
    ref = None
    if bound_pod is not None:
        pod = core.read_namespaced_pod(bound_pod, DEFAULT_NAMESPACE)
        ref = k8s_client.V1BoundObjectReference(api_version="v1", kind="Pod", name=bound_pod,
                                                uid=pod.metadata.uid)
    status = core.create_namespaced_service_account_token(
        sa, DEFAULT_NAMESPACE, k8s_client.AuthenticationV1TokenRequest(
            spec=k8s_client.V1TokenRequestSpec(audiences=[SERVICE_ACCOUNT_ISSUER],
                                               expiration_seconds=3600,
                                               bound_object_ref=ref))).status
    assert status is not None and status.token
    return str(status.token)


def token_kubeconfig(cp: ControlPlane, token: str, name: str) -> Path:
    """A kubeconfig for ``cp`` authenticating with ``token``."""
    path = cp.workdir / f"{name}.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": cp.server_url,
                                               "certificate-authority": str(cp.ca_path)}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": name}}],
        "current-context": "c",
    }))
    path.chmod(0o600)
    return path


def install_chart(cp: ControlPlane, values: dict[str, Any]) -> None:
    """Create the release namespace and every object the chart renders with ``values``."""
    cp.core_v1().create_namespace(
        k8s_client.V1Namespace(metadata=k8s_client.V1ObjectMeta(name=DEFAULT_NAMESPACE)))
    dyn = DynamicClient(cp.api_client())
    for obj in render_manifests(values):
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        res.create(body=obj, namespace=obj["metadata"].get("namespace") if res.namespaced
                   else None)


def make_pod(name: str, limits: dict[str, str],
             annotations: dict[str, str] | None = None) -> k8s_client.V1Pod:
    """A pod for gputopo-scheduler in :data:`POD_NS` with these resource limits."""
    return k8s_client.V1Pod(
        metadata=k8s_client.V1ObjectMeta(name=name, namespace=POD_NS, annotations=annotations),
        spec=k8s_client.V1PodSpec(
            scheduler_name="gputopo-scheduler",
            containers=[k8s_client.V1Container(
                name="main", image="busybox:1.36",
                resources=k8s_client.V1ResourceRequirements(limits=limits or None,
                                                            requests={"cpu": "100m"}),
            )],
        ),
    )


def bound_node(cp: ControlPlane, name: str) -> str | None:
    """The node pod ``name`` is bound to, None while unbound."""
    pod = cp.core_v1().read_namespaced_pod(name, POD_NS)
    return (pod.spec.node_name if pod.spec else None) or None
