"""The planner with generated bad input: Jobs (one pod, and Indexed gangs) whose gputopo
annotations and GPU quantities are any strings. A reconcile never raises; a Job it cannot
read is left suspended with a Warning Event naming why; the others are planned as usual.
(The hand-picked cases and their messages are in ``test_planner_controller.py`` and
``test_planner_gangs.py``.)"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.planner.fake_api import FakeApi, job
from tests.planner.test_planner_controller import at
from tests.planner.test_planner_controller import planner as job_planner
from tests.planner.test_planner_gangs import cluster, gang
from tests.planner.test_planner_gangs import planner as gang_planner
from topology.contract import (
    ANN_BW_SENSITIVE,
    ANN_DUE_DATE,
    ANN_EPOCH_TIME,
    ANN_EPOCHS,
    ANN_EPOCHS_DONE,
    ANN_JOB_PROFILE,
    ANN_NETWORK,
    ANN_PATTERN,
    ANN_PLAN,
    ANN_PLANNED_NODES,
    ANN_PRIORITY,
    ANN_TARDINESS_WEIGHT,
    ANN_TOPOLOGY_PREFERRED,
    ANN_TOPOLOGY_REQUIRED,
)

WORDS = st.sampled_from([
    "", "0", "1", "-1", "2", "8", "9", "1e9", "0.5", "nan", "inf", "true", "false", "ring",
    "rack", "block", "node", "2026-01-01T00:00:00Z", "2026-01-01", "yesterday", "convnet",
    "lstm-big", "nope", "{}", "[]", '{"v100:1": 60}', '{"v100:1": -1}', '{"0": "r0-n0"}',
    '{"0": 5}', "null", " ", "\u00e9", "\u00b2", "0=\u00b2",
]) | st.text(max_size=16)
JOB_ANNOTATIONS = (ANN_DUE_DATE, ANN_TARDINESS_WEIGHT, ANN_EPOCHS, ANN_EPOCHS_DONE,
                   ANN_JOB_PROFILE, ANN_EPOCH_TIME, ANN_PLAN, ANN_PRIORITY)
GANG_ANNOTATIONS = (ANN_PRIORITY, ANN_PATTERN, ANN_BW_SENSITIVE, ANN_NETWORK, ANN_PLAN,
                    ANN_PLANNED_NODES, ANN_TOPOLOGY_REQUIRED, ANN_TOPOLOGY_PREFERRED)
FUZZ = settings(max_examples=100, deadline=None)


def _gpus(obj: dict[str, Any], quantity: str | None) -> None:
    if quantity is not None:
        c = obj["spec"]["template"]["spec"]["containers"][0]
        c["resources"]["limits"]["nvidia.com/gpu"] = quantity


def _left_alone_or_planned(api: FakeApi, name: str, out: Any) -> None:
    """Either the Job was planned (resumed) or it stays suspended; a Job the planner
    could not read got a Warning saying why, on one line."""
    obj = api.jobs[name]
    for job_name, _reason, message, kind in api.events:
        if job_name == name and kind == "Warning":
            assert message and "\n" not in message and "Traceback" not in message
    if f"ml/{name}" not in getattr(out, "resumed", ()):
        assert obj["spec"]["suspend"] is True or obj["spec"].get("suspend") is None


@FUZZ
@given(ann=st.dictionaries(st.sampled_from(JOB_ANNOTATIONS), WORDS, max_size=4),
       quantity=st.none() | WORDS)
def test_a_job_with_any_annotations_is_planned_or_left_with_a_reason(
        ann: dict[str, str], quantity: str | None) -> None:
    from tests.planner.test_planner_controller import armida

    api = armida()
    odd = job("odd", due=at(17600), weight=3, epochs=10, profile="convnet")
    odd["metadata"]["annotations"].update(ann)
    _gpus(odd, quantity)
    api.add_job(odd)
    api.add_job(job("fine", due=at(17600), weight=3, epochs=10, profile="convnet"))
    p, _ = job_planner(api)
    out = p.reconcile("job-added")
    _left_alone_or_planned(api, "odd", out)
    assert "ml/fine" in out.resumed  # one bad Job does not stop the others


@FUZZ
@given(ann=st.dictionaries(st.sampled_from(GANG_ANNOTATIONS), WORDS, max_size=4),
       quantity=st.none() | WORDS, pods=st.integers(-1, 4))
def test_a_gang_with_any_annotations_is_admitted_or_left_with_a_reason(
        ann: dict[str, str], quantity: str | None, pods: int) -> None:
    api = cluster()
    odd = gang("odd", max(pods, 1), 2, extra=ann)
    odd["spec"]["parallelism"] = odd["spec"]["completions"] = pods
    _gpus(odd, quantity)
    api.add_job(odd)
    api.add_job(gang("fine", 2, 8))
    p = gang_planner(api)
    out = p.reconcile("job-added")
    _left_alone_or_planned(api, "odd", out)
    assert api.jobs["fine"]["spec"]["suspend"] is False  # admitted beside it


