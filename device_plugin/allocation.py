"""The resource manager behind the gRPC servers: device lists, preferred allocation,
allocation, pre-start verification.

Each gRPC method of :mod:`device_plugin.server` calls exactly one method here. Calls are
serialised by one lock (the kubelet admits one pod at a time anyway), each reading the node's
pods fresh from the :class:`~device_plugin.pods.PodSource` and, when available, the kubelet's
pod-resources view; the matching itself is :mod:`device_plugin.identity`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from device_plugin.devices import RESOURCES, Device, ResourceSpec, build_devices, gpus_of
from device_plugin.identity import (
    ANN_ALLOCATED,
    IdentityError,
    Need,
    Record,
    choose_for_allocate,
    choose_for_preference,
    format_record,
    in_flight,
    merge_records,
    needs,
    parse_record,
)
from device_plugin.kubelet_view import KubeletPods, KubeletView, NoKubeletView
from device_plugin.metrics import Metrics
from device_plugin.pods import PodInfo, PodSource, PodSourceError
from gpunode.container import ContainerGrant, grant
from gpunode.health import HealthState
from topology.colocation.model import DEFAULT_SLOTS
from topology.contract import AssignmentError, parse_assignment
from topology.model import Topology

log = logging.getLogger(__name__)


class Inventory:
    """The devices of every resource and their health (from :class:`HealthState`).

    Args:
        topology: this node's GPUs.
        health: their health.
        unit_mib: MiB per ``gputopo.io/vgpu-memory`` device.
        slots: ``gputopo.io/gpu-shared`` devices (co-location slots) per GPU.
    """

    def __init__(self, topology: Topology, health: HealthState, unit_mib: int,
                 slots: int = DEFAULT_SLOTS) -> None:
        self.health = health
        self.devices: dict[str, tuple[Device, ...]] = {
            spec.name: build_devices(topology, spec, unit_mib, slots) for spec in RESOURCES
        }

    def listing(self, resource: str) -> list[tuple[Device, bool]]:
        """``(device, healthy)`` for every device of ``resource``."""
        bad = self.health.unhealthy()
        return [(d, d.uuid not in bad) for d in self.devices[resource]]


@dataclass(frozen=True)
class Allocation:
    """One container's allocation: whose, which GPUs, and what it gets."""

    pod: PodInfo
    container: str
    gpu_uuids: tuple[str, ...]
    grant: ContainerGrant


