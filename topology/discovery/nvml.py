"""NVML discovery: build a :class:`~topology.model.Topology` from the driver, and watch XIDs.

This is the only module in gputopo that calls NVML. It talks to NVML through
``nvidia-ml-py`` (import name ``pynvml``) or through any object exposing the same functions
and constants — :class:`topology.discovery.fake_nvml.FakeNVML` for tests and demos.

NVML calls made by :func:`discover` (nothing else):

* ``nvmlInit`` / ``nvmlShutdown`` (always balanced);
* ``nvmlDeviceGetCount``, ``nvmlDeviceGetHandleByIndex``;
* per GPU: ``nvmlDeviceGetUUID``, ``nvmlDeviceGetPciInfo`` (``.busId``), ``nvmlDeviceGetName``,
  ``nvmlDeviceGetMemoryInfo`` (``.total`` bytes), ``nvmlDeviceGetCpuAffinity``,
  ``nvmlDeviceGetNumaNodeId``;
* per GPU pair: ``nvmlDeviceGetTopologyCommonAncestor``;
* per GPU and link ``0..NVML_NVLINK_MAX_LINKS-1``: ``nvmlDeviceGetNvLinkState``, and for active
  links ``nvmlDeviceGetNvLinkRemotePciInfo``, ``nvmlDeviceGetNvLinkRemoteDeviceType`` (when the
  binding has it) and, once per GPU, ``nvmlDeviceGetNvLinkVersion``.

How the answers become the model:

* PCIe level: ``NVML_TOPOLOGY_INTERNAL`` (two GPUs on one board, e.g. K80) and ``SINGLE`` →
  PIX, ``MULTIPLE`` → PXB, ``HOSTBRIDGE`` → PHB, ``NODE`` → NODE, ``SYSTEM`` → SYS.
* NVLink: active links are counted per GPU pair (as seen from either end; the larger count
  wins). A link whose remote end is not a visible GPU is an NVSwitch port — when NVML's remote
  device type says ``SWITCH``, or, when the type is unavailable, when the remote bus id is not
  one of the GPUs'. Links to an IBM NPU (POWER9 CPU) and to GPUs NVML does not show us are
  ignored. With switch ports the topology is ``nvswitch=True`` and every pair of
  switch-connected GPUs gets ``min(switch links of a, switch links of b)`` NVLinks (plus any
  direct links between them).
* NVLink generation: ``nvmlDeviceGetNvLinkVersion`` returns the ``nvmlNvlinkVersion_t`` enum
  (1 = 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0, 7 = 5.0, 8 = 6.0), mapped to the major
  generation; unknown, unsupported or no NVLink at all → 2 (the model's default).
* Bus ids are normalised to ``DDDD:BB:DD.F`` upper-case hex (NVML's ``busId`` has an 8-digit
  domain, ``00000000:06:00.0``; the catalog and ``/sys`` use 4 digits).
* CPU affinity: ``nvmlDeviceGetCpuAffinity`` fills ``ceil(ncpus / 64)`` 64-bit words; bit ``b``
  of word ``w`` is CPU ``64 w + b``.
* NUMA node: ``nvmlDeviceGetNumaNodeId`` (newer drivers); when that is missing or unsupported,
  the host's ``/sys/bus/pci/devices/<bus id>/numa_node`` — only when talking to the real
  ``pynvml`` module; a fake supplies host facts itself (see :class:`HostInfo`). A negative
  node means "none" (single-socket machines). We deliberately do not invent NUMA ids by
  grouping identical CPU-affinity masks: such ids need not match the kernel's, and the model's
  ``numa_node=None`` already means "unknown".

Every NVML failure becomes a one-line :class:`DiscoveryError` (dispatching on
``NVMLError.value``, since pynvml generates its error subclasses at import time).
"""

from __future__ import annotations

import math
import os
import platform
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from topology.model import GPU, PCIeLevel, Topology, TopologyError


class DiscoveryError(TopologyError):
    """NVML could not be used or gave an unusable answer; the message is one line."""


