"""Files a command is handed that are not UTF-8 text (a binary, a file in another encoding):
one line naming the file, exit code 2 — not a UnicodeDecodeError traceback (every long-running
command's ``--config`` and the simulator's workload file did that)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gputopo_cli.main import app

runner = CliRunner()


@pytest.mark.parametrize("args", [
    ["extender", "--config", "{f}"],
    ["planner", "--config", "{f}"],
    ["device-plugin", "--config", "{f}"],
    ["dra-driver", "--config", "{f}"],
    ["dra-allocator", "--config", "{f}"],
    ["simulate", "-w", "{f}", "-p", "gputopo", "-o", "{d}", "--no-plots"],
])
def test_a_file_that_is_not_utf8_is_one_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    f = tmp_path / "latin1.yaml"
    f.write_bytes("policy: caf\u00e9\n".encode("latin-1"))
    r = runner.invoke(app, [a.format(f=f, d=tmp_path / "out") for a in args])
    assert r.exit_code == 2, (r.exit_code, r.stderr, r.exception)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(f) in lines[0] and "not UTF-8 text" in lines[0], r.stderr
