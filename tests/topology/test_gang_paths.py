"""Where a gang goes, path by path: the refusals and their reasons, Kueue's descent against
gputopo's second assignment, the natural level, and what a plan reports (mutation testing's
sixteenth round, docs/testing.md)."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.topology.test_gang import DGX, cluster, ring, where
from topology import catalog
from topology.colocation.profile import JobProfile
from topology.gang import (
    GPUTOPO_NODE_POLICY,
    Gang,
    GangNode,
    GangNoFit,
    capacity,
    choose,
    choose_kueue,
    fabric_gbps,
    preserved_loss_gbps,
    with_postponement,
)
from topology.hierarchy import (
    DEFAULT,
    LABEL_BLOCK,
    LABEL_CLIQUE,
    LABEL_RACK,
    Hierarchy,
    HierarchyError,
    InterNode,
    Level,
)
from topology.model import PCIeLevel, Topology
from topology.network import NIC, NodeNetwork
from topology.policies.base import Request, RequestError, SharedRequest
from topology.policies.evaluate import Evaluator

FULL = set(range(8))
#: DGX-1 GPUs 0, 2, 4, 6 busy: every free GPU on a PCIe switch of its own, so a 2-GPU pod
#: fits by count and ``dra-first-fit-pcieroot`` (matchAttribute pcieRoot) refuses it.
SPLIT = {0, 2, 4, 6}
PCIE_ROOT = "dra-first-fit-pcieroot"
ROOT_REFUSAL = ("no 2 free GPUs share a PCIe root "
                "(matchAttribute resource.kubernetes.io/pcieRoot)")


def everywhere(busy: set[int]) -> dict[str, set[int]]:
    return {f"n{b}{r}{n}": busy for b in range(2) for r in range(2) for n in range(4)}


def test_only_a_lone_sensitive_multi_gpu_pod_may_wait_for_a_better_set() -> None:
    """The bounded postponement is a lone pod's: a gang of several pods starts together and
    never waits for a better GPU set, however long it has (not) waited."""
    assert with_postponement(ring(2, 3), 0.0, 1800.0) is None
    assert with_postponement(ring(4, 8), 0.0, 1800.0) is None
    assert with_postponement(ring(1, 3, required=LABEL_RACK), 0.0, 1800.0) is not None
    lone = with_postponement(ring(1, 3), 1799.0, 1800.0)
    assert lone is not None and lone.request.wait_for_better and lone.pods == 1
    assert not ring(1, 3).request.wait_for_better  # the gang given is left as it was
    assert with_postponement(ring(1, 3), 1800.0, 1800.0) is None
    assert with_postponement(ring(1, 1), 0.0, 1800.0) is None  # one GPU: nothing to gain


def test_kueue_with_no_room_anywhere_says_the_cluster_has_none() -> None:
    nodes = cluster(everywhere(FULL))
    with pytest.raises(GangNoFit) as exc:
        choose_kueue(nodes, DEFAULT, ring(2, 2))
    assert str(exc.value) == ("2 pod(s) of 2 GPU(s): the cluster has no room "
                              "(room for 0 such pod(s) in the whole cluster)")
    assert not exc.value.postponed


def test_a_pod_the_node_policy_refuses_is_named_with_the_policys_reason() -> None:
    """Room by count, but the node policy refuses the pod there (a DRA pcieRoot constraint no
    free pair meets): the gang is not placed, and the error says where and why — in the node
    for a gang one node holds, in the domain for a bigger one."""
    nodes = cluster(everywhere(SPLIT))
    with pytest.raises(GangNoFit) as exc:
        choose_kueue(nodes, DEFAULT, ring(5, 2), policy=PCIE_ROOT)
    assert str(exc.value) == f"{PCIE_ROOT} refused a pod in {LABEL_RACK}=r0: {ROOT_REFUSAL}"
    assert not exc.value.postponed
    with pytest.raises(GangNoFit) as exc:
        choose(nodes, DEFAULT, ring(5, 2), policy=PCIE_ROOT)
    assert str(exc.value) == (f"5 pod(s) of 2 GPU(s): no {LABEL_RACK} domain has room; "
                              f"{PCIE_ROOT} refused a pod in {LABEL_RACK}=r0: {ROOT_REFUSAL} "
                              "(room for 32 such pod(s) in the whole cluster)")
    assert not exc.value.postponed
    with pytest.raises(GangNoFit) as exc:
        choose(nodes, DEFAULT, ring(2, 2), policy=PCIE_ROOT)
    assert str(exc.value) == ("2 pod(s) of 2 GPU(s): no kubernetes.io/hostname domain has "
                              f"room; {PCIE_ROOT} refused a pod on n000: {ROOT_REFUSAL} "
                              "(room for 32 such pod(s) in the whole cluster)")


def test_kueue_reports_its_plan_as_gputopos_would_be_judged() -> None:
    """Kueue's plan names its chooser and domain, and is priced by the same PreservedBW as
    gputopo's (the simulator compares the two)."""
    nodes = cluster()
    plan = choose_kueue(nodes, DEFAULT, ring(6, 8))
    assert plan.chooser == "kueue-tas"
    assert plan.reason == f"best fit at {LABEL_BLOCK}=b0"
    taken: dict[int, list[int]] = {}
    for p in plan.pods:
        taken.setdefault(p.node, []).extend(p.decision.gpus)
    assert plan.preserved_loss_gbps == pytest.approx(preserved_loss_gbps(nodes, DEFAULT, taken))
    assert plan.preserved_loss_gbps > 0
    assert choose(nodes, DEFAULT, ring(6, 8)).chooser == "gputopo"


