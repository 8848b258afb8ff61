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
    InterNode,
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


def test_built_and_parsed_levels_keep_their_share_their_nvlink_and_the_across_share() -> None:
    """What each level joins at is the configuration's: a share and an NVLink flag given are
    the ones used (not the defaults of 1.0, no NVLink and 0.25 across)."""
    built = Hierarchy.build([Level("zone", 0.3), Level("pod", 0.7, nvlink=True)],
                            across_share=0.1)
    parsed = Hierarchy.parse({"levels": [{"label": "zone", "share": 0.3},
                                         {"label": "pod", "share": 0.7, "nvlink": True}],
                              "acrossShare": 0.1})
    for h in (built, parsed):
        assert h.labels == ("zone", "pod", HOSTNAME)
        assert [h.share(level) for level in (-1, 0, 1, 2)] == [0.1, 0.3, 0.7, 1.0]
        # an NVLink level joins its own nodes and every deeper domain over NVLink
        assert [h.nvlink_between(level) for level in (-1, 0, 1, 2)] == \
            [False, False, True, True]
    assert built == parsed


def test_the_node_level_is_appended_once() -> None:
    assert Hierarchy.parse({"levels": []}).labels == (HOSTNAME,)
    assert Hierarchy.build([]).node_level == 0
    assert Hierarchy.parse({"levels": [{"label": "zone"}, {"label": HOSTNAME}]}).labels == \
        ("zone", HOSTNAME)


def test_a_malformed_hierarchy_is_refused_in_one_line_naming_the_field() -> None:
    """The first problem and where it is, in one line: a document's field by its place
    (``levels.1.share``); a level built in code by its field (each :class:`Level` is checked
    on its own)."""
    with pytest.raises(HierarchyError) as exc:
        Hierarchy.parse({"levels": [{"label": "a"}, {"label": "b", "share": 0}]})
    assert str(exc.value) == "hierarchy levels.1.share: Input should be greater than 0"
    with pytest.raises(HierarchyError) as exc:
        Hierarchy.build([Level("a"), Level("b", share=0.0)])
    assert str(exc.value) == "hierarchy share: Input should be greater than 0"
    with pytest.raises(HierarchyError) as exc:
        Hierarchy.build([Level("a")], across_share=1.5)
    assert str(exc.value) == "hierarchy acrossShare: Input should be less than or equal to 1"
    # a problem of the whole list, by either entry: no field to name, no stray space
    for refuse in (lambda: Hierarchy.parse({"levels": [{"label": "a"}, {"label": "a"}]}),
                   lambda: Hierarchy.build([Level("a"), Level("a")])):
        with pytest.raises(HierarchyError) as exc:
            refuse()
        assert str(exc.value) == "hierarchy: Value error, a label appears twice in the levels"
    # a problem of the whole list has no field to name
    with pytest.raises(HierarchyError) as exc:
        Hierarchy.build([Level("a"), Level("a")])
    assert str(exc.value) == "hierarchy: Value error, a label appears twice in the levels"


def test_an_unknown_level_is_refused_listing_the_levels() -> None:
    with pytest.raises(HierarchyError) as exc:
        DEFAULT.index("zone")
    assert str(exc.value) == (f"no topology level 'zone'; levels: {LABEL_BLOCK}, {LABEL_RACK}, "
                              f"{LABEL_CLIQUE}, {HOSTNAME}")


def test_the_common_level_of_several_nodes_is_the_deepest_domain_holding_them_all() -> None:
    """A third node in the first node's rack does not bring back a level a second node in
    another rack already left: the domain must hold every node."""
    a = DEFAULT.path("a", labels("b1", "r1"))
    b = DEFAULT.path("b", labels("b1", "r2"))
    c = DEFAULT.path("c", labels("b1", "r1"))
    assert DEFAULT.common_level([a, c]) == 1
    assert DEFAULT.common_level([a, b, c]) == 0
    assert DEFAULT.common_level([a, c, b]) == 0
    with pytest.raises(HierarchyError) as exc:
        DEFAULT.common_level([])
    assert str(exc.value) == "no nodes"
    with pytest.raises(HierarchyError, match="no nodes"):
        inter_node(DEFAULT, [])


def test_inter_node_says_at_which_level_the_ring_runs() -> None:
    a = DEFAULT.path("a", labels("b1", "r1", "c1"))
    b = DEFAULT.path("b", labels("b1", "r1", "c1"))
    assert inter_node(DEFAULT, [NodeLink(a, 50.0)]).level == DEFAULT.node_level == 3
    assert inter_node(DEFAULT, [NodeLink(a, 200.0, 3600.0), NodeLink(b, 200.0, 1800.0)]) == \
        InterNode(1800.0, 2, "nvlink")  # the slower tray's fabric share


def test_one_node_outside_the_nvlink_fabric_puts_the_ring_on_the_nics() -> None:
    """Nodes of one NVLink domain talk over NVLink only when every one of them reaches the
    fabric; a node that does not (no NVSwitch: 0 GB/s into it) sends the ring through the
    NICs, at the NICs' rate — not at 0 GB/s over NVLink."""
    a = DEFAULT.path("a", labels("b1", "r1", "c1"))
    b = DEFAULT.path("b", labels("b1", "r1", "c1"))
    assert inter_node(DEFAULT, [NodeLink(a, 200.0, 3600.0), NodeLink(b, 50.0, 0.0)]) == \
        InterNode(50.0, 2, "nic")


def test_a_domain_holds_the_nodes_under_its_path() -> None:
    rack = Domain(1, ("b1", "r1"))
    assert rack.holds(DEFAULT.path("a", labels("b1", "r1")))
    assert not rack.holds(DEFAULT.path("b", labels("b1", "r2")))
    assert not rack.holds(DEFAULT.path("c", labels("b2", "r1")))  # r1 of another block
    assert Domain(0, ("b1",)).holds(DEFAULT.path("b", labels("b1", "r2")))


def test_a_domain_not_in_the_tree_has_no_members() -> None:
    tree = domains(DEFAULT, [DEFAULT.path("a", labels("b1", "r1"))])
    assert tree.members(Domain(1, ("b1", "r2"))) == []
    assert tree.members(Domain(1, ("b1", "r1"))) == [0]


def test_a_widest_level_that_is_an_nvlink_domain_joins_its_nodes_over_nvlink() -> None:
    """A hierarchy whose top level is the NVLink domain (one NVL72 rack per label value):
    nodes sharing it talk over NVLink; nodes with no common domain do not."""
    h = Hierarchy.build([Level(LABEL_CLIQUE, nvlink=True)])
    assert h.nvlink_between(0) and h.nvlink_between(1) and not h.nvlink_between(-1)
    a, b = h.path("a", {LABEL_CLIQUE: "c1"}), h.path("b", {LABEL_CLIQUE: "c1"})
    assert inter_node(h, [NodeLink(a, 200.0, 3600.0), NodeLink(b, 200.0, 3600.0)]) == \
        InterNode(3600.0, 0, "nvlink")
