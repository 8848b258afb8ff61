"""The DRA allocator's writes as the API sees them: what a claim's status and metadata get,
which copy of the pod the gate's removal patches, and what a failed write leaves behind —
nothing held, the pod tried again unless it is gone, the counters the service exports
(thirteenth mutation round, docs/testing.md)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from scheduler_extender.dra.claims import DELETE_PROTECTION
from scheduler_extender.kubernetes_state import ApiError
from tests.scheduler_extender.dra_fakes import (
    FakeAPI,
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


def _results(api: FakeAPI, claim: str) -> list[dict[str, Any]]:
    return list(api.claims[claim]["status"]["allocation"]["devices"]["results"])


def _held(api: FakeAPI) -> list[int]:
    return sorted(dra.parse_device_name(r["device"]).index for c in api.claims.values()
                  if c["status"].get("allocation") for r in c["status"]["allocation"]
                  ["devices"]["results"])


def _fail_once(api: FakeAPI, claim: str, error: Exception) -> list[int]:
    """The first write of ``claim``'s status raises ``error``; returns the attempt count."""
    real = api.patch_claim_status
    tries = [0]

    def flaky(namespace: str, name: str, resource_version: str,
              status: Mapping[str, Any]) -> dict[str, Any]:
        if f"{namespace}/{name}" == claim:
            tries[0] += 1
            if tries[0] == 1:
                api.writes.append(("claim", claim))
                raise error
        return real(namespace, name, resource_version, status)

    api.patch_claim_status = flaky  # type: ignore[method-assign]
    return tries


def test_a_claims_status_and_finalizers_as_written() -> None:
    """Whole GPUs carry no shareID, a share a fresh UUID; the finalizers a claim had are
    kept beside the delete protection added; the counters count claims and pods."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    kept = claim_obj("ns", "w", [gpus("g", 2)])
    kept["metadata"]["finalizers"] = ["example.com/keep"]
    api.add_claim(kept)
    api.add_claim(claim_obj("ns", "s", [share("s", 30, "2Gi")]))
    api.add_pod(pod_obj("ns", "p", [("w", "w"), ("s", "s")]))
    api.add_pod(pod_obj("ns", "q", [("s", "s")]))
    drain(alloc)
    assert api.claims["ns/w"]["metadata"]["finalizers"] == ["example.com/keep",
                                                            DELETE_PROTECTION]
    assert all("shareID" not in r for r in _results(api, "ns/w"))
    (r,) = _results(api, "ns/s")
    assert str(uuid.UUID(r["shareID"])) == r["shareID"]
    assert (alloc.metrics.allocated_claims, alloc.metrics.released_pods,
            alloc.metrics.write_errors) == (2, 2, 0)


def test_a_failed_claim_write_frees_its_gpus_and_the_pod_is_tried_again() -> None:
    """The second of a pod's two claim writes fails (a 500): the first stays allocated, the
    second's GPUs are not held, the error is counted, and the pod is decided again — its
    second claim on the first's node, no GPU twice."""
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"})
    pod = pod_obj("ns", "p", [("x", "a"), ("y", "b")])  # owns its claims: no finalizer
    api.add_claim(claim_obj("ns", "a", [gpus("g", 2)], owner=pod))  # write (and its event)
    api.add_claim(claim_obj("ns", "b", [gpus("g", 2)], owner=pod))
    tries = _fail_once(api, "ns/b", ApiError("500 injected", 500))
    api.add_pod(pod)
    drain(alloc)
    assert tries[0] == 2
    assert alloc.metrics.write_errors == 1
    assert alloc.metrics.allocated_claims == 2
    a, b = api.claims["ns/a"], api.claims["ns/b"]
    assert a["status"]["allocation"]["nodeSelector"] == b["status"]["allocation"]["nodeSelector"]
    assert len(set(_held(api))) == 4
    assert {g for x in alloc.state.book.all() for g in x.gpus} == set(_held(api))
    assert api.pods["ns/p"]["spec"]["schedulingGates"] == []



