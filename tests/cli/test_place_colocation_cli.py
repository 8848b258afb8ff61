"""``gputopo place --shared``: a co-location decision explained (residents, ΣC, δ, runner-up)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gputopo_cli.main import app

runner = CliRunner()


def run(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args))


def test_table_explains_the_co_location() -> None:
    r = run("place", "-t", "dgx1-v100", "--shared", "--profile", "resnet18:64",
            "--residents", "0=vgg19:64+vgg11:64,1=resnet50:256", "--used", "2,3")
    assert r.exit_code == 0, r.output
    out = r.stdout
    for label in ("residents", "sum of C", "predicted delta", "runner-up", "why"):
        assert label in out
    assert "gpu0-job0 (vgg19:64), gpu0-job1 (vgg11:64)" in out
    assert "tier 1" in out


def test_json_and_algorithm2() -> None:
    r = run("place", "-t", "dgx1-v100", "--shared", "--profile", "vgg11:64", "--residents",
            "0=vgg19:64", "--policy", "colocate", "-o", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    c = doc["colocation"]
    assert doc["gpus"] == [1] and c["chosen"]["residents"] == []  # an idle GPU: ΣC = 0
    assert c["runner_up"]["gpu"] == 2 and c["threshold"] == 4e7


def test_explicit_numbers_and_no_fit() -> None:
    r = run("place", "-t", "v100-1gpu", "--shared", "--kernel-occupancy", "3.5e7",
            "--mem-bandwidth-util", "2e7", "--iteration-ms", "100", "--residents",
            "0=resnet18:256", "--policy", "colocate")
    assert r.exit_code == 1 and "threshold" in r.output
    r = run("place", "-t", "v100-1gpu", "--shared", "--profile", "se_resnet18:256",
            "--residents", "0=resnet50:128", "--policy", "colocate")
    assert r.exit_code == 1 and "δ" in r.output


def test_own_catalog_and_settings(tmp_path: Path) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text("apiVersion: gputopo.io/v1\nkind: ColocationProfiles\nmetadata: {name: m}\n"
                 "profiles:\n  bert:32: {iteration_s: 0.2, kernel_occupancy: 2e6, "
                 "mem_bandwidth_util: 1e6, gpu_memory_mib: 5000}\n")
    r = run("place", "-t", "v100-1gpu", "--shared", "--profile", "bert:32", "--profiles",
            str(f), "-o", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["colocation"]["memory_mib"] == 5000
    r = run("place", "-t", "v100-1gpu", "--shared", "--profile", "vgg11:64", "--residents",
            "0=vgg11:64", "--slots", "1")
    assert r.exit_code == 1 and "all 1 slots taken" in r.output


def test_bad_input_exits_2_with_one_line() -> None:
    cases = [
        ("--shared", "--gpus", "2"),
        ("--shared", "--pattern", "ring"),
        ("--profile", "resnet18:64", "--gpus", "1"),
        ("--shared", "--profile", "resnet18"),
        ("--shared", "--residents", "0=nope:1"),
        ("--shared", "--residents", "9=vgg11:64"),
        ("--shared", "--residents", "zero"),
        ("--shared", "--residents", "0=vgg11:64", "--used", "0"),
        ("--shared", "--kernel-occupancy", "1e6"),
        ("--shared", "--profiles", "/nonexistent.yaml"),
        (),
    ]
    for extra in cases:
        r = run("place", "-t", "dgx1-v100", *extra)
        assert r.exit_code == 2, (extra, r.output)
        assert r.output.count("\n") == 1 and r.output.startswith("gputopo: error:"), extra
