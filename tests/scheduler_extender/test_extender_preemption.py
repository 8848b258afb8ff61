"""``POST /preempt`` on hand-built clusters: which of kube-scheduler's (node, victims)
proposals the extender keeps, in both request forms, and what it never does (add a pod,
reorder, reduce a proposal, change the live state, answer provisionally)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_extender.app import create_app
from scheduler_extender.decision import Ask, BadRequest
from scheduler_extender.preemption import NodeVerdict, Preemption, VictimSet
from scheduler_extender.settings import ExtenderSettings
from scheduler_extender.state import Allocation, MemoryState, PodRef
from tests.scheduler_extender.helpers import gpu_pod, make_client
from topology import catalog
from topology.contract import ANN_MIN_UTILITY, ANN_PATTERN, ANN_POLICY
from topology.model import Topology
from topology.patterns import ring
from topology.policies.base import NodeState, NoFit, Request
from topology.policies.evaluate import Evaluator

DGX = catalog.get("dgx1-v100")
MIB = DGX.gpus[0].memory_mib

#: A 4-GPU ring that Amaral's topo-aware-p places only where its utility reaches 0.6: on a
#: DGX-1 V100 an NVLinked quartet {0,1,2,3} scores 0.667, the scattered {0,2,5,7} 0.506.
RING_P = {ANN_PATTERN: "ring", ANN_POLICY: "topo-aware-p", ANN_MIN_UTILITY: "0.6"}


def hold(state: MemoryState, node: str, name: str, gpus: Iterable[int], *,
         core: int = 0, uid: str | None = None) -> str:
    """Give pod ``name`` GPUs ``gpus`` on ``node`` (whole, or a ``core`` % share of one);
    returns its UID (its allocation key)."""
    topo = state.node_topology(node)
    assert isinstance(topo, Topology)
    ref = PodRef("default", name, f"uid-{name}" if uid is None else uid)
    frac = core > 0
    state.book.add(Allocation(ref, node, tuple(gpus), core_percent=core,
                              memory_mib=MIB // 4 if frac else 0, fractional=frac), topo)
    return ref.key


def meta_args(pod: dict[str, Any], proposals: Mapping[str, list[str]],
              pdb: Mapping[str, int] | None = None) -> dict[str, Any]:
    """``ExtenderPreemptionArgs`` as kube-scheduler sends it with ``nodeCacheCapable: true``
    (``convertToMetaVictims``)."""
    return {
        "Pod": pod,
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": u} for u in uids],
                   "NumPDBViolations": (pdb or {}).get(node, 0)}
            for node, uids in proposals.items()
        },
    }


def kept(reply: Mapping[str, Any]) -> dict[str, list[str]]:
    """node -> victim UIDs of a reply, checking its shape on the way."""
    assert set(reply) == {"NodeNameToMetaVictims"}
    out = {}
    for node, mv in reply["NodeNameToMetaVictims"].items():
        assert set(mv) == {"Pods", "NumPDBViolations"}
        assert mv["Pods"], "kube-scheduler rejects a kept node without victims"
        out[node] = [p["UID"] for p in mv["Pods"]]
    return out


def preempt(client: TestClient, body: Mapping[str, Any]) -> dict[str, Any]:
    r = client.post("/preempt", json=body)
    assert r.status_code == 200, r.text
    reply: dict[str, Any] = r.json()
    return reply


# ---------------------------------------------------------------------------- the DGX-1 rings
def ring_cluster() -> tuple[MemoryState, dict[str, list[str]]]:
    """Two DGX-1 V100 nodes, six GPUs held by 1-GPU pods on each, two free; on each the
    scheduler proposes two 1-GPU victims (what it needs by count for a 4-GPU pod).

    * ``quartet``: victims on GPUs 0 and 1, GPUs 2 and 3 free: evicting them frees the
      NVLinked quartet {0,1,2,3};
    * ``scattered``: victims on GPUs 0 and 5, GPUs 2 and 7 free: evicting them leaves
      {0,2,5,7}, joined by NVLink only in pairs.
    """
    state = MemoryState({"quartet": DGX, "scattered": DGX})
    proposals: dict[str, list[str]] = {}
    for node, victims, free in (("quartet", (0, 1), (2, 3)), ("scattered", (0, 5), (2, 7))):
        uids = {g: hold(state, node, f"{node}-g{g}", [g]) for g in range(8) if g not in free}
        proposals[node] = [uids[g] for g in victims]
    return state, proposals


def test_ring_preemptor_keeps_the_node_whose_victims_free_an_nvlinked_quartet() -> None:
    state, proposals = ring_cluster()
    client = make_client(state)
    pod = gpu_pod("ring", 4, annotations=RING_P)
    reply = preempt(client, meta_args(pod, proposals, pdb={"quartet": 1, "scattered": 0}))
    assert kept(reply) == {"quartet": proposals["quartet"]}
    # the scheduler's PDB count comes back unchanged (the victim set is unchanged)
    assert reply["NodeNameToMetaVictims"]["quartet"]["NumPDBViolations"] == 1
    # ... and once the kept victims are gone, bind gives the ring the quartet
    for uid in proposals["quartet"]:
        assert state.book.remove(uid) is not None
    assert client.post("/bind", json={"PodName": "ring", "PodNamespace": "default",
                                      "PodUID": "uid-ring", "Node": "quartet"}).json() == {
        "Error": ""}
    alloc = state.allocation("uid-ring")
    assert alloc is not None and sorted(alloc.gpus) == [0, 1, 2, 3]


def test_acceptance_is_the_policy_s_the_same_as_filter() -> None:
    """The default policy takes any four free GPUs, so both proposals help; filter agrees."""
    state, proposals = ring_cluster()
    client = make_client(state)
    pod = gpu_pod("ring", 4, annotations={ANN_PATTERN: "ring"})
    assert kept(preempt(client, meta_args(pod, proposals))) == proposals
    # topo-aware-p's filter on the two nodes as the evictions would leave them agrees with
    # /preempt: the scattered set is below the pod's minimum utility
    ev = Evaluator()
    for node, expect_fit in (("quartet", True), ("scattered", False)):
        view = state.node_view(node, without=frozenset(proposals[node]))
        req = Request(4, pattern=ring(4), min_utility=0.6)
        if expect_fit:
            assert ev.place("topo-aware-p", DGX, view.state, req).gpus
        else:
            with pytest.raises(NoFit, match="below minimum"):
                ev.place("topo-aware-p", DGX, view.state, req)


def test_preempt_changes_no_state() -> None:
    state, proposals = ring_cluster()
    client = make_client(state)
    before = sorted((a.pod.key, a.node, a.gpus) for a in state.allocations())
    preempt(client, meta_args(gpu_pod("ring", 4, annotations=RING_P), proposals))
    assert sorted((a.pod.key, a.node, a.gpus) for a in state.allocations()) == before


# ------------------------------------------------------------ what the scheduler cannot see
def test_gpus_the_scheduler_counts_free_but_shares_hold_are_not_freed() -> None:
    """vGPU shares are ignoredByScheduler: a node whose two "free" GPUs carry shares gets two
    victims proposed for a 4-GPU pod, but evicting them leaves only two idle GPUs."""
    state = MemoryState({"shared": DGX, "plain": DGX})
    proposals = {}
    for node in ("shared", "plain"):
        uids = [hold(state, node, f"{node}-g{g}", [g]) for g in range(6)]
        proposals[node] = uids[-2:]
    hold(state, "shared", "share-6", [6], core=30)
    hold(state, "shared", "share-7", [7], core=30)
    client = make_client(state)
    assert kept(preempt(client, meta_args(gpu_pod("p", 4), proposals))) == {
        "plain": proposals["plain"]}


def test_unhealthy_gpus_are_not_freed_by_evicting_their_holder() -> None:
    state = MemoryState({"sick": DGX, "well": DGX})
    proposals = {}
    for node in ("sick", "well"):
        proposals[node] = [hold(state, node, f"{node}-g{g}", [g]) for g in range(2)]
        for g in range(2, 8):
            hold(state, node, f"{node}-g{g}", [g])
    state.set_unhealthy("sick", [0])
    client = make_client(state)
    assert kept(preempt(client, meta_args(gpu_pod("p", 2), proposals))) == {
        "well": proposals["well"]}


def test_victims_the_extender_does_not_know_are_kept_and_free_nothing() -> None:
    """A victim without a gputopo allocation (a CPU pod) is proposed for resources the
    extender does not judge: it stays in a kept proposal and frees no GPU."""
    state = MemoryState({"roomy": DGX, "tight": DGX})
    for g in range(4):
        hold(state, "roomy", f"roomy-g{g}", [g])
    for g in range(6):
        hold(state, "tight", f"tight-g{g}", [g])
    client = make_client(state)
    proposals = {"roomy": ["uid-cpu-pod"], "tight": ["uid-cpu-pod-2"]}
    assert kept(preempt(client, meta_args(gpu_pod("p", 4), proposals))) == {
        "roomy": ["uid-cpu-pod"]}


def test_a_proposal_is_never_reduced_even_when_fewer_victims_would_free_enough_gpus() -> None:
    """The scheduler proposes a set that is minimal for its own filters; a victim the GPU
    policy does not need (here the CPU pod, or the second 1-GPU pod of a 1-GPU request) was
    proposed for something else, so the proposal comes back whole, in its order."""
    state = MemoryState({"n": DGX})
    uids = [hold(state, "n", f"g{g}", [g]) for g in range(8)]
    client = make_client(state)
    proposal = [uids[3], "uid-cpu-pod", uids[5]]
    assert kept(preempt(client, meta_args(gpu_pod("p", 1), {"n": proposal}))) == {
        "n": proposal}


# ---------------------------------------------------------------------------- forms and bad input
def test_full_form_victims_are_matched_by_uid_or_name_and_answered_by_uid() -> None:
    """``nodeCacheCapable: false``: full Pods in ``NodeNameToVictims``; the reply still names
    them by UID. An allocation recorded under ``namespace/name`` (no UID) is found too."""
    state = MemoryState({"n": DGX})
    for g in range(6):
        hold(state, "n", f"g{g}", [g], uid="" if g == 4 else None)
    client = make_client(state)
    victims = [gpu_pod(f"g{g}", 1, uid=f"uid-g{g}") for g in (4, 5)]
    body = {"Pod": gpu_pod("p", 4), "NodeNameToMetaVictims": None,
            "NodeNameToVictims": {"n": {"Pods": victims, "NumPDBViolations": 2}}}
    reply = preempt(client, body)
    assert kept(reply) == {"n": ["uid-g4", "uid-g5"]}
    assert reply["NodeNameToMetaVictims"]["n"]["NumPDBViolations"] == 2
    # without the name-keyed holder the node would not have room
    body["NodeNameToVictims"]["n"]["Pods"] = victims[1:]
    assert kept(preempt(client, body)) == {}


def test_full_form_victims_known_by_name_are_matched_in_their_own_namespace() -> None:
    """A holder recorded without a UID is keyed ``namespace/name``: a full-form victim
    matches it only in the same namespace (no namespace means ``default``)."""
    state = MemoryState({"n": DGX})
    topo = state.node_topology("n")
    assert isinstance(topo, Topology)
    for g in range(6):
        ns = "team-a" if g == 4 else "default"
        state.book.add(Allocation(PodRef(ns, f"g{g}", "" if g >= 4 else f"uid-g{g}"), "n",
                                  (g,)), topo)
    client = make_client(state)
    in_team_a = {"metadata": {"name": "g4", "namespace": "team-a", "uid": "uid-g4"}}
    no_namespace = {"metadata": {"name": "g5", "uid": "uid-g5"}}
    body: dict[str, Any] = {
        "Pod": gpu_pod("p", 4), "NodeNameToMetaVictims": None,
        "NodeNameToVictims": {"n": {"Pods": [in_team_a, no_namespace], "NumPDBViolations": 0}},
    }
    assert kept(preempt(client, body)) == {"n": ["uid-g4", "uid-g5"]}
    # the same names in other namespaces hold nothing here: evicting them frees no GPU
    for victim, ns in ((in_team_a, "team-b"), (no_namespace, "team-a")):
        moved = {"metadata": {**victim["metadata"], "namespace": ns}}
        others = [moved if v is victim else v for v in (in_team_a, no_namespace)]
        body["NodeNameToVictims"]["n"]["Pods"] = others
        assert kept(preempt(client, body)) == {}, ns


def test_full_form_victims_without_usable_metadata_free_nothing() -> None:
    state = MemoryState({"n": DGX})
    for g in range(8):
        hold(state, "n", f"g{g}", [g])
    client = make_client(state)
    body = {"Pod": gpu_pod("p", 1), "NodeNameToMetaVictims": None,
            "NodeNameToVictims": {"n": {"Pods": [{"metadata": "g0"}, {"spec": {}}],
                                        "NumPDBViolations": 0}}}
    assert kept(preempt(client, body)) == {}


def test_nodes_with_no_usable_proposal_are_dropped() -> None:
    state = MemoryState({"n": DGX, "m": DGX})
    uid = hold(state, "n", "g0", [0])
    client = make_client(state)
    body = meta_args(gpu_pod("p", 1), {"n": [uid]})
    body["NodeNameToMetaVictims"].update({
        "null": None,                                           # no victims at all
        "empty": {"Pods": [], "NumPDBViolations": 0},
        "ghost": {"Pods": [{"UID": "x"}], "NumPDBViolations": 0},  # no topology
    })
    assert kept(preempt(client, body)) == {"n": [uid]}
    full = {"Pod": gpu_pod("p", 1), "NodeNameToVictims": {
        "m": {"Pods": [{"metadata": {"name": "no-uid"}}], "NumPDBViolations": 0}}}
    assert kept(preempt(client, full)) == {}


@pytest.mark.parametrize("form", ["NodeNameToMetaVictims", "NodeNameToVictims"])
def test_a_null_proposal_drops_only_its_own_node(form: str) -> None:
    """A node proposed with ``null`` (no victims) comes first: the nodes after it are still
    judged."""
    state = MemoryState({"n": DGX})
    uids = [hold(state, "n", f"g{g}", [g]) for g in range(8)]
    victims = ({"Pods": [{"UID": uids[0]}]} if form == "NodeNameToMetaVictims"
               else {"Pods": [gpu_pod("g0", 1, uid=uids[0])]})
    body: dict[str, Any] = {"Pod": gpu_pod("p", 1), "NodeNameToMetaVictims": None,
                            "NodeNameToVictims": None}
    body[form] = {"null": None, "n": {**victims, "NumPDBViolations": 0}}
    assert kept(preempt(make_client(state), body)) == {"n": [uids[0]]}


def test_a_pod_without_gputopo_resources_gets_the_proposals_back() -> None:
    client = make_client(MemoryState({"n": DGX}))
    pod = gpu_pod("cpu", resources={"requests": {"cpu": "1"}})
    body = meta_args(pod, {"n": ["a", "b"], "m": ["c"]})
    body["NodeNameToMetaVictims"]["empty"] = {"Pods": [], "NumPDBViolations": 0}
    assert kept(preempt(client, body)) == {"n": ["a", "b"], "m": ["c"]}


def test_an_invalid_pod_keeps_no_node() -> None:
    state, proposals = ring_cluster()
    client = make_client(state)
    for ann in ({ANN_PATTERN: "hexagon"}, {ANN_POLICY: "fastest"}):
        assert kept(preempt(client, meta_args(gpu_pod("p", 4, annotations=ann),
                                              proposals))) == {}
    metrics = client.get("/metrics").text
    assert 'gputopo_extender_preemption_nodes_total{outcome="dropped"} 4.0' in metrics
    assert 'gputopo_extender_preemption_nodes_total{outcome="kept"} 0.0' in metrics


class _RefusingPreemption(Preemption):
    """The preemption layer as it answers a request its policy finds invalid (the policy's
    ``RequestError``; the pod parser refuses every such request it can see first)."""

    def judge(self, ask: Ask, proposals: Mapping[str, VictimSet]) -> list[NodeVerdict]:
        raise BadRequest("request refused by the policy")


def test_a_request_the_policy_refuses_keeps_no_node_and_counts_every_node_dropped() -> None:
    state, proposals = ring_cluster()
    client = make_client(state)
    runtime = client.app.state.runtime  # type: ignore[attr-defined]
    runtime.extender.preemption = _RefusingPreemption(runtime.extender.decider)
    assert preempt(client, meta_args(gpu_pod("p", 4), proposals)) == {
        "NodeNameToMetaVictims": {}}
    metrics = client.get("/metrics").text
    assert 'gputopo_extender_preemption_nodes_total{outcome="dropped"} 2.0' in metrics
    assert 'gputopo_extender_preemption_nodes_total{outcome="kept"} 0.0' in metrics


@pytest.mark.parametrize(("body", "needle"), [
    ({"NodeNameToMetaVictims": {}}, "Pod"),
    ({"Pod": {}, "NodeNameToMetaVictims": {}, "NodeNameToVictims": {}}, "not both"),
    ({"Pod": {}, "NodeNameToMetaVictims": {"n": {"Pods": [{"UID": ""}]}}}, "UID"),
    ({"Pod": {}, "NodeNameToMetaVictims": {"n": {"Pods": "x"}}}, "Pods"),
])
def test_malformed_bodies_are_400_with_one_line(body: dict[str, Any], needle: str) -> None:
    client = make_client(MemoryState({"n": DGX}))
    r = client.post("/preempt", json=body)
    assert r.status_code == 400
    err = r.json()["Error"]
    assert needle in err and "\n" not in err


def test_no_form_at_all_keeps_nothing() -> None:
    client = make_client(MemoryState({"n": DGX}))
    assert preempt(client, {"Pod": gpu_pod("p", 1)}) == {"NodeNameToMetaVictims": {}}


def test_preempt_is_exact_whatever_the_time_budget() -> None:
    """With a budget too small for any decision on a 16-GPU machine, the verbs that may answer
    provisionally would drop this node; preempt decides it (a provisional answer would evict
    on a guess, or, as here, refuse a preemption that helps)."""
    mesh = catalog.get("mapa-cubemesh-16")
    state = MemoryState({"mesh": mesh})
    uids = [hold(state, "mesh", f"g{g}", [g]) for g in range(16)]
    settings_ = ExtenderSettings(policy="gputopo", state="memory", eval_budget_ms=0.001,
                                 eval_workers=0)
    client = TestClient(create_app(settings_, state), raise_server_exceptions=False)
    pod = gpu_pod("ring", 6, annotations={ANN_PATTERN: "ring"})
    assert kept(preempt(client, meta_args(pod, {"mesh": uids[:6]}))) == {"mesh": uids[:6]}
    assert "gputopo_extender_provisional_total 0.0" in client.get("/metrics").text


def test_metrics_count_kept_and_dropped_nodes() -> None:
    state, proposals = ring_cluster()
    client = make_client(state)
    preempt(client, meta_args(gpu_pod("ring", 4, annotations=RING_P), proposals))
    text = client.get("/metrics").text
    assert 'gputopo_extender_preemption_nodes_total{outcome="kept"} 1.0' in text
    assert 'gputopo_extender_preemption_nodes_total{outcome="dropped"} 1.0' in text
    assert 'gputopo_extender_requests_total{outcome="ok",verb="preempt"} 1.0' in text


# ---------------------------------------------------------------------------- invariants
@st.composite
def proposals_on_a_dgx(draw: st.DrawFn) -> tuple[list[int], dict[str, list[int]], int, str]:
    """Holders of 1-2 GPUs on two DGX-1 nodes, a proposal per node (some of its holders, in
    a drawn order), and a request."""
    owners = draw(st.lists(st.integers(0, 5), min_size=8, max_size=8))  # 5 = free
    props = {}
    for node in ("a", "b"):
        held = sorted({o for o in owners if o < 5})
        props[node] = draw(st.permutations(held).map(lambda p: p[: len(p) // 2 + 1])) \
            if held else []
    count = draw(st.integers(1, 6))
    policy = draw(st.sampled_from(["gputopo", "baseline", "topo-aware-p", "gaia"]))
    return owners, props, count, policy


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(proposals_on_a_dgx())
def test_kept_exactly_when_the_policy_places_the_pod_on_what_eviction_leaves(
    case: tuple[list[int], dict[str, list[int]], int, str],
) -> None:
    owners, props, count, policy = case
    state = MemoryState({"a": DGX, "b": DGX})
    for node in ("a", "b"):
        for o in sorted({o for o in owners if o < 5}):
            hold(state, node, f"{node}-o{o}", [g for g, w in enumerate(owners) if w == o])
    uids = {n: [f"uid-{n}-o{o}" for o in props[n]] for n in props}
    client = make_client(state, policy)
    reply = kept(preempt(client, meta_args(gpu_pod("p", count), uids)))
    ev = Evaluator()
    for node, victims in uids.items():
        left = NodeState.whole(g for g, w in enumerate(owners) if w < 5 and w not in props[node])
        try:
            fits = bool(victims) and bool(ev.place(policy, DGX, left, Request(count)).gpus)
        except NoFit:
            fits = False
        assert (node in reply) == fits
        if node in reply:
            assert reply[node] == victims  # the proposal, whole and in order
