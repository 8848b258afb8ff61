"""Caller authentication of the extender's verbs (``scheduler_extender.auth``), over real
sockets: uvicorn serving HTTPS with ``ssl.CERT_OPTIONAL`` client certificates from a CA made
here with ``cryptography`` (``localcluster.pki.generate_extender_tls``), and loopback-only
serving on every interface.

mtls: no certificate → 401, a certificate whose CN is not allowed → 403, an allowed one → the
verb's answer, a certificate of another CA → the TLS handshake fails; loopback: a non-loopback
peer → 403. /healthz, /readyz, /metrics answer without credentials; every authenticated
request is counted by result in gputopo_extender_auth_requests_total.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gputopo_cli.main import app as cli_app
from localcluster.pki import ExtenderTls, generate_extender_tls
from scheduler_extender.app import create_app
from scheduler_extender.auth import common_names, is_loopback, uvicorn_options
from scheduler_extender.settings import ExtenderSettings, SettingsError, load_settings
from scheduler_extender.state import MemoryState
from tests.scheduler_extender.helpers import POLICY, bind_args, gpu_pod, names_args
from topology import catalog

SCHEDULER = "gputopo-scheduler"
NODES = ("gpu-node-00", "gpu-node-01")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ExtenderTls:
    return generate_extender_tls(tmp_path_factory.mktemp("pki"), (SCHEDULER, "someone-else"))


def _state() -> MemoryState:
    return MemoryState({n: catalog.get("dgx1-v100") for n in NODES})


def _settings(**kw: Any) -> ExtenderSettings:
    return ExtenderSettings(policy=POLICY, state="memory", eval_budget_ms=0, **kw)


@contextmanager
def _serve(app: FastAPI, settings: ExtenderSettings, host: str) -> Iterator[int]:
    """uvicorn with the extender's own options (``uvicorn_options``) on ``host``; yields the
    port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    opts = uvicorn_options(
        mode=settings.auth,
        tls_cert=str(settings.tls_cert) if settings.tls_cert else None,
        tls_key=str(settings.tls_key) if settings.tls_key else None,
        client_ca=str(settings.client_ca) if settings.client_ca else None,
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", **opts))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()


def _client(pki: ExtenderTls, port: int, cert: tuple[Path, Path] | None) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=ctx, timeout=10)


def _auth_counts(client: httpx.Client) -> dict[str, float]:
    counts: dict[str, float] = {}
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("gputopo_extender_auth_requests_total{"):
            result = line.split('result="', 1)[1].split('"', 1)[0]
            counts[result] = float(line.rsplit(" ", 1)[1])
    return counts


@pytest.fixture(scope="module")
def mtls(pki: ExtenderTls) -> Iterator[tuple[int, ExtenderSettings]]:
    settings = _settings(tls_cert=pki.server_cert, tls_key=pki.server_key, auth="mtls",
                         client_ca=pki.ca_cert, allowed_client_names=[SCHEDULER])
    with _serve(create_app(settings, _state()), settings, "127.0.0.1") as port:
        yield port, settings


def test_mtls_sorts_callers_by_their_certificates(
    pki: ExtenderTls, mtls: tuple[int, ExtenderSettings]
) -> None:
    port, _ = mtls
    pod = gpu_pod("auth-a", 2)
    with _client(pki, port, None) as anon, _client(pki, port, pki.clients[SCHEDULER]) as sched, \
            _client(pki, port, pki.clients["someone-else"]) as other:
        before = _auth_counts(anon)
        # no certificate: 401 on every verb, nothing decided
        for verb, body in (("filter", names_args(pod, NODES)), ("bind", bind_args(pod, NODES[0])),
                           ("prioritize", names_args(pod, NODES)), ("preempt", {})):
            r = anon.post(f"/{verb}", json=body)
            assert r.status_code == 401, (verb, r.text)
            assert "client certificate" in r.json()["Error"]
        # a certificate of the right CA with a name not allowed: 403 naming it
        r = other.post("/bind", json=bind_args(pod, NODES[0]))
        assert r.status_code == 403 and "someone-else" in r.json()["Error"]
        # kube-scheduler's certificate: served, several requests on one keep-alive connection
        r = sched.post("/filter", json=names_args(pod, NODES))
        assert r.status_code == 200 and sorted(r.json()["NodeNames"]) == list(NODES)
        r = sched.post("/bind", json=bind_args(pod, NODES[0]))
        assert r.status_code == 200 and r.json()["Error"] == ""
        # the refused callers changed nothing: only the scheduler's bind holds GPUs
        r = sched.post("/filter", json=names_args(gpu_pod("auth-b", 8), NODES))
        assert r.json()["NodeNames"] == [NODES[1]]
        # open paths need no certificate
        for path in ("/healthz", "/readyz", "/metrics"):
            assert anon.get(path).status_code == 200, path
        after = _auth_counts(anon)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert delta == {"ok": 3, "unauthenticated": 4, "forbidden": 1}


def test_a_certificate_is_per_connection_not_per_server(
    pki: ExtenderTls, mtls: tuple[int, ExtenderSettings]
) -> None:
    port, _ = mtls
    with _client(pki, port, pki.clients[SCHEDULER]) as sched, _client(pki, port, None) as anon:
        for _ in range(3):  # interleaved: each connection keeps its own certificate
            assert sched.post("/filter", json=names_args(gpu_pod(), NODES)).status_code == 200
            assert anon.post("/filter", json=names_args(gpu_pod(), NODES)).status_code == 401


