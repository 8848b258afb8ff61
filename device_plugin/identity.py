"""Which pod is the kubelet allocating for? (pure: plain data in, a decision or an error out)

The kubelet's ``GetPreferredAllocation`` and ``Allocate`` carry device IDs and a size, never a
pod. gputopo answers from three facts:

1. **What each pod was given.** The extender's bind wrote the assignment into the pod's
   annotations (:func:`topology.contract.parse_assignment`) in the same write that bound it
   (its Binding carries them), so a pod on this node always has them.
2. **What each pod still needs.** A pod *needs* resource R while some container of it has a
   positive R limit and no allocation record. After each Allocate the plugin records
   ``{resource: {container: [GPU UUIDs]}}`` in the pod annotation ``gputopo.io/allocated``
   (and in memory), so a restarted plugin never hands the same pod out twice.
3. **Which pod the kubelet is admitting.** The kubelet admits one pod at a time, allocating
   its containers in order (init, then app), one resource at a time. When the kubelet's
   pod-resources API is available, the pods it knows that still lack R devices are the
   in-flight pod (:func:`in_flight`). Without it, a pod with some but not all of its records
   is the pod in admission and comes first, then the kubelet's admission order: oldest
   ``creationTimestamp`` first (``HandlePodAdditions`` sorts each batch with
   ``PodsByCreationTime``), then namespace/name.

``GetPreferredAllocation`` proposes the first needing pod *of the requested size*: exactly
its assigned GPUs (or units on its assigned GPU). ``Allocate`` accepts a device set only if it
is exactly what one needing pod was assigned — for whole GPUs the set equals the pod's
(remaining) assigned UUIDs, for vGPU units every unit is on the pod's GPU and the count equals
the granted share — and otherwise fails with an error naming the pod it expected and why.
Two pods of the same size therefore never swap GPUs silently: the kubelet only allocates
devices we proposed for the pod we identified, and any other set is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from device_plugin.devices import DeviceIDError, ResourceSpec, gpus_of
from device_plugin.kubelet_view import KubeletPods
from device_plugin.pods import ContainerInfo, PodInfo
from topology.contract import ANN_GPU_UUIDS, Assignment, AssignmentError, parse_assignment

#: Pod annotation written by the plugin after each Allocate (JSON, see :class:`Record`).
ANN_ALLOCATED = "gputopo.io/allocated"

#: resource → container → GPU UUIDs handed to that container
Record = dict[str, dict[str, list[str]]]


class IdentityError(Exception):
    """No pod can be matched safely; ``str(exc)`` names the pod(s) and the reason (one line).
    Returned to the kubelet as the gRPC error, so it lands in the pod's events."""


def parse_record(text: str | None) -> Record:
    """Read a ``gputopo.io/allocated`` value; missing or garbled → empty."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        return {}
    out: Record = {}
    if not isinstance(raw, dict):
        return {}
    for res, containers in raw.items():
        if not isinstance(containers, dict):
            continue
        out[str(res)] = {
            str(c): [str(u) for u in uuids]
            for c, uuids in containers.items()
            if isinstance(uuids, list)
        }
    return out


def format_record(record: Record) -> str:
    """The compact, deterministic annotation value of ``record``."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def merge_records(a: Record, b: Record) -> Record:
    """Union of two records (``b`` wins for a container listed in both)."""
    out: Record = {res: dict(cs) for res, cs in a.items()}
    for res, cs in b.items():
        out.setdefault(res, {}).update(cs)
    return out


@dataclass(frozen=True)
class Need:
    """One pod's next container that still needs resource ``spec``.

    Attributes:
        pod: the pod.
        container: the container the kubelet allocates next for this resource.
        count: that container's limit (devices the kubelet will ask for).
        assignment: the parsed assignment, or None when it cannot be used.
        problem: why the assignment cannot be used (one line), else None.
        gpus: GPU UUIDs this container may receive: the pod's remaining assigned GPUs for
            ``nvidia.com/gpu``, the one assigned GPU for vGPU resources and co-location slots.
        started: the pod already has allocation records (it is mid-admission).
    """

    pod: PodInfo
    container: ContainerInfo
    count: int
    assignment: Assignment | None
    problem: str | None
    gpus: tuple[str, ...]
    started: bool

    def describe(self) -> str:
        """``pod ns/name (container c)``."""
        return f"pod {self.pod.key} (container {self.container.name})"


