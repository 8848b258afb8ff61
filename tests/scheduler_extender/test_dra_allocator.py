"""The DRA allocator against a fake API: claims get the policy's set on the live free GPUs,
several claims per pod share one decision, other drivers' claims are left alone, nothing is
handed out twice, a restart rebuilds the same state, and what it cannot honour is said."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_extender.dra.claims import DELETE_PROTECTION, SCHEDULING_GATE, ClaimAsk
from scheduler_extender.dra.state import DraState
from scheduler_extender.kubernetes_state import ApiError
from scheduler_extender.pending import CONDITION_POSTPONED, may_postpone, postponed_at
from tests.scheduler_extender.dra_fakes import (
    claim_obj,
    cluster,
    drain,
    gpus,
    held_claim_writes,
    pod_obj,
    share,
    slot,
)
from topology import catalog, dra
from topology.contract import ANN_GPU_INDICES, ANN_PATTERN, ANN_POLICY_USED
from topology.patterns import parse_pattern
from topology.policies.base import NodeState, NoFit, Request
from topology.policies.evaluate import Evaluator

DGX1 = catalog.get("dgx1-v100")
place = Evaluator().place


def _devices(claim: dict[str, Any]) -> list[str]:
    return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]


def _indices(claim: dict[str, Any]) -> list[int]:
    return [dra.parse_device_name(d).index for d in _devices(claim)]


def _node(claim: dict[str, Any]) -> str:
    sel = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]
    return str(sel["matchFields"][0]["values"][0])


def test_a_ring_claim_gets_the_policys_set_and_the_pod_its_gate_lifted() -> None:
    # the slices carry the driver's allocator taint on every device (there for kube-scheduler's
    # allocator): gputopo's allocator allocates them all the same
    assert all(d["taints"] == [dra.ALLOCATOR_TAINT] for s in dra.resource_slices(DGX1, "n0")
               for d in s["spec"].get("devices", []))
    alloc, api = cluster({"n0": "dgx1-v100"})
    pod = pod_obj("ns", "ring", [("g", "ring-gpus")], annotations={ANN_PATTERN: "ring"})
    api.add_claim(claim_obj("ns", "ring-gpus", [gpus("gpus", 4)]))
    api.add_pod(pod)
    drain(alloc)
    claim = api.claims["ns/ring-gpus"]
    want = place("gputopo", DGX1, NodeState(),
                 Request(count=4, pattern=parse_pattern("ring", 4)))
    assert sorted(_indices(claim)) == list(want.gpus)
    assert _indices(claim) == list(want.mapping)  # the pattern's arrangement, in order
    status = claim["status"]
    assert status["reservedFor"] == [{"resource": "pods", "name": "ring",
                                      "uid": pod["metadata"]["uid"]}]
    assert status["allocation"]["allocationTimestamp"] == "2026-01-01T00:00:00Z"
    assert _node(claim) == "n0"
    # a claim no pod owns gets kube-scheduler's finalizer, so its release deallocates it
    assert DELETE_PROTECTION in claim["metadata"]["finalizers"]
    live = api.pods["ns/ring"]
    assert live["spec"]["schedulingGates"] == []
    assert live["metadata"]["annotations"][ANN_GPU_INDICES] == ",".join(map(str, want.gpus))
    assert live["metadata"]["annotations"][ANN_POLICY_USED] == "gputopo"


def test_the_next_pod_is_decided_on_the_live_free_set() -> None:
    alloc, api = cluster({"n0": "dgx1-v100"})
    api.add_claim(claim_obj("ns", "a", [gpus("g", 3)]))
    api.add_pod(pod_obj("ns", "a", [("g", "a")]))
    drain(alloc)
    taken = set(_indices(api.claims["ns/a"]))
    api.add_claim(claim_obj("ns", "b", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "b", [("g", "b")], annotations={ANN_PATTERN: "ring"}))
    drain(alloc)
    want = place("gputopo", DGX1, NodeState.whole(taken),
                 Request(count=2, pattern=parse_pattern("ring", 2)))
    assert sorted(_indices(api.claims["ns/b"])) == list(want.gpus)
    assert not taken & set(want.gpus)


def test_several_claims_of_one_pod_share_one_decision() -> None:
    alloc, api = cluster({"n0": "dgx1-v100"})
    api.add_claim(claim_obj("ns", "c1", [gpus("g", 2)]))
    api.add_claim(claim_obj("ns", "c2", [gpus("g", 1), gpus("h", 1)]))
    api.add_pod(pod_obj("ns", "p", [("x", "c1"), ("y", "c2")],
                        annotations={ANN_PATTERN: "ring"}))
    drain(alloc)
    want = place("gputopo", DGX1, NodeState(),
                 Request(count=4, pattern=parse_pattern("ring", 4)))
    c1, c2 = api.claims["ns/c1"], api.claims["ns/c2"]
    assert _indices(c1) + _indices(c2) == list(want.mapping)
    assert [r["request"] for r in c2["status"]["allocation"]["devices"]["results"]] == ["g", "h"]
    assert _node(c1) == _node(c2) == "n0"


def test_other_drivers_claims_are_left_to_kube_scheduler() -> None:
    alloc, api = cluster({"n0": "dgx1-v100"})
    nic = claim_obj("ns", "nic", [{"name": "n", "exactly": {"deviceClassName": "nic.example.com",
                                                            "count": 1}}])
    api.add_claim(nic)
    api.add_pod(pod_obj("ns", "cpu", [("n", "nic")]))
    api.add_claim(claim_obj("ns", "gpu", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "both", [("n", "nic"), ("g", "gpu")]))
    drain(alloc)
    assert api.claims["ns/nic"]["status"] == {}  # never written
    assert api.pods["ns/cpu"]["spec"]["schedulingGates"] == []  # its gate is lifted
    assert len(_indices(api.claims["ns/gpu"])) == 1
    assert api.pods["ns/both"]["spec"]["schedulingGates"] == []


def test_a_claim_mixing_drivers_or_with_selectors_is_refused_with_the_reason() -> None:
    alloc, api = cluster({"n0": "dgx1-v100"})
    mixed = claim_obj("ns", "mixed", [gpus("g", 1), {"name": "n", "exactly": {
        "deviceClassName": "nic.example.com"}}])
    sel = claim_obj("ns", "sel", [{"name": "g", "exactly": {
        "deviceClassName": dra.CLASS_GPU, "count": 1,
        "selectors": [{"cel": {"expression": "true"}}]}}])
    for c in (mixed, sel):
        api.add_claim(c)
    api.add_pod(pod_obj("ns", "p1", [("m", "mixed")]))
    api.add_pod(pod_obj("ns", "p2", [("s", "sel")]))
    drain(alloc)
    assert not [w for w in api.writes if w[0] == "claim"]
    reasons = {name: msg for name, _r, msg in api.events}
    assert "mixes gputopo requests" in reasons["p1"]
    assert "selectors are not supported" in reasons["p2"]
    assert api.pods["ns/p1"]["spec"]["schedulingGates"] == [{"name": SCHEDULING_GATE}]


def test_a_pod_that_does_not_fit_waits_and_is_placed_when_gpus_are_freed() -> None:
    alloc, api = cluster({"n0": "dgx1-v100"})
    api.add_claim(claim_obj("ns", "big", [gpus("g", 6)]))
    api.add_pod(pod_obj("ns", "big", [("g", "big")]))
    drain(alloc)
    api.add_claim(claim_obj("ns", "next", [gpus("g", 4)]))
    api.add_pod(pod_obj("ns", "next", [("g", "next")]))
    drain(alloc)
    assert "next" in {n for n, _r, _m in api.events}
    assert alloc.pending()
    assert api.claims["ns/next"]["status"] == {}
    api.delete_pod("ns/big")
    drain(alloc)
    assert len(_indices(api.claims["ns/next"])) == 4
    assert not alloc.pending()


def test_node_selector_and_taints_are_respected() -> None:
    taint = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"}, taints={"n0": [taint]})
    api.add_claim(claim_obj("ns", "a", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "a", [("g", "a")]))
    drain(alloc)
    assert _node(api.claims["ns/a"]) == "n1"
    api.add_claim(claim_obj("ns", "b", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "b", [("g", "b")], tolerations=[{"operator": "Exists"}],
                        nodeSelector={"kubernetes.io/hostname": "n0"}))
    drain(alloc)
    assert _node(api.claims["ns/b"]) == "n0"


def test_a_claim_kube_scheduler_deallocated_is_decided_again_elsewhere() -> None:
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"})
    api.add_claim(claim_obj("ns", "c", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "p", [("g", "c")]))
    drain(alloc)
    first = _node(api.claims["ns/c"])
    # kube-scheduler's PostFilter: the node did not suit the pod; it clears the allocation
    obj = api.claims["ns/c"]
    obj["status"] = {}
    obj["metadata"]["resourceVersion"] = "999"
    alloc.on_claim("MODIFIED", copy.deepcopy(obj))
    drain(alloc)
    assert _node(api.claims["ns/c"]) != first


def test_shares_and_slots_follow_the_device_plugin_accounting() -> None:
    alloc, api = cluster({"n0": "dgx1-v100"})
    api.add_claim(claim_obj("ns", "s1", [share("s", 30, "4Gi")]))
    api.add_pod(pod_obj("ns", "s1", [("s", "s1")]))
    drain(alloc)
    r = api.claims["ns/s1"]["status"]["allocation"]["devices"]["results"]
    assert len(r) == 1 and r[0]["device"].endswith("-share")
    assert r[0]["consumedCapacity"] == {"memory": "4096Mi", "compute": "30"}
    assert r[0]["shareID"]
    gpu = dra.parse_device_name(r[0]["device"]).index
    # the next share packs onto the same GPU (Gaia Fragment: best fit on partly used GPUs)
    api.add_claim(claim_obj("ns", "s2", [share("s", 50, "2Gi")]))
    api.add_pod(pod_obj("ns", "s2", [("s", "s2")]))
    drain(alloc)
    assert _indices(api.claims["ns/s2"]) == [gpu]
    # a whole-GPU claim never gets a GPU that holds shares; a slot never joins a shared GPU
    api.add_claim(claim_obj("ns", "w", [gpus("g", 7)]))
    api.add_pod(pod_obj("ns", "w", [("g", "w")]))
    api.add_claim(claim_obj("ns", "slot", [slot("s")]))
    api.add_pod(pod_obj("ns", "slot", [("s", "slot")], annotations={
        "gputopo.io/profile": "resnet18:64"}))
    drain(alloc)
    assert gpu not in _indices(api.claims["ns/w"])
    assert api.claims["ns/slot"]["status"] == {}  # all 8 GPUs used whole or as shares
    assert "slot" in {n for n, _r, _m in api.events}


def test_a_restart_rebuilds_the_same_held_gpus_from_the_claims() -> None:
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"})
    for i, n in enumerate((3, 2, 1, 4)):
        api.add_claim(claim_obj("ns", f"c{i}", [gpus("g", n)]))
        api.add_pod(pod_obj("ns", f"p{i}", [("g", f"c{i}")]))
    api.add_claim(claim_obj("ns", "sh", [share("s", 25, "1Gi")]))
    api.add_pod(pod_obj("ns", "sh", [("s", "sh")]))
    drain(alloc)
    fresh = DraState()
    for name in ("n0", "n1"):
        fresh.apply_node("ADDED", {"metadata": {"name": name, "annotations": {
            "gputopo.io/topology": alloc.state._node_ann[name]}}})  # noqa: SLF001
        for s in dra.resource_slices(DGX1, name):
            fresh.apply_slice("ADDED", s)
    fresh.resync_claims(copy.deepcopy(list(api.claims.values())))
    for name in ("n0", "n1"):
        assert fresh.node_state(name).key() == alloc.state.node_state(name).key()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.sampled_from(["ring", "all-to-all"]),
                          st.booleans(), st.booleans()), min_size=1, max_size=14))
def test_no_gpu_is_allocated_twice_and_each_claim_gets_the_policys_set(
    stream: list[tuple[int, str, bool, bool]],
) -> None:
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"})
    nodes = ("n0", "n1")

    def allocated() -> dict[str, tuple[str, set[int]]]:
        return {k: (_node(c), set(_indices(c))) for k, c in api.claims.items()
                if c["status"].get("allocation")}

    for i, (k, pattern, sensitive, leave) in enumerate(stream):
        before = {n: alloc.state.node_state(n) for n in nodes}
        had = allocated()
        ann = {ANN_PATTERN: pattern, "gputopo.io/bandwidth-sensitive": str(sensitive).lower()}
        api.add_claim(claim_obj("ns", f"c{i}", [gpus("g", k)]))
        api.add_pod(pod_obj("ns", f"p{i}", [("g", f"c{i}")], annotations=ann))
        drain(alloc)
        now = allocated()
        for n in nodes:  # never twice, and the book is exactly the claims
            held = [g for node, got in now.values() if node == n for g in got]
            assert len(held) == len(set(held)), "a GPU handed out twice"
            assert {g for a in alloc.state.book.on_node(n) for g in a.gpus} == set(held)
        request = Request(count=k, pattern=parse_pattern(pattern, k),
                          bandwidth_sensitive=sensitive)
        new = set(now) - set(had)
        if f"ns/c{i}" not in now:  # it waits: no node can host it now, or every node with
            # room postponed it (a sensitive multi-GPU pod asks with wait_for_better)
            asked = replace(request, wait_for_better=may_postpone(request, "gputopo"))
            for n in nodes:
                with pytest.raises(NoFit):
                    place("gputopo", DGX1, before[n], asked)
        elif new == {f"ns/c{i}"}:  # decided on the live state it arrived to
            node, got = now[f"ns/c{i}"]
            assert got == set(place("gputopo", DGX1, before[node], request).gpus)
        if leave:
            api.delete_pod(f"ns/p{i}")
            drain(alloc)


def test_the_parsed_claim_knows_whose_it_is() -> None:
    alloc, api = cluster({"n0": "dgx1-v100"})
    pod = pod_obj("ns", "p", [("g", "p-g")])
    claim = claim_obj("ns", "p-g", [gpus("g", 1)], owner=pod)
    api.add_claim(claim)
    api.add_pod(pod)
    drain(alloc)
    seen = alloc.state.claim("ns/p-g")
    assert seen is not None and isinstance(seen[1], ClaimAsk)
    assert seen[1].owner_pod == pod["metadata"]["uid"]
    # a claim its pod owns is deleted with the pod: no finalizer needed
    assert DELETE_PROTECTION not in api.claims["ns/p-g"]["metadata"].get("finalizers", [])


@pytest.mark.parametrize("bad", [
    {"name": "g", "exactly": {"deviceClassName": dra.CLASS_GPU, "allocationMode": "All"}},
    {"name": "g", "firstAvailable": [{"name": "a", "deviceClassName": dra.CLASS_GPU}]},
    {"name": "g", "exactly": {"deviceClassName": dra.CLASS_SHARE, "count": 2}},
    {"name": "g", "exactly": {"deviceClassName": dra.CLASS_SHARE, "count": 1}},
    {"name": "g", "exactly": {"deviceClassName": dra.CLASS_SLOT, "count": 1, "capacity": {
        "requests": {"compute": "10"}}}},
])
def test_unsupported_requests_are_named(bad: dict[str, Any]) -> None:
    alloc, api = cluster({"n0": "dgx1-v100"})
    api.add_claim(claim_obj("ns", "c", [bad]))
    api.add_pod(pod_obj("ns", "p", [("g", "c")]))
    drain(alloc)
    assert api.events and "claim ns/c" in api.events[0][2]
    assert not [w for w in api.writes if w[0] == "claim"]


def test_a_pod_event_during_its_writes_does_not_decide_it_twice() -> None:
    """The pod watch replaces a pod's record on every event (the resourceclaim controller's
    status update, say) while its claim write is in flight: the pod must not be decided again
    (a second decision would take other GPUs and, until the first write showed up, leave the
    first set looking free)."""

    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"})
    gate = held_claim_writes(api)
    pod = pod_obj("ns", "p", [("g", "c")])
    again = copy.deepcopy(pod)
    again["status"]["conditions"] = [{"type": "PodScheduled", "status": "False"}]
    decide = alloc.decider.decide

    def decide_while_the_pod_changes(*args: Any, **kwargs: Any) -> Any:
        alloc.on_pod("MODIFIED", again)  # the watch thread, in the middle of the decision
        return decide(*args, **kwargs)

    alloc.decider.decide = decide_while_the_pod_changes  # type: ignore[method-assign]
    api.add_claim(claim_obj("ns", "c", [gpus("g", 2)]))
    api.add_pod(pod)
    alloc.sync("ns/p")  # decides, the write now waits
    alloc.decider.decide = decide  # type: ignore[method-assign]
    alloc.sync("ns/p")  # must not decide again
    assert [w for w in api.writes if w[0] == "claim"] == []
    held = alloc.state.book.all()
    assert len(held) == 1 and not held[0].confirmed
    gate.set()
    drain(alloc)
    assert [w for w in api.writes if w[0] == "claim"] == [("claim", "ns/c")]
    assert len(_indices(api.claims["ns/c"])) == 2


def _taint_devices(alloc: Any, machine: str, node: str, taints: dict[str, list[dict[str, str]]],
                   generation: int = 2) -> None:
    """Publish ``node``'s pool again with extra taints on the named devices (beside the
    driver's allocator taint every device carries)."""
    for s in dra.resource_slices(catalog.get(machine), node, generation=generation):
        for d in s["spec"].get("devices", []):
            d["taints"] = d["taints"] + taints.get(d["name"], [])
        alloc.on_slice("ADDED", s)