def test_a_certificate_from_another_ca_fails_the_handshake(
    pki: ExtenderTls, mtls: tuple[int, ExtenderSettings]
) -> None:
    port, _ = mtls
    with _client(pki, port, (pki.rogue_cert, pki.rogue_key)) as rogue, \
            pytest.raises(httpx.TransportError):
        rogue.post("/bind", json=bind_args(gpu_pod("rogue"), NODES[0]))


def _non_loopback_address() -> str | None:
    """An address of this host other than loopback (None: it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent; picks the outbound address
            addr = str(s.getsockname()[0])
        except OSError:
            return None
    return None if is_loopback(addr) or addr == "0.0.0.0" else addr


def test_loopback_mode_serves_loopback_and_refuses_other_peers() -> None:
    settings = _settings(auth="loopback")
    app = create_app(settings, _state())
    with _serve(app, settings, "0.0.0.0") as port:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as local:
            r = local.post("/filter", json=names_args(gpu_pod(), NODES))
            assert r.status_code == 200 and r.json()["NodeNames"]
        addr = _non_loopback_address()
        if addr is not None:  # a real peer address that is not loopback
            with httpx.Client(base_url=f"http://{addr}:{port}", timeout=10) as remote:
                r = remote.post("/bind", json=bind_args(gpu_pod("far"), NODES[0]))
                assert r.status_code == 403 and addr in r.json()["Error"]
                assert remote.get("/metrics").status_code == 200  # scrapes still work
                assert remote.get("/readyz").status_code == 200
    # whatever this host's interfaces: a peer the ASGI scope says is remote gets 403
    with TestClient(app, client=("10.1.2.3", 40000)) as c:
        r = c.post("/bind", json=bind_args(gpu_pod("far"), NODES[0]))
        assert r.status_code == 403 and "10.1.2.3" in r.json()["Error"]
        assert c.get("/healthz").status_code == 200
        assert 'result="forbidden"' in c.get("/metrics").text


def test_ipv6_loopback_is_loopback() -> None:
    settings = _settings(auth="loopback")
    try:
        server = _serve(create_app(settings, _state()), settings, "::1")
        port = server.__enter__()
    except OSError:
        pytest.skip("no IPv6 loopback on this host")
    try:
        with httpx.Client(base_url=f"http://[::1]:{port}", timeout=10) as c:
            assert c.post("/filter", json=names_args(gpu_pod(), NODES)).status_code == 200
    finally:
        server.__exit__(None, None, None)


@pytest.mark.parametrize(("host", "loop"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("10.0.0.1", False), ("::ffff:10.0.0.1", False), ("fe80::1%eth0", False), ("0.0.0.0", False),
    ("localhost", False), ("", False), (None, False),
])  # fmt: skip
def test_is_loopback(host: str | None, loop: bool) -> None:
    assert is_loopback(host) is loop


def test_common_names_of_a_peer_certificate() -> None:
    cert = {"subject": ((("organizationName", "o"),), (("commonName", "a"),),
                        (("commonName", "b"),))}
    assert common_names(cert) == ["a", "b"]
    assert common_names(None) == [] and common_names({}) == []


def test_auth_none_counts_nothing_and_serves_anyone() -> None:
    app = create_app(_settings(), _state())
    with TestClient(app, client=("10.1.2.3", 40000)) as c:
        assert c.post("/filter", json=names_args(gpu_pod(), NODES)).status_code == 200
        assert "gputopo_extender_auth_requests_total{" not in c.get("/metrics").text


@pytest.mark.parametrize(("cli", "needle"), [
    ({"auth": "mtls"}, "auth mtls needs tls_cert and client_ca"),
    ({"auth": "mtls", "tls_cert": "/etc/hostname", "tls_key": "/etc/hostname"},
     "needs client_ca"),
    ({"auth": "mtls", "tls_cert": "/etc/hostname", "tls_key": "/etc/hostname",
      "client_ca": "/etc/hostname"}, "needs allowed_client_names"),
    ({"auth": "loopback", "allowed_client_names": ["x"]}, "are for auth mtls, not loopback"),
    ({"auth": "password"}, "setting auth"),
])  # fmt: skip
def test_auth_settings_are_checked(cli: dict[str, object], needle: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(cli)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_auth_settings_from_file_env_and_cli(
    tmp_path: Path, pki: ExtenderTls, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "extender.yaml"
    cfg.write_text(f"auth: MTLS\ntls_cert: {pki.server_cert}\ntls_key: {pki.server_key}\n"
                   f"client_ca: {pki.ca_cert}\nallowed_client_names: [a, ' b ']\n")
    s = load_settings({}, cfg)
    assert (s.auth, s.allowed_client_names) == ("mtls", ["a", "b"])
    monkeypatch.setenv("GPUTOPO_EXTENDER_ALLOWED_CLIENT_NAMES", '["c"]')
    assert load_settings({}, cfg).allowed_client_names == ["c"]
    assert load_settings({"allowed_client_names": ["d"]}, cfg).allowed_client_names == ["d"]


def test_cli_refuses_mtls_without_a_client_ca() -> None:
    result = CliRunner().invoke(cli_app, ["extender", "--state", "memory", "--auth", "mtls",
                                          "--allowed-client-name", SCHEDULER])
    assert result.exit_code == 2
    assert "auth mtls needs tls_cert and client_ca" in result.output
