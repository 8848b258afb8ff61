"""The simulator's many-seed mode: per-seed ratios against NVIDIA best-effort under several
judges (issue 24)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gputopo_cli.main import app
from simulator import SimulationError
from simulator.many import many_seeds, parse_seeds, table
from simulator.run import simulate
from simulator.runtime import JUDGE_ALIASES, judge_name


def test_parse_seeds() -> None:
    assert parse_seeds("0-3") == [0, 1, 2, 3]
    assert parse_seeds("5, 1,1, 2-3") == [5, 1, 2, 3]
    for bad in ("", "x", "3-1", "1-x"):
        with pytest.raises(SimulationError):
            parse_seeds(bad)


def test_judges_and_aliases() -> None:
    assert judge_name("eq2") == "mapa-eq2" == JUDGE_ALIASES["eq2"]
    assert judge_name("bottleneck") == "bottleneck"
    with pytest.raises(ValueError, match="unknown EffBW model"):
        judge_name("eq9")


def test_per_seed_ratios_against_the_reference() -> None:
    doc = many_seeds("dgx1-v100", "mapa:jobs=14", "nvidia-best-effort,gputopo", [1, 2],
                     judges=["eq2", "bottleneck"])
    assert doc["reference"] == "nvidia-best-effort" and doc["policies"] == ["gputopo"]
    assert doc["judges"] == ["mapa-eq2", "bottleneck"] and len(doc["per_seed"]) == 4
    for row in doc["per_seed"]:
        # each seed is one simulate() run: the same numbers, the ratios taken from them
        runs, summ = simulate("dgx1-v100", "mapa:jobs=14", ["nvidia-best-effort", "gputopo"],
                              seed=row["seed"], judge=row["judge"], make_plots=False)
        ref, got = row["reference"], row["gputopo"]
        assert got["makespan_s"] == pytest.approx(summ["gputopo"]["makespan_s"], abs=0.1)
        assert got["effbw_ratio_delta"] == pytest.approx(
            got["mean_effbw_ratio"] - ref["mean_effbw_ratio"], abs=2e-4)
        assert got["makespan_ratio"] == pytest.approx(got["makespan_s"] / ref["makespan_s"],
                                                      abs=2e-4)
    s = doc["summary"]["bottleneck"]["gputopo"]
    deltas = [r["gputopo"]["effbw_ratio_delta"] for r in doc["per_seed"]
              if r["judge"] == "bottleneck"]
    assert s["effbw_ratio_delta"]["min"] == min(deltas)
    assert s["seeds_behind_effbw"] == sum(d < 0 for d in deltas) and s["seeds"] == 2
    assert s["worst_seed_effbw"] == doc["per_seed"][2 + deltas.index(min(deltas))]["seed"]
    assert "| bottleneck | gputopo |" in table(doc)


def test_many_seed_needs_a_policy_besides_the_reference() -> None:
    with pytest.raises(SimulationError, match="besides the reference"):
        many_seeds("dgx1-v100", "mapa:jobs=5", "nvidia-best-effort", [1])
    with pytest.raises(SimulationError, match="unknown EffBW model"):
        many_seeds("dgx1-v100", "mapa:jobs=5", "gputopo", [1], judges=["eq9"])


def test_cli_many_seed_mode(tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["simulate", "-t", "dgx1-v100", "-w", "mapa:jobs=8", "-p",
                            "gputopo", "--seeds", "1-2", "--judge", "eq2,bottleneck",
                            "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "many.json").read_text())
    assert doc["seeds"] == [1, 2] and set(doc["summary"]) == {"mapa-eq2", "bottleneck"}
    assert "| mapa-eq2 | gputopo |" in (tmp_path / "many.md").read_text()
    bad = runner.invoke(app, ["simulate", "-t", "dgx1-v100", "-w", "mapa:jobs=8", "-p",
                              "gputopo", "--seeds", "nine", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "bad --seeds" in bad.output


def test_cli_postpone_max_s(tmp_path: Path) -> None:
    """``--postpone-max-s``: 0 turns the default policy's postponement off (seed 16 of MAPA's
    stream postpones some job with it on); a negative bound is a one-line error."""
    runner = CliRunner()
    args = ["simulate", "-t", "dgx1-v100", "-w", "mapa:jobs=150", "--seed", "16", "-p",
            "gputopo", "--judge", "eq2", "--no-plots"]
    postponed = []
    for bound in ("1800", "0"):
        out = tmp_path / bound
        r = runner.invoke(app, [*args, "--postpone-max-s", bound, "--out", str(out)])
        assert r.exit_code == 0, r.output
        rows = (out / "jobs-gputopo.csv").read_text().splitlines()
        col = rows[0].split(",").index("postponements")
        postponed.append(sum(int(x.split(",")[col]) > 0 for x in rows[1:]))
    assert postponed[0] > 0 and postponed[1] == 0
    bad = runner.invoke(app, [*args, "--postpone-max-s", "-1", "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "postpone-max-s must not be negative" in bad.output