def clique_of_five() -> list[GangNode]:
    """One rack, one NVLink clique of five DGX-1s: two with 4 GPUs free (different ones), two
    idle, one full — the leaf level, where the two descents differ."""
    busy = {"n000": {1, 2, 3, 5}, "n001": {0, 3, 4, 7}, "n003": FULL}
    return cluster(busy, blocks=1, racks=1, per_rack=5, clique=True)


def test_kueue_descends_to_the_fewest_nodes_gputopo_also_tries_the_fullest_first() -> None:
    """Nine 1-GPU pods in a clique with 4 + 4 + 8 + 8 GPUs free: Kueue's descent takes the
    node with the most room first and the best-fitting one last (two nodes); gputopo also
    tries filling the fullest nodes first and, both rings bound by one GPU's NIC, keeps an
    idle node's GPUs together (less PreservedBW spent). Neither counts a node it puts no pod
    on (the full one, the idle one left) in the ring; DGX-1s have no NVSwitch, so even one
    clique's nodes talk through their NICs."""
    nodes = clique_of_five()
    gang = ring(9, 1)
    kueue = choose_kueue(nodes, DEFAULT, gang)
    assert where(nodes, kueue) == ["n000"] + ["n002"] * 8
    assert kueue.reason == f"best fit at {LABEL_CLIQUE}=c00"
    mine = choose(nodes, DEFAULT, gang)
    assert where(nodes, mine) == ["n000"] * 4 + ["n001"] * 4 + ["n002"]
    assert mine.domain == kueue.domain
    assert mine.preserved_loss_gbps < kueue.preserved_loss_gbps
    for plan in (kueue, mine):
        assert (plan.inter.gbps, plan.inter.over) == (12.5, "nic")  # one GPU's NIC