def test_every_failed_claim_write_is_counted() -> None:
    """Two pods' claim writes each fail once: two failed writes counted, both pods placed."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    for name in ("a", "b"):
        pod = pod_obj("ns", name, [("x", name)])
        api.add_claim(claim_obj("ns", name, [gpus("g", 2)], owner=pod))
        _fail_once(api, f"ns/{name}", ApiError("500 injected", 500))
        api.add_pod(pod)
    drain(alloc)
    assert (alloc.metrics.write_errors, alloc.metrics.allocated_claims) == (2, 2)
    assert len(set(_held(api))) == 4


def test_an_unexpected_error_in_the_writes_is_retried_too() -> None:
    alloc, api = cluster({"n0": "dgx1-v100"})
    pod = pod_obj("ns", "p", [("x", "a")])
    api.add_claim(claim_obj("ns", "a", [gpus("g", 3)], owner=pod))  # no finalizer write
    tries = _fail_once(api, "ns/a", RuntimeError("the client broke"))
    api.add_pod(pod)
    drain(alloc)
    assert tries[0] == 2 and alloc.metrics.write_errors == 1
    assert len(_results(api, "ns/a")) == 3
    assert [x.gpus for x in alloc.state.book.all()] == [
        tuple(sorted(dra.parse_device_name(r["device"]).index
                     for r in _results(api, "ns/a")))]
    assert api.pods["ns/p"]["spec"]["schedulingGates"] == []



def test_a_failed_gate_removal_alone_is_counted_and_tried_again() -> None:
    """A pod whose one claim is already allocated (shared with another pod) needs only its
    gate removed; the removal fails, first with a 500, then with an unexpected error: each
    is counted as a failed write and tried again, and the third removes the gate — the pod is
    never left marked busy with its gate on."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    api.add_claim(claim_obj("ns", "s", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "a", [("g", "s")]))
    drain(alloc)
    real, failures = api.release_pod, [ApiError("500 injected", 500),
                                       RuntimeError("the client broke")]

    def flaky(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> None:
        if pod["metadata"]["name"] == "q" and failures:
            raise failures.pop(0)
        real(pod, annotations)

    api.release_pod = flaky  # type: ignore[method-assign]
    api.add_pod(pod_obj("ns", "q", [("g", "s")]))
    drain(alloc)
    assert not failures and api.pods["ns/q"]["spec"]["schedulingGates"] == []
    assert (alloc.metrics.write_errors, alloc.metrics.released_pods) == (2, 2)


def test_a_claim_gone_when_written_is_not_written_again() -> None:
    """A 404 (the claim was deleted; the watch has not said so yet): the pod is not tried
    again on its own — it waits for the next event — and nothing is held."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    pod = pod_obj("ns", "p", [("x", "a")])
    api.add_claim(claim_obj("ns", "a", [gpus("g", 2)], owner=pod))  # no finalizer write
    tries = _fail_once(api, "ns/a", ApiError("404 Not Found", 404))
    api.add_pod(pod)
    drain(alloc)
    assert tries[0] == 1
    assert alloc.state.book.all() == []
    assert alloc.metrics.write_errors == 1


def test_the_gate_is_removed_from_the_pod_as_last_seen() -> None:
    """Another controller added its own gate before gputopo's while the pod was decided:
    the gate's removal patches the pod as the watch last delivered it (gputopo's gate at
    index 1), so it succeeds at once and leaves the other gate."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    pod = pod_obj("ns", "p", [("g", "c")])
    decide = alloc.decider.decide

    def decide_while_a_gate_is_added(*args: Any, **kwargs: Any) -> Any:
        live = api.pods["ns/p"]
        live["spec"]["schedulingGates"].insert(0, {"name": "example.com/other"})
        alloc.on_pod("MODIFIED", copy.deepcopy(live))
        return decide(*args, **kwargs)

    alloc.decider.decide = decide_while_a_gate_is_added  # type: ignore[method-assign]
    api.add_claim(claim_obj("ns", "c", [gpus("g", 2)]))
    api.add_pod(pod)
    alloc.sync("ns/p")
    alloc.decider.decide = decide  # type: ignore[method-assign]
    drain(alloc)
    assert api.pods["ns/p"]["spec"]["schedulingGates"] == [{"name": "example.com/other"}]
    assert api.writes.count(("pod", "ns/p")) == 1
    assert alloc.metrics.write_errors == 0


