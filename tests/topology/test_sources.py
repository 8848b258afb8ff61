"""load_topology: catalog names, annotation JSON/YAML files and saved nvidia-smi text."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from topology import catalog, serialization
from topology.model import TopologyError
from topology.nvidia_smi import render_topo_matrix
from topology.sources import describe_memory, load_topology, load_topology_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


@pytest.mark.parametrize("name", catalog.names())
def test_catalog_names(name: str) -> None:
    assert load_topology(name) is catalog.get(name)
    assert load_topology(name.upper()) == catalog.get(name)


def test_json_file(tmp_path: Path) -> None:
    t = catalog.get("summit")
    path = tmp_path / "node.json"
    path.write_text(serialization.dumps(t))
    assert load_topology(str(path)) == t


def test_yaml_file(tmp_path: Path) -> None:
    t = catalog.get("dgx-a100")
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(json.loads(serialization.dumps(t)), sort_keys=False))
    assert load_topology(str(path)) == t


def test_format_is_detected_by_content_not_extension(tmp_path: Path) -> None:
    t = catalog.get("minsky")
    path = tmp_path / "node.txt"
    path.write_text(serialization.dumps(t))
    assert load_topology(str(path)) == t


def test_nvidia_smi_file() -> None:
    t = load_topology(str(FIXTURES / "dgx1-v100-driver375.txt"))
    assert t.name == "dgx1-v100-driver375"
    assert [[t.links[i][j].nvlinks for j in range(8)] for i in range(8)] == [
        [catalog.get("dgx1-v100").links[i][j].nvlinks for j in range(8)] for i in range(8)
    ]


def test_rendered_text_file(tmp_path: Path) -> None:
    path = tmp_path / "box.topo"
    path.write_text(render_topo_matrix(catalog.get("pcie-8gpu")))
    t = load_topology(str(path))
    assert t.size == 8 and t.name == "box"


def test_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mybox").write_text(serialization.dumps(catalog.get("gaia-4gpu")))
    monkeypatch.chdir(tmp_path)
    assert load_topology("mybox") == catalog.get("gaia-4gpu")


# ------------------------------------------------------------------------------ errors
def one_line_error(src: str) -> str:
    with pytest.raises(TopologyError) as exc:
        load_topology(src)
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_unknown_name_lists_the_catalog() -> None:
    message = one_line_error("dgx-9000")
    assert "dgx-9000" in message
    for name in catalog.names():
        assert name in message


def test_missing_file(tmp_path: Path) -> None:
    message = one_line_error(str(tmp_path / "nope.json"))
    assert "not found" in message and "nope.json" in message


def test_empty_source() -> None:
    assert "empty" in one_line_error("  ")


def test_directory(tmp_path: Path) -> None:
    assert "not a regular file" in one_line_error(str(tmp_path))


def test_garbage_file() -> None:
    message = one_line_error(str(FIXTURES / "not-a-topology.txt"))
    assert "not a topology" in message and "nvidia-smi" in message


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text("")
    assert "empty" in one_line_error(str(path))


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "blob.bin"
    path.write_bytes(b"\xff\xfe\x00\x81" * 10)
    assert "UTF-8" in one_line_error(str(path))


def test_bad_json_names_file_and_problem(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"schemaVersion": "gputopo.io/v9", "gpus": []}')
    message = one_line_error(str(path))
    assert str(path) in message and "gputopo.io/v9" in message


def test_yaml_without_schema_version_is_not_a_topology(tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\n")
    assert "not a topology" in one_line_error(str(path))


def test_yaml_with_schema_violation(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("schemaVersion: gputopo.io/v1\ngpus: []\nlinks: []\n")
    assert "invalid topology" in one_line_error(str(path))


def test_malformed_nvidia_smi_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.txt"
    path.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU1\tNV2\t X \n")
    message = one_line_error(str(path))
    assert str(path) in message and "line 3" in message and "symmetric" in message


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.json"
    path.write_text("{}")
    path.chmod(0)
    try:
        assert "cannot read" in one_line_error(str(path))
    finally:
        path.chmod(0o600)


def test_load_topology_text_directly() -> None:
    text = render_topo_matrix(catalog.get("summit"))
    t = load_topology_text(text, name="n1")
    assert t.name == "n1" and t.size == 6


# --- GPU model and memory of a source that names neither (issue 21, "found on the way") -------
def test_a_topo_m_text_takes_its_model_from_the_catalog() -> None:
    src = str(FIXTURES / "dgx1-v100-driver375.txt")
    plain = load_topology(src)
    assert {g.memory_mib for g in plain.gpus} == {0}
    t = load_topology(src, gpu_model="tesla v100-sxm2-16gb")  # case and spacing ignored
    assert {(g.name, g.memory_mib) for g in t.gpus} == {("Tesla V100-SXM2-16GB", 16160)}
    assert t.links == plain.links
    assert describe_memory(src, t, gpu_model="tesla v100-sxm2-16gb") == (
        "GPU memory: 16160 MiB for GPUs 0-7 from the catalog's Tesla V100-SXM2-16GB entry "
        "(--gpu-model)")


def test_which_memory_is_used_is_said() -> None:
    src = str(FIXTURES / "dgx1-v100-driver375.txt")
    flag = load_topology(src, gpu_memory_mib=32510)
    assert describe_memory(src, flag, gpu_memory_mib=32510) == (
        "GPU memory: 32510 MiB for GPUs 0-7 from --gpu-memory-mib")
    # the catalog's model wins over the flag, as the model names the memory exactly
    both = load_topology(src, gpu_memory_mib=32510, gpu_model="Tesla P4")
    assert {g.memory_mib for g in both.gpus} == {7611}
    unknown = load_topology(src)
    assert describe_memory(src, unknown).startswith("GPU memory: unknown for GPUs 0-7 (")
    assert describe_memory("dgx1-v100", load_topology("dgx1-v100")) == (
        "GPU memory: 16160 MiB for GPUs 0-7 from dgx1-v100")
    assert describe_memory(None, load_topology("dgx1-v100")) == (
        "GPU memory: 16160 MiB for GPUs 0-7 from NVML")


def test_an_unknown_model_lists_the_catalogs() -> None:
    with pytest.raises(TopologyError, match="unknown GPU model 'RTX 9090'; the catalog knows"):
        load_topology(str(FIXTURES / "dgx1-v100-driver375.txt"), gpu_model="RTX 9090")


def test_a_named_source_keeps_its_name() -> None:
    """--gpu-model fills in only GPUs the source names no model for."""
    t = load_topology("dgx-a100", gpu_model="Tesla T4")
    assert {g.name for g in t.gpus} == {"NVIDIA A100-SXM4-40GB"}
