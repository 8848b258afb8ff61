"""One truth for topology: for every source the device plugin can be started on (every catalog
machine, every saved ``nvidia-smi topo -m`` fixture), the ``gputopo.io/topology`` annotation it
publishes is byte for byte what ``gputopo topology show SRC --output json`` prints, and it is
the machine the source describes (checked against the catalog entry, or against the
``nvidia-smi`` parser's own reading of the text, neither of which goes through the fake NVML).

GPU memory: from the source, else the catalog's figure for the GPU model, else
``--gpu-memory-mib``; a node whose memory is unknown does not advertise
``gputopo.io/vgpu-memory`` and says so.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from itertools import combinations
from pathlib import Path

import pytest
from typer.testing import CliRunner

from device_plugin.plugin import DevicePlugin, PluginError, advertised_resources, memory_notice
from device_plugin.settings import load_settings
from gputopo_cli.main import app
from topology import catalog, serialization
from topology.contract import ANN_TOPOLOGY, RESOURCE_VGPU_MEMORY
from topology.discovery.source import first_difference, open_node_gpus
from topology.model import Topology
from topology.nvidia_smi import parse_topo_matrix
from topology.patterns import ring
from topology.policies.base import NodeState, Request
from topology.policies.evaluate import Evaluator

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
TEXTS = sorted(p for p in FIXTURES.glob("*.txt") if p.name != "not-a-topology.txt")
SOURCES = catalog.names() + [str(p) for p in TEXTS]
DGX1_TEXTS = [p for p in TEXTS if p.name.startswith("dgx1-v100")]
place = Evaluator().place


def show_json(src: str, *extra: str) -> str:
    result = CliRunner().invoke(app, ["topology", "show", src, "--output", "json", *extra])
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def build_plugin(src: str, tmp_path: Path, **flags: object) -> DevicePlugin:
    """The plugin as ``gputopo device-plugin --fake-topology SRC`` builds it (nothing served)."""
    settings = load_settings({
        "node_name": "n1", "fake_topology": src, "metrics_port": 0,
        "pod_source": f"file:{tmp_path / 'pods.json'}", "node_sink": f"file:{tmp_path / 'n.json'}",
        **flags,
    })  # fmt: skip
    return DevicePlugin.build(settings)


def published(plugin: DevicePlugin) -> str:
    return plugin.publish_loop.make().annotations[ANN_TOPOLOGY]


def fixture_ids() -> list[str]:
    return [Path(s).name if "/" in s else s for s in SOURCES]


# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("src", SOURCES, ids=fixture_ids())
def test_published_topology_is_what_topology_show_prints(src: str, tmp_path: Path) -> None:
    plugin = build_plugin(src, tmp_path)
    assert published(plugin) == show_json(src)
    # the same with the memory option (it only matters where memory is unknown)
    plugin = build_plugin(src, tmp_path, gpu_memory_mib=24576)
    assert published(plugin) == show_json(src, "--gpu-memory-mib", "24576")


@pytest.mark.parametrize("name", catalog.names())
def test_catalog_machine_is_published_as_is(name: str, tmp_path: Path) -> None:
    plugin = build_plugin(name, tmp_path, gpu_memory_mib=1)  # catalog memory wins
    assert published(plugin) == serialization.dumps(catalog.get(name))
    assert serialization.loads(published(plugin)) == catalog.get(name)
    assert advertised_resources(plugin.topology) == plugin.resources
    assert RESOURCE_VGPU_MEMORY in {r.name for r in plugin.resources}


def _same_machine(text_model: Topology, node: Topology) -> None:
    """``node`` (published) is the machine the parser read from the text: every pair's link,
    every GPU's NUMA node, CPUs and UUID, the NVLink generation and NVSwitch."""
    assert node.size == text_model.size
    assert node.link_signature() == text_model.link_signature()
    assert node.nvlink_generation == text_model.nvlink_generation
    assert node.nvswitch == text_model.nvswitch
    for a, b in zip(text_model.gpus, node.gpus, strict=True):
        assert (b.uuid, b.numa_node, b.cpu_affinity) == (a.uuid, a.numa_node, a.cpu_affinity)
    buses = [g.pci_bus_id for g in node.gpus]
    assert len(set(buses)) == node.size and all(b.startswith("FFFF:") for b in buses)


