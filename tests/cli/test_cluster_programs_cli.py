"""The cluster-side programs that lead by a Lease (the planner, the DRA allocator), started
as processes, where the API server or the port is not what they expect.

* An API server that does not answer: the official client's leader election lets a transport
  error out of its ``LeaseLock`` (it catches only ``ApiException``), which ended the process
  with a traceback, so every replica crashed together during an API server outage. A follower
  now logs one line per attempt and tries again; a leader that cannot renew exits as when its
  Lease is lost (``lost``), never leading without it.
* A probe/metrics port in use: one line, exit 1 (a program that cannot start), not the HTTP
  server's traceback."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.device_plugin.test_plugin_process import gputopo_command
from tests.kubeconfigs import unreachable_kubeconfig


@pytest.mark.parametrize(("command", "port_flag"), [("planner", "--metrics-port"),
                                                     ("dra-allocator", "--port")])
def test_a_follower_waits_for_an_api_server_that_does_not_answer(
        tmp_path: Path, command: str, port_flag: str) -> None:
    kubeconfig = unreachable_kubeconfig(tmp_path)
    proc = subprocess.Popen(
        gputopo_command() + [command, "--kubeconfig", str(kubeconfig), port_flag, "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        out = b""
        while out.count(b"the Lease cannot be read") < 2 and time.monotonic() < deadline:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                break
            out += line
        assert proc.poll() is None, out.decode()  # still waiting, not dead
        text = out.decode()
        assert text.count("the Lease cannot be read") >= 2, text
        assert "Traceback" not in text and "retrying in" in text
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.parametrize(("command", "port_flag", "says"), [
    ("planner", "--metrics-port", "cannot serve /metrics on 0.0.0.0:"),
    ("dra-allocator", "--port", "cannot serve the probes and /metrics on 0.0.0.0:"),
])
def test_a_port_in_use_is_one_line_and_exit_1(tmp_path: Path, command: str, port_flag: str,
                                               says: str) -> None:
    """The probe/metrics port taken: a program that cannot start says so in one line and
    exits 1, as the node programs do (the HTTP server's OSError was a traceback)."""
    kubeconfig = unreachable_kubeconfig(tmp_path)
    with socket.socket() as taken:  # both listen on every address by default
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run(
            gputopo_command() + [command, "--kubeconfig", str(kubeconfig), port_flag,
                                 str(port)],
            capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says + f"{port}: Address already in use" in lines[0], r.stderr
