"""The machine catalog: every entry is a consistent, serialisable model of its hardware."""

from __future__ import annotations

import json
from itertools import combinations

import pytest

from topology import catalog, serialization
from topology.catalog import UnknownMachine
from topology.model import PCIeLevel, Topology, deterministic_uuid
from topology.serialization import TopologyDocument

ALL = catalog.names()

EXPECTED_NAMES = {
    "dgx1-v100", "dgx1-p100", "dgx-a100", "minsky", "summit", "pcie-8gpu", "gaia-4gpu",
    "mapa-torus-16", "mapa-cubemesh-16", "v100-pcie-1", "v100-pcie-2", "v100-pcie-4", "t4-1",
    "t4-2", "v100-1gpu", "hgx-h100", "hgx-h200", "hgx-b200", "h100-nvl", "gb200-tray",
}  # fmt: skip

#: NVLink ports per GPU model (point-to-point machines: a GPU's links to other GPUs can use at
#: most these; on NVSwitch machines the per-pair count is the GPU's links into the fabric).
PORTS = {"P100": 4, "V100": 6, "A100": 12, "H100": 18, "H200": 18, "B200": 18, "GB200": 18}


def per_gpu_links(t: Topology) -> list[int]:
    return [sum(t.nvlinks(i, j) for j in range(t.size) if j != i) for i in range(t.size)]


def ports_of(t: Topology) -> int:
    return next(p for model, p in PORTS.items() if model in t.gpus[0].name)


def test_catalog_lists_every_machine() -> None:
    assert set(ALL) == EXPECTED_NAMES
    assert ALL == sorted(ALL)


@pytest.mark.parametrize("name", ALL)
def test_links_are_symmetric_and_complete(name: str) -> None:
    t = catalog.get(name)
    assert t.name == name
    for i, j in combinations(range(t.size), 2):
        assert t.links[i][j] == t.links[j][i]
        assert t.links[i][j].nvlinks >= 0
        assert isinstance(t.links[i][j].pcie, PCIeLevel)


@pytest.mark.parametrize("name", ALL)
def test_uuids_deterministic_and_unique(name: str) -> None:
    t = catalog.get(name)
    uuids = [g.uuid for g in t.gpus]
    assert uuids == [deterministic_uuid(name, i) for i in range(t.size)]
    assert len(set(uuids)) == t.size
    catalog.get.cache_clear()
    assert [g.uuid for g in catalog.get(name).gpus] == uuids


def test_uuids_differ_between_machines() -> None:
    seen = [g.uuid for name in ALL for g in catalog.get(name).gpus]
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize("name", ALL)
def test_round_trips_through_the_annotation(name: str) -> None:
    t = catalog.get(name)
    text = serialization.dumps(t)
    back = serialization.loads(text)
    assert back == t
    assert back.topology_class == t.topology_class
    # schema validity: the pydantic model of the published schema accepts the document
    TopologyDocument.model_validate(json.loads(text))


@pytest.mark.parametrize("name", ALL)
def test_gpu_facts_are_filled_in(name: str) -> None:
    t = catalog.get(name)
    for g in t.gpus:
        assert g.name and g.memory_mib > 0
        assert g.numa_node is not None
        assert g.cpu_affinity, "every GPU has local CPUs"
        assert len(g.pci_bus_id) == 12 and g.pci_bus_id == g.pci_bus_id.upper()
    assert len({g.pci_bus_id for g in t.gpus}) == t.size
    # GPUs of one NUMA node share their CPUs; different nodes have disjoint CPUs
    for a, b in combinations(t.gpus, 2):
        if a.numa_node == b.numa_node:
            assert a.cpu_affinity == b.cpu_affinity
        else:
            assert not a.cpu_affinity & b.cpu_affinity


@pytest.mark.parametrize("name", ALL)
def test_pcie_levels_agree_with_numa(name: str) -> None:
    t = catalog.get(name)
    for i, j in combinations(range(t.size), 2):
        cross = t.gpus[i].numa_node != t.gpus[j].numa_node
        assert (t.pcie_level(i, j) == PCIeLevel.SYS) == cross


@pytest.mark.parametrize(
    "name", ["dgx1-v100", "dgx1-p100", "minsky", "summit", "mapa-torus-16"]
)
def test_point_to_point_nvlinks_fit_the_gpu(name: str) -> None:
    t = catalog.get(name)
    assert not t.nvswitch
    assert max(per_gpu_links(t)) <= ports_of(t)


