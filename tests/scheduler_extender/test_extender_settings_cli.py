"""Settings precedence and validation; the ``extender`` and ``demo`` commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gputopo_cli.main import app
from scheduler_extender.settings import ExtenderSettings, SettingsError, load_settings
from scheduler_extender.state import MemoryState, NodesSpecError, parse_nodes_spec
from tests.scheduler_extender.helpers import POLICY

runner = CliRunner()


def test_defaults() -> None:
    s = ExtenderSettings()
    assert (s.host, s.port, s.state, s.log_level) == ("127.0.0.1", 8888, "kubernetes", "info")
    assert s.tls_cert is None and s.kubeconfig is None
    assert s.gil_switch_interval_ms == 0.5
    assert s.bind_concurrency == 64


def test_precedence_cli_env_file_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "extender.yaml"
    cfg.write_text("port: 7000\nhost: 0.0.0.0\nlog-level: WARNING\npolicy: baseline\n")
    s = load_settings({}, cfg)
    assert (s.port, s.host, s.log_level, s.policy) == (7000, "0.0.0.0", "warning", "baseline")
    monkeypatch.setenv("GPUTOPO_EXTENDER_PORT", "7100")
    monkeypatch.setenv("GPUTOPO_EXTENDER_STATE", "memory")
    s = load_settings({}, cfg)
    assert (s.port, s.host, s.state) == (7100, "0.0.0.0", "memory")
    s = load_settings({"port": 7200, "host": None}, cfg)
    assert (s.port, s.host) == (7200, "0.0.0.0")  # None = flag not given


@pytest.mark.parametrize(("cli", "needle"), [
    ({"policy": "fastest"}, "unknown policy 'fastest'"),
    ({"state": "memory", "nodes": "dgx9:2"}, "unknown catalog machine 'dgx9'"),
    ({"state": "memory", "nodes": "dgx1-v100:zero"}, "bad node count"),
    ({"state": "memory", "nodes": "dgx1-v100:1000000000"}, "names more than 10000 nodes"),
    ({"state": "memory", "nodes": "dgx1-v100:6000,pcie-8gpu:4001"}, "names more than 10000"),
    ({"state": "etcd"}, "setting state"),
    ({"port": 70000}, "setting port"),
    ({"gil_switch_interval_ms": 0}, "setting gil_switch_interval_ms"),
    ({"tls_cert": "/etc/hostname"}, "tls_cert and tls_key must be given together"),
    ({"tls_cert": "/nope.pem", "tls_key": "/nope.key"}, "does not exist"),
])
def test_invalid_settings_are_one_line(cli: dict[str, object], needle: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(cli)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_bad_config_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("port: [1\n")
    with pytest.raises(SettingsError, match="not valid YAML"):
        load_settings({}, bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(SettingsError, match="must be a mapping"):
        load_settings({}, bad)
    bad.write_text("prot: 1\n")
    with pytest.raises(SettingsError, match="unknown setting"):
        load_settings({}, bad)
    with pytest.raises(SettingsError, match="cannot read config file"):
        load_settings({}, tmp_path / "missing.yaml")


def test_nodes_spec() -> None:
    nodes = parse_nodes_spec("dgx1-v100:2, dgx1-v100 ,mapa-cubemesh-16:1")
    assert [n for n, _ in nodes] == ["dgx1-v100-0", "dgx1-v100-1", "dgx1-v100-2",
                                    "mapa-cubemesh-16-0"]
    assert nodes[3][1].size == 16
    assert MemoryState.from_spec("dgx1-v100:3").node_names() == [
        "dgx1-v100-0", "dgx1-v100-1", "dgx1-v100-2"]
    with pytest.raises(NodesSpecError, match="empty"):
        parse_nodes_spec(" , ")


@pytest.mark.parametrize("args", [
    ["extender", "--policy", "fastest", "--state", "memory"],
    ["extender", "--state", "memory", "--nodes", "nope:1"],
    ["extender", "--state", "kubernetes", "--kubeconfig", "/does/not/exist"],
    ["extender", "--tls-cert", "/etc/hostname", "--state", "memory"],
    ["demo", "--nodes", "nope:2"],
    ["extender", "--state", "memory", "--gil-switch-interval-ms", "-1"],
])
def test_cli_bad_input_exits_2_with_one_line(args: list[str]) -> None:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("gputopo: error: ")
    assert "Traceback" not in r.output


def test_cli_extender_without_cluster_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a cluster and without --kubeconfig: a clear error, not a stack trace."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    r = runner.invoke(app, ["extender", "--state", "kubernetes", "--policy", POLICY])
    assert r.exit_code == 2
    assert "in-cluster config" in r.output and "--kubeconfig" in r.output


def test_cli_demo_runs_and_compares() -> None:
    r = runner.invoke(app, ["demo", "--pods", "12", "--seed", "3"])
    assert r.exit_code == 0, r.output
    out = r.output
    assert "POST /filter -> /prioritize" in out and "listening on http://127.0.0.1:" in out
    assert "job-001" in out and "job-012" in out
    assert "Bandwidth-sensitive multi-GPU jobs" in out
    if POLICY != "baseline":
        assert "baseline" in out and POLICY in out
        assert "default stack" in out and "nvidia-best-effort" in out


def test_demo_tells_the_headline_story_and_shows_no_negative_bandwidth() -> None:
    """The newcomer's first screen: the worst sensitive job first, against the default stack
    (kube-scheduler's node choice + NVIDIA's best-effort GPUs), makespan and JCT, and never a
    negative bandwidth (MAPA Eq. 2 goes below zero on dense 5-GPU sets: clamped, explained)."""
    import re

    from gputopo_cli.demo import DEFAULT_STACK, run_demo

    lines: list[str] = []
    runs = run_demo(pods=40, seed=7, echo=lines.append)
    text = "\n".join(lines)
    assert [r.label for r in runs] == [POLICY, "default stack", "lowest index"]
    assert runs[1].policy == DEFAULT_STACK and runs[1].node_choice == "least-allocated"
    table = lines.index(next(ln for ln in lines if ln.startswith("Bandwidth-sensitive")))
    rows = [ln.strip() for ln in lines[table + 1:] if ln.strip()]
    assert rows[1].startswith("worst sensitive job")  # worst first, after the header
    assert "makespan" in text and "mean job completion time" in text
    # no negative number anywhere on the screen (ticks, GB/s, ratios)
    assert not re.search(r"(?<![\w-])-\d", text), [ln for ln in lines if re.search(r"-\d", ln)]
    assert "MAPA Eq. 2 predicts less than nothing" in text  # clamped and said so
    closing = " ".join(lines[-2:])
    assert closing.startswith(f"{POLICY} against default stack: its worst sensitive job")
    # the story holds on this stream: worst job at least as good, no slower to finish
    worst = [min(p.effbw_gputopo for p in r.placements if p.sensitive) for r in runs]
    assert worst[0] >= worst[1] and runs[0].makespan <= runs[1].makespan


def _pem_files(tmp_path: Path) -> dict[str, Path]:
    """A CA, a serving certificate and its key (``tests.deploy.helpers.make_tls``), another
    key, the same key encrypted, and a file of no PEM at all."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from tests.deploy.helpers import make_tls

    tls = make_tls()
    key = serialization.load_pem_private_key(tls.key.encode(), password=None)
    texts = {
        "ca": tls.ca_cert, "cert": tls.cert, "key": tls.key,
        "other-key": ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()).decode(),
        "encrypted-key": key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret")).decode(),
        "junk": "not a certificate\n",
    }
    out = {}
    for name, text in texts.items():
        out[name] = tmp_path / f"{name}.pem"
        out[name].write_text(text)
    return out