# NVML ABI values (nvml.h enums; pynvml exposes the same numbers). The adapter reads them from
# the ``nvml`` object when present and falls back to these.
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18

NVML_FEATURE_ENABLED = 1
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02

#: ``nvmlGpuTopologyLevel_t`` → PCIe level.
_ANCESTOR_LEVELS: dict[str, tuple[int, PCIeLevel]] = {
    "NVML_TOPOLOGY_INTERNAL": (0, PCIeLevel.PIX),
    "NVML_TOPOLOGY_SINGLE": (10, PCIeLevel.PIX),
    "NVML_TOPOLOGY_MULTIPLE": (20, PCIeLevel.PXB),
    "NVML_TOPOLOGY_HOSTBRIDGE": (30, PCIeLevel.PHB),
    "NVML_TOPOLOGY_NODE": (40, PCIeLevel.NODE),
    "NVML_TOPOLOGY_SYSTEM": (50, PCIeLevel.SYS),
}

#: ``nvmlNvlinkVersion_t`` → NVLink generation of the model.
NVLINK_VERSION_TO_GENERATION: dict[int, int] = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}

#: Generation reported when NVML cannot tell (and for machines without NVLink).
DEFAULT_NVLINK_GENERATION = 2

#: XIDs caused by applications, not by the GPU (NVIDIA k8s-device-plugin, health.go):
#: 13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped processing,
#: 45 preemptive cleanup, 68 video processor exception, 109 context switch timeout.
APPLICATION_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})

_ERROR_HINTS: dict[int, str] = {
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML library (libnvidia-ml.so.1) not found: "
    "is the NVIDIA driver installed and mounted into this container?",
    NVML_ERROR_DRIVER_NOT_LOADED: "NVIDIA driver not loaded: no GPUs usable on this node",
    NVML_ERROR_NO_PERMISSION: "no permission to query the GPU (run privileged or as root)",
    NVML_ERROR_FUNCTION_NOT_FOUND: "the NVIDIA driver is too old for this NVML call",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "NVML library and kernel driver versions differ "
    "(reboot or reload the driver)",
    NVML_ERROR_GPU_IS_LOST: "a GPU fell off the bus (GPU is lost)",
    NVML_ERROR_UNINITIALIZED: "NVML used before nvmlInit",
}


# ---------------------------------------------------------------------------------- host facts
class HostInfo(Protocol):
    """Facts about the host that NVML does not give: the name, how many CPUs to size the
    affinity mask for, and the NUMA node of a PCI device when ``nvmlDeviceGetNumaNodeId`` is
    unavailable. A fake NVML provides one as its ``gputopo_host`` attribute."""

    def hostname(self) -> str: ...

    def cpu_count(self) -> int: ...

    def numa_node(self, pci_bus_id: str) -> int | None: ...


class SysfsHost:
    """The real host: ``platform.node()``, ``os.cpu_count()`` and ``/sys`` for NUMA."""

    def __init__(self, sysfs: Path = Path("/sys")) -> None:
        self._sysfs = sysfs

    def hostname(self) -> str:
        return platform.node()

    def cpu_count(self) -> int:
        return os.cpu_count() or 1

    def numa_node(self, pci_bus_id: str) -> int | None:
        """``/sys/bus/pci/devices/<dddd:bb:dd.f>/numa_node``; missing, unreadable or ``-1``
        → None."""
        path = self._sysfs / "bus" / "pci" / "devices" / pci_bus_id.lower() / "numa_node"
        try:
            node = int(path.read_text().strip())
        except (OSError, ValueError):
            return None
        return node if node >= 0 else None


class _NoHost:
    """For NVML stand-ins without ``gputopo_host``: no I/O, NUMA unknown."""

    def hostname(self) -> str:
        return platform.node()

    def cpu_count(self) -> int:
        return os.cpu_count() or 1

    def numa_node(self, pci_bus_id: str) -> int | None:
        return None


