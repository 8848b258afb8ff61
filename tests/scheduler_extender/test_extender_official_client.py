"""The official client's transport failures reach the bind sequence as "no reply".

``OfficialKubeAPI`` talks to an HTTP server here that stands in for a kube-apiserver whose
reply is lost: it reads the Binding, writes it, and then closes the connection without an
answer (or, in ``hold`` mode, answers nothing until long after the client's read timeout).
The official client raises urllib3's own errors for both, not an ``ApiException``; they
must become an ``ApiError`` with status 0, so that ``KubernetesState.bind`` reads the pod
back — a Binding that was written is a bind, one that cannot be known keeps its GPUs
reserved — instead of failing as an internal error that releases GPUs a bound pod holds.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client as k8s_client

from scheduler_extender.kubernetes_state import ApiError, KubernetesState, OfficialKubeAPI
from scheduler_extender.state import BindError, PodRef
from tests.http_replies import reply, reply_json
from topology import catalog
from topology.contract import assignment_annotations
from topology.policies.base import NodeState, Request
from topology.policies.evaluate import Evaluator

NS, POD, UID, NODE = "team", "trainer", "uid-trainer", "gpu-node-0"
BINDING_PATH = f"/api/v1/namespaces/{NS}/pods/{POD}/binding"
POD_PATH = f"/api/v1/namespaces/{NS}/pods/{POD}"


class LostReplies:
    """The stand-in API server's behaviour and what it saw."""

    def __init__(self) -> None:
        self.mode = "drop"  # drop: close after writing; hold: answer nothing for a while
        self.pod_reads = "bound"  # bound | unbound | fail | not-json
        self.bindings: list[dict[str, Any]] = []


def _server(behaviour: LostReplies) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            pass

        def _json(self, status: int, doc: dict[str, Any]) -> None:
            reply_json(self, status, doc)

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert self.path == BINDING_PATH
            behaviour.bindings.append(body)  # written
            if behaviour.mode == "hold":
                time.sleep(1.5)
            self.close_connection = True  # and the reply is lost

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            if behaviour.pod_reads == "fail" or self.path.split("?")[0] != POD_PATH:
                self.close_connection = True
                return
            if behaviour.pod_reads == "not-json":  # a proxy's error page, with a 200
                reply(self, 200, b"<html><body>502 Bad Gateway</body></html>", "text/html")
                return
            ann = behaviour.bindings[-1]["metadata"].get("annotations", {}) \
                if behaviour.bindings and behaviour.pod_reads == "bound" else {}
            node = NODE if behaviour.pod_reads == "bound" else ""
            self._json(200, {"apiVersion": "v1", "kind": "Pod",
                             "metadata": {"name": POD, "namespace": NS, "uid": UID,
                                          "annotations": ann},
                             "spec": {"nodeName": node, "containers": []}})

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture
def apiserver() -> Iterator[tuple[LostReplies, OfficialKubeAPI]]:
    behaviour = LostReplies()
    server = _server(behaviour)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cfg = k8s_client.Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
    api = OfficialKubeAPI(k8s_client.CoreV1Api(k8s_client.ApiClient(cfg)),
                          request_timeout_s=(2.0, 0.3))
    try:
        yield behaviour, api
    finally:
        server.shutdown()
        server.server_close()


def _decision() -> Any:
    decision = Evaluator().place("gputopo", catalog.get("dgx1-v100"), NodeState(),
                                 Request(count=2))
    assert decision is not None
    return decision


def test_a_lost_binding_reply_is_an_api_error_with_no_status(
    apiserver: tuple[LostReplies, OfficialKubeAPI],
) -> None:
    behaviour, api = apiserver
    with pytest.raises(ApiError) as err:
        api.create_binding(NS, POD, UID, NODE, {"gputopo.io/node": NODE})
    assert err.value.status == 0
    assert str(err.value).startswith("no reply from the API server")
    assert len(behaviour.bindings) == 1  # sent once: a POST is not retried after sending


def test_a_binding_the_api_server_never_answers_times_out(
    apiserver: tuple[LostReplies, OfficialKubeAPI],
) -> None:
    behaviour, api = apiserver
    behaviour.mode = "hold"
    started = time.monotonic()
    with pytest.raises(ApiError) as err:
        api.create_binding(NS, POD, UID, NODE, {})
    assert err.value.status == 0
    assert time.monotonic() - started < 1.4  # the read timeout, not the server's 1.5 s


def test_a_written_binding_whose_reply_was_lost_is_a_bind(
    apiserver: tuple[LostReplies, OfficialKubeAPI],
) -> None:
    """The pod read back is bound to the node with the decision: the bind succeeded."""
    behaviour, api = apiserver
    decision = _decision()
    KubernetesState(api).bind(PodRef(NS, POD, UID), NODE, decision)
    sent = behaviour.bindings[0]
    assert sent["target"]["name"] == NODE
    assert sent["metadata"]["annotations"] == assignment_annotations(decision, NODE)


@pytest.mark.parametrize("reads", ["unbound", "fail", "not-json"])
def test_a_lost_reply_is_a_refusal_or_an_unknown_outcome_by_what_the_read_back_shows(
    apiserver: tuple[LostReplies, OfficialKubeAPI], reads: str,
) -> None:
    """Not bound when read back: refused (the GPUs go back). Not readable either — no
    reply, or one that is not JSON (a proxy's error page): the outcome is unknown
    (``maybe_written``: the GPUs stay reserved until the watch shows)."""
    behaviour, api = apiserver
    behaviour.pod_reads = reads
    with pytest.raises(BindError) as err:
        KubernetesState(api).bind(PodRef(NS, POD, UID), NODE, _decision())
    assert err.value.maybe_written is (reads != "unbound")
    assert "no reply from the API server" in str(err.value)


def test_a_reply_that_is_not_json_is_an_api_error(
    apiserver: tuple[LostReplies, OfficialKubeAPI],
) -> None:
    behaviour, api = apiserver
    behaviour.pod_reads = "not-json"
    with pytest.raises(ApiError, match="^the API server's reply is not JSON: ") as err:
        api.get_pod(NS, POD)
    assert err.value.status == 0
