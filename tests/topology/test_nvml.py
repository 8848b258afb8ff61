"""NVML discovery against the fake NVML (and the real pynvml on this GPU-less machine)."""

from __future__ import annotations

import threading
from typing import Any

import pynvml
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topology import catalog
from topology.discovery import nvml as adapter
from topology.discovery.fake_nvml import GENERATION_TO_NVLINK_VERSION, FakeNVML
from topology.discovery.nvml import (
    APPLICATION_XIDS,
    DiscoveryError,
    cpus_from_mask,
    discover,
    mask_from_cpus,
    normalize_bus_id,
    watch_health,
)
from topology.model import GPU, PCIeLevel, Topology, TopologyError, deterministic_uuid


def _gpus(name: str, n: int, *, numa: list[int | None] | None = None) -> list[GPU]:
    return [
        GPU(
            index=i,
            uuid=deterministic_uuid(name, i),
            pci_bus_id=f"0000:{0x10 + i:02X}:00.0",
            name="Tesla T4",
            memory_mib=15360,
            numa_node=None if numa is None else numa[i],
            cpu_affinity=frozenset(range(4)) if numa is None else frozenset({i}),
        )
        for i in range(n)
    ]


def _nvswitch_machine(n: int = 8, links: int = 12) -> Topology:
    gpus = _gpus("hgx", n, numa=[i // 4 for i in range(n)])
    pcie = {
        (a, b): PCIeLevel.PXB if a // 2 == b // 2 else PCIeLevel.SYS
        for a in range(n)
        for b in range(a + 1, n)
    }
    pairs = {(a, b): links for a in range(n) for b in range(a + 1, n)}
    return Topology.build("hgx", gpus, pairs, pcie, nvlink_generation=3, nvswitch=True)


# ----------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("machine", catalog.names())
def test_catalog_machine_round_trips(machine: str) -> None:
    t = catalog.get(machine)
    fake = FakeNVML(t)
    found = discover(fake)
    assert found == t
    assert found.name == t.name
    assert not fake.initialized  # nvmlInit / nvmlShutdown balanced


def test_nvswitch_machine_round_trips_through_switch_ports() -> None:
    t = _nvswitch_machine()
    fake = FakeNVML(t)
    # the fake really exposes switch ports, not GPU peers
    fake.nvmlInit()
    try:
        handle = fake.nvmlDeviceGetHandleByIndex(0)
        remotes = {fake.nvmlDeviceGetNvLinkRemotePciInfo(handle, k).busId for k in range(12)}
        gpu_buses = {fake.nvmlDeviceGetPciInfo(fake.nvmlDeviceGetHandleByIndex(i)).busId
                     for i in range(8)}  # fmt: skip
        assert "00000000:C0:00.0" in remotes and not remotes & gpu_buses
    finally:
        fake.nvmlShutdown()
    found = discover(fake)
    assert found == t
    assert found.nvswitch
    assert found.links[0][5].nvswitch and found.nvlinks(0, 5) == 12


def test_nvswitch_pairs_get_min_of_switch_ports_without_device_type() -> None:
    """Without nvmlDeviceGetNvLinkRemoteDeviceType, a non-GPU remote bus id means NVSwitch."""

    class NoDeviceType(FakeNVML):
        def __getattribute__(self, name: str) -> Any:
            if name == "nvmlDeviceGetNvLinkRemoteDeviceType":
                raise AttributeError(name)
            return super().__getattribute__(name)

    n = 4
    gpus = _gpus("mixed-switch", n)
    counts = [6, 6, 3, 3]
    pairs = {(a, b): min(counts[a], counts[b]) for a in range(n) for b in range(a + 1, n)}
    t = Topology.build("m", gpus, pairs, PCIeLevel.SYS, nvlink_generation=2, nvswitch=True)
    fake = NoDeviceType(t)
    found = discover(fake)
    assert found == t
    assert fake.calls["nvmlDeviceGetNvLinkRemoteDeviceType"] == 0
    assert found.nvlinks(0, 1) == 6 and found.nvlinks(0, 2) == 3 and found.nvlinks(2, 3) == 3


def test_nvlinks_to_cpus_and_hidden_gpus_are_ignored() -> None:
    class Power9(FakeNVML):
        def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:  # noqa: N802
            kind = super().nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
            if kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                return int(pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU)
            return kind

    found = discover(Power9(_nvswitch_machine(4, 3)))
    assert not found.nvswitch and found.nvlinks(0, 1) == 0

    class Hidden(FakeNVML):
        def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:  # noqa: N802
            super().nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)  # a GPU outside this container

    found = discover(Hidden(_nvswitch_machine(4, 3)))
    assert not found.nvswitch and found.nvlinks(0, 1) == 0


def test_pcie_only_machine_has_no_nvlink() -> None:
    t = Topology.build("pcie", _gpus("pcie", 4), {}, PCIeLevel.PHB)
    fake = FakeNVML(t)
    found = discover(fake)
    assert found == t
    assert fake.calls["nvmlDeviceGetNvLinkRemotePciInfo"] == 0  # every state query NotSupported


def test_not_supported_nvlink_queries_mean_no_nvlink() -> None:
    t = catalog.get("dgx1-v100")
    fake = FakeNVML(t, errors={"nvmlDeviceGetNvLinkState": pynvml.NVML_ERROR_NOT_SUPPORTED})
    found = discover(fake)
    assert all(found.nvlinks(i, j) == 0 for i in range(8) for j in range(8) if i != j)
    assert found.pcie_level(0, 1) == t.pcie_level(0, 1)
    assert not found.nvswitch


def test_internal_common_ancestor_is_pix() -> None:
    class K80(FakeNVML):
        def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:  # noqa: N802
            super().nvmlDeviceGetTopologyCommonAncestor(device1, device2)
            return int(pynvml.NVML_TOPOLOGY_INTERNAL)

    t = Topology.build("k80", _gpus("k80", 2), {}, PCIeLevel.SYS)
    assert discover(K80(t)).pcie_level(0, 1) is PCIeLevel.PIX


def test_numa_node_unsupported_falls_back_to_host_then_none() -> None:
    t = Topology.build("numa", _gpus("numa", 2, numa=[0, 1]), {}, PCIeLevel.SYS)
    fake = FakeNVML(t, errors={"nvmlDeviceGetNumaNodeId": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND})
    assert [g.numa_node for g in discover(fake).gpus] == [None, None]

    class Host:
        def hostname(self) -> str:
            return "h"

        def cpu_count(self) -> int:
            return 2

        def numa_node(self, pci_bus_id: str) -> int | None:
            return {"0000:10:00.0": 0, "0000:11:00.0": 1}.get(pci_bus_id)

    fake.gputopo_host = Host()  # type: ignore[assignment]
    found = discover(fake)
    assert [g.numa_node for g in found.gpus] == [0, 1]
    assert found.name == "h"


def test_from_source_reads_a_catalog_name() -> None:
    assert discover(FakeNVML.from_source("dgx1-v100")) == catalog.get("dgx1-v100")


# hypothesis: random machines -------------------------------------------------------------
@st.composite
def topologies(draw: st.DrawFn) -> Topology:
    n = draw(st.integers(2, 16))
    nvswitch = draw(st.booleans())
    numa_count = draw(st.integers(1, 4))
    cpus_per_numa = draw(st.integers(1, 80))
    buses = draw(st.lists(st.integers(1, 0xFF), min_size=n, max_size=n, unique=True))
    domain = draw(st.sampled_from([0, 1, 0x10]))
    gpus: list[GPU] = []
    for i in range(n):
        numa = draw(st.one_of(st.none(), st.integers(0, numa_count - 1)))
        if numa is None:
            cpus = draw(st.frozensets(st.integers(0, 300), max_size=8))
        else:
            cpus = frozenset(range(numa * cpus_per_numa, (numa + 1) * cpus_per_numa))
        gpus.append(
            GPU(
                index=i,
                uuid=deterministic_uuid("hyp", draw(st.integers(0, 10**9)) * 16 + i),
                pci_bus_id=f"{domain:04X}:{buses[i]:02X}:{draw(st.integers(0, 31)):02X}.0",
                name=draw(st.sampled_from(["Tesla V100-SXM2-32GB", "NVIDIA A100-SXM4-80GB"])),
                memory_mib=draw(st.integers(0, 200_000)),
                numa_node=numa,
                cpu_affinity=cpus,
            )
        )
    pcie = {
        (a, b): draw(st.sampled_from(list(PCIeLevel))) for a in range(n) for b in range(a + 1, n)
    }
    if nvswitch:
        ports = draw(st.lists(st.integers(0, 18), min_size=n, max_size=n))
        ports[0], ports[1] = max(ports[0], 1), max(ports[1], 1)
        nvlinks = {(a, b): min(ports[a], ports[b]) for a in range(n) for b in range(a + 1, n)}
    else:
        top = min(6, 36 // (n - 1))
        nvlinks = {(a, b): draw(st.integers(0, top)) for a in range(n) for b in range(a + 1, n)}
    has_nvlink = any(nvlinks.values())
    generation = draw(st.sampled_from(sorted(GENERATION_TO_NVLINK_VERSION))) if has_nvlink else 2
    return Topology.build(
        "hyp", gpus, nvlinks, pcie, nvlink_generation=generation, nvswitch=nvswitch
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies())
def test_random_topologies_round_trip(t: Topology) -> None:
    fake = FakeNVML(t)
    assert discover(fake) == t
    assert not fake.initialized


@given(st.frozensets(st.integers(0, 511)))
def test_cpu_mask_round_trip(cpus: frozenset[int]) -> None:
    assert cpus_from_mask(mask_from_cpus(cpus, 8)) == cpus


def test_bus_id_normalisation() -> None:
    assert normalize_bus_id("00000000:0a:00.0") == "0000:0A:00.0"
    assert normalize_bus_id(b"00000001:86:00.0") == "0001:86:00.0"
    assert normalize_bus_id("0000:06:00.0") == "0000:06:00.0"
    assert normalize_bus_id("00010000:06:00.0") == "00010000:06:00.0"


def test_adapter_constants_match_pynvml() -> None:
    for name in (
        "NVML_ERROR_NOT_SUPPORTED",
        "NVML_ERROR_INVALID_ARGUMENT",
        "NVML_ERROR_TIMEOUT",
        "NVML_ERROR_LIBRARY_NOT_FOUND",
        "NVML_ERROR_DRIVER_NOT_LOADED",
        "NVML_ERROR_FUNCTION_NOT_FOUND",
        "NVML_NVLINK_DEVICE_TYPE_SWITCH",
        "NVML_NVLINK_DEVICE_TYPE_IBMNPU",
    ):
        assert getattr(adapter, name) == getattr(pynvml, name), name
    for name, (value, _) in adapter._ANCESTOR_LEVELS.items():
        assert getattr(pynvml, name) == value


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("code", "words"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "permission"),
    ],
)
def test_init_failure_is_a_one_line_discovery_error(code: int, words: str) -> None:
    fake = FakeNVML(catalog.get("dgx1-v100"), errors={"nvmlInit": code})
    with pytest.raises(DiscoveryError) as info:
        discover(fake)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("nvmlInit:")
    assert words in message
    assert isinstance(info.value, TopologyError)
    assert fake.calls["nvmlShutdown"] == 0


