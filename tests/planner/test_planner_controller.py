"""The planner's controller against an in-memory API: it resumes Jobs on the planned node and
GPU count, preempts less urgent ones, respects GPUs other pods hold, reports its decisions
(Events, ``gputopo.io/plan``, metrics) and learns per-epoch times."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from planner.controller import Planner
from planner.jobs import format_time, parse_job, parse_time
from planner.settings import PlannerSettings, SettingsError, load_settings
from tests.planner.fake_api import FakeApi, job, node
from topology.contract import ANN_PLANNED_NODE

PROFILES = resources.files("simulator").joinpath("data/andreas-profiles.yaml").read_text()
T0 = parse_time("2026-01-01T00:00:00Z")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def at(seconds: float) -> str:
    return format_time(T0 + seconds)


def planner(api: FakeApi, **kw: object) -> tuple[Planner, Clock]:
    clock = Clock()
    settings = PlannerSettings(profiles_configmap="gputopo-system/profiles", leader_elect=False,
                               metrics_port=0, max_iterations=200, debounce_s=0,
                               restart_s=0, **kw)  # type: ignore[arg-type]
    return Planner(api, settings, clock=clock), clock


def armida() -> FakeApi:
    return FakeApi([node("armida-05", "v100-pcie-1"), node("armida-06", "v100-pcie-2"),
                    node("armida-07", "t4-1")], PROFILES)


def test_gputopo_planner_shares_a_nodes_idle_power() -> None:
    """J7 of Table V (160 LSTM-big epochs, due in 17600 s). gputopo's planner charges a job
    its share of a fully busy node: one GPU of armida-06 (2 x V100, (250 + 2 x 250) W / 2 =
    375 W, 66 s per epoch: 24750 J per epoch) is cheaper than the T4 (320 W x 95.7 s = 30624
    J), even with the other V100 expected free for 1800 s; the paper's c_ng charges the
    whole 500 W of armida-06 and picks the T4 (next test)."""
    api = armida()
    api.add_job(job("j7", due=at(17600), weight=3, epochs=160, profile="lstm-big"))
    p, _ = planner(api)
    assert p.reconcile("job-added").resumed == ["ml/j7"]
    tspec = api.jobs["j7"]["spec"]["template"]["spec"]
    assert tspec["nodeSelector"] == {"kubernetes.io/hostname": "armida-06"}
    assert tspec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_resumes_a_waiting_job_on_the_planned_node_and_gpu_count() -> None:
    """J7 of Table V (160 LSTM-big epochs, due in 17600 s) with the paper's planner: the T4
    is its cheapest configuration that meets the due date."""
    api = armida()
    api.add_job(job("j7", due=at(17600), weight=3, epochs=160, profile="lstm-big"))
    p, _ = planner(api, paper=True)
    r = p.reconcile("job-added")
    assert r.resumed == ["ml/j7"]
    j = api.jobs["j7"]
    assert j["spec"]["suspend"] is False
    tspec = j["spec"]["template"]["spec"]
    assert tspec["nodeSelector"] == {"kubernetes.io/hostname": "armida-07"}
    assert tspec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert j["spec"]["template"]["metadata"]["annotations"][ANN_PLANNED_NODE] == "armida-07"
    assert j["spec"]["template"]["metadata"]["labels"]["gputopo.io/queue"] == "default"
    plan = api.plan_annotation("j7")
    assert plan["state"] == "running" and plan["node"] == "armida-07" and plan["gpus"] == 1
    assert parse_time(plan["predictedFinish"]) == pytest.approx(T0 + 160 * 95.7, abs=0.01)
    assert plan["predictedEnergyCostEUR"] > 0
    assert ("j7", "Resumed") in [(e[0], e[1]) for e in api.events]
    # the patch guards itself with the resourceVersion it read
    assert api.patches[0][1][0] == {"op": "test", "path": "/metadata/resourceVersion",
                                    "value": "1"}
    # nothing changes at the next point
    assert p.reconcile("periodic").resumed == []


def test_two_gpus_when_the_due_date_needs_them() -> None:
    """80 EfficientNet epochs due in 2500 s: one V100 (3200 s) is too slow, two (2160 s) are
    not; only armida-06 has two."""
    api = armida()
    api.add_job(job("j6", due=at(2500), weight=4, epochs=80, profile="efficientnet"))
    p, _ = planner(api)
    p.reconcile()
    tspec = api.jobs["j6"]["spec"]["template"]["spec"]
    assert tspec["nodeSelector"]["kubernetes.io/hostname"] == "armida-06"
    assert tspec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"


def test_preempts_a_less_urgent_job_then_starts_the_urgent_one() -> None:
    """One T4. L (LSTM-big, distant due date) runs on it; U (LSTM-small, tight) arrives and
    can meet its due date only by starting now: L is suspended (Event, plan annotation), U
    starts once L's pod is gone."""
    api = FakeApi([node("t4-node", "t4-1")], PROFILES)
    api.add_job(job("low", due=at(100_000), weight=1, epochs=160, profile="lstm-big"))
    p, clock = planner(api)
    p.reconcile()
    api.run_pod("low", at(1))
    clock.now = T0 + 600
    api.add_job(job("urgent", due=at(600 + 60 * 49.3 + 200), weight=5, epochs=60,
                    profile="lstm-small", created=at(600)))
    r = p.reconcile("job-added")
    assert r.suspended == ["ml/low"]
    assert r.resumed == [] and r.deferred == ["ml/urgent"]  # the T4 is not free yet
    assert api.jobs["low"]["spec"]["suspend"] is True
    assert api.plan_annotation("low")["state"] == "preempted"
    assert any(e[:2] == ("low", "Preempted") for e in api.events)
    api.stop_pods("low", at(602))
    clock.now = T0 + 602
    r = p.reconcile("job-stopped")
    assert r.resumed == ["ml/urgent"]
    assert api.plan_annotation("low")["state"] == "waiting"
    # the preempted job restarts from its snapshot when the urgent one finishes
    api.run_pod("urgent", at(603))
    clock.now = T0 + 603 + 60 * 49.3
    api.finish("urgent", at(clock.now - T0))
    r = p.reconcile("job-finished")
    assert r.resumed == ["ml/low"]


