"""The verbs' fast path (:class:`scheduler_extender.routes.fastpath.VerbFastPath`) and the
one-write reply protocol (:class:`scheduler_extender.auth.OneWriteHttpToolsProtocol`): both
change how ``/filter``, ``/prioritize`` and ``/bind`` travel, never what they answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gputopo_cli.demo import node_object
from scheduler_extender.app import create_app
from scheduler_extender.auth import _OneWriteResponse
from scheduler_extender.routes.fastpath import VerbFastPath
from scheduler_extender.settings import ExtenderSettings
from scheduler_extender.state import MemoryState
from tests.scheduler_extender.helpers import bind_args, gpu_pod, names_args
from topology import catalog
from topology.serialization import dumps

NODES = ["gpu-node-00", "gpu-node-01", "gpu-node-02"]


def app_over(fast: bool) -> tuple[FastAPI, TestClient]:
    """An app over three DGX-1 nodes, one of them half used; ``fast=False``: the fast path
    taken out, so FastAPI's routes answer."""
    state = MemoryState({n: catalog.get("dgx1-v100") for n in NODES})
    app = create_app(ExtenderSettings(policy="gputopo", state="memory", eval_budget_ms=0), state)
    if not fast:
        app.user_middleware = [m for m in app.user_middleware if m.cls is not VerbFastPath]
    client = TestClient(app, raise_server_exceptions=False)
    holder = gpu_pod("holder", 4)
    assert client.post("/filter", json=names_args(holder, NODES)).json()["Error"] == ""
    assert client.post("/bind", json=bind_args(holder, "gpu-node-01")).json() == {"Error": ""}
    return app, client


def ring(name: str, gpus: int) -> dict[str, Any]:
    return gpu_pod(name, gpus, annotations={"gputopo.io/pattern": "ring",
                                            "gputopo.io/bandwidth-sensitive": "true"})


ANN = dumps(catalog.get("dgx1-v100"))
BODIES: list[tuple[str, bytes]] = [
    ("names", json.dumps(names_args(ring("a", 4), NODES)).encode()),
    ("node objects", json.dumps({"Pod": ring("b", 2), "NodeNames": None, "Nodes": {
        "metadata": {}, "items": [node_object(n, ANN) for n in NODES]}}).encode()),
    ("too big for every node", json.dumps(names_args(gpu_pod("c", 9), NODES)).encode()),
    ("not a gputopo pod", json.dumps(names_args(gpu_pod("d", resources={
        "limits": {"cpu": "1"}}), NODES)).encode()),
    ("invalid pod", json.dumps(names_args(gpu_pod("e", "500m"), NODES)).encode()),
    ("malformed JSON", b'{"Pod": '),
    ("schema violation", b'{"Pod": 3, "NodeNames": ["gpu-node-00"]}'),
    ("empty body", b""),
    ("node object without a name", json.dumps({"Pod": ring("f", 2), "NodeNames": None,
                                               "Nodes": {"items": [{"metadata": {}}]}}).encode()),
]


def requests_counted(client: TestClient) -> list[str]:
    return sorted(line for line in client.get("/metrics").text.splitlines()
                  if line.startswith("gputopo_extender_requests_total{"))


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_the_fast_path_answers_every_body_as_the_route_does(verb: str) -> None:
    _, fast = app_over(True)
    _, routed = app_over(False)
    for what, body in BODIES:
        a = fast.post(f"/{verb}", content=body, headers={"Content-Type": "application/json"})
        b = routed.post(f"/{verb}", content=body, headers={"Content-Type": "application/json"})
        assert (a.status_code, a.json()) == (b.status_code, b.json()), what
        assert a.headers["content-type"] == "application/json", what
    assert requests_counted(fast) == requests_counted(routed)


def bind_script() -> list[tuple[str, str, bytes]]:
    """(what, verb, body): a pod filtered and bound, bound again, one never filtered, one
    filtered but too big for the node, and three bodies that are not ExtenderBindingArgs."""
    a, big, stranger = ring("ba", 4), gpu_pod("bb", 8), gpu_pod("bc", 2)

    def enc(doc: Any) -> bytes:
        return json.dumps(doc).encode()

    return [
        ("filter a", "filter", enc(names_args(a, NODES))),
        ("bind a", "bind", enc(bind_args(a, "gpu-node-00"))),
        ("bind a again", "bind", enc(bind_args(a, "gpu-node-02"))),
        ("bind a pod never filtered", "bind", enc(bind_args(stranger, "gpu-node-00"))),
        ("filter big", "filter", enc(names_args(big, NODES))),
        ("bind big where it does not fit", "bind", enc(bind_args(big, "gpu-node-01"))),
        ("malformed JSON", "bind", b'{"PodName": '),
        ("schema violation", "bind", b'{"PodName": 3, "PodNamespace": "x", "Node": "n"}'),
        ("empty body", "bind", b""),
    ]


