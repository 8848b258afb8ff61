"""The lookahead through the extender (issue 24): the pending GPU pods the extender watches
are the default policy's waiting jobs (scheduler_extender/pending.py), on one node and on a
cluster where only a job's one best home weighs it."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_extender.kubernetes_state import KubernetesState
from scheduler_extender.pending import PendingPods, upcoming_of, with_lookahead
from scheduler_extender.settings import ExtenderSettings, SettingsError, load_settings
from scheduler_extender.state import MemoryState
from tests.scheduler_extender.fake_kube import FakeKubeAPI
from tests.scheduler_extender.helpers import bind_args, gpu_pod, make_client, names_args
from topology import catalog
from topology.model import Topology
from topology.patterns import ring
from topology.policies.base import Request, Upcoming

RING = {"gputopo.io/pattern": "ring"}


def waiting(name: str, gpus: int, *, created: str = "2024-01-01T00:00:00Z", priority: int = 0,
            annotations: dict[str, str] | None = None, scheduler: str = "gputopo-scheduler",
            node: str | None = None) -> dict[str, Any]:
    pod = gpu_pod(name, gpus, annotations=RING if annotations is None else annotations)
    pod["metadata"]["creationTimestamp"] = created
    pod["spec"]["schedulerName"] = scheduler
    pod["spec"]["priority"] = priority
    if node is not None:
        pod["spec"]["nodeName"] = node
    return pod


def bound_gpus(st: MemoryState, name: str) -> tuple[int, ...]:
    rec = st.bound_pod("default", name)
    assert rec is not None and rec.decision is not None
    return rec.decision.gpus


def place_five(st: MemoryState, nodes: tuple[str, ...]) -> tuple[str, tuple[int, ...]]:
    """filter, prioritize, bind a sensitive 5-GPU ring on the best-scored node."""
    client = make_client(st)
    pod = gpu_pod("five", 5, annotations=RING)
    assert client.post("/filter", json=names_args(pod, nodes)).json()["Error"] == ""
    scores = client.post("/prioritize", json=names_args(pod, nodes)).json()
    node = max(scores, key=lambda s: (s["Score"], s["Host"]))["Host"]
    assert client.post("/bind", json=bind_args(pod, node)).json() == {"Error": ""}
    return node, bound_gpus(st, "five")


def test_one_node_the_waiting_ring_gets_the_triangle() -> None:
    """The issue's case through filter, prioritize and bind: with nothing pending, the 5-GPU
    ring gets {0,2,3,4,7}; with a sensitive 3-GPU ring pending it gets {0,1,2,3,4} and the
    NVLink triangle {5,6,7} stays free for it."""
    alone = MemoryState({"n1": catalog.get("dgx1-v100")})
    assert place_five(alone, ("n1",)) == ("n1", (0, 2, 3, 4, 7))
    # bind decides again with the waiting jobs filter and prioritize weighed: in the first
    # case of test_cluster_a_waiting_job_weighs_only_on_its_one_home it would otherwise
    # weigh the ring bind sees pending and take {0,1,2,3,4}
    st = MemoryState({"n1": catalog.get("dgx1-v100")})
    st.pending.observe(waiting("three", 3))
    assert place_five(st, ("n1",)) == ("n1", (0, 1, 2, 3, 4))
    # the pod being decided is not its own waiting job
    st2 = MemoryState({"n1": catalog.get("dgx1-v100")})
    st2.pending.observe(waiting("five", 5) | {"metadata": {
        "name": "five", "namespace": "default", "uid": "uid-five", "annotations": RING,
        "creationTimestamp": "2024-01-01T00:00:00Z"}})
    assert place_five(st2, ("n1",)) == ("n1", (0, 2, 3, 4, 7))
    assert len(st2.pending) == 0  # bind forgot it


def test_lookahead_pods_zero_switches_it_off() -> None:
    st = MemoryState({"n1": catalog.get("dgx1-v100")})
    st.pending.observe(waiting("three", 3))
    from fastapi.testclient import TestClient

    from scheduler_extender.app import create_app
    client = TestClient(create_app(ExtenderSettings(state="memory", lookahead_pods=0), st))
    pod = gpu_pod("five", 5, annotations=RING)
    client.post("/filter", json=names_args(pod, ["n1"]))
    assert client.post("/bind", json=bind_args(pod, "n1")).json() == {"Error": ""}
    assert bound_gpus(st, "five") == (0, 2, 3, 4, 7)


def test_cluster_a_waiting_job_weighs_only_on_its_one_home() -> None:
    """Two DGX-1 nodes. When both are idle the waiting 3-GPU ring has two equal homes, so
    neither weighs it and the 5-GPU ring keeps {0,2,3,4,7}. When n2 is full, n1 is the ring's
    one home: the 5-GPU ring there leaves it the triangle, as on a single node."""
    nodes = ("n1", "n2")
    st = MemoryState({n: catalog.get("dgx1-v100") for n in nodes})
    st.pending.observe(waiting("three", 3))
    assert place_five(st, nodes)[1] == (0, 2, 3, 4, 7)
    st = MemoryState({n: catalog.get("dgx1-v100") for n in nodes})
    st.pending.observe(waiting("three", 3))
    client = make_client(st)
    full = gpu_pod("full", 8)
    client.post("/filter", json=names_args(full, ["n2"]))
    assert client.post("/bind", json=bind_args(full, "n2")).json() == {"Error": ""}
    assert place_five(st, nodes) == ("n1", (0, 1, 2, 3, 4))


def test_pending_pods_in_queue_order() -> None:
    """kube-scheduler's PrioritySort: higher priority first, then the older pod; other
    schedulers' pods, bound pods, shares and ended pods are not waiting jobs."""
    p = PendingPods("gputopo-scheduler")
    p.observe(waiting("late", 3, created="2024-01-01T00:00:09Z"))
    p.observe(waiting("early", 2, created="2024-01-01T00:00:01Z"))
    p.observe(waiting("urgent", 4, created="2024-01-01T00:00:30Z", priority=10))
    p.observe(waiting("elsewhere", 5, scheduler="default-scheduler"))
    p.observe(waiting("placed", 5, node="n1"))
    share = waiting("share", 0)
    share["spec"]["containers"][0]["resources"] = {"limits": {"gputopo.io/vgpu-core": "50"}}
    p.observe(share)
    ended = waiting("ended", 2)
    ended["status"]["phase"] = "Succeeded"
    p.observe(ended)
    assert [u.count for u in p.upcoming()] == [4, 2, 3]
    assert [u.count for u in p.upcoming(exclude="uid-early")] == [4, 3]
    assert [u.count for u in p.upcoming(limit=1)] == [4]
    assert p.upcoming(limit=0) == ()
    p.observe(waiting("urgent", 4, node="n2"))  # bound now
    assert [u.count for u in p.upcoming()] == [2, 3]
    p.discard("uid-late")
    assert len(p) == 1


