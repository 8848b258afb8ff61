"""KubernetesState's watch loop (``_watch_loop``) run in the test's own thread against a
scripted watch: which events it applies, what it opens each watch from, how it backs off
after a failure (doubling to 10 s, reset by a watch that ends normally) and relists, and
that it stops. The state's stop event records each backoff wait and returns at once: the
tests read the waits asked for, never the time. (docs/testing.md, "Eleventh round".)"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from scheduler_extender.kubernetes_state import ApiError, KubernetesState, WatchExpired
from tests.scheduler_extender.fake_kube import FakeKubeAPI
from tests.scheduler_extender.kube_state_helpers import DGX, pod_on
from topology.contract import ANN_VGPU_MEMORY_UNIT

#: One watch call: an exception raised when it is read, the events it delivers before it
#: ends (its timeout), or a generator function whose events it delivers.
Step = Exception | list[dict[str, Any]] | Callable[[], Iterator[dict[str, Any]]]


class Waits(threading.Event):
    """A stop event whose ``wait`` records the timeout asked for and returns at once; the
    50th wait sets it (a loop failing before it opens its watch ends, and the test fails)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if len(self.waits) >= 50:
            self.set()
        return self.is_set()


class ScriptedWatch(FakeKubeAPI):
    """The fake API whose watches follow :attr:`script` (one step per call, per kind);
    :attr:`opened` records each call's resourceVersion and timeout. When a kind's script
    is done its next watch stops the state (the loop then returns)."""

    def __init__(self) -> None:
        super().__init__()
        self.script: dict[str, list[Step]] = {"nodes": [], "pods": []}
        self.opened: dict[str, list[tuple[str, int]]] = {"nodes": [], "pods": []}
        self.state: KubernetesState | None = None

    def _scripted(self, kind: str, rv: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        self.opened[kind].append((rv, timeout_s))
        if not self.script[kind]:
            assert self.state is not None
            self.state.stop()
            return
        step = self.script[kind].pop(0)
        if isinstance(step, Exception):
            raise step
        yield from (step() if callable(step) else step)

    def watch_nodes(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        return self._scripted("nodes", resource_version, timeout_s)

    def watch_pods(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        return self._scripted("pods", resource_version, timeout_s)


@pytest.fixture
def scripted() -> Iterator[tuple[ScriptedWatch, KubernetesState, Waits]]:
    api = ScriptedWatch()
    api.add_node("n1", DGX)
    state = KubernetesState(api, watch_timeout_s=7)
    api.state = state
    state.resync_nodes()
    state.resync_pods()
    stop = state._stop = Waits()
    yield api, state, stop
    state.stop()


def event(type_: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": type_, "object": copy.deepcopy(obj)}


@pytest.mark.parametrize("kind", ["nodes", "pods"])
def test_a_failing_watch_backs_off_doubling_to_10s_and_relists_each_time(
    scripted: tuple[ScriptedWatch, KubernetesState, Waits], kind: str
) -> None:
    """Each failure waits, then relists (what the watch missed meanwhile) and watches again:
    0.5 s, doubled after each failure up to 10 s; a watch that ends normally (its timeout)
    starts again from 0.5 s; a 410 Gone relists at once and leaves the backoff as it was.
    Every watch asks the server for the state's ``watch_timeout_s``."""
    api, kube, stop = scripted
    lists = api.lists[kind]
    failed = ApiError("500 Internal Server Error", 500)
    api.script[kind] = [failed] * 7 + [[], failed, failed, WatchExpired("410 Gone", 410), failed]
    kube._watch_loop(kind)
    assert stop.waits == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 0.5, 1.0, 2.0]
    assert api.lists[kind] - lists == 11  # after each failure, and after the 410
    assert len(api.opened[kind]) == 13 and {t for _, t in api.opened[kind]} == {7}


def test_the_pod_watch_applies_its_events_and_stops_when_told(
    scripted: tuple[ScriptedWatch, KubernetesState, Waits]
) -> None:
    """The pod watch applies ADDED, MODIFIED and DELETED events in order, each watch
    resuming from the last version seen (an event's, a BOOKMARK's — a bookmark is not
    applied); once the state is stopped, an event still delivered is not applied and the
    loop returns."""
    api, kube, stop = scripted
    listed = str(api.rv)

    def pod(name: str, uid: str, gpus: tuple[int, ...], rv: str) -> dict[str, Any]:
        obj = pod_on(api, name, uid, gpus)
        del api.pods[uid]  # the watch delivers it; no list shows it
        obj["metadata"]["resourceVersion"] = rv
        return obj

    p201, p202 = pod("p", "u-p", (4, 5), "201"), pod("p", "u-p", (4, 5), "202")
    q204, p205 = pod("q", "u-q", (6, 7), "204"), pod("p", "u-p", (4, 5), "205")
    late = pod("late", "u-late", (0, 1), "206")

    def stopped_then_delivered() -> Iterator[dict[str, Any]]:
        kube.stop()
        yield event("ADDED", late)

    api.script["pods"] = [
        [event("ADDED", p201), event("MODIFIED", p202),
         {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "203"}}}],
        [event("ADDED", q204), event("DELETED", p205)],
        stopped_then_delivered,
    ]
    applied: list[tuple[str, str]] = []
    apply = kube.apply_pod_event

    def record(kind: str, obj: Any) -> None:
        applied.append((kind, obj["metadata"]["resourceVersion"]))
        apply(kind, obj)

    kube.apply_pod_event = record  # type: ignore[method-assign]
    kube._watch_loop("pods")
    assert applied == [("ADDED", "201"), ("MODIFIED", "202"), ("ADDED", "204"),
                       ("DELETED", "205")]
    assert [rv for rv, _ in api.opened["pods"]] == [listed, "203", "205"]
    assert kube.allocation("u-p") is None and kube.allocation("u-late") is None
    q = kube.allocation("u-q")
    assert q is not None and q.gpus == (6, 7)
    assert stop.waits == [] and api.lists["pods"] == 1


def test_the_node_watch_applies_node_events(
    scripted: tuple[ScriptedWatch, KubernetesState, Waits]
) -> None:
    """The node watch applies a node added, changed and deleted."""
    api, kube, _ = scripted
    api.add_node("n2", DGX)
    n2 = copy.deepcopy(api.nodes["n2"])
    changed = copy.deepcopy(n2)
    changed["metadata"]["annotations"][ANN_VGPU_MEMORY_UNIT] = "512"
    api.script["nodes"] = [[event("ADDED", n2), event("MODIFIED", changed),
                            event("DELETED", api.nodes["n1"])]]
    kube._watch_loop("nodes")
    assert kube.node_names() == ["n2"] and kube.node_memory_unit("n2") == "512"