def _problem(
    pod: PodInfo, spec: ResourceSpec, node: str, known_gpus: frozenset[str], unit_mib: int
) -> tuple[Assignment | None, str | None]:
    """Parse and cross-check ``pod``'s assignment against what it requests of ``spec``."""
    if ANN_GPU_UUIDS not in pod.annotations:
        return None, (
            f"has no {ANN_GPU_UUIDS} annotation: it was not bound by the gputopo "
            "extender, so gputopo does not know which GPUs are its"
        )
    try:
        a = parse_assignment(pod.annotations)
    except AssignmentError as exc:
        return None, f"has unusable gputopo annotations: {exc}"
    if a.node != node:
        return a, f"was assigned GPUs on node {a.node!r} (gputopo.io/node) but is bound to {node!r}"
    unknown = [u for u in a.gpu_uuids if u not in known_gpus]
    if unknown:
        return a, f"was assigned GPU {unknown[0]} which is not on node {node}"
    reqs = pod.requesting(spec.name)
    kept = sum(c.limits[spec.name] for c in reqs if c.keeps_devices)
    peak = max([kept] + [c.limits[spec.name] for c in reqs if not c.keeps_devices])
    if spec.kind == "gpu":
        if a.fractional or a.shared:
            what = "a co-location slot on" if a.shared else "a fraction of"
            return a, (
                f"requests {spec.name} but its gputopo assignment is {what} GPU "
                f"{a.gpu_uuids[0]}"
            )
        if peak != len(a.gpu_uuids):
            return a, (
                f"requests {peak} {spec.name} but its gputopo assignment names "
                f"{len(a.gpu_uuids)} GPUs"
            )
        return a, None
    if spec.kind == "shared":
        if not a.shared:
            what = "a vGPU share" if a.fractional else f"{len(a.gpu_uuids)} whole GPU(s)"
            return a, (
                f"requests {spec.name} but its gputopo assignment is {what}, not a "
                "co-location slot"
            )
        if peak != 1:
            return a, f"requests {peak} {spec.name}; a pod holds one co-location slot"
        return a, None
    if not a.fractional and not a.shared:
        return a, (
            f"requests {spec.name} but its gputopo assignment is {len(a.gpu_uuids)} "
            "whole GPU(s), not a share"
        )
    if spec.kind == "core" and a.shared:
        return a, (
            f"requests {spec.name} but its gputopo assignment is a co-location slot, which "
            "takes no vGPU-core"
        )
    if spec.kind == "core":
        share = a.core_percent
    else:
        if a.memory_mib % unit_mib:
            return a, (
                f"was granted {a.memory_mib} MiB of GPU memory, not a multiple of the "
                f"{unit_mib} MiB {spec.name} unit"
            )
        share = a.memory_mib // unit_mib
    if peak != share:
        unit = "%" if spec.kind == "core" else f" x {unit_mib} MiB"
        return a, (
            f"requests {peak} {spec.name} but gputopo granted it {share}{unit} "
            "(gputopo.io/vgpu-*-granted)"
        )
    return a, None