def test_failure_mid_discovery_still_shuts_down() -> None:
    fake = FakeNVML(
        catalog.get("dgx1-v100"), errors={"nvmlDeviceGetMemoryInfo": pynvml.NVML_ERROR_GPU_IS_LOST}
    )
    with pytest.raises(DiscoveryError, match="nvmlDeviceGetMemoryInfo: .*GPU is lost"):
        discover(fake)
    assert not fake.initialized


def test_topology_with_more_links_than_nvml_has_is_rejected() -> None:
    t = Topology.build("wide", _gpus("wide", 2), {(0, 1): 40}, PCIeLevel.SYS)
    with pytest.raises(TopologyError, match="at most"):
        FakeNVML(t)


def test_object_without_nvml_error_class_is_rejected() -> None:
    with pytest.raises(DiscoveryError, match="NVMLError"):
        discover(object())


def test_real_pynvml_imports_and_fails_cleanly_without_gpus() -> None:
    assert callable(pynvml.nvmlInit)
    assert issubclass(pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # pragma: no cover - only on a machine with a driver
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    with pytest.raises(DiscoveryError) as info:
        discover()
    assert info.value.args[0].startswith("nvmlInit:")
    with pytest.raises(DiscoveryError):
        discover(pynvml)


# ----------------------------------------------------------------------------- health
class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, bool, int | None]] = []
        self.cond = threading.Condition()

    def __call__(self, uuid: str, healthy: bool, xid: int | None) -> None:
        with self.cond:
            self.events.append((uuid, healthy, xid))
            self.cond.notify_all()

    def wait_for(self, count: int) -> list[tuple[str, bool, int | None]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.events) >= count, timeout=30)
            return list(self.events)