def test_a_released_pod_is_not_released_again_before_the_watch_says_so() -> None:
    """The watch delivers the released pod late: a claim event meanwhile makes the pod be
    looked at again, still gated in the allocator's copy — it is not patched a second time
    (the patch would fail its test of the gate, and be retried for ever)."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    late: list[dict[str, Any]] = []
    on_pod = alloc.on_pod

    def hold_back(kind: str, pod: Any) -> None:
        late.append(copy.deepcopy(pod))

    alloc.on_pod = hold_back  # type: ignore[method-assign]
    pod = pod_obj("ns", "p", [("g", "c")])
    api.add_claim(claim_obj("ns", "c", [gpus("g", 2)]))
    api.pods["ns/p"] = pod
    on_pod("ADDED", copy.deepcopy(pod))
    drain(alloc)  # decided, written, released; the watch's copy of the release held back
    assert api.pods["ns/p"]["spec"]["schedulingGates"] == []
    assert late and late[-1]["spec"]["schedulingGates"] == []  # not delivered yet
    obj = api.claims["ns/c"]
    obj["metadata"]["resourceVersion"] = "998"
    alloc.on_claim("MODIFIED", copy.deepcopy(obj))  # the claim changes: the pod is queued
    drain(alloc)
    assert api.writes.count(("pod", "ns/p")) == 1
    assert alloc.metrics.write_errors == 0


def _nic(name: str) -> dict[str, Any]:
    return claim_obj("ns", name, [{"name": "n", "exactly": {"deviceClassName": "nic.example.com",
                                                            "count": 1}}])


def _flaky_release(api: FakeAPI, *statuses: int) -> list[int]:
    """The first releases fail with ``statuses`` in turn; returns the attempt count."""
    real = api.release_pod
    tries = [0]

    def flaky(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> None:
        tries[0] += 1
        if tries[0] <= len(statuses):
            api.writes.append(("pod", "ns/p"))
            raise ApiError(f"{statuses[tries[0] - 1]} injected", statuses[tries[0] - 1])
        real(pod, annotations)

    api.release_pod = flaky  # type: ignore[method-assign]
    return tries


def test_a_pod_without_gputopo_claims_has_its_gate_removed_once_even_after_a_failure() -> None:
    """A pod whose claims are another driver's (or a pod with gputopo's gate and no claim at
    all): its gate is removed — retried after a 500, counted once; an ordinary pod (no claim,
    no gate) and an ungated pod are never patched."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    tries = _flaky_release(api, 500)
    api.add_claim(_nic("nic"))
    api.add_pod(pod_obj("ns", "p", [("n", "nic")]))
    drain(alloc)
    assert tries[0] == 2
    assert api.pods["ns/p"]["spec"]["schedulingGates"] == []
    assert alloc.metrics.released_pods == 1
    bare = pod_obj("ns", "bare", [])
    api.add_pod(bare)
    plain = pod_obj("ns", "plain", [], gated=False)
    api.add_pod(plain)
    api.add_pod(pod_obj("ns", "ungated", [("n", "nic")], gated=False))
    alloc.on_pod("DELETED", pod_obj("ns", "never-seen", []))
    drain(alloc)
    assert api.pods["ns/bare"]["spec"]["schedulingGates"] == []
    assert ("pod", "ns/plain") not in api.writes
    assert ("pod", "ns/ungated") not in api.writes
    assert alloc.metrics.released_pods == 2


def test_a_release_of_a_pod_gone_is_not_retried() -> None:
    alloc, api = cluster({"n0": "dgx1-v100"})
    tries = _flaky_release(api, 404)
    api.add_claim(_nic("nic"))
    api.add_pod(pod_obj("ns", "p", [("n", "nic")]))
    drain(alloc)
    assert tries[0] == 1
    assert alloc.metrics.released_pods == 0


