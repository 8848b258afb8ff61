"""Helpers of the KubernetesState tests driven by hand (test_kubernetes_state_*.py): a
state listed from the fake API without watch threads, decisions on given GPUs, annotated and
pending pods, and fakes that report each condition patch (the postponement writer is
asynchronous: tests wait on what it sent, in order, never on time)."""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Iterator
from typing import Any

from scheduler_extender.kubernetes_state import KubernetesState
from scheduler_extender.pending import DEFAULT_SCHEDULER_NAME
from tests.scheduler_extender.fake_kube import FakeKubeAPI
from topology import catalog
from topology.contract import assignment_annotations
from topology.policies.base import Decision, NodeState, Request
from topology.policies.evaluate import Evaluator

#: This module's own evaluator (decision cache and policy memo; nothing shared).
place = Evaluator().place

DGX = catalog.get("dgx1-v100")


def listed(api: FakeKubeAPI) -> KubernetesState:
    """A state that has listed ``api``'s nodes and pods, with no watch thread: the test
    applies every event itself (call ``stop()`` at the end: it ends the condition writer)."""
    state = KubernetesState(api, watch_timeout_s=1)
    state.resync_nodes()
    state.resync_pods()
    return state


def two_dgx1() -> FakeKubeAPI:
    """A fake API server with two idle DGX-1 V100 nodes, ``n0`` and ``n1``."""
    api = FakeKubeAPI()
    api.add_node("n0", DGX)
    api.add_node("n1", DGX)
    return api


def running(fake: FakeKubeAPI) -> Iterator[KubernetesState]:
    """:func:`listed` as a fixture (on the ``fake`` fixture): yields the state, then stops
    it. Listed, no watch thread: the test applies every event itself."""
    state = listed(fake)
    yield state
    state.stop()


def decision_on(gpus: tuple[int, ...]) -> Decision:
    """A decision for exactly ``gpus`` of a DGX-1."""
    d = place("baseline", DGX, NodeState.whole(set(range(8)) - set(gpus)),
              Request(count=len(gpus)))
    assert d.gpus == gpus
    return d


def pod_on(fake: FakeKubeAPI, name: str, uid: str, gpus: tuple[int, ...], node: str = "n1",
           **kw: Any) -> dict[str, Any]:
    """A pod bound to ``node`` with the annotations of a decision on ``gpus`` (not listed)."""
    pod = fake.add_pod(name, uid, node=node, phase="Running",
                       annotations=assignment_annotations(decision_on(gpus), node), **kw)
    return copy.deepcopy(pod)


def used(kube: KubernetesState, node: str) -> tuple[int, ...]:
    return tuple(sorted(i for i, u in kube.node_state(node).usage.items() if not u.idle))


class PatchLog(FakeKubeAPI):
    """The fake API, each condition patch it receives also put in :attr:`patched` (the pod's
    name and the conditions' reasons) — what the test waits on, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.patched: queue.Queue[tuple[str, ...]] = queue.Queue()

    def patch_pod_conditions(
        self, namespace: str, name: str, uid: str, conditions: list[dict[str, str]]
    ) -> None:
        try:
            super().patch_pod_conditions(namespace, name, uid, conditions)
        finally:
            self.patched.put((name, *(c["reason"] for c in conditions)))

    def next_patch(self) -> tuple[str, ...]:
        return self.patched.get(timeout=10)


def waiting_pod(fake: FakeKubeAPI, name: str, uid: str) -> dict[str, Any]:
    """A pending 3-GPU pod of gputopo's scheduler (the pending view keeps it)."""
    pod = fake.add_pod(name, uid, gpus=3)
    pod["spec"]["schedulerName"] = DEFAULT_SCHEDULER_NAME
    return copy.deepcopy(pod)


class SlowPatches(PatchLog):
    """Condition patches that each wait for :attr:`go` (set by the test); :attr:`entered`
    receives each patch's pod name as the call begins."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.entered: queue.Queue[str] = queue.Queue()

    def patch_pod_conditions(
        self, namespace: str, name: str, uid: str, conditions: list[dict[str, str]]
    ) -> None:
        self.entered.put(name)
        self.go.wait(10)
        super().patch_pod_conditions(namespace, name, uid, conditions)
