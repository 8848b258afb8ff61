"""The real plugin process (``gputopo device-plugin --fake-topology dgx1-v100``) driven over
its sockets by the kubelet stand-in, like the kubelet drives it.

Test-only plugin options used here (hidden from ``--help``): ``--pod-source file:PATH`` (pods
from a JSON file this test writes), ``--node-sink file:PATH`` (published node metadata written
to a file), ``--fake-xid-file PATH`` (lines ``<gpu> <xid>`` injected into the fake NVML),
``--watch-interval`` (kubelet.sock poll period).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from device_plugin.api import api_pb2 as pb
from device_plugin.identity import ANN_ALLOCATED, parse_record
from localcluster.controlplane import free_port
from tests.device_plugin.helpers import MACHINE, NODE, bound_pod, decide
from tests.device_plugin.kubelet_stub import KubeletStub, remove_tree, short_tmpdir, wait_for
from topology import catalog, serialization
from topology.colocation.profile import builtin_catalog
from topology.contract import (
    ANN_GPU_SHARED_SLOTS,
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
)
from topology.policies.base import NodeState, Request, SharedRequest

RESOURCES = (RESOURCE_GPU, RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY, RESOURCE_GPU_SHARED)
TOPO = catalog.get(MACHINE)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
pytestmark = pytest.mark.timeout(120)


def gputopo_command() -> list[str]:
    exe = Path(sys.executable).parent / "gputopo"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "gputopo_cli.main"]


class PluginProcess:
    """One plugin process and the files it reads and writes."""

    def __init__(self, workdir: Path, kubelet: KubeletStub) -> None:
        self.dir = workdir
        self.kubelet = kubelet
        self.pods_file = workdir / "pods.json"
        self.patches_file = workdir / "pods.json.patches.json"
        self.node_file = workdir / "node.json"
        self.xid_file = workdir / "xids"
        self.log = workdir / "plugin.log"
        self.metrics_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.set_pods([])
        self.xid_file.write_text("")

    def set_pods(self, pods: list[dict[str, Any]]) -> None:
        tmp = self.pods_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(pods))
        os.replace(tmp, self.pods_file)

    def start(self, *extra: str, oracle: bool = True, machine: str = MACHINE) -> None:
        args = gputopo_command() + [
            "device-plugin", "--fake-topology", machine, "--device-plugin-dir", str(self.dir),
            "--node-name", NODE, "--pod-source", f"file:{self.pods_file}",
            "--node-sink", f"file:{self.node_file}", "--fake-xid-file", str(self.xid_file),
            "--metrics-port", str(self.metrics_port), "--metrics-host", "127.0.0.1",
            "--watch-interval", "0.2", "--allocate-wait", "0.2",
            "--pod-resources-socket", str(self.kubelet.pod_resources_socket) if oracle else "",
            *extra,
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def tail(self) -> str:
        return "\n".join(self.log.read_text().splitlines()[-40:]) if self.log.exists() else ""

    def patches(self) -> dict[str, Any]:
        return json.loads(self.patches_file.read_text()) if self.patches_file.exists() else {}

    def node(self) -> dict[str, Any]:
        try:
            return json.loads(self.node_file.read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read().decode()


@pytest.fixture
def env() -> Iterator[tuple[KubeletStub, PluginProcess]]:
    workdir = short_tmpdir()
    kubelet = KubeletStub(workdir)
    kubelet.start()
    plugin = PluginProcess(workdir, kubelet)
    try:
        yield kubelet, plugin
    except BaseException:
        print(plugin.tail())
        raise
    finally:
        if plugin.proc is not None and plugin.proc.poll() is None:
            plugin.stop()
        kubelet.stop()
        remove_tree(workdir)


def start_and_watch(kubelet: KubeletStub, plugin: PluginProcess, oracle: bool = True) -> None:
    plugin.start(oracle=oracle)
    try:
        kubelet.wait_registered(RESOURCES)
    except TimeoutError:
        raise AssertionError(f"plugin did not register:\n{plugin.tail()}") from None
    for r in RESOURCES:
        kubelet.watch(r)
    kubelet.wait_devices(RESOURCE_GPU, lambda ds: len(ds) == 8)
    for r in RESOURCES:  # a kubelet with no device list of a resource yet would ask for none
        kubelet.wait_devices(r, lambda ds: len(ds) > 0)


def rpc_error(call: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


# ---------------------------------------------------------------------------------------------
def test_registers_lists_devices_with_numa_and_publishes_topology(env) -> None:  # type: ignore[no-untyped-def]
    kubelet, plugin = env
    start_and_watch(kubelet, plugin)
    regs = kubelet.wait_registered(RESOURCES)
    for r in RESOURCES:
        assert regs[r].version == "v1beta1"
        assert regs[r].options.get_preferred_allocation_available
        assert regs[r].options.pre_start_required
        assert (plugin.dir / regs[r].endpoint).is_socket()
    assert len({regs[r].endpoint for r in RESOURCES}) == 4
    opts = kubelet.client(RESOURCE_GPU).GetDevicePluginOptions(pb.Empty(), timeout=5)
    assert opts.get_preferred_allocation_available and opts.pre_start_required

    gpus = kubelet.wait_devices(RESOURCE_GPU, lambda ds: len(ds) == 8)
    assert [d.ID for d in gpus] == [g.uuid for g in TOPO.gpus]
    assert [[n.ID for n in d.topology.nodes] for d in gpus] == [[g.numa_node] for g in TOPO.gpus]
    assert {d.health for d in gpus} == {"Healthy"}
    core = kubelet.wait_devices(RESOURCE_VGPU_CORE, lambda ds: len(ds) == 800)
    assert core[0].ID == f"{TOPO.gpus[0].uuid}::core-0"
    assert core[799].topology.nodes[0].ID == 1
    mem = kubelet.wait_devices(RESOURCE_VGPU_MEMORY, lambda ds: len(ds) == 8 * (16160 // 256))
    assert mem[-1].ID == f"{TOPO.gpus[7].uuid}::mem-62"
    slots = kubelet.wait_devices(RESOURCE_GPU_SHARED, lambda ds: len(ds) == 8 * 3)
    assert slots[-1].ID == f"{TOPO.gpus[7].uuid}::slot-2"

    node = wait_for(lambda: plugin.node().get("annotations") and plugin.node())
    assert node["node"] == NODE
    assert node["annotations"]["gputopo.io/topology"] == serialization.dumps(TOPO)
    assert node["labels"] == {
        "gputopo.io/gpu-model": "Tesla-V100-SXM2-16GB",
        "gputopo.io/topology-class": TOPO.topology_class,
        # the kubelet's defaults: no --kubelet-* setting and no kubelet config file
        "gputopo.io/topology-manager-policy": "none",
        "gputopo.io/topology-manager-scope": "container",
        "gputopo.io/cpu-manager-policy": "none",
        "gputopo.io/topology-manager-prefer-closest-numa": "false",
    }
    assert node["annotations"]["gputopo.io/vgpu-memory-unit-mib"] == "256"
    assert node["annotations"][ANN_GPU_SHARED_SLOTS] == "3"


def test_a_topo_matrix_text_publishes_what_topology_show_prints(env) -> None:  # type: ignore[no-untyped-def]
    """The documented way to model one's own machine: a saved `nvidia-smi topo -m` (no bus
    ids, NIC rows, NUMA columns, no GPU memory)."""
    kubelet, plugin = env
    text = str(FIXTURES / "dgx1-v100-driver535.txt")
    plugin.start(machine=text)
    kubelet.wait_registered((RESOURCE_GPU, RESOURCE_VGPU_CORE))
    kubelet.watch(RESOURCE_GPU)
    gpus = kubelet.wait_devices(RESOURCE_GPU, lambda ds: len(ds) == 8)
    shown = subprocess.run(gputopo_command() + ["topology", "show", text, "--output", "json"],
                           capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    node = wait_for(lambda: plugin.node().get("annotations") and plugin.node())
    assert node["annotations"]["gputopo.io/topology"] == shown
    published = serialization.loads(shown)
    assert [d.ID for d in gpus] == [g.uuid for g in published.gpus]
    assert all(published.nvlinks(i, j) == TOPO.nvlinks(i, j)
               for i in range(8) for j in range(8) if i != j)  # fmt: skip
    # memory unknown: said at start-up, and no vgpu-memory resource at all (not zero devices)
    assert "GPU memory unknown for every GPU" in plugin.log.read_text()
    assert RESOURCE_VGPU_MEMORY not in {r.resource_name for r in kubelet.registrations}
    text_metrics = plugin.metrics()
    assert 'gputopo_dp_devices{resource="gputopo.io/vgpu-core"} 800.0' in text_metrics
    assert 'resource="gputopo.io/vgpu-memory"' not in text_metrics


def test_whole_and_fractional_pods_get_their_assignment(env) -> None:  # type: ignore[no-untyped-def]
    kubelet, plugin = env
    whole = decide(TOPO, NodeState(), Request(count=4))
    state = NodeState().with_allocation(whole)
    frac = decide(TOPO, state, Request(count=0, core_percent=30, memory_mib=4096))
    plugin.set_pods([
        bound_pod("train", whole),
        bound_pod("infer", frac, limits={RESOURCE_VGPU_CORE: 30, RESOURCE_VGPU_MEMORY: 16}),
    ])  # fmt: skip
    start_and_watch(kubelet, plugin)

    got = kubelet.admit_pod("default", "train", {RESOURCE_GPU: 4})[RESOURCE_GPU]
    assert got.envs["CUDA_VISIBLE_DEVICES"] == ",".join(whole.uuids)
    assert got.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(whole.uuids)
    assert got.envs["GPUTOPO_CPU_AFFINITY"] == whole.cpu_affinity
    assert [d.host_path for d in got.devices][:4] == [f"/dev/nvidia{g}" for g in whole.gpus]
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} <= {
        d.host_path for d in got.devices
    }

    got = kubelet.admit_pod("default", "infer", {RESOURCE_VGPU_CORE: 30, RESOURCE_VGPU_MEMORY: 16})
    for res in (RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY):
        assert got[res].envs["CUDA_VISIBLE_DEVICES"] == frac.uuids[0]
        assert got[res].envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
        assert got[res].envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
        assert [m.host_path for m in got[res].mounts] == ["/run/nvidia/mps"]
    units = kubelet.assigned[("default", "infer", "main", RESOURCE_VGPU_CORE)]
    assert len(units) == 30 and {u.split("::")[0] for u in units} == {frac.uuids[0]}

    patches = plugin.patches()
    assert parse_record(patches["default/train"][ANN_ALLOCATED]) == {
        RESOURCE_GPU: {"main": list(whole.uuids)}
    }
    assert set(parse_record(patches["default/infer"][ANN_ALLOCATED])) == {
        RESOURCE_VGPU_CORE,
        RESOURCE_VGPU_MEMORY,
    }

    text = plugin.metrics()
    assert 'gputopo_dp_devices{resource="nvidia.com/gpu"} 8.0' in text
    assert 'gputopo_dp_healthy_devices{resource="gputopo.io/vgpu-core"} 800.0' in text
    assert 'gputopo_dp_allocate_seconds_count{resource="nvidia.com/gpu"} 1.0' in text
    assert 'gputopo_dp_registrations_total{resource="nvidia.com/gpu"} 1.0' in text


def test_colocation_slots_get_the_mps_environment(env) -> None:  # type: ignore[no-untyped-def]
    """Co-location slots over the real gRPC API: each container gets its one GPU, the MPS
    pipe directory and shared memory, and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from its
    gputopo.io/vgpu-memory request; two slots of one GPU are distinct devices."""
    from topology.policies.evaluate import Evaluator

    kubelet, plugin = env
    cat = builtin_catalog()
    place = Evaluator().place

    def slot(name: str, key: str, mem_units: int | None, state: NodeState) -> Any:
        prof = cat[key]
        memory = mem_units * 256 if mem_units else prof.gpu_memory_mib
        return place("gputopo", TOPO, state, Request(count=1, shared=SharedRequest(
            prof, memory, name=f"default/{name}")))

    a = slot("a", "vgg19:64", 16, NodeState())
    state = NodeState().with_allocation(a)
    b = slot("b", "vgg11:64", None, state)
    assert b.gpus == a.gpus  # gputopo packs the two light jobs on one GPU
    shm = plugin.dir / "mps-shm"
    plugin.set_pods([
        bound_pod("a", a, limits={RESOURCE_GPU_SHARED: 1, RESOURCE_VGPU_MEMORY: 16}),
        bound_pod("b", b, limits={RESOURCE_GPU_SHARED: 1}),
    ])  # fmt: skip
    plugin.start("--mps-pipe-dir", "/run/gputopo/mps-pipe", "--mps-shm-dir", str(shm))
    kubelet.wait_registered(RESOURCES)
    for r in RESOURCES:
        kubelet.watch(r)
    kubelet.wait_devices(RESOURCE_GPU_SHARED, lambda ds: len(ds) == 24)
    # pod a asks vgpu-memory too: a kubelet with no device list of it yet would ask for none
    kubelet.wait_devices(RESOURCE_VGPU_MEMORY, lambda ds: len(ds) == 8 * (16160 // 256))

    got = kubelet.admit_pod("default", "a", {RESOURCE_GPU_SHARED: 1, RESOURCE_VGPU_MEMORY: 16})
    for res in (RESOURCE_GPU_SHARED, RESOURCE_VGPU_MEMORY):
        envs = got[res].envs
        assert envs["CUDA_VISIBLE_DEVICES"] == a.uuids[0]
        assert envs["NVIDIA_VISIBLE_DEVICES"] == a.uuids[0]
        assert envs["CUDA_MPS_PIPE_DIRECTORY"] == "/run/gputopo/mps-pipe"
        assert envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
        assert envs["GPUTOPO_PROFILE"] == "vgg19:64"
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in envs
        mounts = {(m.container_path, m.host_path) for m in got[res].mounts}
        assert mounts == {("/run/gputopo/mps-pipe", "/run/gputopo/mps-pipe"),
                          ("/dev/shm", str(shm))}
        assert [d.host_path for d in got[res].devices][0] == f"/dev/nvidia{a.gpus[0]}"
    got_b = kubelet.admit_pod("default", "b", {RESOURCE_GPU_SHARED: 1})[RESOURCE_GPU_SHARED]
    assert got_b.envs["CUDA_VISIBLE_DEVICES"] == a.uuids[0]
    mib = cat["vgg11:64"].gpu_memory_mib  # no vgpu-memory request: the profile's memory
    assert got_b.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={mib}M"
    slot_a = kubelet.assigned[("default", "a", "main", RESOURCE_GPU_SHARED)]
    slot_b = kubelet.assigned[("default", "b", "main", RESOURCE_GPU_SHARED)]
    assert len(slot_a) == len(slot_b) == 1 and slot_a != slot_b
    assert {s.split("::")[0] for s in slot_a | slot_b} == {a.uuids[0]}
    assert set(parse_record(plugin.patches()["default/a"][ANN_ALLOCATED])) == {
        RESOURCE_GPU_SHARED, RESOURCE_VGPU_MEMORY}


def test_a_shared_request_without_a_slot_assignment_is_refused(env) -> None:  # type: ignore[no-untyped-def]
    """A pod asking for a slot whose assignment is a whole GPU is refused, naming it."""
    kubelet, plugin = env
    whole = decide(TOPO, NodeState(), Request(count=1))
    plugin.set_pods([bound_pod("odd", whole, limits={RESOURCE_GPU_SHARED: 1})])
    start_and_watch(kubelet, plugin)
    kubelet.wait_devices(RESOURCE_GPU_SHARED, lambda ds: len(ds) == 24)
    err = rpc_error(lambda: kubelet.admit_pod("default", "odd", {RESOURCE_GPU_SHARED: 1}))
    assert "default/odd" in (err.details() or "")
    assert "not a co-location slot" in (err.details() or "")


@pytest.mark.parametrize("oracle", [True, False], ids=["pod-resources", "creation-order"])
def test_two_same_size_pods_in_flight_get_their_own_gpus(env, oracle: bool) -> None:  # type: ignore[no-untyped-def]
    kubelet, plugin = env
    d1 = decide(TOPO, NodeState(), Request(count=2))
    d2 = decide(TOPO, NodeState.whole(d1.gpus), Request(count=2))
    plugin.set_pods([
        bound_pod("first", d1, created="2026-01-01T00:00:00Z"),
        bound_pod("second", d2, created="2026-01-01T00:00:01Z"),
    ])  # fmt: skip
    start_and_watch(kubelet, plugin, oracle=oracle)
    # With the pod-resources API the kubelet may admit them in any order (here: the newer
    # first); without it the plugin relies on the kubelet's creation-time order.
    order = ["second", "first"] if oracle else ["first", "second"]
    seen = {}
    for name in order:
        seen[name] = kubelet.admit_pod("default", name, {RESOURCE_GPU: 2})[RESOURCE_GPU]
    assert seen["first"].envs["CUDA_VISIBLE_DEVICES"] == ",".join(d1.uuids)
    assert seen["second"].envs["CUDA_VISIBLE_DEVICES"] == ",".join(d2.uuids)
    assert seen["first"].envs["GPUTOPO_POD"] == "default/first"


def test_missing_or_garbled_annotations_fail_naming_the_pod(env) -> None:  # type: ignore[no-untyped-def]
    kubelet, plugin = env
    d = decide(TOPO, NodeState(), Request(count=1))
    garbled = bound_pod("garbled", d, extra_annotations={"gputopo.io/gpu-indices": "zero"})
    bare = bound_pod("bare", d, created="2026-01-02T00:00:00Z")
    bare["metadata"]["annotations"] = {}
    plugin.set_pods([garbled, bare])
    start_and_watch(kubelet, plugin)

    err = rpc_error(lambda: kubelet.admit_pod("default", "garbled", {RESOURCE_GPU: 1}))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "pod default/garbled (container main)" in err.details()
    assert "gputopo.io/gpu-indices" in err.details()
    kubelet.forget_pod("default", "garbled")
    plugin.set_pods([bare])
    err = rpc_error(lambda: kubelet.admit_pod("default", "bare", {RESOURCE_GPU: 1}))
    assert (
        "pod default/bare (container main) has no gputopo.io/gpu-uuids annotation" in err.details()
    )
    # Allocate called directly (the kubelet skipped GetPreferredAllocation) fails the same way.
    err = rpc_error(lambda: kubelet.admit_container("default", "bare", "main", RESOURCE_GPU, 1,
                                                    override=[TOPO.gpus[0].uuid]))  # fmt: skip
    assert "pod default/bare" in err.details()
    assert "gputopo_dp_allocate_errors_total" in plugin.metrics()


def test_kubelet_restart_makes_the_plugin_register_again(env) -> None:  # type: ignore[no-untyped-def]
    kubelet, plugin = env
    d = decide(TOPO, NodeState(), Request(count=2))
    plugin.set_pods([bound_pod("after-restart", d)])
    start_and_watch(kubelet, plugin)
    # restart() deletes every socket in the directory and clears the registrations; the
    # plugin may re-create its sockets under the same names before restart() even returns, so
    # what is checked is that it registers again and serves from its new sockets
    kubelet.restart()
    regs = kubelet.wait_registered(RESOURCES, timeout=20)
    for r in RESOURCES:
        assert (plugin.dir / regs[r].endpoint).is_socket()
        kubelet.watch(r)
    kubelet.wait_devices(RESOURCE_GPU, lambda ds: len(ds) == 8)
    got = kubelet.admit_pod("default", "after-restart", {RESOURCE_GPU: 2})[RESOURCE_GPU]
    assert got.envs["CUDA_VISIBLE_DEVICES"] == ",".join(d.uuids)


def test_a_restarted_plugin_remembers_what_it_allocated(env) -> None:  # type: ignore[no-untyped-def]
    """Without the pod-resources view, only the gputopo.io/allocated annotation tells a new
    plugin process that the older pod already has its GPUs."""
    kubelet, plugin = env
    d1 = decide(TOPO, NodeState(), Request(count=1))
    d2 = decide(TOPO, NodeState.whole(d1.gpus), Request(count=1))
    plugin.set_pods([
        bound_pod("old", d1, created="2026-01-01T00:00:00Z"),
        bound_pod("new", d2, created="2026-01-01T00:00:01Z"),
    ])  # fmt: skip
    start_and_watch(kubelet, plugin, oracle=False)
    kubelet.admit_pod("default", "old", {RESOURCE_GPU: 1})
    assert plugin.stop() == 0
    plugin.start(oracle=False)
    kubelet.wait_registered(RESOURCES)  # registrations accumulate: wait for the new process
    wait_for(lambda: sum(r.resource_name == RESOURCE_GPU for r in kubelet.registrations) >= 2)
    kubelet.watch(RESOURCE_GPU)
    kubelet.wait_devices(RESOURCE_GPU, lambda ds: len(ds) == 8)
    got = kubelet.admit_pod("default", "new", {RESOURCE_GPU: 1})[RESOURCE_GPU]
    assert got.envs["CUDA_VISIBLE_DEVICES"] == d2.uuids[0]
    assert got.envs["GPUTOPO_POD"] == "default/new"


def test_xid_flips_health_on_the_stream_at_once(env) -> None:  # type: ignore[no-untyped-def]
    kubelet, plugin = env
    start_and_watch(kubelet, plugin)
    with plugin.xid_file.open("a") as f:
        f.write("2 13\n")  # an application XID: ignored
        f.write("3 79\n")  # GPU fell off the bus: critical
    bad = TOPO.gpus[3].uuid
    gpus = kubelet.wait_devices(RESOURCE_GPU, lambda ds: any(d.health == "Unhealthy" for d in ds),
                                timeout=20)  # fmt: skip
    assert {d.ID for d in gpus if d.health == "Unhealthy"} == {bad}
    core = kubelet.wait_devices(RESOURCE_VGPU_CORE,
                                lambda ds: any(d.health == "Unhealthy" for d in ds))  # fmt: skip
    unhealthy = {d.ID.split("::")[0] for d in core if d.health == "Unhealthy"}
    assert unhealthy == {bad}
    assert sum(d.health == "Unhealthy" for d in core) == 100
    node = wait_for(
        lambda: plugin.node().get("annotations", {}).get("gputopo.io/unhealthy-gpus") == "3"
    )
    assert node
    assert 'gputopo_dp_healthy_devices{resource="nvidia.com/gpu"} 7.0' in plugin.metrics()


def test_an_unhealthy_gpu_recovers_once_nvml_answers_normally(env) -> None:  # type: ignore[no-untyped-def]
    """Health that recovers, in the real process: a GPU whose NVML queries fail is
    Unhealthy on the stream and the node; once it answers normally for --health-recovery
    seconds it is Healthy again on both, without a restart. Same for a critical XID."""
    kubelet, plugin = env
    plugin.start("--health-recovery", "0.5", "--health-probe-interval", "0.05")
    kubelet.wait_registered(RESOURCES)
    kubelet.watch(RESOURCE_GPU)
    kubelet.wait_devices(RESOURCE_GPU, lambda ds: len(ds) == 8)
    lost = TOPO.gpus[5].uuid

    def health(uuid: str, state: str) -> Any:
        return lambda ds: {d.ID: d.health for d in ds}.get(uuid) == state

    def published_unhealthy() -> str | None:
        return plugin.node().get("annotations", {}).get("gputopo.io/unhealthy-gpus")

    with plugin.xid_file.open("a") as f:
        f.write("5 lost\n")  # every NVML query on GPU 5 now fails (GPU is lost)
    kubelet.wait_devices(RESOURCE_GPU, health(lost, "Unhealthy"), timeout=20)
    assert wait_for(lambda: published_unhealthy() == "5")
    with plugin.xid_file.open("a") as f:
        f.write("5 ok\n")
    kubelet.wait_devices(RESOURCE_GPU, health(lost, "Healthy"), timeout=20)
    assert wait_for(lambda: published_unhealthy() == "")

    with plugin.xid_file.open("a") as f:
        f.write("1 48\n")  # a double-bit ECC error; NVML keeps answering
    kubelet.wait_devices(RESOURCE_GPU, health(TOPO.gpus[1].uuid, "Unhealthy"), timeout=20)
    kubelet.wait_devices(RESOURCE_GPU, lambda ds: {d.health for d in ds} == {"Healthy"},
                         timeout=20)  # fmt: skip
    log = plugin.log.read_text()
    assert "is now healthy (NVML answered normally for" in log


def test_pre_start_container(env) -> None:  # type: ignore[no-untyped-def]
    kubelet, plugin = env
    d = decide(TOPO, NodeState(), Request(count=1))
    plugin.set_pods([bound_pod("p", d)])
    start_and_watch(kubelet, plugin)
    kubelet.admit_container("default", "p", "main", RESOURCE_GPU, 1)
    kubelet.pre_start("default", "p", "main", RESOURCE_GPU)
    # The kubelet's record says pod p holds a GPU gputopo did not assign it: refuse to start.
    other = next(g.uuid for g in TOPO.gpus if g.uuid not in d.uuids)
    kubelet.assigned[("default", "p", "main", RESOURCE_GPU)] = {other}
    err = rpc_error(lambda: kubelet.pre_start("default", "p", "main", RESOURCE_GPU))
    assert "pod default/p (container main) is about to start on GPU" in err.details()


def test_sigterm_removes_our_sockets_and_exits_zero(env) -> None:  # type: ignore[no-untyped-def]
    kubelet, plugin = env
    start_and_watch(kubelet, plugin)
    sockets = [kubelet.endpoint(r) for r in RESOURCES]
    assert all(s.is_socket() for s in sockets)
    assert plugin.stop() == 0
    assert not any(s.exists() for s in sockets)
    assert kubelet.socket.exists()  # the kubelet's socket is left alone


def test_publishes_the_kubelets_numa_settings(env) -> None:  # type: ignore[no-untyped-def]
    """The kubelet's config file says single-numa-node and the static CPU manager; a
    --kubelet-topology-manager-scope setting wins over the file's scope."""
    kubelet, plugin = env
    config = plugin.dir / "kubelet-config.yaml"
    config.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "cpuManagerPolicy: static\ntopologyManagerPolicy: single-numa-node\n"
        "topologyManagerScope: container\nreservedSystemCPUs: 0-1\n")
    plugin.start("--kubelet-config-file", str(config), "--kubelet-topology-manager-scope", "pod")
    node = wait_for(lambda: plugin.node().get("labels") and plugin.node())
    labels = node["labels"]
    assert labels["gputopo.io/topology-manager-policy"] == "single-numa-node"
    assert labels["gputopo.io/topology-manager-scope"] == "pod"
    assert labels["gputopo.io/cpu-manager-policy"] == "static"
    assert wait_for(lambda: "kubelet NUMA alignment" in plugin.log.read_text())


