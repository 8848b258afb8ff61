"""What the kubelet's Topology Manager reads from the plugin, for every catalog machine: the
real plugin process (``gputopo device-plugin --fake-topology <machine>``) over its sockets,
driven by the kubelet stand-in.

The kubelet (1.36, ``pkg/kubelet/cm/devicemanager/topology_hints.go``) treats a resource as
NUMA-aligned when any of its devices has ``TopologyInfo.Nodes``, and counts a device on every
NUMA node listed there (``getNUMANodeIds``). The device manager offers a container's devices
first from the NUMA nodes of the merged hint, then asks ``GetPreferredAllocation``
(``manager.go`` ``devicesToAllocate``). The CPU manager pins a Guaranteed container's CPUs to
that same merged NUMA set. So, for the CPUs to end up next to the GPUs, the plugin must report,
for every device of every resource, exactly the NUMA node of the GPU it belongs to. That NUMA
node's CPUs must be the CPU affinity gputopo annotates (``gputopo.io/cpu-affinity``) and hands
the container (``GPUTOPO_CPU_AFFINITY``). The plugin must also offer
``GetPreferredAllocation``. See docs/cpu-pinning.md for when the kubelet's NUMA choice matches
gputopo's.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from device_plugin.api import api_pb2 as pb
from tests.device_plugin.kubelet_stub import KubeletStub, remove_tree, short_tmpdir
from tests.device_plugin.test_plugin_process import PluginProcess
from topology import catalog
from topology.contract import RESOURCE_GPU, RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY
from topology.model import Topology

pytestmark = pytest.mark.timeout(120)
RESOURCES = (RESOURCE_GPU, RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY)


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


def gpu_of_device(topo: Topology, device_id: str) -> int:
    uuid = device_id.split("::", 1)[0]
    return next(g.index for g in topo.gpus if g.uuid == uuid)


def test_catalog_numa_nodes_partition_the_cpus() -> None:
    """The premise: on every catalog machine, GPUs on one NUMA node share one CPU affinity
    and different NUMA nodes have disjoint CPUs, so "the GPUs' NUMA node" and "the GPUs'
    CPU affinity" name the same CPUs."""
    for name in catalog.names():
        topo = catalog.get(name)
        by_node: dict[int, frozenset[int]] = {}
        for g in topo.gpus:
            assert g.numa_node is not None, name
            assert by_node.setdefault(g.numa_node, g.cpu_affinity) == g.cpu_affinity, name
        nodes = list(by_node.values())
        assert all(a.isdisjoint(b) for i, a in enumerate(nodes) for b in nodes[i + 1:]), name


@pytest.mark.parametrize("machine", catalog.names())
def test_every_device_carries_its_gpu_s_numa_node(
    env: tuple[KubeletStub, PluginProcess], machine: str
) -> None:
    kubelet, plugin = env
    topo = catalog.get(machine)
    plugin.start(machine=machine)
    try:
        regs = kubelet.wait_registered(RESOURCES)
    except TimeoutError:
        raise AssertionError(f"plugin did not register:\n{plugin.tail()}") from None
    for r in RESOURCES:
        assert regs[r].options.get_preferred_allocation_available
        kubelet.watch(r)
    gpus = kubelet.wait_devices(RESOURCE_GPU, lambda ds: len(ds) == topo.size)
    core = kubelet.wait_devices(RESOURCE_VGPU_CORE, lambda ds: len(ds) == 100 * topo.size)
    mem = kubelet.wait_devices(RESOURCE_VGPU_MEMORY, lambda ds: len(ds) > 0)
    for resource, devices in ((RESOURCE_GPU, gpus), (RESOURCE_VGPU_CORE, core),
                              (RESOURCE_VGPU_MEMORY, mem)):
        for d in devices:
            g = topo.gpus[gpu_of_device(topo, d.ID)]
            assert d.HasField("topology"), (resource, d.ID)
            assert [n.ID for n in d.topology.nodes] == [g.numa_node], (resource, d.ID)
    # the NUMA nodes the kubelet sees are exactly the machine's GPU NUMA nodes
    assert {d.topology.nodes[0].ID for d in gpus} == set(topo.numa_nodes(range(topo.size)))
    opts = kubelet.client(RESOURCE_GPU).GetDevicePluginOptions(pb.Empty(), timeout=5)
    assert opts.get_preferred_allocation_available
