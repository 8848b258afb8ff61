"""Helpers shared by the deployment tests: TLS material, value sets, object lookups."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from localcluster.chart import DEFAULT_NAMESPACE

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
    """Chart values enabling TLS with a chart-created Secret."""
    return {
        "extender": {
            "tls": {"enabled": True, "cert": tls.cert, "key": tls.key, "caCert": tls.ca_cert}
        }
    }


FAKE_VALUES: dict[str, Any] = {
    "devicePlugin": {
        "fakeTopology": "dgx1-v100",
        "fakeTopologyByNodeLabel": {"a100": "dgx-a100", "custom": "/etc/gputopo/topologies/x.json"},
        "topologyFiles": {"x.json": '{"schema": "gputopo.io/v1"}'},
    },
    "metrics": {"serviceMonitor": {"enabled": False}},
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
