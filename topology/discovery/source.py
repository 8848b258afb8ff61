"""The node's GPUs from any source, by one path: what the device plugin publishes.

=================================  ========================================================
source                             path to the model
=================================  ========================================================
the driver (no source given)       ``discover(pynvml)`` → :func:`topology.sources.complete`
catalog name, topology JSON/YAML,  :func:`topology.sources.load_topology` (what ``gputopo
saved ``nvidia-smi topo -m``       topology show SRC`` prints) → :class:`FakeNVML` of it →
                                   ``discover(fake)``, which must read back the same model
=================================  ========================================================

So a fake node publishes exactly what ``gputopo topology show SRC --output json`` prints for
the same source (and the same ``--gpu-memory-mib``), and it does so through the same NVML
adapter a real node uses. Should the fake ever fail to impersonate a source faithfully, the
plugin refuses to start with the first difference named, instead of publishing a wrong
topology. The bandwidth table (``bandwidths`` of a topology file) is configuration, not
something NVML reports: a fake node keeps its source's table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from topology.discovery.nvml import DiscoveryError, discover
from topology.model import Topology, TopologyError
from topology.sources import complete, load_topology


@dataclass(frozen=True)
class NodeGPUs:
    """The NVML binding a node talks to and the topology it publishes.

    Attributes:
        nvml: ``pynvml`` or a :class:`~topology.discovery.fake_nvml.FakeNVML`.
        topology: the discovered, complete topology.
        source: the fake topology's source, None on a real node.
    """

    nvml: Any
    topology: Topology
    source: str | None

    @property
    def fake(self) -> bool:
        """Whether the GPUs are a fake NVML's."""
        return self.source is not None


def first_difference(expected: Topology, found: Topology) -> str | None:
    """One line naming the first way ``found`` differs from ``expected`` (GPU count, a GPU
    field, a pair's link, NVLink generation, NVSwitch, bandwidth table), None when equal."""
    if expected.size != found.size:
        return f"{found.size} GPUs instead of {expected.size}"
    for a, b in zip(expected.gpus, found.gpus, strict=True):
        for field in ("uuid", "pci_bus_id", "name", "memory_mib", "numa_node", "cpu_affinity"):
            if getattr(a, field) != getattr(b, field):
                return (
                    f"GPU {a.index} {field} is {getattr(b, field)!r} instead of "
                    f"{getattr(a, field)!r}"
                )
    for i in range(expected.size):
        for j in range(i + 1, expected.size):
            la, lb = expected.links[i][j], found.links[i][j]
            if la != lb:
                return (
                    f"GPUs {i},{j} are {lb.label}/{lb.pcie.name}"
                    f"{' (NVSwitch)' if lb.nvswitch else ''} instead of {la.label}/"
                    f"{la.pcie.name}{' (NVSwitch)' if la.nvswitch else ''}"
                )
    if expected.nvlink_generation != found.nvlink_generation:
        return (
            f"NVLink generation {found.nvlink_generation} instead of "
            f"{expected.nvlink_generation}"
        )
    if expected.nvswitch != found.nvswitch:
        return f"nvswitch {found.nvswitch} instead of {expected.nvswitch}"
    if expected.bandwidths != found.bandwidths:
        return "another bandwidth table"
    return None


def open_node_gpus(
    fake_topology: str | None = None,
    *,
    node_name: str = "",
    gpu_memory_mib: int | None = None,
    gpu_model: str | None = None,
    nvml: Any = None,
) -> NodeGPUs:
    """Open the node's GPUs: the driver, or a fake NVML impersonating ``fake_topology``.

    Args:
        fake_topology: a source (catalog name or file); None = the real driver.
        node_name: the topology's name on a real node (default the host name); a fake node
            keeps its source's name.
        gpu_memory_mib: memory, MiB, for GPUs whose memory neither the source nor the catalog
            knows (:func:`topology.sources.complete`).
        gpu_model: the catalog GPU model of GPUs the source names none for.
        nvml: the binding for a real node (default ``pynvml``); ignored with a fake topology.

    Returns:
        The binding and the complete, discovered topology.

    Raises:
        TopologyError: the source cannot be read, or (:class:`DiscoveryError`) NVML failed or
            the fake NVML read back another topology than its source's (first difference
            named). Messages are one line.
    """
    if fake_topology:
        from topology.discovery.fake_nvml import FakeNVML

        source = load_topology(fake_topology, gpu_memory_mib=gpu_memory_mib,
                               gpu_model=gpu_model)
        fake = FakeNVML(source)
        found = discover(fake).with_bandwidths(source.bandwidths)
        problem = first_difference(source, found)
        if problem is not None:
            raise DiscoveryError(
                f"the fake NVML cannot impersonate {fake_topology} faithfully: {problem}"
            )
        return NodeGPUs(fake, found, fake_topology)
    if nvml is None:
        import pynvml

        nvml = pynvml
    found = discover(nvml, name=node_name)
    try:
        return NodeGPUs(nvml, complete(found, gpu_memory_mib=gpu_memory_mib,
                                       gpu_model=gpu_model), None)
    except TopologyError as exc:
        raise DiscoveryError(f"NVML answers do not form a valid topology: {exc}") from None