def test_the_fast_path_binds_as_the_route_does() -> None:
    """The same calls through both give the same replies, the same GPUs held afterwards
    and the same counters."""
    fast_app, fast = app_over(True)
    routed_app, routed = app_over(False)
    for what, verb, body in bind_script():
        a = fast.post(f"/{verb}", content=body, headers={"Content-Type": "application/json"})
        b = routed.post(f"/{verb}", content=body, headers={"Content-Type": "application/json"})
        assert (a.status_code, a.json()) == (b.status_code, b.json()), what
        if verb == "bind" and a.status_code == 200:
            assert a.json()["Error"] != "" or what == "bind a", what

    def held(app: FastAPI) -> list[tuple[str, str, tuple[int, ...]]]:
        return sorted((x.pod.key, x.node, tuple(x.gpus))
                      for x in app.state.runtime.extender.state.allocations())

    assert held(fast_app) == held(routed_app)
    assert ("uid-ba", "gpu-node-00") in {(k, n) for k, n, _ in held(fast_app)}
    assert requests_counted(fast) == requests_counted(routed)


def test_a_failed_api_call_in_bind_is_a_500_with_an_error_on_the_fast_path() -> None:
    app, client = app_over(True)

    def boom(step: Any) -> Any:
        raise RuntimeError("bind layer broke")

    app.state.runtime.extender.bind_commit = boom
    pod = ring("bd", 2)
    assert client.post("/filter", json=names_args(pod, NODES)).json()["Error"] == ""
    r = client.post("/bind", json=bind_args(pod, "gpu-node-00"))
    assert r.status_code == 500
    assert r.json() == {"Error": "internal error: RuntimeError: bind layer broke"}


def test_a_bad_body_gets_400_with_one_error_line_and_is_counted() -> None:
    _, client = app_over(True)
    r = client.post("/filter", content=b'{"Pod": ')
    assert r.status_code == 400
    assert r.json()["Error"].startswith("malformed JSON body")
    assert any('verb="filter"' in line and 'outcome="bad_request"' in line
               and line.endswith(" 1.0") for line in requests_counted(client))


def test_the_fast_path_leaves_other_methods_and_paths_to_the_app() -> None:
    _, client = app_over(True)
    assert client.get("/filter").status_code == 405
    assert client.post("/filterx", json={}).status_code == 404
    assert client.get("/healthz").status_code == 200


def test_an_exception_in_a_verb_is_a_500_with_an_error_not_a_traceback() -> None:
    app, client = app_over(True)

    def boom(args: Any) -> Any:
        raise RuntimeError("decision layer broke")

    app.state.runtime.extender.prioritize = boom
    r = client.post("/prioritize", json=names_args(ring("g", 2), NODES))
    assert r.status_code == 500
    assert r.json() == {"Error": "internal error: RuntimeError: decision layer broke"}


# ------------------------------------------------------------------------------ one write
class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class FakeCycle:
    response_started = False


def test_the_status_line_and_headers_leave_with_the_body_in_one_write() -> None:
    t, cycle = FakeTransport(), FakeCycle()
    w = _OneWriteResponse(t, cycle)  # type: ignore[arg-type]
    w.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # before the response starts: at once
    assert t.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    cycle.response_started = True
    w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    assert len(t.writes) == 1  # held
    w.write(b"{}")
    assert t.writes[1:] == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    w.write(b"more")  # later body chunks pass through
    assert t.writes[2:] == [b"more"]


def test_a_close_after_the_headers_sends_them_first() -> None:
    t, cycle = FakeTransport(), FakeCycle()
    w = _OneWriteResponse(t, cycle)  # type: ignore[arg-type]
    cycle.response_started = True
    w.write(b"HTTP/1.1 500 Internal Server Error\r\n\r\n")
    assert not w.is_closing()
    w.close()
    assert t.writes == [b"HTTP/1.1 500 Internal Server Error\r\n\r\n"] and t.closed
    assert w.is_closing()


def test_a_response_without_a_body_write_still_sends_its_headers() -> None:
    t, cycle = FakeTransport(), FakeCycle()
    w = _OneWriteResponse(t, cycle)  # type: ignore[arg-type]
    cycle.response_started = True
    w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")  # HEAD: no body is written
    w.flush()
    assert t.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"] and not t.closed
    w.flush()
    assert len(t.writes) == 1


@pytest.mark.parametrize("method", ["HEAD", "GET", "POST"])
def test_every_reply_reaches_a_real_client_over_keep_alive(method: str) -> None:
    """Through uvicorn with the extender's protocol: HEAD (no body write), GET and POST on
    one keep-alive connection, twice each, all answered."""
    import http.client

    from gputopo_cli.demo import serve

    app, _ = app_over(True)
    with serve(app) as url:
        host, port = url.split("//", 1)[1].rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        for _ in range(2):
            body = json.dumps(names_args(ring("h", 2), NODES)) if method == "POST" else None
            conn.request(method, "/filter" if method == "POST" else "/healthz", body=body,
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            assert r.status in (200, 405)
            if method == "POST":
                assert json.loads(data)["Error"] == ""
            if method == "HEAD":
                assert data == b""
        conn.close()
