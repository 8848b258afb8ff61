"""Reduced-size runs of the papers' workloads (the full sizes: ``benchmarks/run_all.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gputopo_cli.main import app
from simulator.run import simulate
from topology import catalog

SUMMARY_KEYS = {"effbw_sensitive_gbps", "effbw_ratio_to_ideal", "queueing_time_s",
                "jct_s", "makespan_s", "decision_ms"}
QKEYS = {"min", "p25", "median", "p75", "max"}
JCT_QKEYS = QKEYS | {"p95"}
MAPA_POLICIES = ["baseline", "nvidia-best-effort", "gaia", "mapa-greedy", "mapa-preserve",
                 "topo-aware", "gputopo"]


def check_summary(path: Path, policies: list[str]) -> dict:
    doc = json.loads((path / "summary.json").read_text())
    assert list(doc) == policies
    for entry in doc.values():
        assert set(entry) == SUMMARY_KEYS
        for key in ("effbw_sensitive_gbps", "effbw_ratio_to_ideal", "queueing_time_s"):
            assert set(entry[key]) == QKEYS
        assert set(entry["jct_s"]) == JCT_QKEYS
        jct = entry["jct_s"]
        assert jct["min"] <= jct["median"] <= jct["p95"] <= jct["max"]
        assert set(entry["decision_ms"]) == {"p50", "p99"}
    for name in ("summary.md", "details.json", "workload.json", "effbw_boxplot.png",
                 "queueing_cdf.png", "fragmentation.png"):
        assert (path / name).stat().st_size > 0
    for p in policies:
        assert (path / f"jobs-{p}.csv").exists() and (path / f"timeline-{p}.csv").exists()
    return doc


@pytest.mark.parametrize("machine", ["dgx1-v100", "mapa-cubemesh-16"])
def test_mapa_trace_reduced(tmp_path: Path, machine: str) -> None:
    results, _ = simulate(machine, "mapa:jobs=40", MAPA_POLICIES, seed=1, out=tmp_path)
    doc = check_summary(tmp_path, MAPA_POLICIES)
    by = {r.policy: r for r in results}
    base, best = doc["baseline"], doc["gputopo"]
    # gputopo used to maximise the judged model (gputopo-v1) alone and got its optimum every
    # time; since issue 24 it trades a job's own gputopo-v1 EffBW for the other models and
    # for the jobs waiting behind it, so it no longer always does — but it still reaches the
    # optimum the free GPUs offer more often than best-effort and the kubelet's choice
    opt = {p: [r.got_optimum for r in by[p].records if r.measured]
           for p in ("gputopo", "nvidia-best-effort", "baseline")}
    assert opt["gputopo"] and sum(opt["gputopo"]) >= 0.75 * len(opt["gputopo"])
    assert sum(opt["gputopo"]) > max(sum(opt["nvidia-best-effort"]), sum(opt["baseline"]))
    assert best["effbw_sensitive_gbps"]["median"] >= base["effbw_sensitive_gbps"]["median"]
    assert best["effbw_ratio_to_ideal"]["max"] <= 1.0 + 1e-9
    md = (tmp_path / "summary.md").read_text()
    assert "| Policy | MIN | 25th % | 50th % | 75th % | MAX | Tput |" in md


def test_amaral_s1_reduced(tmp_path: Path) -> None:
    pols = ["fcfs", "best-fit", "topo-aware", "topo-aware-p", "gputopo"]
    results, _ = simulate("minsky", "amaral-s1:jobs=40", pols, seed=2, out=tmp_path)
    check_summary(tmp_path, pols)
    minsky = catalog.get("minsky")
    p = next(r for r in results if r.policy == "topo-aware-p")
    # a communication-heavy pair (tiny or small batch) is never split across the sockets
    pairs = [r for r in p.records if r.job.gpus == 2
             and r.job.profile.endswith(("/tiny", "/small"))]  # type: ignore[union-attr]
    assert pairs and all(minsky.nvlinks(*r.gpus) == 2 for r in pairs)


def test_amaral_s2_reduced(tmp_path: Path) -> None:
    pols = ["fcfs", "topo-aware-p", "gputopo"]
    results, summary = simulate("minsky", "amaral-s2:jobs=300", pols, nodes=50, seed=3,
                                out=tmp_path, make_plots=False)
    assert all(len(r.records) == 300 for r in results)
    assert all(summary[p]["decision_ms"]["p99"] >= summary[p]["decision_ms"]["p50"]
               for p in pols)


def test_ungrouped_nodes_decide_the_same(tmp_path: Path) -> None:
    """Asking every node (as the extender's filter does) places exactly as asking once per
    (class, state) group."""
    kw = dict(nodes=6, seed=4, make_plots=False)
    a, _ = simulate("minsky", "amaral-s1:jobs=30", ["gputopo", "topo-aware-p"], **kw)
    b, _ = simulate("minsky", "amaral-s1:jobs=30", ["gputopo", "topo-aware-p"],
                    group_nodes=False, **kw)
    for ra, rb in zip(a, b, strict=True):
        assert [(x.node, x.gpus, x.start_s) for x in ra.records] == \
            [(x.node, x.gpus, x.start_s) for x in rb.records]


runner = CliRunner()


def test_cli_simulate(tmp_path: Path) -> None:
    out = tmp_path / "o"
    r = runner.invoke(app, ["simulate", "--topology", "minsky", "--workload",
                            "amaral-prototype", "--policies", "topo-aware,topo-aware-p",
                            "--seed", "1", "--out", str(out), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert "| topo-aware-p |" in r.stdout
    doc = json.loads((out / "summary.json").read_text())
    assert set(doc) == {"topo-aware", "topo-aware-p"}
    # Amaral §5.2.2: postponing Job 3 until an NVLinked pair is free shortens the makespan
    assert doc["topo-aware-p"]["makespan_s"] < doc["topo-aware"]["makespan_s"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topology", "dgx9"], "unknown topology 'dgx9'"),
        (["--policies", "fastest"], "unknown policy 'fastest'"),
        (["--workload", "philly"], "unknown workload 'philly'"),
        (["--nodes", "0"], "at least 1"),
        (["--workload", "mapa:jobs=20", "--topology", "minsky"], "asks for 5 GPUs"),
        (["--queue", "lifo"], "unknown queue"),
        (["--effbw-model", "eq9"], "unknown EffBW model"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(tmp_path: Path, args: list[str],
                                             message: str) -> None:
    base = {"--topology": "dgx1-v100", "--workload": "mapa:jobs=3", "--policies": "baseline",
            "--out": str(tmp_path)}
    argv = ["simulate"]
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    for k, v in base.items():
        argv += [k, v]
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("gputopo: error:")
    import re

    assert re.search(message, lines[0])
