"""What the DRA allocator hands out, seen in the claims and the pod: the node it picks among
several that fit, a set the policy laid out against a request's taints handed out again (and
its EffBW recomputed), co-location slots booked with their residents (thirteenth mutation
round, docs/testing.md)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.scheduler_extender.dra_fakes import (
    FakeAPI,
    claim_obj,
    cluster,
    drain,
    gpus,
    pod_obj,
    slot,
)
from tests.scheduler_extender.test_dra_allocator import _indices, _node
from topology import catalog, dra
from topology.contract import (
    ANN_COLOCATION,
    ANN_EFFBW,
    ANN_GPU_INDICES,
    ANN_PATTERN,
    ANN_POLICY_USED,
    ANN_VGPU_MEMORY,
)
from topology.patterns import parse_pattern
from topology.policies.base import NodeState, Request
from topology.policies.common import effective_bandwidth, mapped_edges
from topology.policies.evaluate import Evaluator

DGX1 = catalog.get("dgx1-v100")
place = Evaluator().place


def _add(api: FakeAPI, name: str, count: int, ann: dict[str, str] | None = None,
         **spec: Any) -> None:
    api.add_claim(claim_obj("ns", name, [gpus("g", count)]))
    api.add_pod(pod_obj("ns", name, [("g", name)], annotations=ann or {}, **spec))


def _on(node: str) -> dict[str, Any]:
    return {"nodeSelector": {"kubernetes.io/hostname": node}}


def _pin(alloc: Any, api: FakeAPI, claim: str, indices: tuple[int, ...]) -> None:
    """Rewrite allocated claim ``claim`` to hold GPUs ``indices`` (a set a test names)."""
    obj = api.claims[claim]
    for r, g in zip(obj["status"]["allocation"]["devices"]["results"], indices, strict=True):
        r["device"] = dra.device_name(g)
    obj["metadata"]["resourceVersion"] = "999"
    alloc.on_claim("MODIFIED", copy.deepcopy(obj))


def _taint(alloc: Any, indices: tuple[int, ...], taint: dict[str, str]) -> None:
    """Publish n0's pool (a DGX-1) again with ``taint`` on the whole-GPU devices named."""
    names = {dra.device_name(i) for i in indices}
    for s in dra.resource_slices(DGX1, "n0", generation=2):
        for d in s["spec"].get("devices", []):
            if d["name"] in names:
                d["taints"] = d["taints"] + [taint]
        alloc.on_slice("ADDED", s)


def _tolerant(name: str, count: int) -> dict[str, Any]:
    """A claim whose request tolerates ``example.com/drain``."""
    return claim_obj("ns", name, [{"name": "g", "exactly": {
        "deviceClassName": dra.CLASS_GPU, "count": count,
        "tolerations": [{"key": "example.com/drain", "operator": "Exists"}]}}])


def test_of_equally_good_nodes_the_one_with_fewer_free_gpus_is_taken() -> None:
    """Ties in score go to the node with the fewest free GPUs (packing), whatever the
    names' order: n1, with 5 free, before n0 with 7."""
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"})
    _add(api, "small", 1, **_on("n0"))
    _add(api, "big", 3, **_on("n1"))
    drain(alloc)
    _add(api, "ring", 4, {ANN_PATTERN: "ring"})
    drain(alloc)
    assert _node(api.claims["ns/ring"]) == "n1"


def test_the_best_scoring_node_wins_over_a_fuller_one() -> None:
    """n1 has only GPUs 0 and 5 free (no NVLink between them), n0 is empty: a
    bandwidth-sensitive 2-GPU ring (no postponement here) goes to n0's NVLink pair, though n1
    has fewer free GPUs."""
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"}, postpone_max_s=0)
    _add(api, "six", 6, **_on("n1"))
    drain(alloc)
    _pin(alloc, api, "ns/six", (1, 2, 3, 4, 6, 7))
    _add(api, "pair", 2, {ANN_PATTERN: "ring", "gputopo.io/bandwidth-sensitive": "true"})
    drain(alloc)
    assert _node(api.claims["ns/pair"]) == "n0"
    assert DGX1.link_bandwidth(*_indices(api.claims["ns/pair"])) > DGX1.link_bandwidth(0, 5)