def _host_for(nvml: Any) -> HostInfo:
    host = getattr(nvml, "gputopo_host", None)
    if host is not None:
        return host  # type: ignore[no-any-return]
    if isinstance(nvml, ModuleType) and nvml.__name__ == "pynvml":
        return SysfsHost()
    return _NoHost()


# ---------------------------------------------------------------------------------- helpers
def _default_nvml() -> ModuleType:
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - it is a declared dependency
        raise DiscoveryError(f"nvidia-ml-py (pynvml) is not installed: {exc}") from None
    module: ModuleType = pynvml
    return module


def _const(nvml: Any, name: str, default: int) -> int:
    value = getattr(nvml, name, default)
    return int(value)


def _error_value(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _error_message(call: str, exc: BaseException) -> str:
    value = _error_value(exc)
    try:
        text = str(exc)
    except Exception:  # pynvml's __str__ may itself call NVML
        text = ""
    text = " ".join(text.split()) or type(exc).__name__
    hint = _ERROR_HINTS.get(value) if value is not None else None
    code = f"NVML error {value}" if value is not None else "NVML error"
    message = f"{call}: {hint} ({code}: {text})" if hint else f"{call}: {code}: {text}"
    return message


def _text(value: object) -> str:
    """NVML strings are ``bytes`` in old pynvml releases and ``str`` in new ones."""
    if isinstance(value, bytes):
        return value.decode(errors="replace").rstrip("\x00")
    return str(value)


_BUS_ID = re.compile(
    r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$"
)


def normalize_bus_id(bus_id: str | bytes) -> str:
    """A PCI bus id as ``DDDD:BB:DD.F`` upper-case hex (8-digit domain if it does not fit 4).

    ``b"00000000:06:00.0"`` → ``"0000:06:00.0"``; text that is not a bus id is returned
    stripped and upper-cased.
    """
    text = _text(bus_id).strip()
    m = _BUS_ID.match(text)
    if not m:
        return text.upper()
    domain = int(m.group(1) or "0", 16)
    bus, device, function = int(m.group(2), 16), int(m.group(3), 16), int(m.group(4))
    dom = f"{domain:04X}" if domain <= 0xFFFF else f"{domain:08X}"
    return f"{dom}:{bus:02X}:{device:02X}.{function:X}"


def cpus_from_mask(words: Iterable[int]) -> frozenset[int]:
    """CPU set of an NVML affinity mask: bit ``b`` of 64-bit word ``w`` is CPU ``64 w + b``."""
    cpus: set[int] = set()
    for w, word in enumerate(words):
        word = int(word)
        base = 64 * w
        while word:
            low = word & -word
            cpus.add(base + low.bit_length() - 1)
            word ^= low
    return frozenset(cpus)


def mask_from_cpus(cpus: Iterable[int], words: int) -> list[int]:
    """Inverse of :func:`cpus_from_mask`, ``words`` 64-bit words; CPUs past the end are
    dropped (as NVML does for a short array)."""
    out = [0] * words
    for cpu in cpus:
        w, b = divmod(cpu, 64)
        if 0 <= w < words:
            out[w] |= 1 << b
    return out


class _Session:
    """One NVML conversation: calls with uniform error translation."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        error_cls = getattr(nvml, "NVMLError", None)
        if not (isinstance(error_cls, type) and issubclass(error_cls, BaseException)):
            raise DiscoveryError(f"{nvml!r} does not look like NVML: it has no NVMLError class")
        self.error: type[BaseException] = error_cls

    def fn(self, name: str) -> Callable[..., Any]:
        fn = getattr(self.nvml, name, None)
        if not callable(fn):
            raise DiscoveryError(f"{name}: not provided by this NVML binding")
        return fn  # type: ignore[no-any-return]

    def call(self, name: str, *args: Any) -> Any:
        """Call ``name``; any NVML error → :class:`DiscoveryError`."""
        fn = self.fn(name)
        try:
            return fn(*args)
        except self.error as exc:
            raise DiscoveryError(_error_message(name, exc)) from None

    def try_call(self, name: str, *args: Any, tolerate: Sequence[int]) -> tuple[bool, Any]:
        """Call ``name``; an NVML error whose value is in ``tolerate`` gives ``(False, None)``,
        others raise :class:`DiscoveryError`. A missing function counts as
        ``NVML_ERROR_FUNCTION_NOT_FOUND``."""
        fn = getattr(self.nvml, name, None)
        if not callable(fn):
            if NVML_ERROR_FUNCTION_NOT_FOUND in tolerate:
                return False, None
            raise DiscoveryError(f"{name}: not provided by this NVML binding")
        try:
            return True, fn(*args)
        except self.error as exc:
            if _error_value(exc) in tolerate:
                return False, None
            raise DiscoveryError(_error_message(name, exc)) from None

    def init(self) -> None:
        self.call("nvmlInit")

    def shutdown(self) -> None:
        try:
            self.fn("nvmlShutdown")()
        except (self.error, DiscoveryError):
            pass


_SKIP_LINK = (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND)
_OPTIONAL = (
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_NOT_FOUND,
)


# ---------------------------------------------------------------------------------- discover
def discover(nvml: Any = None, *, name: str = "") -> Topology:
    """Discover the node's GPU topology through NVML.

    Args:
        nvml: the ``pynvml`` module (default) or any object with the same functions,
            constants and ``NVMLError`` class (e.g. :class:`~topology.discovery.fake_nvml.
            FakeNVML`). An optional ``gputopo_host`` attribute (:class:`HostInfo`) supplies
            host name, CPU count and NUMA fallback; the real module uses :class:`SysfsHost`.
        name: the topology's label; default the host name.

    Returns:
        The :class:`Topology`: GPUs in NVML index order (memory in MiB, bus ids normalised),
        PCIe level and NVLink count of every pair, NVLink generation and NVSwitch flag.
        Conversion rules are in the module docstring.

    Raises:
        DiscoveryError: NVML is unavailable (no library, no driver, no permission), a call
            failed, or NVML reports no GPUs. The message is one line naming the failing call.
    """
    nvml = _default_nvml() if nvml is None else nvml
    session = _Session(nvml)
    host = _host_for(nvml)
    session.init()
    try:
        return _discover(session, host, name)
    finally:
        session.shutdown()


def _discover(s: _Session, host: HostInfo, name: str) -> Topology:
    nvml = s.nvml
    count = int(s.call("nvmlDeviceGetCount"))
    if count <= 0:
        raise DiscoveryError("nvmlDeviceGetCount: NVML reports no GPUs on this node")
    handles = [s.call("nvmlDeviceGetHandleByIndex", i) for i in range(count)]
    words = max(1, math.ceil(max(1, host.cpu_count()) / 64))

    gpus: list[GPU] = []
    for i, h in enumerate(handles):
        bus_id = normalize_bus_id(s.call("nvmlDeviceGetPciInfo", h).busId)
        memory = s.call("nvmlDeviceGetMemoryInfo", h)
        mask = s.call("nvmlDeviceGetCpuAffinity", h, words)
        ok, numa = s.try_call("nvmlDeviceGetNumaNodeId", h, tolerate=_OPTIONAL)
        numa_node = int(numa) if ok and numa is not None else host.numa_node(bus_id)
        if numa_node is not None and numa_node < 0:
            numa_node = None
        gpus.append(
            GPU(
                index=i,
                uuid=_text(s.call("nvmlDeviceGetUUID", h)),
                pci_bus_id=bus_id,
                name=_text(s.call("nvmlDeviceGetName", h)),
                memory_mib=int(memory.total) // (1024 * 1024),
                numa_node=numa_node,
                cpu_affinity=cpus_from_mask(mask),
            )
        )

    levels = {
        _const(nvml, const, value): level for const, (value, level) in _ANCESTOR_LEVELS.items()
    }
    pcie: dict[tuple[int, int], PCIeLevel] = {}
    for a in range(count):
        for b in range(a + 1, count):
            raw = int(s.call("nvmlDeviceGetTopologyCommonAncestor", handles[a], handles[b]))
            if raw not in levels:
                raise DiscoveryError(
                    f"nvmlDeviceGetTopologyCommonAncestor: unknown level {raw} for GPUs {a},{b}"
                )
            pcie[(a, b)] = levels[raw]

    direct, switch_links, generation = _nvlinks(s, handles, [g.pci_bus_id for g in gpus])
    nvswitch = any(switch_links)
    nvlinks: dict[tuple[int, int], int] = {}
    for a in range(count):
        for b in range(a + 1, count):
            n = max(direct.get((a, b), 0), direct.get((b, a), 0))
            if switch_links[a] and switch_links[b]:
                n += min(switch_links[a], switch_links[b])
            if n:
                nvlinks[(a, b)] = n

    try:
        return Topology.build(
            name or host.hostname(),
            gpus,
            nvlinks,
            pcie,
            nvlink_generation=generation,
            nvswitch=nvswitch,
        )
    except TopologyError as exc:
        raise DiscoveryError(f"NVML answers do not form a valid topology: {exc}") from None


def _nvlinks(
    s: _Session, handles: Sequence[Any], bus_ids: Sequence[str]
) -> tuple[dict[tuple[int, int], int], list[int], int]:
    """Walk every NVLink of every GPU: direct link counts per ordered pair, switch-port
    counts per GPU, and the NVLink generation."""
    nvml = s.nvml
    max_links = _const(nvml, "NVML_NVLINK_MAX_LINKS", 18)
    enabled = _const(nvml, "NVML_FEATURE_ENABLED", NVML_FEATURE_ENABLED)
    type_gpu = _const(nvml, "NVML_NVLINK_DEVICE_TYPE_GPU", NVML_NVLINK_DEVICE_TYPE_GPU)
    type_npu = _const(nvml, "NVML_NVLINK_DEVICE_TYPE_IBMNPU", NVML_NVLINK_DEVICE_TYPE_IBMNPU)
    type_switch = _const(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", NVML_NVLINK_DEVICE_TYPE_SWITCH)
    has_type = callable(getattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", None))
    index_of = {bus: i for i, bus in enumerate(bus_ids)}

    direct: dict[tuple[int, int], int] = {}
    switch_links = [0] * len(handles)
    generations: list[int] = []
    for i, h in enumerate(handles):
        version_seen = False
        for link in range(max_links):
            ok, state = s.try_call("nvmlDeviceGetNvLinkState", h, link, tolerate=_SKIP_LINK)
            if not ok or int(state) != enabled:
                continue
            ok, remote = s.try_call(
                "nvmlDeviceGetNvLinkRemotePciInfo", h, link, tolerate=_SKIP_LINK
            )
            if not ok:
                continue
            remote_bus = normalize_bus_id(remote.busId)
            kind: int | None = None
            if has_type:
                ok, kind = s.try_call(
                    "nvmlDeviceGetNvLinkRemoteDeviceType", h, link, tolerate=_OPTIONAL
                )
                kind = int(kind) if ok and kind is not None else None
            peer = index_of.get(remote_bus)
            if kind == type_npu:
                continue  # NVLink to a POWER9 CPU: not a GPU-GPU path
            if kind == type_switch or (kind not in (type_gpu, type_npu) and peer is None):
                switch_links[i] += 1
            elif peer is not None and peer != i:
                direct[(i, peer)] = direct.get((i, peer), 0) + 1
            else:
                continue  # a GPU NVML does not show us (or nonsense): ignore the link
            if not version_seen:
                version_seen = True
                ok, version = s.try_call(
                    "nvmlDeviceGetNvLinkVersion", h, link, tolerate=_OPTIONAL
                )
                if ok and version is not None:
                    gen = NVLINK_VERSION_TO_GENERATION.get(int(version))
                    if gen is not None:
                        generations.append(gen)
    generation = max(generations) if generations else DEFAULT_NVLINK_GENERATION
    return direct, switch_links, generation


# ---------------------------------------------------------------------------------- health
HealthCallback = Callable[[str, bool, "int | None"], None]


class HealthWatcher:
    """One NVML conversation watching GPU health: critical-XID events (modelled on NVIDIA's
    k8s-device-plugin, health.go) and, optionally, a periodic probe query per GPU.

    Reports go to ``on_event(uuid, healthy, xid)``:

    * a critical XID not in ``ignored_xids`` (default :data:`APPLICATION_XIDS`) on a watched
      GPU → ``(uuid, False, xid)``;
    * a GPU that cannot be found or registered for events (other than "not supported", which
      only disables its event watch) → ``(uuid, False, None)``; registration is retried at
      every probe;
    * ``nvmlEventSetWait_v2`` failing with anything but a timeout → every watched GPU
      ``(uuid, False, None)``; a critical XID whose device has no readable UUID → every
      watched GPU ``(uuid, False, xid)``;
    * the probe (every ``probe_interval_s`` of ``clock`` time, when set):
      ``nvmlDeviceGetHandleByUUID`` then ``nvmlDeviceGetMemoryInfo`` per watched GPU, plus
      event registration if it is still missing → ``(uuid, True, None)`` when NVML answered
      normally, ``(uuid, False, None)`` when a call failed.

    ``healthy=True`` is an observation ("NVML answered normally just now"), not a verdict:
    NVML has no "recovered" event, so the watcher's owner decides when a GPU marked unhealthy
    has answered normally long enough (``gpunode.health.HealthState``).

    Use :meth:`open`, then :meth:`step` in a loop, then :meth:`close` (or
    :func:`watch_health`, which does exactly that in the calling thread). ``step`` with a
    timeout of 0 never blocks, so tests drive the watcher without threads or sleeps.

    Args:
        nvml: ``pynvml`` or a stand-in (None → ``pynvml``).
        uuids: GPU UUIDs to watch.
        on_event: callback, invoked from the thread that calls :meth:`open` / :meth:`step`.
        ignored_xids: XIDs that are the application's fault, not the GPU's.
        probe_interval_s: seconds between probes; None = no probe (XID events only).
        clock: monotonic clock in seconds (injectable for tests).
    """

    def __init__(
        self,
        nvml: Any,
        uuids: Iterable[str],
        on_event: HealthCallback,
        *,
        ignored_xids: Iterable[int] = APPLICATION_XIDS,
        probe_interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nvml = _default_nvml() if nvml is None else nvml
        self._s = _Session(self.nvml)
        self.uuids = list(dict.fromkeys(uuids))
        self.on_event = on_event
        self.ignored = frozenset(int(x) for x in ignored_xids)
        self.probe_interval_s = probe_interval_s
        self.clock = clock
        self._xid_type = _const(self.nvml, "nvmlEventTypeXidCriticalError", 0x8)
        self._timeout = _const(self.nvml, "NVML_ERROR_TIMEOUT", NVML_ERROR_TIMEOUT)
        self._not_supported = _const(
            self.nvml, "NVML_ERROR_NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED
        )
        self._event_set: Any = None
        self._unregistered: set[str] = set()
        self._next_probe: float | None = None
        self._open = False

    def open(self) -> None:
        """``nvmlInit``, create the event set and register every GPU for critical XIDs.

        Raises:
            DiscoveryError: NVML cannot be initialised or the event set cannot be created.
        """
        s = self._s
        s.init()
        try:
            self._event_set = s.call("nvmlEventSetCreate")
        except DiscoveryError:
            s.shutdown()
            raise
        self._open = True
        for uuid in self.uuids:
            if not self._register(uuid):
                self._unregistered.add(uuid)
                self.on_event(uuid, False, None)
        if self.probe_interval_s is not None:
            self._next_probe = self.clock() + self.probe_interval_s

    def close(self) -> None:
        """Free the event set and ``nvmlShutdown`` (idempotent)."""
        if not self._open:
            return
        self._open = False
        free = getattr(self.nvml, "nvmlEventSetFree", None)
        if callable(free):
            try:
                free(self._event_set)
            except self._s.error:
                pass
        self._s.shutdown()

    def _register(self, uuid: str) -> bool:
        """Register ``uuid`` for critical XIDs; False when it could not be found or
        registered ("not supported" counts as registered: too old for events)."""
        s = self._s
        try:
            handle = s.fn("nvmlDeviceGetHandleByUUID")(uuid)
            s.fn("nvmlDeviceRegisterEvents")(handle, self._xid_type, self._event_set)
        except s.error as exc:
            return _error_value(exc) == self._not_supported
        return True

    def step(self, timeout_ms: int) -> bool:
        """Wait up to ``timeout_ms`` for one event and report it, then probe if one is due.

        Returns:
            False when the event wait itself failed (the caller should back off before the
            next step), True otherwise.
        """
        s = self._s
        healthy_wait = True
        try:
            event = s.fn("nvmlEventSetWait_v2")(self._event_set, timeout_ms)
        except s.error as exc:
            if _error_value(exc) != self._timeout:
                healthy_wait = False
                for uuid in self.uuids:
                    self.on_event(uuid, False, None)
        else:
            self._handle(event)
        if self._next_probe is not None and self.clock() >= self._next_probe:
            self.probe()
        return healthy_wait

    def _handle(self, event: Any) -> None:
        if int(getattr(event, "eventType", self._xid_type)) != self._xid_type:
            return
        xid = int(event.eventData)
        if xid in self.ignored:
            return
        try:
            uuid = _text(self._s.fn("nvmlDeviceGetUUID")(event.device))
        except self._s.error:
            for u in self.uuids:
                self.on_event(u, False, xid)
            return
        if uuid in self.uuids:
            self.on_event(uuid, False, xid)

    def probe(self) -> None:
        """Query every watched GPU once (see the class docstring) and schedule the next probe
        ``probe_interval_s`` later."""
        s = self._s
        for uuid in self.uuids:
            try:
                handle = s.fn("nvmlDeviceGetHandleByUUID")(uuid)
                s.fn("nvmlDeviceGetMemoryInfo")(handle)
            except s.error as exc:
                if _error_value(exc) != self._not_supported:
                    self.on_event(uuid, False, None)
                    continue
            if uuid in self._unregistered:
                if not self._register(uuid):
                    self.on_event(uuid, False, None)
                    continue
                self._unregistered.discard(uuid)
            self.on_event(uuid, True, None)
        if self.probe_interval_s is not None:
            self._next_probe = self.clock() + self.probe_interval_s


def watch_health(
    nvml: Any,
    uuids: Iterable[str],
    on_event: HealthCallback,
    stop_event: threading.Event,
    *,
    poll_ms: int = 1000,
    ignored_xids: Iterable[int] = APPLICATION_XIDS,
    probe_interval_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Watch the health of ``uuids`` until ``stop_event`` is set (blocking; run it in a
    thread): a :class:`HealthWatcher` stepped every ``poll_ms``; after a failed event wait
    it waits ``poll_ms`` before trying again. What is reported is the watcher's.

    Args:
        nvml: ``pynvml`` or a stand-in (None → ``pynvml``).
        uuids: GPU UUIDs to watch.
        on_event: callback ``(uuid, healthy, xid)``, invoked from this thread.
        stop_event: set it to return (within ``poll_ms``).
        poll_ms: wait timeout per ``nvmlEventSetWait_v2`` call, milliseconds.
        ignored_xids: XIDs that are the application's fault, not the GPU's.
        probe_interval_s: seconds between probe queries; None = XID events only.
        clock: monotonic clock, seconds (tests).

    Raises:
        DiscoveryError: NVML cannot be initialised or the event set cannot be created.
    """
    watcher = HealthWatcher(
        nvml, uuids, on_event, ignored_xids=ignored_xids, probe_interval_s=probe_interval_s,
        clock=clock,
    )  # fmt: skip
    watcher.open()
    try:
        while not stop_event.is_set():
            if not watcher.step(poll_ms):
                stop_event.wait(poll_ms / 1000)
    finally:
        watcher.close()