def test_a_release_in_flight_is_not_started_twice_and_patches_the_pod_as_last_seen() -> None:
    """The writer is busy (another pod's claim write) when the pod's release is queued; the
    pod is looked at again meanwhile, and another controller adds its own gate before
    gputopo's: one release, of the pod as the watch last delivered it (gputopo's gate at
    index 1), and the other gate stays."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    gate = held_claim_writes(api)
    api.add_claim(claim_obj("ns", "busy", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "busy", [("g", "busy")]))
    alloc.sync("ns/busy")  # the one writer now waits
    api.add_claim(_nic("nic"))
    api.add_pod(pod_obj("ns", "p", [("n", "nic")]))
    alloc.sync("ns/p")  # its release queued behind
    alloc.sync("ns/p")
    live = api.pods["ns/p"]
    live["spec"]["schedulingGates"].insert(0, {"name": "example.com/other"})
    alloc.on_pod("MODIFIED", copy.deepcopy(live))
    alloc.sync("ns/p")
    gate.set()
    drain(alloc)
    assert api.pods["ns/p"]["spec"]["schedulingGates"] == [{"name": "example.com/other"}]
    assert api.writes.count(("pod", "ns/p")) == 1
    assert alloc.metrics.write_errors == 0


def test_a_pod_released_with_its_claim_allocated_is_decided_again_when_it_is_freed() -> None:
    """Pod p shares claim c with a pod bound before it: c is allocated already, so the
    allocator only removes p's gate. kube-scheduler then deallocates c (its PostFilter: the
    node does not suit p): p is decided again and c allocated anew."""
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"})
    api.add_claim(claim_obj("ns", "c", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "first", [("g", "c")]))
    drain(alloc)
    api.bind("ns/first", "n0", "2026-01-01T00:00:01Z")
    api.add_pod(pod_obj("ns", "p", [("g", "c")]))
    drain(alloc)  # allocated already: only the gate goes
    assert api.pods["ns/p"]["spec"]["schedulingGates"] == []
    assert api.writes.count(("claim", "ns/c")) == 1
    obj = api.claims["ns/c"]
    obj["status"] = {}
    obj["metadata"]["resourceVersion"] = "999"
    alloc.on_claim("MODIFIED", copy.deepcopy(obj))
    drain(alloc)
    assert api.writes.count(("claim", "ns/c")) == 2
    assert api.claims["ns/c"]["status"].get("allocation")


def test_a_device_classs_config_goes_into_the_allocations_while_the_class_has_it() -> None:
    """kube-scheduler copies a DeviceClass's ``spec.config`` into each allocation of a claim
    asking it (source ``FromClass``); so does the allocator, with the class as last seen —
    none once the class is deleted."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    opaque = {"opaque": {"driver": dra.DRIVER, "parameters": {"mode": "exclusive"}}}
    cls = next(c for c in dra.device_classes() if c["metadata"]["name"] == dra.CLASS_GPU)
    cls = copy.deepcopy(cls)
    cls["spec"]["config"] = [opaque]
    alloc.on_class("MODIFIED", cls)
    api.add_claim(claim_obj("ns", "a", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "a", [("g", "a")]))
    drain(alloc)
    assert api.claims["ns/a"]["status"]["allocation"]["devices"]["config"] == [
        {"source": "FromClass", "requests": ["g"], **opaque}]
    alloc.on_class("DELETED", cls)
    api.add_claim(claim_obj("ns", "b", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "b", [("g", "b")]))
    drain(alloc)
    assert not api.claims["ns/b"]["status"]["allocation"]["devices"].get("config")


def test_a_node_or_pool_withdrawn_is_not_allocated_on() -> None:
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"})
    alloc.on_node("DELETED", api_node(alloc, "n0"))
    api.add_claim(claim_obj("ns", "a", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "a", [("g", "a")]))
    drain(alloc)
    assert api.claims["ns/a"]["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0][
        "matchFields"][0]["values"] == ["n1"]
    alloc, api = cluster({"n0": "dgx1-v100", "n1": "dgx1-v100"})
    for s in dra.resource_slices(catalog.get("dgx1-v100"), "n0"):
        alloc.on_slice("DELETED", s)
    api.add_claim(claim_obj("ns", "a", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "a", [("g", "a")]))
    drain(alloc)
    assert api.claims["ns/a"]["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0][
        "matchFields"][0]["values"] == ["n1"]


def api_node(alloc: Any, name: str) -> dict[str, Any]:
    """The Node object the allocator holds for ``name``."""
    with alloc._lock:  # noqa: SLF001 - the object the fake cluster fed it
        return dict(alloc._nodes[name])  # noqa: SLF001


