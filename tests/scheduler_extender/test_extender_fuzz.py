"""Bad input, generated: kube-scheduler's captured requests with one part replaced by any
JSON value (or removed), and pods whose gputopo annotations and GPU resources are any
string. Whatever arrives, every verb answers with its reply shape or a 4xx with a one-line
reason — never a 5xx or a traceback — and the extender keeps serving with its book intact.
(The hand-picked cases, with the reasons they must give, are in
``test_extender_bad_input.py``.)"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_extender.state import MemoryState
from tests.damage import damaged
from tests.scheduler_extender.helpers import (
    bind_args,
    fixture_state,
    gpu_pod,
    load_fixture,
    make_client,
    names_args,
)
from tests.scheduler_extender.test_extender_preempt_replay import load, scene_state
from topology.contract import (
    ANN_BW_SENSITIVE,
    ANN_COLOCATION,
    ANN_KERNEL_OCCUPANCY,
    ANN_MIN_UTILITY,
    ANN_NETWORK,
    ANN_PATTERN,
    ANN_PLANNED_NODE,
    ANN_POLICY,
    ANN_PRIORITY,
    ANN_PROFILE,
    ANN_TOPOLOGY_PREFERRED,
    ANN_TOPOLOGY_REQUIRED,
)

NODES = ["gpu-node-00", "gpu-node-01"]
REQUESTS = {
    "filter": ("filter-request.json", "filter-request-nodecache.json"),
    "prioritize": ("prioritize-request.json", "prioritize-request-nodecache.json"),
    "bind": ("bind-request.json",),
}

#: Strings a user might put in an annotation or a quantity, and some no one would.
WORDS = st.sampled_from([
    "", "0", "1", "-1", "2", "3", "8", "9", "256", "1e9", "0.5", "500m", "1Gi", "true",
    "false", "ring", "all-to-all", "0-1,1-2", "0-9", "gputopo", "mapa", "nope", "null",
    "{}", "[]", '{"job": "a"}', "\u00e9", " ", "ring\n", "0-\u00b2", "\u00b2", "\u0661",
]) | st.text(max_size=16)
ANNOTATIONS = (ANN_PATTERN, ANN_BW_SENSITIVE, ANN_POLICY, ANN_MIN_UTILITY, ANN_KERNEL_OCCUPANCY,
               ANN_PROFILE, ANN_COLOCATION, ANN_PLANNED_NODE, ANN_PRIORITY, ANN_NETWORK,
               ANN_TOPOLOGY_REQUIRED, ANN_TOPOLOGY_PREFERRED)
RESOURCES = ("nvidia.com/gpu", "gputopo.io/vgpu-core", "gputopo.io/vgpu-memory",
             "gputopo.io/gpu-shared")


@st.composite
def damaged_request(draw: st.DrawFn, verb: str) -> Any:
    """A captured request of ``verb`` with one part replaced by any JSON value or removed
    (the whole body, now and then)."""
    return draw(damaged(load_fixture(draw(st.sampled_from(REQUESTS[verb])))))


@st.composite
def odd_pods(draw: st.DrawFn) -> dict[str, Any]:
    """A pod whose gputopo annotations and GPU resources are any strings."""
    annotations = draw(st.dictionaries(st.sampled_from(ANNOTATIONS), WORDS, max_size=4))
    limits = draw(st.dictionaries(st.sampled_from(RESOURCES), WORDS, min_size=1, max_size=3))
    return gpu_pod("odd", annotations=annotations, resources={"limits": limits})


def _state_intact(client: TestClient, state: MemoryState) -> None:
    """It answers, and its book holds exactly the one pod bound before (a failed verb
    neither dropped nor added an allocation, nor left a reservation behind)."""
    assert client.get("/healthz").status_code == 200
    held = sorted((a.pod.name, a.node, len(a.gpus)) for a in state.allocations())
    assert held == [("holder", "gpu-node-00", 2)], held


def _check_reply(verb: str, r: Any) -> None:
    assert r.status_code < 500, (r.status_code, r.text[:300])
    body = r.json()
    if r.status_code >= 400:
        assert isinstance(body, dict) and isinstance(body.get("Error"), str), body
        assert body["Error"] and "\n" not in body["Error"], body
        assert "Traceback" not in body["Error"]
        return
    if verb == "filter":
        assert isinstance(body, dict) and isinstance(body.get("Error"), str), body
        assert "\n" not in body["Error"] and "Traceback" not in body["Error"]
        failed = body.get("FailedNodes") or {}
        assert all(isinstance(v, str) and v for v in failed.values()), failed
    elif verb == "prioritize":
        assert isinstance(body, list), body
        for row in body:
            assert set(row) == {"Host", "Score"} and 0 <= row["Score"] <= 10, row
    else:
        assert isinstance(body, dict) and isinstance(body.get("Error"), str), body
        assert "\n" not in body["Error"] and "Traceback" not in body["Error"]


@pytest.fixture(scope="module")
def served() -> tuple[TestClient, MemoryState]:
    """An extender over the fixtures' two DGX-1 V100 nodes holding one bound 2-GPU pod."""
    state = fixture_state()
    client = make_client(state)
    holder = gpu_pod("holder", 2)
    assert client.post("/filter", json=names_args(holder, NODES)).json()["Error"] == ""
    assert client.post("/bind", json=bind_args(holder, "gpu-node-00")).json() == {"Error": ""}
    return client, state