def test_pods_created_in_one_second_wait_in_the_order_the_watch_delivered_them() -> None:
    """creationTimestamp has one-second resolution: a stream submitted at once is ordered as
    kube-scheduler's informer enqueued it (the watch's order), not by name (job-1, job-10,
    job-2); an update keeps a pod's place, a pod seen again after it left goes last."""
    p = PendingPods("gputopo-scheduler")
    for name, gpus in (("job-1", 2), ("job-2", 3), ("job-10", 4)):
        p.observe(waiting(name, gpus))
    assert [u.count for u in p.upcoming()] == [2, 3, 4]
    p.observe(waiting("job-1", 5))  # updated while pending: same place
    assert [u.count for u in p.upcoming()] == [5, 3, 4]
    p.discard("uid-job-1")
    p.observe(waiting("job-1", 2))
    assert [u.count for u in p.upcoming()] == [3, 4, 2]
    # the older second still comes first, whatever the watch's order
    p.observe(waiting("old", 1, created="2023-12-31T23:59:59Z"))
    assert [u.count for u in p.upcoming()] == [1, 3, 4, 2]
    p.clear()  # a relist: the list's order (by name) within one second
    for name, gpus in (("job-10", 4), ("job-2", 3)):
        p.observe(waiting(name, gpus))
    assert [u.count for u in p.upcoming()] == [4, 3]


def test_pending_pods_answer_again_until_the_queue_changes() -> None:
    """The queue is listed once while it is unchanged (filter, prioritize and bind of one pod
    ask alike) and again after any pod is added, updated, dropped or cleared; pods of one
    shape share one waiting job (its key is then computed once)."""
    p = PendingPods("gputopo-scheduler")
    p.observe(waiting("a", 3, created="2024-01-01T00:00:01Z"))
    p.observe(waiting("b", 3, created="2024-01-01T00:00:02Z"))
    first = p.upcoming(exclude="uid-x")
    assert p.upcoming(exclude="uid-x") is first
    assert first[0] is first[1] and first == (Upcoming(3, ring(3), True),) * 2
    assert p.upcoming(exclude="uid-a") == (Upcoming(3, ring(3), True),)
    p.observe(waiting("c", 2, created="2024-01-01T00:00:00Z"))
    assert [u.count for u in p.upcoming(exclude="uid-x")] == [2, 3, 3]
    p.observe(waiting("c", 2, created="2024-01-01T00:00:03Z"))  # updated: now last
    assert [u.count for u in p.upcoming(exclude="uid-x")] == [3, 3, 2]
    p.discard("uid-a")
    assert [u.count for u in p.upcoming(exclude="uid-x")] == [3, 2]
    p.clear()
    assert p.upcoming(exclude="uid-x") == ()


