"""The DRA allocator's view of the cluster (:class:`scheduler_extender.dra.state.DraState`) fed
event by event, as its watches feed it: which GPUs a node's ResourceSlice pool offers (only a
complete pool of the latest generation), the taints that keep a device from a request (the
slice's and the DeviceTaintRules'), and the GPUs every claim holds, reserves or gives back.
(docs/testing.md, "Twelfth round".)"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from scheduler_extender.dra.claims import ClaimAsk, ClaimError, DeviceTaint
from scheduler_extender.dra.state import DraState, TaintRule, default_resident
from scheduler_extender.state import (
    Allocation,
    BindError,
    NodeTopologyError,
    PodRef,
    ReservationConflict,
)
from tests.scheduler_extender.dra_fakes import node_obj
from topology import catalog, dra
from topology.colocation.sources import default_profile
from topology.dra import DeviceKind
from topology.model import Topology
from topology.policies.base import Decision, Resident

DGX1 = catalog.get("dgx1-v100")  # 8 GPUs of 16160 MiB
NOTE = {"key": "example.com/note", "value": "x", "effect": "NoSchedule"}


def _state(*nodes: str, **slices: Any) -> DraState:
    state = DraState()
    for n in nodes:
        state.apply_node("ADDED", node_obj(n, DGX1))
        for s in dra.resource_slices(DGX1, n, **slices):
            state.apply_slice("ADDED", s)
    return state


def _slices(node: str = "n0", **kw: Any) -> list[dict[str, Any]]:
    return dra.resource_slices(DGX1, node, **kw)


def _claim(name: str, results: list[dict[str, Any]] | None = None, *,
           cls: str = dra.CLASS_GPU, uid: str | None = None, **exact: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"namespace": "ns", "name": name, "uid": uid or f"u-{name}"},
        "spec": {"devices": {"requests": [
            {"name": "g", "exactly": {"deviceClassName": cls, **exact}}]}},
        "status": {}}
    if results is not None:
        obj["status"]["allocation"] = {"devices": {"results": results}}
    return obj


def _gpus(node: str, *gpus: int) -> list[dict[str, Any]]:
    return dra.allocation_results(node, list(gpus), request="g")


def _held(state: DraState, node: str = "n0") -> dict[int, tuple[int, int]]:
    """GPU → (core percent, MiB) in use on ``node``."""
    return {i: (u.core_percent, u.memory_used_mib)
            for i, u in state.node_state(node).usage.items() if not u.idle}


# ------------------------------------------------------------------ what a pool offers
def test_a_node_offers_the_gpus_its_complete_pool_lists() -> None:
    state = _state("n1", "n0", unhealthy=frozenset({2, 5}))
    assert state.node_names() == ["n0", "n1"]
    assert state.offered("n0") == frozenset({0, 1, 3, 4, 6, 7})
    assert state.offered("elsewhere") == frozenset()
    # a GPU left out of the pool is never handed out
    assert state.node_state("n0").unhealthy == frozenset({2, 5})
    assert state.node_view("n0").topology == DGX1
    # the next generation lists GPU 2 again: it is offered, and healthy
    for s in _slices(generation=2, unhealthy=frozenset({5})):
        state.apply_slice("MODIFIED", s)
    assert state.offered("n0") == frozenset(range(8)) - {5}
    assert state.node_state("n0").unhealthy == frozenset({5})
    assert state.node_view("n0").state.unhealthy == frozenset({5})  # the view was dropped


def test_an_incomplete_pool_offers_nothing() -> None:
    state = DraState()
    state.apply_node("ADDED", node_obj("n0", DGX1))
    counters, devices = _slices()
    state.apply_slice("ADDED", devices)  # one of two slices
    assert state.offered("n0") == frozenset() and state.node_names() == []
    assert isinstance(state.node_topology("n0"), NodeTopologyError)
    state.apply_slice("ADDED", counters)
    assert state.offered("n0") == frozenset(range(8))
    assert state.node_topology("n0") == DGX1
    # a slice deleted: the pool is incomplete again
    state.apply_slice("DELETED", counters)
    assert state.offered("n0") == frozenset() and state.node_names() == []
    why = state.node_topology("n0")
    assert isinstance(why, NodeTopologyError) and "no complete ResourceSlice pool" in str(why)


def test_only_the_latest_generation_counts() -> None:
    state = _state("n0")
    new_counters, new_devices = _slices(generation=2, unhealthy=frozenset({7}))
    state.apply_slice("MODIFIED", new_devices)
    # the new generation's first slice: the pool waits for the rest of it
    assert state.offered("n0") == frozenset()
    # a slice of the old generation arriving late changes nothing
    for s in _slices(generation=1):
        state.apply_slice("MODIFIED", s)
    assert state.offered("n0") == frozenset()
    state.apply_slice("ADDED", new_counters)
    assert state.offered("n0") == frozenset(range(7))
    # an old slice deleted once the new generation holds none of its name: nothing changes
    gone = copy.deepcopy(new_devices)
    gone["metadata"]["name"] = "retired"
    state.apply_slice("DELETED", gone)
    assert state.offered("n0") == frozenset(range(7))
    # a generation published as one slice: complete by itself, the older slices forgotten
    (one,) = [s for s in _slices(generation=3) if s["spec"].get("devices")]
    one["spec"]["pool"]["resourceSliceCount"] = 1
    state.apply_slice("ADDED", one)
    assert state.offered("n0") == frozenset(range(8))
    # the same generation republished as two slices: the count follows the latest slice
    counters = _slices(generation=3)[0]
    state.apply_slice("MODIFIED", counters)
    assert state.offered("n0") == frozenset(range(8))
    bigger = copy.deepcopy(counters)
    bigger["metadata"]["name"] = "third"
    bigger["spec"]["pool"]["resourceSliceCount"] = 3
    state.apply_slice("ADDED", bigger)
    assert state.offered("n0") == frozenset(range(8))
    bigger["spec"]["pool"]["resourceSliceCount"] = 4
    state.apply_slice("MODIFIED", bigger)
    assert state.offered("n0") == frozenset()


def test_a_slice_without_generation_or_count_is_a_one_slice_pool() -> None:
    state = DraState()
    state.apply_node("ADDED", node_obj("n0", DGX1))
    _counters, devices = _slices()
    devices["spec"]["pool"] = {"name": "n0"}
    state.apply_slice("ADDED", devices)
    assert state.offered("n0") == frozenset(range(8))
    # a slice of generation 1 (newer than none) replaces it, under any name
    (newer,) = [s for s in _slices(unhealthy=frozenset({3})) if s["spec"].get("devices")]
    newer["metadata"]["name"] = "renamed"
    newer["spec"]["pool"]["resourceSliceCount"] = 1
    state.apply_slice("ADDED", newer)
    assert state.offered("n0") == frozenset(range(8)) - {3}
    # then generation 2 of two slices replaces it, incomplete until both arrive
    counters, devices = _slices(generation=2)
    state.apply_slice("ADDED", devices)
    assert state.offered("n0") == frozenset()


def test_other_drivers_and_unnamed_slices_are_ignored() -> None:
    state = _state("n0")
    for broken in ({"driver": "nic.example.com"}, {"nodeName": ""}, {"nodeName": None}):
        for s in _slices(generation=5, unhealthy=frozenset({0})):
            s["spec"].update(broken)
            state.apply_slice("ADDED", s)
    for s in _slices(generation=5, unhealthy=frozenset({0})):
        s["metadata"] = {}
        state.apply_slice("ADDED", s)
    state.apply_slice("ADDED", {"spec": "junk"})
    state.apply_slice("ADDED", {})
    assert state.offered("n0") == frozenset(range(8))
    assert state.node_names() == ["n0"]


def test_unknown_devices_are_skipped_and_slots_read_from_the_slot_devices() -> None:
    state = _state("n0", slots=5)
    assert state.node_state("n0").slots_per_gpu == 5
    state = _state("n0", slots=0)
    assert state.node_state("n0").slots_per_gpu == 0
    counters, devices = _slices(generation=2)
    devices["spec"]["devices"].insert(0, {"name": "eth0", "taints": [NOTE]})
    for d in devices["spec"]["devices"]:
        if d["name"] == "gpu-3-slot":
            d["capacity"]["slots"]["value"] = "many"  # unreadable: ignored
        if d["name"] == "gpu-4-slot":
            d["capacity"]["slots"]["value"] = "7"  # the largest counts
    for s in (counters, devices):
        state.apply_slice("ADDED", s)
    assert state.offered("n0") == frozenset(range(8))
    assert state.node_state("n0").slots_per_gpu == 7
    assert state.device_taints("n0", DeviceKind.GPU) == {}


def test_a_nodes_topology_comes_and_goes_with_its_node() -> None:
    state = DraState()
    for s in _slices():
        state.apply_slice("ADDED", s)
    why = state.node_topology("n0")
    assert isinstance(why, NodeTopologyError)
    assert str(why) == "node is unknown to the allocator (no Node object seen)"
    # the pool offers its GPUs; without a topology none is marked unhealthy
    assert state.offered("n0") == frozenset(range(8))
    no_ann = node_obj("n0", DGX1)
    del no_ann["metadata"]["annotations"]
    state.apply_node("ADDED", no_ann)
    why = state.node_topology("n0")
    assert isinstance(why, NodeTopologyError)
    assert str(why) == ("node has no gputopo.io/topology annotation (is gputopo's DRA driver "
                        "running there?)")
    not_text = node_obj("n0", DGX1)
    not_text["metadata"]["annotations"]["gputopo.io/topology"] = {"gpus": []}
    state.apply_node("MODIFIED", not_text)
    assert isinstance(state.node_topology("n0"), NodeTopologyError)
    state.apply_node("MODIFIED", node_obj("n0", DGX1))
    assert state.node_topology("n0") == DGX1
    assert state.node_view("n0").topology == DGX1
    state.apply_node("DELETED", node_obj("n0", DGX1))
    assert isinstance(state.node_topology("n0"), NodeTopologyError)
    # another machine's topology, the same GPUs offered: the cached view follows it
    p100 = catalog.get("dgx1-p100")
    state.apply_node("MODIFIED", node_obj("n0", p100))
    assert state.node_view("n0").topology == p100 != DGX1
    state.apply_node("DELETED", node_obj("never-seen", DGX1))
    state.apply_node("ADDED", {"metadata": {"annotations": {}}})  # no name: ignored
    state.apply_node("ADDED", {"metadata": "junk"})
    assert isinstance(state.node_topology(""), NodeTopologyError)


def test_the_topology_marks_the_gpus_the_pool_leaves_out_once_the_node_is_seen() -> None:
    state = DraState()
    for s in _slices(unhealthy=frozenset({6})):
        state.apply_slice("ADDED", s)
    assert state.node_state("n0").unhealthy == frozenset()
    state.apply_node("ADDED", node_obj("n0", DGX1))
    assert state.node_state("n0").unhealthy == frozenset({6})


def test_ready_once_nodes_slices_and_claims_are_listed() -> None:
    state = DraState()
    for kind in ("nodes", "slices"):
        state.mark_synced(kind)
        assert not state.ready()
    state.mark_synced("claims")
    assert state.ready()


# ------------------------------------------------------------------ device taints
def _taint(node: str, taints: dict[str, list[Any]], generation: int = 2,
           state: DraState | None = None) -> DraState:
    state = state or _state(node)
    for s in _slices(node, generation=generation):
        for d in s["spec"].get("devices", []):
            d["taints"] = d["taints"] + taints.get(d["name"], [])
        state.apply_slice("MODIFIED", s)
    return state


def test_a_devices_blocking_taints_are_listed_per_view() -> None:
    evict = {"key": "example.com/broken", "effect": "NoExecute"}
    state = _taint("n0", {"gpu-1": [NOTE, {"key": "x", "effect": "PreferNoSchedule"},
                                    {"key": "y"}, "junk", evict],
                          "gpu-2-share": [NOTE], "gpu-3-slot": [evict]})
    assert state.device_taints("n0", DeviceKind.GPU) == {
        1: (DeviceTaint("example.com/note", "x", "NoSchedule"),
            DeviceTaint("example.com/broken", "", "NoExecute"))}
    assert state.device_taints("n0", DeviceKind.SHARE) == {
        2: (DeviceTaint("example.com/note", "x", "NoSchedule"),)}
    assert state.device_taints("n0", DeviceKind.SLOT) == {
        3: (DeviceTaint("example.com/broken", "", "NoExecute"),)}
    assert state.device_taints("n9", DeviceKind.GPU) == {}
    # a tainted device is still offered: whether it is usable depends on the request
    assert state.offered("n0") == frozenset(range(8))
    # the next generation without the taints: none left
    _taint("n0", {}, generation=3, state=state)
    for kind in DeviceKind:
        assert state.device_taints("n0", kind) == {}


def test_only_the_allocators_own_taint_is_left_out() -> None:
    own = dict(dra.ALLOCATOR_TAINT)
    state = _taint("n0", {"gpu-0": [{**own, "value": "other"}],
                          "gpu-1": [{**own, "effect": "NoExecute"}],
                          "gpu-2": [{**own, "key": "other"}]})
    assert sorted(state.device_taints("n0", DeviceKind.GPU)) == [0, 1, 2]


def _rule(name: str, taint: dict[str, Any] | None = None, **selector: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"taint": taint if taint is not None else NOTE}
    if selector:
        spec["deviceSelector"] = selector
    return {"metadata": {"name": name}, "spec": spec}


def test_taint_rules_add_their_taint_to_the_devices_they_select() -> None:
    state = _state("n0", "n1")
    drain = {"key": "drain", "value": "", "effect": "NoExecute"}
    state.apply_taint_rule("ADDED", _rule("a", drain, pool="n0", device="gpu-2"))
    state.apply_taint_rule("ADDED", _rule("b", driver=dra.DRIVER, device="gpu-3-share"))
    state.apply_taint_rule("ADDED", _rule("c", driver="nic.example.com"))
    state.apply_taint_rule("ADDED", _rule("d", {**NOTE, "effect": "None"}))
    assert state.taint_rule_count() == 4
    assert state.device_taints("n0", DeviceKind.GPU) == {
        2: (DeviceTaint("drain", "", "NoExecute"),)}
    assert state.device_taints("n1", DeviceKind.GPU) == {}
    assert list(state.device_taints("n0", DeviceKind.SHARE)) == [3]
    assert list(state.device_taints("n1", DeviceKind.SHARE)) == [3]
    # appended after the slice's own taints, as kube-scheduler's tracker does
    _taint("n0", {"gpu-2": [NOTE]}, state=state)
    assert state.device_taints("n0", DeviceKind.GPU)[2] == (
        DeviceTaint("example.com/note", "x", "NoSchedule"), DeviceTaint("drain", "", "NoExecute"))
    # a rule's taint goes with the rule; a rule without a name is ignored
    state.apply_taint_rule("DELETED", _rule("a"))
    state.apply_taint_rule("DELETED", _rule("never-seen"))
    state.apply_taint_rule("ADDED", {"metadata": {}, "spec": {"taint": NOTE}})
    assert state.taint_rule_count() == 3
    assert state.device_taints("n0", DeviceKind.GPU)[2] == (
        DeviceTaint("example.com/note", "x", "NoSchedule"),)
    # a rule changed: its new selector applies
    state.apply_taint_rule("MODIFIED", _rule("b", driver=dra.DRIVER, device="gpu-4-share"))
    assert list(state.device_taints("n0", DeviceKind.SHARE)) == [4]


def test_a_relist_of_taint_rules_replaces_them_all() -> None:
    state = _state("n0")
    state.apply_taint_rule("ADDED", _rule("old", device="gpu-0"))
    state.resync_taint_rules([_rule("new", device="gpu-1"), _rule("", device="gpu-2"),
                              {"spec": {"taint": NOTE}}])
    assert state.taint_rule_count() == 1
    assert list(state.device_taints("n0", DeviceKind.GPU)) == [1]
    # the rule relisted under its name: a later DELETED event removes it
    state.apply_taint_rule("DELETED", _rule("new"))
    assert state.device_taints("n0", DeviceKind.GPU) == {}
    state.resync_taint_rules([])
    assert state.taint_rule_count() == 0


def test_a_taint_rule_is_read_from_its_selector_and_taint() -> None:
    rule = TaintRule.parse(_rule("r", NOTE, driver=dra.DRIVER, pool="n0", device="gpu-1"))
    assert rule == TaintRule(dra.DRIVER, "n0", "gpu-1", NOTE)
    assert rule.matches_pool("n0") and not rule.matches_pool("n1")
    assert TaintRule.parse(_rule("r")) == TaintRule(None, None, None, NOTE)
    assert TaintRule.parse({"spec": {"deviceSelector": {"pool": 5}}}).pool == "5"
    assert TaintRule.parse({"spec": "junk"}) == TaintRule(None, None, None, {})
    assert TaintRule.parse({"spec": {"deviceSelector": "junk", "taint": "junk"}}) == \
        TaintRule(None, None, None, {})
    assert TaintRule.parse({}) == TaintRule(None, None, None, {})
    assert not TaintRule(None, "n0", None, NOTE).matches_pool("n1")
    assert not TaintRule("nic.example.com", None, None, NOTE).matches_pool("n0")
    assert TaintRule(None, None, None, NOTE).matches_pool("anything")


# ------------------------------------------------------------------ the claims book
def test_an_allocated_claim_holds_its_gpus_until_deallocated_or_deleted() -> None:
    state = _state("n0")
    obj = _claim("a", _gpus("n0", 3, 1), count=2)
    parsed = state.apply_claim("ADDED", obj)
    assert isinstance(parsed, ClaimAsk) and parsed.node == "n0"
    assert state.claim("ns/a") == (obj, parsed)
    assert _held(state) == {1: (100, 0), 3: (100, 0)}
    (held,) = state.allocations()
    assert (held.pod, held.node, held.gpus, held.confirmed) == (
        PodRef("ns", "a", "u-a"), "n0", (3, 1), True)
    assert state.allocation("u-a") == held
    # deallocated (kube-scheduler's PostFilter, or the resourceclaim controller)
    state.apply_claim("MODIFIED", _claim("a", count=2))
    assert _held(state) == {} and state.allocation("u-a") is None
    assert state.claim("ns/a") is not None
    state.apply_claim("MODIFIED", obj)
    assert _held(state) == {1: (100, 0), 3: (100, 0)}
    assert state.apply_claim("DELETED", obj) is None
    assert _held(state) == {} and state.claim("ns/a") is None and state.claims() == []
    # a claim deleted before the watch showed it: nothing to forget, nothing fails
    assert state.apply_claim("DELETED", _claim("never-seen")) is None


def test_a_claim_without_uid_is_ignored_and_one_without_namespace_is_defaults() -> None:
    state = _state("n0")
    no_uid = _claim("a", _gpus("n0", 1))
    no_uid["metadata"]["uid"] = ""
    assert state.apply_claim("ADDED", no_uid) is None
    assert state.claims() == [] and _held(state) == {}
    bare = _claim("b", _gpus("n0", 2))
    del bare["metadata"]["namespace"]
    state.apply_claim("ADDED", bare)
    assert state.claim("default/b") is not None and _held(state) == {2: (100, 0)}
    state.apply_claim("DELETED", bare)
    assert state.claim("default/b") is None and _held(state) == {}


def test_an_unusable_claim_is_kept_with_its_reason_and_frees_its_gpus(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = _state("n0")
    state.apply_claim("ADDED", _claim("a", _gpus("n0", 4)))
    assert _held(state) == {4: (100, 0)}
    bad = _claim("a", _gpus("n0", 4), allocationMode="All")
    with caplog.at_level(logging.WARNING, logger="gputopo.dra.allocator"):
        parsed = state.apply_claim("MODIFIED", bad)
    assert caplog.messages == [str(parsed)]  # the operator sees why
    assert isinstance(parsed, ClaimError) and "allocationMode All" in str(parsed)
    assert state.claim("ns/a") == (bad, parsed)
    assert state.claims() == [(bad, parsed)]
    assert _held(state) == {}


def test_shares_and_slots_are_booked_with_their_amounts() -> None:
    state = _state("n0")
    share = dra.allocation_results("n0", [2], request="g", kind=DeviceKind.SHARE,
                                   core_percent=30, memory_mib=4096, share_ids=["s1"])
    state.apply_claim("ADDED", _claim("s", share, cls=dra.CLASS_SHARE,
                                      capacity={"requests": {"compute": "30"}}))
    (a,) = state.allocations()
    assert (a.gpus, a.core_percent, a.memory_mib, a.fractional, a.colocation, a.confirmed) == (
        (2,), 30, 4096, True, None, True)
    assert _held(state) == {2: (30, 4096)}
    slot = dra.allocation_results("n0", [5], request="g", kind=DeviceKind.SLOT,
                                  memory_mib=2048, share_ids=["t1"])
    resident = Resident("ns/t", default_resident(ClaimAsk("ns", "x", "u"), 1024).profile,
                        2048)
    state.remember_resident("u-t", resident)
    state.apply_claim("ADDED", _claim("t", slot, cls=dra.CLASS_SLOT))
    t = state.allocation("u-t")
    assert t is not None and (t.node, t.gpus, t.memory_mib, t.fractional, t.colocation,
                              t.confirmed) == ("n0", (5,), 2048, False, resident, True)
    assert t.pod == PodRef("ns", "t", "u-t")
    assert state.node_state("n0").used(5).residents == (resident,)
    # a slot whose pod's profile is unknown holds the conservative default resident
    state.apply_claim("ADDED", _claim("v", dra.allocation_results(
        "n0", [6], request="g", kind=DeviceKind.SLOT, memory_mib=1024, share_ids=["v1"]),
        cls=dra.CLASS_SLOT))
    v = state.allocation("u-v")
    parsed = state.claim("ns/v")
    assert v is not None and parsed is not None and isinstance(parsed[1], ClaimAsk)
    assert v.colocation == default_resident(parsed[1], 1024)
    assert v.colocation.name == "ns/v" and v.colocation.memory_mib == 1024
    # the remembered resident goes with its claim
    state.apply_claim("DELETED", _claim("t", slot, cls=dra.CLASS_SLOT))
    state.apply_claim("ADDED", _claim("t", slot, cls=dra.CLASS_SLOT))
    t = state.allocation("u-t")
    assert t is not None and t.colocation is not None and t.colocation.name == "ns/t"
    assert t.colocation != resident


def test_the_default_resident_is_sized_by_the_slots_memory() -> None:
    claim = ClaimAsk("ns", "c", "u")
    small, none = default_resident(claim, 512), default_resident(claim, 0)
    assert (small.name, small.memory_mib, none.memory_mib) == ("ns/c", 512, 0)
    assert small.profile.source == none.profile.source == "default"
    assert small.profile.gpu_memory_mib == 512  # the slot's memory, else the default's
    assert none.profile.gpu_memory_mib == default_profile().gpu_memory_mib > 0


def test_a_reservation_is_held_until_the_claim_shows_it_or_it_is_dropped() -> None:
    state = _state("n0")
    ref = PodRef("ns", "a", "u-a")
    state.hold(Allocation(ref, "n0", (0, 1)))  # held as a reservation, whatever it says
    (held,) = state.allocations()
    assert not held.confirmed and _held(state) == {0: (100, 0), 1: (100, 0)}
    # a claim's record is never replaced: its GPUs would look free
    with pytest.raises(ReservationConflict) as info:
        state.hold(Allocation(ref, "n0", (2,)))
    assert str(info.value) == "claim ns/a already holds GPUs (0, 1) on n0 (its write is in flight)"
    # another claim wanting one of them is refused
    with pytest.raises(ReservationConflict):
        state.hold(Allocation(PodRef("ns", "b", "u-b"), "n0", (1, 2)))
    # the claim seen unallocated (the write not landed yet): the reservation stays
    state.apply_claim("MODIFIED", _claim("a", count=2))
    assert _held(state) == {0: (100, 0), 1: (100, 0)}
    # an unusable claim keeps it too
    state.apply_claim("MODIFIED", _claim("a", count=2, adminAccess=True))
    assert _held(state) == {0: (100, 0), 1: (100, 0)}
    # the write landed: confirmed, and unhold no longer drops it
    state.apply_claim("MODIFIED", _claim("a", _gpus("n0", 0, 1), count=2))
    (held,) = state.allocations()
    assert held.confirmed
    state.unhold("u-a")
    assert _held(state) == {0: (100, 0), 1: (100, 0)}
    with pytest.raises(ReservationConflict) as info:
        state.hold(Allocation(ref, "n0", (2,)))
    assert str(info.value) == "claim ns/a already holds GPUs (0, 1) on n0"


def test_a_failed_write_gives_the_reservation_back() -> None:
    state = _state("n0")
    state.hold(Allocation(PodRef("ns", "a", "u-a"), "n0", (3,)))
    state.unhold("u-a")
    assert state.allocations() == [] and _held(state) == {}
    state.hold(Allocation(PodRef("ns", "b", "u-b"), "n0", (3,)))  # free again


def test_a_hold_checks_the_memory_of_a_share_against_the_topology() -> None:
    state = _state("n0")
    too_big = Allocation(PodRef("ns", "s", "u-s"), "n0", (0,), core_percent=10,
                         memory_mib=DGX1.gpus[0].memory_mib + 1, fractional=True)
    with pytest.raises(ReservationConflict, match="MiB free"):
        state.hold(too_big)
    # on a node whose topology is unknown there is nothing to check it against
    state.apply_node("DELETED", node_obj("n0", DGX1))
    state.hold(too_big)
    assert state.allocation("u-s") is not None


def test_a_claim_allocated_otherwise_than_reserved_holds_what_it_shows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = _state("n0")
    state.hold(Allocation(PodRef("ns", "a", "u-a"), "n0", (0, 1)))
    with caplog.at_level(logging.WARNING, logger="gputopo.dra.allocator"):
        state.apply_claim("MODIFIED", _claim("a", _gpus("n0", 4, 5), count=2))
        state.apply_claim("MODIFIED", _claim("a", _gpus("n0", 4, 5), count=2))  # no news
    assert caplog.messages == [
        "claim ns/a is allocated GPUs (4, 5) on n0, not the reserved (0, 1) on n0"]
    (held,) = state.allocations()
    assert (held.gpus, held.confirmed) == ((4, 5), True)
    assert _held(state) == {4: (100, 0), 5: (100, 0)}


def test_a_relist_keeps_reservations_and_drops_claims_gone() -> None:
    state = _state("n0")
    state.apply_claim("ADDED", _claim("gone", _gpus("n0", 0)))
    state.apply_claim("ADDED", _claim("kept", _gpus("n0", 1)))
    state.hold(Allocation(PodRef("ns", "flight", "u-flight"), "n0", (2,)))
    state.hold(Allocation(PodRef("ns", "landed", "u-landed"), "n0", (3,)))
    state.resync_claims([_claim("kept", _gpus("n0", 1)), _claim("landed", _gpus("n0", 6)),
                         _claim("new", _gpus("n0", 7))])
    assert state.claim("ns/gone") is None and state.claim("ns/new") is not None
    got = {a.pod.name: (a.gpus, a.confirmed) for a in state.allocations()}
    assert got == {"kept": ((1,), True), "flight": ((2,), False), "landed": ((6,), True),
                   "new": ((7,), True)}
    assert _held(state) == {i: (100, 0) for i in (1, 2, 6, 7)}
    # the reservation still in flight still refuses its GPU to others
    with pytest.raises(ReservationConflict):
        state.hold(Allocation(PodRef("ns", "x", "u-x"), "n0", (2,)))



def test_a_relist_forgets_the_residents_of_claims_gone() -> None:
    """A slot claim deleted while the watch was down leaves no remembered resident behind
    (it was kept forever); the residents of claims still listed, or reserved in flight, stay."""
    state = _state("n0")
    slot = dra.allocation_results("n0", [5], request="g", kind=DeviceKind.SLOT,
                                  memory_mib=2048, share_ids=["t1"])
    resident = Resident("ns/t", default_resident(ClaimAsk("ns", "x", "u"), 1024).profile,
                        2048)
    for uid in ("u-t", "u-gone", "u-flight"):
        state.remember_resident(uid, resident)
    state.apply_claim("ADDED", _claim("t", slot, cls=dra.CLASS_SLOT))
    state.apply_claim("ADDED", _claim("gone", _gpus("n0", 0)))
    state.hold(Allocation(PodRef("ns", "flight", "u-flight"), "n0", (3,)))
    state.resync_claims([_claim("t", slot, cls=dra.CLASS_SLOT)])
    assert set(state._residents) == {"u-t", "u-flight"}  # noqa: SLF001 - the leak itself
    t = state.allocation("u-t")
    assert t is not None and t.colocation == resident


def test_a_claim_shown_on_a_reserved_gpu_is_booked_as_the_api_says() -> None:
    # what the API says a claim holds is recorded even over another claim's reservation (the
    # watch must not fail on it; the reservation's write then fails and gives it back)
    state = _state("n0")
    state.hold(Allocation(PodRef("ns", "flight", "u-flight"), "n0", (2,)))
    state.apply_claim("ADDED", _claim("other", _gpus("n0", 2)))
    other = state.allocation("u-other")
    assert other is not None and (other.gpus, other.confirmed) == ((2,), True)
    state.unhold("u-flight")
    assert [a.pod.name for a in state.allocations()] == ["other"]


def test_an_allocation_whose_node_is_unknown_holds_nothing() -> None:
    # gputopo's devices with neither a pool nor a node selector: not booked, and no failure
    state = _state("n0")
    results = [{k: v for k, v in r.items() if k != "pool"} for r in _gpus("n0", 1)]
    parsed = state.apply_claim("ADDED", _claim("a", results))
    assert isinstance(parsed, ClaimAsk) and parsed.allocated and parsed.node is None
    assert state.allocations() == []


def test_a_relist_showing_a_reserved_gpu_taken_keeps_both_records() -> None:
    # the API's word and the write in flight: the relist must not fail half-way (the write's
    # outcome, or the claim watch, settles it)
    state = _state("n0")
    state.hold(Allocation(PodRef("ns", "flight", "u-flight"), "n0", (2,)))
    state.resync_claims([_claim("other", _gpus("n0", 2)), _claim("more", _gpus("n0", 3))])
    got = {a.pod.name: (a.gpus, a.confirmed) for a in state.allocations()}
    assert got == {"other": ((2,), True), "flight": ((2,), False), "more": ((3,), True)}


# ------------------------------------------------------------------ the ClusterState rest
def _decision(*gpus: int) -> Decision:
    return Decision("gputopo", gpus, ("",) * len(gpus), gpus, 0.0, 0.0, 0.0, "mapa-eq2", 0.0,
                    0.0, "", ())


def test_reserve_and_release_follow_the_extenders_protocol() -> None:
    state = _state("n0")
    decision = _decision(4, 6)
    state.reserve("u-p", "n0", decision, pod=PodRef("ns", "p", "u-p"))
    held = state.allocation("u-p")
    assert held is not None and (held.gpus, held.confirmed, held.pod.name) == (
        (4, 6), False, "p")
    # reserved under the key given, even when the pod's own UID differs
    state.reserve("other-key", "n0", _decision(0),
                  pod=PodRef("ns", "q", "u-q"))
    other = state.allocation("other-key")
    assert other is not None and other.pod == PodRef("ns", "q", "other-key")
    with pytest.raises(ReservationConflict):
        state.reserve("u-r", "n0", _decision(6), pod=PodRef("ns", "r", "u-r"))
    state.release("u-p", reservation_only=True)
    assert state.allocation("u-p") is None
    state.apply_claim("ADDED", _claim("c", _gpus("n0", 1)))
    state.release("u-c", reservation_only=True)  # confirmed: kept
    assert state.allocation("u-c") is not None
    state.release("u-c")
    assert state.allocation("u-c") is None and _held(state) == {0: (100, 0)}
    with pytest.raises(BindError):
        state.bind(PodRef("ns", "p"), "n0", decision)
    assert state.pod_uid("ns", "p") is None and state.fetch_pod("ns", "p") is None


def test_a_topology_annotation_read_once_per_text() -> None:
    state = _state("n0", "n1")
    t0, t1 = state.node_topology("n0"), state.node_topology("n1")
    assert isinstance(t0, Topology) and t0 is t1
