"""Topology levels from node labels (Kueue's Topology), domains, and inter-node bandwidth."""

from __future__ import annotations

import math

import pytest

from topology.hierarchy import (
    DEFAULT,
    HOSTNAME,
    LABEL_BLOCK,
    LABEL_CLIQUE,
    LABEL_RACK,
    Domain,
    Hierarchy,
    HierarchyError,
    Level,
    NodeLink,
    domains,
    inter_node,
)


def labels(block: str, rack: str, clique: str | None = None) -> dict[str, str]:
    out = {LABEL_BLOCK: block, LABEL_RACK: rack}
    if clique:
        out[LABEL_CLIQUE] = clique
    return out


def test_default_levels_and_paths() -> None:
    assert DEFAULT.labels == (LABEL_BLOCK, LABEL_RACK, LABEL_CLIQUE, HOSTNAME)
    assert DEFAULT.path("n1", labels("b1", "r1", "c1")) == ("b1", "r1", "c1", "n1")
    # no clique label: the node is an NVLink domain of its own
    assert DEFAULT.path("n2", labels("b1", "r1")) == ("b1", "r1", "~n2", "n2")
    assert DEFAULT.index(LABEL_RACK) == 1
    with pytest.raises(HierarchyError, match="no topology level 'zone'"):
        DEFAULT.index("zone")


def test_common_level_and_shares() -> None:
    a = DEFAULT.path("a", labels("b1", "r1"))
    b = DEFAULT.path("b", labels("b1", "r1"))
    c = DEFAULT.path("c", labels("b1", "r2"))
    d = DEFAULT.path("d", labels("b2", "r1"))  # rack r1 of block b2 is another rack
    assert DEFAULT.common_level([a, b]) == 1 and DEFAULT.share(1) == 1.0
    assert DEFAULT.common_level([a, c]) == 0 and DEFAULT.share(0) == 0.5
    assert DEFAULT.common_level([a, d]) == -1 and DEFAULT.share(-1) == 0.25
    assert DEFAULT.common_level([a]) == DEFAULT.node_level


def test_inter_node_ring_runs_at_the_slowest_node_and_the_level_share() -> None:
    a, b, c = (DEFAULT.path(n, labels("b1", r)) for n, r in (("a", "r1"), ("b", "r1"),
                                                              ("c", "r2")))
    same_rack = inter_node(DEFAULT, [NodeLink(a, 50.0), NodeLink(b, 25.0)])
    assert (same_rack.gbps, same_rack.over) == (25.0, "nic")
    across = inter_node(DEFAULT, [NodeLink(a, 50.0), NodeLink(c, 50.0)])
    assert across.gbps == 25.0 and across.level == 0
    one = inter_node(DEFAULT, [NodeLink(a, 50.0)])
    assert math.isinf(one.gbps) and one.over == "none"


def test_an_nvlink_domain_joins_nodes_over_nvlink() -> None:
    """GB200 NVL72: trays of one nvidia.com/gpu.clique talk over NVLink, not their NICs."""
    a = DEFAULT.path("a", labels("b1", "r1", "c1"))
    b = DEFAULT.path("b", labels("b1", "r1", "c1"))
    c = DEFAULT.path("c", labels("b1", "r1", "c2"))
    nv = inter_node(DEFAULT, [NodeLink(a, 200.0, 3600.0), NodeLink(b, 200.0, 3600.0)])
    assert (nv.gbps, nv.over) == (3600.0, "nvlink")
    nic = inter_node(DEFAULT, [NodeLink(a, 200.0, 3600.0), NodeLink(c, 200.0, 3600.0)])
    assert (nic.gbps, nic.over) == (200.0, "nic")


def test_domains_group_nodes_per_level() -> None:
    paths = [DEFAULT.path(n, labels(bk, r)) for n, bk, r in
             (("a", "b1", "r1"), ("b", "b1", "r1"), ("c", "b1", "r2"), ("d", "b2", "r1"))]
    tree = domains(DEFAULT, paths)
    assert [d.path for d in tree.at(1)] == [("b1", "r1"), ("b1", "r2"), ("b2", "r1")]
    assert tree.members(Domain(1, ("b1", "r1"))) == [0, 1]
    assert tree.members(Domain(0, ("b1",))) == [0, 1, 2]
    assert Domain(1, ("b1", "r2")).describe(DEFAULT) == f"{LABEL_RACK}=r2"


def test_configured_levels() -> None:
    h = Hierarchy.parse({"levels": [{"label": "zone", "share": 0.1},
                                    {"label": "leaf"}], "acrossShare": 0.05})
    assert h.labels == ("zone", "leaf", HOSTNAME) and h.share(-1) == 0.05
    assert Hierarchy.build([Level("x")]).labels == ("x", HOSTNAME)
    for bad, message in (({"levels": [{"label": "a"}, {"label": "a"}]}, "twice"),
                         ({"levels": [{"label": "a", "share": 0}]}, "greater than 0"),
                         ({"levels": [{"label": HOSTNAME}, {"label": "a"}]}, "last level"),
                         ({"levels": [], "colour": 1}, "colour")):
        with pytest.raises(HierarchyError, match=message):
            Hierarchy.parse(bad)