def test_a_sensitive_gang_takes_kueues_descent_when_it_gives_more_bandwidth() -> None:
    """Four 4-GPU ring pods in a clique of two idle DGX-1s, one with 2 GPUs free and one with
    GPUs 0, 2, 3, 6 free: filling the fullest node first puts a pod on that node (its GPUs
    reach two of the four NICs: 25 GB/s between nodes) and spends less PreservedBW; Kueue's
    descent puts two pods on each idle node (50 GB/s). Bandwidth comes first for a sensitive
    gang; with every bottleneck counted equal, PreservedBW decides."""
    busy = {"n001": {0, 2, 3, 4, 6, 7}, "n003": {1, 4, 5, 7}}
    nodes = cluster(busy, blocks=1, racks=1, per_rack=4, clique=True)
    sensitive = choose(nodes, DEFAULT, ring(4, 4))
    assert where(nodes, sensitive) == ["n000", "n000", "n002", "n002"]
    assert (sensitive.inter.gbps, sensitive.inter.over) == (50.0, "nic")
    fullest = choose(nodes, DEFAULT, ring(4, 4), tolerance=1.0)  # bandwidth not compared
    assert where(nodes, fullest) == ["n000", "n000", "n002", "n003"]
    assert fullest.inter.gbps == 25.0
    assert fullest.preserved_loss_gbps < sensitive.preserved_loss_gbps


def test_the_fullest_first_assignment_places_a_gang_kueues_descent_cannot() -> None:
    """Two 2-GPU pods under a DRA pcieRoot constraint: the node with the most room has no two
    free GPUs on one PCIe switch, the two nodes with one free pair each do. Kueue's descent
    goes to the roomy node and is refused; gputopo's second assignment places the gang."""
    busy = {"n000": SPLIT, "n001": set(range(6)), "n002": set(range(6)), "n003": FULL}
    nodes = cluster(busy, blocks=1, racks=1, per_rack=4, clique=True)
    with pytest.raises(GangNoFit, match=f"{PCIE_ROOT} refused a pod in {LABEL_CLIQUE}=c00"):
        choose_kueue(nodes, DEFAULT, ring(2, 2, required=LABEL_CLIQUE), policy=PCIE_ROOT)
    plan = choose(nodes, DEFAULT, ring(2, 2, required=LABEL_CLIQUE), policy=PCIE_ROOT)
    assert where(nodes, plan) == ["n001", "n002"]
    assert [p.decision.gpus for p in plan.pods] == [(6, 7), (6, 7)]


def test_a_gang_bigger_than_a_node_by_its_pods_is_sized_in_whole_pods() -> None:
    """Five 3-GPU pods: an idle DGX-1 holds two (not 8/3), so an idle rack of two holds four
    and the gang's natural domain is the block — it is placed there, not refused as if a rack
    were its size."""
    nodes = cluster(blocks=1, racks=2, per_rack=2)
    plan = choose(nodes, DEFAULT, ring(5, 3))
    assert plan.domain.level == 0 and len(plan.pods) == 5
    assert len({nodes[i].path[:2] for i in plan.nodes}) == 2


def test_a_gang_whose_natural_domain_is_a_block_does_not_spill_over_blocks() -> None:
    """Three whole DGX-1 nodes: a rack of two cannot hold them, an idle block of four can.
    With every block down to two free nodes, the gang waits rather than span two blocks
    (the 4:1 layer above them); a preferred level lets it climb."""
    busy = {f"n{b}{r}0": FULL for b in range(2) for r in range(2)}
    nodes = cluster(busy, blocks=2, racks=2, per_rack=2)
    with pytest.raises(GangNoFit) as exc:
        choose(nodes, DEFAULT, ring(3, 8))
    assert str(exc.value) == (f"3 pod(s) of 8 GPU(s): no {LABEL_BLOCK} domain has room "
                              "(room for 4 such pod(s) in the whole cluster)")
    plan = choose(nodes, DEFAULT, ring(3, 8, preferred=LABEL_BLOCK))
    assert plan.domain.level == -1 and plan.inter.gbps == 50.0 * 0.25


def test_pods_are_numbered_in_path_order_whatever_order_the_nodes_come_in() -> None:
    """Neighbouring ranks share a node or a rack: the numbering follows the nodes' paths, not
    their place in the caller's list."""
    nodes = cluster()[::-1]
    for chooser in (choose, choose_kueue):
        plan = chooser(nodes, DEFAULT, ring(6, 8))
        paths = [nodes[p.node].path for p in plan.pods]
        assert paths == sorted(paths) and [p.index for p in plan.pods] == list(range(6))


