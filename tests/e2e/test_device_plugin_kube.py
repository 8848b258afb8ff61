"""End-to-end: the plugin process against a real kube-apiserver (the local control plane).

Covers what the file-based process tests cannot: the Kubernetes pod source (fresh LIST by
``spec.nodeName``, UID-guarded annotation patch) and the node publisher (merge patch of the
Node's annotations and labels), with the kubelet stand-in driving admission. Skipped only when
the control-plane binaries cannot be had.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s_client

from device_plugin.identity import ANN_ALLOCATED, parse_record
from localcluster import Binaries, ControlPlane
from localcluster.controlplane import wait_until
from tests.device_plugin.helpers import bound_pod, decide
from tests.device_plugin.kubelet_stub import KubeletStub, remove_tree, short_tmpdir
from tests.device_plugin.test_plugin_process import gputopo_command
from topology import catalog, serialization
from topology.contract import RESOURCE_GPU, RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY
from topology.policies.base import NodeState, Request

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]

NODE = "gpu-node-0"
TOPO = catalog.get("dgx1-v100")
RESOURCES = (RESOURCE_GPU, RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


@pytest.fixture(scope="module")
def control_plane(binaries: Binaries) -> Iterator[ControlPlane]:
    with ControlPlane(binaries) as cp:
        cp.create_default_serviceaccount("default")
        yield cp


def test_plugin_reads_pods_patches_them_and_publishes_the_node(
    control_plane: ControlPlane,
) -> None:
    cp = control_plane
    workdir = short_tmpdir()
    kubelet = KubeletStub(workdir)
    kubelet.start()
    log = workdir / "plugin.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        api = cp.core_v1()
        cp.add_kwok_node(NODE, capacity={"cpu": 80, "memory": "512Gi"})
        d1 = decide(TOPO, NodeState(), Request(count=2))
        d2 = decide(TOPO, NodeState.whole(d1.gpus), Request(count=2))
        for name, d in (("first", d1), ("second", d2)):
            body = bound_pod(name, d, node=NODE)
            for key in ("uid", "creationTimestamp"):
                body["metadata"].pop(key)
            api.create_namespaced_pod("default", body)
        other = bound_pod("elsewhere", d1, node="other-node")
        for key in ("uid", "creationTimestamp"):
            other["metadata"].pop(key)
        api.create_namespaced_pod("default", other)

        proc = subprocess.Popen(
            gputopo_command() + [
                "device-plugin", "--fake-topology", "dgx1-v100", "--node-name", NODE,
                "--device-plugin-dir", str(workdir), "--kubeconfig", str(cp.kubeconfig_path),
                "--pod-resources-socket", str(kubelet.pod_resources_socket),
                "--fake-xid-file", str(workdir / "xids"), "--metrics-port", "0",
                "--watch-interval", "0.2",
            ],
            stdout=log.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        kubelet.wait_registered(RESOURCES, timeout=60)
        for r in RESOURCES:
            kubelet.watch(r)
        kubelet.wait_devices(RESOURCE_GPU, lambda ds: len(ds) == 8)

        def published() -> k8s_client.V1Node | None:
            node = api.read_node(NODE)
            ann = node.metadata.annotations or {}
            return node if "gputopo.io/topology" in ann else None

        node = wait_until(published, 60, "topology annotation on the node")
        assert node.metadata.annotations["gputopo.io/topology"] == serialization.dumps(TOPO)
        assert node.metadata.labels["gputopo.io/topology-class"] == TOPO.topology_class
        assert node.metadata.labels["gputopo.io/gpu-model"] == "Tesla-V100-SXM2-16GB"
        assert node.metadata.labels["type"] == "kwok"  # merge patch kept the rest

        # The kubelet admits the newer pod first; each still gets its own GPUs.
        got2 = kubelet.admit_pod("default", "second", {RESOURCE_GPU: 2})[RESOURCE_GPU]
        got1 = kubelet.admit_pod("default", "first", {RESOURCE_GPU: 2})[RESOURCE_GPU]
        assert got2.envs["CUDA_VISIBLE_DEVICES"] == ",".join(d2.uuids)
        assert got1.envs["CUDA_VISIBLE_DEVICES"] == ",".join(d1.uuids)
        for name, d in (("first", d1), ("second", d2)):
            ann = api.read_namespaced_pod(name, "default").metadata.annotations
            assert parse_record(ann[ANN_ALLOCATED]) == {RESOURCE_GPU: {"main": list(d.uuids)}}
        assert ANN_ALLOCATED not in (
            api.read_namespaced_pod("elsewhere", "default").metadata.annotations or {}
        )

        (workdir / "xids").write_text("6 48\n")  # double-bit ECC error on GPU 6

        def unhealthy() -> str | None:
            ann = api.read_node(NODE).metadata.annotations or {}
            return ann.get("gputopo.io/unhealthy-gpus") or None

        assert wait_until(unhealthy, 30, "unhealthy GPUs on the node") == "6"
    except BaseException:
        print(log.read_text() if log.exists() else "(no plugin log)")
        raise
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
        kubelet.stop()
    assert proc is not None and proc.returncode == 0
    remove_tree(workdir)
    assert not Path(workdir).exists()


def test_plugin_on_a_topo_matrix_text_publishes_what_topology_show_prints(
    control_plane: ControlPlane,
) -> None:
    """Issue 12: started on a saved `nvidia-smi topo -m` (no bus ids, NIC rows, NUMA columns,
    no memory), the real plugin process publishes to the real kube-apiserver exactly what
    `gputopo topology show` prints for the same text."""
    cp = control_plane
    node_name = "gpu-node-topo-m"
    text = str(FIXTURES / "dgx1-v100-driver535.txt")
    workdir = short_tmpdir()
    kubelet = KubeletStub(workdir)
    kubelet.start()
    log = workdir / "plugin.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        api = cp.core_v1()
        cp.add_kwok_node(node_name, capacity={"cpu": 80, "memory": "512Gi"})
        proc = subprocess.Popen(
            gputopo_command() + [
                "device-plugin", "--fake-topology", text, "--node-name", node_name,
                "--device-plugin-dir", str(workdir), "--kubeconfig", str(cp.kubeconfig_path),
                "--pod-resources-socket", str(kubelet.pod_resources_socket),
                "--metrics-port", "0", "--watch-interval", "0.2",
            ],
            stdout=log.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        shown = subprocess.run(
            gputopo_command() + ["topology", "show", text, "--output", "json"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout.strip()  # fmt: skip

        def published() -> str | None:
            ann = api.read_node(node_name).metadata.annotations or {}
            return ann.get("gputopo.io/topology")

        assert wait_until(published, 60, "topology annotation on the node") == shown
        node = api.read_node(node_name)
        topo = serialization.loads(shown)
        assert node.metadata.labels["gputopo.io/topology-class"] == topo.topology_class
        assert all(topo.nvlinks(i, j) == TOPO.nvlinks(i, j)
                   for i in range(8) for j in range(8) if i != j)  # fmt: skip
        kubelet.wait_registered((RESOURCE_GPU, RESOURCE_VGPU_CORE), timeout=60)
        assert RESOURCE_VGPU_MEMORY not in {r.resource_name for r in kubelet.registrations}
        assert "GPU memory unknown for every GPU" in log.read_text()
    except BaseException:
        print(log.read_text() if log.exists() else "(no plugin log)")
        raise
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
        kubelet.stop()
    assert proc is not None and proc.returncode == 0
    remove_tree(workdir)
