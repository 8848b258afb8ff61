"""The planner in the simulator: ANDREAS' ARMIDA validation and §V-B scenarios (reduced),
outputs, workload files and the CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gputopo_cli.main import app
from simulator import SimulationError
from simulator.planning_engine import PlanningResult, PlanningSimulation
from simulator.planning_run import simulate_planning
from simulator.planning_workloads import load_planning_workload, scenario
from topology import catalog
from topology.planning.andreas import PlannerSettings
from topology.planning.baselines import METHODS

SUMMARY_KEYS = {"energy_cost_eur", "tardiness_cost_eur", "total_cost_eur", "energy_floor_eur",
                "makespan_s", "plan_ms"}
POLICIES = ["fifo", "edf", "ps", "andreas"]


def test_table_ii_machines_are_in_the_catalog() -> None:
    """ANDREAS Table II: V100-PCIE 32GB nodes with 1 and 2 GPUs and a T4 node."""
    for name, count, model, mib in [("v100-pcie-1", 1, "Tesla V100-PCIE-32GB", 32510),
                                    ("v100-pcie-2", 2, "Tesla V100-PCIE-32GB", 32510),
                                    ("v100-pcie-4", 4, "Tesla V100-PCIE-32GB", 32510),
                                    ("t4-1", 1, "Tesla T4", 15360), ("t4-2", 2, "Tesla T4", 15360)]:
        topo = catalog.get(name)
        assert topo.size == count
        assert {g.name for g in topo.gpus} == {model}
        assert {g.memory_mib for g in topo.gpus} == {mib}
        assert all(topo.nvlinks(a, b) == 0 for a in range(count) for b in range(count) if a != b)


def test_armida_workload_is_table_v() -> None:
    w = load_planning_workload("andreas-armida")
    assert [n.name for n in w.cluster or ()] == ["armida-05", "armida-06", "armida-07"]
    assert [(n.gpu_model, n.gpus) for n in w.cluster or ()] == [
        ("v100-pcie-32gb", 1), ("v100-pcie-32gb", 2), ("t4", 1)]
    rows = {j.id: (j.epochs, j.arrival_s, j.due_s - j.arrival_s, j.tardiness_weight)
            for j in w.jobs}
    assert rows == {  # Table V: epochs, S_j, d_j (from submission), ω_j
        "J6": (80, 0, 3600, 4), "J9": (160, 1200, 2600, 2), "J10": (80, 2400, 7600, 3),
        "J7": (160, 3600, 17600, 3), "J8": (160, 4800, 7600, 3), "J1": (60, 6000, 5600, 5),
        "J2": (60, 7200, 12600, 2), "J3": (60, 8400, 11600, 1)}
    assert [n.name for n in load_planning_workload("andreas-armida:nodes=4").cluster or ()][0] \
        == "armida-04"


def test_armida_every_job_meets_its_due_date(tmp_path: Path) -> None:
    """Appendix B: with ANDREAS every job met its due date; the predicted energy cost is in
    the range of the paper's (1.08 EUR predicted, 0.95 EUR measured, Table III)."""
    results, summary = simulate_planning("andreas-armida", POLICIES, out=tmp_path, seed=1)
    assert list(summary) == POLICIES
    for entry in summary.values():
        assert set(entry) == SUMMARY_KEYS
        assert set(entry["plan_ms"]) == {"p50", "p99"}
        assert entry["total_cost_eur"] == pytest.approx(entry["energy_cost_eur"]
                                                        + entry["tardiness_cost_eur"])
    floor = load_planning_workload("andreas-armida").energy_floor_eur()
    assert all(e["energy_floor_eur"] == pytest.approx(floor) for e in summary.values())
    assert all(e["energy_cost_eur"] > e["energy_floor_eur"] for e in summary.values())
    ours = next(r for r in results if r.policy == "andreas")
    assert all(o.end_s <= o.job.due_s for o in ours.outcomes)
    assert summary["andreas"]["tardiness_cost_eur"] == 0
    assert 0.5 < summary["andreas"]["energy_cost_eur"] < 1.5
    # preemption happens, and a preempted job has several segments that add up to its epochs
    preempted = [o for o in ours.outcomes if o.preemptions]
    assert preempted
    with (tmp_path / "segments-andreas.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["job", "node", "gpu_model", "gpus", "start_s", "end_s",
                             "epochs_done"]
    for o in ours.outcomes:
        mine = [r for r in rows if r["job"] == o.job.id]
        assert len(mine) == len(o.segments)
        assert sum(int(r["epochs_done"]) for r in mine) == o.job.epochs
    for name in ("summary.md", "details.json", "workload.json", "costs.png",
                 "gantt-andreas.png", "jobs-fifo.csv"):
        assert (tmp_path / name).stat().st_size > 0
    assert "andreas saves" in (tmp_path / "summary.md").read_text()


