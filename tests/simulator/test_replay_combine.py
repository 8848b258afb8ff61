"""The replay benchmark's repeated pairs: a row is each stack's mean over its runs."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.bench_replay import combine, main


def pair(default_s: float, gputopo_s: float, d_eff: float, g_eff: float,
         seed: int = 1) -> dict[str, Any]:
    def summary(stack: str, makespan: float, eff: float) -> dict[str, Any]:
        return {"stack": stack, "judge": "mapa-eq2", "jobs": 150, "makespan_s": makespan,
                "mean_sensitive_effbw_ratio": eff, "min_sensitive_effbw_ratio": None}
    return {"seed": seed, "judge": "mapa-eq2", "default": summary("default", default_s, d_eff),
            "gputopo": summary("gputopo", gputopo_s, g_eff),
            "makespan_ratio": round(gputopo_s / default_s, 4),
            "effbw_ratio_delta": round(g_eff - d_eff, 4)}


def test_a_row_is_the_ratio_of_each_stacks_mean_not_the_mean_of_ratios() -> None:
    runs = [pair(1000, 1100, 0.80, 0.85), pair(1200, 1000, 0.82, 0.86)]
    row = combine(runs)
    assert row["default"]["makespan_s"] == 1100 and row["gputopo"]["makespan_s"] == 1050
    assert row["makespan_ratio"] == pytest.approx(1050 / 1100, abs=1e-4)  # not (1.1+0.833)/2
    assert row["effbw_ratio_delta"] == pytest.approx(0.045, abs=1e-4)
    assert row["makespan_ratio_per_pair"] == [1.1, 0.8333]
    assert row["runs"] == runs and row["gputopo"]["runs"] == 2
    assert row["default"]["min_sensitive_effbw_ratio"] is None  # absent in every run
    assert combine(runs[:1]) == runs[0]  # one pair is its own row


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="no run"):
        combine([])
    with pytest.raises(ValueError, match="different seeds"):
        combine([pair(1, 1, 0.5, 0.5, seed=1), pair(1, 1, 0.5, 0.5, seed=2)])
    with pytest.raises(SystemExit) as exc:
        main(["--repeats", "0"])
    assert exc.value.code == 2
