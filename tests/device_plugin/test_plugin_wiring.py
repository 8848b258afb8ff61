"""The plugin's wiring, in process (mutation round 14, docs/testing.md): which settings reach
which piece — the kubelet's NUMA settings, the resources advertised, the memory notice, the
Allocator's and the inventory's knobs, the pod source, node sink, kubelet view and profile
sink chosen — and what start and stop refuse or clean up. ``test_plugin_process.py`` drives
the same plugin over its sockets, but in a child process mutmut does not see."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from device_plugin.api import api_pb2 as pb
from device_plugin.devices import RESOURCES
from device_plugin.identity import IdentityError
from device_plugin.kubelet_view import NoKubeletView, PodResourcesClient
from device_plugin.plugin import (
    PluginError,
    advertised_resources,
    memory_notice,
)
from device_plugin.pods import FilePodSource, KubePodSource
from device_plugin.profiling import ConfigMapProfileSink, FileProfileSink
from device_plugin.settings import load_settings
from gpunode.publish import FileNodePublisher, KubeNodePublisher
from localcluster.controlplane import free_port
from tests.device_plugin.helpers import MACHINE, bound_pod, decide
from tests.device_plugin.kubelet_stub import remove_tree, short_tmpdir, wait_for
from tests.device_plugin.test_kubelet_config import KUBELET_YAML
from tests.device_plugin.test_one_truth import build_plugin
from topology import catalog
from topology.colocation.profile import builtin_catalog
from topology.contract import (
    ANN_GPU_SHARED_SLOTS,
    ANN_UNHEALTHY_GPUS,
    ANN_VGPU_MEMORY_UNIT,
    LABEL_TOPOLOGY_MANAGER_POLICY,
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
)
from topology.numa_alignment import KubeletConfig
from topology.policies.base import NodeState, Request, SharedRequest
from topology.policies.evaluate import Evaluator

CORE, MEM = RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY


# ------------------------------------------------------------------------- kubelet settings
def test_the_plugins_kubelet_settings_win_over_the_kubelets_file_one_by_one(
    tmp_path: Path,
) -> None:
    f = tmp_path / "config.yaml"
    f.write_text(KUBELET_YAML)  # restricted, pod, static, prefer-closest-numa-nodes
    plugin = build_plugin("dgx1-v100", tmp_path, kubelet_config_file=str(f))
    assert plugin.kubelet == KubeletConfig("restricted", "pod", "static", prefer_closest_numa=True)
    assert plugin.kubelet_source == str(f)
    plugin = build_plugin(
        "dgx1-v100",
        tmp_path,
        kubelet_config_file=str(f),
        kubelet_topology_manager_policy="best-effort",
        kubelet_topology_manager_scope="container",
        kubelet_cpu_manager_policy="none",
    )
    assert plugin.kubelet == KubeletConfig(
        "best-effort", "container", "none", prefer_closest_numa=True
    )
    assert plugin.kubelet_source == "setting"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Pod\n", r"^kubelet config file .*config.yaml holds a Pod, not a "
                        r"KubeletConfiguration$"),
        ("topologyManagerPolicy: sometimes\n", r"^topologyManagerPolicy 'sometimes' is not one "
                                               r"of "),
    ],
)
def test_an_unusable_kubelet_file_stops_the_plugin_with_its_reason(
    tmp_path: Path, text: str, message: str
) -> None:
    f = tmp_path / "config.yaml"
    f.write_text(text)
    with pytest.raises(PluginError, match=message):
        build_plugin("dgx1-v100", tmp_path, kubelet_config_file=str(f))


# ------------------------------------------------------------------------- resources
def test_shared_slots_zero_and_only_zero_drops_the_shared_resource() -> None:
    topo = catalog.get("dgx1-v100")
    without = tuple(r for r in RESOURCES if r.name != RESOURCE_GPU_SHARED)
    assert advertised_resources(topo, 0) == without
    assert advertised_resources(topo, 1) == RESOURCES
    assert advertised_resources(topo) == RESOURCES


# ------------------------------------------------------------------------- memory notice
def _unknown(topo_name: str, gpus: list[int], name: str) -> object:
    topo = catalog.get(topo_name)
    return replace(topo, gpus=tuple(
        replace(g, memory_mib=0, name=name) if g.index in gpus else g for g in topo.gpus
    ))  # fmt: skip


def test_the_memory_notice_names_the_source_the_model_and_the_gpus() -> None:
    nvml = load_settings({"node_name": "n1"})
    fake = load_settings({"node_name": "n1", "fake_topology": "some.json"})
    every = _unknown("dgx1-v100", list(range(8)), "")
    assert memory_notice(every, nvml) == (  # type: ignore[arg-type]
        "GPU memory unknown for every GPU (NVML gives no memory, the catalog does not know the "
        "GPU model (unnamed) and --gpu-memory-mib is not set): gputopo.io/vgpu-memory is not "
        "advertised; set --gpu-memory-mib (GPUTOPO_DP_GPU_MEMORY_MIB) to advertise it"
    )
    some = _unknown("dgx1-v100", [2, 5], "Mystery GPU")
    assert memory_notice(some, fake) == (  # type: ignore[arg-type]
        "GPU memory unknown for GPUs 2,5 (some.json gives no memory, the catalog does not know "
        "the GPU model Mystery GPU and --gpu-memory-mib is not set): they get no "
        "gputopo.io/vgpu-memory devices; set --gpu-memory-mib to give them some"
    )
    assert memory_notice(catalog.get("dgx1-v100"), nvml) is None


# ------------------------------------------------------------------------- what is built
def _plugin(tmp_path: Path, pods: list[dict] | None = None, **flags: object):  # type: ignore[no-untyped-def]
    (tmp_path / "pods.json").write_text(json.dumps(pods or []))
    return build_plugin("dgx1-v100", tmp_path, **flags)


def test_the_allocator_serves_this_nodes_pods_with_the_plugins_settings(tmp_path: Path) -> None:
    topo = catalog.get(MACHINE)
    frac = decide(topo, NodeState(), Request(count=0, core_percent=20, memory_mib=4096))
    profile = builtin_catalog()["vgg19:64"]
    shared = SharedRequest(profile, profile.gpu_memory_mib, name="default/s")
    slot = Evaluator().place("gputopo", topo, NodeState().with_allocation(frac),
                             Request(count=1, shared=shared))
    plugin = _plugin(
        tmp_path,
        [bound_pod("f", frac, limits={CORE: 20, MEM: 8}),
         bound_pod("s", slot, limits={RESOURCE_GPU_SHARED: 1})],
        vgpu_memory_unit_mib=512,
        mps_pipe_dir="/x/pipe",
        mps_shm_dir="/x/shm",
        allocate_wait_s=0,
    )
    got = plugin.allocator.allocate(MEM, [f"{frac.uuids[0]}::mem-{i}" for i in range(8)])
    assert got.pod.key == "default/f"
    assert got.grant.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/x/pipe"
    got = plugin.allocator.allocate(RESOURCE_GPU_SHARED, [f"{slot.uuids[0]}::slot-0"])
    assert got.pod.key == "default/s"
    assert ("/dev/shm", "/x/shm", False) in got.grant.mounts
    # fake topology: GPU i is /dev/nvidia<i>; every node listed unless told to omit missing
    assert got.grant.devices[0][1] == f"/dev/nvidia{slot.gpus[0]}"
    with pytest.raises(IdentityError, match="no pod on node n1 is waiting"):
        plugin.allocator.allocate(MEM, [f"{frac.uuids[0]}::mem-{i}" for i in range(8)])
    assert plugin.metrics.allocate_errors.labels(MEM)._value.get() == 1


def test_missing_device_nodes_are_omitted_when_asked(tmp_path: Path) -> None:
    topo = catalog.get(MACHINE)
    d = decide(topo, NodeState(), Request(count=1))
    plugin = _plugin(tmp_path, [bound_pod("p", d)], omit_missing_device_nodes=True,
                     allocate_wait_s=0)
    got = plugin.allocator.allocate(RESOURCE_GPU, list(d.uuids))
    assert all(Path(h).exists() for _c, h, _p in got.grant.devices)
    assert got.grant.envs["CUDA_VISIBLE_DEVICES"] == d.uuids[0]


def test_the_inventory_servers_and_gauges_follow_the_settings(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, shared_slots=2, vgpu_memory_unit_mib=512, health_recovery_s=7.5,
                     device_plugin_dir=str(tmp_path / "dp"))
    per_gpu = 16160 // 512
    gauges = {r.name: plugin.metrics.devices.labels(r.name)._value.get() for r in RESOURCES}
    assert gauges == {RESOURCE_GPU: 8, CORE: 800, MEM: 8 * per_gpu, RESOURCE_GPU_SHARED: 16}
    healthy = {r.name: plugin.metrics.healthy.labels(r.name)._value.get() for r in RESOURCES}
    assert healthy == gauges
    assert [(s.spec.name, s.socket_path) for s in plugin.servers] == [
        (r.name, tmp_path / "dp" / r.socket) for r in RESOURCES
    ]
    assert plugin.health.recovery_s == 7.5
    no_slots = _plugin(tmp_path, shared_slots=0)
    assert RESOURCE_GPU_SHARED not in {s.spec.name for s in no_slots.servers}


def test_the_node_is_published_with_the_plugins_settings(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, shared_slots=2, vgpu_memory_unit_mib=512,
                     kubelet_topology_manager_policy="single-numa-node", publish_interval_s=42,
                     watch_interval_s=0.5, device_plugin_dir=str(tmp_path / "dp"))
    plugin.health.set_health(catalog.get(MACHINE).gpus[3].uuid, False, xid=79)
    meta = plugin.publish_loop.make()
    assert meta.annotations[ANN_UNHEALTHY_GPUS] == "3"
    assert meta.annotations[ANN_VGPU_MEMORY_UNIT] == "512"
    assert meta.annotations[ANN_GPU_SHARED_SLOTS] == "2"
    assert meta.labels[LABEL_TOPOLOGY_MANAGER_POLICY] == "single-numa-node"
    assert plugin.publish_loop.node == "n1" and plugin.publish_loop.interval_s == 42
    assert plugin.watcher.interval_s == 0.5
    assert plugin.watcher.kubelet_socket == tmp_path / "dp" / "kubelet.sock"
    assert plugin.watcher.servers == plugin.servers


def test_the_pieces_built_for_file_sources_and_sinks(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, dcgm_exporter_url="http://dcgm:9400/metrics",
                     profile_sink=f"file:{tmp_path / 'profiles.json'}", profile_interval_s=3,
                     profile_window=4, pod_resources_socket="")
    assert isinstance(plugin.pods, FilePodSource)
    assert plugin.pods.path == tmp_path / "pods.json"
    assert isinstance(plugin.publisher, FileNodePublisher)
    assert plugin.publisher.path == tmp_path / "n.json"
    assert isinstance(plugin.view, NoKubeletView)
    assert isinstance(plugin.profile_sink, FileProfileSink)
    assert plugin.profile_sink.path == tmp_path / "profiles.json"
    loop = plugin.profile_loop
    assert loop is not None
    assert (loop.url, loop.node, loop.pods, loop.sink, loop.interval_s) == (
        "http://dcgm:9400/metrics", "n1", plugin.pods, plugin.profile_sink, 3)
    assert loop.recorder.window == 4
    assert _plugin(tmp_path).profile_loop is None  # no exporter: nothing measured


def test_the_kubelets_pod_resources_socket_is_read_when_set(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, pod_resources_socket=str(tmp_path / "pr.sock"))
    assert isinstance(plugin.view, PodResourcesClient)
    assert plugin.view.socket_path == str(tmp_path / "pr.sock")
    assert plugin.allocator.view is plugin.view


def test_each_resources_device_stream_follows_health_and_ends_when_the_plugin_stops(
    tmp_path: Path,
) -> None:
    plugin = _plugin(tmp_path)
    servicer = plugin.servers[0].servicer
    assert servicer.spec.name == RESOURCE_GPU
    stream = servicer.ListAndWatch(pb.Empty(), SimpleNamespace(is_active=lambda: True))
    first = next(stream)
    assert [d.health for d in first.devices] == ["Healthy"] * 8
    plugin.health.set_health(catalog.get(MACHINE).gpus[6].uuid, False, xid=79)
    second = next(stream)
    assert [d.health for d in second.devices].index("Unhealthy") == 6
    plugin.stop_event.set()
    assert list(stream) == []  # the stream ends (within one health wait)


KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_kubernetes_sources_and_sinks_share_one_api_client(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    plugin = build_plugin("dgx1-v100", tmp_path, kubeconfig=str(kubeconfig),
                          pod_source="kubernetes", node_sink="kubernetes", api_timeout_s=7,
                          dcgm_exporter_url="http://dcgm:9400/metrics",
                          profile_sink="configmap:gputopo/profiles")
    assert isinstance(plugin.pods, KubePodSource)
    assert isinstance(plugin.publisher, KubeNodePublisher)
    assert isinstance(plugin.profile_sink, ConfigMapProfileSink)
    assert plugin.pods.api is plugin.publisher.api is plugin.profile_sink.api
    assert plugin.pods.api.api_client.configuration.host == "https://127.0.0.1:1"
    assert plugin.pods.timeout_s == plugin.publisher.timeout_s == 7
    assert (plugin.profile_sink.namespace, plugin.profile_sink.name) == ("gputopo", "profiles")
    assert plugin.profile_sink.timeout_s == 7


def test_an_unusable_kubeconfig_stops_the_plugin(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("not: a kubeconfig\n")
    with pytest.raises(PluginError, match=rf"^cannot load kubeconfig {bad}: "):
        build_plugin("dgx1-v100", tmp_path, kubeconfig=str(bad), pod_source="kubernetes")


# ------------------------------------------------------------------------- start and stop
@pytest.fixture
def short() -> Iterator[Path]:
    d = short_tmpdir()
    yield d
    remove_tree(d)


def test_start_refuses_a_missing_device_plugin_directory(short: Path) -> None:
    plugin = _plugin(short, device_plugin_dir=str(short / "nowhere"))
    with pytest.raises(PluginError, match=rf"^device-plugin directory {short}/nowhere does not "
                                          r"exist$"):
        plugin.start()


def test_start_serves_metrics_and_stop_removes_everything_it_made(short: Path) -> None:
    (short / "dp").mkdir()
    port = free_port()
    plugin = _plugin(short, device_plugin_dir=str(short / "dp"), metrics_port=port,
                     metrics_host="127.0.0.1")
    closed: list[bool] = []
    plugin.view = SimpleNamespace(close=lambda: closed.append(True), snapshot=lambda: None)
    plugin.start()
    try:
        for s in plugin.servers:
            assert s.socket_path.exists()
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        assert b'gputopo_dp_devices{resource="nvidia.com/gpu"} 8.0' in body
    finally:
        plugin.stop()
    assert not any(s.socket_path.exists() for s in plugin.servers)
    assert closed == [True]
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
    plugin.stop()  # idempotent
    assert closed == [True, True]


def test_the_metrics_endpoint_listens_only_on_the_host_given(short: Path) -> None:
    """``metrics_host`` 127.0.0.1: the endpoint answers there and refuses 127.0.0.2 (another
    loopback address), which it would answer if it listened on every interface."""
    (short / "dp").mkdir()
    port = free_port()
    plugin = _plugin(short, device_plugin_dir=str(short / "dp"), metrics_port=port,
                     metrics_host="127.0.0.1")
    plugin.start()
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        with pytest.raises(OSError):  # refused (or, where 127.0.0.2 is not local, unreachable)
            socket.create_connection(("127.0.0.2", port), timeout=10).close()
    finally:
        plugin.stop()


def test_a_metrics_port_in_use_stops_the_start(short: Path) -> None:
    (short / "dp").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        plugin = _plugin(short, device_plugin_dir=str(short / "dp"), metrics_port=port,
                         metrics_host="127.0.0.1")
        with pytest.raises(PluginError, match=rf"^metrics port {port}: Address already in use$"):
            plugin.start()


def test_a_socket_that_cannot_be_made_stops_the_start_and_cleans_up(short: Path) -> None:
    (short / "dp").mkdir()
    last = RESOURCES[-1]
    (short / "dp" / last.socket).mkdir()  # a directory where the last socket goes
    plugin = _plugin(short, device_plugin_dir=str(short / "dp"))
    with pytest.raises(PluginError, match=rf"{last.socket}"):
        plugin.start()
    assert not any(s.socket_path.exists() for s in plugin.servers[:-1])
    assert plugin.stop_event.is_set()



def test_a_socket_path_too_long_to_bind_stops_the_start_in_one_line(short: Path) -> None:
    """A device-plugin directory so deep that its socket paths pass the 107 characters a unix
    socket can be bound to: gRPC refuses the bind (grpcio raises ``RuntimeError`` there,
    where it once returned 0) and the start says so in one line — a :class:`PluginError`, not
    a traceback."""
    deep = short / ("d" * (110 - len(str(short))))
    deep.mkdir()
    plugin = _plugin(short, device_plugin_dir=str(deep))
    with pytest.raises(PluginError, match=r"^cannot listen on .*: a unix socket path has at "
                                          r"most 107 characters, this one 1\d\d$"):
        plugin.start()
    assert plugin.stop_event.is_set()


def _with_xid_file(short: Path, **flags: object):  # type: ignore[no-untyped-def]
    """A plugin on ``short`` whose fake NVML reads XID lines from ``short/xids`` (empty), and
    that file."""
    (short / "dp").mkdir()
    xids = short / "xids"
    xids.write_text("")
    return _plugin(short, device_plugin_dir=str(short / "dp"), fake_xid_file=str(xids),
                   **flags), xids


def test_a_started_plugin_publishes_its_node_and_an_xid_at_once(short: Path) -> None:
    plugin, xids = _with_xid_file(short, publish_interval_s=3600)
    node = short / "n.json"
    plugin.start()
    try:
        wait_for(lambda: node.exists() and json.loads(node.read_text())["node"] == "n1")
        with xids.open("a") as f:
            f.write("5 79\n")
        wait_for(lambda: json.loads(node.read_text())["annotations"][ANN_UNHEALTHY_GPUS] == "5")
        assert plugin.inventory.listing(RESOURCE_GPU)[5][1] is False
    finally:
        plugin.stop()


def test_a_real_node_reads_its_device_minors_from_proc_and_a_fake_one_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from device_plugin import plugin as plugin_module
    from device_plugin.plugin import DevicePlugin

    asked: list[Path | None] = []

    def minors(topology, proc):  # type: ignore[no-untyped-def]
        asked.append(proc)
        return {g.index: 10 + g.index for g in topology.gpus}

    monkeypatch.setattr(plugin_module, "minor_numbers", minors)
    topo = catalog.get(MACHINE)
    d = decide(topo, NodeState(), Request(count=1))
    fake = _plugin(tmp_path, [bound_pod("p", d)], allocate_wait_s=0)
    assert asked == [None]
    got = fake.allocator.allocate(RESOURCE_GPU, list(d.uuids))
    assert got.grant.devices[0][1] == f"/dev/nvidia{10 + d.gpus[0]}"
    real = load_settings({"node_name": "n1", "pod_source": f"file:{tmp_path / 'pods.json'}",
                          "node_sink": f"file:{tmp_path / 'n.json'}", "metrics_port": 0})
    DevicePlugin(real, None, topo, fake.pods, fake.publisher, NoKubeletView())
    assert asked == [None, Path("/proc")]


def test_a_plugin_without_a_closable_kubelet_view_stops(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, pod_resources_socket="")
    assert not hasattr(plugin.view, "close")
    plugin.stop()
    assert plugin.stop_event.is_set()


def test_a_started_plugin_probes_its_gpus_and_marks_a_lost_one(short: Path) -> None:
    plugin, xids = _with_xid_file(short, health_probe_interval_s=0.05)
    lost = catalog.get(MACHINE).gpus[2].uuid
    plugin.start()
    try:
        with xids.open("a") as f:
            f.write("2 lost\n")  # the fake NVML fails the device; only a probe notices
        wait_for(lambda: lost in plugin.health.unhealthy())
        assert plugin.health.unhealthy() == {lost}
    finally:
        plugin.stop()