def test_gpus_held_by_other_pods_are_not_planned() -> None:
    api = FakeApi([node("v2", "v100-pcie-2")], PROFILES)
    api.pods["other"] = {"metadata": {"name": "other", "namespace": "x", "uid": "other",
                                      "labels": {}},
                         "spec": {"nodeName": "v2", "containers": [{"resources": {"limits": {
                             "nvidia.com/gpu": "1"}}}]},
                         "status": {"phase": "Running", "startTime": at(0)}}
    api.add_job(job("j6", due=at(2500), weight=4, epochs=80, profile="efficientnet"))
    p, _ = planner(api)
    p.reconcile()
    # two GPUs would meet the due date, but one is taken: the fastest that fits is one
    tspec = api.jobs["j6"]["spec"]["template"]["spec"]
    assert tspec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_invalid_jobs_are_reported_once_and_left_alone() -> None:
    api = armida()
    bad = job("bad", due="tomorrow", weight=1, epochs=3)
    api.add_job(bad)
    p, _ = planner(api)
    p.reconcile()
    p.reconcile()
    warnings = [e for e in api.events if e[1] == "InvalidPlanningSpec"]
    assert len(warnings) == 1 and "RFC 3339" in warnings[0][2] and warnings[0][3] == "Warning"
    assert api.jobs["bad"]["spec"]["suspend"] is True


def test_metrics_and_energy_ledger() -> None:
    """The predicted energy of a run and the actual one from its pod's run time, priced per
    node (c_ng = (250 + 70) W x 1.33 x 0.172 EUR/kWh on the T4 node)."""
    api = FakeApi([node("t4-node", "t4-1")], PROFILES)
    api.add_job(job("j", due=at(100_000), weight=1, epochs=10, profile="lstm-small"))
    p, clock = planner(api)
    p.reconcile()
    api.run_pod("j", at(2))
    clock.now = T0 + 2 + 10 * 49.3
    api.finish("j", at(2 + 10 * 49.3))
    p.reconcile("job-finished")
    c = 0.320 * 1.33 * 0.172 / 3600  # EUR per second
    costs = p.costs()
    assert costs["planned_energy_eur"] == pytest.approx(10 * 49.3 * c, rel=1e-6)
    assert costs["actual_energy_eur"] == pytest.approx(10 * 49.3 * c, rel=1e-3)
    assert costs["tardiness_eur"] == 0
    families = {f.name: f for f in text_string_to_metric_families(
        generate_latest(p.metrics.registry).decode())}
    assert families["gputopo_planner_planned_energy_cost_eur"].samples[0].value == \
        pytest.approx(costs["planned_energy_eur"])
    jobs = {s.labels["state"]: s.value for s in families["gputopo_planner_jobs"].samples}
    assert jobs["finished"] == 1
    actions = {s.labels["action"]: s.value for s in
               families["gputopo_planner_actions"].samples if s.name.endswith("_total")}
    assert actions == {"resume": 1}


