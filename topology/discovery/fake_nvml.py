"""A fake NVML, fed by a :class:`~topology.model.Topology`, for tests and GPU-less demos.

:class:`FakeNVML` exposes the pynvml functions and constants that
:mod:`topology.discovery.nvml` uses, answering from the topology so that
``discover(FakeNVML(t)) == t``. Error classes and constants are pynvml's own (importing
``pynvml`` does not load the driver), so ``except pynvml.NVMLError`` works on the fake too.

What the fake reports:

* handles are opaque :class:`FakeHandle` objects; strings are ``str`` and PCI info objects carry
  ``.busId`` as ``str`` with an 8-digit domain (``00000000:06:00.0``), as nvidia-ml-py ≥ 11
  does; memory ``.total`` is ``memory_mib`` MiB in bytes; CPU affinity is a ctypes array of
  64-bit words.
* ``nvmlDeviceGetTopologyCommonAncestor`` answers from ``links[i][j].pcie`` (PIX → SINGLE,
  PXB → MULTIPLE, PHB → HOSTBRIDGE, NODE → NODE, SYS → SYSTEM).
* NVLink, point to point: GPU ``i``'s links are numbered peer by peer (ascending), ``nvlinks``
  links to each NVLinked peer, remote PCI info = the peer's. Every GPU has as many link ports
  as the busiest GPU uses; unused ports are inactive; ports beyond raise
  ``NVMLError_InvalidArgument``; a GPU with no NVLink at all (a PCIe card) raises
  ``NVMLError_NotSupported`` for every NVLink query.
* NVLink through NVSwitch (``topology.nvswitch``): GPU ``i`` has
  ``s_i = max_j links[i][j].nvlinks`` links, link ``k`` going to switch ``k`` (bus ids
  ``00000000:C0:00.0``, ``…:C1:00.0``, … skipping GPU bus ids); remote device type
  ``SWITCH``. The adapter turns that back into ``min(s_i, s_j)`` NVLinks per pair, so an NVSwitch
  topology round-trips when every pair's count is that minimum (true of switch machines).
* ``nvmlDeviceGetNvLinkVersion``: the ``nvmlNvlinkVersion_t`` enum of the topology's
  generation (1 → 1, 2 → 2, 3 → 4, 4 → 6, 5 → 7, 6 → 8); other generations → 0 (invalid).
  A machine without NVLink round-trips only with the model's default generation (2): NVML
  cannot report a generation without links.
* ``nvmlDeviceGetNumaNodeId``: the GPU's ``numa_node``; ``None`` → ``NVMLError_NotSupported``.
* Health: :meth:`FakeNVML.inject_xid` queues a critical-XID event; ``nvmlEventSetWait_v2``
  returns the oldest queued event of a device registered on that set, or raises
  ``NVMLError_Timeout`` after ``timeout_ms`` (a :class:`threading.Condition`, no busy loop).
  Events wait in the queue until some set registered for their device takes them.

Every GPU needs its own PCI bus id (the constructor refuses a topology without them rather
than attaching NVLinks to the wrong GPU); :func:`topology.sources.complete` fills in
placeholders, and :func:`topology.sources.load_topology` (hence :meth:`FakeNVML.from_source`)
always returns a complete topology.

Fault injection: ``FakeNVML(t, errors={"nvmlInit": pynvml.NVML_ERROR_DRIVER_NOT_LOADED})``
makes that function raise that NVML error; :meth:`FakeNVML.set_device_error` makes every query
about one GPU (its handle lookups and every call taking its handle) raise an NVML error, e.g.
``NVML_ERROR_GPU_IS_LOST``, until it is cleared; :attr:`FakeNVML.calls` counts calls.
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pynvml

from topology.discovery.nvml import mask_from_cpus
from topology.model import PCIeLevel, Topology, TopologyError

_ANCESTOR: dict[PCIeLevel, int] = {
    PCIeLevel.PIX: pynvml.NVML_TOPOLOGY_SINGLE,
    PCIeLevel.PXB: pynvml.NVML_TOPOLOGY_MULTIPLE,
    PCIeLevel.PHB: pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
    PCIeLevel.NODE: pynvml.NVML_TOPOLOGY_NODE,
    PCIeLevel.SYS: pynvml.NVML_TOPOLOGY_SYSTEM,
}

#: Model NVLink generation → ``nvmlNvlinkVersion_t`` value the driver would report.
GENERATION_TO_NVLINK_VERSION: dict[int, int] = {1: 1, 2: 2, 3: 4, 4: 6, 5: 7, 6: 8}

_BUS = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


@dataclass(frozen=True)
class FakeHandle:
    """An opaque device handle (only the fake that made it understands it)."""

    index: int
    owner: int  # id() of the FakeNVML

    def __repr__(self) -> str:
        return f"<FakeHandle gpu {self.index}>"


@dataclass(frozen=True)
class FakePciInfo:
    """Like ``pynvml.nvmlPciInfo_t``: ``busId`` (8-digit domain), ``busIdLegacy`` (4-digit)."""

    busId: str  # noqa: N815 - NVML's field name
    busIdLegacy: str  # noqa: N815
    domain: int
    bus: int
    device: int
    pciDeviceId: int = 0x1DB110DE  # noqa: N815
    pciSubSystemId: int = 0  # noqa: N815


@dataclass(frozen=True)
class FakeMemory:
    """Like ``pynvml.c_nvmlMemory_t`` (bytes)."""

    total: int
    free: int
    used: int


@dataclass(frozen=True)
class FakeEventData:
    """Like ``pynvml.c_nvmlEventData_t``."""

    device: FakeHandle
    eventType: int  # noqa: N815
    eventData: int  # noqa: N815
    gpuInstanceId: int = 0xFFFFFFFF  # noqa: N815
    computeInstanceId: int = 0xFFFFFFFF  # noqa: N815


class FakeEventSet:
    """An opaque event set: which devices are registered for which event types."""

    def __init__(self) -> None:
        self.masks: dict[int, int] = {}
        self.freed = False


def _pci_info(bus_id: str) -> FakePciInfo:
    m = _BUS.match(bus_id.strip())
    if not m:  # not a bus id: hand it back as is
        return FakePciInfo(bus_id, bus_id, 0, 0, 0)
    domain, bus, dev = int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16)
    fn = int(m.group(4))
    return FakePciInfo(
        busId=f"{domain:08X}:{bus:02X}:{dev:02X}.{fn:X}",
        busIdLegacy=f"{domain:04X}:{bus:02X}:{dev:02X}.{fn:X}",
        domain=domain,
        bus=bus,
        device=dev,
    )


class FakeHost:
    """Host facts for :func:`~topology.discovery.nvml.discover` (no I/O)."""

    def __init__(self, topology: Topology) -> None:
        self._topology = topology

    def hostname(self) -> str:
        return self._topology.name

    def cpu_count(self) -> int:
        cpus = [c for g in self._topology.gpus for c in g.cpu_affinity]
        return max(cpus) + 1 if cpus else 1

    def numa_node(self, pci_bus_id: str) -> int | None:
        return None  # the fake answers nvmlDeviceGetNumaNodeId itself


class FakeNVML:
    """NVML answering from ``topology`` (see the module docstring for what it reports).

    Args:
        topology: the machine to impersonate.
        errors: function name → NVML error code that the function raises on every call.

    Raises:
        TopologyError: the topology cannot be expressed through NVML (a GPU would need more
            than ``NVML_NVLINK_MAX_LINKS`` links).
    """

    # pynvml's error classes and constants, shared so ``except pynvml.NVMLError`` works.
    NVMLError = pynvml.NVMLError

    def __init__(self, topology: Topology, *, errors: Mapping[str, int] | None = None) -> None:
        self.topology = topology
        self.errors: dict[str, int] = dict(errors or {})
        self.calls: Counter[str] = Counter()
        self.gputopo_host = FakeHost(topology)
        self._refcount = 0
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._events: deque[FakeEventData] = deque()
        self._device_errors: dict[int, int] = {}
        self._ports = self._build_ports(topology)
        self._port_count = max((len(p) for p in self._ports), default=0)

    # -------------------------------------------------------------- construction helpers
    @classmethod
    def from_source(cls, src: str, *, gpu_memory_mib: int | None = None, **kwargs: Any) -> FakeNVML:
        """A fake for ``src`` as :func:`topology.sources.load_topology` reads it (catalog name,
        topology JSON/YAML, saved ``nvidia-smi topo -m``; complete, so every GPU has a bus id).

        Args:
            src: the source.
            gpu_memory_mib: memory for GPUs whose memory neither the source nor the catalog
                knows (see :func:`topology.sources.complete`).
            kwargs: passed to the constructor (``errors``).

        Raises:
            TopologyError: ``src`` cannot be read.
        """
        from topology.sources import load_topology

        return cls(load_topology(src, gpu_memory_mib=gpu_memory_mib), **kwargs)

    def _switch_bus_ids(self, count: int) -> list[str]:
        taken = {_pci_info(g.pci_bus_id).busId for g in self.topology.gpus}
        out: list[str] = []
        bus = 0xC0
        while len(out) < count:
            candidate = f"00000000:{bus % 256:02X}:{bus // 256:02X}.0"
            if candidate not in taken:
                out.append(candidate)
            bus += 1
        return out

    def _build_ports(self, t: Topology) -> list[list[tuple[str, int | None]]]:
        """Per GPU, its active NVLink ports: (remote bus id, remote GPU index or None).

        Raises:
            TopologyError: two GPUs have no distinct bus id (NVML names an NVLink's far end
                by its bus id, so the NVLinks could not be told apart), or a GPU needs more
                than ``NVML_NVLINK_MAX_LINKS`` links.
        """
        n = t.size
        seen: dict[str, int] = {}
        for g in t.gpus:
            bus = _pci_info(g.pci_bus_id).busId
            if not g.pci_bus_id.strip() or bus in seen:
                other = f"GPU {seen[bus]}'s" if bus in seen else "no"
                raise TopologyError(
                    f"FakeNVML: GPU {g.index} has {other} PCI bus id {g.pci_bus_id!r}; a driver "
                    "names each NVLink's far end by bus id, so every GPU needs its own "
                    "(topology.sources.complete fills them in)"
                )
            seen[bus] = g.index
        ports: list[list[tuple[str, int | None]]] = [[] for _ in range(n)]
        if t.nvswitch:
            per_gpu = [max((t.links[i][j].nvlinks for j in range(n) if j != i), default=0)
                       for i in range(n)]  # fmt: skip
            switches = self._switch_bus_ids(max(per_gpu, default=0))
            for i in range(n):
                ports[i] = [(switches[k], None) for k in range(per_gpu[i])]
        else:
            for i in range(n):
                for j in range(n):
                    if j != i:
                        bus = _pci_info(t.gpus[j].pci_bus_id).busId
                        ports[i].extend([(bus, j)] * t.links[i][j].nvlinks)
        for i, p in enumerate(ports):
            if len(p) > pynvml.NVML_NVLINK_MAX_LINKS:
                raise TopologyError(
                    f"FakeNVML: GPU {i} needs {len(p)} NVLinks; NVML has at most "
                    f"{pynvml.NVML_NVLINK_MAX_LINKS}"
                )
        return ports

    # -------------------------------------------------------------- plumbing
    def _enter(self, name: str, *, needs_init: bool = True) -> None:
        self.calls[name] += 1
        code = self.errors.get(name)
        if code is not None:
            raise pynvml.NVMLError(code)
        if needs_init and self._refcount <= 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: object) -> int:
        if not isinstance(handle, FakeHandle) or handle.owner != id(self):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._device_ok(handle.index)
        return handle.index

    def _device_ok(self, index: int) -> None:
        code = self._device_errors.get(index)
        if code is not None:
            raise pynvml.NVMLError(code)

    def set_device_error(self, index: int, code: int | None) -> None:
        """Make every query about GPU ``index`` raise ``NVMLError(code)`` (e.g.
        ``pynvml.NVML_ERROR_GPU_IS_LOST``); ``None`` makes it answer normally again.

        Raises:
            IndexError: no such GPU.
        """
        if not 0 <= index < self.topology.size:
            raise IndexError(f"no GPU {index} (the topology has {self.topology.size})")
        with self._lock:
            if code is None:
                self._device_errors.pop(index, None)
            else:
                self._device_errors[index] = int(code)

    def _port(self, handle: object, link: int) -> tuple[int, tuple[str, int | None] | None]:
        i = self._gpu(handle)
        if not self._ports[i]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < self._port_count:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        ports = self._ports[i]
        return i, ports[link] if link < len(ports) else None

    def __getattr__(self, name: str) -> Any:
        # pynvml constants and NVMLError_* classes (only those: functions stay unknown).
        if name.startswith(("NVML_", "NVMLError_", "nvmlEventType")) and hasattr(pynvml, name):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # -------------------------------------------------------------- init
    def nvmlInit(self) -> None:  # noqa: N802 - NVML names
        self._enter("nvmlInit", needs_init=False)
        with self._lock:
            self._refcount += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self._enter("nvmlShutdown")
        with self._lock:
            self._refcount -= 1

    @property
    def initialized(self) -> bool:
        """nvmlInit calls not yet matched by nvmlShutdown."""
        return self._refcount > 0

    # -------------------------------------------------------------- devices
    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._enter("nvmlDeviceGetCount")
        return self.topology.size

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:  # noqa: N802
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < self.topology.size:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._device_ok(index)
        return FakeHandle(index, id(self))

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> FakeHandle:  # noqa: N802
        self._enter("nvmlDeviceGetHandleByUUID")
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for g in self.topology.gpus:
            if g.uuid == text:
                self._device_ok(g.index)
                return FakeHandle(g.index, id(self))
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, handle: object) -> str:  # noqa: N802
        self._enter("nvmlDeviceGetUUID")
        return self.topology.gpus[self._gpu(handle)].uuid

    def nvmlDeviceGetName(self, handle: object) -> str:  # noqa: N802
        self._enter("nvmlDeviceGetName")
        return self.topology.gpus[self._gpu(handle)].name

    def nvmlDeviceGetPciInfo(self, handle: object) -> FakePciInfo:  # noqa: N802
        self._enter("nvmlDeviceGetPciInfo")
        return _pci_info(self.topology.gpus[self._gpu(handle)].pci_bus_id)

    def nvmlDeviceGetMemoryInfo(self, handle: object, version: int | None = None) -> FakeMemory:  # noqa: N802
        self._enter("nvmlDeviceGetMemoryInfo")
        total = self.topology.gpus[self._gpu(handle)].memory_mib * 1024 * 1024
        return FakeMemory(total=total, free=total, used=0)

    def nvmlDeviceGetCpuAffinity(self, handle: object, cpuSetSize: int) -> Any:  # noqa: N802, N803
        self._enter("nvmlDeviceGetCpuAffinity")
        cpus = self.topology.gpus[self._gpu(handle)].cpu_affinity
        array = (ctypes.c_ulonglong * cpuSetSize)()
        for w, word in enumerate(mask_from_cpus(cpus, cpuSetSize)):
            array[w] = word
        return array

    def nvmlDeviceGetNumaNodeId(self, handle: object) -> int:  # noqa: N802
        self._enter("nvmlDeviceGetNumaNodeId")
        node = self.topology.gpus[self._gpu(handle)].numa_node
        if node is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return node

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: object, device2: object) -> int:  # noqa: N802
        self._enter("nvmlDeviceGetTopologyCommonAncestor")
        a, b = self._gpu(device1), self._gpu(device2)
        if a == b:
            return int(pynvml.NVML_TOPOLOGY_INTERNAL)
        return _ANCESTOR[self.topology.links[a][b].pcie]

    # -------------------------------------------------------------- NVLink
    def nvmlDeviceGetNvLinkState(self, device: object, link: int) -> int:  # noqa: N802
        self._enter("nvmlDeviceGetNvLinkState")
        _, port = self._port(device, link)
        return int(pynvml.NVML_FEATURE_ENABLED if port else pynvml.NVML_FEATURE_DISABLED)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: object, link: int) -> FakePciInfo:  # noqa: N802
        self._enter("nvmlDeviceGetNvLinkRemotePciInfo")
        _, port = self._port(device, link)
        if port is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # inactive port
        return _pci_info(port[0])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: object, link: int) -> int:  # noqa: N802
        self._enter("nvmlDeviceGetNvLinkRemoteDeviceType")
        _, port = self._port(handle, link)
        if port is None:
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN)
        if port[1] is None:
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)
        return int(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)

    def nvmlDeviceGetNvLinkVersion(self, device: object, link: int) -> int:  # noqa: N802
        self._enter("nvmlDeviceGetNvLinkVersion")
        self._port(device, link)
        return GENERATION_TO_NVLINK_VERSION.get(self.topology.nvlink_generation, 0)

    # -------------------------------------------------------------- events
    def inject_xid(self, index: int, xid: int) -> None:
        """Queue a critical-XID event ``xid`` on GPU ``index`` (wakes waiting event sets).

        Raises:
            IndexError: no such GPU.
        """
        if not 0 <= index < self.topology.size:
            raise IndexError(f"no GPU {index} (the topology has {self.topology.size})")
        event = FakeEventData(
            device=FakeHandle(index, id(self)),
            eventType=pynvml.nvmlEventTypeXidCriticalError,
            eventData=int(xid),
        )
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()

    def pending_events(self) -> int:
        """Events injected and not yet taken by an event set."""
        with self._lock:
            return len(self._events)

    def nvmlEventSetCreate(self) -> FakeEventSet:  # noqa: N802
        self._enter("nvmlEventSetCreate")
        return FakeEventSet()

    def nvmlEventSetFree(self, eventSet: FakeEventSet) -> None:  # noqa: N802, N803
        self._enter("nvmlEventSetFree")
        eventSet.freed = True

    def nvmlDeviceRegisterEvents(  # noqa: N802
        self, handle: object, eventTypes: int, eventSet: FakeEventSet  # noqa: N803
    ) -> None:
        self._enter("nvmlDeviceRegisterEvents")
        i = self._gpu(handle)
        if not isinstance(eventSet, FakeEventSet) or eventSet.freed:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        with self._cond:
            eventSet.masks[i] = eventSet.masks.get(i, 0) | int(eventTypes)
            self._cond.notify_all()

    def nvmlEventSetWait_v2(self, eventSet: FakeEventSet, timeoutms: int) -> FakeEventData:  # noqa: N802, N803
        self._enter("nvmlEventSetWait_v2")
        if not isinstance(eventSet, FakeEventSet) or eventSet.freed:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

        def take() -> FakeEventData | None:
            for event in self._events:
                if eventSet.masks.get(event.device.index, 0) & event.eventType:
                    self._events.remove(event)
                    return event
            return None

        found: list[FakeEventData] = []

        def ready() -> bool:
            event = take()
            if event is not None:
                found.append(event)
            return bool(found)

        with self._cond:
            self._cond.wait_for(ready, timeout=max(0, timeoutms) / 1000)
        if not found:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        return found[0]

    def nvmlEventSetWait(self, eventSet: FakeEventSet, timeoutms: int) -> FakeEventData:  # noqa: N802, N803
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)