def test_energy_is_accounted_per_node() -> None:
    """One job alone: energy = its run time x c_ng of its configuration."""
    w = load_planning_workload("andreas-armida")
    one = type(w)(w.name, w.jobs[:1], w.cluster, w.power)
    r = PlanningSimulation(one, "fifo").run()
    seg = r.segments[0]
    c = PlannerSettings().price.eur_per_hour(w.power_for(seg.gpu_model).watts(seg.gpus))
    assert r.energy_cost_eur == pytest.approx((seg.end_s - seg.start_s) / 3600 * c)
    assert r.tardiness_cost_eur == 0


def test_baselines_never_reconfigure_a_started_job() -> None:
    w = scenario(1, 4, seed=3, jobs=40)
    for policy in METHODS:
        r = PlanningSimulation(w, policy).run()
        assert all(len(o.segments) == 1 for o in r.outcomes), policy


def test_first_principle_baselines_spend_more_gpus_per_job() -> None:
    """``-fastest`` gives a job the most GPUs that speed it up: on §V-B's second scenario it
    runs jobs on more GPUs, and so draws more energy, than Algorithm 1's rule."""
    w = scenario(2, 4, seed=1, jobs=40)
    rule, fastest = (PlanningSimulation(w, p).run() for p in ("edf", "edf-fastest"))

    def mean_gpus(r: PlanningResult) -> float:
        return sum(s.gpus for s in r.segments) / len(r.segments)

    assert mean_gpus(fastest) > mean_gpus(rule)
    assert fastest.energy_cost_eur > rule.energy_cost_eur


def test_scenarios_reduced(tmp_path: Path) -> None:
    """§V-B at a reduced size: every policy finishes every job; the same seed replays the
    same workload (workload.json) with the same costs."""
    results, summary = simulate_planning("andreas-s1", POLICIES, nodes=4, seed=2,
                                         out=tmp_path, make_plots=False,
                                         settings=PlannerSettings(max_iterations=50, seed=2))
    assert all(len(r.outcomes) == 40 for r in results)
    w = load_planning_workload("andreas-s1", seed=2, nodes=4)
    assert sum(1 for n in w.cluster or () if n.gpu_model == "t4") == 2
    replay, again = simulate_planning(str(tmp_path / "workload.json"), POLICIES, seed=2,
                                      make_plots=False,
                                      settings=PlannerSettings(max_iterations=50, seed=2))
    def costs(doc: dict) -> dict:  # plan_ms is wall-clock time
        return {p: {k: v for k, v in e.items() if k != "plan_ms"} for p, e in doc.items()}

    assert costs(again) == costs(summary)
    s2 = load_planning_workload("andreas-s2", seed=2, nodes=4)
    assert {(n.gpu_model, n.gpus) for n in s2.cluster or ()} == {("v100-pcie-32gb", 4),
                                                                  ("t4", 2)}
    # same load relative to capacity: s2 (twice the GPUs) sees jobs twice as often
    assert s2.params["mean_rate_per_h"] == pytest.approx(2 * w.params["mean_rate_per_h"], rel=1e-3)