class Allocator:
    """Identifies pods and builds allocations for one node.

    Args:
        topology: this node's GPUs.
        node: this node's name.
        pods: where pods are listed and patched.
        view: the kubelet's pod-resources view (:class:`NoKubeletView` to disable).
        unit_mib: MiB per vGPU-memory device.
        minors: GPU index → ``/dev/nvidia<minor>``.
        mps_pipe_dir: host MPS pipe directory.
        mps_shm_dir: host directory the MPS control daemon uses as ``/dev/shm``; mounted at
            ``/dev/shm`` in co-location slots' containers (None: not mounted).
        metrics: where to count.
        allocate_wait_s: when no pod is waiting at all, re-list for up to this long (the
            pod source may lag the kubelet by a moment).
        sleep: injectable for tests.
        device_exists: filter for device nodes (fake nodes pass os.path.exists).
    """

    def __init__(
        self,
        topology: Topology,
        node: str,
        pods: PodSource,
        *,
        view: KubeletView | None = None,
        unit_mib: int = 256,
        minors: Mapping[int, int] | None = None,
        mps_pipe_dir: Path = Path("/run/nvidia/mps"),
        mps_shm_dir: Path | None = None,
        metrics: Metrics | None = None,
        allocate_wait_s: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
        device_exists: Callable[[str], bool] | None = None,
    ) -> None:
        self.topology = topology
        self.node = node
        self.pods = pods
        self.view: KubeletView = view or NoKubeletView()
        self.unit_mib = unit_mib
        self.minors = (
            dict(minors) if minors is not None else {g.index: g.index for g in topology.gpus}
        )
        self.mps_pipe_dir = mps_pipe_dir
        self.mps_shm_dir = mps_shm_dir
        self.metrics = metrics or Metrics()
        self.allocate_wait_s = allocate_wait_s
        self._sleep = sleep
        self._device_exists = device_exists
        self._known = frozenset(g.uuid for g in topology.gpus)
        self._lock = threading.RLock()
        self._overlay: dict[str, Record] = {}
        self._pinned: dict[str, tuple[str, frozenset[str]]] = {}

    # ------------------------------------------------------------------ candidates
    def _list(self) -> list[PodInfo]:
        try:
            return self.pods.list_pods(self.node)
        except PodSourceError as exc:
            raise IdentityError(f"cannot read the pods of node {self.node}: {exc}") from None

    def _candidates(self, spec: ResourceSpec) -> list[Need]:
        """Needs for ``spec``, narrowed to the pod in admission when the kubelet says."""
        deadline = time.monotonic() + self.allocate_wait_s
        while True:
            pods = self._list()
            self._gc(pods)
            found = needs(
                pods,
                self.node,
                spec,
                known_gpus=self._known,
                unit_mib=self.unit_mib,
                overlay=self._overlay,
            )
            if found or time.monotonic() >= deadline:
                break
            self._sleep(0.1)
        view = self.view.snapshot()
        if view is None:
            if found and found[0].started:
                return found  # a pod mid-admission: the kubelet is finishing it
            if len(found) > 1:
                self.metrics.identity_fallback.labels(spec.name).inc()
            return found
        # The kubelet lists only active pods: one it rejected mid-admission (even one with
        # some records already) drops out here at once.
        narrowed = in_flight(found, view, spec.name)
        if not narrowed and found:
            raise IdentityError(self._unknown_admission(spec, pods, view))
        return narrowed

    def _unknown_admission(
        self, spec: ResourceSpec, pods: Sequence[PodInfo], view: KubeletPods
    ) -> str:
        lacking = [
            p.key
            for p in pods
            if view.knows(p.namespace, p.name)
            and p.requesting(spec.name)
            and not any(
                view.devices(p.namespace, p.name, c.name, spec.name)
                for c in p.requesting(spec.name)
            )
        ]
        who = ", ".join(lacking) or "a pod gputopo does not see"
        return (
            f"the kubelet is admitting {who} for {spec.name}, but gputopo has no unallocated "
            f"assignment for it on node {self.node} (already marked {ANN_ALLOCATED}?)"
        )

    def _gc(self, pods: Sequence[PodInfo]) -> None:
        live = {p.uid for p in pods}
        for uid in [u for u in self._overlay if u not in live]:
            del self._overlay[uid]

    # ------------------------------------------------------------------ RPC bodies
    def preferred(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """``GetPreferredAllocation`` for one container: the scheduler's devices.

        Raises:
            IdentityError: see :func:`device_plugin.identity.choose_for_preference`.
        """
        spec = _spec(resource)
        with self._lock:
            try:
                need, chosen = choose_for_preference(
                    self._candidates(spec), spec, self.node, available, must_include, size
                )
            except IdentityError:
                self.metrics.preferred_errors.labels(resource).inc()
                raise
            self._pinned[resource] = (need.pod.uid, frozenset(chosen))
            log.info("preferred %s for %s: %s", resource, need.describe(), ",".join(chosen))
            return chosen

    def allocate(self, resource: str, devices: Sequence[str]) -> Allocation:
        """``Allocate`` for one container: identify the pod, record it, build the grant.

        Raises:
            IdentityError: no pod matches ``devices`` (the message names the expected pod).
        """
        spec = _spec(resource)
        start = time.perf_counter()
        with self._lock:
            try:
                pinned = self._pinned.get(resource)
                pin = pinned[0] if pinned and pinned[1] == frozenset(devices) else None
                need = choose_for_allocate(self._candidates(spec), spec, self.node, devices, pin)
                assert need.assignment is not None  # accepted needs have one
                on = tuple(gpus_of(spec, devices))
                ordered = tuple(u for u in need.assignment.gpu_uuids if u in on)
                result = Allocation(
                    pod=need.pod,
                    container=need.container.name,
                    gpu_uuids=ordered,
                    grant=grant(
                        self.topology,
                        need.pod.key,
                        need.assignment,
                        ordered,
                        minors=self.minors,
                        mps_pipe_dir=self.mps_pipe_dir,
                        mps_shm_dir=self.mps_shm_dir,
                        device_exists=self._device_exists,
                    ),
                )
                self._record(need, spec, ordered)
                self._pinned.pop(resource, None)
            except IdentityError as exc:
                self.metrics.allocate_errors.labels(resource).inc()
                log.error("Allocate %s %s refused: %s", resource, ",".join(devices), exc)
                raise
            finally:
                self.metrics.allocate_seconds.labels(resource).observe(time.perf_counter() - start)
        log.info("allocated %s %s to %s", resource, ",".join(ordered), need.describe())
        return result

    def _record(self, need: Need, spec: ResourceSpec, gpus: Sequence[str]) -> None:
        pod = need.pod
        mine = self._overlay.setdefault(pod.uid, {})
        mine.setdefault(spec.name, {})[need.container.name] = list(gpus)
        record = merge_records(parse_record(pod.annotations.get(ANN_ALLOCATED)), mine)
        try:
            self.pods.patch_annotations(pod, {ANN_ALLOCATED: format_record(record)})
        except PodSourceError as exc:
            # The allocation stands (failing now would fail the pod); this process remembers
            # it, and the kubelet's pod-resources view covers a restart.
            self.metrics.annotation_errors.inc()
            log.warning("could not record the allocation on pod %s: %s", pod.key, exc)

    def pre_start(self, resource: str, devices: Sequence[str]) -> str | None:
        """``PreStartContainer``: verify, through the kubelet's own record, that the container
        about to start holds GPUs assigned to its pod. Returns the verified pod key, or None
        when the check cannot be made (no pod-resources API, or a plain init container the
        kubelet does not list).

        Raises:
            IdentityError: the kubelet gave these devices to a pod that gputopo assigned other
                GPUs (the container must not start).
        """
        spec = _spec(resource)
        view = self.view.snapshot()
        if view is None:
            return None
        owner = view.owner_of(resource, frozenset(devices))
        if owner is None:
            return None
        ns, name, container = owner
        with self._lock:
            pod = next((p for p in self._list() if p.namespace == ns and p.name == name), None)
        if pod is None:
            raise IdentityError(
                f"pod {ns}/{name} holds {resource} {','.join(devices)} but is "
                f"not listed on node {self.node}"
            )
        try:
            assignment = parse_assignment(pod.annotations)
        except AssignmentError as exc:
            raise IdentityError(
                f"pod {pod.key} (container {container}) is about to start on "
                f"{resource} {','.join(devices)} without a usable gputopo "
                f"assignment: {exc}"
            ) from None
        on = set(gpus_of(spec, devices))
        stray = sorted(on - set(assignment.gpu_uuids))
        if stray:
            raise IdentityError(
                f"pod {pod.key} (container {container}) is about to start on GPU "
                f"{','.join(stray)} but gputopo assigned it "
                f"{','.join(assignment.gpu_uuids)}"
            )
        return pod.key


def _spec(resource: str) -> ResourceSpec:
    for spec in RESOURCES:
        if spec.name == resource:
            return spec
    raise IdentityError(f"unknown resource {resource!r}")
