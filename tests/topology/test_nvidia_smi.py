"""Parsing and rendering ``nvidia-smi topo -m`` text."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import catalog
from topology.model import GPU, PCIeLevel, Topology, TopologyError, deterministic_uuid
from topology.nvidia_smi import (
    infer_nvlink_generation,
    is_topo_matrix,
    parse_topo_matrix,
    render_topo_matrix,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
P, X, H, N, S = PCIeLevel.PIX, PCIeLevel.PXB, PCIeLevel.PHB, PCIeLevel.NODE, PCIeLevel.SYS


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def nv_matrix(t: Topology) -> list[list[int]]:
    return [[0 if i == j else t.nvlinks(i, j) for j in range(t.size)] for i in range(t.size)]


def pcie_matrix(t: Topology) -> list[list[PCIeLevel | None]]:
    return [[None if i == j else t.pcie_level(i, j) for j in range(t.size)] for i in range(t.size)]


# ------------------------------------------------------------------------------ fixtures
def test_dgx1_v100_old_driver_equals_catalog_nvlinks() -> None:
    t = parse_topo_matrix(fixture("dgx1-v100-driver375.txt"), name="dgx1")
    dgx = catalog.get("dgx1-v100")
    assert t.size == 8
    assert nv_matrix(t) == nv_matrix(dgx)
    assert t.nvlink_generation == 2 and not t.nvswitch
    # SOC is read as SYS; every non-NVLinked DGX-1 pair crosses the sockets
    for i, j in combinations(range(8), 2):
        if not t.nvlinks(i, j):
            assert t.pcie_level(i, j) == S == dgx.pcie_level(i, j)
        else:  # no NUMA column: same CPU list -> NODE, different -> SYS
            assert t.pcie_level(i, j) == (N if i // 4 == j // 4 else S)
    assert [g.numa_node for g in t.gpus] == [None] * 8
    assert [g.cpu_affinity for g in t.gpus] == [g.cpu_affinity for g in dgx.gpus]
    assert t.gpus[3].uuid == deterministic_uuid("dgx1", 3) and t.gpus[3].pci_bus_id == ""


@pytest.mark.parametrize("name", ["dgx-a100-driver535.txt", "dgx-a100-driver470.txt"])
def test_dgx_a100(name: str) -> None:
    t = parse_topo_matrix(fixture(name), gpu_name="NVIDIA A100-SXM4-40GB", memory_mib=40536)
    ref = catalog.get("dgx-a100")
    assert t.size == 8  # the ten NIC rows/columns are not GPUs
    assert nv_matrix(t) == nv_matrix(ref)
    assert t.nvswitch and t.nvlink_generation == 3
    assert [g.numa_node for g in t.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert [g.cpu_affinity for g in t.gpus] == [g.cpu_affinity for g in ref.gpus]
    assert t.gpus[0].name == "NVIDIA A100-SXM4-40GB" and t.gpus[0].memory_mib == 40536
    # NVLinked pairs: same NUMA node -> NODE, different -> SYS
    assert t.pcie_level(0, 1) == N and t.pcie_level(0, 2) == S
    assert t.link_bandwidth(0, 5) == 300.0


def test_pcie_box_with_spaces_and_a_prompt_line() -> None:
    t = parse_topo_matrix(fixture("pcie-4gpu-spaces.txt"))
    assert nv_matrix(t) == [[0] * 4] * 4
    assert pcie_matrix(t) == [
        [None, P, X, H],
        [P, None, X, H],
        [X, X, None, H],
        [H, H, H, None],
    ]
    assert all(g.numa_node == 0 for g in t.gpus)
    assert t.cpu_affinity(range(4)) == frozenset(range(12)) | frozenset(range(24, 36))


def test_workstation_with_node() -> None:
    t = parse_topo_matrix(fixture("workstation-2gpu-driver535.txt"))
    assert t.size == 2 and t.pcie_level(0, 1) == N and t.nvlinks(0, 1) == 0
    assert t.gpus[1].cpu_affinity == frozenset(range(32)) and t.gpus[1].numa_node == 0


def test_garbage_is_rejected_clearly() -> None:
    text = fixture("not-a-topology.txt")
    assert not is_topo_matrix(text)
    with pytest.raises(TopologyError, match="no header row") as exc:
        parse_topo_matrix(text)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.txt")))
def test_is_topo_matrix_on_fixtures(name: str) -> None:
    assert is_topo_matrix(fixture(name)) == (name != "not-a-topology.txt")


# ------------------------------------------------------------------------------ format quirks
SMALL = (
    "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
    "GPU0\t X \tNV2\tSYS\t0-3\t0\n"
    "GPU1\tNV2\t X \tSYS\t0-3\t0\n"
    "GPU2\tSYS\tSYS\t X \t4-7\t1\n"
)


def test_ansi_colours_and_crlf_are_tolerated() -> None:
    coloured = SMALL.replace("NV2", "\x1b[32mNV2\x1b[0m").replace("\n", "\r\n")
    assert nv_matrix(parse_topo_matrix(coloured)) == nv_matrix(parse_topo_matrix(SMALL))


def test_soc_equals_sys_and_lowercase_x() -> None:
    t = parse_topo_matrix(SMALL.replace("SYS", "SOC").replace(" X ", " x "))
    assert t.pcie_level(0, 2) == S and t.nvlinks(0, 1) == 2


def test_na_values() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n" \
           "GPU0\t X \tNV1\tN/A\tN/A\nGPU1\tNV1\t X \tN/A\tN/A\n"  # fmt: skip
    t = parse_topo_matrix(text)
    assert t.gpus[0].numa_node is None and t.gpus[0].cpu_affinity == frozenset()
    assert t.pcie_level(0, 1) == S  # unknown locality -> the pessimistic level


def test_single_gpu() -> None:
    t = parse_topo_matrix("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-7\t0\n")
    assert t.size == 1 and t.gpus[0].numa_node == 0


def test_no_extra_columns() -> None:
    t = parse_topo_matrix("     GPU0  GPU1\nGPU0  X    PIX\nGPU1  PIX   X\n")
    assert t.pcie_level(0, 1) == P and t.gpus[0].numa_node is None


def test_unknown_trailing_column_is_skipped() -> None:
    text = SMALL.replace("NUMA Affinity\n", "NUMA Affinity\tFuture Thing\n").replace(
        "\t0\n", "\t0\tyes\n"
    ).replace("\t1\n", "\t1\tno\n")
    assert parse_topo_matrix(text).gpus[2].numa_node == 1


# ------------------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no header row"),
        ("hello world\nGPU is great\n", "no header row"),
        (SMALL.replace("GPU1\tNV2\t X \tSYS\t0-3\t0\n", "GPU1\tNV2\t X \t0-3\t0\n"),
         r"line 3: row GPU1 has 4 fields but the header \(line 1\) has 5 columns"),
        (SMALL.replace("GPU2\tSYS\tSYS", "GPU2\tSYS\tFOO"), r"line 4: unknown link 'FOO'"),
        (SMALL.replace("GPU1\tNV2\t X \tSYS", "GPU1\tNV1\t X \tSYS"),
         r"line 3: matrix is not symmetric: GPU1/GPU0 is NV1 but GPU0/GPU1 \(line 2\) is NV2"),
        (SMALL.replace("GPU2\tSYS\tSYS\t X ", "GPU2\tSYS\tSYS\tSYS"),
         r"line 4: GPU2/GPU2 is 'SYS'; the diagonal must be X"),
        (SMALL.replace("GPU0\t X \tNV2\tSYS", "GPU0\t X \tX\tSYS"), r"line 2: X off the diagonal"),
        (SMALL.replace("GPU2\tSYS\tSYS\t X \t4-7\t1\n", ""), "there is no GPU2 row"),
        (SMALL + "GPU1\tNV2\t X \tSYS\t0-3\t0\n", r"line 5: row GPU1 appears twice"),
        (SMALL.replace("\t4-7\t", "\t7-4\t"), r"line 4: GPU2: not a CPU list"),
        (SMALL.replace("\t4-7\t1", "\t4-7\tone"), r"line 4: NUMA Affinity 'one'"),
        (SMALL.replace("\tGPU0\tGPU1\tGPU2", "\tGPU0\tGPU2\tGPU1"), r"line 1: header GPU columns"),
        (SMALL + "GPU7\tSYS\tSYS\tSYS\t0-3\t0\n", r"line 5: row GPU7 has no column"),
        (SMALL + "mlx5_0\tPIX\n", r"line 5: row mlx5_0 has 1 fields"),
    ],
)
def test_errors_are_one_line_with_a_location(text: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message) as exc:
        parse_topo_matrix(text)
    assert "\n" not in str(exc.value)


def test_non_string_input() -> None:
    with pytest.raises(TopologyError):
        parse_topo_matrix(b"GPU0")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ inference
def test_nvlink_generation_inference() -> None:
    p100 = {(a, b): c for (a, b), c in catalog.DGX1_P100_NVLINKS.items()}
    assert infer_nvlink_generation(p100, 8) == 1
    assert infer_nvlink_generation(catalog.DGX1_V100_NVLINKS, 8) == 2
    assert infer_nvlink_generation({(0, 1): 12}, 2) == 3
    assert infer_nvlink_generation({(0, 1): 18}, 2) == 4
    assert infer_nvlink_generation({}, 4) == 2
    # a model name decides when given (Minsky's NV2 pairs are NVLink 1)
    assert infer_nvlink_generation({(0, 1): 2, (2, 3): 2}, 4, "Tesla P100-SXM2-16GB") == 1
    assert infer_nvlink_generation({(0, 1): 2}, 2, "NVIDIA H100 80GB HBM3") == 4
    explicit = parse_topo_matrix(SMALL, nvlink_generation=1)
    assert explicit.nvlink_generation == 1 and explicit.link_bandwidth(0, 1) == 40.0


def test_nvswitch_detection() -> None:
    dgx2 = render_topo_matrix(
        Topology.build(
            "dgx2",
            [GPU(i, deterministic_uuid("d", i), "", "", 0, i // 8, frozenset()) for i in range(16)],
            {(a, b): 6 for a in range(16) for b in range(a + 1, 16)},
            PCIeLevel.SYS,
        )
    )
    assert parse_topo_matrix(dgx2).nvswitch  # NV6 everywhere among 16 GPUs: a switch
    bridge = "\tGPU0\tGPU1\nGPU0\t X \tNV12\nGPU1\tNV12\t X \n"
    assert not parse_topo_matrix(bridge).nvswitch  # two A100s joined by NVLink bridges
    hgx4 = render_topo_matrix(
        Topology.build(
            "hgx4",
            [GPU(i, deterministic_uuid("hgx4", i), "", "", 0, 0, frozenset()) for i in range(4)],
            {(a, b): 4 for a in range(4) for b in range(a + 1, 4)},
            PCIeLevel.NODE,
        )
    )
    assert not parse_topo_matrix(hgx4).nvswitch  # 4 x A100 fully connected point to point


# ------------------------------------------------------------------------------ round trip
@pytest.mark.parametrize("name", catalog.names())
def test_catalog_round_trip(name: str) -> None:
    t = catalog.get(name)
    back = parse_topo_matrix(render_topo_matrix(t), name=name, gpu_name=t.gpus[0].name)
    assert nv_matrix(back) == nv_matrix(t)
    for i, j in combinations(range(t.size), 2):
        if not t.nvlinks(i, j):
            assert back.pcie_level(i, j) == t.pcie_level(i, j)
    assert [g.numa_node for g in back.gpus] == [g.numa_node for g in t.gpus]
    assert [g.cpu_affinity for g in back.gpus] == [g.cpu_affinity for g in t.gpus]
    assert back.nvlink_generation == t.nvlink_generation
    assert back.nvswitch == t.nvswitch
    assert [g.uuid for g in back.gpus] == [g.uuid for g in t.gpus]


@st.composite
def random_topologies(draw: st.DrawFn) -> Topology:
    n = draw(st.integers(2, 16))
    nv: dict[tuple[int, int], int] = {}
    pcie: dict[tuple[int, int], PCIeLevel] = {}
    for i, j in combinations(range(n), 2):
        nv[(i, j)] = draw(st.integers(0, 4))
        pcie[(i, j)] = draw(st.sampled_from(list(PCIeLevel)))
    numa = draw(st.lists(st.none() | st.integers(0, 7), min_size=n, max_size=n))
    cpus = draw(st.lists(st.frozensets(st.integers(0, 255), max_size=12), min_size=n, max_size=n))
    gpus = [GPU(i, deterministic_uuid("r", i), "", "", 0, numa[i], cpus[i]) for i in range(n)]
    return Topology.build("r", gpus, nv, pcie)


@given(random_topologies())
def test_render_parse_round_trip(t: Topology) -> None:
    back = parse_topo_matrix(render_topo_matrix(t))
    assert back.size == t.size
    assert nv_matrix(back) == nv_matrix(t)
    for i, j in combinations(range(t.size), 2):
        if t.nvlinks(i, j) == 0:
            assert back.pcie_level(i, j) == t.pcie_level(i, j)
        else:
            assert back.pcie_level(i, j) in (N, S)
    assert [g.numa_node for g in back.gpus] == [g.numa_node for g in t.gpus]
    assert [g.cpu_affinity for g in back.gpus] == [g.cpu_affinity for g in t.gpus]