def _template_pod(name: str, claim: str | None) -> dict[str, Any]:
    """A pod with one claim from a ResourceClaimTemplate; ``claim``: the name the
    resourceclaim controller recorded (None: no claim needed)."""
    pod = pod_obj("ns", name, [])
    pod["spec"]["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "tmpl"}]
    pod["status"]["resourceClaimStatuses"] = [{"name": "g", "resourceClaimName": claim}]
    return pod


def test_a_template_claim_is_allocated_only_for_the_pod_owning_it() -> None:
    """The claim a template generated is allocated for the pod that owns it; one left by an
    earlier pod of that name (another UID) is not — the pod waits for its own."""
    alloc, api = cluster({"n0": "dgx1-v100"})
    pod = _template_pod("p", "p-g-1")
    api.add_claim(claim_obj("ns", "p-g-1", [gpus("g", 2)], owner=pod))
    api.add_pod(pod)
    drain(alloc)
    assert len(_results(api, "ns/p-g-1")) == 2
    stale_owner = _template_pod("q", "q-g-1")
    api.add_claim(claim_obj("ns", "q-g-1", [gpus("g", 2)], owner=stale_owner))
    api.add_pod(_template_pod("q", "q-g-1"))  # a new pod q: another UID
    drain(alloc)
    assert api.claims["ns/q-g-1"]["status"] == {}
    assert api.pods["ns/q"]["spec"]["schedulingGates"]


def test_a_claim_the_controller_found_not_needed_does_not_hide_the_next() -> None:
    alloc, api = cluster({"n0": "dgx1-v100"})
    pod = _template_pod("p", None)
    pod["spec"]["resourceClaims"].append({"name": "h", "resourceClaimName": "c"})
    api.add_claim(claim_obj("ns", "c", [gpus("g", 2)]))
    api.add_pod(pod)
    drain(alloc)
    assert len(_results(api, "ns/c")) == 2
    assert api.pods["ns/p"]["spec"]["schedulingGates"] == []


@pytest.mark.parametrize(("compute", "memory", "says"), [
    (60, "4Gi", "no GPU has 60% vGPU-core and 4096 MiB free"),  # core: 120 % of the GPU
    (30, "10Gi", "no GPU has 30% vGPU-core and 10240 MiB free"),  # memory: 20 GiB of 16
], ids=["compute", "memory"])
def test_a_share_whose_write_is_in_flight_is_held_against_the_next_decision(
        compute: int, memory: str, says: str) -> None:
    """On a one-GPU node, a share is decided and its claim write is still in flight (the
    watch cannot show it yet) when a second share is decided: the first is held on that node
    with its vGPU-core and its memory, so the second, which together with it would exceed the
    GPU, waits — never two shares beyond one GPU. (Round 13's in-flight hold survivors: a
    share held without its node, its core percent or its memory.)"""
    alloc, api = cluster({"n0": "v100-1gpu"})
    gate = held_claim_writes(api)
    api.add_claim(claim_obj("ns", "a", [share("g", compute, memory)]))
    api.add_pod(pod_obj("ns", "p1", [("g", "a")]))
    alloc.sync("ns/p1")  # decided; its claim write waits
    api.add_claim(claim_obj("ns", "b", [share("g", compute, memory)]))
    api.add_pod(pod_obj("ns", "p2", [("g", "b")]))
    alloc.sync("ns/p2")
    assert says in alloc.pending()["ns/p2"]
    gate.set()
    drain(alloc)
    assert [w for w in api.writes if w[0] == "claim"] == [("claim", "ns/a")]


def test_a_slot_whose_write_is_in_flight_is_held_against_the_next_decision() -> None:
    """The same for co-location slots: the first slot's 10 GiB is held on the one GPU while
    its write is in flight, so a second 10 GiB slot (20 GiB of 16) waits instead of joining
    it. (Round 13's slot in-flight survivor held without its node; the one held without its
    memory passes this test too: the slot's memory is counted through its resident as well.)"""
    alloc, api = cluster({"n0": "v100-1gpu"}, policy="mapa-greedy", colocation_policy="gputopo")
    gate = held_claim_writes(api)
    for name in ("a", "b"):
        api.add_claim(claim_obj("ns", f"{name}-slot", [slot("s", "10Gi")]))
        api.add_pod(pod_obj("ns", name, [("s", f"{name}-slot")],
                            annotations={"gputopo.io/profile": "resnet18:64"}))
        alloc.sync(f"ns/{name}")  # a decided, its write waits; then b
    assert "ns/b" in alloc.pending() and "ns/a" not in alloc.pending()
    gate.set()
    drain(alloc)
    assert [w for w in api.writes if w[0] == "claim"] == [("claim", "ns/a-slot")]


class _LaggingClaimWatch:
    """The allocator as the fake API server sees it, with the claim watch lagging: claim
    events are kept until :meth:`deliver` (pod events pass at once)."""

    def __init__(self, alloc: Any) -> None:
        self.alloc, self.kept = alloc, []

    def on_claim(self, kind: str, obj: dict[str, Any]) -> None:
        self.kept.append((kind, obj))

    def deliver(self) -> None:
        for kind, obj in self.kept:
            self.alloc.on_claim(kind, obj)
        self.kept = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.alloc, name)