def needs(
    pods: Iterable[PodInfo],
    node: str,
    spec: ResourceSpec,
    *,
    known_gpus: frozenset[str],
    unit_mib: int,
    overlay: Mapping[str, Record] | None = None,
) -> list[Need]:
    """Every pod on ``node`` that still needs ``spec``, in identification order.

    Args:
        pods: pods listed for the node.
        node: this node's name.
        spec: the resource.
        known_gpus: UUIDs of this node's GPUs.
        unit_mib: MiB per vGPU-memory device.
        overlay: pod UID → records made by this process (merged with the annotation).

    Returns:
        Pods that are bound to ``node``, not terminal, not being deleted, and have a
        container with a positive ``spec`` limit and no record for it — ordered: pods already
        mid-admission first, then by creation time, then namespace/name.
    """
    out: list[Need] = []
    for pod in pods:
        if pod.node_name != node or pod.terminal or pod.deleting:
            continue
        reqs = pod.requesting(spec.name)
        if not reqs:
            continue
        record = merge_records(
            parse_record(pod.annotations.get(ANN_ALLOCATED)), (overlay or {}).get(pod.uid, {})
        )
        done = record.get(spec.name, {})
        pending = [c for c in reqs if c.name not in done]
        if not pending:
            continue
        container = pending[0]
        assignment, problem = _problem(pod, spec, node, known_gpus, unit_mib)
        gpus: tuple[str, ...] = ()
        if assignment is not None:
            if spec.kind == "gpu":
                held = {u for c in reqs if c.keeps_devices and c.name in done for u in done[c.name]}
                gpus = tuple(u for u in assignment.gpu_uuids if u not in held)
            else:
                gpus = assignment.gpu_uuids[:1]
        out.append(
            Need(
                pod,
                container,
                container.limits[spec.name],
                assignment,
                problem,
                gpus,
                started=any(record.values()),
            )
        )
    out.sort(key=lambda n: (not n.started, n.pod.created, n.pod.namespace, n.pod.name))
    return out


def in_flight(all_needs: Sequence[Need], view: KubeletPods, resource: str) -> list[Need]:
    """The needs whose pod the kubelet is admitting now: pods the kubelet knows whose next
    container has no ``resource`` devices in the kubelet's record yet. (Plain init containers
    are not listed by the kubelet, so such a need stays a candidate.)"""
    out: list[Need] = []
    for n in all_needs:
        ns, name = n.pod.namespace, n.pod.name
        if not view.knows(ns, name):
            continue
        if n.container.name in view.listed_containers(ns, name) and view.devices(
            ns, name, n.container.name, resource
        ):
            continue  # the kubelet already gave it devices: our record lags behind
        out.append(n)
    return out


def _pending_summary(all_needs: Sequence[Need], spec: ResourceSpec) -> str:
    if not all_needs:
        return "none"
    shown = [f"{n.pod.key} wants {n.count}" for n in all_needs[:5]]
    more = f" and {len(all_needs) - 5} more" if len(all_needs) > 5 else ""
    return ", ".join(shown) + more


