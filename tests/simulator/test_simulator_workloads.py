"""Workload generators and files."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from simulator import SimulationError
from simulator.workloads import (
    MAPA_NETWORKS,
    amaral_comm_share,
    amaral_prototype,
    load_workload,
)


def test_mapa_trace_follows_section_4() -> None:
    w = load_workload("mapa", seed=3)
    assert len(w.jobs) == 300 and not w.interference
    assert {j.gpus for j in w.jobs} == {1, 2, 3, 4, 5}
    nets = Counter(j.network for j in w.jobs)
    assert set(nets) == set(MAPA_NETWORKS) and min(nets.values()) > 25  # uniform mix
    for j in w.jobs:
        assert j.pattern == "ring" and j.arrival_s == 0.0
        assert j.sensitive == (j.network in {"alexnet", "inception-v3", "vgg16", "resnet50"})
    assert load_workload("mapa", seed=3) == w
    assert load_workload("mapa", seed=4) != w


def test_mapa_parameters() -> None:
    w = load_workload("mapa:jobs=40,arrival=poisson,rate=6", seed=1)
    assert len(w.jobs) == 40
    arrivals = [j.arrival_s for j in w.jobs]
    assert arrivals == sorted(arrivals) and arrivals[-1] > 0
    with pytest.raises(SimulationError, match="unknown parameter.*speed"):
        load_workload("mapa:speed=3")
    with pytest.raises(SimulationError, match="not a number"):
        load_workload("mapa:jobs=many")
    with pytest.raises(SimulationError, match="key=value"):
        load_workload("mapa:jobs")


def test_amaral_generators() -> None:
    s1 = load_workload("amaral-s1", seed=2)
    assert len(s1.jobs) == 100 and s1.interference and s1.default_nodes == 5
    assert {j.gpus for j in s1.jobs} <= {1, 2, 3, 4}
    assert {j.profile.split("/")[0] for j in s1.jobs} <= {"alexnet", "cafferef", "googlenet"}
    assert all(j.min_utility == (0.3 if j.gpus == 1 else 0.5) for j in s1.jobs)
    # λ = 10 jobs/min: 100 jobs arrive in about 10 minutes
    assert 300 < s1.jobs[-1].arrival_s < 1000
    s2 = load_workload("amaral-s2:jobs=2000", seed=2, nodes=100)
    assert s2.params["rate_per_min"] == 200.0  # s1's load per machine
    assert load_workload("amaral-s2:jobs=10,rate=10", nodes=100).params["rate_per_min"] == 10.0


def test_amaral_prototype_is_table1() -> None:
    w = amaral_prototype()
    assert [(j.id, j.gpus, j.min_utility) for j in w.jobs] == [
        (0, 1, 0.3), (1, 1, 0.3), (2, 1, 0.3), (3, 2, 0.5), (4, 2, 0.5), (5, 2, 0.5)]
    assert [j.arrival_s for j in w.jobs] == [0.51, 15.03, 24.36, 25.33, 29.33, 29.89]
    assert w.jobs[1].profile == "googlenet/small" and w.jobs[5].profile == "cafferef/tiny"
    # Fig. 4: a tiny-batch AlexNet packs 1.3x faster: share (1.3 - 1) / (40/12 - 1)
    assert amaral_comm_share("alexnet", "tiny") == pytest.approx(0.3 / (40 / 12 - 1), abs=1e-4)


def test_workload_json_round_trip(tmp_path: Path) -> None:
    w = load_workload("mapa:jobs=12", seed=5)
    f = tmp_path / "w.json"
    f.write_text(json.dumps(w.to_json()))
    back = load_workload(str(f))
    assert back.jobs == w.jobs


def test_csv_and_yaml_files(tmp_path: Path) -> None:
    f = tmp_path / "jobs.csv"
    f.write_text("arrival_s,gpus,network,runtime_s,pattern,sensitive\n"
                 "0,2,vgg16,,ring,\n"
                 "5,4,lammps,120,all-to-all,true\n")
    w = load_workload(str(f))
    assert [j.gpus for j in w.jobs] == [2, 4]
    assert w.jobs[0].runtime_s == MAPA_NETWORKS["vgg16"].base_s and w.jobs[0].sensitive
    assert w.jobs[1].comm_share == 0.5 and w.jobs[1].runtime_s == 120
    y = tmp_path / "w.yaml"
    y.write_text("interference: true\njobs:\n  - {gpus: 1, network: alexnet, batch: tiny}\n")
    assert load_workload(str(y)).jobs[0].profile == "alexnet/tiny"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{}", "needs a 'jobs' list"),
        ('{"jobs": []}', "no jobs"),
        ('{"jobs": [{"gpus": 0.5, "runtime_s": 1}]}', "fractional requests are not simulated"),
        ('{"jobs": [{"gpus": 2, "network": "lammps"}]}', "give runtime_s"),
        ('{"jobs": [{"gpus": 2, "runtime_s": 5, "pattern": "0-7"}]}', "pattern"),
        ('{"jobs": [{"gpus": 2, "runtime_s": 5, "colour": "red"}]}', "unknown field"),
        ('{"jobs": [{"gpus": 1, "runtime_s": 5, "min_utility": 3}]}', r"\[0, 1\]"),
        ('{"jobs": [{"id": 1, "gpus": 1, "runtime_s": 5}, {"id": 1, "gpus": 1, '
         '"runtime_s": 5}]}', "duplicate job ids"),
        ("{not json", "malformed"),
    ],
)
def test_bad_files(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "w.json"
    f.write_text(content)
    with pytest.raises(SimulationError, match=message):
        load_workload(str(f))


def test_unknown_workload() -> None:
    with pytest.raises(SimulationError, match="unknown workload 'philly'"):
        load_workload("philly")
    with pytest.raises(SimulationError, match="not found"):
        load_workload("/nonexistent/w.json")
    with pytest.raises(SimulationError, match="not a regular file"):
        load_workload("/tmp")


def test_named_ids_are_kept_everywhere(tmp_path: Path) -> None:
    """The docs say only that ids are unique: names are ids too, and every output keeps them
    (a newcomer's ``"id": "bert-a"`` used to be refused as "not a number")."""
    import csv

    from simulator.run import simulate

    f = tmp_path / "named.json"
    f.write_text(json.dumps({"jobs": [
        {"id": "bert-a", "gpus": 2, "network": "vgg16"},
        {"id": 7, "gpus": 1, "network": "caffenet"},
        {"id": "bert-b", "gpus": 4, "network": "resnet50", "arrival_s": 0},
        {"id": "3", "gpus": 1, "network": "googlenet"},  # a number written as text (CSV)
    ]}))
    w = load_workload(str(f))
    # equal arrivals: numbers first in numeric order, then names in text order
    assert [j.id for j in w.jobs] == [3, 7, "bert-a", "bert-b"]
    out = tmp_path / "out"
    simulate("dgx1-v100", w, ["gputopo"], nodes=1, out=out, make_plots=False)
    rows = list(csv.DictReader((out / "jobs-gputopo.csv").open()))
    assert [r["job"] for r in rows] == ["3", "7", "bert-a", "bert-b"]
    saved = json.loads((out / "workload.json").read_text())
    assert [j["id"] for j in saved["jobs"]] == [3, 7, "bert-a", "bert-b"]
    assert load_workload(str(out / "workload.json")).jobs == w.jobs  # replays exactly


@pytest.mark.parametrize(("value", "message"), [
    ("true", "must be a number or a name"), ('""', "id is empty"), ("1.5", "whole number"),
    ("[1]", "must be a number or a name"),
])
def test_bad_ids(tmp_path: Path, value: str, message: str) -> None:
    f = tmp_path / "w.json"
    f.write_text(f'{{"jobs": [{{"id": {value}, "gpus": 1, "runtime_s": 5}}]}}')
    with pytest.raises(SimulationError, match=message):
        load_workload(str(f))
