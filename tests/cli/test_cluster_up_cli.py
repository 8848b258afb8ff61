"""``gputopo cluster up|down|status``: bad input exits 2 with one line before anything starts;
``down`` stops exactly the recorded processes, by PID, and only while the PID still runs the
recorded command."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gputopo_cli.main import app
from localcluster import standing

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["up", "--mode", "kind"], "--mode must be one of device-plugin, dra"),
        (["up", "--timeout", "0"], "--timeout must be between 1 and 3600"),
        (["up", "--nodes", "dgx9000:2"], "dgx9000"),
        (["up", "--nodes", "dgx1-v100:x"], "bad node count"),
        (["up", "--policy", "fastest"], "fastest"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args: list[str], message: str) -> None:
    r = runner.invoke(app, ["cluster", *args])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_down_and_status_without_a_cluster_say_so(tmp_path: Path) -> None:
    r = runner.invoke(app, ["cluster", "down", "--state-dir", str(tmp_path)])
    assert r.exit_code == 1 and "nothing to stop" in r.stderr
    r = runner.invoke(app, ["cluster", "status", "--state-dir", str(tmp_path)])
    assert r.exit_code == 1 and "no cluster runs" in r.stderr


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *args],
                            start_new_session=True)


def test_down_stops_the_recorded_processes_and_spares_a_reused_pid(tmp_path: Path) -> None:
    mine = _spawn("component")
    other = _spawn("someone-else")
    time.sleep(0.2)
    rec = standing.ProcessRecord("component", mine.pid,
                                 standing._cmdline(mine.pid) or [])  # noqa: SLF001
    # a record whose PID now runs another command (a reused PID) must not be touched
    stale = standing.ProcessRecord("stale", other.pid, ["not", "what", "runs"])
    st = standing.ClusterState(supervisor_pid=999_999_999, mode="dra", nodes=[],
                               kubeconfig="", workdir="", processes=[rec, stale])
    st.save(tmp_path)
    try:
        stopped = standing.down(tmp_path, timeout_s=1)
        assert [p.name for p in stopped] == ["component"]
        mine.wait(10)
        assert other.poll() is None  # still running
        assert not (tmp_path / standing.STATE_FILE).exists()
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()