def test_a_part_of_the_candidates_asks_with_its_own_waiting_jobs_only() -> None:
    """The decision layer swaps only the queue of an ask for each part of the candidates:
    every other field of the ask and of its request is kept (what two
    ``dataclasses.replace`` give)."""
    from dataclasses import replace

    from scheduler_extender.decision import Ask, _with_queue
    from topology.numa_alignment import PodDemand

    ask = Ask(Request(3, pattern=ring(3), upcoming=(Upcoming(2, ring(2)),),
                      wait_for_better=True),
              "gputopo", "uid-1", "n1", PodDemand(container_cpus=4, pod_cpus=4,
                                                  device_containers=2, memory_units=1))
    for queue in ((), (Upcoming(3, ring(3)), Upcoming(1))):
        assert _with_queue(ask, queue) == replace(ask, request=replace(ask.request,
                                                                       upcoming=queue))


def test_an_insensitive_waiting_pod_carries_no_pattern() -> None:
    """Only size and sensitivity matter for an insensitive pod: its pattern is dropped so
    queues that differ only there share decisions."""
    up = upcoming_of(Request(count=3, pattern=ring(3), bandwidth_sensitive=False))
    assert up == Upcoming(3, None, False)
    assert upcoming_of(Request(count=3, pattern=ring(3))) == Upcoming(3, ring(3), True)
    assert upcoming_of(Request.fraction(0.5)) is None
    p = PendingPods()
    p.observe(waiting("a", 2))
    req = Request(count=2)
    assert with_lookahead(req, "gputopo", p, "uid-x", 8).upcoming == (Upcoming(2, ring(2)),)
    assert with_lookahead(req, "nvidia-best-effort", p, "uid-x", 8) is req  # no lookahead
    # only itself is waiting (it may wait for a better set: test_extender_postpone.py)
    assert with_lookahead(req, "gputopo", p, "uid-a", 8).upcoming == ()
    assert with_lookahead(req, "gputopo", None, "uid-x", 8) is req


def test_kubernetes_state_watch_feeds_the_pending_pods() -> None:
    kube = FakeKubeAPI()
    st = KubernetesState(kube, scheduler_name="gputopo-scheduler")
    pod = waiting("three", 3)
    st.apply_pod_event("ADDED", pod)
    assert [u.count for u in st.pending.upcoming()] == [3]
    st.apply_pod_event("MODIFIED", waiting("three", 3, node="n1"))
    assert st.pending.upcoming() == ()
    st.apply_pod_event("ADDED", waiting("four", 4))
    st.apply_pod_event("DELETED", waiting("four", 4))
    assert st.pending.upcoming() == ()
    other = KubernetesState(kube, scheduler_name="mine")
    other.apply_pod_event("ADDED", pod)
    assert other.pending.upcoming() == ()


def test_settings_bound_the_lookahead() -> None:
    assert ExtenderSettings().lookahead_pods == 8
    assert ExtenderSettings().scheduler_name == "gputopo-scheduler"
    with pytest.raises(SettingsError, match="lookahead_pods"):
        load_settings({"lookahead_pods": 9}, None)
    assert load_settings({"lookahead_pods": 0, "scheduler_name": "x"}, None).scheduler_name \
        == "x"


def test_homes_are_sought_on_every_node_not_only_the_candidates() -> None:
    """kube-scheduler sends a 5-GPU pod only n1 (n2 has 4 GPUs free); the waiting 3-GPU
    ring still has a home on n2 (its free quad), so n1 does not weigh it."""
    nodes = ("n1", "n2")
    st = MemoryState({n: catalog.get("dgx1-v100") for n in nodes})
    client = make_client(st)
    half = gpu_pod("half", 4)
    client.post("/filter", json=names_args(half, ["n2"]))
    assert client.post("/bind", json=bind_args(half, "n2")).json() == {"Error": ""}
    st.pending.observe(waiting("three", 3))
    assert len([g for g in range(8) if g not in bound_gpus(st, "half")]) == 4
    assert place_five(st, ("n1",))[1] == (0, 2, 3, 4, 7)