def _a_tolerant_b_not(taint: dict[str, str], claims: list[tuple[str, str]]
                      ) -> tuple[FakeAPI, list[int], list[int]]:
    """A DGX-1 V100 whose GPU 2 carries ``taint``; one sensitive 4-GPU ring pod with claims
    ``a`` (2 GPUs, tolerating it) and ``b`` (2 GPUs, tolerating nothing) in the order
    ``claims``, decided. Returns the API and the GPUs of ``a`` and of ``b``."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    _taint(alloc, (2,), taint)
    api.add_claim(_tolerant("a", 2))
    api.add_claim(claim_obj("ns", "b", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "p", claims, annotations={ANN_PATTERN: "ring"}))
    drain(alloc)
    return api, _indices(api.claims["ns/a"]), _indices(api.claims["ns/b"])


def test_a_set_handed_out_again_for_a_requests_taints_reports_the_layout_it_got() -> None:
    """GPU 2 drained: claim A (2 GPUs) tolerates the drain, claim B (2 GPUs) does not. The
    policy's best 4-GPU ring on the node is {0,1,2,3} laid 0,1,2,3 — B's half would hold GPU 2
    — so the set is handed out again (A gets GPU 2): each claim gets only GPUs it tolerates,
    the set stays the policy's, and the pod's EffBW annotation is the ring's as the claims lay
    it out, A's GPUs then B's (lower than the policy's own layout)."""
    drained = {"key": "example.com/drain", "value": "", "effect": "NoSchedule"}
    ring = parse_pattern("ring", 4)
    best = place("gputopo", DGX1, NodeState(), Request(count=4, pattern=ring))
    assert best.mapping[2] == 2  # B's half of the policy's layout holds GPU 2
    api, a, b = _a_tolerant_b_not(drained, [("x", "a"), ("y", "b")])
    assert sorted(a + b) == sorted(best.gpus) and 2 in a and 2 not in b
    ann = api.pods["ns/p"]["metadata"]["annotations"]
    assert ann[ANN_GPU_INDICES] == ",".join(map(str, best.gpus))
    laid = effective_bandwidth(DGX1, mapped_edges(ring, a + b), best.bandwidth_model)
    assert ann[ANN_EFFBW] == f"{laid:.1f}"
    assert f"{laid:.1f}" != f"{best.effective_bandwidth_gbps:.1f}"


def test_the_intolerant_request_first_still_gets_the_policys_set() -> None:
    """The same drained GPU 2 with the claims the other way round (B, tolerating nothing,
    first): the policy decides on every GPU some request tolerates — GPU 2 is not out of the
    set — and B's half (the layout's first two GPUs) holds no GPU 2."""
    drained = {"key": "example.com/drain", "value": "", "effect": "NoSchedule"}
    ring = parse_pattern("ring", 4)
    best = place("gputopo", DGX1, NodeState(), Request(count=4, pattern=ring))
    assert 2 in best.gpus and 2 not in best.mapping[:2]
    api, a, b = _a_tolerant_b_not(drained, [("y", "b"), ("x", "a")])
    assert b + a == list(best.mapping) and 2 not in b


def test_a_claim_allocated_already_decides_the_node_of_the_rest() -> None:
    """A pod whose claim is allocated already (shared with a pod placed before it) gets its
    other claims on that node, whatever the policy would prefer elsewhere; a pod whose
    allocated claims are on two nodes cannot be placed, and says so."""
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"})
    _add(api, "five", 5, **_on("n0"))  # n0 the fuller: packing alone would choose it
    _add(api, "first", 2, **_on("n1"))
    drain(alloc)
    api.add_claim(claim_obj("ns", "own", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "second", [("s", "first"), ("o", "own")]))
    drain(alloc)
    assert _node(api.claims["ns/own"]) == "n1"
    assert not set(_indices(api.claims["ns/own"])) & set(_indices(api.claims["ns/first"]))
    assert api.pods["ns/second"]["spec"]["schedulingGates"] == []
    _add(api, "other", 1, **_on("n0"))
    drain(alloc)
    api.add_claim(claim_obj("ns", "third", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "split", [("a", "first"), ("b", "other"), ("c", "third")]))
    drain(alloc)
    assert api.claims["ns/third"]["status"] == {}
    assert [(r, m) for n, r, m in api.events if n == "split"] == [
        ("GPUAllocationPending", "the pod's allocated claims are on different nodes: n0, n1")]


def test_a_pod_kube_scheduler_refused_on_every_node_is_tried_on_them_again() -> None:
    """kube-scheduler deallocates the claim (its PostFilter: the node did not suit the pod for
    another reason) on the only node its selector allows: the allocator does not give up on
    the pod — every node refused once, it tries them all again (not the node its selector
    keeps it off)."""
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"})
    _add(api, "fill", 4, **_on("n1"))  # n1 the fuller: packing alone would choose it
    api.add_claim(claim_obj("ns", "c", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "p", [("g", "c")], **_on("n0")))
    drain(alloc)
    assert _node(api.claims["ns/c"]) == "n0"
    for _ in range(2):
        obj = api.claims["ns/c"]
        obj["status"] = {}
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        alloc.on_claim("MODIFIED", copy.deepcopy(obj))
        drain(alloc)
        assert _node(api.claims["ns/c"]) == "n0"
    assert alloc.metrics.requeued_after_deallocation == 2


def test_why_a_pod_waits_names_each_nodes_reason() -> None:
    """The Event of a pod no node can take: every node's reason, in name order — a node
    selector, a node taint, the policy's own — and nothing appended to a node without device
    taints; and, with no node at all, that no node offers gputopo GPUs."""
    taint = {"key": "dedicated", "value": "x", "effect": "NoExecute"}
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100", "n2": "dgx1-v100"},
                         taints={"n1": [taint]})
    api.add_claim(claim_obj("ns", "c", [gpus("g", 9)]))
    api.add_pod(pod_obj("ns", "p", [("g", "c")], nodeSelector={"zone": "a"}))
    drain(alloc)
    assert api.events == [("p", "GPUAllocationPending", "no node has the GPUs: "
                           "n0: node selector zone=a; n1: node selector zone=a; "
                           "n2: node selector zone=a")]
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"}, taints={"n1": [taint]})
    api.add_claim(claim_obj("ns", "c", [gpus("g", 9)]))
    api.add_pod(pod_obj("ns", "p", [("g", "c")]))
    drain(alloc)
    assert api.events == [("p", "GPUAllocationPending", "no node has the GPUs: "
                           "n0: node has 8 GPUs; the pod asks for 9; "
                           "n1: taint dedicated=x:NoExecute")]
    alloc, api = cluster({})
    api.add_claim(claim_obj("ns", "c", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "p", [("g", "c")]))
    drain(alloc)
    assert api.events == [("p", "GPUAllocationPending", "no node offers gputopo GPUs")]