FUZZ = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@FUZZ
@given(data=st.data())
def test_a_damaged_request_gets_a_reply_or_a_4xx(
        served: tuple[TestClient, MemoryState], verb: str, data: st.DataObject) -> None:
    client, state = served
    body = data.draw(damaged_request(verb))
    _check_reply(verb, client.post(f"/{verb}", json=body))
    _state_intact(client, state)


@FUZZ
@given(body=damaged_request("bind"))
def test_a_damaged_bind_gets_a_reply_or_a_4xx_and_binds_nothing_it_should_not(
        body: Any) -> None:
    """The captured Binding names a pod the extender never filtered: with any part damaged
    it is bound (a pod the state may place) or refused — and a refusal holds nothing."""
    state = fixture_state()
    client = make_client(state)
    r = client.post("/bind", json=body)
    _check_reply("bind", r)
    if r.status_code >= 400 or r.json()["Error"]:
        assert state.allocations() == []
    assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind"])
@FUZZ
@given(pod=odd_pods())
def test_a_pod_with_any_annotations_and_gpu_quantities_gets_a_reply(
        served: tuple[TestClient, MemoryState], verb: str, pod: dict[str, Any]) -> None:
    client, state = served
    if verb == "bind":  # as kube-scheduler does: filter first (the extender keeps the pod)
        _check_reply("filter", client.post("/filter", json=names_args(pod, NODES)))
    body = bind_args(pod, "gpu-node-01") if verb == "bind" else names_args(pod, NODES)
    r = client.post(f"/{verb}", json=body)
    _check_reply(verb, r)
    if verb == "bind" and r.status_code == 200 and not r.json()["Error"]:
        # bound (with GPUs, or none: a pod asking for none passes through): release it, as
        # the pod watch would on its deletion
        for held in [a for a in state.allocations() if a.pod.name == "odd"]:
            state.release(held.pod.uid)
    _state_intact(client, state)


PREEMPT_MODES = ("-nodecache", "")


@FUZZ
@given(data=st.data())
def test_a_damaged_preempt_request_gets_a_reply_or_a_4xx(data: st.DataObject) -> None:
    """kube-scheduler's captured ``/preempt`` requests (both forms), one part damaged: the
    reply still names only nodes it was asked about, each with its victims as a list, or
    is a 4xx; the book is untouched (preempt only reads)."""
    suffix = data.draw(st.sampled_from(PREEMPT_MODES))
    state = scene_state(load(f"scene-pods{suffix}.json"))
    before = sorted((a.pod.uid, a.node, a.gpus) for a in state.allocations())
    body = data.draw(damaged(load(f"preempt-request{suffix}.json")))
    r = make_client(state).post("/preempt", json=body)
    assert r.status_code < 500, (r.status_code, r.text[:300])
    reply = r.json()
    if r.status_code >= 400:
        assert isinstance(reply.get("Error"), str) and reply["Error"]
        assert "\n" not in reply["Error"]
    else:
        asked = set()
        if isinstance(body, dict):
            for form in ("NodeNameToVictims", "NodeNameToMetaVictims"):
                if isinstance(body.get(form), dict):
                    asked |= set(body[form])
        kept = reply.get("NodeNameToMetaVictims") or {}
        assert set(kept) <= asked, (kept, asked)
        for victims in kept.values():
            assert isinstance(victims["Pods"], list)
            assert isinstance(victims["NumPDBViolations"], int)
    assert sorted((a.pod.uid, a.node, a.gpus) for a in state.allocations()) == before
