"""Gangs in the planner: Indexed Jobs admitted whole inside one domain, waiting without
holding GPUs, preempted whole by a gang of higher priority; the single-pod plan leaves their
GPUs alone."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from planner.controller import Planner
from planner.gang import admission_patch, is_gang, parse_gang
from planner.jobs import parse_time
from planner.settings import PlannerSettings, SettingsError, load_settings
from tests.planner.fake_api import FakeApi, apply_patch, node
from topology.contract import (
    ANN_BW_SENSITIVE,
    ANN_COMPLETION_INDEX,
    ANN_GPU_INDICES,
    ANN_PATTERN,
    ANN_PLANNED_NODES,
    ANN_PRIORITY,
    ANN_TOPOLOGY_REQUIRED,
    LABEL_BLOCK,
    LABEL_QUEUE,
    LABEL_RACK,
    parse_planned_nodes,
)

T0 = parse_time("2026-01-01T00:00:00Z")


def rack_node(name: str, rack: str, block: str = "b0") -> dict[str, Any]:
    n = node(name, "dgx1-v100")
    n["metadata"]["labels"].update({LABEL_BLOCK: block, LABEL_RACK: rack,
                                    "gputopo.io/nic-count": "4", "gputopo.io/nic-gbits": "100"})
    return n


def gang(name: str, pods: int, gpus: int, *, priority: int = 0, created: str =
         "2026-01-01T00:00:00Z", extra: dict[str, str] | None = None) -> dict[str, Any]:
    ann = {ANN_PRIORITY: str(priority), **(extra or {})}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                     "resourceVersion": "1", "labels": {LABEL_QUEUE: "default"},
                     "annotations": ann, "creationTimestamp": created},
        "spec": {"suspend": True, "completionMode": "Indexed", "parallelism": pods,
                 "completions": pods, "template": {
                     "metadata": {"labels": {"app": name}},
                     "spec": {"schedulerName": "gputopo-scheduler", "restartPolicy": "Never",
                              "containers": [{"name": "train", "image": "x", "resources": {
                                  "limits": {"nvidia.com/gpu": str(gpus)}}}]}}},
        "status": {},
    }


def cluster() -> FakeApi:
    """Two racks of three DGX-1 V100 (labelled NICs: four 100 Gb/s)."""
    return FakeApi([rack_node(f"r{r}-n{i}", f"r{r}") for r in range(2) for i in range(3)])


def planner(api: FakeApi, clock: Callable[[], float] = lambda: T0, **kw: object) -> Planner:
    settings = PlannerSettings(leader_elect=False, metrics_port=0, max_iterations=50,
                               debounce_s=0, restart_s=0, **kw)  # type: ignore[arg-type]
    return Planner(api, settings, clock=clock)


def start_pods(api: FakeApi, name: str) -> None:
    """The Job controller and kube-scheduler for an admitted gang: one Running pod per
    completion index on its planned node."""
    j = api.jobs[name]
    tmeta = j["spec"]["template"]["metadata"]
    planned = parse_planned_nodes(tmeta["annotations"][ANN_PLANNED_NODES])
    for i, n in planned.items():
        uid = f"pod-{name}-{i}"
        api.pods[uid] = {
            "metadata": {"name": f"{name}-{i}", "namespace": "ml", "uid": uid,
                         "labels": {"batch.kubernetes.io/controller-uid": j["metadata"]["uid"],
                                    **tmeta.get("labels", {})},
                         "annotations": {**tmeta["annotations"], ANN_COMPLETION_INDEX: str(i)}},
            "spec": {"nodeName": n, "containers": copy.deepcopy(
                j["spec"]["template"]["spec"]["containers"])},
            "status": {"phase": "Running", "startTime": "2026-01-01T00:00:01Z"}}
    j["status"] = {"active": len(planned), "startTime": "2026-01-01T00:00:01Z"}


def nodes_of(api: FakeApi, name: str) -> list[str]:
    ann = api.jobs[name]["spec"]["template"]["metadata"]["annotations"]
    return list(parse_planned_nodes(ann[ANN_PLANNED_NODES]).values())


def test_a_gang_is_admitted_whole_inside_one_rack() -> None:
    api = cluster()
    api.add_job(gang("g", 3, 8))
    r = planner(api).reconcile("job-added")
    assert r.resumed == ["ml/g"]
    j = api.jobs["g"]
    assert j["spec"]["suspend"] is False
    nodes = nodes_of(api, "g")
    assert len(nodes) == 3 and len({n.split("-")[0] for n in nodes}) == 1  # one rack
    terms = j["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                            "values": sorted(nodes)}]}]
    assert j["spec"]["template"]["metadata"]["labels"][LABEL_QUEUE] == "default"
    assert api.plan_annotation("g")["state"] == "running"
    assert ("g", "Admitted") in [(e[0], e[1]) for e in api.events]


def test_a_gang_that_does_not_fit_waits_and_holds_nothing() -> None:
    """Two 3-node gangs fill both racks; a third waits suspended — no pod, no GPU — and is
    admitted once a rack is free again."""
    api = cluster()
    for name in ("a", "b", "c"):
        api.add_job(gang(name, 3, 8, created=f"2026-01-01T00:00:0{ord(name) - 96}Z"))
    p = planner(api)
    r = p.reconcile("job-added")
    assert sorted(r.resumed) == ["ml/a", "ml/b"]
    assert api.jobs["c"]["spec"]["suspend"] is True
    assert api.plan_annotation("c")["state"] == "waiting"
    assert "no topology.gputopo.io/rack domain has room" in api.plan_annotation("c")["reason"]
    start_pods(api, "a")
    start_pods(api, "b")
    assert p.reconcile("periodic").resumed == []  # the pods of a and b hold both racks
    for pod in [p for p in api.pods.values() if p["metadata"]["name"].startswith("a-")]:
        pod["status"]["phase"] = "Succeeded"
    api.jobs["a"]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    r = p.reconcile("job-finished")
    assert r.resumed == ["ml/c"] and set(nodes_of(api, "c")) == set(nodes_of(api, "a"))


def test_admitted_but_unbound_pods_hold_their_gpus() -> None:
    """Right after admission no pod is bound yet: the next point must not give the same GPUs
    away (to another gang, or to the single-pod plan)."""
    api = cluster()
    api.add_job(gang("a", 3, 8))
    p = planner(api)
    p.reconcile("job-added")
    api.add_job(gang("b", 4, 8))  # 4 nodes: fits no rack while a's three are promised
    r = p.reconcile("job-added")
    assert r.resumed == [] and api.jobs["b"]["spec"]["suspend"] is True


def test_finished_pods_of_a_running_gang_hold_nothing() -> None:
    """Pods that succeeded leave the pod list; the Job's completedIndexes says they are done,
    so their GPUs are not promised again."""
    api = cluster()
    api.add_job(gang("a", 3, 8))
    api.add_job(gang("c", 3, 8, created="2026-01-01T00:00:01Z"))
    p = planner(api)
    p.reconcile("job-added")
    start_pods(api, "a")
    start_pods(api, "c")
    for i in (0, 1):  # two of a's three pods succeeded and are no longer listed
        del api.pods[f"pod-a-{i}"]
    api.jobs["a"]["status"] = {"active": 1, "completedIndexes": "0-1", "startTime": "x"}
    api.add_job(gang("b", 2, 8, created="2026-01-01T00:00:09Z"))
    r = p.reconcile("job-added")
    assert r.resumed == ["ml/b"]  # on the two nodes a's finished pods left
    assert set(nodes_of(api, "b")) == set(nodes_of(api, "a")[:2])


def test_a_higher_priority_gang_preempts_a_running_one_whole() -> None:
    api = cluster()
    api.add_job(gang("low", 3, 8, priority=0))
    api.add_job(gang("low2", 3, 8, priority=0, created="2026-01-01T00:00:05Z"))
    p = planner(api)
    p.reconcile("job-added")
    start_pods(api, "low")
    start_pods(api, "low2")
    api.add_job(gang("high", 3, 8, priority=10, created="2026-01-01T00:01:00Z"))
    r = p.reconcile("job-added")
    # the most recently admitted gang of the lowest priority goes, all of it at once
    assert r.suspended == ["ml/low2"] and api.jobs["low2"]["spec"]["suspend"] is True
    assert api.jobs["low"]["spec"]["suspend"] is False
    assert api.jobs["high"]["spec"]["suspend"] is True  # admitted once low2's pods are gone
    assert ("low2", "Preempted") in [(e[0], e[1]) for e in api.events]
    assert api.plan_annotation("low2")["state"] == "preempted"
    # while low2's pods are still going, nothing more is preempted
    api.jobs["low2"]["status"] = {"active": 3, "startTime": "x"}
    assert p.reconcile("periodic").suspended == []
    api.stop_pods("low2", "x")
    r = p.reconcile("job-stopped")
    assert r.resumed == ["ml/high"] and set(nodes_of(api, "high")) == set(nodes_of(api, "low2"))


def test_the_most_recently_admitted_gang_goes_first_even_within_one_second() -> None:
    # a and d are created in the same second (creationTimestamp has one-second resolution)
    # and admitted 0.4 s apart: d, admitted last, has lost the least work, so it goes
    # (Kueue's CandidatesOrdering); by creation time and then name, a would go instead
    api = cluster()
    now = [T0]
    settings = PlannerSettings(leader_elect=False, metrics_port=0, max_iterations=50,
                               debounce_s=0, restart_s=0)
    p = Planner(api, settings, clock=lambda: now[0])
    api.add_job(gang("a", 3, 8))
    assert p.reconcile("job-added").resumed == ["ml/a"]
    start_pods(api, "a")
    now[0] = T0 + 0.4
    api.add_job(gang("d", 3, 8))
    assert p.reconcile("job-added").resumed == ["ml/d"]
    start_pods(api, "d")
    assert parse_gang(api.jobs["d"]).admitted_s == pytest.approx(T0 + 0.4)
    now[0] = T0 + 1
    api.add_job(gang("high", 3, 8, priority=10, created="2026-01-01T00:00:01Z"))
    assert p.reconcile("job-added").suspended == ["ml/d"]
    assert api.jobs["a"]["spec"]["suspend"] is False
    # a preempted gang is no longer "admitted": its plan says so
    assert parse_gang(api.jobs["d"]).admitted_s is None
    assert parse_gang(gang("never", 1, 8)).admitted_s is None


def test_gangs_created_in_one_second_wait_in_the_order_the_watch_delivered_them() -> None:
    """Three gangs that each need a whole rack, created in one second (creationTimestamp has
    one-second resolution): the API lists them by name (job-10, job-8, job-9) but the watch
    delivers them in creation order (job-8, job-9, job-10), and that order decides which two
    are admitted, not the name."""
    api = cluster()
    objs = {name: gang(name, 3, 8) for name in ("job-10", "job-8", "job-9")}
    for obj in objs.values():  # the list's order
        api.add_job(obj)
    p = planner(api)
    for name in ("job-8", "job-9", "job-10"):  # the watch's order
        p.observe("ADDED", objs[name])
    assert sorted(p.reconcile("job-added").resumed) == ["ml/job-8", "ml/job-9"]
    assert api.jobs["job-10"]["spec"]["suspend"] is True
    # a planner that has seen only the list (just started) takes the list's order
    fresh = cluster()
    for obj in objs.values():
        fresh.add_job(copy.deepcopy(obj))
    assert sorted(planner(fresh).reconcile("start").resumed) == ["ml/job-10", "ml/job-8"]


def hold(api: FakeApi, node_name: str, gpus: str) -> None:
    """A running pod outside the planner's Jobs holding ``gpus`` (the extender's indices)."""
    api.pods[f"busy-{node_name}"] = {
        "metadata": {"name": f"busy-{node_name}", "namespace": "ml", "uid": f"busy-{node_name}",
                     "labels": {}, "annotations": {ANN_GPU_INDICES: gpus}},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {
            "limits": {"nvidia.com/gpu": str(len(gpus.split(",")))}}}]},
        "status": {"phase": "Running"}}


def test_a_sensitive_gang_of_one_waits_for_a_better_set_within_the_bound() -> None:
    """Issue 24's case through the planner: a DGX-1 V100 whose free GPUs are {1,5,6} (a 5-GPU
    ring holds {0,2,3,4,7}). A bandwidth-sensitive 3-GPU ring would get 52 % of its ideal
    EffBW under Eq. 2 there: it waits, as the extender postpones a pod it places, and preempts
    nothing for a better set; once the bound has passed since its first postponement (not its
    creation), or for an insensitive job, or for the Kueue chooser, it starts there."""
    ring = {ANN_PATTERN: "ring"}
    old = "2025-12-31T23:00:00Z"  # an hour before the planner's clock (T0)

    def run(job: dict[str, Any], **kw: object) -> tuple[list[str], FakeApi]:
        api = FakeApi([rack_node("r0-n0", "r0")])
        hold(api, "r0-n0", "0,2,3,4,7")
        api.add_job(job)
        return planner(api, **kw).reconcile("job-added").resumed, api

    resumed, api = run(gang("ring3", 1, 3, priority=5, extra=ring))
    assert resumed == [] and api.jobs["ring3"]["spec"]["suspend"] is True
    plan = api.plan_annotation("ring3")
    assert plan["state"] == "waiting"
    assert "postponed" in plan["reason"] and "{1,5,6}" in plan["reason"]
    assert plan["reason"].startswith("waiting for a better GPU set (at most 1800 s more)")
    assert plan["postponedAt"] == "2026-01-01T00:00:00.000Z"
    # every GPU taken meanwhile: it waits for room, and its clock runs on
    hold(api, "r0-n0", "0,1,2,3,4,5,6,7")
    assert planner(api, clock=lambda: T0 + 600.0).reconcile("periodic").resumed == []
    plan = api.plan_annotation("ring3")
    assert "better GPU set" not in plan["reason"]
    assert plan["postponedAt"] == "2026-01-01T00:00:00.000Z"
    hold(api, "r0-n0", "0,2,3,4,7")
    # the clock is kept in the plan: another planner (a new leader) continues it, and the
    # gang starts on {1,5,6} once 1 800 s have passed since it was first postponed
    now = [T0 + 1799.0]
    assert planner(api, clock=lambda: now[0]).reconcile("periodic").resumed == []
    plan = api.plan_annotation("ring3")
    assert plan["reason"].startswith("waiting for a better GPU set (at most 1 s more)")
    assert plan["postponedAt"] == "2026-01-01T00:00:00.000Z"
    now[0] = T0 + 1800.0
    assert planner(api, clock=lambda: now[0]).reconcile("periodic").resumed == ["ml/ring3"]
    # a Job that queued an hour before it could start has not waited for a better set yet
    resumed, api = run(gang("ring3", 1, 3, created=old, extra=ring))
    assert resumed == [] and api.plan_annotation("ring3")["reason"].startswith(
        "waiting for a better GPU set (at most 1800 s more)")
    assert run(gang("ring3", 1, 3, extra={**ring, ANN_BW_SENSITIVE: "false"}))[0] \
        == ["ml/ring3"]
    assert run(gang("ring3", 1, 3, extra=ring), postpone_max_s=0)[0] == ["ml/ring3"]
    assert run(gang("ring3", 1, 3, extra=ring), gang_chooser="kueue-tas")[0] == ["ml/ring3"]
    # a running gang of lower priority holds {0,2,3,4,7}: preempting it would free a better
    # set, but a postponement preempts nothing
    api = FakeApi([rack_node("r0-n0", "r0")])
    api.add_job(gang("low", 1, 5))
    p = planner(api)
    assert p.reconcile("job-added").resumed == ["ml/low"]
    start_pods(api, "low")
    api.pods["pod-low-0"]["metadata"]["annotations"][ANN_GPU_INDICES] = "0,2,3,4,7"
    api.add_job(gang("ring3", 1, 3, priority=5, extra=ring))
    r = p.reconcile("job-added")
    assert r.resumed == [] and r.suspended == []
    assert api.plan_annotation("ring3")["reason"].startswith("waiting for a better GPU set")
    # an NVLink triangle free: no wait
    api = FakeApi([rack_node("r0-n0", "r0")])
    hold(api, "r0-n0", "0,1,2,3,4")
    api.add_job(gang("ring3", 1, 3, extra=ring))
    assert planner(api).reconcile("job-added").resumed == ["ml/ring3"]


def test_the_loop_holds_a_point_when_a_postponement_ends() -> None:
    """The bound is a promise: with rescheduling points every 300 s, a postponed gang would
    otherwise wait up to 300 s past it. :meth:`Planner.run` wakes when the first bound ends."""
    import threading
    import time

    api = FakeApi([rack_node("r0-n0", "r0")])
    hold(api, "r0-n0", "0,2,3,4,7")
    api.add_job(gang("ring3", 1, 3, extra={ANN_PATTERN: "ring"}))
    p = planner(api, clock=time.time, postpone_max_s=0.5, interval_s=300)
    assert p.postponement_ends is None
    t = threading.Thread(target=p.run, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 20
        while api.jobs["ring3"]["spec"]["suspend"] and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        p.stop()
        t.join(10)
    assert api.jobs["ring3"]["spec"]["suspend"] is False  # admitted on {1,5,6} at the bound
    ended = p.metrics.registry.get_sample_value(
        "gputopo_planner_rescheduling_points_total", {"trigger": "postponement-ended"})
    assert ended is not None and ended >= 1
    assert p.postponement_ends is None


def test_required_level_and_invalid_gangs() -> None:
    api = cluster()
    api.add_job(gang("wide", 4, 8, extra={ANN_TOPOLOGY_REQUIRED: LABEL_RACK}))
    bad = gang("bad", 2, 8)
    bad["spec"]["completions"] = 3
    api.add_job(bad)
    p = planner(api)
    r = p.reconcile("job-added")
    assert r.resumed == []  # four nodes never fit a rack of three
    assert "no topology.gputopo.io/rack domain has room" in api.plan_annotation("wide")["reason"]
    assert [e for e in api.events if e[0] == "bad"][0][1:] == (
        "InvalidGang", "a gang needs parallelism = completions (got 2 and 3): every pod runs at"
        " once", "Warning")
    p.reconcile("periodic")
    assert len([e for e in api.events if e[0] == "bad"]) == 1  # reported once


def test_parsing_and_the_admission_patch() -> None:
    obj = gang("g", 2, 4, extra={"gputopo.io/pattern": "ring"})
    obj["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]},
                                  {"key": "kubernetes.io/hostname", "operator": "In",
                                   "values": ["old"]}]}]}}}
    assert is_gang(obj) and not is_gang({"spec": {"parallelism": 3}})
    assert is_gang({"spec": {"completionMode": "Indexed", "completions": 1}})  # a gang of one
    g = parse_gang(obj)
    assert (g.pods, g.gpus, g.pattern, g.error) == (2, 4, "ring", "")
    out = apply_patch(obj, admission_patch(obj, ["n1", "n2"]))
    term = out["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"] == [
        {"key": "zone", "operator": "In", "values": ["z1"]},
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1", "n2"]}]
    assert out["spec"]["template"]["metadata"]["annotations"][ANN_PLANNED_NODES] == "0=n1,1=n2"
    assert out["spec"]["suspend"] is False


def test_settings_take_a_hierarchy_and_a_chooser(tmp_path: Any) -> None:
    s = load_settings({"hierarchy": {"levels": [{"label": "zone"}]},
                       "gang_chooser": "kueue-tas", "leader_elect": False})
    assert s.hierarchy == {"levels": [{"label": "zone"}]} and s.gang_chooser == "kueue-tas"
    with pytest.raises(SettingsError, match="hierarchy"):
        load_settings({"hierarchy": {"levels": [{"label": "a"}, {"label": "a"}]}})
