"""The extender's Kubernetes state with generated watch events: pods and nodes as the API
server could send them — every string field (annotations, labels, node name, phase,
conditions) any string — ADDED, MODIFIED and DELETED in any order. Applying an event never
raises (an exception would send the watch into a backoff and a relist); every node's state
stays readable; once every pod is deleted the book holds nothing. (Hand-picked events and
what each must do are in ``test_kubernetes_state_events.py``.)"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_extender.pending import CONDITION_POSTPONED, postponed_condition
from tests.scheduler_extender.fake_kube import FakeKubeAPI
from tests.scheduler_extender.kube_state_helpers import DGX, decision_on, listed
from topology.contract import (
    ANN_BW_SENSITIVE,
    ANN_GPU_INDICES,
    ANN_GPU_UUIDS,
    ANN_NODE,
    ANN_PATTERN,
    ANN_TOPOLOGY,
    ANN_UNHEALTHY_GPUS,
    ANN_VGPU_MEMORY_UNIT,
    assignment_annotations,
)
from topology.serialization import dumps

WORDS = st.sampled_from([
    "", "0", "1", "-1", "3", "8", "n0", "n1", "n9", "0,1", "1,1", "0,9", "Running",
    "Pending", "Succeeded", "True", "False", "ring", "{}", "[]", "null",
    "2026-01-01T00:00:00Z", "yesterday", dumps(DGX), dumps(DGX)[:40], " ", "\u00e9",
    "\u00b2", "0,\u00b2", "\u0661",
]) | st.text(max_size=12)
POD_KEYS = (ANN_NODE, ANN_GPU_INDICES, ANN_GPU_UUIDS, ANN_PATTERN, ANN_BW_SENSITIVE)
NODE_KEYS = (ANN_TOPOLOGY, ANN_UNHEALTHY_GPUS, ANN_VGPU_MEMORY_UNIT,
             "gputopo.io/gpu-shared-slots")


def _strings(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths of every string in ``doc``."""
    if isinstance(doc, str):
        return [at]
    items: Any = doc.items() if isinstance(doc, dict) else (
        enumerate(doc) if isinstance(doc, list) else ())
    return [p for k, v in items for p in _strings(v, (*at, k))]


@st.composite
def api_shaped(draw: st.DrawFn, base: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``base`` with up to three of its strings, and up to three gputopo annotations
    (``keys``), set to any string: what the API server's schema still admits."""
    out = copy.deepcopy(base)
    for path in draw(st.lists(st.sampled_from(_strings(base)), max_size=3)):
        parent = out
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = draw(WORDS)
    out["metadata"].setdefault("annotations", {}).update(
        draw(st.dictionaries(st.sampled_from(keys), WORDS, max_size=3)))
    return out


def _pods() -> list[dict[str, Any]]:
    """A bound pod with its assignment, a pending postponed one, and a plain one."""
    api = FakeKubeAPI()
    bound = api.add_pod("bound", "u-bound", node="n1", phase="Running",
                        annotations=assignment_annotations(decision_on((0, 1, 2, 3)), "n1"))
    waiting = api.add_pod("waiting", "u-waiting", gpus=3)
    waiting["status"]["conditions"] = [postponed_condition(1_767_225_600.0, 1800)]
    plain = api.add_pod("plain", "u-plain", node="n0", phase="Running", gpus=1)
    assert waiting["status"]["conditions"][0]["type"] == CONDITION_POSTPONED
    return [bound, waiting, plain]


PODS = _pods()
NODES = [{"metadata": {"name": n, "annotations": {ANN_TOPOLOGY: dumps(DGX)},
                       "labels": {"kubernetes.io/hostname": n}},
          "status": {"allocatable": {"nvidia.com/gpu": "8"}}} for n in ("n0", "n1")]
KINDS = st.sampled_from(["ADDED", "MODIFIED", "DELETED"])
EVENTS = st.one_of(
    st.tuples(st.just("pod"), KINDS, st.sampled_from(PODS).flatmap(
        lambda p: api_shaped(p, POD_KEYS))),
    st.tuples(st.just("node"), KINDS, st.sampled_from(NODES).flatmap(
        lambda n: api_shaped(n, NODE_KEYS))),
)


@settings(max_examples=150, deadline=None)
@given(events=st.lists(EVENTS, min_size=1, max_size=8))
def test_any_watch_events_are_applied_without_an_exception(
        events: list[tuple[str, str, dict[str, Any]]]) -> None:
    api = FakeKubeAPI()
    api.add_node("n0", DGX)
    api.add_node("n1", DGX)
    kube = listed(api)
    try:
        for what, kind, obj in events:
            if what == "pod":
                kube.apply_pod_event(kind, copy.deepcopy(obj))
            else:
                kube.apply_node_event(kind, copy.deepcopy(obj))
            for name in kube.node_names():
                kube.node_topology(name)
                kube.node_state(name)
        seen = {str(o["metadata"]["uid"]) for w, _, o in events if w == "pod"}
        for what, _, obj in events:
            if what == "pod":
                kube.apply_pod_event("DELETED", copy.deepcopy(obj))
        assert not {a.pod.uid for a in kube.allocations()} & seen
    finally:
        kube.stop()


def test_a_node_whose_unhealthy_gpus_are_unreadable_is_read_with_none() -> None:
    """Found by the test above: ``gputopo.io/unhealthy-gpus: "²"`` (``str.isdigit`` let it
    through to ``int``) raised ValueError out of the node watch, which relisted and met it
    again for as long as the annotation stayed. It is logged and read as none."""
    api = FakeKubeAPI()
    api.add_node("n0", DGX)
    kube = listed(api)
    node = api.nodes["n0"]
    node["metadata"]["annotations"][ANN_UNHEALTHY_GPUS] = "²"
    kube.apply_node_event("MODIFIED", node)  # no exception: the watch goes on
    assert kube.node_state("n0").free_gpus(DGX) == tuple(range(8))
    kube.stop()
