"""Shared helpers: a DGX-1 node, pods whose annotations are written by the extender's own
bind code (``contract.assignment_annotations`` of a ``place("baseline", ...)`` decision)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from device_plugin.pods import make_pod
from topology.contract import RESOURCE_GPU, assignment_annotations
from topology.model import Topology
from topology.policies.base import Decision, NodeState, Request
from topology.policies.evaluate import Evaluator

#: This module's own evaluator (decision cache and policy memo; nothing shared).
place = Evaluator().place

NODE = "n1"
MACHINE = "dgx1-v100"


def decide(topo: Topology, state: NodeState, request: Request) -> Decision:
    """What the extender's bind would decide."""
    return place("baseline", topo, state, request)


def bound_pod(
    name: str,
    decision: Decision,
    *,
    limits: Mapping[str, int] | None = None,
    created: str = "2026-01-01T00:00:00Z",
    node: str = NODE,
    extra_annotations: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """A pod bound to ``node`` carrying exactly the annotations bind writes for ``decision``;
    limits default to what the decision is for (whole GPUs or the fractional grant)."""
    if limits is None:
        if decision.fractional:
            limits = {"gputopo.io/vgpu-core": decision.core_percent}
        else:
            limits = {RESOURCE_GPU: len(decision.gpus)}
    ann = assignment_annotations(decision, node)
    ann.update(extra_annotations or {})
    return make_pod(name, node, created=created, annotations=ann, limits=limits, **kwargs)


class FakeKubeletView:
    """The kubelet's pod-resources view, kept by :class:`InProcessKubelet`."""

    def __init__(self) -> None:
        from device_plugin.kubelet_view import KubeletPods

        self._cls = KubeletPods
        self.pods: dict[tuple[str, str], dict[str, dict[str, frozenset[str]]]] = {}
        self.available = True

    def snapshot(self) -> Any:
        if not self.available:
            return None
        return self._cls({k: {c: dict(r) for c, r in v.items()} for k, v in self.pods.items()})


class InProcessKubelet:
    """The device manager's admission flow against an in-process Allocator (no gRPC)."""

    def __init__(self, allocator: Any, view: FakeKubeletView | None = None) -> None:
        from device_plugin.devices import RESOURCES, build_devices

        self.allocator = allocator
        self.view = view or FakeKubeletView()
        self.devices = {
            s.name: [d.id for d in build_devices(allocator.topology, s, allocator.unit_mib)]
            for s in RESOURCES
        }
        self.in_use: dict[str, set[str]] = {s.name: set() for s in RESOURCES}

    def receive(self, namespace: str, name: str, containers: list[str]) -> None:
        """The pod reaches the kubelet's pod manager."""
        self.view.pods.setdefault((namespace, name), {c: {} for c in containers})

    def allocate(
        self,
        namespace: str,
        name: str,
        container: str,
        resource: str,
        size: int,
        *,
        prefer: bool = True,
        override: list[str] | None = None,
    ) -> Any:
        available = [d for d in self.devices[resource] if d not in self.in_use[resource]]
        if override is not None:
            chosen = override
        elif prefer and size < len(available):
            chosen = self.allocator.preferred(resource, available, [], size)
        else:
            chosen = available[:size]
        result = self.allocator.allocate(resource, chosen)
        self.in_use[resource] |= set(chosen)
        self.view.pods.setdefault((namespace, name), {}).setdefault(container, {})[resource] = (
            frozenset(chosen)
        )
        return result

    def admit(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Receive and admit a pod made by :func:`bound_pod` (every container, every resource
        of its limits); returns resource → Allocation of the last container."""
        from device_plugin.pods import PodInfo

        info = PodInfo.from_dict(pod)
        self.receive(
            info.namespace, info.name, [c.name for c in info.containers if c.keeps_devices]
        )
        out = {}
        for c in info.containers:
            for res, size in c.limits.items():
                if res in self.devices and size > 0:
                    out[res] = self.allocate(info.namespace, info.name, c.name, res, size)
        return out