def test_a_written_claim_stays_held_when_a_later_claim_of_its_pod_fails_while_the_watch_lags(
) -> None:
    """A pod's first claim is written, its second claim's write fails, and the claim watch
    has not shown the first yet: the first's GPUs must stay held (only the failed claim's are
    let go), or the next decision could hand them out a second time before the watch catches
    up. (Round 13's last in-flight survivor: the written claim's hold dropped with the
    failed one's.)"""
    alloc, api = cluster({"n0": "dgx1-v100"})
    lag = _LaggingClaimWatch(alloc)
    api.allocator = lag  # type: ignore[assignment]
    pod = pod_obj("ns", "p", [("x", "a"), ("y", "b")])
    api.add_claim(claim_obj("ns", "a", [gpus("g", 2)], owner=pod))
    api.add_claim(claim_obj("ns", "b", [gpus("g", 2)], owner=pod))
    lag.deliver()  # the claims as created
    _fail_once(api, "ns/b", ApiError("500 injected", 500))
    api.add_pod(pod)
    with alloc._lock:  # noqa: SLF001 - the test drives the loop itself
        alloc._queue.clear()  # noqa: SLF001
    alloc.sync("ns/p")
    alloc._writers.submit(lambda: None).result()  # noqa: SLF001 - the writes are over
    assert alloc.metrics.write_errors == 1 and lag.kept  # a's allocation not seen yet
    written = {dra.parse_device_name(r["device"]).index for r in _results(api, "ns/a")}
    held = {g for x in alloc.state.book.all() for g in x.gpus}
    assert held == written and len(written) == 2
    api.allocator = alloc  # the watch catches up
    lag.deliver()
    drain(alloc)  # the pod's retry: its second claim now
    assert len(set(_held(api))) == 4


def _after_the_first_hold(alloc: Any, action: Callable[[], None]) -> list[bool]:
    """Run ``action`` (a watch event) once, right after the allocator holds the first claim of
    a decision and before it records the decision on the pod's record: the moment a pod event
    can arrive mid-decision. Returns a list that is non-empty once it ran."""
    real_hold, ran = alloc.state.hold, []

    def hold(allocation: Any) -> None:
        real_hold(allocation)
        if not ran:
            ran.append(True)
            action()

    alloc.state.hold = hold
    return ran


