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

import json
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.device_plugin.test_plugin_process import gputopo_command
from tests.http_replies import reply_json
from tests.kubeconfigs import UNREACHABLE, unreachable_kubeconfig


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


class _LeaseOnlyServer:
    """A stand-in API server that keeps coordination.k8s.io Leases (create, read, replace)
    and answers every other path 404, until :meth:`stop`: then nothing listens."""

    def __init__(self) -> None:
        leases: dict[str, dict[str, object]] = {}
        stopped = self.stopped = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle_one_request(self) -> None:
                if stopped.is_set():  # a kept-alive connection: dropped without a reply
                    self.close_connection = True
                    return
                super().handle_one_request()

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

            def _body(self) -> dict[str, object]:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n)) if n else {}

            def _lease(self) -> str | None:
                path = self.path.split("?")[0]
                return path if "/apis/coordination.k8s.io/v1/" in path else None

            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                key = self._lease()
                if key in leases:
                    reply_json(self, 200, leases[key])
                else:
                    reply_json(self, 404, {"kind": "Status", "apiVersion": "v1",
                                           "status": "Failure", "reason": "NotFound",
                                           "code": 404})

            def do_POST(self) -> None:  # noqa: N802
                body = self._body()
                key = self._lease()
                if key is None:
                    reply_json(self, 404, {"kind": "Status", "code": 404})
                    return
                name = body["metadata"]["name"]  # type: ignore[index]
                leases[f"{key}/{name}"] = body
                reply_json(self, 201, body)

            def do_PUT(self) -> None:  # noqa: N802
                body = self._body()
                key = self._lease()
                leases[str(key)] = body
                reply_json(self, 200, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()


def test_a_leader_whose_api_server_stops_answering_exits_as_on_a_lost_lease(
        tmp_path: Path) -> None:
    """The planner takes the Lease, leads, and then its API server stops answering: the
    renewal raises the client's transport error; the planner exits 1 with its one "lost its
    lease" line (it never leads without the Lease), not with a traceback."""
    api = _LeaseOnlyServer()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE.replace("http://127.0.0.1:1",
                                              f"http://127.0.0.1:{api.port}"))
    proc = subprocess.Popen(
        gputopo_command() + ["planner", "--kubeconfig", str(kubeconfig), "--metrics-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = ""
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while "planner leading" not in out and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            out += line
        assert "planner leading" in out, out
        api.stop()
        rest, _ = proc.communicate(timeout=60)
        out += rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 1, out
    assert "lost its lease" in out and "Traceback" not in out, out