def test_a_device_taint_keeps_its_gpu_from_requests_not_tolerating_it() -> None:
    drained = {"key": "example.com/drain", "value": "maintenance", "effect": "NoSchedule"}
    evict = {"key": "example.com/broken", "value": "", "effect": "NoExecute"}
    harmless = {"key": "example.com/note", "value": "x", "effect": "None"}
    alloc, api = cluster({"n0": "dgx1-v100"})
    taints = {f"gpu-{i}": [drained] for i in range(5)}
    taints["gpu-5"] = [evict]
    taints["gpu-6"] = [harmless]  # effect None never prevents an allocation
    _taint_devices(alloc, "dgx1-v100", "n0", taints)
    # whole GPUs: only 6 and 7 are free for a request tolerating nothing
    api.add_claim(claim_obj("ns", "a", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "a", [("g", "a")]))
    drain(alloc)
    assert sorted(_indices(api.claims["ns/a"])) == [6, 7]
    # a wrong value, or the wrong effect, does not tolerate; the reason names the taints
    wrong = [{"key": "example.com/drain", "operator": "Equal", "value": "other"},
             {"key": "example.com/drain", "operator": "Exists", "effect": "NoExecute"}]
    api.add_claim(claim_obj("ns", "b", [{"name": "g", "exactly": {
        "deviceClassName": dra.CLASS_GPU, "count": 2, "tolerations": wrong}}]))
    api.add_pod(pod_obj("ns", "b", [("g", "b")]))
    drain(alloc)
    assert api.claims["ns/b"]["status"] == {}
    reason = [m for n, _r, m in api.events if n == "b"][-1]
    assert "GPU 0 example.com/drain=maintenance:NoSchedule" in reason
    assert "GPU 5 example.com/broken=:NoExecute" in reason
    # tolerating the drain taint (Equal, any effect) opens GPUs 0-4, not the NoExecute one
    ok = [{"key": "example.com/drain", "operator": "Equal", "value": "maintenance"}]
    api.add_claim(claim_obj("ns", "c1", [{"name": "g", "exactly": {
        "deviceClassName": dra.CLASS_GPU, "count": 2, "tolerations": ok}}]))
    api.add_claim(claim_obj("ns", "c2", [{"name": "g", "exactly": {
        "deviceClassName": dra.CLASS_GPU, "count": 2,
        "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}]}}]))
    api.add_pod(pod_obj("ns", "c", [("x", "c1"), ("y", "c2")]))
    drain(alloc)
    got = set(_indices(api.claims["ns/c1"])) | set(_indices(api.claims["ns/c2"]))
    assert len(got) == 4 and got <= {0, 1, 2, 3, 4}
    # the pod still waiting on the wrong tolerations stays off them (it asked 2 of 1 left)
    assert api.claims["ns/b"]["status"] == {}
    # the taint removed (a new pool generation): its GPU is free again for anyone
    _taint_devices(alloc, "dgx1-v100", "n0", {}, generation=3)
    drain(alloc)
    assert len(_indices(api.claims["ns/b"])) == 2


def test_a_taint_on_the_whole_gpu_device_leaves_its_share_device_alone() -> None:
    # kube-scheduler checks the taints of the device it allocates: a share request gets
    # gpu-<i>-share, so only that device's taints count for it
    drained = {"key": "example.com/drain", "value": "", "effect": "NoSchedule"}
    alloc, api = cluster({"n0": "dgx1-v100"})
    _taint_devices(alloc, "dgx1-v100", "n0",
                   {**{f"gpu-{i}": [drained] for i in range(8)},
                    **{f"gpu-{i}-share": [drained] for i in range(8) if i != 3}})
    api.add_claim(claim_obj("ns", "s", [share("s", 30, "4Gi")]))
    api.add_pod(pod_obj("ns", "s", [("s", "s")]))
    api.add_claim(claim_obj("ns", "w", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "w", [("g", "w")]))
    drain(alloc)
    assert _indices(api.claims["ns/s"]) == [3]
    assert api.claims["ns/w"]["status"] == {}


def test_only_the_drivers_own_allocator_taint_is_ignored() -> None:
    # the same key with another value or effect is somebody else's taint
    other = {**dra.ALLOCATOR_TAINT, "value": "someone-else"}
    alloc, api = cluster({"n0": "dgx1-v100"})
    _taint_devices(alloc, "dgx1-v100", "n0", {f"gpu-{i}": [other] for i in range(7)})
    api.add_claim(claim_obj("ns", "a", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "a", [("g", "a")]))
    drain(alloc)
    assert _indices(api.claims["ns/a"]) == [7]


def _rule(name: str, taint: dict[str, str], **selector: str) -> dict[str, Any]:
    """A DeviceTaintRule (resource.k8s.io/v1beta2) as the API returns it."""
    spec: dict[str, Any] = {"taint": taint}
    if selector:
        spec["deviceSelector"] = selector
    return {"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule",
            "metadata": {"name": name}, "spec": spec}


def test_device_taint_rules_taint_the_devices_they_select() -> None:
    # kube-scheduler's ResourceSlice tracker appends a rule's taint to every device whose
    # driver, pool and name match its selector (unset fields match any); so does the allocator
    drain_t = {"key": "example.com/drain", "value": "", "effect": "NoSchedule"}
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"})
    alloc.on_taint_rule("ADDED", _rule("n1-all", drain_t, pool="n1"))
    for i in range(6):
        alloc.on_taint_rule("ADDED", _rule(f"n0-{i}", drain_t, driver=dra.DRIVER, pool="n0",
                                           device=f"gpu-{i}"))
    # other drivers' rules, and rules on the share view, leave the whole GPUs alone
    alloc.on_taint_rule("ADDED", _rule("nic", drain_t, driver="nic.example.com"))
    alloc.on_taint_rule("ADDED", _rule("share-7", drain_t, device="gpu-7-share"))
    # effect None never prevents an allocation
    alloc.on_taint_rule("ADDED", _rule("note", {**drain_t, "effect": "None"}))
    api.add_claim(claim_obj("ns", "a", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "a", [("g", "a")]))
    drain(alloc)
    assert (_node(api.claims["ns/a"]), sorted(_indices(api.claims["ns/a"]))) == ("n0", [6, 7])
    api.add_claim(claim_obj("ns", "b", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "b", [("g", "b")]))
    drain(alloc)
    assert api.claims["ns/b"]["status"] == {}
    assert "example.com/drain=:NoSchedule" in [m for n, _r, m in api.events if n == "b"][-1]
    # a selector-less rule taints every device, of every pool
    alloc.on_taint_rule("DELETED", _rule("n1-all", drain_t, pool="n1"))
    alloc.on_taint_rule("ADDED", _rule("everything", {**drain_t, "key": "x/all"}))
    drain(alloc)
    assert api.claims["ns/b"]["status"] == {}
    # the rule removed: n1's GPUs are free again
    alloc.on_taint_rule("DELETED", _rule("everything", drain_t))
    drain(alloc)
    assert _node(api.claims["ns/b"]) == "n1"
    # a request tolerating the rule's taint may use the GPUs it selects
    api.add_claim(claim_obj("ns", "c", [{"name": "g", "exactly": {
        "deviceClassName": dra.CLASS_GPU, "count": 6,
        "tolerations": [{"key": "example.com/drain", "operator": "Exists"}]}}]))
    api.add_pod(pod_obj("ns", "c", [("g", "c")], nodeSelector={"kubernetes.io/hostname": "n0"}))
    drain(alloc)
    assert sorted(_indices(api.claims["ns/c"])) == [0, 1, 2, 3, 4, 5]


def test_an_api_server_without_device_taint_rules_is_not_an_error() -> None:
    from scheduler_extender.dra.service import Feeds

    alloc, _api = cluster({"n0": "dgx1-v100"})

    class NoRules:
        def __getattr__(self, name: str) -> Any:
            if name == "list_taint_rules":
                def refuse() -> Any:
                    raise ApiError("404 Not Found", 404)
                return refuse
            return lambda *a, **k: ([], "1")

    feeds = Feeds(cast(Any, NoRules()), alloc)
    feeds.sync()
    assert feeds.taint_rules_served is False and alloc.state.ready()


def _tolerating(name: str, count: int, *tolerations: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": dra.CLASS_GPU, "count": count,
                                      "tolerations": list(tolerations)}}


def test_tolerations_are_per_request_as_in_kube_scheduler() -> None:
    # GPUs 0 and 1 drained; a 4-GPU ring over claim A (tolerates the drain) and claim B
    # (tolerates nothing). kube-scheduler checks each request's own tolerations, so A may take
    # 0 and 1: the pod gets the policy's best set on the whole node, B none of 0 and 1
    drained = {"key": "example.com/drain", "value": "", "effect": "NoSchedule"}
    ok = {"key": "example.com/drain", "operator": "Exists"}
    alloc, api = cluster({"n0": "dgx1-v100"})
    _taint_devices(alloc, "dgx1-v100", "n0", {f"gpu-{i}": [drained] for i in range(2)})
    api.add_claim(claim_obj("ns", "a", [_tolerating("g", 2, ok)]))
    api.add_claim(claim_obj("ns", "b", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "p", [("x", "a"), ("y", "b")],
                        annotations={ANN_PATTERN: "ring"}))
    drain(alloc)
    a, b = _indices(api.claims["ns/a"]), _indices(api.claims["ns/b"])
    best = place("gputopo", DGX1, NodeState.whole(()),
                 Request(count=4, pattern=parse_pattern("ring", 4)))
    assert sorted(a + b) == sorted(best.gpus) and not set(b) & {0, 1}
    # the pod's annotations give the order handed out (A's GPUs, then B's)
    assert api.pods["ns/p"]["metadata"]["annotations"][ANN_GPU_INDICES] == ",".join(
        map(str, a + b))
    api.delete_pod("ns/p")
    # GPUs 0-5 drained, A asks 4 and B 2: the policy's best 6-GPU set leaves B without two
    # clean GPUs and the set every request tolerates ({6, 7}) is too small, so the pod waits
    # (kube-scheduler's first fit would mix: the policies take one free set per decision)
    _taint_devices(alloc, "dgx1-v100", "n0", {f"gpu-{i}": [drained] for i in range(6)},
                   generation=3)
    api.add_claim(claim_obj("ns", "c", [_tolerating("g", 4, ok)]))
    api.add_claim(claim_obj("ns", "d", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "q", [("x", "c"), ("y", "d")], annotations={ANN_PATTERN: "ring"}))
    drain(alloc)
    assert api.claims["ns/c"]["status"] == {} and api.claims["ns/d"]["status"] == {}
    assert "GPU 5 example.com/drain=:NoSchedule" in [m for n, _r, m in api.events if n == "q"][-1]
    # GPUs nobody tolerates are never used: with A tolerating nothing either, a pod of two
    # 1-GPU claims gets 6 and 7
    api.add_claim(claim_obj("ns", "e", [gpus("g", 1)]))
    api.add_claim(claim_obj("ns", "f", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "r", [("x", "e"), ("y", "f")]))
    drain(alloc)
    assert sorted(_indices(api.claims["ns/e"]) + _indices(api.claims["ns/f"])) == [6, 7]


def test_assign_tolerated_keeps_the_pattern_split_where_allowed() -> None:
    from scheduler_extender.dra.allocator import assign_tolerated

    assert assign_tolerated([3, 1, 2, 0], [2, 2], [(), ()]) == [3, 1, 2, 0]
    # request 1 may not have GPU 2: GPU 2 moves to request 0, the fewest moves
    got = assign_tolerated([3, 1, 2, 0], [2, 2], [(), (2,)])
    assert got is not None and 2 in got[:2] and sorted(got) == [0, 1, 2, 3]
    # nobody may have GPU 2: no assignment
    assert assign_tolerated([3, 1, 2, 0], [2, 2], [(2,), (2,)]) is None
    # request 1 may have only GPU 0: it gets it, request 0 the rest in their order
    assert assign_tolerated([0, 1, 2, 3], [3, 1], [(), (1, 2, 3)]) == [1, 2, 3, 0]


def _five_on_the_issue_set(**kw: Any) -> tuple[Any, Any]:
    """One DGX-1 V100 whose 5-GPU claim holds {0,2,3,4,7} (issue 24's case): {1,5,6} free."""
    alloc, api = cluster({"n0": "dgx1-v100"}, **kw)
    api.add_claim(claim_obj("ns", "five", [gpus("g", 5)]))
    api.add_pod(pod_obj("ns", "five", [("g", "five")]))
    drain(alloc)
    obj = api.claims["ns/five"]  # pin the set the issue names
    for r, g in zip(obj["status"]["allocation"]["devices"]["results"], (0, 2, 3, 4, 7),
                    strict=True):
        r["device"] = dra.device_name(g)
    obj["metadata"]["resourceVersion"] = "999"
    alloc.on_claim("MODIFIED", copy.deepcopy(obj))
    return alloc, api


def _three_postponed(now: list[float], wall: list[float], bound: float = 300) -> tuple[Any, Any]:
    """Issue 24's case with a bound of ``bound`` s: a bandwidth-sensitive 3-GPU ring postponed
    (only {1,5,6} free) on clocks ``now`` (monotonic) and ``wall`` (Unix s)."""
    alloc, api = _five_on_the_issue_set(postpone_max_s=bound, monotonic=lambda: now[0],
                                        wall=lambda: wall[0])
    api.add_claim(claim_obj("ns", "three", [gpus("g", 3)]))
    api.add_pod(pod_obj("ns", "three", [("g", "three")], annotations={ANN_PATTERN: "ring"}))
    drain(alloc)
    assert "ns/three" in alloc.pending()
    return alloc, api


def _met_by_a_new_allocator(pod: dict[str, Any], now: list[float], wall: list[float],
                            bound: float = 300) -> tuple[Any, Any]:
    """A new allocator (a new leader, with its own monotonic origin) meeting issue 24's
    postponed ring ``pod`` with its claim; the ring is still waiting."""
    alloc, api = _five_on_the_issue_set(postpone_max_s=bound, monotonic=lambda: now[0],
                                        wall=lambda: wall[0])
    api.add_claim(claim_obj("ns", "three", [gpus("g", 3)]))
    api.add_pod(pod)
    drain(alloc)
    assert "ns/three" in alloc.pending()
    return alloc, api


def test_a_postponement_is_kept_in_the_pod_for_the_next_allocator() -> None:
    """The first postponement is written into the pod (the extender's condition); a new
    allocator (a new leader) that meets the pod 200 s into the wait continues the clock and
    allocates {1,5,6} at the bound, 100 s later, not 300 s later; the condition then says
    the wait ended, and once the claim is allocated that the pod was placed."""
    now, wall = [0.0], [1_767_225_600.0]  # 2026-01-01T00:00:00Z
    alloc, api = _three_postponed(now, wall)
    pod = copy.deepcopy(api.pods["ns/three"])
    assert postponed_at(pod) == wall[0]
    assert [c["reason"] for c in pod["status"]["conditions"]] == ["WaitingForBetterGPUs"]
    assert api.writes.count(("conditions", "ns/three")) == 1  # once, at the start
    now[0], wall[0] = 5000.0, wall[0] + 200  # another process: another monotonic origin
    alloc, api = _met_by_a_new_allocator(pod, now, wall)
    now[0], wall[0] = now[0] + 99.0, wall[0] + 99.0
    assert alloc.recheck_postponed() == []
    now[0], wall[0] = now[0] + 1.0, wall[0] + 1.0
    assert alloc.recheck_postponed() == ["ns/three"]
    drain(alloc)
    assert sorted(_indices(api.claims["ns/three"])) == [1, 5, 6]
    # marked ended at the bound, then placed: it waits no more (status False, since when)
    assert api.writes.count(("conditions", "ns/three")) == 2
    cond = api.pods["ns/three"]["status"]["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "Placed")
    assert cond["lastTransitionTime"] == "2026-01-01T00:05:00Z"
    assert cond["message"].startswith(
        "gputopo postponed this pod for a better GPU set from 2026-01-01T00:00:00Z for 300 s")
    assert postponed_at(api.pods["ns/three"]) is None


def test_a_pod_the_watch_sees_bound_before_its_release_returns_is_still_placed() -> None:
    """Released from its scheduling gate, the pod may be scheduled, bound and delivered by
    the pod watch (which forgets its clock) before the release call returns: the postponed
    pod's condition still turns ``False``, ``Placed``."""
    now, wall = [0.0], [1_767_225_600.0]
    alloc, api = _three_postponed(now, wall)
    release = api.release_pod

    def release_and_bind(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> None:
        release(pod, annotations)
        bound = copy.deepcopy(api.pods["ns/three"])
        bound["spec"]["nodeName"] = "n0"
        alloc.on_pod("MODIFIED", bound)  # kube-scheduler was quick

    api.release_pod = release_and_bind  # type: ignore[method-assign]
    now[0], wall[0] = now[0] + 300.0, wall[0] + 300.0
    assert alloc.recheck_postponed() == ["ns/three"]
    drain(alloc)
    assert sorted(_indices(api.claims["ns/three"])) == [1, 5, 6]
    alloc.stop()  # every write done
    cond = api.pods["ns/three"]["status"]["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "Placed")


def _placed_lost(now: list[float], wall: list[float]) -> tuple[Any, Any]:
    """Issue 24's postponed 3-GPU ring allocated at its bound, its ``Placed`` write lost
    (the API refused it): the condition still says ``True``, the gate is gone."""
    alloc, api = _three_postponed(now, wall)
    patch = api.patch_pod_conditions

    def refuse_placed(namespace: str, name: str, uid: str,
                      conditions: list[dict[str, str]]) -> None:
        if conditions[0]["reason"] == "Placed":
            raise ApiError("503 Service Unavailable", 503)
        patch(namespace, name, uid, conditions)

    api.patch_pod_conditions = refuse_placed
    now[0], wall[0] = now[0] + 300.0, wall[0] + 300.0
    assert alloc.recheck_postponed() == ["ns/three"]
    drain(alloc)
    assert sorted(_indices(api.claims["ns/three"])) == [1, 5, 6]
    assert postponed_at(api.pods["ns/three"]) is not None  # still says it waits
    api.patch_pod_conditions = patch
    return alloc, api


def test_a_pod_bound_with_its_condition_still_true_is_marked_placed_after_the_grace() -> None:
    """The pod's ``Placed`` write was lost (or a leader stopped before it, or the gate was
    removed by hand): when kube-scheduler binds it, the pending watch's DELETED still shows
    the condition ``True``; :attr:`placed_check_s` later the allocator reads the pod and marks
    it ``Placed`` as of its ``PodScheduled`` time — once, not before the grace."""
    now, wall = [0.0], [1_767_225_600.0]
    alloc, api = _placed_lost(now, wall)
    api.bind("ns/three", "n0", "2026-01-01T00:05:03Z")
    assert "ns/three" not in alloc.pending()
    now[0] += alloc.placed_check_s - 0.5
    assert alloc.check_placed() == []
    now[0] += 0.5
    assert alloc.check_placed() == ["ns/three"]
    assert alloc.check_placed() == []  # once
    alloc.stop()  # every write done
    cond = {c["type"]: c for c in api.pods["ns/three"]["status"]["conditions"]}
    placed = cond[CONDITION_POSTPONED]
    assert (placed["status"], placed["reason"]) == ("False", "Placed")
    assert placed["lastTransitionTime"] == "2026-01-01T00:05:03Z"
    assert placed["message"] == ("gputopo postponed this pod for a better GPU set from "
                                 "2026-01-01T00:00:00Z for 303 s; it was then placed on node n0")
    assert api.writes.count(("get", "ns/three")) == 1


@pytest.mark.parametrize("then", ["deleted", "replaced", "placed meanwhile"])
def test_a_pod_that_left_with_its_condition_true_is_left_alone_when_the_read_says_so(
        then: str) -> None:
    """The re-read finds the pod deleted (it left the pending watch for that), another pod
    under its name, or already ``Placed`` (this allocator's own write landed after the
    watch's copy): nothing is written."""
    now, wall = [0.0], [1_767_225_600.0]
    alloc, api = _placed_lost(now, wall)
    if then == "deleted":
        api.delete_pod("ns/three")
    else:
        api.bind("ns/three", "n0", "2026-01-01T00:05:03Z")
        live = api.pods["ns/three"]
        if then == "replaced":
            live["metadata"]["uid"] = "another"
        else:
            live["status"]["conditions"][0].update(status="False", reason="Placed")
    before = copy.deepcopy(api.pods.get("ns/three"))
    now[0] += alloc.placed_check_s
    assert alloc.check_placed() == ["ns/three"]
    alloc.stop()
    assert api.pods.get("ns/three") == before
    assert api.writes[-1] == ("get", "ns/three")


def test_a_pod_placed_here_is_not_read_again() -> None:
    """The usual path: the allocator's ``Placed`` write lands before kube-scheduler binds the
    pod, so the watch's last copy shows ``False``: no re-read."""
    now, wall = [0.0], [1_767_225_600.0]
    alloc, api = _three_postponed(now, wall)
    now[0], wall[0] = now[0] + 300.0, wall[0] + 300.0
    assert alloc.recheck_postponed() == ["ns/three"]
    drain(alloc)
    api.bind("ns/three", "n0", "2026-01-01T00:05:03Z")
    now[0] += alloc.placed_check_s
    assert alloc.check_placed() == []
    assert ("get", "ns/three") not in api.writes


def test_the_bounds_ended_condition_never_lands_after_placed() -> None:
    """At the bound the allocator writes the "ended" condition and, in the same pass,
    allocates the pod, whose writes (on a pool of writer threads, as in production) queue
    "placed". However slow the "ended" write is — still held when the allocation's writes
    are done — the pod ends with the condition decided last: ``False``, ``Placed``."""
    now, wall = [0.0], [1_767_225_600.0]
    alloc, api = _three_postponed(now, wall)
    alloc._writers = ThreadPoolExecutor(max_workers=2)  # noqa: SLF001 - as in production
    gate = threading.Event()
    patch = api.patch_pod_conditions

    def slow(namespace: str, name: str, uid: str, conditions: list[dict[str, str]]) -> None:
        if conditions[0]["reason"] == "PostponementEnded":
            gate.wait(10.0)  # the apiserver is slow to take this one
        patch(namespace, name, uid, conditions)

    api.patch_pod_conditions = slow  # type: ignore[method-assign]
    now[0], wall[0] = now[0] + 300.0, wall[0] + 300.0
    assert alloc.recheck_postponed() == ["ns/three"]  # "ended" on its way
    with alloc._lock:  # noqa: SLF001 - the test drives the loop itself
        key, _ = alloc._queue.popitem(last=False)  # noqa: SLF001
    alloc.sync(key)
    alloc._writers.shutdown(wait=True)  # noqa: SLF001 - the allocation's writes are done
    assert sorted(_indices(api.claims["ns/three"])) == [1, 5, 6]
    gate.set()  # only now does the apiserver take "ended"
    alloc.stop()  # every write done
    cond = api.pods["ns/three"]["status"]["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "Placed")


def test_a_sensitive_ring_waits_for_a_better_set_within_the_bound() -> None:
    """Issue 24's case on the DRA path, as the extender's filter decides it: a 5-GPU claim
    holds {0,2,3,4,7} of a DGX-1 V100; a bandwidth-sensitive 3-GPU ring would get {1,5,6}
    (48 % of its ideal by the bottleneck), so it waits ("waiting for a better GPU set"), is
    allocated an NVLink triangle once the 5-GPU pod goes, or {1,5,6} once ``postpone_max_s``
    has passed since its first postponement; an insensitive ring does not wait."""
    now = [0.0]

    def setup(**kw: Any) -> tuple[Any, Any]:
        return _five_on_the_issue_set(monotonic=lambda: now[0], **kw)

    ring = {ANN_PATTERN: "ring"}
    alloc, api = setup(postpone_max_s=300)
    api.add_claim(claim_obj("ns", "three", [gpus("g", 3)]))
    api.add_pod(pod_obj("ns", "three", [("g", "three")], annotations=ring))
    drain(alloc)
    assert api.claims["ns/three"]["status"] == {}
    why = alloc.pending()["ns/three"]
    assert why.startswith("waiting for a better GPU set") and "{1,5,6}" in why
    assert alloc.recheck_postponed() == []
    now[0] = 299.0
    with alloc._lock:  # noqa: SLF001 - a GPU event: still postponed
        alloc._wake_waiting()  # noqa: SLF001
    drain(alloc)
    assert api.claims["ns/three"]["status"] == {}
    now[0] = 300.0  # the bound ends: queued again, it takes what the rule gives
    assert alloc.recheck_postponed() == ["ns/three"]
    drain(alloc)
    assert sorted(_indices(api.claims["ns/three"])) == [1, 5, 6]
    assert not alloc.pending()

    now[0] = 0.0  # the 5-GPU pod goes within the bound: an NVLink triangle
    alloc, api = setup()
    api.add_claim(claim_obj("ns", "three", [gpus("g", 3)]))
    api.add_pod(pod_obj("ns", "three", [("g", "three")], annotations=ring))
    drain(alloc)
    assert "ns/three" in alloc.pending()
    api.delete_pod("ns/five")
    drain(alloc)
    got = sorted(_indices(api.claims["ns/three"]))
    assert got != [1, 5, 6] and len(got) == 3

    for kw, ann in (({}, {**ring, "gputopo.io/bandwidth-sensitive": "false"}),
                    ({"postpone_max_s": 0}, ring)):
        alloc, api = setup(**kw)
        api.add_claim(claim_obj("ns", "three", [gpus("g", 3)]))
        api.add_pod(pod_obj("ns", "three", [("g", "three")], annotations=ann))
        drain(alloc)
        assert sorted(_indices(api.claims["ns/three"])) == [1, 5, 6], kw
