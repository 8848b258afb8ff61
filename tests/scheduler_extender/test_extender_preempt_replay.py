"""Replay the ``/preempt`` requests a real kube-scheduler v1.36.3 sent (both
``nodeCacheCapable`` modes; ``tests/fixtures/kube-scheduler-preempt/README.md``) against the
app over a MemoryState rebuilt from the pods' annotations at the time, and check the reply is
the one the real extender gave."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler_extender.state import Allocation, MemoryState, PodRef
from tests.scheduler_extender.helpers import make_client
from topology import catalog
from topology.contract import has_assignment, parse_assignment

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kube-scheduler-preempt"
NODES = ("dgx-shared", "dgx-plain")
MODES = [("-nodecache", True), ("", False)]


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_bytes())


def scene_state(pods: list[dict[str, Any]]) -> MemoryState:
    """The extender's state when the request was made: both nodes, every pod's assignment."""
    state = MemoryState({n: catalog.get("dgx1-v100") for n in NODES})
    for pod in pods:
        meta, ann = pod["metadata"], pod["metadata"]["annotations"]
        assert has_assignment(ann), meta["name"]
        ref = PodRef(meta["namespace"], meta["name"], meta["uid"])
        node = pod["spec"]["nodeName"]
        state.book.add(Allocation.from_assignment(ref, node, parse_assignment(ann)),
                       catalog.get("dgx1-v100"))
    return state


@pytest.mark.parametrize(("suffix", "node_cache"), MODES, ids=["nodecache", "nodes"])
def test_replay_preempt(suffix: str, node_cache: bool) -> None:
    pods = load(f"scene-pods{suffix}.json")
    by_uid = {p["metadata"]["uid"]: p for p in pods}
    raw = (FIXTURES / f"preempt-request{suffix}.json").read_bytes()
    request = json.loads(raw)

    # the wire format kube-scheduler 1.36 sends
    assert set(request) == {"Pod", "NodeNameToVictims", "NodeNameToMetaVictims"}
    form, other = ("NodeNameToMetaVictims", "NodeNameToVictims") if node_cache else (
        "NodeNameToVictims", "NodeNameToMetaVictims")
    assert request[other] is None
    proposals = request[form]
    assert set(proposals) == set(NODES)
    for node, victims in proposals.items():
        assert set(victims) == {"Pods", "NumPDBViolations"} and victims["NumPDBViolations"] == 0
        uids = [p["UID"] if node_cache else p["metadata"]["uid"] for p in victims["Pods"]]
        assert len(uids) == 2  # two 1-GPU pods: what the scheduler's GPU count needs
        held = [by_uid[u] for u in uids]
        assert all(p["spec"]["nodeName"] == node for p in held)
        assert all("fill" in p["metadata"]["name"] for p in held)  # never the shares
        prios = [p["spec"]["priority"] for p in held]
        assert prios == sorted(prios, reverse=True)  # decreasing importance

    client = make_client(scene_state(pods))
    r = client.post("/preempt", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 200
    recorded = load(f"preempt-reply{suffix}.json")
    assert r.json() == recorded
    # what it says: only dgx-plain, its victims unchanged and in order
    kept = recorded["NodeNameToMetaVictims"]
    assert list(kept) == ["dgx-plain"]
    want = [p["UID"] if node_cache else p["metadata"]["uid"]
            for p in proposals["dgx-plain"]["Pods"]]
    assert [p["UID"] for p in kept["dgx-plain"]["Pods"]] == want
    assert kept["dgx-plain"]["NumPDBViolations"] == 0