def test_workload_file_with_topology(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(
        "jobs:\n"
        "  - {id: a, arrival_s: 0, due_s: 500, tardiness_weight: 2, epochs: 10,\n"
        "     epoch_time_s: {'v100-pcie-32gb:1': 30, 'v100-pcie-32gb:2': 20}}\n"
        "  - {id: b, arrival_s: 10, due_s: 5000, tardiness_weight: 1, epochs: 20,\n"
        "     profile: convnet}\n")
    results, summary = simulate_planning(str(path), ["fifo", "andreas"], topology="v100-pcie-2",
                                         nodes=1)
    assert summary["andreas"]["tardiness_cost_eur"] == 0
    assert results[0].cluster[0].name == "v100-pcie-2-0"
    with pytest.raises(SimulationError, match="no cluster"):
        simulate_planning(str(path), ["fifo"])


@pytest.mark.parametrize("spec, message", [
    ("andreas-s1:bogus=1", "unknown parameter"),
    ("andreas-armida:nodes=7", "nodes must be 3"),
])
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(SimulationError, match=message):
        simulate_planning(spec, ["fifo"])


def test_bad_workload_files(tmp_path: Path) -> None:
    cases = {
        "no due": "jobs: [{id: a, epochs: 3, tardiness_weight: 1, epoch_time_s: {'t4:1': 1}}]",
        "no profile": "jobs: [{id: a, epochs: 3, due_s: 1, tardiness_weight: 1}]",
        "bad key": "jobs: [{id: a, epochs: 3, due_s: 1, tardiness_weight: 1, "
                   "epoch_time_s: {'t4': 1}}]",
        "weight": "jobs: [{id: a, epochs: 3, due_s: 1, tardiness_weight: 0, profile: convnet}]",
        "unknown": "jobs: [{id: a, epochs: 3, due_s: 1, tardiness_weight: 1, gpus: 2, "
                   "profile: convnet}]",
        "machine": "cluster: [{name: x, machine: no-such}]\n"
                   "jobs: [{id: a, epochs: 3, due_s: 1, tardiness_weight: 1, profile: convnet}]",
        "nobody": "cluster: [{name: x, machine: dgx1-v100}]\n"
                  "jobs: [{id: a, epochs: 3, due_s: 1, tardiness_weight: 1, profile: convnet}]",
    }
    for label, text in cases.items():
        path = tmp_path / f"{label.replace(' ', '_')}.yaml"
        path.write_text(text)
        with pytest.raises(SimulationError):
            simulate_planning(str(path), ["fifo"], topology=None if "cluster" in text
                              else "t4-1")


def test_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "arm"
    res = runner.invoke(app, ["simulate", "--workload", "andreas-armida", "--policies",
                              "fifo,andreas", "--out", str(out), "--no-plots",
                              "--planner-iterations", "100"])
    assert res.exit_code == 0, res.output
    assert "andreas saves" in res.output
    assert json.loads((out / "summary.json").read_text())["andreas"]["tardiness_cost_eur"] == 0
    for args, message in [
        (["--policies", "gputopo"], "unknown planning policy"),
        (["--policies", "andreas", "--planner-iterations", "0"], "max_iterations"),
        (["--policies", "andreas", "--topology", "dgx1-v100"], "drop --topology"),
    ]:
        bad = runner.invoke(app, ["simulate", "--workload", "andreas-armida", "--out",
                                  str(out), *args])
        assert bad.exit_code == 2, bad.output
        assert message in bad.output
    # placement workloads still need a topology
    bad = runner.invoke(app, ["simulate", "--workload", "mapa", "--policies", "gputopo",
                              "--out", str(out)])
    assert bad.exit_code == 2 and "--topology is required" in bad.output


def test_simulator_energy_equals_the_node_level_integral_of_its_segments() -> None:
    """The engine's running energy sum and :func:`node_energy_eur` over its segments agree:
    the simulator and the Kubernetes planner price runs the same way."""
    from topology.planning.energy import EnergyPrice, node_energy_eur

    w = load_planning_workload("andreas-armida")
    r = PlanningSimulation(w, "andreas", settings=PlannerSettings(max_iterations=50)).run()
    power = {n.name: w.power_for(n.gpu_model) for n in w.cluster or ()}
    segs = [(s.node, s.gpus, s.start_s, s.end_s) for s in r.segments]
    assert node_energy_eur(segs, power, EnergyPrice()) == pytest.approx(r.energy_cost_eur)


def test_energy_floor_hand_computed_and_below_every_policy() -> None:
    """One job of 20 epochs on ARMIDA's nodes: the floor is its cheapest configuration charged
    a fully busy node's per-GPU cost; on §V-B's scenarios no policy spends less energy."""
    w = load_planning_workload("andreas-armida")
    one = type(w)(w.name, w.jobs[:1], w.cluster, w.power)
    job = one.jobs[0]
    price = PlannerSettings().price
    expected = min(
        job.epochs * job.epoch_time_s[(n.gpu_model, g)] * g
        * price.eur_per_hour(one.power_for(n.gpu_model).watts(n.gpus)) / n.gpus / 3600
        for n in one.cluster or () for g in range(1, n.gpus + 1)
        if (n.gpu_model, g) in job.epoch_time_s)
    assert one.energy_floor_eur() == pytest.approx(expected)
    # alone, the job pays its node's whole idle power: strictly more than the floor
    assert one.energy_floor_eur() < PlanningSimulation(one, "fifo").run().energy_cost_eur
    for case in (1, 2):
        s = scenario(case, 4, seed=5, jobs=30)
        floor = s.energy_floor_eur()
        for policy in ("edf", "edf-fastest", "andreas"):
            assert floor <= PlanningSimulation(
                s, policy, settings=PlannerSettings(max_iterations=20)).run().energy_cost_eur


def test_energy_floor_needs_a_cluster() -> None:
    w = load_planning_workload("andreas-armida")
    with pytest.raises(SimulationError, match="no cluster"):
        type(w)(w.name, w.jobs, None, w.power).energy_floor_eur()
