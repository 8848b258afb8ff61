"""Where a gang goes: Kueue TAS's best fit (the reference) and gputopo's domain choice by
bandwidth and PreservedBW."""

from __future__ import annotations

import math
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import catalog
from topology.gang import (
    Gang,
    GangNode,
    GangNoFit,
    capacity,
    choose,
    choose_kueue,
    preserved_loss_gbps,
    with_postponement,
)
from topology.hierarchy import DEFAULT, LABEL_BLOCK, LABEL_CLIQUE, LABEL_RACK, HierarchyError
from topology.patterns import parse_pattern
from topology.policies.base import NodeState, Request, RequestError
from topology.policies.evaluate import Evaluator

DGX = catalog.get("dgx1-v100")
DGX_NET = catalog.network("dgx1-v100")


def cluster(busy: dict[str, set[int]] | None = None, *, blocks: int = 2, racks: int = 2,
            per_rack: int = 4, machine: str = "dgx1-v100",
            clique: bool = False) -> list[GangNode]:
    topo, net = catalog.get(machine), catalog.network(machine)
    out = []
    for b in range(blocks):
        for r in range(racks):
            for n in range(per_rack):
                name = f"n{b}{r}{n}"
                labels = {LABEL_BLOCK: f"b{b}", LABEL_RACK: f"r{r}"}
                if clique:
                    labels[LABEL_CLIQUE] = f"c{b}{r}"
                out.append(GangNode(name, DEFAULT.path(name, labels), topo,
                                    NodeState.whole((busy or {}).get(name, set())), net))
    return out


def ring(pods: int, gpus: int, **kw: object) -> Gang:
    return Gang(pods, Request(count=gpus, pattern=parse_pattern("ring", gpus),
                              bandwidth_sensitive=True), **kw)  # type: ignore[arg-type]


def where(nodes: list[GangNode], plan: object) -> list[str]:
    return [nodes[p.node].name for p in plan.pods]  # type: ignore[attr-defined]


def test_a_gang_that_fits_a_rack_stays_in_one_rack() -> None:
    nodes = cluster()
    for chooser in (choose, choose_kueue):
        plan = chooser(nodes, DEFAULT, ring(4, 8))
        racks = {nodes[p.node].path[:2] for p in plan.pods}
        assert len(racks) == 1 and len(plan.nodes) == 4
        assert plan.inter.over == "nic" and plan.inter.gbps == 50.0  # four EDR NICs, a rack


def test_the_tightest_domain_wins_even_a_single_node() -> None:
    """Two 4-GPU pods fit one idle DGX-1: no network at all (NVLink only)."""
    nodes = cluster()
    plan = choose(nodes, DEFAULT, ring(2, 4))
    assert len(plan.nodes) == 1 and math.isinf(plan.inter.gbps)
    assert plan.bottleneck_gbps == plan.intra_gbps > 50


def test_a_partly_used_node_is_filled_before_an_idle_one() -> None:
    """The same bandwidth on a node with 5 free GPUs as on an idle one: PreservedBW at cluster
    scale keeps the idle node whole (MAPA Preserve at domain scale)."""
    nodes = cluster({"n012": {0, 1, 2}})
    plan = choose(nodes, DEFAULT, ring(1, 4))
    assert where(nodes, plan) == ["n012"] and plan.pods[0].decision.gpus == (4, 5, 6, 7)


def test_bandwidth_before_preservation() -> None:
    """A 2-GPU ring: the free pair left on a fragmented node is PCIe-only, an idle node gives a
    double NVLink: bandwidth first, even though the idle node loses more PreservedBW."""
    busy = {f"n{b}{r}{n}": set() for b in range(2) for r in range(2) for n in range(4)}
    busy["n000"] = {1, 2, 3, 4, 5, 6}  # left: GPUs 0 and 7, no NVLink between them
    nodes = cluster(busy)
    plan = choose(nodes, DEFAULT, ring(1, 2))
    assert where(nodes, plan) != ["n000"] and plan.intra_gbps > 25  # an NVLinked pair
    kueue = choose_kueue(nodes, DEFAULT, ring(1, 2))
    assert where(nodes, kueue) == ["n000"]  # best fit by count only
    assert kueue.intra_gbps < plan.intra_gbps


