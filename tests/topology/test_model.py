"""The topology model, the annotation JSON and pattern graphs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given

from tests.topology.strategies import topologies
from topology import catalog, serialization
from topology.model import (
    GPU,
    LinkBandwidths,
    PCIeLevel,
    Topology,
    TopologyError,
    deterministic_uuid,
    format_cpu_list,
    parse_cpu_list,
)
from topology.patterns import PatternError, all_to_all, pair, parse_pattern, ring, tree

REPO = Path(__file__).resolve().parents[2]


def test_pcie_level_order_and_soc_alias() -> None:
    assert PCIeLevel.PIX < PCIeLevel.PXB < PCIeLevel.PHB < PCIeLevel.NODE < PCIeLevel.SYS
    assert PCIeLevel.parse("SOC") is PCIeLevel.SYS
    assert PCIeLevel.parse(" node ") is PCIeLevel.NODE
    with pytest.raises(TopologyError, match="unknown PCIe level"):
        PCIeLevel.parse("NV2")


def test_cpu_lists_round_trip() -> None:
    assert format_cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert parse_cpu_list("0-19,40-59") == frozenset(range(20)) | frozenset(range(40, 60))
    assert parse_cpu_list("N/A") == frozenset()
    with pytest.raises(TopologyError):
        parse_cpu_list("3-1")
    with pytest.raises(TopologyError):
        parse_cpu_list("a,b")


def test_dgx1_v100_bandwidths_mapa_table1() -> None:
    t = catalog.get("dgx1-v100")
    assert t.link_bandwidth(0, 3) == 50.0  # NV2: 2 x 25 GB/s (NVLink v2)
    assert t.link_bandwidth(0, 1) == 25.0  # NV1
    assert t.link_bandwidth(0, 5) == 12.0  # PCIe Gen3 x16
    assert t.pcie_level(0, 5) is PCIeLevel.SYS
    # bandwidth table can be overridden
    t2 = t.with_bandwidths(LinkBandwidths({2: 30.0}, {lv: 10.0 for lv in PCIeLevel}))
    assert t2.link_bandwidth(0, 3) == 60.0 and t2.link_bandwidth(0, 5) == 10.0
    assert t2.topology_class != t.topology_class


def test_mapa_worked_example_aggbw() -> None:
    """MAPA §3.4.1 / Fig. 10: paper GPUs 1,2,5 (0-based 0,1,4) → 87 GB/s; 1,3,4 → 125."""
    t = catalog.get("dgx1-v100")
    g = t.hardware_graph([0, 1, 4])
    assert g.size(weight="weight") == 87.0
    assert t.hardware_graph([0, 2, 3]).size(weight="weight") == 125.0


def test_cpu_affinity_and_numa() -> None:
    t = catalog.get("dgx1-v100")
    assert format_cpu_list(t.cpu_affinity([0, 1])) == "0-19,40-59"
    assert t.numa_nodes([0, 5]) == (0, 1)


def test_build_rejects_inconsistent_input() -> None:
    gpus = [GPU(i, deterministic_uuid("x", i), "", "", 0, 0, frozenset()) for i in range(2)]
    with pytest.raises(TopologyError, match="asymmetric"):
        Topology.build("x", gpus, {(0, 1): 1, (1, 0): 2}, PCIeLevel.PIX)
    with pytest.raises(TopologyError, match="no PCIe level"):
        Topology.build("x", gpus, {}, {})
    with pytest.raises(TopologyError, match="index"):
        Topology.build("x", list(reversed(gpus)), {}, PCIeLevel.PIX)
    dup = [gpus[0], GPU(1, gpus[0].uuid, "", "", 0, 0, frozenset())]
    with pytest.raises(TopologyError, match="duplicate"):
        Topology.build("x", dup, {}, PCIeLevel.PIX)


def test_deterministic_uuid() -> None:
    assert deterministic_uuid("dgx1-v100", 3) == deterministic_uuid("dgx1-v100", 3)
    assert deterministic_uuid("dgx1-v100", 3) != deterministic_uuid("dgx1-p100", 3)
    assert deterministic_uuid("a", 0).startswith("GPU-")


@given(topologies())
def test_serialization_round_trip(topo: Topology) -> None:
    text = serialization.dumps(topo)
    back = serialization.loads(text)
    assert back == topo
    assert back.topology_class == topo.topology_class
    assert serialization.dumps(back) == text  # deterministic bytes


def test_bandwidth_override_round_trips() -> None:
    t = catalog.get("dgx1-v100").with_bandwidths(LinkBandwidths({2: 30.0}))
    assert serialization.loads(serialization.dumps(t)).link_bandwidth(0, 3) == 60.0


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(schemaVersion="gputopo.io/v2"), "unsupported topology schemaVersion"),
        (lambda d: d.pop("schemaVersion"), "unsupported topology schemaVersion"),
        (lambda d: d["links"].pop(), "need all"),
        (lambda d: d["links"].append(d["links"][0]), "listed twice"),
        (lambda d: d["gpus"][0].update(cpuAffinity="x-y"), "cpuAffinity"),
        (lambda d: d["links"][0].update(pcie="FOO"), "pcie"),
        (lambda d: d.update(extra=1), "extra"),
    ],
)
def test_corrupt_annotations_rejected_clearly(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(serialization.dumps(catalog.get("dgx1-v100")))
    mutate(doc)
    with pytest.raises(TopologyError, match=message):
        serialization.loads(json.dumps(doc))


def test_not_json_rejected() -> None:
    with pytest.raises(TopologyError, match="not valid JSON"):
        serialization.loads("{nope")
    with pytest.raises(TopologyError, match="object"):
        serialization.loads("[]")


def test_published_schema_is_current() -> None:
    published = json.loads((REPO / "topology/schema/topology-v1.schema.json").read_text())
    assert published == json.loads(json.dumps(serialization.json_schema())), (
        "regenerate with: gputopo topology schema > topology/schema/topology-v1.schema.json"
    )


def test_patterns() -> None:
    assert ring(4).edges == ((0, 1), (0, 3), (1, 2), (2, 3))
    assert ring(2).edges == ((0, 1),)
    assert tree(5).edges == ((0, 1), (0, 2), (1, 3), (1, 4))
    assert len(all_to_all(4).edges) == 6 and all_to_all(4).is_complete
    assert pair(4).edges == ((0, 1), (2, 3))
    assert pair(3).edges == ((0, 1), (0, 2))
    assert parse_pattern("All_To_All", 3) == all_to_all(3)
    custom = parse_pattern("0-1,1-2", 3)
    assert custom.name == "custom" and custom.edges == ((0, 1), (1, 2))


@pytest.mark.parametrize(
    ("text", "message"),
    [("star", "bad pattern"), ("0-1,1-4", "only 3"), ("1-1", "self-loop"), ("", "empty"),
     ("0-1-2", "bad pattern")],
)
def test_bad_patterns(text: str, message: str) -> None:
    with pytest.raises(PatternError, match=message):
        parse_pattern(text, 3)


def test_nvlink5_has_its_own_rate_without_changing_the_default_table() -> None:
    """NVLink 5 (Blackwell) runs 50 GB/s per link and direction; the default table, and so
    every existing machine's class, is unchanged."""
    from topology.model import DEFAULT_NVLINK_GBPS, LinkBandwidths

    bw = LinkBandwidths()
    assert bw.nvlink(5) == 50.0 and bw.nvlink(4) == 25.0 and 5 not in DEFAULT_NVLINK_GBPS
    assert bw.nvlink(9) == 25.0  # unknown: the table's newest
