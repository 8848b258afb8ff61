"""Health that recovers: a GPU marked unhealthy by a critical XID or a failed NVML query is
healthy again once NVML has answered normally for it for ``health_recovery_s``, and
ListAndWatch streams the change at once.

Driven through the fake NVML and the real watcher (:class:`HealthWatcher`), stepped by hand
with a timeout of 0 and an injected clock: no threads for the watcher, no sleeps.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pynvml
import pytest

from device_plugin.allocation import Allocator, Inventory
from device_plugin.api import HEALTHY, UNHEALTHY
from device_plugin.api import api_pb2 as pb
from device_plugin.devices import resource
from device_plugin.metrics import Metrics
from device_plugin.pods import FilePodSource
from device_plugin.server import DevicePluginServicer
from device_plugin.settings import DEFAULT_HEALTH_RECOVERY_S, load_settings
from gpunode.health import HealthState
from topology import catalog
from topology.contract import RESOURCE_GPU
from topology.discovery.fake_nvml import FakeNVML
from topology.discovery.nvml import HealthWatcher

TOPO = catalog.get("dgx1-v100")
UUIDS = [g.uuid for g in TOPO.gpus]
RECOVERY_S = 60.0
PROBE_S = 5.0


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Node:
    """Fake NVML → HealthWatcher → HealthState, as the plugin wires them."""

    def __init__(self, recovery_s: float = RECOVERY_S) -> None:
        self.clock = Clock()
        self.fake = FakeNVML(TOPO)
        self.state = HealthState(recovery_s=recovery_s, clock=self.clock)
        self.watcher = HealthWatcher(self.fake, UUIDS, self.report, probe_interval_s=PROBE_S,
                                     clock=self.clock)  # fmt: skip
        self.watcher.open()

    def report(self, uuid: str, answered: bool, xid: int | None) -> None:
        self.state.report(uuid, answered, xid)

    def run_for(self, seconds: float) -> None:
        """Let ``seconds`` of clock time pass, the watcher stepping at every probe."""
        end = self.clock.now + seconds
        while self.clock.now + PROBE_S <= end:
            self.clock.advance(PROBE_S)
            self.watcher.step(0)
        self.clock.now = end
        self.watcher.step(0)

    def unhealthy(self) -> set[int]:
        bad = self.state.unhealthy()
        return {g.index for g in TOPO.gpus if g.uuid in bad}


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node()
    yield n
    n.watcher.close()
    assert not n.fake.initialized


def test_xid_then_normal_answers_for_the_period_make_the_gpu_healthy(node: Node) -> None:
    node.fake.inject_xid(3, 48)  # double-bit ECC error: the GPU still answers queries
    node.watcher.step(0)
    assert node.unhealthy() == {3}
    assert node.state.reasons() == {UUIDS[3]: 48}
    version = node.state.version
    node.run_for(RECOVERY_S)  # the first normal answer comes one probe after the XID
    assert node.unhealthy() == {3}
    node.run_for(PROBE_S)
    assert node.unhealthy() == set()
    assert node.state.version == version + 1


def test_a_new_xid_restarts_the_period(node: Node) -> None:
    node.fake.inject_xid(5, 79)
    node.watcher.step(0)
    node.run_for(RECOVERY_S - PROBE_S)
    node.fake.inject_xid(5, 79)
    node.watcher.step(0)
    node.run_for(RECOVERY_S)
    assert node.unhealthy() == {5}
    node.run_for(PROBE_S)
    assert node.unhealthy() == set()


def test_failing_queries_keep_it_unhealthy_until_nvml_answers_again(node: Node) -> None:
    node.fake.set_device_error(2, pynvml.NVML_ERROR_GPU_IS_LOST)
    node.run_for(PROBE_S)
    assert node.unhealthy() == {2}
    assert node.state.reasons() == {UUIDS[2]: None}
    node.run_for(10 * RECOVERY_S)
    assert node.unhealthy() == {2}
    node.fake.set_device_error(2, None)
    node.run_for(RECOVERY_S)
    assert node.unhealthy() == {2}  # one probe to notice, then the full period
    node.run_for(PROBE_S)
    assert node.unhealthy() == set()


def test_a_flapping_gpu_never_recovers(node: Node) -> None:
    node.fake.set_device_error(6, pynvml.NVML_ERROR_GPU_IS_LOST)
    node.run_for(PROBE_S)
    for _ in range(20):
        node.fake.set_device_error(6, None)
        node.run_for(RECOVERY_S / 2)
        assert node.unhealthy() == {6}
        node.fake.set_device_error(6, pynvml.NVML_ERROR_GPU_IS_LOST)
        node.run_for(PROBE_S)
    assert node.unhealthy() == {6}


def test_event_wait_failure_marks_all_and_all_recover() -> None:
    node = Node()
    node.fake.errors["nvmlEventSetWait_v2"] = pynvml.NVML_ERROR_UNKNOWN
    assert node.watcher.step(0) is False
    assert node.unhealthy() == set(range(8))
    del node.fake.errors["nvmlEventSetWait_v2"]
    node.run_for(RECOVERY_S + PROBE_S)
    assert node.unhealthy() == set()
    node.watcher.close()


def test_a_gpu_that_could_not_be_registered_recovers_once_it_registers() -> None:
    fake = FakeNVML(TOPO, errors={"nvmlDeviceRegisterEvents": pynvml.NVML_ERROR_UNKNOWN})
    clock = Clock()
    state = HealthState(recovery_s=RECOVERY_S, clock=clock)
    watcher = HealthWatcher(fake, UUIDS[:1], lambda u, ok, x: state.report(u, ok, x),
                            probe_interval_s=PROBE_S, clock=clock)  # fmt: skip
    watcher.open()
    assert state.unhealthy() == {UUIDS[0]}
    for _ in range(30):  # registration keeps failing: stays unhealthy
        clock.advance(PROBE_S)
        watcher.step(0)
    assert state.unhealthy() == {UUIDS[0]}
    del fake.errors["nvmlDeviceRegisterEvents"]
    for _ in range(int(RECOVERY_S / PROBE_S) + 1):
        clock.advance(PROBE_S)
        watcher.step(0)
    assert state.unhealthy() == frozenset()
    fake.inject_xid(0, 48)  # and it is watched for XIDs again
    watcher.step(0)
    assert state.unhealthy() == {UUIDS[0]}
    watcher.close()


def test_recovery_zero_means_never() -> None:
    node = Node(recovery_s=0)
    node.fake.inject_xid(1, 48)
    node.watcher.step(0)
    node.run_for(100 * RECOVERY_S)
    assert node.unhealthy() == {1}
    node.watcher.close()


def test_list_and_watch_sends_the_recovery_at_once(node: Node, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The servicer's stream yields a new listing as soon as the state changes."""
    (tmp_path / "pods.json").write_text("[]")
    inventory = Inventory(TOPO, node.state, 256)
    allocator = Allocator(TOPO, "n1", FilePodSource(tmp_path / "pods.json"))
    stop = threading.Event()
    servicer = DevicePluginServicer(resource(RESOURCE_GPU), inventory, allocator, Metrics(), stop)

    class Context:
        def is_active(self) -> bool:
            return not stop.is_set()

    listings: queue.Queue[pb.ListAndWatchResponse] = queue.Queue()

    def stream() -> None:
        for response in servicer.ListAndWatch(pb.Empty(), Context()):  # type: ignore[arg-type]
            listings.put(response)

    def health_of(response: pb.ListAndWatchResponse) -> dict[str, str]:
        return {d.ID: d.health for d in response.devices}

    thread = threading.Thread(target=stream)
    thread.start()
    try:
        assert set(health_of(listings.get(timeout=10)).values()) == {HEALTHY}
        node.fake.inject_xid(4, 48)
        node.watcher.step(0)
        assert health_of(listings.get(timeout=10))[UUIDS[4]] == UNHEALTHY
        node.run_for(RECOVERY_S + PROBE_S)
        assert set(health_of(listings.get(timeout=10)).values()) == {HEALTHY}
        assert listings.empty()  # one listing per change, no more
    finally:
        stop.set()
        node.state.close()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_recovery_setting_default_and_validation() -> None:
    settings = load_settings({"node_name": "n1"})
    assert settings.health_recovery_s == DEFAULT_HEALTH_RECOVERY_S == 300
    assert load_settings({"node_name": "n1", "health_recovery_s": "0"}).health_recovery_s == 0
    from device_plugin.settings import SettingsError

    with pytest.raises(SettingsError, match="health-recovery-s"):
        load_settings({"node_name": "n1", "health_recovery_s": "-1"})