def test_kueue_breaks_a_best_fit_tie_by_path_order() -> None:
    """Every rack of an idle cluster fits equally: Kueue takes the first in path order, and
    inside it the first node."""
    nodes = cluster()[::-1]
    plan = choose_kueue(nodes, DEFAULT, ring(3, 8, preferred=LABEL_RACK))
    assert plan.domain.path == ("b0", "r0")
    assert where(nodes, plan) == ["n000", "n001", "n002"]
    one = choose_kueue(nodes, DEFAULT, ring(1, 8))
    assert where(nodes, one) == ["n000"]


def test_nodes_whose_nics_are_unknown_still_take_a_gang_at_zero_gbps_between_them() -> None:
    """No network description: the node moves nothing between nodes as far as the prediction
    knows (0 GB/s, no NVLink fabric on PCIe machines), and the gang is still placed."""
    nodes = [replace(n, network=None) for n in cluster(blocks=1, racks=1, per_rack=4,
                                                       machine="pcie-8gpu")]
    plan = choose(nodes, DEFAULT, ring(2, 8))
    assert len(plan.nodes) == 2 and plan.inter == InterNode(0.0, 1, "nic")
    assert plan.bottleneck_gbps == 0.0
    assert choose_kueue(nodes, DEFAULT, ring(2, 8)).inter.gbps == 0.0


def test_the_reason_says_where_and_what_bounds_the_gang() -> None:
    nodes = cluster()
    rack = choose(nodes, DEFAULT, ring(4, 8))
    assert rack.reason == (f"tightest domain {LABEL_RACK}=r0; bottleneck 50.0 GB/s (between "
                           f"nodes), PreservedBW spent {rack.preserved_loss_gbps:.1f} GB/s")
    block = choose(nodes, DEFAULT, ring(6, 8))
    assert block.reason.startswith(f"tightest domain {LABEL_BLOCK}=b0; bottleneck 25.0 GB/s "
                                   "(between nodes)")
    node = choose(nodes, DEFAULT, ring(1, 4))
    assert node.reason.startswith(f"tightest domain kubernetes.io/hostname=n000; bottleneck "
                                  f"{node.intra_gbps:.1f} GB/s (inside nodes), PreservedBW")
    lone = choose(nodes, DEFAULT, ring(2, 1))
    assert lone.reason.startswith("tightest domain kubernetes.io/hostname=n000; bottleneck "
                                  "none (one node, one GPU per pod)")
    everything = choose(nodes, DEFAULT, ring(10, 8))
    assert everything.domain.level == -1
    assert everything.reason.startswith("tightest domain the whole cluster; bottleneck 12.5 GB/s")
    assert choose_kueue(nodes, DEFAULT, ring(10, 8)).reason == "best fit at the whole cluster"


def pair_weights(nodes: list[GangNode], hierarchy: Hierarchy) -> tuple[float, float]:
    """The per-GPU NIC and NVLink-fabric rates, medians over the nodes (the docstring of
    :func:`preserved_loss_gbps`)."""
    nic = [n.network.job_gbps(range(n.topology.size), n.topology.bandwidths) / n.topology.size
           for n in nodes if n.network is not None]
    fab = [fabric_gbps(n.topology, [0]) for n in nodes if n.topology.nvswitch]
    return (statistics.median(nic) if nic else 0.0, statistics.median(fab) if fab else 0.0)


def free_pairs_gbps(nodes: list[GangNode], hierarchy: Hierarchy,
                    free: list[set[int]]) -> float:
    """Every pair of free GPUs, one by one: their link inside a node; across nodes the level
    joining them (NVLink fabric or the NICs at the level's share)."""
    nic, fab = pair_weights(nodes, hierarchy)
    gpus = [(i, g) for i in range(len(nodes)) for g in sorted(free[i])]
    total = 0.0
    for x in range(len(gpus)):
        for y in range(x + 1, len(gpus)):
            (i, g), (j, h) = gpus[x], gpus[y]
            if i == j:
                total += nodes[i].topology.link_bandwidth(g, h)
                continue
            level = hierarchy.common_level([nodes[i].path, nodes[j].path])
            total += fab if hierarchy.nvlink_between(level) else nic * hierarchy.share(level)
    return total