def test_learns_epoch_times_from_reports() -> None:
    """The job reports 12 epochs in 720 s on the T4 (60 s per epoch, not the profile's 49.3):
    once it stops, LSTM-small's T4 time is 60 s and its other configurations scale with it."""
    api = FakeApi([node("t4-node", "t4-1"), node("v1", "v100-pcie-1")], PROFILES)
    api.add_job(job("a", due=at(100_000), weight=1, epochs=60, profile="lstm-small"))
    p, clock = planner(api)
    p.reconcile()
    assert api.jobs["a"]["spec"]["template"]["spec"]["nodeSelector"][
        "kubernetes.io/hostname"] == "t4-node"
    api.run_pod("a", at(0))
    for k in range(1, 13):
        clock.now = T0 + 60 * k
        api.jobs["a"]["metadata"]["annotations"]["gputopo.io/epochs-done"] = str(k)
        p.observe("MODIFIED", api.jobs["a"])
    clock.now = T0 + 60 * 60 + 10
    api.finish("a", at(3610))
    p.reconcile("job-finished")
    learnt = p.learner.epoch_times("lstm-small", {("t4", 1): 49.3, ("v100-pcie-32gb", 1): 34.0})
    assert learnt[("t4", 1)] == pytest.approx(60.0)
    assert learnt[("v100-pcie-32gb", 1)] == pytest.approx(34.0 * 60 / 49.3)


def test_observe_wakes_on_arrivals_finishes_and_stopped_jobs() -> None:
    api = armida()
    p, _ = planner(api)
    obj = job("x", due=at(1000), weight=1, epochs=5)
    p.observe("ADDED", obj)
    assert p._trigger == "job-added"
    obj2 = {**obj, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    p.observe("MODIFIED", obj2)
    assert p._trigger == "job-finished"


def test_gpus_freed_by_other_pods_wake_the_loop_while_a_job_waits() -> None:
    """A pod outside the planner's Jobs that held GPUs ends or goes: a waiting Job may now
    fit, so the loop holds a point (``gpus-freed``) rather than wait for the periodic one."""
    api = armida()
    p, _ = planner(api)
    pod = {"metadata": {"name": "bare", "namespace": "ml", "uid": "bare"},
           "spec": {"nodeName": "n1", "containers": [
               {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
           "status": {"phase": "Running"}}
    p._trigger = "periodic"
    p.observe_pod("DELETED", pod)
    assert p._trigger == "periodic"  # nothing waits: no point
    p.observe("ADDED", job("x", due=at(1000), weight=1, epochs=5))  # suspended, no pods
    p._trigger = "periodic"
    for event, obj in (("MODIFIED", pod), ("ADDED", pod),  # still running
                       ("DELETED", {**pod, "spec": {**pod["spec"], "nodeName": None}}),
                       ("DELETED", {**pod, "spec": {"nodeName": "n1", "containers": [
                           {"name": "c"}]}})):  # never bound, or no GPU
        p.observe_pod(event, obj)
        assert p._trigger == "periodic", (event, obj)
    p.observe_pod("MODIFIED", {**pod, "status": {"phase": "Succeeded"}})
    assert p._trigger == "gpus-freed"
    p._trigger = "periodic"
    p.observe_pod("DELETED", pod)
    assert p._trigger == "gpus-freed"


def test_job_annotations_are_parsed() -> None:
    j = parse_job(job("x", due="2026-01-01T01:00:00+01:00", weight=2.5, epochs=7, done=3,
                      extra={"gputopo.io/epoch-time-s": '{"Tesla T4:1": 12}'}))
    assert j.error == ""
    assert j.due_s == T0  # 01:00 at +01:00 is midnight UTC
    assert (j.weight, j.epochs, j.epochs_done, j.remaining_epochs) == (2.5, 7, 3, 4)
    assert j.epoch_time_s == {("t4", 1): 12.0}
    assert j.waiting and not j.running
    for bad, why in [({"gputopo.io/tardiness-weight": "0"}, "> 0"),
                     ({"gputopo.io/epochs": "1.5"}, "whole"),
                     ({"gputopo.io/due-date": "2026-01-01T00:00:00"}, "time zone"),
                     ({"gputopo.io/epoch-time-s": "{bad json"}, "epoch-time-s")]:
        assert why in parse_job(job("x", due=at(1), weight=1, epochs=2, extra=bad)).error


def test_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "planner.yaml"
    cfg.write_text("interval-s: 60\nrho: 50\n")
    monkeypatch.setenv("GPUTOPO_PLANNER_RHO", "70")
    s = load_settings({"max_iterations": 10}, cfg)
    assert (s.interval_s, s.rho, s.max_iterations) == (60, 70, 10)  # CLI > env > file
    with pytest.raises(SettingsError, match="namespace/name"):
        load_settings({"profiles_configmap": "nope"})
    with pytest.raises(SettingsError, match="unknown setting"):
        cfg.write_text("bogus: 1\n")
        load_settings({}, cfg)