def test_an_unusable_kubelet_config_file_exits_1_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "kubelet.yaml"
    bad.write_text("kind: KubeletConfiguration\ntopologyManagerPolicy: strict\n")
    proc = subprocess.run(
        gputopo_command() + ["device-plugin", "--node-name", "n1", "--fake-topology", MACHINE,
                             "--device-plugin-dir", str(tmp_path),
                             "--pod-source", f"file:{tmp_path}/pods.json",
                             "--node-sink", f"file:{tmp_path}/node.json", "--metrics-port", "0",
                             "--kubelet-config-file", str(bad)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("gputopo: error:") and "'strict'" in last


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--node-name", "n1", "--metrics-port", "many"], "metrics-port"),
        (["--node-name", "n1", "--kubelet-topology-manager-policy", "strict"],
         "kubelet-topology-manager-policy"),
        (["--node-name", "n1", "--no-such-flag"], "unknown option"),
        (["--metrics-port", "1"], "node name is required"),
        (["--node-name", "n1", "--vgpu-memory-unit-mib", "0"], "vgpu-memory-unit-mib"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args: list[str], message: str) -> None:
    env = {
        k: v for k, v in os.environ.items() if k != "NODE_NAME" and not k.startswith("GPUTOPO_DP_")
    }
    proc = subprocess.run(gputopo_command() + ["device-plugin", *args], capture_output=True,
                          text=True, timeout=60, env=env)  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gputopo: error:") and message in lines[0]


def test_startup_failure_exits_1_with_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        gputopo_command() + ["device-plugin", "--node-name", "n1", "--fake-topology", MACHINE,
                             "--device-plugin-dir", str(tmp_path / "missing"),
                             "--pod-source", f"file:{tmp_path}/pods.json",
                             "--node-sink", f"file:{tmp_path}/node.json", "--metrics-port", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert (
        proc.stderr.strip().splitlines()[-1].startswith("gputopo: error: device-plugin directory")
    )