THIN = Hierarchy.build([Level(LABEL_BLOCK, 0.1), Level(LABEL_RACK, 0.5),
                        Level(LABEL_CLIQUE, 1.0, nvlink=True)], across_share=0.05)


@settings(max_examples=40, deadline=None)
@given(machine=st.sampled_from(["dgx1-v100", "gb200-tray"]), thin=st.booleans(),
       nics=st.booleans(), cliques=st.booleans(), data=st.data())
def test_preserved_loss_is_the_bandwidth_of_the_free_pairs_taken_apart(
        machine: str, thin: bool, nics: bool, cliques: bool, data: st.DataObject) -> None:
    """PreservedBW lost, pair by pair: the sum over every pair of free GPUs of what joins them,
    before the GPUs are taken minus after (the chooser computes it by domain sums) — with and
    without NICs known, NVLink cliques (an NVSwitch fabric, or DGX-1s whose NVLinks stay in
    the node), and thin shares (per-GPU weights under 1 GB/s)."""
    size = catalog.get(machine).size
    hierarchy = THIN if thin else DEFAULT
    names = [f"n{b}{r}{n}" for b in range(2) for r in range(2) for n in range(2)]
    busy = data.draw(st.lists(st.sets(st.integers(0, size - 1)), min_size=8, max_size=8))
    nodes = cluster(dict(zip(names, busy, strict=True)), blocks=2, racks=2, per_rack=2,
                    machine=machine, clique=cliques)
    nodes = [replace(n, path=hierarchy.path(n.name, {LABEL_BLOCK: n.path[0],
                                                     LABEL_RACK: n.path[1],
                                                     LABEL_CLIQUE: n.path[2]}),
                     network=n.network if nics else None) for n in nodes]
    free = [set(range(size)) - b for b in busy]
    taken: dict[int, list[int]] = {}
    for i, f in enumerate(free):
        if f and data.draw(st.booleans(), label=f"take from node {i}"):
            taken[i] = sorted(data.draw(st.sets(st.sampled_from(sorted(f)), min_size=1)))
    left = [f - set(taken.get(i, [])) for i, f in enumerate(free)]
    expect = free_pairs_gbps(nodes, hierarchy, free) - free_pairs_gbps(nodes, hierarchy, left)
    assert preserved_loss_gbps(nodes, hierarchy, taken) == pytest.approx(expect)


@settings(max_examples=25, deadline=None)
@given(busy=st.lists(st.sets(st.integers(0, 7), max_size=7), min_size=8, max_size=8),
       gpus=st.sampled_from([1, 2, 3]))
def test_a_lone_insensitive_pod_goes_where_the_least_preserved_bandwidth_is_lost(
        busy: list[set[int]], gpus: int) -> None:
    """MAPA Preserve at cluster scale: of the nodes with room, an insensitive pod goes to the
    one whose GPUs the policy picks there cost the free GPUs the least PreservedBW — not to the
    best fit by count, nor the first by path."""
    names = [n.name for n in cluster(blocks=1, racks=2)]
    nodes = cluster(dict(zip(names, busy, strict=True)), blocks=1, racks=2)
    request = Request(count=gpus, bandwidth_sensitive=False)
    ev = Evaluator()
    losses = []
    for i, n in enumerate(nodes):
        if capacity(n, Gang(1, request)) >= 1:
            d = ev.place(GPUTOPO_NODE_POLICY, n.topology, n.state, request)
            losses.append(preserved_loss_gbps(nodes, DEFAULT, {i: list(d.gpus)}))
    if not losses:
        with pytest.raises(GangNoFit):
            choose(nodes, DEFAULT, Gang(1, request), evaluator=ev)
        return
    plan = choose(nodes, DEFAULT, Gang(1, request), evaluator=ev)
    assert plan.preserved_loss_gbps == pytest.approx(min(losses))


