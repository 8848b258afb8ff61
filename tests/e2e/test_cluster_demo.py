"""End to end: ``gputopo cluster-demo`` with a few pods, as a user runs it (a subprocess).

Skipped only when the control-plane binaries or helm cannot be had.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from localcluster import Binaries
from localcluster.gpucluster import gputopo_command

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cluster_demo_places_a_small_batch_and_stops_everything(binaries: Binaries) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTOPO_EXTENDER_")}
    r = subprocess.run(
        [*gputopo_command(), "cluster-demo", "--pods", "6", "--seed", "7", "--timeout", "120"],
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^(job-\d{3}) .*-> (\S+)", out, re.M)}
    assert sorted(rows) == [f"job-{i:03d}" for i in range(1, 7)], out
    assert set(rows.values()) <= {"dgx1-v100-0", "dgx1-v100-1", "dgx1-v100-2", "dgx-a100-0",
                                  "pcie-8gpu-0"}
    assert "summary: 6/6 pods bound" in out
    assert "(annotations vs topology, nothing given twice): consistent" in out
    stopped = re.search(r"^stopped by PID: (.*)$", out, re.M)
    assert stopped is not None, out
    pids = {name: int(pid) for name, pid in re.findall(r"(\S+) \((\d+)\)", stopped.group(1))}
    assert {"gputopo-scheduler", "gputopo-extender", "kwok", "kube-apiserver", "etcd"} <= set(pids)
    assert not [n for n, pid in pids.items() if _alive(pid)]