def test_nvlink_counts_per_gpu_match_the_hardware() -> None:
    assert per_gpu_links(catalog.get("dgx1-v100")) == [6] * 8  # all 6 V100 ports
    assert per_gpu_links(catalog.get("dgx1-p100")) == [4] * 8  # all 4 P100 ports
    assert per_gpu_links(catalog.get("minsky")) == [2] * 4  # + 2 links to the CPU
    assert per_gpu_links(catalog.get("summit")) == [4] * 6  # + 2 links to the CPU
    assert per_gpu_links(catalog.get("pcie-8gpu")) == [0] * 8
    assert per_gpu_links(catalog.get("gaia-4gpu")) == [0] * 4


def test_dgx1_v100_mapa_worked_example() -> None:
    """MAPA §2.2: GPUs 1,2,5 (1-based) aggregate 87 GB/s, the ideal 1,3,4 aggregate 125."""
    t = catalog.get("dgx1-v100")

    def agg(gpus: tuple[int, ...]) -> float:
        return sum(t.link_bandwidth(a, b) for a, b in combinations(gpus, 2))

    assert agg((0, 1, 4)) == 87.0
    assert agg((0, 2, 3)) == 125.0


def test_dgx1_p100_cube_mesh() -> None:
    t = catalog.get("dgx1-p100")
    assert t.nvlink_generation == 1
    for i, j in combinations(range(8), 2):
        linked = (i // 4 == j // 4) or (j == i + 4)
        assert t.nvlinks(i, j) == (1 if linked else 0)
    assert t.link_bandwidth(0, 1) == 20.0  # MAPA Table 1: NVLink v1 = 20 GB/s


def test_dgx_a100_nvswitch_and_numa() -> None:
    t = catalog.get("dgx-a100")
    assert t.nvswitch and t.nvlink_generation == 3
    assert all(t.nvlinks(i, j) == 12 for i, j in combinations(range(8), 2))
    assert all(t.links[i][j].nvswitch for i, j in combinations(range(8), 2))
    assert [g.numa_node for g in t.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert t.gpus[0].cpu_affinity == frozenset(range(48, 64)) | frozenset(range(176, 192))
    assert t.link_bandwidth(0, 7) == 300.0
    assert per_gpu_links(t)[0] // 7 <= ports_of(t)  # 12 links into the fabric


def test_minsky_matches_amaral() -> None:
    t = catalog.get("minsky")
    assert t.nvlink_generation == 1 and t.size == 4
    assert t.nvlinks(0, 1) == 2 and t.nvlinks(2, 3) == 2
    assert t.link_bandwidth(0, 1) == 40.0  # "dual lane NVLink ... up to 40GB/s" (§1)
    for i, j in [(0, 2), (0, 3), (1, 2), (1, 3)]:
        assert t.nvlinks(i, j) == 0 and t.pcie_level(i, j) == PCIeLevel.SYS
    # 8 cores per socket (§3) with SMT8
    assert len(t.gpus[0].cpu_affinity) == 64 and len(t.gpus[3].cpu_affinity) == 64


def test_summit_triangles() -> None:
    t = catalog.get("summit")
    for i, j in combinations(range(6), 2):
        assert t.nvlinks(i, j) == (2 if i // 3 == j // 3 else 0)
    assert t.link_bandwidth(0, 1) == 50.0


def test_pcie_8gpu_tree() -> None:
    t = catalog.get("pcie-8gpu")
    assert t.pcie_level(0, 1) == PCIeLevel.PIX and t.pcie_level(6, 7) == PCIeLevel.PIX
    assert t.pcie_level(0, 2) == PCIeLevel.NODE and t.pcie_level(5, 7) == PCIeLevel.NODE
    assert t.pcie_level(3, 4) == PCIeLevel.SYS


def test_gaia_tree_reproduces_the_experiments_premises() -> None:
    """Gaia §IV: {gpu2, gpu3} is the cheapest pair, {gpu0, gpu1} the other subtree."""
    t = catalog.get("gaia-4gpu")
    assert t.pcie_level(2, 3) == PCIeLevel.PIX
    assert t.pcie_level(0, 1) == PCIeLevel.PHB
    assert t.pcie_level(2, 3) < t.pcie_level(0, 1)
    for i in (0, 1):
        for j in (2, 3):
            assert t.pcie_level(i, j) == PCIeLevel.SYS
    assert len(t.cpu_affinity(range(4))) == 56  # 2 x 14-core E5-2680 v4 with HT


def test_mapa_torus_is_a_4x4_torus() -> None:
    t = catalog.get("mapa-torus-16")
    for i, j in combinations(range(16), 2):
        ri, ci, rj, cj = i // 4, i % 4, j // 4, j % 4
        neighbours = (ri == rj and (ci - cj) % 4 in (1, 3)) or (
            ci == cj and (ri - rj) % 4 in (1, 3)
        )
        assert (t.nvlinks(i, j) > 0) == neighbours, (i, j)
    # row links are double except the wrap-around ones (MAPA's torus-2d source)
    assert t.nvlinks(0, 1) == 2 and t.nvlinks(0, 3) == 1 and t.nvlinks(0, 12) == 2


def test_mapa_cubemesh_matches_mapa_source() -> None:
    t = catalog.get("mapa-cubemesh-16")
    assert sum(1 for i, j in combinations(range(16), 2) if t.nvlinks(i, j)) == 32
    # per-GPU NVLink totals of MAPA's cubeMesh-16 graph (bandwidth-derived counts);
    # GPUs 12 and 15 carry 7 links, more than a real V100 (documented in the catalog)
    assert per_gpu_links(t) == [5, 5, 5, 4, 6, 5, 6, 6, 5, 6, 5, 3, 7, 6, 5, 7]
    cross = [(i, j) for i, j in combinations(range(16), 2) if t.nvlinks(i, j) and i // 8 != j // 8]
    assert sorted(cross) == [(0, 11), (2, 9), (3, 8), (4, 15), (6, 13), (7, 12)]


@pytest.mark.parametrize("name", ALL)
def test_describe_is_one_line(name: str) -> None:
    text = catalog.describe(name)
    t = catalog.get(name)
    assert "\n" not in text
    assert text.startswith(f"{t.size} x {t.gpus[0].name}")


def test_unknown_machine_lists_names() -> None:
    with pytest.raises(UnknownMachine, match="dgx1-v100"):
        catalog.get("dgx-9000")
    with pytest.raises(UnknownMachine):
        catalog.describe("dgx-9000")


def test_names_are_case_insensitive() -> None:
    assert catalog.get(" DGX1-V100 ") == catalog.get("dgx1-v100")


@pytest.mark.parametrize(("name", "gpus", "model", "memory", "pair_gbps", "numa"), [
    ("hgx-h100", 8, "NVIDIA H100 80GB HBM3", 81559, 450.0, 2),
    ("hgx-h200", 8, "NVIDIA H200", 143771, 450.0, 2),
    ("hgx-b200", 8, "NVIDIA B200", 183359, 900.0, 2),
    ("gb200-tray", 4, "NVIDIA GB200", 189471, 900.0, 2),
])
def test_nvswitch_machines_of_today(name: str, gpus: int, model: str, memory: int,
                                    pair_gbps: float, numa: int) -> None:
    """HGX H100/H200/B200 and the GB200 tray: NV18 between every pair over NVSwitch (NVLink 4:
    25 GB/s per link and direction; NVLink 5: 50), a NIC per GPU."""
    t = catalog.get(name)
    assert t.size == gpus and t.nvswitch
    assert {g.name for g in t.gpus} == {model} and {g.memory_mib for g in t.gpus} == {memory}
    assert {t.nvlinks(i, j) for i, j in combinations(range(gpus), 2)} == {18}
    assert {t.link_bandwidth(i, j) for i, j in combinations(range(gpus), 2)} == {pair_gbps}
    assert len(t.numa_nodes(range(gpus))) == numa
    net = catalog.network(name)
    assert net is not None and net.rails == tuple(range(gpus))
    assert {nic.gbps for nic in net.nics} == {50.0}  # 400 Gb/s


def test_h100_nvl_is_bridged_pairs_over_pcie() -> None:
    t = catalog.get("h100-nvl")
    for i, j in combinations(range(8), 2):
        if i // 2 == j // 2:
            assert t.nvlinks(i, j) == 12 and t.link_bandwidth(i, j) == 300.0
            assert t.pcie_level(i, j) == PCIeLevel.PIX
        else:
            assert t.nvlinks(i, j) == 0 and t.link_bandwidth(i, j) == 12.0  # MAPA's PCIe
    net = catalog.network("h100-nvl")
    assert net is not None and net.rails == (0, 0, 1, 1, 2, 2, 3, 3)


def test_machines_without_described_nics() -> None:
    assert catalog.network("minsky") is None
    with pytest.raises(UnknownMachine):
        catalog.network("dgx-9")