def test_a_gang_is_refused_whole_gpus_only_and_one_level_with_its_reason() -> None:
    with pytest.raises(RequestError) as exc:
        Gang(0, Request(count=2))
    assert str(exc.value) == "a gang needs at least one pod"
    profile = JobProfile(0.25, 12_345_678.9, 2_345_678.4, 3000, key="resnet18:64",
                         source="catalog")
    for request in (Request.fraction(0.5), Request(count=1, shared=SharedRequest(profile))):
        with pytest.raises(RequestError) as exc:
            Gang(2, request)
        assert str(exc.value) == "a gang's pods ask for whole GPUs"
    with pytest.raises(RequestError) as exc:
        Gang(2, Request(count=2), required=LABEL_RACK, preferred=LABEL_BLOCK)
    assert str(exc.value) == "a gang has a required or a preferred level, not both"


def test_nodes_whose_paths_do_not_match_the_hierarchy_are_refused_by_name() -> None:
    nodes = cluster(blocks=1, racks=1, per_rack=2)
    short = Hierarchy.build([Level(LABEL_BLOCK), Level(LABEL_RACK)])
    for chooser in (choose, choose_kueue):
        with pytest.raises(HierarchyError) as exc:
            chooser(nodes, short, ring(1, 8))
        assert str(exc.value) == ("node n000: path ('b0', 'r0', '~n000', 'n000') has 4 levels; "
                                  "the hierarchy has 3")


def test_a_gang_that_takes_every_free_gpu_of_the_cluster_is_placed() -> None:
    nodes = cluster()
    for chooser in (choose, choose_kueue):
        plan = chooser(nodes, DEFAULT, ring(16, 8))
        assert plan.domain.level == -1 and len(plan.nodes) == 16


def test_with_preferred_or_no_natural_level_a_full_cluster_has_no_room() -> None:
    nodes = cluster(everywhere(FULL))
    for gang, natural in ((ring(2, 2, preferred=LABEL_RACK), True), (ring(2, 2), False)):
        with pytest.raises(GangNoFit) as exc:
            choose(nodes, DEFAULT, gang, natural=natural)
        assert str(exc.value) == ("2 pod(s) of 2 GPU(s): the cluster has no room "
                                  "(room for 0 such pod(s) in the whole cluster)")


def test_a_gang_postponed_everywhere_says_so_in_its_error() -> None:
    """The only room gives the lone sensitive pod a poor GPU set: the error says every domain
    with room would, and names the policy's postponement."""
    busy = everywhere(FULL) | {"n000": {0, 2, 3, 4, 7}}
    patient = with_postponement(ring(1, 3), 0.0, 1800.0)
    assert patient is not None
    with pytest.raises(GangNoFit) as exc:
        choose(cluster(busy), DEFAULT, patient)
    assert exc.value.postponed
    assert str(exc.value).startswith(
        "1 pod(s) of 3 GPU(s): every domain with room would give its pods a poor GPU set; "
        f"{GPUTOPO_NODE_POLICY} refused a pod on n000: ")


def test_a_node_the_policy_refuses_does_not_stop_the_others_being_tried() -> None:
    """Room by count on two nodes, the pcieRoot constraint met only on the second."""
    busy = everywhere(FULL) | {"n000": SPLIT, "n001": set(range(6))}
    nodes = cluster(busy)
    plan = choose(nodes, DEFAULT, ring(1, 2), policy=PCIE_ROOT)
    assert where(nodes, plan) == ["n001"] and plan.pods[0].decision.gpus == (6, 7)
    assert plan.chooser == "gputopo"


