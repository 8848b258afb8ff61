"""Certificates and keys for a loopback control plane (``cryptography`` package).

Everything is written as PEM files into one directory; nothing here talks to the network.
Keys: ECDSA P-256 for certificates (fast to generate), RSA 2048 for the service-account token
signing key (RS256, what every Kubernetes client expects).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CERT_VALIDITY = dt.timedelta(days=2)
"""Validity of every generated certificate (they live as long as one test session)."""


@dataclass(frozen=True)
class Pki:
    """Paths of the generated PEM files."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    front_proxy_ca_cert: Path
    front_proxy_client_cert: Path
    front_proxy_client_key: Path
    sa_key: Path
    sa_pub: Path


_Key = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def _write_key(path: Path, key: _Key) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _make_ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + CERT_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _make_leaf(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    organization: str | None = None,
    *,
    server: bool = False,
    dns_names: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organization))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + CERT_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if dns_names or ips:
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def generate_pki(directory: Path, service_ip: str = "10.96.0.1") -> Pki:
    """Write a CA, the API server's serving cert, an admin client cert, a front-proxy CA and
    client cert, and the service-account signing key pair into ``directory``.

    The admin cert is ``CN=gputopo-admin, O=system:masters`` (cluster-admin under RBAC).
    The serving cert is valid for 127.0.0.1, localhost and the in-cluster ``kubernetes``
    service names and ``service_ip``.

    Raises:
        OSError: the files cannot be written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _make_ca("gputopo-localcluster-ca")
    serving_cert, serving_key = _make_leaf(
        ca_cert,
        ca_key,
        "kube-apiserver",
        server=True,
        dns_names=(
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        ips=("127.0.0.1", service_ip),
    )
    admin_cert, admin_key = _make_leaf(ca_cert, ca_key, "gputopo-admin", "system:masters")
    fp_ca_cert, fp_ca_key = _make_ca("gputopo-front-proxy-ca")
    fp_cert, fp_key = _make_leaf(fp_ca_cert, fp_ca_key, "front-proxy-client")
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    pki = Pki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        front_proxy_ca_cert=directory / "front-proxy-ca.crt",
        front_proxy_client_cert=directory / "front-proxy-client.crt",
        front_proxy_client_key=directory / "front-proxy-client.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )
    _write_cert(pki.ca_cert, ca_cert)
    _write_key(pki.ca_key, ca_key)
    _write_cert(pki.serving_cert, serving_cert)
    _write_key(pki.serving_key, serving_key)
    _write_cert(pki.admin_cert, admin_cert)
    _write_key(pki.admin_key, admin_key)
    _write_cert(pki.front_proxy_ca_cert, fp_ca_cert)
    _write_cert(pki.front_proxy_client_cert, fp_cert)
    _write_key(pki.front_proxy_client_key, fp_key)
    _write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


@dataclass(frozen=True)
class ExtenderTls:
    """PEM files of an mTLS extender set-up (:func:`generate_extender_tls`).

    Attributes:
        ca_cert: the CA that signs the extender's serving certificate and the clients'.
        server_cert / server_key: the extender's, valid for 127.0.0.1, ::1 and localhost.
        clients: common name → (certificate, key) signed by ``ca_cert``.
        rogue_cert / rogue_key: a client certificate (CN of the first client name) signed by
            another CA: a TLS handshake with it must fail.
    """

    ca_cert: Path
    server_cert: Path
    server_key: Path
    clients: dict[str, tuple[Path, Path]]
    rogue_cert: Path
    rogue_key: Path


def generate_extender_tls(directory: Path, client_names: tuple[str, ...]) -> ExtenderTls:
    """Write a CA, the extender's serving certificate and one client certificate per name
    (clientAuth usage) into ``directory``, plus a client certificate from an unrelated CA.

    Raises:
        ValueError: no client names.
        OSError: the files cannot be written.
    """
    if not client_names:
        raise ValueError("at least one client name is needed")
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _make_ca("gputopo-extender-ca")
    _write_cert(directory / "extender-ca.crt", ca_cert)
    server, server_key = _make_leaf(ca_cert, ca_key, "gputopo-extender", server=True,
                                    dns_names=("localhost",), ips=("127.0.0.1", "::1"))
    _write_cert(directory / "extender.crt", server)
    _write_key(directory / "extender.key", server_key)
    clients: dict[str, tuple[Path, Path]] = {}
    for name in client_names:
        cert, key = _make_leaf(ca_cert, ca_key, name)
        paths = (directory / f"client-{name}.crt", directory / f"client-{name}.key")
        _write_cert(paths[0], cert)
        _write_key(paths[1], key)
        clients[name] = paths
    rogue_ca, rogue_ca_key = _make_ca("rogue-ca")
    rogue, rogue_key = _make_leaf(rogue_ca, rogue_ca_key, client_names[0])
    _write_cert(directory / "rogue-client.crt", rogue)
    _write_key(directory / "rogue-client.key", rogue_key)
    return ExtenderTls(
        ca_cert=directory / "extender-ca.crt", server_cert=directory / "extender.crt",
        server_key=directory / "extender.key", clients=clients,
        rogue_cert=directory / "rogue-client.crt", rogue_key=directory / "rogue-client.key",
    )  # fmt: skip