def test_device_taints_are_named_in_the_reason() -> None:
    drained = {"key": "example.com/drain", "value": "m", "effect": "NoSchedule"}
    alloc, api = cluster({"n0": "dgx1-v100"})
    _taint(alloc, (1, 6), drained)
    api.add_claim(claim_obj("ns", "c", [gpus("g", 7)]))
    api.add_pod(pod_obj("ns", "p", [("g", "c")]))
    drain(alloc)
    reason = [m for n, _r, m in api.events if n == "p"][-1]
    assert reason.startswith("no node has the GPUs: n0: ")
    assert reason.endswith(" (device taints not tolerated: GPU 1 example.com/drain=m:NoSchedule"
                           ", GPU 6 example.com/drain=m:NoSchedule)")


@pytest.mark.parametrize(("ann", "why"), [
    ({"gputopo.io/pattern": "bogus"}, "annotation gputopo.io/pattern: bad pattern 'bogus'"),
    ({"gputopo.io/policy": "nope"}, "annotation gputopo.io/policy: unknown policy 'nope'"),
])
def test_a_pod_that_cannot_be_read_waits_with_the_reason(ann: dict[str, str], why: str) -> None:
    alloc, api = cluster({"n0": "dgx1-v100"})
    _add(api, "p", 2, ann)
    drain(alloc)
    assert [(n, r) for n, r, _m in api.events] == [("p", "GPUAllocationPending")]
    assert api.events[0][2].startswith(f"cannot allocate: {why}")
    assert api.claims["ns/p"]["status"] == {}
    assert api.pods["ns/p"]["spec"]["schedulingGates"]
    assert alloc.pending() == {"ns/p": api.events[0][2]}