def test_a_pod_updated_during_its_own_decision_keeps_the_decision() -> None:
    """The pod watch delivers a newer version of a waiting pod (same UID, a label added)
    while the allocator decides for it: the decision goes to the record the watch put in
    place — its reason cleared, so the pod is no longer listed as waiting, and its
    annotations kept, so that a gate removal tried again after a failure still writes the
    decision onto the pod. (Round 13's two survivors: a pod replaced during its own
    decision; each mutant checked to fail this test.)"""
    alloc, api = cluster({"n0": "dgx1-v100"})
    api.add_claim(claim_obj("ns", "big", [gpus("g", 8)]))
    api.add_pod(pod_obj("ns", "big", [("g", "big")]))
    drain(alloc)
    api.add_claim(claim_obj("ns", "c", [gpus("g", 2)]))
    api.add_pod(pod_obj("ns", "p", [("g", "c")]))
    drain(alloc)
    assert "no node has the GPUs" in alloc.pending()["ns/p"]

    def update() -> None:  # the watch's MODIFIED
        live = api.pods["ns/p"]
        live["metadata"].setdefault("labels", {})["touched"] = "yes"
        api._bump(live)  # noqa: SLF001 - the fake's resourceVersion
        alloc.on_pod("MODIFIED", copy.deepcopy(live))

    updated = _after_the_first_hold(alloc, update)
    real_release, releases = api.release_pod, []

    def fail_first_release(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> None:
        releases.append(dict(annotations))
        if len(releases) == 1:
            raise ApiError("500 injected", 500)
        real_release(pod, annotations)

    api.release_pod = fail_first_release  # type: ignore[method-assign]
    api.delete_pod("ns/big")  # its GPUs come back
    with alloc._lock:  # noqa: SLF001 - the test drives the loop itself
        alloc._queue.clear()  # noqa: SLF001
    alloc.sync("ns/p")
    alloc._writers.submit(lambda: None).result()  # noqa: SLF001 - the writes are over
    assert updated and len(_results(api, "ns/c")) == 2
    assert "ns/p" not in alloc.pending()
    drain(alloc)  # the gate removal, tried again from the record the watch replaced
    live = api.pods["ns/p"]
    assert live["spec"]["schedulingGates"] == [] and live["metadata"]["labels"]["touched"] == "yes"
    assert len(releases) == 2 and releases[1] == releases[0]
    decided = {k: v for k, v in live["metadata"].get("annotations", {}).items()
               if k.startswith("gputopo.io/")}
    assert decided and decided == releases[0]



def test_a_pod_recreated_under_its_name_during_the_decision_gets_none_of_it() -> None:
    """The pod is deleted and a new pod of the same name (another UID) is created while the
    allocator decides for the old one; the new pod's one claim is already allocated (shared
    with another pod), so it needs only its gate removed: it must not carry the old pod's
    decision (GPUs it was never given) in its annotations. (The third form of round 13's
    survivor: the UID check of the record the watch replaced; checked to fail this test.)"""
    alloc, api = cluster({"n0": "dgx1-v100"})
    api.add_claim(claim_obj("ns", "s", [gpus("g", 1)]))
    api.add_pod(pod_obj("ns", "a", [("g", "s")]))
    drain(alloc)
    assert len(_results(api, "ns/s")) == 1
    api.add_claim(claim_obj("ns", "c", [gpus("g", 2)]))
    def recreate() -> None:
        api.delete_pod("ns/p")
        api.add_pod(pod_obj("ns", "p", [("g", "s")]))

    swapped = _after_the_first_hold(alloc, recreate)
    old = api.add_pod(pod_obj("ns", "p", [("g", "c")]))
    drain(alloc)
    live = api.pods["ns/p"]
    assert swapped and live["metadata"]["uid"] != old["metadata"]["uid"]
    assert live["spec"]["schedulingGates"] == []
    assert not [k for k in live["metadata"].get("annotations") or {}
                if k.startswith("gputopo.io/")]


def test_a_pod_deleted_during_its_own_decision_leaks_no_gpu() -> None:
    """The pod is deleted while the allocator decides for it (the watch drops its record):
    the decision is still written (its claim's owner, the garbage collector, then deletes the
    claim), nothing is raised, and once the claim is gone every GPU can be handed out again —
    no reservation left behind. (Checked to fail with the replaced-record check reading a
    record that is gone.)"""
    alloc, api = cluster({"n0": "dgx1-v100"})
    pod = pod_obj("ns", "p", [("g", "c")])
    api.add_claim(claim_obj("ns", "c", [gpus("g", 2)], owner=pod))
    deleted = _after_the_first_hold(alloc, lambda: api.delete_pod("ns/p"))
    api.add_pod(pod)
    drain(alloc)
    assert deleted and len(_results(api, "ns/c")) == 2 and "ns/p" not in api.pods
    gone = api.claims.pop("ns/c")  # the garbage collector: its owner is gone
    alloc.on_claim("DELETED", gone)
    api.add_claim(claim_obj("ns", "all", [gpus("g", 8)]))
    api.add_pod(pod_obj("ns", "q", [("g", "all")]))
    drain(alloc)
    assert sorted(_held(api)) == list(range(8)) and not alloc.pending()