@pytest.mark.parametrize("path", TEXTS, ids=[p.name for p in TEXTS])
def test_topo_matrix_text_is_published_as_the_text_says(path: Path, tmp_path: Path) -> None:
    text_model = parse_topo_matrix(path.read_text(), name=path.stem)
    plugin = build_plugin(str(path), tmp_path)
    _same_machine(text_model, serialization.loads(published(plugin)))


@pytest.mark.parametrize("path", DGX1_TEXTS, ids=[p.name for p in DGX1_TEXTS])
def test_dgx1_text_has_the_dgx1_nvlinks_and_places_like_it(path: Path, tmp_path: Path) -> None:
    """The bug of issue 12: on a DGX-1 text every NVLink used to land on GPU 7 (19 of the 28
    pairs wrong), and a 4-GPU ring went to {0,1,2,7} instead of an NVLinked quartet."""
    node = serialization.loads(published(build_plugin(str(path), tmp_path)))
    dgx = catalog.get("dgx1-v100")
    for i, j in combinations(range(8), 2):
        assert node.nvlinks(i, j) == dgx.nvlinks(i, j), (i, j)
        if not dgx.nvlinks(i, j):
            assert node.pcie_level(i, j) == dgx.pcie_level(i, j), (i, j)
    four = place("gputopo", node, NodeState(), Request(count=4, pattern=ring(4)))
    best = place("gputopo", dgx, NodeState(), Request(count=4, pattern=ring(4)))
    assert four.effective_bandwidth_gbps == best.effective_bandwidth_gbps
    assert all(node.nvlinks(a, b) for a, b in combinations(four.gpus, 2) if a // 4 == b // 4)
    pair = place("gputopo", node, NodeState(), Request(count=2))
    assert node.nvlinks(*pair.gpus) == 2


# ---------------------------------------------------------------------------------------- memory
@pytest.mark.parametrize("path", TEXTS, ids=[p.name for p in TEXTS])
def test_text_without_memory_does_not_advertise_vgpu_memory(path: Path, tmp_path: Path) -> None:
    plugin = build_plugin(str(path), tmp_path)
    assert all(g.memory_mib == 0 for g in plugin.topology.gpus)
    assert RESOURCE_VGPU_MEMORY not in {r.name for r in plugin.resources}
    assert RESOURCE_VGPU_MEMORY not in {s.spec.name for s in plugin.servers}
    notice = memory_notice(plugin.topology, plugin.settings)
    assert notice is not None
    assert "every GPU" in notice and "not advertised" in notice and "--gpu-memory-mib" in notice

    plugin = build_plugin(str(path), tmp_path, gpu_memory_mib=16160)
    assert [g.memory_mib for g in plugin.topology.gpus] == [16160] * plugin.topology.size
    assert RESOURCE_VGPU_MEMORY in {s.spec.name for s in plugin.servers}
    listing = plugin.inventory.listing(RESOURCE_VGPU_MEMORY)
    assert len(listing) == plugin.topology.size * (16160 // 256)
    assert memory_notice(plugin.topology, plugin.settings) is None


def test_memory_from_the_gpu_model_via_the_catalog(tmp_path: Path) -> None:
    """A topology file that names the model but not the memory gets the catalog's figure."""
    dgx = catalog.get("dgx1-v100")
    nameless = replace(dgx, gpus=tuple(replace(g, memory_mib=0) for g in dgx.gpus))
    path = tmp_path / "v100.json"
    path.write_text(serialization.dumps(nameless))
    plugin = build_plugin(str(path), tmp_path, gpu_memory_mib=1)
    assert [g.memory_mib for g in plugin.topology.gpus] == [16160] * 8
    assert published(plugin) == show_json(str(path))


def test_partly_unknown_memory_is_said_and_those_gpus_get_no_memory_devices(
    tmp_path: Path,
) -> None:
    dgx = catalog.get("dgx1-v100")
    gpus = list(dgx.gpus)
    gpus[2] = replace(gpus[2], name="Mystery GPU", memory_mib=0)
    path = tmp_path / "mixed.json"
    path.write_text(serialization.dumps(replace(dgx, gpus=tuple(gpus))))
    plugin = build_plugin(str(path), tmp_path)
    notice = memory_notice(plugin.topology, plugin.settings)
    assert notice is not None and "GPUs 2 " in notice and "Mystery GPU" in notice
    assert RESOURCE_VGPU_MEMORY in {s.spec.name for s in plugin.servers}
    on_gpu = {d.gpu for d, _ok in plugin.inventory.listing(RESOURCE_VGPU_MEMORY)}
    assert on_gpu == {0, 1, 3, 4, 5, 6, 7}


def test_the_start_up_log_says_memory_is_unknown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = str(FIXTURES / "dgx1-v100-driver535.txt")
    (tmp_path / "dp").mkdir()
    plugin = build_plugin(text, tmp_path, device_plugin_dir=str(tmp_path / "dp"))
    caplog.set_level(logging.WARNING, logger="device_plugin")
    try:
        plugin.start()
    finally:
        plugin.stop()
    lines = [r.getMessage() for r in caplog.records if "GPU memory unknown" in r.getMessage()]
    assert len(lines) == 1 and RESOURCE_VGPU_MEMORY in lines[0]


# ------------------------------------------------------------------------------- refusals
def test_a_source_the_fake_cannot_impersonate_stops_the_plugin(tmp_path: Path) -> None:
    """NVSwitch pairs with unequal NV counts cannot come out of a switch fabric: rather than
    publish something else, the plugin refuses to start and names the first difference."""
    a100 = catalog.get("dgx-a100")
    nvlinks = {(a, b): 12 for a, b in combinations(range(8), 2)}
    nvlinks[(0, 1)] = 6
    odd = Topology.build(
        "odd", a100.gpus, nvlinks, {(a, b): a100.pcie_level(a, b) for a, b in nvlinks},
        nvlink_generation=3, nvswitch=True,
    )  # fmt: skip
    path = tmp_path / "odd.json"
    path.write_text(serialization.dumps(odd))
    with pytest.raises(PluginError, match="cannot impersonate .* faithfully: GPUs 0,1 are NV12"):
        build_plugin(str(path), tmp_path)


def test_bad_bus_ids_are_refused_by_both_paths(tmp_path: Path) -> None:
    dgx = catalog.get("dgx1-v100")
    gpus = list(dgx.gpus)
    gpus[3] = replace(gpus[3], pci_bus_id=gpus[1].pci_bus_id.lower())
    path = tmp_path / "twice.json"
    path.write_text(serialization.dumps(replace(dgx, gpus=tuple(gpus))))
    with pytest.raises(PluginError, match="GPUs 1 and 3 have the same pciBusId 0000:07:00.0"):
        build_plugin(str(path), tmp_path)
    result = CliRunner().invoke(app, ["topology", "show", str(path)])
    assert result.exit_code == 2 and "same pciBusId" in result.stderr


def test_first_difference_names_what_differs() -> None:
    dgx = catalog.get("dgx1-v100")
    assert first_difference(dgx, dgx) is None
    other = replace(dgx, gpus=(replace(dgx.gpus[0], memory_mib=1), *dgx.gpus[1:]))
    assert first_difference(dgx, other) == "GPU 0 memory_mib is 1 instead of 16160"
    assert open_node_gpus("dgx1-v100").fake


def test_the_driver_path_completes_what_nvml_does_not_say() -> None:
    """A real node takes the same completion: a driver reporting no memory for a catalog GPU
    model gets the catalog's figure; the topology is named after the node."""
    from topology.discovery.fake_nvml import FakeNVML

    dgx = catalog.get("dgx1-v100")
    silent = replace(dgx, gpus=tuple(replace(g, memory_mib=0) for g in dgx.gpus))
    gpus = open_node_gpus(None, node_name="gpu-node-7", nvml=FakeNVML(silent))
    assert not gpus.fake
    assert gpus.topology.name == "gpu-node-7"
    assert gpus.topology == dgx  # memory from the catalog's V100-SXM2-16GB
    unknown = replace(silent, gpus=tuple(replace(g, name="Mystery") for g in silent.gpus))
    gpus = open_node_gpus(None, nvml=FakeNVML(unknown), gpu_memory_mib=8192)
    assert [g.memory_mib for g in gpus.topology.gpus] == [8192] * 8