@pytest.mark.parametrize(("cert", "key", "ca", "says"), [
    ("junk", "junk", None, "are not a PEM certificate and its private key"),
    ("cert", "junk", None, "are not a PEM certificate and its private key"),
    ("cert", "other-key", None, "are not a PEM certificate and its private key"),
    ("cert", "encrypted-key", None, "is encrypted; give an unencrypted PEM private key"),
    ("cert", "key", "junk", "is not a PEM CA bundle"),
])
def test_tls_files_that_cannot_serve_https_are_one_line_exit_2(
        tmp_path: Path, cert: str, key: str, ca: str | None, says: str) -> None:
    """Files that exist but cannot serve HTTPS — not PEM, a key that is not the
    certificate's, an encrypted key, a client CA that is not one — are refused at start-up in
    one line, exit 2, naming the file; uvicorn raised an ``ssl.SSLError`` traceback (or, for
    the encrypted key, would have asked for a password on the terminal)."""
    pem = _pem_files(tmp_path)
    args = ["extender", "--state", "memory", "--tls-cert", str(pem[cert]),
            "--tls-key", str(pem[key])]
    if ca is not None:
        args += ["--auth", "mtls", "--client-ca", str(pem[ca]),
                 "--allowed-client-name", "kube-scheduler"]
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("gputopo: error: ") and says in lines[0]
    assert str(pem[ca if ca == "junk" else key]) in lines[0]


def test_tls_files_that_can_serve_https_are_taken(tmp_path: Path) -> None:
    pem = _pem_files(tmp_path)
    s = load_settings({"tls_cert": pem["cert"], "tls_key": pem["key"], "auth": "mtls",
                       "client_ca": pem["ca"], "allowed_client_names": ["kube-scheduler"]})
    assert s.tls_cert == pem["cert"] and s.client_ca == pem["ca"]


def test_a_port_in_use_is_one_line_and_exit_1() -> None:
    """The extender cannot listen: one line with the OS's reason, exit 1 (a program that
    cannot start), before anything else starts — not uvicorn's log lines and status 3."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = runner.invoke(app, ["extender", "--state", "memory", "--port", str(port)])
    assert r.exit_code == 1, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines == [f"gputopo: error: cannot serve on 127.0.0.1:{port}: Address already in use"]