def test_a_node_of_the_same_kind_gets_a_decision_with_its_own_gpus() -> None:
    """Nodes of one machine type in one state share the policy's decision; the node chosen is
    handed its own GPUs' UUIDs, not those of the node the decision was first made for."""
    twin = replace(DGX, name="twin", gpus=tuple(
        replace(g, uuid=g.uuid.replace("GPU-", "GPU-1")) for g in DGX.gpus))
    nodes = cluster({"n011": FULL}, blocks=1, racks=2, per_rack=2)
    gang = Gang(1, Request(count=4, bandwidth_sensitive=False))
    same = choose(nodes, DEFAULT, gang)  # n010: alone with free GPUs in its rack
    assert where(nodes, same) == ["n010"] and [p.index for p in same.pods] == [0]
    nodes[2] = replace(nodes[2], topology=twin)
    plan = choose(nodes, DEFAULT, gang)
    assert where(nodes, plan) == ["n010"]
    (pod,) = plan.pods
    assert pod.index == 0 and pod.decision.uuids == tuple(twin.gpus[g].uuid
                                                          for g in pod.decision.gpus)


def test_an_nvswitch_node_of_two_gpus_reaches_the_fabric_one_of_one_gpu_has_no_peer() -> None:
    tray = catalog.get("gb200-tray")
    nvlinks = tray.links[0][1].nvlinks
    two = Topology.build("nvl2", tray.gpus[:2], {(0, 1): nvlinks}, PCIeLevel.SYS,
                         nvlink_generation=5, nvswitch=True)
    assert fabric_gbps(two, [0, 1]) == 2 * two.link_bandwidth(0, 1) > 0
    one = Topology.build("nvl1", tray.gpus[:1], {}, PCIeLevel.SYS, nvswitch=True)
    assert fabric_gbps(one, [0]) == 0.0


def test_a_nic_reached_only_through_the_host_counts_at_the_pcie_paths_rate() -> None:
    """No GPUDirect RDMA (the NIC beyond PXB): the GPUs' data is staged through host memory,
    capped at the PCIe bandwidth of the path — in the ring's prediction and in the weight of
    a free pair across nodes."""
    staged = NodeNetwork.build([NIC("nic0", 50.0)], [[PCIeLevel.SYS]] * 8)
    nodes = [replace(n, network=staged) for n in cluster(blocks=1, racks=1, per_rack=2)]
    cap = DGX.bandwidths.pcie(PCIeLevel.SYS)
    assert cap < 50.0
    plan = choose(nodes, DEFAULT, ring(2, 8))
    assert plan.inter == InterNode(cap, 1, "nic")
    own = sum(DGX.link_bandwidth(0, g) for g in range(1, 8))
    assert preserved_loss_gbps(nodes, DEFAULT, {0: [0]}) == pytest.approx(own + 8 * cap / 8)


def test_with_bandwidth_not_compared_one_gpu_pods_on_one_node_are_still_placed() -> None:
    """A tolerance of 1 counts every bottleneck equal — one-GPU pods on one node too, whose
    bottleneck is unbounded (nothing to communicate)."""
    plan = choose(cluster(), DEFAULT, ring(2, 1), tolerance=1.0)
    assert len(plan.nodes) == 1 and plan.bottleneck_gbps == float("inf")


def test_without_clique_labels_gputopo_still_tries_the_fullest_nodes_first() -> None:
    """The default hierarchy makes a node without a clique label an NVLink domain of its own,
    so a rack's children are one-node cliques, not nodes: the fullest-first assignment must
    still fill the half-used nodes first (it used to apply only to a level whose children are
    the node level itself, and on clique-less clusters was Kueue's descent again)."""
    busy = {"n000": {1, 2, 3, 5}, "n001": {0, 3, 4, 7}, "n003": FULL}
    nodes = cluster(busy, blocks=1, racks=1, per_rack=5)
    assert nodes[0].path == ("b0", "r0", "~n000", "n000")
    kueue = choose_kueue(nodes, DEFAULT, ring(9, 1))
    assert where(nodes, kueue) == ["n000"] + ["n002"] * 8
    mine = choose(nodes, DEFAULT, ring(9, 1))
    assert mine.domain.path == ("b0", "r0")
    assert where(nodes, mine) == ["n000"] * 4 + ["n001"] * 4 + ["n002"]
    assert mine.preserved_loss_gbps < kueue.preserved_loss_gbps
