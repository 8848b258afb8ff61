"""Bad input never gets a traceback, never changes state, and the extender keeps serving."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from fastapi.testclient import TestClient

from gputopo_cli.demo import node_object
from scheduler_extender.decision import (
    Ask,
    BadRequest,
    Candidate,
    Decider,
    NodeDecision,
    Verb,
)
from scheduler_extender.schemas import ExtenderArgs
from scheduler_extender.state import MemoryState
from scheduler_extender.verbs import Extender
from tests.scheduler_extender.helpers import (
    bind_args,
    gpu_pod,
    make_client,
    names_args,
)
from topology import catalog
from topology.contract import ANN_TOPOLOGY
from topology.serialization import dumps

NODES = ["gpu-node-00", "gpu-node-01"]


@pytest.fixture
def busy() -> tuple[TestClient, MemoryState]:
    """A client whose state already holds one bound 2-GPU pod."""
    state = MemoryState({n: catalog.get("dgx1-v100") for n in NODES})
    client = make_client(state)
    pod = gpu_pod("holder", 2)
    assert client.post("/filter", json=names_args(pod, NODES)).json()["Error"] == ""
    assert client.post("/bind", json=bind_args(pod, "gpu-node-00")).json() == {"Error": ""}
    return client, state


def still_serving(client: TestClient, state: MemoryState) -> None:
    """The extender answers, the held allocation is intact and nothing else is held."""
    assert client.get("/healthz").status_code == 200
    held = state.allocations()
    assert [(a.pod.name, a.node, len(a.gpus)) for a in held] == [("holder", "gpu-node-00", 2)]
    pod = gpu_pod("probe", 1)
    res = client.post("/filter", json=names_args(pod, NODES)).json()
    assert res["Error"] == "" and res["NodeNames"] == NODES


def one_line_error(r: object) -> str:
    body = r.json()  # type: ignore[attr-defined]
    assert set(body) >= {"Error"}
    assert body["Error"] and "\n" not in body["Error"] and "Traceback" not in body["Error"]
    return body["Error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind"])
@pytest.mark.parametrize("body", [b"{not json", b"", b"[1, 2]", b'{"Pod": 3}', b"\xff\xfe"])
def test_malformed_body_is_400_with_reason(
    busy: tuple[TestClient, MemoryState], verb: str, body: bytes
) -> None:
    client, state = busy
    r = client.post(f"/{verb}", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    msg = one_line_error(r)
    assert "malformed JSON" in msg or "invalid request body" in msg
    still_serving(client, state)


def test_missing_field_names_it(busy: tuple[TestClient, MemoryState]) -> None:
    client, state = busy
    r = client.post("/bind", json={"PodName": "x", "PodNamespace": "default"})
    assert r.status_code == 400 and "Node" in one_line_error(r)
    r = client.post("/filter", json={"NodeNames": NODES})
    assert r.status_code == 400 and "Pod" in one_line_error(r)
    still_serving(client, state)


@pytest.mark.parametrize(("method", "path", "status"), [
    ("post", "/evict", 404), ("get", "/", 404), ("post", "/filter/extra", 404),
    ("get", "/preempt", 405),
    ("get", "/filter", 405), ("put", "/bind", 405),
])
def test_unknown_verb_and_wrong_method(
    busy: tuple[TestClient, MemoryState], method: str, path: str, status: int
) -> None:
    client, state = busy
    r = client.request(method.upper(), path, json={})
    assert r.status_code == status
    msg = one_line_error(r)
    assert "/filter" in msg  # it says what is served
    still_serving(client, state)


@pytest.mark.parametrize(("annotations", "resources", "needle"), [
    ({"gputopo.io/pattern": "hexagon"}, None, "bad pattern"),
    ({"gputopo.io/pattern": "0-1,1-5"}, None, "names GPU 5"),
    ({"gputopo.io/pattern": "0-\u00b2"}, None, "bad pattern"),  # "²": isdigit, not int
    ({"gputopo.io/bandwidth-sensitive": "yes"}, None, "must be \"true\" or \"false\""),
    ({"gputopo.io/policy": "fastest"}, None, "unknown policy 'fastest'"),
    ({}, {"limits": {"nvidia.com/gpu": "500Mi"}}, "no node has more than 256"),
    ({"gputopo.io/pattern": "ring"}, {"limits": {"nvidia.com/gpu": "100000000"}},
     "no node has more than 256"),
    ({}, {"limits": {"nvidia.com/gpu": "500m"}}, "not a whole number"),
    ({}, {"limits": {"nvidia.com/gpu": "1.5"}}, "not a whole number"),
    ({}, {"limits": {"nvidia.com/gpu": "2", "gputopo.io/vgpu-core": "50"}}, "one kind"),
    ({}, {"limits": {"gputopo.io/vgpu-core": "150"}}, "more than one GPU"),
])
def test_bad_pod_is_error_field(
    busy: tuple[TestClient, MemoryState], annotations: dict[str, str],
    resources: dict[str, object] | None, needle: str,
) -> None:
    client, state = busy
    pod = gpu_pod("bad", 4, annotations=annotations, resources=resources)
    r = client.post("/filter", json=names_args(pod, NODES))
    assert r.status_code == 200
    res = r.json()
    assert needle in one_line_error(r)
    assert "default/bad" in res["Error"]
    assert res["NodeNames"] == [] and res["FailedNodes"] == {}
    # prioritize scores 0, bind refuses: the pod never gets GPUs
    prios = client.post("/prioritize", json=names_args(pod, NODES)).json()
    assert [p["Score"] for p in prios] == [0, 0]
    r = client.post("/bind", json=bind_args(pod, "gpu-node-01"))
    assert r.status_code == 200 and r.json()["Error"]
    still_serving(client, state)


def test_a_bad_pod_is_named_by_its_own_namespace(busy: tuple[TestClient, MemoryState]) -> None:
    """The Error names the pod as ``namespace/name``, ``default`` when it has none."""
    client, _ = busy
    pod = gpu_pod("bad", "1.5")
    for ns, label in (("team-a", "pod team-a/bad:"), (None, "pod default/bad:")):
        if ns is None:
            del pod["metadata"]["namespace"]
        else:
            pod["metadata"]["namespace"] = ns
        r = client.post("/filter", json=names_args(pod, NODES))
        assert r.status_code == 200 and one_line_error(r).startswith(label)


def test_a_bad_pod_gets_the_reply_shape_of_its_request_form(
    busy: tuple[TestClient, MemoryState],
) -> None:
    """Node objects in, an empty Node list out (names in, an empty name list out), with the
    Error and empty failure maps."""
    client, _ = busy
    pod = gpu_pod("bad", "1.5")
    items = [{"metadata": {"name": n}} for n in NODES]
    for body, nodes, names in (
        ({"Pod": pod, "Nodes": {"items": items}, "NodeNames": None},
         {"metadata": {}, "items": []}, None),
        (names_args(pod, NODES), None, []),
    ):
        res = client.post("/filter", json=body).json()
        assert res["Error"].startswith("pod default/bad:")
        assert res == {"Nodes": nodes, "NodeNames": names, "FailedNodes": {},
                       "FailedAndUnresolvableNodes": {}, "Error": res["Error"]}


def test_a_node_object_without_a_name_is_an_error_naming_it(
    busy: tuple[TestClient, MemoryState],
) -> None:
    """A Node object without a usable ``metadata.name`` (missing, empty, or metadata that is
    not an object) is named by its index in the Error, not answered with a 500."""
    client, state = busy
    for bad in ({"metadata": {}}, {"metadata": {"name": ""}}, {"metadata": None},
                {"metadata": ["x"]}):
        items = [{"metadata": {"name": NODES[0]}}, bad]
        res = client.post("/filter", json={"Pod": gpu_pod("p", 1), "Nodes": {"items": items},
                                          "NodeNames": None})
        assert res.status_code == 200, bad
        assert res.json()["Error"] == "Nodes.items[1] has no metadata.name", bad
    still_serving(client, state)


class _RefusingDecider(Decider):
    """The decision layer as it answers a request its policy finds invalid (the policy's
    ``RequestError``; the pod parser refuses every such request it can see first)."""

    def decide(self, ask: Ask, candidates: Sequence[Candidate], *, verb: Verb = "filter",
               scored: bool = False) -> list[NodeDecision]:
        raise BadRequest("request refused by the policy")


@pytest.mark.parametrize("by_objects", [False, True], ids=["names", "nodes"])
def test_a_request_the_policy_refuses_fails_filter_and_scores_zero(by_objects: bool) -> None:
    """filter answers with the Error field (no node passes, none is blamed), prioritize with
    0 on every node: the pod, not a node, is at fault."""
    state = MemoryState({n: catalog.get("dgx1-v100") for n in NODES})
    ext = Extender(state, "gputopo")
    ext.decider = _RefusingDecider(state)
    pod = gpu_pod("p", 2)
    args = names_args(pod, NODES)
    if by_objects:
        args = {"Pod": pod, "NodeNames": None,
                "Nodes": {"items": [{"metadata": {"name": n}} for n in NODES]}}
    res = ext.filter(ExtenderArgs.model_validate(args))
    assert res["Error"] == "pod default/p: request refused by the policy"
    assert res["FailedNodes"] == {} and res["FailedAndUnresolvableNodes"] == {}
    if by_objects:
        assert res["Nodes"] == {"metadata": {}, "items": []} and res["NodeNames"] is None
    else:
        assert res["NodeNames"] == [] and res["Nodes"] is None
    assert ext.prioritize(ExtenderArgs.model_validate(args)) == [
        {"Host": n, "Score": 0} for n in NODES]


def test_corrupt_and_newer_topology_annotations_fail_the_node(
    busy: tuple[TestClient, MemoryState],
) -> None:
    client, state = busy
    good = dumps(catalog.get("dgx1-v100"))
    newer = json.loads(good)
    newer["schemaVersion"] = "gputopo.io/v2"
    nodes = [
        node_object("n-good", good),
        node_object("n-corrupt", good[: len(good) // 2]),
        node_object("n-newer", json.dumps(newer)),
        node_object("n-schema", json.dumps({**json.loads(good), "gpus": []})),
    ]
    bare = node_object("n-bare", good)
    del bare["metadata"]["annotations"][ANN_TOPOLOGY]
    nodes.append(bare)
    body = {"Pod": gpu_pod("p", 2), "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
    res = client.post("/filter", json=body).json()
    assert res["Error"] == ""
    assert [n["metadata"]["name"] for n in res["Nodes"]["items"]] == ["n-good"]
    failed = res["FailedAndUnresolvableNodes"]
    assert set(failed) == {"n-corrupt", "n-newer", "n-schema", "n-bare"}
    assert failed["n-corrupt"].startswith("topology annotation invalid: ")
    assert "unsupported topology schemaVersion 'gputopo.io/v2'" in failed["n-newer"]
    assert failed["n-schema"].startswith("topology annotation invalid: ")
    assert failed["n-bare"] == "node has no gputopo.io/topology annotation"
    prios = {p["Host"]: p["Score"] for p in client.post("/prioritize", json=body).json()}
    assert prios["n-corrupt"] == prios["n-newer"] == prios["n-bare"] == 0
    still_serving(client, state)


def test_request_larger_than_any_node(busy: tuple[TestClient, MemoryState]) -> None:
    client, state = busy
    res = client.post("/filter", json=names_args(gpu_pod("huge", 9), NODES)).json()
    assert res["Error"] == "" and res["NodeNames"] == []
    assert res["FailedAndUnresolvableNodes"] == {
        n: "node has 8 GPUs; the pod asks for 9" for n in NODES
    }
    still_serving(client, state)


def test_busy_node_reason_names_free_count(busy: tuple[TestClient, MemoryState]) -> None:
    client, state = busy
    res = client.post("/filter", json=names_args(gpu_pod("big", 8), NODES)).json()
    assert res["NodeNames"] == ["gpu-node-01"]
    assert res["FailedNodes"] == {"gpu-node-00": "only 6 of 8 GPUs free; the pod asks for 8"}
    still_serving(client, state)


def test_unknown_node_in_node_names(busy: tuple[TestClient, MemoryState]) -> None:
    client, state = busy
    res = client.post("/filter", json=names_args(gpu_pod("p", 1), [*NODES, "ghost"])).json()
    assert res["NodeNames"] == NODES
    assert "ghost" in res["FailedAndUnresolvableNodes"]
    still_serving(client, state)


def test_bind_errors(busy: tuple[TestClient, MemoryState]) -> None:
    client, state = busy
    # never filtered: the memory backend cannot fetch the pod
    r = client.post("/bind", json={"PodName": "stranger", "PodNamespace": "default",
                                   "PodUID": "u-1", "Node": "gpu-node-00"})
    assert "unknown to the extender" in one_line_error(r)
    # the node cannot host it any more
    pod = gpu_pod("eight", 8)
    client.post("/filter", json=names_args(pod, NODES))
    r = client.post("/bind", json=bind_args(pod, "gpu-node-00"))
    assert one_line_error(r) == "cannot bind: only 6 of 8 GPUs free; the pod asks for 8"
    # PodUID disagreeing with the live pod of that name
    r = client.post("/bind", json={**bind_args(gpu_pod("holder"), "gpu-node-01"),
                                   "PodUID": "someone-else"})
    assert "does not match" in one_line_error(r)
    # a node the extender has never seen
    pod = gpu_pod("p", 1)
    client.post("/filter", json=names_args(pod, NODES))
    r = client.post("/bind", json=bind_args(pod, "ghost"))
    assert "no gputopo.io/topology annotation" in one_line_error(r)
    still_serving(client, state)
    metrics = client.get("/metrics").text
    assert 'gputopo_extender_bind_errors_total{reason="no-fit"} 2.0' in metrics


def test_pass_through_pod(busy: tuple[TestClient, MemoryState]) -> None:
    client, state = busy
    plain = gpu_pod("web", resources={"requests": {"cpu": "1", "memory": "1Gi"}})
    res = client.post("/filter", json=names_args(plain, NODES)).json()
    assert res == {"Nodes": None, "NodeNames": NODES, "FailedNodes": {},
                   "FailedAndUnresolvableNodes": {}, "Error": ""}
    node_body = {"Pod": plain, "Nodes": {"metadata": {}, "items": [
        {"metadata": {"name": "anything"}, "spec": {}, "status": {}}]}, "NodeNames": None}
    res = client.post("/filter", json=node_body).json()
    assert res["Nodes"]["items"] == node_body["Nodes"]["items"]  # untouched, even unknown
    prios = client.post("/prioritize", json=names_args(plain, NODES)).json()
    assert prios == [{"Host": n, "Score": 0} for n in NODES]
    assert client.post("/bind", json=bind_args(plain, "gpu-node-01")).json() == {"Error": ""}
    rec = state.bound_pod("default", "web")
    assert rec is not None and rec.node == "gpu-node-01" and rec.annotations == {}
    still_serving(client, state)


def test_health_ready_metrics(busy: tuple[TestClient, MemoryState]) -> None:
    client, _ = busy
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
    text = client.get("/metrics").text
    assert 'gputopo_extender_requests_total{outcome="ok",verb="filter"}' in text
    assert "gputopo_extender_request_seconds_bucket" in text
    assert "gputopo_extender_decisions_total{policy=" in text
