"""Node publishing: the topology annotation the plugin publishes is the catalog entry, for
every catalog machine run through the fake NVML and the plugin's own discovery path."""

from __future__ import annotations

import pytest

from device_plugin.plugin import PluginError, open_nvml
from device_plugin.settings import load_settings
from gpunode.publish import (
    ANN_VGPU_MEMORY_UNIT,
    MemoryNodePublisher,
    PublishLoop,
    gpu_model_label,
    label_value,
    node_metadata,
)
from topology import catalog, serialization
from topology.contract import (
    ANN_TOPOLOGY,
    ANN_UNHEALTHY_GPUS,
    LABEL_GPU_MODEL,
    LABEL_TOPOLOGY_CLASS,
)
from topology.model import Topology


@pytest.mark.parametrize("name", catalog.names())
def test_published_annotation_is_the_catalog_entry(name: str) -> None:
    settings = load_settings({"node_name": "n1", "fake_topology": name})
    _nvml, discovered = open_nvml(settings)
    meta = node_metadata(discovered, frozenset(), 256)
    assert meta.annotations[ANN_TOPOLOGY] == serialization.dumps(catalog.get(name))
    assert serialization.loads(meta.annotations[ANN_TOPOLOGY]) == catalog.get(name)
    assert meta.labels[LABEL_TOPOLOGY_CLASS] == catalog.get(name).topology_class
    assert meta.labels[LABEL_GPU_MODEL] == label_value(catalog.get(name).gpus[0].name)
    assert meta.annotations[ANN_UNHEALTHY_GPUS] == ""
    assert meta.annotations[ANN_VGPU_MEMORY_UNIT] == "256"


def test_unknown_fake_topology_is_a_plugin_error() -> None:
    with pytest.raises(PluginError, match="unknown topology"):
        open_nvml(load_settings({"node_name": "n1", "fake_topology": "no-such-machine"}))


def test_label_values() -> None:
    assert label_value("Tesla V100-SXM2-16GB") == "Tesla-V100-SXM2-16GB"
    assert label_value("NVIDIA A100-SXM4-80GB (MIG)") == "NVIDIA-A100-SXM4-80GB-MIG"
    assert len(label_value("x" * 100)) == 63
    assert label_value("  ") == ""


def test_mixed_models_and_unhealthy_gpus(topo: Topology) -> None:
    from dataclasses import replace

    gpus = list(topo.gpus)
    gpus[1] = replace(gpus[1], name="Tesla P100")
    mixed = replace(topo, gpus=tuple(gpus))
    assert gpu_model_label(mixed) == "mixed"
    meta = node_metadata(topo, frozenset({topo.gpus[5].uuid, topo.gpus[2].uuid}), 512)
    assert meta.annotations[ANN_UNHEALTHY_GPUS] == "2,5"


def test_publish_loop_publishes_and_survives_errors(topo: Topology) -> None:
    from gpunode.publish import PublishError

    sink = MemoryNodePublisher()
    loop = PublishLoop(sink, "n1", lambda: node_metadata(topo, frozenset(), 256), 60)
    assert loop.publish_once()
    assert sink.published[0][0] == "n1"

    class Broken:
        def publish(self, node, meta):  # type: ignore[no-untyped-def]
            raise PublishError("apiserver down")

    errors = []
    loop = PublishLoop(
        Broken(),
        "n1",
        lambda: node_metadata(topo, frozenset(), 256),
        60,
        on_error=lambda: errors.append(1),
    )
    assert not loop.publish_once() and errors == [1]