def _watch(fake: FakeNVML, uuids: list[str], recorder: _Recorder) -> tuple[
    threading.Thread, threading.Event
]:
    stop = threading.Event()
    thread = threading.Thread(
        target=watch_health, args=(fake, uuids, recorder, stop), kwargs={"poll_ms": 20}
    )
    thread.start()
    return thread, stop


def test_critical_xid_marks_gpu_unhealthy_and_application_xids_are_ignored() -> None:
    t = catalog.get("dgx1-v100")
    fake = FakeNVML(t)
    rec = _Recorder()
    thread, stop = _watch(fake, [g.uuid for g in t.gpus], rec)
    try:
        for xid in sorted(APPLICATION_XIDS):
            fake.inject_xid(2, xid)
        fake.inject_xid(3, 79)  # GPU fell off the bus
        events = rec.wait_for(1)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert events == [(t.gpus[3].uuid, False, 79)]
    assert fake.pending_events() == 0
    assert not fake.initialized
    assert fake.calls["nvmlEventSetFree"] == 1


def test_xid_of_unwatched_gpu_is_ignored() -> None:
    t = catalog.get("dgx1-v100")
    fake = FakeNVML(t)
    rec = _Recorder()
    thread, stop = _watch(fake, [t.gpus[0].uuid], rec)
    try:
        fake.inject_xid(5, 48)  # not registered: stays queued
        fake.inject_xid(0, 48)
        events = rec.wait_for(1)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert events == [(t.gpus[0].uuid, False, 48)]
    assert fake.pending_events() == 1