def _units(spec: ResourceSpec, device: str) -> int:
    try:
        return int(device.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 1 << 30


def propose(
    need: Need, spec: ResourceSpec, available: Sequence[str], must_include: Sequence[str], size: int
) -> list[str]:
    """The devices to prefer for ``need``: its assigned GPUs (whole) or ``size`` units on its
    GPU (vGPU), always including ``must_include``.

    Raises:
        IdentityError: the kubelet does not offer them (a GPU is unhealthy or held by another
            pod, or Topology Manager excluded it) — the message names the pod and the GPUs.
    """
    offered = set(available) | set(must_include)
    if spec.kind == "gpu":
        wanted = list(need.gpus)
        stray = [d for d in must_include if d not in wanted]
        if stray:
            raise IdentityError(
                f"{need.describe()} was assigned GPUs {','.join(wanted)} by "
                f"gputopo but the kubelet insists on {','.join(stray)}"
            )
        chosen = list(must_include) + [d for d in wanted if d in offered and d not in must_include]
        if len(chosen) < size:
            missing = [d for d in wanted if d not in offered]
            raise IdentityError(
                f"{need.describe()} was assigned GPUs {','.join(wanted)} by "
                f"gputopo but the kubelet does not offer {','.join(missing)} "
                "(unhealthy, or held by another pod)"
            )
        return chosen[:size]
    gpu = need.gpus[0]
    try:
        stray = [d for d in must_include if gpus_of(spec, [d]) != {gpu: 1}]
    except DeviceIDError as exc:
        raise IdentityError(f"{need.describe()}: {exc}") from None
    if stray:
        raise IdentityError(
            f"{need.describe()} was given a share of GPU {gpu} by gputopo but "
            f"the kubelet insists on {stray[0]}"
        )
    on_gpu = sorted(
        (d for d in offered if d.startswith(gpu + "::") and d not in must_include),
        key=lambda d: _units(spec, d),
    )
    chosen = list(must_include) + on_gpu
    if len(chosen) < size:
        raise IdentityError(
            f"{need.describe()} needs {size} {spec.name} on GPU {gpu} but the "
            f"kubelet offers only {len(chosen)} there"
        )
    return chosen[:size]


def accepts(need: Need, spec: ResourceSpec, devices: Sequence[str]) -> str | None:
    """None when ``devices`` are exactly what ``need`` was assigned, else the reason."""
    if need.problem is not None:
        return need.problem
    if len(devices) != need.count or len(set(devices)) != len(devices):
        return f"its container asks for {need.count} {spec.name}, the kubelet offers {len(devices)}"
    try:
        on = gpus_of(spec, devices)
    except DeviceIDError as exc:
        return str(exc)
    if spec.kind == "gpu":
        extra = [u for u in on if u not in need.gpus]
        if extra:
            return (
                f"it was assigned GPUs {','.join(need.gpus)} by gputopo but the kubelet "
                f"offers {','.join(devices)}"
            )
        return None
    if set(on) != {need.gpus[0]}:
        return (
            f"it was given a share of GPU {need.gpus[0]} by gputopo but the kubelet offers "
            f"units on {','.join(on)}"
        )
    return None


def choose_for_preference(
    all_needs: Sequence[Need],
    spec: ResourceSpec,
    node: str,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
) -> tuple[Need, list[str]]:
    """The pod a ``GetPreferredAllocation(available, must_include, size)`` is for, and the
    devices to propose: the first need (identification order) whose container asks for
    ``size``.

    Raises:
        IdentityError: no needing pod asks for ``size``; that pod's annotations are missing,
            garbled or contradict its request; or its GPUs are not offered.
    """
    same = [n for n in all_needs if n.count == size]
    if not same:
        raise IdentityError(
            f"no pod on node {node} is waiting for {size} {spec.name} "
            f"(waiting: {_pending_summary(all_needs, spec)})"
        )
    need = same[0]
    if need.problem is not None:
        raise IdentityError(f"{need.describe()} {need.problem}")
    return need, propose(need, spec, available, must_include, size)


def choose_for_allocate(
    all_needs: Sequence[Need],
    spec: ResourceSpec,
    node: str,
    devices: Sequence[str],
    pinned: str | None = None,
) -> Need:
    """The pod an ``Allocate(devices)`` is for: a needing pod whose assignment is exactly
    ``devices`` (several can match only for vGPU units of equal shares on one GPU, whose
    responses are identical; then the pod ``pinned`` by the preceding GetPreferredAllocation,
    else the first in identification order).

    Raises:
        IdentityError: no needing pod matches; names the pod that was expected (first of that
            size) and why it does not match.
    """
    matching = [n for n in all_needs if accepts(n, spec, devices) is None]
    if matching:
        for n in matching:
            if pinned is not None and n.pod.uid == pinned:
                return n
        return matching[0]
    same = [n for n in all_needs if n.count == len(devices)]
    if not same:
        raise IdentityError(
            f"no pod on node {node} is waiting for {len(devices)} {spec.name} "
            f"(offered {','.join(sorted(devices))}; waiting: "
            f"{_pending_summary(all_needs, spec)})"
        )
    need = same[0]
    reason = accepts(need, spec, devices)
    if need.problem is not None:
        raise IdentityError(f"{need.describe()} {need.problem}")
    raise IdentityError(
        f"{need.describe()}: {reason}; refusing to hand it GPUs that are not its own"
    )
