"""Replay the request bodies a real kube-scheduler v1.28.7 sent, in both nodeCacheCapable
modes, against the app over a MemoryState whose nodes carry the fixtures' names."""

from __future__ import annotations

import pytest

from scheduler_extender.state import MemoryState
from tests.scheduler_extender.helpers import (
    FIXTURE_NODES,
    FIXTURES,
    fixture_state,
    load_fixture,
    make_client,
)
from topology import catalog
from topology.contract import (
    ANN_GPU_INDICES,
    ANN_GPU_UUIDS,
    ANN_NODE,
    parse_assignment,
)
from topology.serialization import dumps

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
MODES = [("", False), ("-nodecache", True)]


@pytest.mark.parametrize(("suffix", "node_cache"), MODES, ids=["nodes", "nodecache"])
def test_replay_filter_prioritize_bind(suffix: str, node_cache: bool) -> None:
    state = fixture_state()
    client = make_client(state)
    filter_body = load_fixture(f"filter-request{suffix}.json")
    raw = (FIXTURES / f"filter-request{suffix}.json").read_bytes()

    r = client.post("/filter", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 200
    res = r.json()
    assert set(res) == FILTER_KEYS
    assert res["Error"] == ""
    assert res["FailedNodes"] == {} and res["FailedAndUnresolvableNodes"] == {}
    if node_cache:
        assert res["Nodes"] is None
        assert res["NodeNames"] == list(FIXTURE_NODES)
    else:
        assert res["NodeNames"] is None
        # the same node objects that passed, unchanged
        assert res["Nodes"]["items"] == filter_body["Nodes"]["items"]

    raw = (FIXTURES / f"prioritize-request{suffix}.json").read_bytes()
    r = client.post("/prioritize", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 200
    prios = r.json()
    assert [set(p) for p in prios] == [{"Host", "Score"}] * 2
    assert [p["Host"] for p in prios] == list(FIXTURE_NODES)
    assert all(0 <= p["Score"] <= 10 for p in prios)

    bind = load_fixture(f"bind-request{suffix}.json")
    assert bind["PodUID"] == filter_body["Pod"]["metadata"]["uid"]
    raw = (FIXTURES / f"bind-request{suffix}.json").read_bytes()
    r = client.post("/bind", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 200
    assert r.json() == {"Error": ""}

    rec = state.bound_pod(bind["PodNamespace"], bind["PodName"])
    assert rec is not None and rec.node == bind["Node"]
    assignment = parse_assignment(rec.annotations)
    assert assignment.node == bind["Node"] == rec.annotations[ANN_NODE]
    assert len(assignment.gpu_indices) == 2  # the pod asks for nvidia.com/gpu: 2
    topo = catalog.get("dgx1-v100")
    assert rec.annotations[ANN_GPU_UUIDS].split(",") == [
        topo.gpus[i].uuid for i in map(int, rec.annotations[ANN_GPU_INDICES].split(","))
    ]
    held = state.allocations()
    assert len(held) == 1 and held[0].node == bind["Node"] and held[0].pod.uid == bind["PodUID"]


def test_content_type_is_not_required() -> None:
    """kube-scheduler sends application/json; curl users may not — parse the body anyway."""
    client = make_client(fixture_state())
    raw = (FIXTURES / "filter-request-nodecache.json")
    if not raw.is_file():
        pytest.skip(f"kube-scheduler fixtures not found at {FIXTURES}")
    r = client.post("/filter", content=raw.read_bytes(), headers={"Content-Type": "text/plain"})
    assert r.status_code == 200 and r.json()["NodeNames"] == list(FIXTURE_NODES)


def test_node_object_annotation_is_preferred_over_the_backend() -> None:
    """nodeCacheCapable false: a topology annotation on the Node object wins; the memory
    backend knows gpu-node-00 only, gpu-node-01 is described by its annotation alone."""
    state = MemoryState({"gpu-node-00": catalog.get("dgx1-v100")})
    client = make_client(state)
    body = load_fixture("filter-request.json")
    small = catalog.get("gaia-4gpu") if "gaia-4gpu" in catalog.names() else catalog.get("dgx1-v100")
    body["Nodes"]["items"][1]["metadata"].setdefault("annotations", {})[
        "gputopo.io/topology"
    ] = dumps(small)
    res = client.post("/filter", json=body).json()
    assert [n["metadata"]["name"] for n in res["Nodes"]["items"]] == list(FIXTURE_NODES)
    # bind to the annotation-only node works: the extender remembers what filter saw
    uid = body["Pod"]["metadata"]["uid"]
    r = client.post("/bind", json={"PodName": "gpu-pod-000", "PodNamespace": "default",
                                   "PodUID": uid, "Node": "gpu-node-01"})
    assert r.json() == {"Error": ""}
    assert state.allocations()[0].node == "gpu-node-01"


def test_nodes_without_annotation_fail_when_the_backend_does_not_know_them() -> None:
    client = make_client(MemoryState({}))
    body = load_fixture("filter-request.json")
    res = client.post("/filter", json=body).json()
    assert res["Nodes"]["items"] == []
    assert res["FailedAndUnresolvableNodes"] == {
        n: "node has no gputopo.io/topology annotation" for n in FIXTURE_NODES
    }
