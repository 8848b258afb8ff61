"""KubernetesState's event handling, driven by hand (no watch thread but in the last
test): each Node and Pod event applied as the watch would apply it, and what the extender then
sees — node views, the allocation book, the pod index; the relist; the resourceVersion each
watch resumes from. (docs/testing.md, "Ninth round", found these unpinned.)"""

from __future__ import annotations

import copy
import queue
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler_extender.kubernetes_state import KubernetesState
from scheduler_extender.state import NodeTopologyError, PodRef, ReservationConflict
from tests.scheduler_extender.fake_kube import FakeKubeAPI
from tests.scheduler_extender.kube_state_helpers import (
    DGX,
    decision_on,
    pod_on,
    running,
    two_dgx1,
    used,
)
from topology import catalog
from topology.colocation.model import DEFAULT_SLOTS
from topology.contract import (
    ANN_GPU_INDICES,
    ANN_GPU_SHARED_SLOTS,
    ANN_TOPOLOGY,
    ANN_UNHEALTHY_GPUS,
    ANN_VGPU_MEMORY_UNIT,
    LABEL_CPU_MANAGER_POLICY,
    LABEL_TOPOLOGY_MANAGER_POLICY,
    assignment_annotations,
)
from topology.numa_alignment import KubeletConfig, KubeletConfigError, kubelet_config_labels
from topology.serialization import dumps

#: Single-NUMA-node alignment, as a node's kubelet may publish it.
SNN = KubeletConfig("single-numa-node", "pod", "static")

fake = pytest.fixture(two_dgx1, name="fake")  # two idle DGX-1 V100 nodes, n0 and n1
kube = pytest.fixture(running, name="kube")  # listed; the test applies every event


def node(fake: FakeKubeAPI, name: str) -> dict[str, Any]:
    return copy.deepcopy(fake.nodes[name])


# ---------------------------------------------------------------------- nodes
def test_a_node_added_by_the_watch_is_known(fake: FakeKubeAPI, kube: KubernetesState) -> None:
    fake.add_node("n2", DGX)
    kube.apply_node_event("ADDED", node(fake, "n2"))
    assert kube.node_topology("n2") == DGX
    assert kube.node_names() == ["n0", "n1", "n2"]


def test_a_deleted_node_leaves_nothing_behind(fake: FakeKubeAPI, kube: KubernetesState) -> None:
    """A node the watch sees deleted is unknown at once: its cached view, its memory unit, its
    unhealthy GPUs — nothing of it is served after the event."""
    n1 = node(fake, "n1")
    n1["metadata"]["annotations"][ANN_UNHEALTHY_GPUS] = "3"
    n1["metadata"]["annotations"][ANN_VGPU_MEMORY_UNIT] = "1024"
    kube.apply_node_event("MODIFIED", n1)
    view = kube.node_view("n1")  # cached
    assert view.topology == DGX and kube.node_state("n1").unhealthy == {3}
    assert kube.node_memory_unit("n1") == "1024"
    cursor = kube.view_changes(None)[1]
    kube.apply_node_event("DELETED", n1)
    assert isinstance(kube.node_view("n1").topology, NodeTopologyError)
    assert kube.node_memory_unit("n1") is None
    assert kube.node_state("n1").unhealthy == frozenset()
    assert kube.node_names() == ["n0"]
    changed, cursor = kube.view_changes(cursor)
    assert changed is not None and "n1" in changed  # the decision caches hear of it
    # a healthy node too (no unhealthy GPUs to clear, which would drop its view anyway)
    assert kube.node_view("n0").topology == DGX  # cached
    kube.apply_node_event("DELETED", node(fake, "n0"))
    assert isinstance(kube.node_view("n0").topology, NodeTopologyError)
    changed, _ = kube.view_changes(cursor)
    assert changed is not None and "n0" in changed
    assert kube.node_names() == []


