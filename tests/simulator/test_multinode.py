"""The multi-node simulator: gangs on a topology hierarchy under default, gang, kueue-tas and
gputopo (reduced sizes; the full workload is in benchmarks/)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gputopo_cli.main import app
from simulator import SimulationError
from simulator.multinode import RENDEZVOUS_TIMEOUT_S, MultiSimulation
from simulator.multinode_report import simulate_multinode
from simulator.multinode_workloads import (
    hierarchy_workload,
    is_multinode_spec,
    load_multinode_workload,
)
from simulator.runtime import ideal_effbw, judge_effbw, judge_name
from topology.patterns import ring
from topology.policies.memo import Memo
from topology.sources import load_topology

SMALL = "hierarchy:jobs=40,blocks=2,racks=2,nodes=4,rate=8"
POLICIES = ["default", "gang", "kueue-tas", "gputopo"]


def write(tmp_path: Path, doc: dict) -> str:
    f = tmp_path / "w.json"
    f.write_text(json.dumps(doc))
    return str(f)


def test_hierarchy_workload_mixes_jobs_and_gangs() -> None:
    w = hierarchy_workload(jobs=200, seed=3)
    gangs = [j for j in w.jobs if j.gang]
    assert 50 < len(gangs) < 110 and {j.gpus for j in gangs} <= {4, 8}
    assert min(j.pods for j in gangs) >= 2 and max(j.pods for j in gangs) <= 16
    assert all(j.pods == 1 and 1 <= j.gpus <= 8 for j in w.jobs if not j.gang)
    assert w.cluster.size == 128 and hierarchy_workload(jobs=200, seed=3) == w
    assert is_multinode_spec("hierarchy:jobs=3") and not is_multinode_spec("mapa")


def test_small_run_meets_the_invariants(tmp_path: Path) -> None:
    results, summaries = simulate_multinode(SMALL, POLICIES, seed=1, out=tmp_path,
                                            make_plots=False)
    assert list(summaries) == POLICIES
    for r in results:
        assert all(x.end_s >= x.start_s >= x.job.arrival_s for x in r.records)
    s = summaries
    # all-or-nothing policies never hold GPUs for a gang that cannot start
    for p in ("gang", "kueue-tas", "gputopo"):
        assert s[p]["partial"] == {"gangs": 0, "gpu_hours": 0.0, "timeouts": 0, "deadlocks": 0}
    assert s["default"]["partial"]["gangs"] > 0
    # gputopo keeps every gang an idle rack would hold inside one rack
    assert s["gputopo"]["gangs"]["in_one_rack_share"] == 1.0
    assert s["gputopo"]["bottleneck_gbps"]["min"] >= s["default"]["bottleneck_gbps"]["min"]
    for name in ("summary.json", "summary.md", "details.json", "workload.json"):
        assert (tmp_path / name).stat().st_size > 0
    rows = list(csv.DictReader((tmp_path / "jobs-gputopo.csv").open()))
    assert len(rows) == 40 and {r["in_one_rack"] for r in rows} <= {"True", "False"}
    replay = load_multinode_workload(str(tmp_path / "workload.json"))
    assert replay.jobs == load_multinode_workload(SMALL, seed=1).jobs


def test_default_deadlocks_two_gangs_and_gputopo_does_not(tmp_path: Path) -> None:
    """Two 2-node gangs submitted together on two nodes: pod by pod, each gets one node and
    waits for the other's — a deadlock; both rendezvous time out together, the younger gives
    way first and the older completes with its GPUs."""
    spec = write(tmp_path, {
        "cluster": {"machine": "dgx1-v100", "blocks": 1, "racks": 1, "nodes": 2},
        "jobs": [{"id": "a", "pods": 2, "gpus": 8, "network": "vgg16"},
                 {"id": "b", "pods": 2, "gpus": 8, "network": "vgg16"}]})
    results, s = simulate_multinode(spec, ["default", "gang", "gputopo"])
    default = {x.job.id: x for x in results[0].records}
    assert s["default"]["partial"]["deadlocks"] == 1 and s["default"]["partial"]["gangs"] == 2
    assert s["default"]["partial"]["timeouts"] == 1  # b gives way; a completes with its GPUs
    assert default["a"].start_s == pytest.approx(RENDEZVOUS_TIMEOUT_S)
    assert default["b"].evictions == 1 and default["b"].start_s >= default["a"].end_s
    assert s["gang"]["makespan_s"] < s["default"]["makespan_s"]
    assert s["gputopo"]["partial"]["deadlocks"] == 0


def test_gputopo_postpones_a_sensitive_single_pod_job_and_judges_by_any_model(
        tmp_path: Path) -> None:
    """Issue 24's case on one DGX-1 V100, as the planner admits it: a 5-GPU sensitive ring
    takes {0,2,3,4,7}; a 3-GPU sensitive ring arriving next would get {1,5,6} (52 % of its
    ideal by Eq. 2, 48 % by the bottleneck), so it waits for the ring to end (within the
    1 800 s bound); with a 300 s bound it takes {1,5,6} when the bound ends, and at once with
    ``postpone_max_s=0`` or when insensitive."""
    def run(b: dict, **kw: object) -> dict:
        spec = write(tmp_path, {
            "cluster": {"machine": "dgx1-v100", "blocks": 1, "racks": 1, "nodes": 1},
            "jobs": [{"id": "a", "gpus": 5, "network": "vgg16", "runtime_s": 600},
                     {"id": "b", "arrival_s": 1, "gpus": 3, "network": "vgg16",
                      "runtime_s": 100, **b}]})
        result = MultiSimulation(load_multinode_workload(spec), "gputopo", **kw).run()
        return {x.job.id: x for x in result.records}

    r = run({})
    assert r["a"].gpus == ((0, 2, 3, 4, 7),)
    assert r["b"].start_s == pytest.approx(r["a"].end_s)
    assert r["b"].intra_gbps == pytest.approx(r["b"].ideal_gbps)  # an idle node's best
    for b, kw, start in (({}, {"postpone_max_s": 0}, 1), ({"sensitive": False}, {}, 1),
                         ({}, {"postpone_max_s": 300}, 301)):
        early = run(b, **kw)["b"]
        assert early.start_s == pytest.approx(start) and early.gpus == ((1, 5, 6),)
    # the judge prices the pod's set: the bottleneck of the best ring on {1,5,6}
    topo = load_topology("dgx1-v100")
    for judge in ("bottleneck", "eq2"):
        early = run({}, postpone_max_s=0, judge=judge)["b"]
        model = judge_name(judge)
        assert early.intra_gbps == pytest.approx(judge_effbw(topo, ring(3), (1, 5, 6), model))
        assert early.ideal_gbps == pytest.approx(ideal_effbw(topo, ring(3), model, Memo()))
        assert early.factor > 1.0
    with pytest.raises(SimulationError, match="unknown EffBW model"):
        run({}, judge="fastest")


def test_the_postponement_bound_counts_from_the_first_postponement(tmp_path: Path) -> None:
    """As the planner's: a 3-GPU sensitive ring that first queues for lack of GPUs (an
    insensitive job holds {1,5,6}, for 286 s on that set) is postponed from when they free,
    not from its arrival, so with a 300 s bound it takes {1,5,6} 300 s later, before the
    5-GPU ring ends."""
    spec = write(tmp_path, {
        "cluster": {"machine": "dgx1-v100", "blocks": 1, "racks": 1, "nodes": 1},
        "jobs": [{"id": "a", "gpus": 5, "network": "vgg16", "runtime_s": 600},
                 {"id": "x", "gpus": 3, "network": "vgg16", "runtime_s": 200,
                  "sensitive": False},
                 {"id": "b", "arrival_s": 1, "gpus": 3, "network": "vgg16", "runtime_s": 100}]})
    result = MultiSimulation(load_multinode_workload(spec), "gputopo", postpone_max_s=300).run()
    r = {x.job.id: x for x in result.records}
    assert r["x"].gpus == ((1, 5, 6),) and r["x"].end_s > 200
    assert r["b"].start_s == pytest.approx(r["x"].end_s + 300) and r["b"].gpus == ((1, 5, 6),)
    assert r["b"].start_s < r["a"].end_s


def test_bad_input(tmp_path: Path) -> None:
    with pytest.raises(SimulationError, match="multi-node policies are"):
        simulate_multinode(SMALL, ["fifo"])
    with pytest.raises(SimulationError, match="unknown parameter"):
        load_multinode_workload("hierarchy:colour=red")
    too_big = write(tmp_path, {"cluster": {"blocks": 1, "racks": 1, "nodes": 2},
                               "jobs": [{"pods": 3, "gpus": 8, "network": "vgg16"}]})
    with pytest.raises(SimulationError, match="even an idle cluster cannot hold it"):
        MultiSimulation(load_multinode_workload(too_big), "gputopo")
    level = write(tmp_path, {"cluster": {"blocks": 1, "racks": 1, "nodes": 2},
                             "jobs": [{"pods": 2, "gpus": 8, "network": "vgg16",
                                       "required": "zone"}]})
    with pytest.raises(SimulationError, match="no topology level 'zone'"):
        MultiSimulation(load_multinode_workload(level), "kueue-tas")
    for doc, message in (({"jobs": [{"pods": 0, "gpus": 8, "network": "vgg16"}]}, ">= 1"),
                         ({"jobs": [{"gpus": 8, "pods": 2, "colour": 1}]}, "unknown field"),
                         ({"cluster": {"cliques": "x", "racks": 1},
                           "jobs": [{"gpus": 1, "network": "vgg16"}]}, "cliques")):
        with pytest.raises(SimulationError, match=message):
            load_multinode_workload(write(tmp_path, doc))


def test_cli_runs_a_multinode_workload(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["simulate", "-w", "hierarchy:jobs=12,blocks=1,racks=2,nodes=2",
                                 "-p", "kueue-tas,gputopo", "-o", str(tmp_path), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert "| gputopo |" in r.stdout and "rack-fitting gangs in one rack" in r.stdout
    bad = CliRunner().invoke(app, ["simulate", "-w", "hierarchy", "-p", "baseline", "-o",
                                   str(tmp_path)])
    assert bad.exit_code == 2 and "multi-node policies are" in bad.output
