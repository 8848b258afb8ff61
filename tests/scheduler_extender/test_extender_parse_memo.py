"""The extender parses a pod once per (UID, resourceVersion): prioritize after filter reuses
the request, but a pod that changed (a new resourceVersion) is read again, and a pod without
a resourceVersion is always read."""

from __future__ import annotations

import copy

from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs
from scheduler_extender.state import MemoryState
from scheduler_extender.verbs import Extender
from tests.scheduler_extender.helpers import bind_args, gpu_pod, names_args
from topology import catalog
from topology.contract import ANN_POLICY, parse_assignment

DGX = catalog.get("dgx1-v100")


def _versioned(pod: dict[str, object], rv: str) -> dict[str, object]:
    out = copy.deepcopy(pod)
    out["metadata"]["resourceVersion"] = rv  # type: ignore[index]
    return out


def _bound_by(state: MemoryState, name: str) -> tuple[tuple[int, ...], str]:
    rec = state.bound_pod("default", name)
    assert rec is not None
    return parse_assignment(rec.annotations).gpu_indices, rec.annotations["gputopo.io/decided-by"]


def test_a_changed_pod_is_parsed_again() -> None:
    """Filter sees the pod at version 1 with the default policy; the user then sets
    gputopo.io/policy (version 2): prioritize and bind decide with the new policy."""
    state = MemoryState({"n0": DGX})
    ext = Extender(state, "gputopo")
    v1 = _versioned(gpu_pod("p", 4), "1")
    ext.filter(ExtenderArgs.model_validate(names_args(v1, ["n0"])))
    v2 = _versioned(gpu_pod("p", 4, annotations={ANN_POLICY: "mapa-preserve"}), "2")
    ext.prioritize(ExtenderArgs.model_validate(names_args(v2, ["n0"])))
    assert ext.bind(ExtenderBindingArgs.model_validate(bind_args(v2, "n0"))) == {"Error": ""}
    assert _bound_by(state, "p") == ((0, 2, 5, 7), "mapa-preserve")


def test_an_unversioned_pod_is_always_parsed() -> None:
    state = MemoryState({"n0": DGX})
    ext = Extender(state, "gputopo")
    ext.filter(ExtenderArgs.model_validate(names_args(gpu_pod("q", 4), ["n0"])))
    changed = gpu_pod("q", 4, annotations={ANN_POLICY: "mapa-preserve"})
    ext.prioritize(ExtenderArgs.model_validate(names_args(changed, ["n0"])))
    assert ext.bind(ExtenderBindingArgs.model_validate(bind_args(changed, "n0"))) == {
        "Error": ""}
    assert _bound_by(state, "q") == ((0, 2, 5, 7), "mapa-preserve")


def test_the_same_version_is_read_once() -> None:
    """Prioritize of the version filter saw reuses filter's request object."""
    ext = Extender(MemoryState({"n0": DGX}), "gputopo")
    pod = _versioned(gpu_pod("r", 2), "7")
    ext.filter(ExtenderArgs.model_validate(names_args(pod, ["n0"])))
    _, first = ext.memo.get("uid-r")
    ext.prioritize(ExtenderArgs.model_validate(names_args(copy.deepcopy(pod), ["n0"])))
    _, second = ext.memo.get("uid-r")
    assert first is not None and second is first


def test_pods_without_a_uid_are_never_taken_for_one_another() -> None:
    """The memo is keyed by UID and version: two pods without a UID at the same
    resourceVersion are each read (the second asks for more GPUs than the node has)."""
    ext = Extender(MemoryState({"n0": DGX}), "gputopo")
    small, huge = _versioned(gpu_pod("a", 1), "5"), _versioned(gpu_pod("b", 9), "5")
    for pod in (small, huge):
        pod["metadata"]["uid"] = ""  # type: ignore[index]
    assert ext.filter(ExtenderArgs.model_validate(names_args(small, ["n0"])))["NodeNames"] == [
        "n0"]
    res = ext.filter(ExtenderArgs.model_validate(names_args(huge, ["n0"])))
    assert res["NodeNames"] == []
    assert res["FailedAndUnresolvableNodes"] == {"n0": "node has 8 GPUs; the pod asks for 9"}