def test_a_gang_bigger_than_a_rack_stays_in_a_block() -> None:
    nodes = cluster()
    plan = choose(nodes, DEFAULT, ring(6, 8))
    assert plan.domain.level == 0 and {nodes[i].path[0] for i in plan.nodes} == {"b0"}
    assert plan.inter.gbps == 25.0  # the block's spine: half the NICs' rate
    assert len({nodes[i].path[:2] for i in plan.nodes}) == 2


def test_a_gang_waits_for_its_natural_domain_rather_than_spill() -> None:
    """Four whole DGX nodes fit an idle rack: with every rack short of room now, gputopo waits
    (nothing taken) instead of spreading the gang over the spine; a preferred level lets it
    climb, as Kueue's does."""
    busy = {f"n{b}{r}0": set(range(8)) for b in range(2) for r in range(2)}
    nodes = cluster(busy)  # every rack: 3 idle nodes
    with pytest.raises(GangNoFit, match=f"no {LABEL_RACK} domain has room"):
        choose(nodes, DEFAULT, ring(4, 8))
    plan = choose(nodes, DEFAULT, ring(4, 8, preferred=LABEL_RACK))
    assert plan.domain.level == 0 and plan.inter.gbps == 25.0


def test_required_level_is_never_exceeded_and_preferred_climbs() -> None:
    nodes = cluster()
    with pytest.raises(GangNoFit, match=f"no {LABEL_RACK} domain has room"):
        choose(nodes, DEFAULT, ring(6, 8, required=LABEL_RACK))
    with pytest.raises(GangNoFit, match=f"no {LABEL_RACK} domain has room"):
        choose_kueue(nodes, DEFAULT, ring(6, 8, required=LABEL_RACK))
    for chooser in (choose, choose_kueue):
        plan = chooser(nodes, DEFAULT, ring(6, 8, preferred=LABEL_RACK))
        assert plan.domain.level == 0
    with pytest.raises(HierarchyError, match="no topology level"):
        choose(nodes, DEFAULT, ring(2, 8, required="zone"))


def test_a_gang_that_fits_nowhere_says_so_and_takes_nothing() -> None:
    nodes = cluster({n.name: set(range(8)) for n in cluster()[1:]})
    with pytest.raises(GangNoFit, match=r"room for 1 such pod"):
        choose(nodes, DEFAULT, ring(2, 8))


def test_nodes_are_numbered_in_path_order() -> None:
    nodes = cluster()
    plan = choose(nodes, DEFAULT, ring(6, 8))
    paths = [nodes[p.node].path for p in plan.pods]
    assert paths == sorted(paths) and [p.index for p in plan.pods] == list(range(6))


def test_gb200_trays_of_one_clique_talk_over_nvlink() -> None:
    """GB200 NVL72: a gang inside one NVLink domain is bound by NVLink, not by the NICs."""
    nodes = cluster(machine="gb200-tray", clique=True, blocks=1, racks=2, per_rack=4)
    plan = choose(nodes, DEFAULT, ring(3, 4))
    assert plan.inter.over == "nvlink" and plan.inter.gbps == 4 * 900.0
    assert len({nodes[i].path[:3] for i in plan.nodes}) == 1


def test_gang_no_fit_says_whether_the_gang_was_only_postponed() -> None:
    """Issue 24's case for a gang of one: a sensitive 3-GPU ring whose only room is {1,5,6}
    (Eq. 2: 52 % of its ideal) is refused while it may wait, and the error says it would
    start without the wait (``postponed``), so a caller starts its clock without asking the
    chooser again; no room at all, or a refusal the wait has nothing to do with, is not a
    postponement."""
    full = set(range(8))
    busy = {f"n{b}{r}{n}": full for b in range(2) for r in range(2) for n in range(4)}
    busy["n000"] = {0, 2, 3, 4, 7}
    nodes = cluster(busy)
    patient = with_postponement(ring(1, 3), 0.0, 1800.0)
    assert patient is not None
    kueue_gputopo = partial(choose_kueue, policy="gputopo")  # Kueue's own policy never waits
    assert where(nodes, choose_kueue(nodes, DEFAULT, patient)) == ["n000"]
    for chooser in (choose, kueue_gputopo):
        with pytest.raises(GangNoFit) as exc:
            chooser(nodes, DEFAULT, patient)
        assert exc.value.postponed, chooser
        assert where(nodes, chooser(nodes, DEFAULT, ring(1, 3))) == ["n000"]
    with pytest.raises(GangNoFit, match="would give its pods a poor GPU set"):
        choose(nodes, DEFAULT, patient)
    # required to a rack the node is not in: no room there, not a postponement
    with pytest.raises(GangNoFit, match="no .* domain has room") as exc:
        choose(nodes[4:], DEFAULT, with_postponement(ring(1, 3, required=LABEL_RACK), 0.0,
                                                      1800.0) or ring(1, 3))
    assert not exc.value.postponed
    busy["n000"] = full  # no room anywhere
    for chooser in (choose, kueue_gputopo):
        with pytest.raises(GangNoFit) as exc:
            chooser(cluster(busy), DEFAULT, patient)
        assert not exc.value.postponed
    # past the bound the same gang takes {1,5,6}
    assert with_postponement(ring(1, 3), 1800.0, 1800.0) is None