def test_deleting_a_node_never_seen_is_harmless(kube: KubernetesState) -> None:
    """A DELETED event for a node the state does not hold (deleted during a relist, or
    already gone) is a no-op — not an exception that sends the watch into a relist."""
    kube.apply_node_event("DELETED", {"metadata": {"name": "ghost"}})
    kube.apply_node_event("DELETED", {"metadata": {"name": "n0"}})  # no kubelet labels
    kube.apply_node_event("DELETED", {"metadata": {"name": "n0"}})
    assert kube.node_names() == ["n1"]


def test_a_nodes_annotations_and_labels_are_read_and_replaced(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """What a Node event says replaces what the node said before: its topology (a cached
    view is dropped even when nothing else changed), co-location slots, memory unit,
    unhealthy GPUs and kubelet settings; an annotation or label removed means its default
    again."""
    n1 = node(fake, "n1")
    assert kube.node_view("n1").topology == DGX  # cached
    cursor = kube.view_changes(None)[1]
    other = catalog.get("dgx-a100")
    ann = n1["metadata"]["annotations"]
    ann[ANN_TOPOLOGY] = dumps(other)
    kube.apply_node_event("MODIFIED", n1)
    assert kube.node_view("n1").topology == other
    changed, cursor = kube.view_changes(cursor)
    assert changed is not None and "n1" in changed
    ann.update({ANN_GPU_SHARED_SLOTS: "2", ANN_VGPU_MEMORY_UNIT: "512",
                ANN_UNHEALTHY_GPUS: "1,2"})
    n1["metadata"]["labels"] = kubelet_config_labels(SNN)
    kube.apply_node_event("MODIFIED", n1)
    st = kube.node_state("n1")
    assert st.slots_per_gpu == 2 and st.unhealthy == {1, 2}
    assert kube.node_memory_unit("n1") == "512" and kube.node_kubelet_config("n1") == SNN
    ann[ANN_GPU_SHARED_SLOTS] = "two"  # unreadable: no slot
    n1["metadata"]["labels"] = {LABEL_TOPOLOGY_MANAGER_POLICY: "sometimes"}
    kube.apply_node_event("MODIFIED", n1)
    assert kube.node_state("n1").slots_per_gpu == 0
    assert isinstance(kube.node_kubelet_config("n1"), KubeletConfigError)
    for key in (ANN_GPU_SHARED_SLOTS, ANN_VGPU_MEMORY_UNIT, ANN_UNHEALTHY_GPUS):
        del ann[key]
    del n1["metadata"]["labels"]
    kube.apply_node_event("MODIFIED", n1)
    st = kube.node_state("n1")
    assert st.slots_per_gpu == DEFAULT_SLOTS and st.unhealthy == frozenset()
    assert kube.node_memory_unit("n1") is None
    assert kube.node_kubelet_config("n1") == KubeletConfig()
    # labels that do not align (policy none) are the kubelet's defaults, whatever else
    n1["metadata"]["labels"] = {LABEL_CPU_MANAGER_POLICY: "static"}
    kube.apply_node_event("MODIFIED", n1)
    assert kube.node_kubelet_config("n1") == KubeletConfig()


def test_a_node_without_annotations_or_a_usable_name(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """A node without annotations (or a topology that is not text) is known without a
    topology; a node object without a string name is ignored."""
    kube.apply_node_event("ADDED", {"metadata": {"name": "bare", "annotations": None}})
    kube.apply_node_event("ADDED", {"metadata": {"name": "odd",
                                                 "annotations": {ANN_TOPOLOGY: 8}}})
    kube.apply_node_event("ADDED", {"metadata": {"name": 7, "annotations": {
        ANN_TOPOLOGY: dumps(DGX)}}})
    assert kube.node_names() == ["bare", "n0", "n1", "odd"]
    for name in ("bare", "odd"):
        err = kube.node_topology(name)
        assert isinstance(err, NodeTopologyError) and "no gputopo.io/topology" in str(err)
        assert kube.node_state(name).slots_per_gpu == DEFAULT_SLOTS


# ---------------------------------------------------------------------- pods
def test_a_pod_event_books_the_pod_under_its_namespace(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """An annotated pod is booked under its UID, on its node, as ``namespace/name`` (a pod
    without a namespace is in ``default``)."""
    pod = pod_on(fake, "p", "u-p", (4, 5))
    pod["metadata"]["namespace"] = "team"
    kube.apply_pod_event("ADDED", pod)
    a = kube.allocation("u-p")
    assert a is not None and a.confirmed and a.node == "n1" and a.gpus == (4, 5)
    assert (a.pod.namespace, a.pod.name, a.pod.uid) == ("team", "p", "u-p")
    assert kube.pod_uid("team", "p") == "u-p" and kube.pod_uid("default", "p") is None
    bare = pod_on(fake, "q", "u-q", (6, 7))
    del bare["metadata"]["namespace"]
    kube.apply_pod_event("ADDED", bare)
    q = kube.allocation("u-q")
    assert q is not None and q.pod.namespace == "default"
    assert kube.pod_uid("default", "q") == "u-q"
    assert used(kube, "n1") == (4, 5, 6, 7)


def test_an_annotated_pod_not_yet_bound_is_booked_on_its_decisions_node(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    pod = pod_on(fake, "p", "u-p", (4, 5))
    pod["spec"]["nodeName"] = ""
    kube.apply_pod_event("ADDED", pod)
    a = kube.allocation("u-p")
    assert a is not None and a.node == "n1" and used(kube, "n1") == (4, 5)


def test_the_node_a_pod_is_bound_to_wins_over_its_annotation(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """A pod bound to one node carrying annotations that name another (copied from another
    pod's manifest): its GPUs are used where it runs, ``spec.nodeName``."""
    pod = pod_on(fake, "p", "u-p", (4, 5))
    pod["spec"]["nodeName"] = "n0"
    kube.apply_pod_event("ADDED", pod)
    a = kube.allocation("u-p")
    assert a is not None and a.node == "n0"
    assert used(kube, "n0") == (4, 5) and used(kube, "n1") == ()


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_terminated_pod_frees_its_gpus_and_its_name(
    fake: FakeKubeAPI, kube: KubernetesState, phase: str
) -> None:
    pod = pod_on(fake, "p", "u-p", (4, 5))
    kube.apply_pod_event("ADDED", pod)
    pod["status"]["phase"] = phase
    kube.apply_pod_event("MODIFIED", pod)
    assert kube.allocation("u-p") is None and used(kube, "n1") == ()
    assert kube.pod_uid("default", "p") is None
    # its DELETED event follows (or the field selector's): already forgotten, a no-op — not
    # an exception that sends the watch into a relist
    kube.apply_pod_event("DELETED", pod)
    kube.apply_pod_event("DELETED", pod)
    assert kube.allocations() == []


def test_the_old_pod_of_a_name_going_leaves_the_new_ones_uid(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """A pod deleted and created again under its name (a StatefulSet's): the watch may
    deliver the new pod before the old one's deletion; the name then stays the new pod's
    (bind checks the UID kube-scheduler sends against it)."""
    old = pod_on(fake, "p", "u-old", (4, 5))
    kube.apply_pod_event("ADDED", old)
    new = copy.deepcopy(old)
    new["metadata"]["uid"] = "u-new"
    new["metadata"]["annotations"] = {}
    new["spec"]["nodeName"] = ""
    kube.apply_pod_event("ADDED", new)
    kube.apply_pod_event("DELETED", old)
    assert kube.pod_uid("default", "p") == "u-new"
    assert kube.allocation("u-old") is None and used(kube, "n1") == ()
    kube.apply_pod_event("DELETED", new)
    assert kube.pod_uid("default", "p") is None


def test_annotations_removed_free_a_confirmed_allocation_not_a_reservation(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """A confirmed allocation whose annotations are gone is freed; a reservation whose pod
    the watch shows without annotations stays (its Binding is in flight)."""
    pod = pod_on(fake, "p", "u-p", (4, 5))
    kube.apply_pod_event("ADDED", pod)
    pod["metadata"]["annotations"] = {}
    kube.apply_pod_event("MODIFIED", pod)
    assert kube.allocation("u-p") is None and used(kube, "n1") == ()
    fake.add_pod("r", "u-r")
    kube.reserve("u-r", "n1", decision_on((6, 7)), pod=PodRef("default", "r", "u-r"))
    kube.apply_pod_event("MODIFIED", copy.deepcopy(fake.pods["u-r"]))
    held = kube.allocation("u-r")
    assert held is not None and not held.confirmed and used(kube, "n1") == (6, 7)


def test_unreadable_annotations_book_nothing(fake: FakeKubeAPI, kube: KubernetesState) -> None:
    pod = pod_on(fake, "p", "u-p", (4, 5))
    pod["metadata"]["annotations"][ANN_GPU_INDICES] = "four,five"
    kube.apply_pod_event("ADDED", pod)
    assert kube.allocation("u-p") is None and used(kube, "n1") == ()
    assert kube.pod_uid("default", "p") == "u-p"


@pytest.mark.parametrize("meta", [
    {"name": "p"}, {"name": "p", "uid": ""}, {"name": "p", "uid": 7}, {"uid": "u-p"},
    {"uid": "u-p", "name": 7},
])
def test_a_pod_without_a_usable_identity_is_ignored(
    fake: FakeKubeAPI, kube: KubernetesState, meta: dict[str, Any]
) -> None:
    pod = pod_on(fake, "p", "u-p", (4, 5))
    pod["metadata"] = {**meta, "annotations": pod["metadata"]["annotations"]}
    kube.apply_pod_event("ADDED", pod)
    assert kube.allocations() == [] and kube.pod_uid("default", "p") is None


# ---------------------------------------------------------------------- the book
def test_a_reservation_is_booked_under_the_key_given(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """``reserve`` books the decision under ``pod_key`` for the pod as named (ClusterState's
    contract): under the pod's own key, or another one."""
    kube.reserve("default/p", "n1", decision_on((4, 5)), pod=PodRef("default", "p"))
    a = kube.allocation("default/p")
    assert a is not None and a.pod == PodRef("default", "p") and not a.confirmed
    kube.reserve("u-q", "n1", decision_on((6, 7)), pod=PodRef("team", "q"))
    q = kube.allocation("u-q")
    assert q is not None and q.pod == PodRef("team", "q", "u-q") and not q.confirmed
    assert kube.allocation("team/q") is None
    assert used(kube, "n1") == (4, 5, 6, 7)


def test_a_reservation_is_checked_against_the_nodes_topology(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """GPUs the node does not have are refused (its topology is known); on a node without
    one the reservation is recorded unchecked."""
    fake.add_node("small", catalog.get("v100-pcie-4"))
    fake.add_node("bare", None)
    kube.resync_nodes()
    with pytest.raises(ReservationConflict):
        kube.reserve("u-p", "small", decision_on((4, 5)), pod=PodRef("default", "p", "u-p"))
    assert kube.allocation("u-p") is None
    kube.reserve("u-q", "bare", decision_on((4, 5)), pod=PodRef("default", "q", "u-q"))
    assert used(kube, "bare") == (4, 5)


def test_release_drops_a_confirmed_allocation_unless_reservation_only(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    kube.apply_pod_event("ADDED", pod_on(fake, "p", "u-p", (4, 5)))
    kube.release("u-p", reservation_only=True)
    assert kube.allocation("u-p") is not None
    kube.release("u-p")
    assert kube.allocation("u-p") is None and used(kube, "n1") == ()


# ---------------------------------------------------------------------- relist
def test_a_relist_drops_a_confirmed_pod_it_no_longer_lists(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """A pod deleted while the watch was down (its DELETED event lost): the relist frees its
    GPUs however recently it was confirmed — only in-flight reservations are kept."""
    kube.apply_pod_event("ADDED", pod_on(fake, "p", "u-p", (4, 5)))
    fake.pods.pop("u-p")
    kube.resync_pods()
    assert kube.allocation("u-p") is None and used(kube, "n1") == ()
    assert kube.pod_uid("default", "p") is None


def test_a_relist_that_shows_the_binding_confirms_the_reservation(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """The listed pod bound with its annotations wins over the in-flight reservation kept
    across the relist: the allocation is confirmed."""
    fake.add_pod("p", "u-p")
    kube.reserve("u-p", "n1", decision_on((4, 5)), pod=PodRef("default", "p", "u-p"))
    fake.emit_bindings = False
    kube.bind(PodRef("default", "p", "u-p"), "n1", decision_on((4, 5)))
    kube.resync_pods()
    a = kube.allocation("u-p")
    assert a is not None and a.confirmed and a.gpus == (4, 5)


def test_a_relist_keeps_a_reservation_the_list_contradicts(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """An in-flight reservation on GPUs a listed pod holds (another binder won the race):
    the relist records both as the API and the bind in flight say — it does not fail — and
    the watch settles it."""
    fake.add_pod("r", "u-r")
    kube.reserve("u-r", "n1", decision_on((4, 5)), pod=PodRef("default", "r", "u-r"))
    fake.add_pod("x", "u-x", node="n1", phase="Running",
                 annotations=assignment_annotations(decision_on((4, 5)), "n1"))
    kube.resync_pods()
    assert kube.ready()
    r, x = kube.allocation("u-r"), kube.allocation("u-x")
    assert r is not None and not r.confirmed and x is not None and x.confirmed


def test_a_watched_pod_on_reserved_gpus_is_booked_as_the_api_says(
    fake: FakeKubeAPI, kube: KubernetesState
) -> None:
    """The watch shows another pod bound on GPUs this extender has reserved (another binder
    won the race): the event records it — the API is the truth — rather than failing (and
    sending the watch into a relist)."""
    fake.add_pod("r", "u-r")
    kube.reserve("u-r", "n1", decision_on((4, 5)), pod=PodRef("default", "r", "u-r"))
    kube.apply_pod_event("ADDED", pod_on(fake, "x", "u-x", (4, 5)))
    x = kube.allocation("u-x")
    assert x is not None and x.confirmed and x.gpus == (4, 5)


class WatchLog(FakeKubeAPI):
    """The fake API recording the resourceVersion each watch is opened from."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: dict[str, queue.Queue[str]] = {"nodes": queue.Queue(),
                                                    "pods": queue.Queue()}

    def watch_nodes(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        self.opened["nodes"].put(resource_version)
        return super().watch_nodes(resource_version, timeout_s)

    def watch_pods(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        self.opened["pods"].put(resource_version)
        return super().watch_pods(resource_version, timeout_s)


@pytest.mark.parametrize("kind", ["nodes", "pods"])
def test_each_watch_resumes_where_the_last_list_or_event_left_off(kind: str) -> None:
    """A watch is opened from the list's resourceVersion, and re-opened from the last event's
    (a bookmark's too) — never from "" (now), which would miss what changed in between; a
    410 Gone relists and resumes from the new list."""
    fake = WatchLog()
    fake.add_node("n0", DGX)
    fake.add_pod("p", "u-p")
    listed = str(fake.rv)
    kube = KubernetesState(fake, watch_timeout_s=1)
    kube.start()
    try:
        assert fake.opened[kind].get(timeout=10) == listed

        def reopened(since: str) -> str:
            """The next watch opened from another version than ``since`` (the ones opened
            before the event was applied still use ``since``; the fake's watch lasts 0.5 s,
            so 20 of those are 10 s: the event was lost)."""
            for _ in range(20):
                rv = fake.opened[kind].get(timeout=10)
                if rv != since:
                    return rv
            pytest.fail(f"the {kind} watch is still opened from {since!r}")

        obj = fake.nodes["n0"] if kind == "nodes" else fake.pods["u-p"]
        obj["metadata"]["resourceVersion"] = "500"
        fake.push(kind, "MODIFIED", obj)
        assert reopened(listed) == "500"  # re-opened after its timeout
        fake.push(kind, "BOOKMARK", {"metadata": {"resourceVersion": "600"}})
        assert reopened("500") == "600"
        fake.rv = 700
        fake.expire(kind)
        assert reopened("600") == "700"
    finally:
        fake.close()
        kube.stop()
