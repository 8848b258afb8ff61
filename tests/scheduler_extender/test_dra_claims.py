"""What the DRA allocator reads from a ResourceClaim and a pod, and the status it writes —
:mod:`scheduler_extender.dra.claims` on the ``resource.k8s.io/v1`` wire dicts, no allocator
around them: what a claim asks, what it holds and for whom, what is refused and why, how a
pod's decision is split over its claims and written back. (docs/testing.md, "Twelfth
round", found these pinned only through the allocator, or not at all.)"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler_extender.dra.claims import (
    DELETE_PROTECTION,
    SCHEDULING_GATE,
    ClaimAsk,
    ClaimError,
    DeviceTaint,
    DeviceToleration,
    RequestAsk,
    allocation_config,
    allocation_status,
    parse_claim,
    pod_claim_refs,
    pod_demand,
    pod_gated,
    split,
    taint_prevents,
    tolerates,
)
from topology import dra
from topology.contract import (
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
)
from topology.dra import DeviceKind

GPU, SHARE, SLOT = dra.CLASS_GPU, dra.CLASS_SHARE, dra.CLASS_SLOT


def _claim(*requests: dict[str, Any], ns: str | None = "ns", name: str = "c",
           status: dict[str, Any] | None = None, **devices: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": "u-" + name, "resourceVersion": "7"}
    if ns is not None:
        meta["namespace"] = ns
    return {"metadata": meta, "spec": {"devices": {"requests": list(requests), **devices}},
            "status": status or {}}


def _exactly(name: str, cls: str, **exact: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": cls, **exact}}


def _cap(**requests: str) -> dict[str, Any]:
    return {"requests": requests}


def _refused(obj: dict[str, Any]) -> str:
    with pytest.raises(ClaimError) as info:
        parse_claim(obj)
    return str(info.value)


def _one(request: dict[str, Any]) -> RequestAsk:
    (ask,) = parse_claim(_claim(request)).requests
    return ask


# ------------------------------------------------------------------ what a request asks
def test_whole_gpus_a_share_and_a_slot_are_read_with_their_amounts() -> None:
    assert _one(_exactly("g", GPU, count=3)) == RequestAsk("g", GPU, DeviceKind.GPU, 3)
    assert _one(_exactly("g", GPU)).count == 1  # count defaults to 1
    share = _one(_exactly("s", SHARE, count=1, capacity=_cap(compute="30", memory="4Gi")))
    assert share == RequestAsk("s", SHARE, DeviceKind.SHARE, 1, 30, 4096)
    # the driver's prefix on a capacity name is the same capacity
    prefixed = _one(_exactly("s", SHARE, capacity=_cap(**{
        f"{dra.DRIVER}/compute": "100", f"{dra.DRIVER}/memory": "512Mi"})))
    assert (prefixed.core_percent, prefixed.memory_mib) == (100, 512)
    assert _one(_exactly("s", SHARE, capacity=_cap(compute="1"))).memory_mib == 0
    assert _one(_exactly("s", SHARE, capacity=_cap(memory="1Gi"))).core_percent == 0
    slot = _one(_exactly("t", SLOT, capacity=_cap(memory="2Gi", slots="1")))
    assert slot == RequestAsk("t", SLOT, DeviceKind.SLOT, 1, 0, 2048)
    assert _one(_exactly("t", SLOT)) == RequestAsk("t", SLOT, DeviceKind.SLOT, 1, 0, 0)
    assert _one(_exactly("t", SLOT, capacity={})).memory_mib == 0
    assert _one(_exactly("g", GPU, allocationMode="ExactCount", count=2)).count == 2


@pytest.mark.parametrize(("request_", "words"), [
    (_exactly("g", GPU, allocationMode="All"),
     f"allocationMode All is not supported for {GPU}; ask for a count"),
    (_exactly("g", GPU, adminAccess=True), f"adminAccess is not supported for {GPU}"),
    (_exactly("g", GPU, selectors=[{"cel": {"expression": "true"}}]),
     f"CEL selectors are not supported for {GPU} (gputopo's placement policy chooses the "
     "GPUs; use gputopo.io/ annotations)"),
    (_exactly("g", GPU, count=0), "count 0 is not a positive integer"),
    (_exactly("g", GPU, count=True), "count True is not a positive integer"),
    (_exactly("g", GPU, count="2"), "count '2' is not a positive integer"),
    (_exactly("g", GPU, capacity=_cap(memory="1Gi")),
     f"whole GPUs ({GPU}) take no capacity requests; ask share.gpu.gputopo.io for a share"),
    (_exactly("s", SHARE, count=2, capacity=_cap(compute="10")), "count must be 1, not 2"),
    (_exactly("s", SHARE, capacity=_cap(compute="10", cores="1")), "unknown capacity 'cores'"),
    (_exactly("s", SHARE, capacity={"requests": ["compute"]}),
     "capacity.requests is not a mapping"),
    (_exactly("s", SHARE, capacity=_cap(compute="lots")), "request 's'"),
    (_exactly("s", SHARE, capacity=_cap(compute="101")), "is not a percent 0-100"),
    (_exactly("s", SHARE, capacity=_cap(compute="-1")), "is not a percent 0-100"),
    (_exactly("s", SHARE, capacity=_cap(compute="0.5")), "is not a percent 0-100"),
    (_exactly("s", SHARE, capacity=_cap(compute="0", memory="0")), "this one asks neither"),
    (_exactly("s", SHARE, capacity=_cap(slots="1")),
     f"a share takes no slots; a co-located job asks {SLOT} for a slot"),
    (_exactly("s", SHARE, capacity=_cap(compute="30", slots="1")), "a share takes no slots"),
    (_exactly("t", SLOT, capacity=_cap(compute="10")),
     "a co-location slot takes no compute; its share of the GPU follows from its profile"),
    (_exactly("t", SLOT, capacity=_cap(slots="2")), "exactly 1 slot, not 2"),
    (_exactly("t", SLOT, capacity=_cap(slots="0")), "exactly 1 slot, not 0"),
    (_exactly("t", SLOT, capacity=_cap(memory="lots")), "request 't'"),
    (_exactly("g", GPU, tolerations={"key": "x"}), "tolerations must be a list of objects"),
    (_exactly("g", GPU, tolerations=["x"]), "tolerations must be a list of objects"),
    ({"name": "f", "firstAvailable": [{"name": "a", "deviceClassName": "nic.example.com"},
                                      {"name": "b", "deviceClassName": SHARE}]},
     "firstAvailable lists naming gputopo classes are not supported; ask for one class with "
     "exactly"),
])
def test_what_the_allocator_cannot_honour_is_refused_naming_claim_and_request(
    request_: dict[str, Any], words: str,
) -> None:
    why = _refused(_claim(request_))
    assert why.startswith(f"claim ns/c, request {request_['name']!r}: ")
    assert words in why


def test_other_drivers_requests_are_not_gputopos() -> None:
    nic = _exactly("n", "nic.example.com", count=1)
    first = {"name": "f", "firstAvailable": [{"name": "a", "deviceClassName": "nic.example.com"},
                                             "not-a-subrequest"]}
    no_exact = {"name": "x"}
    for obj in (_claim(nic), _claim(first), _claim(no_exact), _claim(nic, first, no_exact),
                _claim(), {"metadata": {"name": "c"}}, {"metadata": {"name": "c"}, "spec": 3}):
        got = parse_claim(obj)
        assert (got.ours, got.requests) == (False, ())


def test_a_claim_mixing_gputopo_with_other_drivers_or_kinds_is_refused() -> None:
    nic = _exactly("n", "nic.example.com")
    why = _refused(_claim(_exactly("a", GPU), _exactly("b", GPU), nic, {"name": "m"}))
    assert why == ("claim ns/c mixes gputopo requests (a, b) with other drivers' (n, m); put "
                   "gputopo's GPUs in a claim of their own")
    why = _refused(_claim(_exactly("g", GPU), _exactly("s", SHARE, capacity=_cap(compute="5"))))
    assert why == "claim ns/c mixes gpu and share devices; ask one kind per claim"
    # two requests of one kind are one claim's (not mixed)
    got = parse_claim(_claim(_exactly("a", GPU, count=2), _exactly("b", GPU)))
    assert [(r.name, r.count) for r in got.requests] == [("a", 2), ("b", 1)] and got.ours
    # entries that are not objects are skipped, wherever they are
    junk: Any = "junk"
    assert parse_claim(_claim(junk, _exactly("a", GPU), junk)).requests == (
        RequestAsk("a", GPU, DeviceKind.GPU, 1),)


def test_constraints_on_gputopo_requests_are_refused() -> None:
    a, b = _exactly("a", GPU), _exactly("b", GPU)
    for constraints in ([{"matchAttribute": "x"}],  # no requests listed: every request
                        [{"requests": ["b"], "matchAttribute": "x"}],
                        [{"requests": ["zz"]}, {"requests": ["a", "zz"]}],
                        [None]):
        why = _refused(_claim(a, b, constraints=constraints))
        assert why == ("claim ns/c: constraints on gputopo requests are not supported "
                       "(gputopo's placement policy chooses the GPUs)")
    # a constraint naming only requests the claim does not have constrains nothing of ours
    assert parse_claim(_claim(a, b, constraints=[{"requests": ["zz"]}])).ours
    # another driver's claim may have constraints: it is kube-scheduler's
    nic = _exactly("n", "nic.example.com")
    assert not parse_claim(_claim(nic, constraints=[{"matchAttribute": "x"}])).ours


def test_a_requests_tolerations_are_read_with_upstreams_defaults() -> None:
    tols = [{"key": "k", "operator": "Exists", "effect": "NoSchedule",
             "tolerationSeconds": 5},
            {"key": "k2", "value": "v"},
            {"operator": None, "key": None, "value": None, "effect": None}]
    got = _one(_exactly("g", GPU, tolerations=tols)).tolerations
    assert got == (DeviceToleration("k", "Exists", "", "NoSchedule"),
                   DeviceToleration("k2", "Equal", "v", ""),
                   DeviceToleration("", "Equal", "", ""))
    assert _one(_exactly("g", GPU, tolerations=None)).tolerations == ()
    share = _one(_exactly("s", SHARE, capacity=_cap(compute="5"), tolerations=tols[:1]))
    slot = _one(_exactly("t", SLOT, tolerations=tols[:1]))
    assert share.tolerations == slot.tolerations == got[:1]


# ------------------------------------------------------------------ whose, and what it holds
def test_the_claims_identity_owner_consumers_and_lifecycle_are_read() -> None:
    obj = _claim(_exactly("g", GPU), status={"reservedFor": [
        {"resource": "pods", "name": "p", "uid": "pod-1"}, {"resource": "pods", "name": "q"},
        "junk"]})
    obj["metadata"].update({
        "ownerReferences": [{"kind": "ReplicaSet", "controller": True, "uid": "rs"},
                            {"kind": "Pod", "controller": False, "uid": "not-the-owner"},
                            "junk",
                            {"kind": "Pod", "controller": True, "uid": "pod-1"}],
        "finalizers": ["other", DELETE_PROTECTION],
        "deletionTimestamp": "2026-01-01T00:00:00Z"})
    got = parse_claim(obj)
    assert (got.namespace, got.name, got.uid, got.key) == ("ns", "c", "u-c", "ns/c")
    assert got.owner_pod == "pod-1" and got.reserved_for == ("pod-1", "")
    assert got.resource_version == "7" and got.protected and got.deleting
    assert not got.allocated and got.allocation is None and got.node is None
    bare = parse_claim(_claim(_exactly("g", GPU), ns=None))
    assert bare.key == "default/c" and bare.namespace == "default"
    assert (bare.owner_pod, bare.reserved_for, bare.protected, bare.deleting) == (
        "", (), False, False)
    controlled_by_other = _claim(_exactly("g", GPU))
    controlled_by_other["metadata"]["ownerReferences"] = [
        {"kind": "Job", "controller": True, "uid": "job"}]
    assert parse_claim(controlled_by_other).owner_pod == ""
    no_meta = parse_claim({"metadata": "junk", "spec": {"devices": {"requests": [
        _exactly("g", GPU)]}}})
    assert (no_meta.key, no_meta.uid, no_meta.resource_version) == ("default/", "", "")


def _allocated(results: list[dict[str, Any]], node: str | None = "n1") -> dict[str, Any]:
    alloc: dict[str, Any] = {"devices": {"results": results}}
    if node is not None:
        alloc["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    return {"allocation": alloc}


def test_an_allocation_is_read_with_its_gpus_and_node() -> None:
    results = dra.allocation_results("n1", [5, 2], request="g")
    got = parse_claim(_claim(_exactly("g", GPU, count=2), status=_allocated(results)))
    assert got.allocated and got.node == "n1"
    assert got.allocation is not None and got.allocation.gpus == (5, 2)
    # the pool names the node even when the node selector says nothing
    got = parse_claim(_claim(_exactly("g", GPU, count=2), status=_allocated(results, None)))
    assert got.node == "n1" and got.allocation is not None
    # results without a pool: the node selector names the node
    poolless = [{k: v for k, v in r.items() if k != "pool"} for r in results]
    got = parse_claim(_claim(_exactly("g", GPU, count=2), status=_allocated(poolless, "n4")))
    assert got.node == "n4" and got.allocation is not None and got.allocation.gpus == (5, 2)


def test_another_drivers_allocation_is_allocated_and_holds_no_gpu_of_ours() -> None:
    nic = [{"request": "n", "driver": "nic.example.com", "pool": "n2", "device": "eth0"}]
    got = parse_claim(_claim(_exactly("n", "nic.example.com"), status=_allocated(nic, "n2")))
    assert got.allocated and got.allocation is None and got.node == "n2"
    # a node selector that does not pin one node by name pins none
    for term in ([{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}],
                 [{"key": "metadata.name", "operator": "NotIn", "values": ["a"]}],
                 [{"key": "spec.nodeName", "operator": "In", "values": ["a"]}],
                 []):
        obj = _claim(status={"allocation": {"devices": {"results": nic}, "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": term}, None]}}})
        got = parse_claim(obj)
        assert got.allocated and got.node is None
    # the first term that pins one node, after one that does not
    obj = _claim(status={"allocation": {"devices": {"results": nic}, "nodeSelector": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "x"}]}, {"matchFields": [
            {"key": "spec.x", "operator": "In", "values": ["z"]},
            {"key": "metadata.name", "operator": "In", "values": ["n3"]}]}]}}})
    assert parse_claim(obj).node == "n3"
    # an allocation without devices (a network-attached claim) is allocated too
    got = parse_claim(_claim(status={"allocation": {"nodeSelector": "junk"}}))
    assert got.allocated and got.node is None and got.allocation is None


def test_an_allocation_breaking_the_contract_is_refused_with_the_claim() -> None:
    twice = dra.allocation_results("n1", [1], request="g") * 2
    why = _refused(_claim(_exactly("g", GPU, count=2), status=_allocated(twice)))
    assert why == "claim ns/c: its allocation: GPU 1 is allocated twice in one claim"


# ------------------------------------------------------------------ pods
def test_a_pods_claims_are_read_in_order_templates_named_from_its_status() -> None:
    pod = {"spec": {"resourceClaims": [
        "junk", {"resourceClaimName": "nameless"},
        {"name": "a", "resourceClaimName": "claim-a"},
        {"name": "b", "resourceClaimTemplateName": "tmpl"},
        {"name": "c", "resourceClaimTemplateName": "tmpl"},
        {"name": "d", "resourceClaimTemplateName": "tmpl"},
        {"resourceClaimName": "nameless"}, "junk", {"name": "e"},
    ]}, "status": {"resourceClaimStatuses": [
        {"name": "b", "resourceClaimName": "p-b-x1"},
        {"name": "c"},  # the controller recorded that no claim is needed
        {"resourceClaimName": "nameless"}, "junk",
    ]}}
    refs = pod_claim_refs(pod)
    assert [(r.pod_claim, r.claim, r.from_template, r.needed) for r in refs] == [
        ("a", "claim-a", False, True), ("b", "p-b-x1", True, True),
        ("c", None, True, False), ("d", None, True, True)]
    assert pod_claim_refs({}) == [] and pod_claim_refs({"spec": "junk", "status": 1}) == []
    # a status entry with an empty name is ignored (not "no claim needed")
    odd = {"spec": {"resourceClaims": [{"name": "b", "resourceClaimTemplateName": "t"}]},
           "status": {"resourceClaimStatuses": [{"name": "", "resourceClaimName": None}]}}
    assert [(r.claim, r.needed) for r in pod_claim_refs(odd)] == [(None, True)]


def test_only_gputopos_gate_gates_a_pod() -> None:
    assert pod_gated({"spec": {"schedulingGates": [{"name": "x"}, {"name": SCHEDULING_GATE}]}})
    assert not pod_gated({"spec": {"schedulingGates": [{"name": "x"}, SCHEDULING_GATE]}})
    assert not pod_gated({"spec": {}}) and not pod_gated({}) and not pod_gated({"spec": 1})


def _ask(name: str, *requests: RequestAsk) -> ClaimAsk:
    return ClaimAsk("ns", name, "u-" + name, requests, ours=bool(requests))


def test_a_pods_demand_sums_whole_gpus_and_takes_one_share_or_slot() -> None:
    none = {RESOURCE_GPU: 0, RESOURCE_VGPU_CORE: 0, RESOURCE_VGPU_MEMORY: 0,
            RESOURCE_GPU_SHARED: 0}
    assert pod_demand([]) == none and pod_demand([_ask("other")]) == none
    whole = [_ask("a", RequestAsk("g", GPU, DeviceKind.GPU, 2),
                  RequestAsk("h", GPU, DeviceKind.GPU, 1)),
             _ask("b", RequestAsk("g", GPU, DeviceKind.GPU, 3))]
    assert pod_demand(whole) == {**none, RESOURCE_GPU: 6}
    share = _ask("s", RequestAsk("s", SHARE, DeviceKind.SHARE, 1, 30, 4096))
    assert pod_demand([share]) == {**none, RESOURCE_VGPU_CORE: 30, RESOURCE_VGPU_MEMORY: 4096}
    slot = _ask("t", RequestAsk("t", SLOT, DeviceKind.SLOT, 1, 0, 2048))
    assert pod_demand([slot]) == {**none, RESOURCE_VGPU_MEMORY: 2048, RESOURCE_GPU_SHARED: 1}


def test_a_pod_asking_two_kinds_or_two_shares_is_refused() -> None:
    g = _ask("a", RequestAsk("g", GPU, DeviceKind.GPU, 1))
    s = _ask("s", RequestAsk("s", SHARE, DeviceKind.SHARE, 1, 30, 0))
    t = _ask("t", RequestAsk("t", SLOT, DeviceKind.SLOT, 1))
    with pytest.raises(ClaimError) as info:
        pod_demand([g, s, t])
    assert str(info.value) == ("the pod's claims ask gpu and share and slot devices; a pod "
                               "asks for one kind of gputopo GPU")
    with pytest.raises(ClaimError) as info:
        pod_demand([g, s])
    assert str(info.value) == ("the pod's claims ask gpu and share devices; a pod asks for "
                               "one kind of gputopo GPU")
    with pytest.raises(ClaimError) as info:
        pod_demand([s, s])
    assert str(info.value) == "the pod's claims ask 2 shares; a pod takes one"
    with pytest.raises(ClaimError, match="ask 2 slots"):
        pod_demand([_ask("t2", RequestAsk("a", SLOT, DeviceKind.SLOT, 1),
                         RequestAsk("b", SLOT, DeviceKind.SLOT, 1))])


# ------------------------------------------------------------------ the decision, per claim
@given(st.lists(st.lists(st.integers(1, 4), max_size=3), min_size=1, max_size=4), st.randoms())
def test_split_hands_out_the_arrangement_in_order_request_by_request(
    counts: list[list[int]], rnd: Any,
) -> None:
    claims = [_ask(f"c{i}", *(RequestAsk(f"r{j}", GPU, DeviceKind.GPU, k)
                              for j, k in enumerate(ks))) for i, ks in enumerate(counts)]
    total = sum(map(sum, counts))
    arrangement = rnd.sample(range(64), total)
    grants = split(arrangement, claims)
    assert [g.claim for g in grants] == claims
    assert [i for g in grants for i in g.indices] == arrangement
    for g, ks in zip(grants, counts, strict=True):
        assert [len(g.gpus[f"r{j}"]) for j in range(len(ks))] == ks
        assert (g.kind, g.core_percent, g.memory_mib) == (DeviceKind.GPU, 0, 0)
    with pytest.raises(ClaimError) as info:
        split([*arrangement, 99], claims)
    assert str(info.value) == (f"the pod's claims ask {total} GPUs, the decision has "
                               f"{total + 1}")


def test_split_gives_a_share_its_compute_and_memory_and_a_slot_its_memory() -> None:
    share = _ask("s", RequestAsk("s", SHARE, DeviceKind.SHARE, 1, 30, 4096))
    (g,) = split([3], [share], core_percent=30, memory_mib=4096)
    assert (g.gpus, g.kind, g.core_percent, g.memory_mib) == ({"s": (3,)}, DeviceKind.SHARE,
                                                               30, 4096)
    slot = _ask("t", RequestAsk("t", SLOT, DeviceKind.SLOT, 1, 0, 2048))
    (g,) = split([5], [slot], core_percent=30, memory_mib=2048)
    assert (g.kind, g.core_percent, g.memory_mib) == (DeviceKind.SLOT, 0, 2048)
    whole = _ask("w", RequestAsk("g", GPU, DeviceKind.GPU, 1))
    (g,) = split([5], [whole], core_percent=30, memory_mib=2048)
    assert (g.kind, g.core_percent, g.memory_mib) == (DeviceKind.GPU, 0, 0)


def _classes() -> dict[str, dict[str, Any]]:
    return {GPU: {"spec": {"config": [
                {"opaque": {"driver": dra.DRIVER, "parameters": {"a": 1}}},
                {"requests": ["ignored"], "opaque": {"driver": dra.DRIVER,
                                                     "parameters": {"b": 2}}}]}},
            SHARE: {"spec": {}}}


def test_the_config_is_each_classs_once_for_its_requests_then_the_claims() -> None:
    claim = _claim(_exactly("a", GPU), _exactly("b", GPU, count=2), "junk",  # type: ignore[arg-type]
                   config=[{"requests": ["a"], "opaque": {"driver": dra.DRIVER,
                                                           "parameters": {"c": 3}}},
                           "junk"])
    assert allocation_config(claim, _classes()) == [
        {"source": "FromClass", "requests": ["a", "b"],
         "opaque": {"driver": dra.DRIVER, "parameters": {"a": 1}}},
        {"source": "FromClass", "requests": ["a", "b"],
         "opaque": {"driver": dra.DRIVER, "parameters": {"b": 2}}},
        {"source": "FromClaim", "requests": ["a"],
         "opaque": {"driver": dra.DRIVER, "parameters": {"c": 3}}}]
    # a class without config, or unknown, adds nothing; a later request of a class without
    # config does not join another class's entries
    share = _claim(_exactly("s", SHARE), _exactly("t", "unknown.example.com"),
                   _exactly("u", SHARE))
    assert allocation_config(share, _classes()) == []
    mixed = _claim(_exactly("s", SHARE), _exactly("a", GPU), _exactly("u", SHARE))
    assert [e["requests"] for e in allocation_config(mixed, _classes())] == [["a"], ["a"]]
    # a class met again adds its request to its entries and the next requests still count
    slot_cfg = {"opaque": {"driver": dra.DRIVER, "parameters": {"s": 1}}}
    classes = {**_classes(), SLOT: {"spec": {"config": [slot_cfg]}}}
    three = _claim(_exactly("a", GPU), _exactly("b", GPU), _exactly("t", SLOT))
    assert [(e["requests"], e["opaque"]["parameters"]) for e in
            allocation_config(three, classes)] == [
        (["a", "b"], {"a": 1}), (["a", "b"], {"b": 2}), (["t"], {"s": 1})]
    assert allocation_config({}, _classes()) == []


def test_the_status_written_allocates_in_request_order_and_reserves_for_the_pod() -> None:
    claim = _claim(_exactly("a", GPU, count=2), _exactly("b", GPU), status={"reservedFor": [
        {"resource": "pods", "name": "other", "uid": "pod-0"},
        {"resource": "pods", "name": "p-old-copy", "uid": "pod-1"}, "junk"]})
    ask = parse_claim(claim)
    (grant,) = split([6, 4, 1], [ask])
    status = allocation_status(claim, grant, "n1", classes=_classes(), pod_name="p",
                               pod_uid="pod-1", timestamp="2026-01-01T00:00:00Z")
    devices = status["allocation"]["devices"]
    assert [(r["request"], r["device"], r["pool"], r["driver"]) for r in devices["results"]] \
        == [("a", "gpu-6", "n1", dra.DRIVER), ("a", "gpu-4", "n1", dra.DRIVER),
            ("b", "gpu-1", "n1", dra.DRIVER)]
    assert [c["source"] for c in devices["config"]] == ["FromClass", "FromClass"]
    assert status["allocation"]["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}
    assert status["allocation"]["allocationTimestamp"] == "2026-01-01T00:00:00Z"
    # other consumers kept, the pod once (its earlier entry replaced), last
    assert status["reservedFor"] == [{"resource": "pods", "name": "other", "uid": "pod-0"},
                                     {"resource": "pods", "name": "p", "uid": "pod-1"}]
    # what was written reads back as the grant, on the node
    back = parse_claim({**claim, "status": status})
    assert back.node == "n1" and back.allocation is not None
    assert back.allocation.gpus == (6, 4, 1)
    # a claim whose class has no config gets no config entry
    bare = allocation_status(claim, grant, "n1", classes={}, pod_name="p", pod_uid="pod-9",
                             timestamp="t")
    assert "config" not in bare["allocation"]["devices"]
    assert [r["uid"] for r in bare["reservedFor"]] == ["pod-0", "pod-1", "pod-9"]


def test_a_shares_status_carries_its_share_id_and_capacity() -> None:
    claim = _claim(_exactly("s", SHARE, capacity=_cap(compute="30", memory="4Gi")))
    (grant,) = split([2], [parse_claim(claim)], core_percent=30, memory_mib=4096)
    status = allocation_status(claim, grant, "n1", classes={}, pod_name="p", pod_uid="u",
                               timestamp="t", share_ids={"s": "share-uid"})
    (r,) = status["allocation"]["devices"]["results"]
    assert (r["device"], r["shareID"], r["consumedCapacity"]) == (
        "gpu-2-share", "share-uid", {"memory": "4096Mi", "compute": "30"})
    for ids in (None, {}, {"other": "x"}):
        with pytest.raises(ClaimError) as info:
            allocation_status(claim, grant, "n1", classes={}, pod_name="p", pod_uid="u",
                              timestamp="t", share_ids=ids)
        assert str(info.value) == "claim ns/c: a share is one GPU with one share ID"


# ------------------------------------------------------------------ taints and tolerations
def _upstream_tolerates(t: DeviceToleration, taint: DeviceTaint) -> bool:
    """k8s.io/dynamic-resource-allocation v0.36.3 ``ToleratesTaint``, transcribed."""
    if t.effect != "" and t.effect != taint.effect:
        return False
    if t.key != "" and t.key != taint.key:
        return False
    if t.operator in ("", "Equal"):
        return t.value == taint.value
    if t.operator == "Exists":
        return True
    return False


_words = st.sampled_from(["", "a", "b"])
_tolerations = st.builds(DeviceToleration, _words, st.sampled_from(["", "Equal", "Exists", "Lt"]),
                         _words, st.sampled_from(["", "NoSchedule", "NoExecute"]))
_taints = st.builds(DeviceTaint, _words, _words, st.sampled_from(["NoSchedule", "NoExecute"]))


@given(_tolerations, _taints)
def test_tolerates_is_upstreams_rule(t: DeviceToleration, taint: DeviceTaint) -> None:
    assert tolerates(t, taint) is _upstream_tolerates(t, taint)


def test_tolerates_cases() -> None:
    taint = DeviceTaint("k", "v", "NoSchedule")
    assert tolerates(DeviceToleration("k", "Equal", "v", "NoSchedule"), taint)
    assert tolerates(DeviceToleration("k", "", "v"), taint)
    assert tolerates(DeviceToleration("", "Exists"), taint)
    assert tolerates(DeviceToleration("k", "Exists", "other"), taint)
    assert not tolerates(DeviceToleration("k", "Equal", "w"), taint)
    assert not tolerates(DeviceToleration("k", "Exists", effect="NoExecute"), taint)
    assert not tolerates(DeviceToleration("j", "Exists"), taint)
    assert not tolerates(DeviceToleration("k", "Gt", "v"), taint)
    assert str(taint) == "k=v:NoSchedule"


@given(st.lists(_taints, max_size=4), st.lists(_tolerations, max_size=3))
def test_the_first_taint_not_tolerated_prevents_the_allocation(
    taints: list[DeviceTaint], tolerations: list[DeviceToleration],
) -> None:
    # tolerations may be a one-shot iterable: each taint is checked against all of them
    got = taint_prevents(taints, iter(tolerations))
    bad = [x for x in taints if not any(_upstream_tolerates(t, x) for t in tolerations)]
    assert got == (bad[0] if bad else None)