def test_kueue_is_best_fit_by_count() -> None:
    """Kueue picks the rack whose capacity fits most tightly, whatever the bandwidth."""
    busy = {"n000": {0}, "n001": {0}, "n002": {0}, "n003": {0}}  # rack b0/r0: 4 x 7 free
    nodes = cluster(busy)
    plan = choose_kueue(nodes, DEFAULT, ring(3, 4, preferred=LABEL_RACK))
    # capacity in 4-GPU pods: rack b0/r0 has 4, every other rack 8: best fit is b0/r0
    assert {nodes[i].path[:2] for i in plan.nodes} == {("b0", "r0")}


def test_bad_gangs() -> None:
    with pytest.raises(RequestError):
        Gang(0, Request(count=2))
    with pytest.raises(RequestError, match="whole GPUs"):
        Gang(2, Request.fraction(0.5))
    with pytest.raises(RequestError, match="not both"):
        Gang(2, Request(count=2), required=LABEL_RACK, preferred=LABEL_BLOCK)


def test_preserved_loss_counts_every_free_pair() -> None:
    """Eq. 3 at cluster scale: taking a whole idle node loses its own links plus its pairs
    with every other free GPU, weighted by the level joining them."""
    nodes = cluster(blocks=1, racks=1, per_rack=2)
    loss = preserved_loss_gbps(nodes, DEFAULT, {0: list(range(8))})
    own = sum(DGX.link_bandwidth(i, j) for i in range(8) for j in range(i + 1, 8))
    per_gpu_nic = 50.0 / 8  # 4 x 12.5 GB/s over 8 GPUs
    assert loss == pytest.approx(own + 8 * 8 * per_gpu_nic * 1.0)  # same rack: share 1
    assert preserved_loss_gbps(nodes, DEFAULT, {}) == 0.0


@settings(max_examples=25, deadline=None)
@given(busy=st.lists(st.sets(st.integers(0, 7), max_size=8), min_size=8, max_size=8),
       pods=st.integers(1, 6), gpus=st.sampled_from([1, 2, 4, 8]))
def test_choosers_never_hand_out_a_gpu_twice_nor_a_busy_one(busy: list[set[int]], pods: int,
                                                          gpus: int) -> None:
    names = [n.name for n in cluster(blocks=1, racks=2)]
    nodes = cluster(dict(zip(names, busy, strict=True)), blocks=1, racks=2)
    total = sum(capacity(n, ring(1, gpus)) for n in nodes)
    ev = Evaluator()
    for chooser in (partial(choose, natural=False), choose_kueue):
        if total < pods:
            with pytest.raises(GangNoFit):
                chooser(nodes, DEFAULT, ring(pods, gpus), evaluator=ev)
            continue
        plan = chooser(nodes, DEFAULT, ring(pods, gpus), evaluator=ev)
        assert len(plan.pods) == pods
        seen: set[tuple[int, int]] = set()
        for p in plan.pods:
            assert len(p.decision.gpus) == gpus
            for g in p.decision.gpus:
                assert g not in busy[p.node] and (p.node, g) not in seen
                seen.add((p.node, g))
        again = chooser(nodes, DEFAULT, ring(pods, gpus), evaluator=Evaluator())
        assert [(p.node, p.decision.gpus) for p in again.pods] == \
            [(p.node, p.decision.gpus) for p in plan.pods]  # deterministic
