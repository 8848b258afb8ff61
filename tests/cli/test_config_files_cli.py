"""Files a command is handed that are not UTF-8 text (a binary, a file in another encoding):
one line naming the file, exit code 2 — not a UnicodeDecodeError traceback (every long-running
command's ``--config`` and the simulator's workload file did that)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gputopo_cli.main import app

runner = CliRunner()


@pytest.mark.parametrize("args", [
    ["extender", "--config", "{f}"],
    ["planner", "--config", "{f}"],
    ["device-plugin", "--config", "{f}"],
    ["dra-driver", "--config", "{f}"],
    ["dra-allocator", "--config", "{f}"],
    ["simulate", "-w", "{f}", "-p", "gputopo", "-o", "{d}", "--no-plots"],
])
def test_a_file_that_is_not_utf8_is_one_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    f = tmp_path / "latin1.yaml"
    f.write_bytes("policy: caf\u00e9\n".encode("latin-1"))
    r = runner.invoke(app, [a.format(f=f, d=tmp_path / "out") for a in args])
    assert r.exit_code == 2, (r.exit_code, r.stderr, r.exception)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(f) in lines[0] and "not UTF-8 text" in lines[0], r.stderr


_EVERY_CONFIG = [
    ["extender", "--config", "{f}"],
    ["planner", "--config", "{f}"],
    ["device-plugin", "--config", "{f}"],
    ["dra-driver", "--config", "{f}"],
    ["dra-allocator", "--config", "{f}"],
]


@pytest.mark.parametrize("args", _EVERY_CONFIG)
@pytest.mark.parametrize(("text", "says"), [
    ("log-level: info\nlog-level: debug\n", "duplicate key 'log-level' (line 2, column 1)"),
    ("log-level: info\nlog_level: debug\n", "sets 'log_level' twice (as 'log-level' and "
                                            "'log_level')"),
])
def test_a_config_that_sets_one_thing_twice_is_one_line_and_exit_2(
        tmp_path: Path, args: list[str], text: str, says: str) -> None:
    """Which of two values was meant is not for the program to guess (PyYAML alone keeps the
    last one, and the dashed and underscored spellings of one setting both reach it)."""
    f = tmp_path / "twice.yaml"
    f.write_text(text, encoding="utf-8")
    r = runner.invoke(app, [a.format(f=f) for a in args])
    assert r.exit_code == 2, (r.exit_code, r.stderr, r.exception)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(f) in lines[0] and says in lines[0], r.stderr


def test_a_workload_file_with_a_key_twice_is_one_line_and_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text("name: w\njobs:\n  - {id: a, gpus: 2, gpus: 4, runtime_s: 60}\n",
                 encoding="utf-8")
    r = runner.invoke(app, ["simulate", "-w", str(f), "-p", "gputopo", "-o",
                            str(tmp_path / "out"), "--no-plots"])
    assert r.exit_code == 2, (r.exit_code, r.stderr, r.exception)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "duplicate key 'gpus' (line 3" in lines[0], r.stderr


@pytest.mark.parametrize(("name", "text", "says"), [
    ("t.yaml", "schemaVersion: gputopo.io/v1\nname: x\nname: y\ngpus: []\n",
     "duplicate key 'name' (line 3, column 1)"),
    ("t.json", '{"schemaVersion": "gputopo.io/v1", "name": "x", "name": "y", "gpus": []}',
     "duplicate key 'name'"),
])
def test_a_topology_file_with_a_key_twice_is_one_line_and_exit_2(
        tmp_path: Path, name: str, text: str, says: str) -> None:
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    r = runner.invoke(app, ["place", "-t", str(f), "-n", "2"])
    assert r.exit_code == 2, (r.exit_code, r.stderr, r.exception)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], r.stderr


@pytest.mark.parametrize(("args", "code"), [
    (["extender", "--state", "kubernetes"], 2),
    (["planner"], 2),
    (["dra-allocator"], 2),
    # the node programs: "a plugin that cannot start (... no Kubernetes config ...) exits 1
    # with one line" (docs/device-plugin.md, docs/dra-driver.md)
    (["device-plugin", "--fake-topology", "dgx1-v100", "--node-name", "n0"], 1),
    (["dra-driver", "--topology", "dgx1-v100", "--node-name", "n0", "--no-kubelet",
      "--cdi-dir", "{d}"], 1),
], ids=["extender", "planner", "dra-allocator", "device-plugin", "dra-driver"])
@pytest.mark.parametrize("text", [
    "apiVersion: v1\nclusters: [\n",  # not YAML: the client's parser raises yaml.YAMLError
    "just a string\n",                # YAML, not a mapping: a TypeError inside the client
    "clusters: 5\ncontexts: []\ncurrent-context: x\n",  # a list that is a number
    "clusters: [{name: k, cluster: 5}]\ncontexts: [{name: x, context: {cluster: k}}]\n"
    "current-context: x\n",           # a cluster that is a number
], ids=["not-yaml", "a-string", "clusters-a-number", "cluster-a-number"])
def test_a_kubeconfig_that_is_not_one_is_one_line(
        tmp_path: Path, args: list[str], code: int, text: str) -> None:
    """Every command that talks to the API server, handed a file that is not a kubeconfig:
    one line naming it, with the command's exit code for it — the extender, the planner and
    the DRA allocator raised the official client's own errors (a YAML parser error, a
    TypeError) as tracebacks."""
    f = tmp_path / "kubeconfig"
    f.write_text(text, encoding="utf-8")
    r = runner.invoke(app, [a.format(d=tmp_path / "cdi") for a in args] + ["--kubeconfig",
                                                                            str(f)])
    assert r.exit_code == code, (r.exit_code, r.stderr, r.exception)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot load kubeconfig" in lines[0] and str(f) in lines[0], \
        r.stderr
