"""``gputopo place`` and ``gputopo topology``: outputs, exit codes, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gputopo_cli.main import app
from topology import catalog, serialization

runner = CliRunner()


def run(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args))


def test_place_json_has_the_documented_keys() -> None:
    r = run("place", "--topology", "dgx1-v100", "--gpus", "4", "--pattern", "ring",
            "--output", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    for key in ("gpus", "uuids", "aggregated_bandwidth_gbps", "effective_bandwidth_gbps",
                "preserved_bandwidth_gbps", "cpu_affinity", "numa_nodes", "policy"):
        assert key in doc
    assert doc["policy"] == "gputopo" and len(doc["gpus"]) == 4
    assert doc["cpu_affinity"] in ("0-19,40-59", "20-39,60-79")


def test_place_worked_example_with_used_gpus() -> None:
    r = run("place", "-t", "dgx1-v100", "-n", "3", "--used", "2,3,5,6,7", "--policy",
            "mapa-greedy", "-o", "json")
    doc = json.loads(r.stdout)
    assert doc["gpus"] == [0, 1, 4] and doc["aggregated_bandwidth_gbps"] == 87.0


def test_place_fraction_uses_partly_used_gpu() -> None:
    r = run("place", "-t", "dgx1-v100", "-n", "0.3", "--used", "0:0.5,1:0.7", "-o", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["fractional"] and doc["core_percent"] == 30
    assert doc["gpus"] == [1]  # best fit: 30 % left on GPU 1


def test_place_table_output_explains() -> None:
    r = run("place", "-t", "dgx1-v100", "-n", "2", "--bandwidth-insensitive")
    assert r.exit_code == 0
    assert "preserved bandwidth" in r.stdout and "runner-up" in r.stdout and "why" in r.stdout


def test_place_from_annotation_json_file(tmp_path: Path) -> None:
    f = tmp_path / "node.json"
    f.write_text(serialization.dumps(catalog.get("dgx-a100")))
    r = run("place", "-t", str(f), "-n", "8", "-o", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["gpus"] == list(range(8))


def test_cannot_fit_exits_1_with_reason() -> None:
    r = run("place", "-t", "dgx1-v100", "-n", "4", "--used", "0,1,2,3,4,5")
    assert r.exit_code == 1
    assert "cannot place" in r.stderr and "2 of 8 GPUs free" in r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-t", "nope-9000", "-n", "2"], "not a catalog machine"),
        (["-t", "dgx1-v100", "-n", "2", "--pattern", "star"], "bad pattern"),
        (["-t", "dgx1-v100", "-n", "2", "--pattern", "0-1,1-2"], "only 2"),
        (["-t", "dgx1-v100", "-n", "2", "--used", "9"], "GPUs 0..7"),
        (["-t", "dgx1-v100", "-n", "2", "--used", "x"], "bad --used"),
        (["-t", "dgx1-v100", "-n", "2.5"], "integer or a fraction"),
        (["-t", "dgx1-v100", "-n", "inf"], "must be a number of GPUs, got inf"),
        (["-t", "dgx1-v100", "-n", "nan"], "must be a number of GPUs, got nan"),
        (["-t", "dgx1-v100", "-n", "1e300"], "--gpus 1e+300: no node has more than 256 GPUs"),
        (["-t", "dgx1-v100", "-n", "257"], "--gpus 257: no node has more than 256 GPUs"),
        (["-t", "x" * 300, "-n", "2"], "unknown topology 'xxx"),
        (["-t", "dgx1-v100", "-n", "2", "--policy", "fastest"], "unknown policy"),
        (["-t", "dgx1-v100", "-n", "2", "-o", "xml"], "--output"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    r = run("place", *args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["place", "-t", "dgx1-v100", "-n", ""],
         "gputopo place: error: Invalid value for '--gpus' / '-n': "),
        (["place"], "gputopo place: error: Missing option '--topology' / '-t'."),
        (["place", "-t", "dgx1-v100", "--bogus"], "gputopo place: error: No such option: --bogus"),
        (["plac"], "gputopo: error: No such command 'plac'."),
        (["topology", "show"], "gputopo topology show: error: Missing argument"),
        (["place", "-t", "dgx1-v100", "--memory-mib", "-5"],
         "gputopo place: error: Invalid value for '--memory-mib'"),
    ],
)
def test_a_usage_error_the_cli_library_finds_is_one_line_and_exit_2(
        args: list[str], line: str) -> None:
    """Bad arguments the CLI library rejects before gputopo sees them (an unknown command or
    option, a value of the wrong type, a missing option) read as gputopo's own errors: one
    line on stderr naming the command and where its help is, exit code 2, nothing on
    stdout."""
    r = run(*args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(line), r.stderr
    assert lines[0].endswith(f"(see {line.split(':')[0]} --help)")
    assert r.stdout == ""


def test_help_is_still_the_librarys() -> None:
    r = run("place", "--help")
    assert r.exit_code == 0 and "Usage: gputopo place" in r.stdout and r.stderr == ""
    r = run()  # no command: the help, and exit 2 as before
    assert r.exit_code == 2 and "Commands" in r.stdout


def test_not_an_nvidia_smi_file_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "garbage.txt"
    f.write_text("hello\nthis is not a topology\n")
    r = run("place", "-t", str(f), "-n", "1")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1


def test_topology_show_json_is_exactly_the_annotation() -> None:
    r = run("topology", "show", "dgx1-v100", "--output", "json")
    assert r.exit_code == 0
    assert r.stdout.strip() == serialization.dumps(catalog.get("dgx1-v100"))


def test_topology_show_table_has_matrix_and_tree() -> None:
    r = run("topology", "show", "dgx1-v100")
    assert r.exit_code == 0, r.output
    assert "NV2" in r.stdout and "access-cost tree" in r.stdout


def test_topology_list_and_schema() -> None:
    r = run("topology", "list")
    assert all(name in r.stdout for name in catalog.names())
    s = json.loads(run("topology", "schema").stdout)
    assert s["properties"]["schemaVersion"]["const"] == "gputopo.io/v1"


def test_topology_show_says_where_memory_comes_from() -> None:
    """A saved nvidia-smi topo -m names no GPU model: --gpu-model gives one from the catalog
    (--output json prints the annotation on stdout, the memory line on stderr)."""
    text = str(Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
               / "dgx1-v100-driver535.txt")
    r = run("topology", "show", text, "--gpu-model", "Tesla V100-SXM2-16GB", "--output", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert {(g["name"], g["memoryMiB"]) for g in doc["gpus"]} == {("Tesla V100-SXM2-16GB",
                                                                    16160)}
    assert "from the catalog's Tesla V100-SXM2-16GB entry (--gpu-model)" in r.stderr
    r = run("topology", "show", text)
    assert "GPU memory: unknown for GPUs 0-7" in r.stdout
    r = run("topology", "show", text, "--gpu-model", "RTX 9090")
    assert r.exit_code == 2 and "unknown GPU model 'RTX 9090'" in r.output
    r = run("topology", "list", "--models")
    assert "Tesla V100-SXM2-16GB" in r.stdout and "16160 MiB" in r.stdout


def test_help_everywhere() -> None:
    for args in (["--help"], ["place", "--help"], ["topology", "--help"],
                 ["topology", "show", "--help"]):
        assert run(*args).exit_code == 0