def test_each_decision_is_counted() -> None:
    """``decisions`` (exported as ``gputopo_dra_allocator_decisions_total``) counts the
    policy's passes: one per pod decided, and one more when a set must be decided again on
    the GPUs every request tolerates."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    _add(api, "a", 2)
    _add(api, "b", 9)
    drain(alloc)
    assert alloc.metrics.decisions == 2
    # GPUs 0-5 drained, a 4-GPU claim tolerating it and a 2-GPU one not: the policy's set
    # leaves the second without two clean GPUs; decided again on {6, 7}: too few, it waits
    alloc, api = cluster({"n0": "dgx1-v100"})
    _taint(alloc, (0, 1, 2, 3, 4, 5), {"key": "example.com/drain", "value": "",
                                       "effect": "NoSchedule"})
    api.add_claim(_tolerant("c", 4))
    api.add_claim(claim_obj("ns", "d", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "q", [("x", "c"), ("y", "d")], annotations={ANN_PATTERN: "ring"}))
    drain(alloc)
    assert "ns/q" in alloc.pending()
    assert alloc.metrics.decisions == 2


def _slot_pod(api: FakeAPI, name: str, profile: str, memory: str = "4Gi") -> None:
    api.add_claim(claim_obj("ns", f"{name}-slot", [slot("s", memory)]))
    api.add_pod(pod_obj("ns", name, [("s", f"{name}-slot")],
                        annotations={"gputopo.io/profile": profile}))


def test_co_location_slots_are_booked_with_their_residents() -> None:
    """Slots (co-location, ``gputopo.io/profile``) go to the co-location policy — the
    allocator's own when its default does not co-locate — and each is booked with its job:
    the next slot decided sees it as a resident of its GPU (the pod's co-location annotation
    names it, its profile counted in ΣC) and its memory taken (a slot that no longer fits
    beside it goes to another GPU)."""
    alloc, api = cluster({"n0": "dgx1-v100"}, policy="mapa-greedy", colocation_policy="gputopo")
    _slot_pod(api, "a", "resnet18:64", "6Gi")
    drain(alloc)
    res = api.claims["ns/a-slot"]["status"]["allocation"]["devices"]["results"]
    assert [(r["device"], r["consumedCapacity"]) for r in res] == [
        (dra.device_name(0, dra.DeviceKind.SLOT), {"memory": "6144Mi", "slots": "1"})]
    ann = api.pods["ns/a"]["metadata"]["annotations"]
    assert ann[ANN_POLICY_USED] == "gputopo"
    assert ann[ANN_VGPU_MEMORY] == "6144"
    _slot_pod(api, "b", "resnet18:64", "6Gi")  # joins a's GPU: 12 GiB of its 15.8
    drain(alloc)
    assert _indices(api.claims["ns/b-slot"]) == [0]
    joined = json.loads(api.pods["ns/b"]["metadata"]["annotations"][ANN_COLOCATION])
    assert joined["residents"] == ["ns/a (resnet18:64)"]
    alone = json.loads(ann[ANN_COLOCATION])
    assert joined["sum_c"] == 2 * alone["sum_c"]
    _slot_pod(api, "c", "resnet18:64", "6Gi")  # 18 GiB would not fit GPU 0's memory
    drain(alloc)
    assert _indices(api.claims["ns/c-slot"]) != [0]
