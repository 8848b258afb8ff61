"""KubernetesState over a fake API: rebuild from annotations, frees on deletion, one Binding
carrying the decision, in-flight reservations confirmed by the watch, nothing held after a
refused Binding (and the GPUs kept after a lost reply), 410 Gone relists."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from scheduler_extender.kubernetes_state import ApiError, KubernetesState
from scheduler_extender.pending import CONDITION_POSTPONED, postponed_at, postponed_condition
from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs
from scheduler_extender.state import ClusterState, NodeTopologyError
from scheduler_extender.verbs import Extender
from tests.scheduler_extender.fake_kube import FakeKubeAPI
from tests.scheduler_extender.helpers import POLICY, gpu_pod, names_args
from topology import catalog
from topology.contract import (
    ANN_NODE,
    ANN_UNHEALTHY_GPUS,
    OUTPUT_ANNOTATIONS,
    assignment_annotations,
    parse_assignment,
)
from topology.policies.base import NodeState, Request
from topology.policies.evaluate import Evaluator

#: This module's own evaluator (decision cache and policy memo; nothing shared).
place = Evaluator().place

DGX = catalog.get("dgx1-v100")


def wait_for(cond: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Poll until ``cond`` holds (the watch threads are asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def annotated(gpus: tuple[int, ...], node: str) -> dict[str, str]:
    """Output annotations of a decision on exactly ``gpus`` of a DGX-1."""
    d = place("baseline", DGX, NodeState.whole(set(range(8)) - set(gpus)),
              Request(count=len(gpus)))
    assert d.gpus == gpus
    return assignment_annotations(d, node)


@pytest.fixture
def fake() -> Iterator[FakeKubeAPI]:
    api = FakeKubeAPI()
    api.add_node("n0", DGX)
    api.add_node("n1", DGX)
    api.add_node("bare", None)
    api.add_pod("running", "u-run", node="n0", annotations=annotated((0, 1, 2, 3), "n0"),
                phase="Running")
    api.add_pod("finished", "u-done", node="n1", annotations=annotated((0, 1), "n1"),
                phase="Succeeded")
    api.add_pod("plain", "u-plain", node="n1", phase="Running")
    yield api
    api.close()


@pytest.fixture
def kube(fake: FakeKubeAPI) -> Iterator[KubernetesState]:
    state = KubernetesState(fake, watch_timeout_s=1)
    assert not state.ready()
    state.start()
    yield state
    fake.close()
    state.stop()


def used(state: ClusterState, node: str) -> tuple[int, ...]:
    return tuple(sorted(i for i, u in state.node_state(node).usage.items() if not u.idle))


def test_rebuild_from_annotations_and_restart(fake: FakeKubeAPI, kube: KubernetesState) -> None:
    assert isinstance(kube, ClusterState)
    assert kube.ready()
    assert used(kube, "n0") == (0, 1, 2, 3)
    assert used(kube, "n1") == ()  # the Succeeded pod holds nothing
    assert kube.node_topology("n0") == DGX
    bare = kube.node_topology("bare")
    assert isinstance(bare, NodeTopologyError)
    assert str(bare) == "node has no gputopo.io/topology annotation"
    assert "unknown" in str(kube.node_topology("ghost"))
    # a restarted extender sees exactly the same
    again = KubernetesState(fake)
    again.resync_nodes()
    again.resync_pods()
    assert used(again, "n0") == (0, 1, 2, 3)
    ext = Extender(again, POLICY)
    res = ext.filter(ExtenderArgs.model_validate(names_args(gpu_pod("big", 8), ["n0", "n1"])))
    assert res["NodeNames"] == ["n1"]
    assert res["FailedNodes"] == {"n0": "only 4 of 8 GPUs free; the pod asks for 8"}


def test_deletion_and_termination_free_gpus(fake: FakeKubeAPI, kube: KubernetesState) -> None:
    fake.add_pod("other", "u-other", node="n1", annotations=annotated((4, 5), "n1"),
                 phase="Running", emit=True)
    wait_for(lambda: used(kube, "n1") == (4, 5), "the new pod's allocation")
    fake.update_pod("u-other", lambda p: p["status"].update(phase="Failed"))
    wait_for(lambda: used(kube, "n1") == (), "a failed pod to free its GPUs")
    fake.delete_pod("u-run")
    wait_for(lambda: used(kube, "n0") == (), "a deleted pod to free its GPUs")
    assert kube.pod_uid("default", "running") is None


def bind_through(ext: Extender, fake: FakeKubeAPI, name: str, uid: str, node: str,
                 gpus: int = 2) -> dict[str, str]:
    pod = fake.add_pod(name, uid, gpus=gpus, emit=True)
    ext.filter(ExtenderArgs.model_validate(names_args(pod, [node])))
    return ext.bind(ExtenderBindingArgs(PodName=name, PodNamespace="default", PodUID=uid,
                                        Node=node))


def test_one_binding_carries_the_decision_and_the_watch_confirms_it(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    fake.emit_bindings = False  # the watch event comes later (released by hand below)
    ext = Extender(kube, POLICY)
    assert bind_through(ext, fake, "new", "u-new", "n1") == {"Error": ""}
    # one API call: the Binding, carrying the assignment annotations (no separate patch)
    assert [c[:3] for c in fake.calls] == [("bind", "new", "n1")]
    held = kube.allocation("u-new")
    assert held is not None and not held.confirmed and held.node == "n1"
    pod = fake.pods["u-new"]
    ann = pod["metadata"]["annotations"]
    assert parse_assignment(ann).gpu_indices == held.gpus
    assert ann[ANN_NODE] == "n1" and pod["spec"]["nodeName"] == "n1"
    assert sorted(fake.calls[0][3:]) == sorted(f"{k}={v}" for k, v in ann.items())
    # a relist that does not yet show the bound pod keeps the in-flight reservation
    fake.pods["u-new"]["metadata"]["annotations"] = {}
    fake.pods["u-new"]["spec"]["nodeName"] = ""
    kube.resync_pods()
    assert kube.allocation("u-new") is not None
    # the watch delivers the bound, annotated pod: confirmed, same GPUs
    fake.update_pod("u-new", lambda p: (p["metadata"]["annotations"].update(ann),
                                        p["spec"].update(nodeName="n1")))
    wait_for(lambda: (a := kube.allocation("u-new")) is not None and a.confirmed, "confirmation")
    confirmed = kube.allocation("u-new")
    assert confirmed is not None and confirmed.gpus == held.gpus and confirmed.node == "n1"


def test_the_watch_of_the_binding_confirms_the_reservation(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    ext = Extender(kube, POLICY)
    assert bind_through(ext, fake, "seen", "u-seen", "n0") == {"Error": ""}
    wait_for(lambda: (a := kube.allocation("u-seen")) is not None and a.confirmed,
             "the Binding's watch event")
    a = kube.allocation("u-seen")
    assert a is not None and a.node == "n0" and set(a.gpus).isdisjoint({0, 1, 2, 3})
    # a bound pod cannot be bound again: refused without an API call or a state change
    fake.calls.clear()
    res = ext.bind(ExtenderBindingArgs(PodName="seen", PodNamespace="default",
                                       PodUID="u-seen", Node="n1"))
    assert res["Error"] == f"pod default/seen is already bound to n0 (GPUs " \
        f"{','.join(map(str, a.gpus))})"
    assert fake.calls == [] and kube.allocation("u-seen") == a and used(kube, "n1") == ()


def test_reservation_dropped_when_pod_disappears(fake: FakeKubeAPI, kube: KubernetesState) -> None:
    fake.emit_bindings = False
    ext = Extender(kube, POLICY)
    assert bind_through(ext, fake, "gone", "u-gone", "n1") == {"Error": ""}
    assert kube.allocation("u-gone") is not None
    fake.delete_pod("u-gone")
    wait_for(lambda: kube.allocation("u-gone") is None, "the reservation to go")
    assert used(kube, "n1") == ()


def test_a_refused_binding_holds_nothing(fake: FakeKubeAPI, kube: KubernetesState) -> None:
    ext = Extender(kube, POLICY)
    fake.fail_binding = "500 Internal Server Error: etcd is sad"
    res = bind_through(ext, fake, "x", "u-x", "n1")
    assert res["Error"] == (
        "cannot bind pod default/x to n1: 500 Internal Server Error: etcd is sad"
    )
    assert kube.allocation("u-x") is None and used(kube, "n1") == ()
    pod = fake.pods["u-x"]
    assert not set(pod["metadata"]["annotations"]) & set(OUTPUT_ANNOTATIONS)
    assert not pod["spec"]["nodeName"]
    fake.fail_binding = None
    assert ext.bind(ExtenderBindingArgs(PodName="x", PodNamespace="default", PodUID="u-x",
                                        Node="n1")) == {"Error": ""}
    assert fake.pods["u-x"]["spec"]["nodeName"] == "n1"


def test_a_binding_whose_reply_was_lost_stays_booked(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """The API wrote the Binding but its reply never came: the bind fails for the scheduler,
    yet the pod is bound — the state must end up holding its GPUs, whichever of the watch
    event and the rollback comes first."""
    ext = Extender(kube, POLICY)
    fake.lose_binding_reply = True
    # the watch confirms before the failed call returns: the rollback must leave that alone
    fake.after_binding = lambda: wait_for(
        lambda: (a := kube.allocation("u-lost")) is not None and a.confirmed, "confirmation")
    res = bind_through(ext, fake, "lost", "u-lost", "n1")
    assert res == {"Error": ""}  # read back: bound there with its decision, so it is bound
    wait_for(lambda: (a := kube.allocation("u-lost")) is not None and a.confirmed,
             "the bound pod's allocation")
    a = kube.allocation("u-lost")
    assert a is not None
    assert a.gpus == parse_assignment(fake.pods["u-lost"]["metadata"]["annotations"]).gpu_indices
    assert used(kube, "n1") == tuple(sorted(a.gpus))


def test_a_lost_reply_keeps_the_gpus_even_before_the_watch_confirms(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """The reply of a written Binding is lost and the watch lags: the GPUs must stay taken
    in between (before, the rollback freed them until the watch caught up, and a pod bound
    in that window could be given the same GPUs)."""
    fake.emit_bindings = False
    fake.lose_binding_reply = True
    ext = Extender(kube, POLICY)
    assert bind_through(ext, fake, "lost", "u-lost", "n1", gpus=8) == {"Error": ""}
    held = kube.allocation("u-lost")
    assert held is not None and not held.confirmed and len(held.gpus) == 8
    fake.lose_binding_reply = False
    res = bind_through(ext, fake, "next", "u-next", "n1", gpus=1)
    assert res["Error"].startswith("cannot bind: "), res  # n1 is full: the lost pod holds it
    assert fake.pods["u-next"]["spec"]["nodeName"] == ""


def test_no_reply_and_no_read_back_keeps_the_reservation(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """Neither the Binding's reply nor a read-back: the outcome is unknown, so the GPUs stay
    reserved (the watch settles it) and the bind reports the failure."""
    fake.emit_bindings = False
    fake.lose_binding_reply = True
    ext = Extender(kube, POLICY)
    real_get = fake.get_pod

    def unreachable(namespace: str, name: str) -> dict[str, object] | None:
        raise ApiError("connection refused", 0)

    fake.get_pod = unreachable  # type: ignore[method-assign]
    res = bind_through(ext, fake, "dark", "u-dark", "n1", gpus=2)
    assert "reading it back failed too" in res["Error"]
    held = kube.allocation("u-dark")
    assert held is not None and not held.confirmed
    fake.get_pod = real_get  # type: ignore[method-assign]
    # the watch shows it bound: confirmed on the reserved GPUs
    ann = fake.pods["u-dark"]["metadata"]["annotations"]
    fake.update_pod("u-dark", lambda p: None)
    wait_for(lambda: (a := kube.allocation("u-dark")) is not None and a.confirmed,
             "confirmation")
    assert parse_assignment(ann).gpu_indices == held.gpus


def test_a_refused_binding_read_back_unbound_holds_nothing(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """A 5xx whose read-back shows the pod unbound: nothing was written, nothing is held."""
    ext = Extender(kube, POLICY)
    fake.fail_binding = "503 Service Unavailable"
    fake.fail_binding_status = 503
    res = bind_through(ext, fake, "five", "u-five", "n1")
    assert res["Error"] == "cannot bind pod default/five to n1: 503 Service Unavailable"
    assert kube.allocation("u-five") is None and used(kube, "n1") == ()


def test_a_second_bind_while_the_first_awaits_the_watch_is_refused(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """kube-scheduler's bind call timed out while the extender's Binding went through; it
    retries the pod before the watch confirms. Deciding again would let go of the GPUs the
    API already gave the pod: the retry is refused and the GPUs stay held."""
    fake.emit_bindings = False
    ext = Extender(kube, POLICY)
    assert bind_through(ext, fake, "slow", "u-slow", "n1", gpus=4) == {"Error": ""}
    held = kube.allocation("u-slow")
    assert held is not None and not held.confirmed
    fake.calls.clear()
    res = ext.bind(ExtenderBindingArgs(PodName="slow", PodNamespace="default",
                                       PodUID="u-slow", Node="n1"))
    assert "is in flight or awaiting the watch" in res["Error"]
    assert fake.calls == [] and kube.allocation("u-slow") == held
    assert used(kube, "n1") == tuple(sorted(held.gpus))


def test_verbs_wait_for_the_pod_list(fake: FakeKubeAPI) -> None:
    """A restarted extender serves HTTP before its initial list is done, and kube-scheduler
    calls the verbs at once (it does not read /readyz): until nodes and pods are listed every
    verb answers 503, so nothing is decided on nodes that look empty. (Seen end to end: a
    restarted sidecar gave the GPU of a bound pod again, and the reservation survived the
    list.)"""
    from fastapi.testclient import TestClient

    from scheduler_extender.app import create_app
    from scheduler_extender.settings import ExtenderSettings

    kube = KubernetesState(fake, watch_timeout_s=1)
    kube.resync_nodes()  # nodes listed, pods not yet: n0's four GPUs look free
    app = create_app(ExtenderSettings(policy=POLICY, state="memory", eval_budget_ms=0), kube)
    with TestClient(app) as client:
        pod = fake.add_pod("early", "u-early", gpus=8)
        for verb, body in (("filter", names_args(pod, ["n0"])),
                           ("prioritize", names_args(pod, ["n0"])),
                           ("bind", {"PodName": "early", "PodNamespace": "default",
                                     "PodUID": "u-early", "Node": "n0"}),
                           ("preempt", {"Pod": pod, "NodeNameToMetaVictims": {}})):
            r = client.post(f"/{verb}", json=body)
            assert r.status_code == 503, (verb, r.text)
            assert "has not synced yet" in r.json()["Error"]
        assert fake.calls == [] and kube.allocation("u-early") is None
        assert client.get("/readyz").status_code == 503
        assert 'outcome="not_ready"' in client.get("/metrics").text
        kube.resync_pods()
        r = client.post("/filter", json=names_args(pod, ["n0"]))
        assert r.status_code == 200 and r.json()["NodeNames"] == []  # "running" holds 0-3
    fake.close()
    kube.stop()


def test_pod_uid_must_match(fake: FakeKubeAPI, kube: KubernetesState) -> None:
    ext = Extender(kube, POLICY)
    fake.add_pod("twin", "u-twin-2", emit=True)
    wait_for(lambda: kube.pod_uid("default", "twin") == "u-twin-2", "the pod in the index")
    res = ext.bind(ExtenderBindingArgs(PodName="twin", PodNamespace="default",
                                       PodUID="u-twin-1", Node="n1"))
    assert "does not match" in res["Error"]
    assert fake.calls == []


def test_bind_without_filter_fetches_the_pod(fake: FakeKubeAPI, kube: KubernetesState) -> None:
    """An extender restarted between filter and bind reads the pod from the API."""
    ext = Extender(kube, POLICY)
    fake.add_pod("late", "u-late", gpus=3)
    res = ext.bind(ExtenderBindingArgs(PodName="late", PodNamespace="default",
                                       PodUID="u-late", Node="n1"))
    assert res == {"Error": ""}
    held = kube.allocation("u-late")
    assert held is not None and len(held.gpus) == 3


def test_watch_410_relists(fake: FakeKubeAPI, kube: KubernetesState) -> None:
    before = fake.lists["pods"]
    # a change the watch will miss, then 410 Gone: the relist must pick it up
    fake.add_pod("missed", "u-missed", node="n1", annotations=annotated((6, 7), "n1"),
                 phase="Running")
    fake.expire("pods")
    wait_for(lambda: fake.lists["pods"] > before, "a relist after 410")
    wait_for(lambda: used(kube, "n1") == (6, 7), "the missed pod's allocation")
    # and the watch keeps working afterwards
    fake.delete_pod("u-missed")
    wait_for(lambda: used(kube, "n1") == (), "deletion after the relist")


def test_node_annotation_changes_are_watched(fake: FakeKubeAPI, kube: KubernetesState) -> None:
    fake.add_node("late-node", DGX, emit=True)
    wait_for(lambda: kube.node_topology("late-node") == DGX, "the new node")
    fake.push("nodes", "DELETED", fake.nodes["late-node"])
    wait_for(lambda: isinstance(kube.node_topology("late-node"), NodeTopologyError),
             "node deletion")


def _set_unhealthy(fake: FakeKubeAPI, node: str, value: str | None) -> None:
    ann = fake.nodes[node]["metadata"]["annotations"]
    if value is None:
        ann.pop(ANN_UNHEALTHY_GPUS, None)
    else:
        ann[ANN_UNHEALTHY_GPUS] = value
    fake.push("nodes", "MODIFIED", fake.nodes[node])


def test_gpus_the_plugin_reports_unhealthy_are_never_handed_out(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """The device plugin's ``gputopo.io/unhealthy-gpus`` reaches the node state: a pod is not
    placed on a sick GPU (the kubelet would not offer it to Allocate), and the GPU is handed out
    again once the plugin reports it recovered."""
    ext = Extender(kube, POLICY)
    whole = ExtenderArgs.model_validate(names_args(gpu_pod("whole", 8), ["n1"]))
    assert ext.filter(whole)["NodeNames"] == ["n1"]
    _set_unhealthy(fake, "n1", "2,5")
    wait_for(lambda: kube.node_state("n1").unhealthy == {2, 5}, "the unhealthy GPUs")
    res = ext.filter(whole)
    assert res["NodeNames"] == [] and "n1" in res["FailedNodes"]
    assert bind_through(ext, fake, "six", "u-six", "n1", gpus=6) == {"Error": ""}
    ann = fake.pods["u-six"]["metadata"]["annotations"]
    assert set(parse_assignment(ann).gpu_indices) == set(range(8)) - {2, 5}
    # garbled: logged, read as none (the plugin rewrites it on its next publish)
    _set_unhealthy(fake, "n0", "two")
    _set_unhealthy(fake, "n0", "3")
    wait_for(lambda: kube.node_state("n0").unhealthy == {3}, "the next good value")
    _set_unhealthy(fake, "n0", None)
    wait_for(lambda: not kube.node_state("n0").unhealthy, "recovery")


def test_a_postponement_is_written_into_the_pod_for_the_next_extender(
        fake: FakeKubeAPI, kube: KubernetesState) -> None:
    """The first postponement of a pending pod is written into it as a condition beside
    kube-scheduler's (from a background thread: filter does not wait); an extender that
    lists the pod later (a new leader, a restart) continues that clock."""

    def pending(p: dict[str, object]) -> None:
        p["spec"]["schedulerName"] = "gputopo-scheduler"  # type: ignore[index]
        p["status"]["conditions"] = [  # type: ignore[index]
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]

    fake.add_pod("ring", "u-ring", gpus=3)
    fake.update_pod("u-ring", pending)
    wait_for(lambda: kube.pending.may_wait("u-ring"), "the pending pod")
    before = time.time()
    kube.pending.postponed("u-ring")
    kube.pending.postponed("u-ring")  # later postponements write nothing
    wait_for(lambda: postponed_at(fake.pods["u-ring"]) is not None, "the condition")
    at = postponed_at(fake.pods["u-ring"])
    assert at is not None and before <= at <= time.time() + 1  # whole seconds, rounded up
    types = [c["type"] for c in fake.pods["u-ring"]["status"]["conditions"]]
    assert types == ["PodScheduled", CONDITION_POSTPONED]
    time.sleep(0.2)
    assert [c for c in fake.calls if c[0] == "conditions"] == [
        ("conditions", "ring", CONDITION_POSTPONED)]
    again = KubernetesState(fake)
    again.resync_pods()
    since = again.pending.postponed_since("u-ring")
    waited = max(0.0, time.time() - at)  # the condition's time may be up to 1 s ahead
    assert since is not None and abs((time.monotonic() - since) - waited) < 0.1
    # a pod replaced under the same name (another UID) is not written; the writer lives on
    fake.add_pod("ring2", "u-ring2", gpus=3)
    fake.update_pod("u-ring2", pending)
    wait_for(lambda: kube.pending.may_wait("u-ring2"), "the second pod")
    fake.pods["u-ring2"]["metadata"]["uid"] = "u-other"
    kube.pending.postponed("u-ring2")
    wait_for(lambda: ("conditions", "ring2", CONDITION_POSTPONED) in fake.calls, "the refusal")
    assert postponed_at(fake.pods["u-ring2"]) is None
    fake.pods["u-ring2"]["metadata"]["uid"] = "u-ring2"
    fake.add_pod("ring3", "u-ring3", gpus=3)
    fake.update_pod("u-ring3", pending)
    wait_for(lambda: kube.pending.may_wait("u-ring3"), "the third pod")
    kube.pending.postponed("u-ring3")
    wait_for(lambda: postponed_at(fake.pods["u-ring3"]) is not None, "the third condition")


def test_filter_before_the_watch_delivers_the_pod_still_postpones_and_writes(
        fake: FakeKubeAPI, kube: KubernetesState) -> None:
    """kube-scheduler calls filter milliseconds after a pod is created; the extender's own
    pod watch may deliver the pod later. The pod in the request then joins the pending view,
    so a sensitive ring on a pit is postponed and its condition written exactly as for a pod
    the watch delivered first (this race once failed the end-to-end restart test: the pod was
    placed on the pit at once). A request for a pod the watch has already seen deleted is
    late: the pod is not taken back."""
    fake.add_pod("five", "u-five", node="n1", annotations=annotated((0, 2, 3, 4, 7), "n1"),
                 phase="Running", emit=True)
    wait_for(lambda: used(kube, "n1") == (0, 2, 3, 4, 7), "the 5-GPU pod")

    def ring_pod(name: str, uid: str) -> dict[str, object]:
        pod = fake.add_pod(name, uid, gpus=3)  # in the API, not (yet) in the watch
        pod["metadata"]["annotations"] = {"gputopo.io/pattern": "ring"}
        pod["spec"]["schedulerName"] = "gputopo-scheduler"
        return pod

    late = ring_pod("late", "u-late")
    assert "u-late" not in kube.pending
    ext = Extender(kube, POLICY)
    out = ext.filter(ExtenderArgs.model_validate(names_args(late, ["n1"])))
    assert out["NodeNames"] == [] and "postponed" in out["FailedNodes"]["n1"], out
    assert kube.pending.postponed_since("u-late") is not None
    wait_for(lambda: postponed_at(fake.pods["u-late"]) is not None, "the condition")
    fake.push("pods", "ADDED", fake.pods["u-late"])  # the watch catches up: nothing changes
    wait_for(lambda: postponed_at(fake.pods["u-late"]) is not None, "the watch's copy")
    assert [c for c in fake.calls if c[0] == "conditions"] == [
        ("conditions", "late", CONDITION_POSTPONED)]
    # deleted before a late filter request for it arrives: not pending again
    gone = ring_pod("gone", "u-gone")
    fake.push("pods", "ADDED", gone)
    wait_for(lambda: "u-gone" in kube.pending, "the second pod")
    fake.delete_pod("u-gone")
    wait_for(lambda: "u-gone" not in kube.pending, "its deletion")
    out = ext.filter(ExtenderArgs.model_validate(names_args(gone, ["n1"])))
    assert "u-gone" not in kube.pending
    assert kube.pending.postponed_since("u-gone") is None


def test_a_postponed_pod_once_bound_waits_no_more(fake: FakeKubeAPI,
                                                 kube: KubernetesState) -> None:
    """When a pod the extender postponed is bound, its condition turns ``False`` (reason
    ``Placed``; when the wait began, how long it lasted, the node), so ``kubectl describe`` of
    the running pod does not show it waiting, and the pod leaves the pending view at once. A
    pod that never waited gets no condition."""
    fake.add_pod("five", "u-five", node="n1", annotations=annotated((0, 2, 3, 4, 7), "n1"),
                 phase="Running", emit=True)
    wait_for(lambda: used(kube, "n1") == (0, 2, 3, 4, 7), "the 5-GPU pod")
    pod = fake.add_pod("ring", "u-ring", gpus=3)
    pod["metadata"]["annotations"] = {"gputopo.io/pattern": "ring"}
    pod["spec"]["schedulerName"] = "gputopo-scheduler"
    fake.push("pods", "ADDED", pod)
    wait_for(lambda: "u-ring" in kube.pending, "the pending pod")
    ext = Extender(kube, POLICY)
    args = ExtenderArgs.model_validate(names_args(pod, ["n1"]))
    assert "postponed" in ext.filter(args)["FailedNodes"]["n1"]
    wait_for(lambda: postponed_at(fake.pods["u-ring"]) is not None, "the condition")
    at = postponed_at(fake.pods["u-ring"])
    kube.pending.postpone_max_s = 0.05  # the bound passes: the next filter lets it through
    time.sleep(0.1)
    assert ext.filter(args)["NodeNames"] == ["n1"]
    res = ext.bind(ExtenderBindingArgs(PodName="ring", PodNamespace="default", PodUID="u-ring",
                                       Node="n1"))
    assert res == {"Error": ""}
    assert "u-ring" not in kube.pending and kube.pending.postponed_since("u-ring") is None

    def condition() -> dict[str, str]:
        return next(c for c in fake.pods["u-ring"]["status"]["conditions"]
                    if c["type"] == CONDITION_POSTPONED)

    wait_for(lambda: condition()["status"] == "False", "the condition turned False")
    cond = condition()
    assert cond["reason"] == "Placed" and postponed_at(fake.pods["u-ring"]) is None
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    assert f"from {start} for " in cond["message"] and cond["message"].endswith("on node n1")
    time.sleep(0.2)  # nothing (a wake at the bound) writes over it
    assert condition()["reason"] == "Placed"
    calls = len(fake.calls)
    assert bind_through(ext, fake, "plain2", "u-plain2", "n0") == {"Error": ""}
    time.sleep(0.1)
    assert not [c for c in fake.calls[calls:] if c[0] == "conditions"]


def test_a_pod_still_pending_at_its_bound_is_woken(fake: FakeKubeAPI) -> None:
    """At the end of the bound the condition is updated (reason ``PostponementEnded``, the
    same start): a Pod update, on which kube-scheduler retries an extender-rejected pod, so
    the bound holds in a quiet cluster too. A pod bound meanwhile is left alone; a new
    extender that takes the clock from the pod keeps the same bound."""
    kube = KubernetesState(fake, watch_timeout_s=1)
    kube.pending.postpone_max_s = 0.5
    kube.start()
    try:
        def pending(p: dict[str, object]) -> None:
            p["spec"]["schedulerName"] = "gputopo-scheduler"  # type: ignore[index]

        for name in ("a", "b"):
            fake.add_pod(name, f"u-{name}", gpus=3)
            fake.update_pod(f"u-{name}", pending)
        wait_for(lambda: "u-a" in kube.pending and "u-b" in kube.pending, "the pods")
        kube.pending.postponed("u-a")
        kube.pending.postponed("u-b")
        fake.update_pod("u-b", lambda p: p["spec"].update(nodeName="n1"))  # bound
        wait_for(lambda: "u-b" not in kube.pending, "the binding")

        def reasons(uid: str) -> list[str]:
            return [c["reason"] for c in fake.pods[uid]["status"].get("conditions", [])]

        wait_for(lambda: reasons("u-a") == ["PostponementEnded"], "the wake")
        assert reasons("u-b") == ["WaitingForBetterGPUs"]
        at = postponed_at(fake.pods["u-a"])
        assert at is not None and at == postponed_at({"status": {"conditions": [
            {**fake.pods["u-a"]["status"]["conditions"][0]}]}})
        time.sleep(0.3)
        assert [c for c in fake.calls if c[0] == "conditions"].count(
            ("conditions", "a", CONDITION_POSTPONED)) == 2
    finally:
        kube.stop()
    # a new extender whose view meets the pod mid-wait wakes it at the same bound
    fake.add_pod("c", "u-c", gpus=3)
    fake.update_pod("u-c", pending)
    fake.patch_pod_conditions("default", "c", "u-c", [postponed_condition(time.time(), 2.0)])
    again = KubernetesState(fake, watch_timeout_s=1)
    again.pending.postpone_max_s = 2.0
    again.start()
    try:
        started = time.monotonic()
        wait_for(lambda: reasons("u-c") == ["PostponementEnded"], "the wake of c", 5.0)
        assert 0.5 < time.monotonic() - started < 3.5
    finally:
        again.stop()
