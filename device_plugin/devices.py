"""The resources the plugin advertises and their device IDs (pure).

Four resources, one kubelet endpoint (unix socket) each:

=========================  ==============================  ==================================
resource                   one device is                   device ID
=========================  ==============================  ==================================
``nvidia.com/gpu``         one whole GPU                   ``<uuid>``
``gputopo.io/vgpu-core``   1 % of one GPU's compute        ``<uuid>::core-<n>``, n = 0..99
``gputopo.io/vgpu-memory`` *unit* MiB of one GPU's memory  ``<uuid>::mem-<n>``, n = 0..M-1
``gputopo.io/gpu-shared``  one co-location slot of a GPU   ``<uuid>::slot-<n>``, n = 0..S-1
=========================  ==============================  ==================================

``S`` is ``--shared-slots`` (default 3, Tabrizian's largest co-located set): a GPU can carry
at most S co-located jobs (the extender's co-location policies choose which share it, under
CUDA MPS); the kubelet's own count of the slot devices enforces the same limit.

``M = memory_mib // unit``; the unit (default 256 MiB) keeps the list short: a 16 GiB V100
gives 63 devices, an 80 GiB H100 320, where one device per MiB would give 81920 per GPU and
overflow the kubelet's 4 MiB gRPC message with 8 GPUs. Pods therefore request
``gputopo.io/vgpu-memory`` in units (``16`` = 4 GiB at 256 MiB); the unit is published on the
node (``gputopo.io/vgpu-memory-unit-mib``) so the extender converts units to MiB. UUIDs are 40
characters, so the longest ID (``GPU-…::core-99``) stays under the kubelet's 63-character limit.

Every device carries its GPU's NUMA node as ``TopologyInfo`` so the kubelet's Topology Manager
can align CPUs with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from topology.colocation.model import DEFAULT_SLOTS
from topology.contract import (
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
)
from topology.model import Topology
from topology.policies.base import FULL_CORE

#: vGPU-core devices per GPU (percent of one GPU).
CORE_UNITS_PER_GPU = FULL_CORE
#: Separator between the GPU UUID and the unit in vGPU device IDs.
SEP = "::"
#: The kubelet's limit on a device ID (api.proto: "Max length of this field is 63 characters").
MAX_DEVICE_ID = 63


class DeviceIDError(ValueError):
    """A device ID does not belong to this node or this resource."""


@dataclass(frozen=True)
class ResourceSpec:
    """One advertised resource.

    Attributes:
        name: the extended-resource name.
        socket: the socket file name in the device-plugin directory.
        kind: ``gpu`` | ``core`` | ``memory`` | ``shared``.
    """

    name: str
    socket: str
    kind: str

    @property
    def fractional(self) -> bool:
        """Devices on one GPU (vGPU core or memory units, co-location slots)."""
        return self.kind != "gpu"

    @property
    def tag(self) -> str:
        """The unit tag of this resource's device IDs (``core``, ``mem``, ``slot``)."""
        return {"core": "core", "memory": "mem", "shared": "slot"}.get(self.kind, "")


RESOURCES: tuple[ResourceSpec, ...] = (
    ResourceSpec(RESOURCE_GPU, "gputopo-gpu.sock", "gpu"),
    ResourceSpec(RESOURCE_VGPU_CORE, "gputopo-vgpu-core.sock", "core"),
    ResourceSpec(RESOURCE_VGPU_MEMORY, "gputopo-vgpu-memory.sock", "memory"),
    ResourceSpec(RESOURCE_GPU_SHARED, "gputopo-gpu-shared.sock", "shared"),
)
BY_NAME: dict[str, ResourceSpec] = {r.name: r for r in RESOURCES}


def resource(name: str) -> ResourceSpec:
    """The :class:`ResourceSpec` called ``name``.

    Raises:
        KeyError: not one of ours.
    """
    return BY_NAME[name]


@dataclass(frozen=True)
class Device:
    """One advertised device.

    Attributes:
        id: the device ID the kubelet sees.
        gpu: index of the GPU it belongs to.
        uuid: that GPU's UUID.
        numa_node: the GPU's NUMA node (None = unknown; no TopologyInfo then).
        unit: unit number for vGPU devices, None for whole GPUs.
    """

    id: str
    gpu: int
    uuid: str
    numa_node: int | None
    unit: int | None = None


def memory_units(memory_mib: int, unit_mib: int) -> int:
    """``gputopo.io/vgpu-memory`` devices of a GPU with ``memory_mib`` MiB (floor)."""
    return max(0, memory_mib // unit_mib)


def device_id(spec: ResourceSpec, uuid: str, unit: int | None = None) -> str:
    """The device ID of ``uuid`` (whole GPU) or of its vGPU ``unit``."""
    if spec.kind == "gpu":
        return uuid
    return f"{uuid}{SEP}{spec.tag}-{unit}"


def build_devices(topology: Topology, spec: ResourceSpec, unit_mib: int,
                  slots: int = DEFAULT_SLOTS) -> tuple[Device, ...]:
    """Every device of ``spec`` on ``topology``, GPU by GPU, unit by unit (``slots``
    co-location slots per GPU for ``gputopo.io/gpu-shared``).

    Raises:
        DeviceIDError: an ID would exceed the kubelet's 63 characters (an unusual UUID).
    """
    out: list[Device] = []
    for g in topology.gpus:
        if spec.kind == "gpu":
            units: Sequence[int | None] = [None]
        elif spec.kind == "core":
            units = range(CORE_UNITS_PER_GPU)
        elif spec.kind == "shared":
            units = range(slots)
        else:
            units = range(memory_units(g.memory_mib, unit_mib))
        for u in units:
            did = device_id(spec, g.uuid, u)
            if len(did) > MAX_DEVICE_ID:
                raise DeviceIDError(f"device ID {did!r} is longer than {MAX_DEVICE_ID} characters")
            out.append(Device(did, g.index, g.uuid, g.numa_node, u))
    return tuple(out)


def gpu_of(spec: ResourceSpec, device: str) -> str:
    """The GPU UUID a device ID of ``spec`` refers to (syntax only).

    Raises:
        DeviceIDError: the ID is not of this resource's form.
    """
    if spec.kind == "gpu":
        if SEP in device or not device:
            raise DeviceIDError(f"{device!r} is not a whole-GPU device ID")
        return device
    uuid, sep, rest = device.partition(SEP)
    tag = f"{spec.tag}-"
    number = rest[len(tag) :]
    if not sep or not uuid or not rest.startswith(tag) or not number.isascii() \
            or not number.isdigit():
        raise DeviceIDError(
            f"{device!r} is not a {spec.name} device ID ({uuid or 'GPU'}{SEP}{tag}<n>)"
        )
    return uuid


def gpus_of(spec: ResourceSpec, devices: Iterable[str]) -> dict[str, int]:
    """GPU UUID → number of the given devices on it (insertion order = first seen).

    Raises:
        DeviceIDError: a device ID is malformed for ``spec``.
    """
    counts: dict[str, int] = {}
    for d in devices:
        uuid = gpu_of(spec, d)
        counts[uuid] = counts.get(uuid, 0) + 1
    return counts


def index_by_uuid(topology: Topology) -> Mapping[str, int]:
    """GPU UUID → index."""
    return {g.uuid: g.index for g in topology.gpus}
