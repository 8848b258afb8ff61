"""``gputopo cluster-demo``: bad flags exit 2 with one line, before anything starts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gputopo_cli.main import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pods", "0"], "--pods must be between 1 and 500"),
        (["--pods", "501"], "--pods must be between 1 and 500"),
        (["--timeout", "0"], "--timeout must be between 1 and 3600"),
        (["--nodes", "dgx9000:2"], "dgx9000"),
        (["--nodes", "dgx1-v100:x"], "bad node count"),
        (["--nodes", "dgx1-v100:1000000000"], "names more than 10000 nodes"),
        (["--policy", "fastest"], "fastest"),
        (["--frobnicate"], "unexpected argument '--frobnicate'"),
        (["extra"], "unexpected argument 'extra'"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args: list[str], message: str) -> None:
    r = runner.invoke(app, ["cluster-demo", *args])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_help_names_the_steps() -> None:
    r = runner.invoke(app, ["cluster-demo", "--help"])
    assert r.exit_code == 0
    assert "kube-scheduler" in r.stdout and "--pods" in r.stdout