def test_wait_failure_marks_every_watched_gpu_unhealthy() -> None:
    t = catalog.get("dgx1-v100")
    fake = FakeNVML(t, errors={"nvmlEventSetWait_v2": pynvml.NVML_ERROR_UNKNOWN})
    uuids = [g.uuid for g in t.gpus[:2]]
    rec = _Recorder()
    thread, stop = _watch(fake, uuids, rec)
    try:
        events = rec.wait_for(2)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert events[:2] == [(uuids[0], False, None), (uuids[1], False, None)]


def test_unknown_uuid_is_reported_unhealthy() -> None:
    t = catalog.get("dgx1-v100")
    fake = FakeNVML(t)
    rec = _Recorder()
    stop = threading.Event()
    stop.set()  # register, then return at once
    watch_health(fake, ["GPU-missing", t.gpus[0].uuid], rec, stop)
    assert rec.events == [("GPU-missing", False, None)]


def test_watch_health_raises_discovery_error_when_nvml_is_missing() -> None:
    fake = FakeNVML(
        catalog.get("dgx1-v100"), errors={"nvmlInit": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND}
    )
    with pytest.raises(DiscoveryError, match="nvmlInit"):
        watch_health(fake, [], lambda *a: None, threading.Event())


def test_fake_event_wait_times_out() -> None:
    fake = FakeNVML(catalog.get("dgx1-v100"))
    fake.nvmlInit()
    event_set = fake.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_Timeout):
        fake.nvmlEventSetWait_v2(event_set, 1)
    fake.nvmlShutdown()
