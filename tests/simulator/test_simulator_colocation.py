"""The simulator runs co-location: Tabrizian's workloads, slowed rates, the new outputs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gputopo_cli.main import app
from simulator import SimulationError
from simulator.engine import RunResult
from simulator.run import simulate
from simulator.workloads import load_workload
from topology.colocation.model import slowdowns
from topology.colocation.profile import JobProfile, builtin_catalog

POLICIES = ["exclusive", "random-colocate", "colocate", "gputopo"]
runner = CliRunner()


def by_policy(results: list[RunResult]) -> dict[str, RunResult]:
    return {r.policy: r for r in results}


def makespan(r: RunResult) -> float:
    return max(x.end_s for x in r.records) - min(x.job.arrival_s for x in r.records)


def max_concurrent(r: RunResult) -> int:
    """Most jobs that ever ran at once on one GPU."""
    events: dict[tuple[int, int], list[tuple[float, int]]] = {}
    for x in r.records:
        for g in x.gpus:
            events.setdefault((x.node, g), []).extend([(x.start_s, 1), (x.end_s, -1)])
    most = 0
    for evs in events.values():
        now = 0
        for _, delta in sorted(evs, key=lambda e: (e[0], e[1])):
            now += delta
            most = max(most, now)
    return most


def test_best_case_halves_the_makespan(tmp_path: Path) -> None:
    """§6.2, Fig. 6.3: co-location's makespan ≤ 0.6 × exclusive FIFO (the thesis: halved with
    two data workers), jobs slower (JCT up), no queueing."""
    results, summary = simulate(None, "tabrizian-best", POLICIES, out=tmp_path,
                                make_plots=False)
    r = by_policy(results)
    assert makespan(r["colocate"]) <= 0.6 * makespan(r["exclusive"])
    assert makespan(r["gputopo"]) <= 0.6 * makespan(r["exclusive"])
    assert summary["colocate"]["jct_s"]["median"] > summary["exclusive"]["jct_s"]["median"]
    assert all(x.queueing_s == 0 for x in r["colocate"].records)
    assert max(x.queueing_s for x in r["exclusive"].records) > 0
    # two sets of three on two GPUs: every job shares with two others
    assert all(len(x.corunners) == 2 for x in r["colocate"].records)
    assert max_concurrent(r["colocate"]) == 3 and max_concurrent(r["exclusive"]) == 1
    md = (tmp_path / "summary.md").read_text()
    assert "| colocate |" in md and "(1.00)" in md and "co-located jobs" in md


@pytest.mark.parametrize("workers", [2, 10])
def test_worst_case_is_no_worse_than_exclusive(workers: int) -> None:
    """§6.3, Fig. 6.7: SENet-18 + ResNet-18 at batch 256 gain little, but no loss."""
    results, _ = simulate(None, f"tabrizian-worst:workers={workers}", POLICIES,
                          make_plots=False)
    r = by_policy(results)
    for p in ("colocate", "gputopo"):
        assert makespan(r[p]) <= makespan(r["exclusive"])
        assert max_concurrent(r[p]) == 2  # pairs: Algorithm 2 spread them
    assert makespan(r["colocate"]) > 0.6 * makespan(r["exclusive"])  # little gain


def test_random_packing_can_lose() -> None:
    """Blind packing (Gandiva-style) never beats Algorithm 2 on the worst case; with ten
    workers it pairs the two SE-ResNet-18s on one GPU and ends later."""
    for workers in (2, 10):
        results, _ = simulate(None, f"tabrizian-worst:workers={workers}", POLICIES,
                              make_plots=False)
        r = by_policy(results)
        assert makespan(r["random-colocate"]) >= makespan(r["colocate"]) - 1e-9
    pairs = {tuple(sorted((x.job.profile, r["random-colocate"].records[c].job.profile)))
             for x in r["random-colocate"].records for c in x.corunners}
    assert ("se_resnet18:256", "se_resnet18:256") in pairs
    assert makespan(r["random-colocate"]) > makespan(r["colocate"])


def test_rates_follow_the_set_on_the_gpu(tmp_path: Path) -> None:
    """Hand-computed: A runs alone 0-5 s, then B joins; both slow by the model's factors until
    A ends; B then runs alone at full speed."""
    a = JobProfile(0.1, 0.1 * 2e8 * 0.1, 0.05 * 2e8 * 0.1, 1000)
    b = JobProfile(0.2, 0.3 * 2e8 * 0.2, 0.2 * 2e8 * 0.2, 1000)
    s_a, s_b = slowdowns([a, b])
    assert (s_a, s_b) == pytest.approx((1.24, 1.06))
    doc = {"name": "pair", "cluster": {"topology": "v100-1gpu", "nodes": 1}, "jobs": [
        {"id": 0, "shared": True, "kernel_occupancy": a.kernel_occupancy,
         "mem_bandwidth_util": a.mem_bandwidth_util, "iteration_s": 0.1,
         "gpu_memory_mib": 1000, "runtime_s": 10},
        {"id": 1, "arrival_s": 5, "shared": True, "kernel_occupancy": b.kernel_occupancy,
         "mem_bandwidth_util": b.mem_bandwidth_util, "iteration_s": 0.2,
         "gpu_memory_mib": 1000, "runtime_s": 10},
    ]}
    f = tmp_path / "pair.json"
    f.write_text(json.dumps(doc))
    results, _ = simulate(None, str(f), ["colocate"], out=tmp_path / "out", make_plots=False)
    ja, jb = results[0].records
    a_end = 5 + 5 * s_a  # 5 s of solo work left at rate 1/1.24
    b_done = (a_end - 5) / s_b  # solo work B did while sharing
    assert ja.end_s == pytest.approx(a_end)  # 11.2
    assert jb.end_s == pytest.approx(a_end + (10 - b_done))  # 15.35
    assert ja.corunners == {1} and jb.corunners == {0}
    rows = list(csv.DictReader((tmp_path / "out" / "jobs-colocate.csv").open()))
    assert [r["corunners"] for r in rows] == ["1", "0"]
    assert rows[0]["shared"] == "True" and float(rows[0]["jct_s"]) == pytest.approx(a_end)


def test_outputs_gain_jct_and_corunners(tmp_path: Path) -> None:
    simulate(None, "tabrizian-best", ["exclusive", "colocate"], out=tmp_path)
    doc = json.loads((tmp_path / "summary.json").read_text())
    for entry in doc.values():
        assert set(entry["jct_s"]) == {"min", "p25", "median", "p75", "p95", "max"}
        assert "makespan_s" in entry and "queueing_time_s" in entry
    rows = list(csv.DictReader((tmp_path / "jobs-colocate.csv").open()))
    assert all(len(r["corunners"].split(";")) == 2 for r in rows)
    assert all(r["corunners"] == "" for r in csv.DictReader(
        (tmp_path / "jobs-exclusive.csv").open()))
    for png in ("jct_cdf.png", "makespan.png"):
        assert (tmp_path / png).stat().st_size > 0
    details = json.loads((tmp_path / "details.json").read_text())
    assert details["meta"]["slots_per_gpu"] == 3
    assert details["policies"]["colocate"]["shared_colocated_share"] == 1.0
    # the run's workload.json replays exactly, cluster included
    again, _ = simulate(None, str(tmp_path / "workload.json"), ["colocate"],
                        make_plots=False)
    assert [x.end_s for x in again[0].records] == pytest.approx(
        [float(r["end_s"]) for r in rows], abs=1e-3)


def test_mix_gputopo_beats_algorithm2() -> None:
    """On DGX-1 nodes with exclusive multi-GPU jobs, gputopo packs shared jobs and keeps
    NVLink groups whole: multi-GPU jobs wait less and the batch ends sooner than with
    Algorithm 2 (seed 0; benchmarks/results/sim/tabrizian-mix has the sweep)."""
    results, _ = simulate(None, "tabrizian-mix", ["exclusive", "colocate", "gputopo"],
                          seed=0, make_plots=False)
    r = by_policy(results)

    def multi_wait(res: RunResult) -> float:
        waits = [x.queueing_s for x in res.records if not x.job.shared]
        return sum(waits) / len(waits)

    assert multi_wait(r["gputopo"]) < multi_wait(r["colocate"])
    assert makespan(r["gputopo"]) < makespan(r["colocate"]) < makespan(r["exclusive"])
    for res in results:
        assert max_concurrent(res) <= 3
        for x in res.records:  # a multi-GPU job never shares a GPU
            assert not x.corunners or x.job.shared


def test_slots_and_threshold_settings() -> None:
    one, _ = simulate(None, "tabrizian-best", ["colocate"], slots=1, make_plots=False)
    assert max_concurrent(one[0]) == 1
    strict, _ = simulate(None, "tabrizian-best", ["colocate"], threshold=1e6,
                         make_plots=False)
    assert max_concurrent(strict[0]) == 2  # no set of three passes ΣC ≤ 1e6
    with pytest.raises(SimulationError, match="slots"):
        simulate(None, "tabrizian-best", ["colocate"], slots=0)
    with pytest.raises(SimulationError, match="threshold"):
        simulate(None, "tabrizian-best", ["colocate"], threshold=0)


def test_shared_workloads_need_colocation_policies() -> None:
    with pytest.raises(SimulationError, match="does not place co-location slots"):
        simulate(None, "tabrizian-best", ["mapa-preserve"])


def test_generators() -> None:
    best = load_workload("tabrizian-best")
    assert [j.profile for j in best.jobs] == ["vgg19:64", "vgg11:64", "resnet18:64"] * 2
    w2 = builtin_catalog("v100-cifar10-w2")
    assert best.jobs[0].runtime_s == pytest.approx(1000 * w2["vgg19:64"].iteration_s)
    assert best.default_topology == "v100-1gpu" and best.default_nodes == 2
    ten = load_workload("tabrizian-best:workers=10,iterations=50")
    assert ten.profiles == "v100-cifar10-w10" and ten.jobs[0].runtime_s == pytest.approx(
        50 * builtin_catalog()["vgg19:64"].iteration_s)
    worst = load_workload("tabrizian-worst")
    assert sorted(j.profile for j in worst.jobs) == ["resnet18:256"] * 2 + [
        "se_resnet18:256"] * 2  # type: ignore[operator]
    mix = load_workload("tabrizian-mix:jobs=50,shared=0.5", seed=3)
    assert len(mix.jobs) == 50 and any(j.shared for j in mix.jobs) and any(
        not j.shared and j.gpus >= 2 for j in mix.jobs)
    assert load_workload("tabrizian-mix:jobs=50,shared=0.5", seed=3) == mix
    with pytest.raises(SimulationError, match="workers"):
        load_workload("tabrizian-best:workers=4")
    with pytest.raises(SimulationError, match="unknown parameter"):
        load_workload("tabrizian-worst:colour=red")


@pytest.mark.parametrize("row, message", [
    ({"profile": "resnet18:64", "gpus": 1}, "set shared: true"),
    ({"kernel_occupancy": 1e6, "gpus": 1}, "set shared: true"),
    ({"shared": True, "profile": "resnet18:65"}, "not in catalog"),
    ({"shared": True, "profile": "resnet18"}, "<model>:<batch>"),
    ({"shared": True, "gpus": 2, "profile": "resnet18:64"}, "gpus: 1"),
    ({"shared": True, "kernel_occupancy": 1e6, "mem_bandwidth_util": 1e6}, "iteration"),
    ({"shared": True, "profile": "vgg11:64", "gpu_memory_mib": 0}, "gpu_memory_mib"),
    ({"shared": True, "profile": "vgg11:64", "iterations": 0}, "iterations"),
    ({"shared": "maybe"}, "true/false"),
])
def test_bad_shared_rows(tmp_path: Path, row: dict[str, object], message: str) -> None:
    f = tmp_path / "w.json"
    f.write_text(json.dumps({"jobs": [row]}))
    with pytest.raises(SimulationError, match=message):
        load_workload(str(f))


def test_file_fields_and_own_catalog(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(
        "apiVersion: gputopo.io/v1\nkind: ColocationProfiles\nmetadata: {name: mine}\n"
        "profiles:\n  bert:32: {iteration_s: 0.2, kernel_occupancy: 2e6, "
        "mem_bandwidth_util: 1e6, gpu_memory_mib: 5000}\n")
    f = tmp_path / "w.yaml"
    f.write_text(
        "profiles: mine.yaml\ncluster: {topology: dgx1-v100, nodes: 1}\njobs:\n"
        "- {shared: true, profile: bert:32, iterations: 10}\n"
        "- {shared: true, profile: bert:32, runtime_s: 7, gpu_memory_mib: 6000}\n"
        "- {shared: true}\n"
        "- {gpus: 2, network: vgg16}\n")
    w = load_workload(str(f))
    a, b, default, whole = w.jobs
    assert w.profiles == "mine" and w.default_topology == "dgx1-v100"
    assert a.runtime_s == pytest.approx(2.0) and a.gpu_memory_mib == 5000
    assert b.runtime_s == 7 and b.gpu_memory_mib == 6000
    assert default.shared and default.kernel_occupancy == pytest.approx(3.5e7)
    assert not whole.shared
    results, _ = simulate(None, w, ["gputopo"], make_plots=False)
    assert len(results[0].records) == 4


def test_cli_needs_no_topology_for_a_cluster_defining_workload(tmp_path: Path) -> None:
    r = runner.invoke(app, ["simulate", "-w", "tabrizian-worst", "-p",
                            "exclusive,colocate", "-o", str(tmp_path), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert "| colocate |" in r.stdout and "JCT p95" in r.stdout
    f = tmp_path / "nocluster.json"
    f.write_text(json.dumps({"jobs": [{"gpus": 1, "network": "vgg16"}]}))
    r = runner.invoke(app, ["simulate", "-w", str(f), "-p", "gputopo", "-o",
                            str(tmp_path / "x"), "--no-plots"])
    assert r.exit_code == 2 and "--topology is required" in r.output
    r = runner.invoke(app, ["simulate", "-w", "tabrizian-best", "-p", "baseline", "-o",
                            str(tmp_path / "y")])
    assert r.exit_code == 2 and "co-location" in r.output
