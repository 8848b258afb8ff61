"""The node's compute NICs and each GPU's PCIe path to them, from sysfs — what the device
plugin publishes as ``gputopo.io/network`` (:mod:`topology.network`).

NVML knows GPUs, not NICs. RDMA NICs (InfiniBand, RoCE) are the entries of
``/sys/class/infiniband``; each one's ``device`` link resolves to its PCI device under
``/sys/devices/pciDDDD:BB/...``, its first port's ``rate`` reads ``400 Gb/sec (4X NDR)``, its
``device/numa_node`` its NUMA node. A GPU's PCI device is ``/sys/bus/pci/devices/<bus id>``.

The PCIe level between a GPU and a NIC is read from their two device paths as NCCL reads them
(``src/graph/topo.cc`` builds its PCI tree from the same sysfs paths):

* different root complexes (``pciDDDD:BB``): ``NODE`` on one NUMA node, else ``SYS``;
* one root complex, no bridge in common: ``PHB``;
* a bridge in common, and each device at most two hops below the deepest one (a switch's
  downstream port, then the device): ``PIX``, one PCIe switch; deeper: ``PXB``.

A fake node (a catalog machine impersonated through the fake NVML) publishes the catalog's
NICs (:func:`topology.catalog.network`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from topology import catalog
from topology.model import PCIeLevel, Topology
from topology.network import BITS_PER_BYTE, NIC, NodeNetwork

_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")
_ROOT = re.compile(r"^pci[0-9a-fA-F]{4}:[0-9a-fA-F]{2}$")


def _pci_path(device: Path) -> list[str] | None:
    """The components of a resolved PCI device path from its root complex down, or None."""
    try:
        parts = device.resolve().parts
    except OSError:
        return None
    for i, part in enumerate(parts):
        if _ROOT.match(part):
            return list(parts[i:])
    return None


def _numa(device: Path) -> int | None:
    try:
        value = int((device / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def pcie_level(a: Sequence[str], b: Sequence[str], numa_a: int | None,
               numa_b: int | None) -> PCIeLevel:
    """The level between two devices from their PCI paths (module docstring)."""
    if not a or not b or a[0] != b[0]:
        same_numa = numa_a is not None and numa_a == numa_b
        return PCIeLevel.NODE if same_numa else PCIeLevel.SYS
    common = 1
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    if common == 1:
        return PCIeLevel.PHB
    if len(a) - common <= 2 and len(b) - common <= 2:
        return PCIeLevel.PIX
    return PCIeLevel.PXB


def discover_network(topology: Topology, sysfs: Path = Path("/sys")) -> NodeNetwork | None:
    """The RDMA NICs of this node and every GPU's path to them; None when the node has none
    (or sysfs does not show them).

    Args:
        topology: the node's GPUs (their ``pci_bus_id`` locate them in sysfs).
        sysfs: the sysfs mount (tests pass a tree of their own).
    """
    ib = sysfs / "class" / "infiniband"
    if not ib.is_dir():
        return None
    nics: list[NIC] = []
    nic_paths: list[tuple[list[str], int | None]] = []
    for dev in sorted(ib.iterdir()):
        path = _pci_path(dev / "device")
        if path is None:
            continue
        try:
            match = _RATE.match((dev / "ports" / "1" / "rate").read_text())
        except OSError:
            match = None
        if match is None:
            continue
        numa = _numa(dev / "device")
        nics.append(NIC(dev.name, float(match.group(1)) / BITS_PER_BYTE, path[-1], numa))
        nic_paths.append((path, numa))
    if not nics:
        return None
    rows = []
    for gpu in topology.gpus:
        device = sysfs / "bus" / "pci" / "devices" / gpu.pci_bus_id.lower()
        gpath = _pci_path(device) or []
        rows.append([pcie_level(gpath, p, gpu.numa_node, numa) for p, numa in nic_paths])
    return NodeNetwork.build(nics, rows)


def node_network(topology: Topology, fake_source: str | None,
                 sysfs: Path = Path("/sys")) -> NodeNetwork | None:
    """The network a node publishes: a fake node's catalog machine's NICs (None for a
    topology file), a real node's from sysfs (:func:`discover_network`)."""
    if fake_source is not None:
        try:
            return catalog.network(fake_source)
        except catalog.UnknownMachine:
            return None
    return discover_network(topology, sysfs)