def test_incremental_homes_match_a_from_scratch_computation() -> None:
    """The extender keeps the waiting jobs' homes up to date node by node (a bind re-prices
    only the groups it changed): after every bind and every pod ending of a random stream on a
    mixed cluster, each node weighs the waiting jobs :func:`waiting_by_node` gives when the
    whole cluster is grouped and priced from scratch, under both groupings."""
    import random

    from scheduler_extender.app import create_app
    from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs
    from topology.policies.robust import waiting_by_node

    nodes = {f"d{i}": catalog.get("dgx1-v100") for i in range(5)}
    nodes |= {f"m{i}": catalog.get("mapa-cubemesh-16") for i in range(3)}
    nodes |= {f"p{i}": catalog.get("pcie-8gpu") for i in range(2)}
    st = MemoryState(nodes)
    ext = create_app(ExtenderSettings(state="memory"), st).state.runtime.extender
    decider = ext.decider
    names = st.node_names()
    rng = random.Random(5)
    jobs = tuple(Upcoming(k, ring(k) if k > 1 else None, sensitive=s)
                 for k, s in ((3, True), (2, True), (5, True), (4, False), (1, True),
                              (4, True), (6, True)))
    running: list[str] = []

    def scratch(by_free: bool) -> dict[str, tuple[Upcoming, ...]]:
        index: dict[object, int] = {}
        groups: list[Any] = []
        where: dict[str, int] = {}
        for n in names:
            view = st.node_view(n)
            if by_free:
                free_view = view.by_free
                assert free_view is not None
                view = free_view
            key = view.group
            topo = view.topology
            assert isinstance(topo, Topology)
            if key not in index:
                index[key] = len(groups)
                groups.append([topo, view.state.mask(topo), 0])
            groups[index[key]][2] += 1
            where[n] = index[key]
        lists = waiting_by_node([tuple(g) for g in groups], jobs, decider.evaluator.memo)
        return {n: lists[where[n]] for n in names}

    def incremental(by_free: bool) -> dict[str, tuple[Upcoming, ...]]:
        index = decider._sync_homes(names, by_free)
        lists = index.waiting(jobs)
        return {n: lists.get(index.where[n], ()) for n in names}

    homes_seen = 0
    for i in range(60):
        for by_free in (True, False):
            expect = scratch(by_free)
            assert incremental(by_free) == expect, (i, by_free)
            homes_seen += sum(1 for w in expect.values() if w)
        k = rng.choice((1, 2, 3, 4, 5))
        p = gpu_pod(f"s{i}", k, annotations=RING if k > 1 else {})
        args = ExtenderArgs.model_validate({"Pod": p, "NodeNames": names})
        feasible = ext.filter(args)["NodeNames"] or []
        if feasible:
            node = rng.choice(feasible)
            res = ext.bind(ExtenderBindingArgs(PodName=p["metadata"]["name"],
                                               PodNamespace="default",
                                               PodUID=p["metadata"]["uid"], Node=node))
            if not res["Error"]:
                running.append(p["metadata"]["name"])
        if running and rng.random() < 0.4:
            st.delete_pod("default", running.pop(rng.randrange(len(running))))
    assert homes_seen > 0  # the stream reached states where some node is a job's one home


def test_view_changes_name_the_nodes_whose_view_was_dropped() -> None:
    """The lookahead revisits only the nodes the state's log names (a bind, a pod ending, a
    node replaced); a cursor the log no longer reaches, or a drop of every view, asks for a
    full rescan (None)."""
    from scheduler_extender.state import ViewCache

    st = MemoryState({"a": catalog.get("dgx1-v100"), "b": catalog.get("dgx1-v100")})
    changed, cursor = st.view_changes(None)
    assert changed is None  # no cursor yet: scan everything
    st.node_view("a"), st.node_view("b")
    changed, cursor = st.view_changes(cursor)
    assert changed == set()
    client = make_client(st)
    pod = gpu_pod("p", 2, annotations=RING)
    assert client.post("/filter", json=names_args(pod, ("b",))).json()["Error"] == ""
    assert client.post("/bind", json=bind_args(pod, "b")).json() == {"Error": ""}
    changed, cursor = st.view_changes(cursor)
    assert changed == {"b"}
    st.add_node("a", catalog.get("pcie-8gpu"))
    assert st.delete_pod("default", "p")
    changed, cursor = st.view_changes(cursor)
    assert changed == {"a", "b"}

    views = ViewCache()
    start = views.cursor()
    for i in range(2 * ViewCache.MAX_LOG + 1):
        views.pop(f"n{i}")
    assert views.changed_since(start)[0] is None  # trimmed past the cursor
    recent = views.cursor()
    views.pop("x")
    assert views.changed_since(recent)[0] == {"x"}
    views.clear()
    assert views.changed_since(recent)[0] is None
