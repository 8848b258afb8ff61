"""NIC discovery from sysfs and what a node publishes as gputopo.io/network."""

from __future__ import annotations

from pathlib import Path

from gpunode.publish import node_metadata
from topology import catalog
from topology.contract import ANN_NETWORK
from topology.discovery.nics import discover_network, node_network, pcie_level
from topology.model import PCIeLevel
from topology.network import loads

ROOT0, ROOT1 = "pci0000:00", "pci0000:80"


def device(sysfs: Path, *path: str, numa: int) -> Path:
    d = sysfs.joinpath("devices", *path)
    d.mkdir(parents=True, exist_ok=True)
    (d / "numa_node").write_text(f"{numa}\n")
    return d


def fake_sysfs(tmp: Path) -> Path:
    """A DGX-1-like tree: per socket two PCIe switches (upstream 00:0x.0 → downstream →
    device), each with two GPUs and one 100 Gb/s NIC."""
    sysfs = tmp / "sys"
    topo = catalog.get("dgx1-v100")
    (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
    (sysfs / "class" / "infiniband").mkdir(parents=True)
    for pair in range(4):
        root = ROOT0 if pair < 2 else ROOT1
        rp, up = f"0000:{pair:02x}:01.0", f"0000:{0x10 + pair:02x}:00.0"
        for k, g in enumerate((2 * pair, 2 * pair + 1)):
            bus = topo.gpus[g].pci_bus_id.lower()
            d = device(sysfs, root, rp, up, f"0000:{0x20 + pair:02x}:0{k}.0", bus,
                       numa=pair // 2)
            (sysfs / "bus" / "pci" / "devices" / bus).symlink_to(d)
        nic = device(sysfs, root, rp, up, f"0000:{0x20 + pair:02x}:08.0",
                     f"0000:{0x30 + pair:02x}:00.0", numa=pair // 2)
        ib = sysfs / "class" / "infiniband" / f"mlx5_{pair}"
        (ib / "ports" / "1").mkdir(parents=True)
        (ib / "ports" / "1" / "rate").write_text("100 Gb/sec (4X EDR)\n")
        (ib / "device").symlink_to(nic)
    return sysfs


def test_discovers_the_rails_of_a_dgx1_like_tree(tmp_path: Path) -> None:
    net = discover_network(catalog.get("dgx1-v100"), fake_sysfs(tmp_path))
    assert net is not None and [n.name for n in net.nics] == [f"mlx5_{k}" for k in range(4)]
    assert {n.gbps for n in net.nics} == {12.5}
    assert net.rails == (0, 0, 1, 1, 2, 2, 3, 3)
    assert net.paths[0] == (PCIeLevel.PIX, PCIeLevel.PHB, PCIeLevel.SYS, PCIeLevel.SYS)
    # the same rails the catalog describes for the machine
    assert net.rails == catalog.network("dgx1-v100").rails  # type: ignore[union-attr]


def test_levels_from_paths() -> None:
    a = [ROOT0, "rp", "up", "dn1", "gpu"]
    assert pcie_level(a, [ROOT0, "rp", "up", "dn2", "nic"], 0, 0) == PCIeLevel.PIX
    assert pcie_level(a, [ROOT0, "rp", "up2", "dn", "up3", "dn3", "nic"], 0, 0) == PCIeLevel.PXB
    assert pcie_level(a, [ROOT0, "rp2", "nic"], 0, 0) == PCIeLevel.PHB
    assert pcie_level(a, [ROOT1, "rp", "nic"], 0, 0) == PCIeLevel.NODE
    assert pcie_level(a, [ROOT1, "rp", "nic"], 0, 1) == PCIeLevel.SYS


def test_no_nics_no_network(tmp_path: Path) -> None:
    assert discover_network(catalog.get("dgx1-v100"), tmp_path) is None


def test_a_node_publishes_its_network() -> None:
    """A fake node publishes its catalog machine's NICs; a topology file has none."""
    topo = catalog.get("hgx-h100")
    net = node_network(topo, "hgx-h100")
    meta = node_metadata(topo, frozenset(), 256, network=net)
    assert loads(meta.annotations[ANN_NETWORK]) == catalog.network("hgx-h100")
    assert ANN_NETWORK not in node_metadata(topo, frozenset(), 256).annotations
    assert node_network(topo, "/some/file.json") is None
