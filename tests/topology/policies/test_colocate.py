"""Co-location policies: Tabrizian's Algorithm 2 on small cases, gputopo's variant, and the
shared-slot accounting invariants (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.topology.strategies import topologies
from topology import catalog
from topology.colocation.model import predict
from topology.colocation.profile import JobProfile, builtin_catalog
from topology.model import GPU, PCIeLevel, Topology, deterministic_uuid
from topology.policies.base import (
    FULL_CORE,
    GPUUsage,
    NodeState,
    NoFit,
    Request,
    RequestError,
    Resident,
    SharedRequest,
)
from topology.policies.colocate import JOIN_GAIN, colocate, exclusive, random_colocate
from topology.policies.default import gputopo as _gputopo
from topology.policies.evaluate import Evaluator
from topology.policies.memo import Memo
from topology.policies.registry import colocation_policies, get_policy

CAT = builtin_catalog()
EV = Evaluator()


def gputopo(topology: Topology, state: NodeState, request: Request):  # type: ignore[no-untyped-def]
    return _gputopo(topology, state, request, Memo())

DGX = catalog.get("dgx1-v100")
ONE = catalog.get("v100-1gpu")


def prof(t: float, c: float, m: float, mem: int = 1000) -> JobProfile:
    return JobProfile(t, c * 2e8 * t, m * 2e8 * t, mem)


def shared(key_or_profile: str | JobProfile, name: str = "new", **kw: object) -> Request:
    p = CAT[key_or_profile] if isinstance(key_or_profile, str) else key_or_profile
    return Request(count=1, shared=SharedRequest(p, p.gpu_memory_mib, name=name, **kw))  # type: ignore[arg-type]


def residents(*keys: str | JobProfile, gpu: int = 0) -> tuple[Resident, ...]:
    out = []
    for i, k in enumerate(keys):
        p = CAT[k] if isinstance(k, str) else k
        out.append(Resident(f"g{gpu}r{i}", p, p.gpu_memory_mib))
    return tuple(out)


def state(busy: tuple[int, ...] = (), slots: int = 3,
          **shared_gpus: tuple[Resident, ...]) -> NodeState:
    usage = {g: GPUUsage(FULL_CORE, 0) for g in busy}
    usage.update({int(k[1:]): GPUUsage(residents=v) for k, v in shared_gpus.items()})
    return NodeState(usage, slots_per_gpu=slots)


def test_registry_knows_the_colocation_policies() -> None:
    assert colocation_policies() == ["colocate", "exclusive", "gputopo", "random-colocate"]
    assert get_policy("colocate").colocation and not get_policy("baseline").colocation
    with pytest.raises(RequestError, match="does not place co-location slots"):
        EV.place("mapa-preserve", DGX, NodeState(), shared("vgg11:64"))


# ------------------------------------------------------------------ Algorithm 2


def test_algorithm2_spreads_over_idle_gpus_first() -> None:
    """An idle GPU has ΣC = 0: Algorithm 2's lowest NodePerf."""
    st_ = state(g0=residents("vgg11:64"))
    d = colocate(DGX, st_, shared("vgg19:64"))
    assert d.gpus == (1,) and d.colocation is not None
    assert d.colocation.chosen.residents == () and d.colocation.rank == (0.0, 0.0)
    assert d.colocation.runner_up is not None and d.colocation.runner_up.gpu == 2


def test_algorithm2_takes_the_lowest_sum_of_c() -> None:
    busy = tuple(range(3, 8))
    st_ = state(busy, g0=residents("resnet18:64", gpu=0), g1=residents("vgg11:64", gpu=1),
                g2=residents("vgg19:64", gpu=2))
    d = colocate(DGX, st_, shared("vgg11:128"))
    # ΣC: GPU0 9.34e5, GPU1 1.375e5, GPU2 5.38e5 → GPU 1
    assert d.gpus == (1,)
    c = d.colocation
    assert c is not None and c.chosen.sum_c_before == pytest.approx(CAT["vgg11:64"]
                                                                     .kernel_occupancy)
    assert c.chosen.sum_c == pytest.approx(CAT["vgg11:64"].kernel_occupancy
                                           + CAT["vgg11:128"].kernel_occupancy)
    expect = predict([CAT["vgg11:64"], CAT["vgg11:128"]])
    assert c.chosen.delta == pytest.approx(expect.delta)
    assert c.runner_up is not None and c.runner_up.gpu == 2  # next-lowest ΣC
    assert c.rank[0] == pytest.approx(CAT["vgg11:64"].kernel_occupancy)


def test_algorithm2_ties_broken_by_sum_of_m_then_index() -> None:
    a = prof(0.1, 0.1, 0.2)
    b = prof(0.1, 0.1, 0.1)  # same C, lower M
    st_ = state(tuple(range(2, 8)), g0=residents(a, gpu=0), g1=residents(b, gpu=1))
    assert colocate(DGX, st_, shared("vgg11:64")).gpus == (1,)


def test_algorithm2_refuses_over_the_threshold() -> None:
    st_ = state(g0=residents("resnet50:256"))  # C 4.1e7 alone
    with pytest.raises(NoFit, match="threshold"):
        colocate(ONE, st_, shared("vgg11:64"))
    # the threshold is a setting: a light pair passes the default and fails a strict one
    light = state(g0=residents("vgg19:64"))
    assert colocate(ONE, light, shared("vgg11:64")).gpus == (0,)
    with pytest.raises(NoFit, match="> threshold 5e"):
        colocate(ONE, light, shared("vgg11:64", threshold=5e5))


def test_algorithm2_refuses_a_losing_set() -> None:
    st_ = state(g0=residents("resnet50:128"))
    with pytest.raises(NoFit, match="δ 0.9"):
        colocate(ONE, st_, shared("se_resnet18:256"))


def test_algorithm2_stops_at_the_least_loaded_gpu() -> None:
    """Line 26: when the lowest-ΣC node would slow down, Algorithm 2 breaks; it does not try
    the next node. gputopo does."""
    x = prof(0.01, 0.5, 0.1)  # short and saturating: ΣC small, d = 1
    y = prof(0.1, 0.075, 0.05)  # light, ΣC larger than x's
    job = prof(0.1, 0.3, 0.1)
    st_ = state(tuple(range(2, 8)), g0=residents(x, gpu=0), g1=residents(y, gpu=1))
    assert x.kernel_occupancy < y.kernel_occupancy
    assert predict([x, job]).delta < 1 <= predict([y, job]).delta
    with pytest.raises(NoFit, match="least-loaded GPU 0"):
        colocate(DGX, st_, shared(job))
    assert gputopo(DGX, st_, shared(job)).gpus == (1,)


def test_a_lone_job_over_the_threshold_still_runs() -> None:
    d = colocate(ONE, NodeState(), shared("resnet50:256"))
    assert d.gpus == (0,) and d.colocation is not None and d.colocation.chosen.delta == 1.0


# ------------------------------------------------------------------ feasibility


def test_slots_memory_and_modes() -> None:
    full = state(g0=residents("vgg11:64", "vgg11:64", "vgg11:64"))
    with pytest.raises(NoFit, match="3 slots taken"):
        colocate(ONE, full, shared("vgg11:64"))
    one_slot = state(slots=1, g0=residents("vgg11:64"))
    with pytest.raises(NoFit, match="1 slots taken"):
        gputopo(ONE, one_slot, shared("vgg11:64"))
    big = JobProfile(0.05, 1e6, 1e6, 15500)
    mem = state(g0=residents("resnet18:64"))
    with pytest.raises(NoFit, match="MiB of free memory"):
        colocate(ONE, mem, shared(big))
    whole = NodeState({0: GPUUsage(FULL_CORE, 0)})
    with pytest.raises(NoFit, match="held whole"):
        colocate(ONE, whole, shared("vgg11:64"))
    vgpu = NodeState({0: GPUUsage(30, 2000)})
    with pytest.raises(NoFit):
        gputopo(ONE, vgpu, shared("vgg11:64"))
    unhealthy = NodeState(unhealthy=frozenset({0}))
    with pytest.raises(NoFit):
        exclusive(ONE, unhealthy, shared("vgg11:64"))


def test_shared_gpus_are_not_free_for_whole_or_vgpu_requests() -> None:
    st_ = state(tuple(range(1, 8)), g0=residents("vgg11:64"))
    assert st_.free_gpus(DGX) == ()
    with pytest.raises(NoFit):
        gputopo(DGX, st_, Request(count=1))
    with pytest.raises(NoFit):
        gputopo(DGX, st_, Request.fraction(0.3, memory_mib=100))


def test_with_allocation_refuses_mixed_modes() -> None:
    d = colocate(ONE, NodeState(), shared("vgg11:64", name="a"))
    s1 = NodeState().with_allocation(d)
    assert [r.name for r in s1.residents(0)] == ["a"]
    with pytest.raises(ValueError, match="already shares"):
        s1.with_allocation(d)
    whole = gputopo(ONE, NodeState(), Request(count=1))
    with pytest.raises(ValueError, match="shared by co-located jobs"):
        s1.with_allocation(whole)
    with pytest.raises(ValueError, match="held whole"):
        NodeState({0: GPUUsage(FULL_CORE, 0)}).with_allocation(d)
    with pytest.raises(ValueError, match="no free co-location slot"):
        NodeState(slots_per_gpu=1).with_allocation(d).with_allocation(
            colocate(ONE, NodeState(), shared("vgg11:64", name="b")))
    released = s1.without_resident(0, "a")
    assert released.used(0).idle and released.free_gpus(ONE) == (0,)
    assert s1.without_resident(0, "nobody") is s1


# ------------------------------------------------------------------ baselines


def test_exclusive_uses_idle_gpus_only() -> None:
    st_ = state((0, 1), g2=residents("vgg11:64"))
    d = exclusive(DGX, st_, shared("vgg19:64"))
    assert d.gpus == (3,) and d.colocation is not None
    assert d.colocation.chosen.residents == ()
    full = state(tuple(range(1, 8)), g0=residents("vgg11:64"))
    with pytest.raises(NoFit, match="exclusive"):
        exclusive(DGX, full, shared("vgg19:64"))


def test_random_colocate_is_deterministic_and_blind() -> None:
    st_ = state(tuple(range(4, 8)), g0=residents("resnet50:128"))
    picks = {random_colocate(DGX, st_, shared("se_resnet18:256", name=f"j{i}")).gpus[0]
             for i in range(40)}
    assert picks <= {0, 1, 2, 3} and len(picks) >= 3  # spread, and GPU 0 not avoided
    a = random_colocate(DGX, st_, shared("vgg11:64", name="same"))
    b = random_colocate(DGX, st_, shared("vgg11:64", name="same"))
    assert a == b
    # it joins a losing set that Algorithm 2 would refuse
    one = state(g0=residents("resnet50:128"))
    assert random_colocate(ONE, one, shared("se_resnet18:256")).gpus == (0,)


def test_whole_requests_use_the_default_policy() -> None:
    req = Request(count=4)
    ref = gputopo(DGX, NodeState(), req)
    for fn in (colocate, exclusive, random_colocate):
        d = fn(DGX, NodeState(), req)
        assert d.gpus == ref.gpus and d.policy != "gputopo"


# ------------------------------------------------------------------ gputopo


def test_gputopo_runs_a_lone_job_on_an_isolated_idle_gpu_first() -> None:
    d = gputopo(ONE, NodeState(), shared("vgg11:64"))
    assert d.colocation is not None and d.colocation.rank[0] == 0.0


def test_gputopo_packs_before_opening_an_idle_gpu() -> None:
    st_ = state(g0=residents("vgg19:64"))
    d = gputopo(DGX, st_, shared("vgg11:64"))
    assert d.gpus == (0,)
    c = d.colocation
    assert c is not None and c.rank[0] == 1.0 and c.chosen.throughput_gain >= JOIN_GAIN
    assert colocate(DGX, st_, shared("vgg11:64")).gpus == (1,)  # Algorithm 2 spreads


def test_gputopo_opens_an_idle_gpu_rather_than_form_a_poor_set() -> None:
    st_ = state(g0=residents("resnet18:256"))
    d = gputopo(DGX, st_, shared("se_resnet18:256"))
    c = d.colocation
    assert c is not None and d.gpus != (0,) and c.rank[0] == 2.0
    gain = predict([CAT["resnet18:256"], CAT["se_resnet18:256"]]).throughput - 1.0
    assert gain < JOIN_GAIN
    # with no idle GPU left it joins, since δ ≥ 1 still holds (tier 3)
    crowded = state(tuple(range(1, 8)), g0=residents("resnet18:256"))
    d3 = gputopo(DGX, crowded, shared("se_resnet18:256"))
    assert d3.gpus == (0,) and d3.colocation is not None and d3.colocation.rank[0] == 3.0


def test_gputopo_keeps_an_nvlink_quad_whole() -> None:
    """GPUs 4-6 busy: opening GPU 7 (its NVLink peers are busy) costs less PreservedBW than
    breaking the fully NVLinked quad 0-3; Algorithm 2 takes GPU 0."""
    st_ = state((4, 5, 6))
    d = gputopo(DGX, st_, shared("resnet50:256"))
    assert d.gpus == (7,)
    assert colocate(DGX, st_, shared("resnet50:256")).gpus == (0,)
    after = st_.with_allocation(d)
    four = gputopo(DGX, after, Request(count=4))
    assert four.gpus == (0, 1, 2, 3)


def test_gputopo_refuses_when_nothing_is_worth_it() -> None:
    st_ = state(g0=residents("resnet50:128"))
    with pytest.raises(NoFit, match="δ"):
        gputopo(ONE, st_, shared("se_resnet18:256"))


def test_explanation_json() -> None:
    d = gputopo(DGX, state(g0=residents("vgg19:64")), shared("vgg11:64", name="ml/p"))
    doc = d.to_json()
    c = doc["colocation"]
    assert isinstance(c, dict)
    assert c["job"] == "ml/p" and c["profile"] == "vgg11:64" and c["threshold"] == 4e7
    assert c["chosen"]["residents"] == ["g0r0 (vgg19:64)"]  # type: ignore[index]
    assert c["runner_up"]["gpu"] != 0  # type: ignore[index]


def test_cross_node_ranks_order_as_documented() -> None:
    light = colocate(ONE, state(g0=residents("vgg11:64")), shared("vgg19:64"))
    heavier = colocate(ONE, state(g0=residents("resnet18:64")), shared("vgg19:64"))
    idle = colocate(ONE, NodeState(), shared("vgg19:64"))
    assert idle.colocation and light.colocation and heavier.colocation
    assert idle.colocation.rank < light.colocation.rank < heavier.colocation.rank


# ------------------------------------------------------------------ invariants

KEYS = sorted(CAT)


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, object]]:
    ops: list[tuple[str, object]] = []
    for i in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["shared", "shared", "shared", "whole", "frac", "release"]))
        if kind == "shared":
            ops.append(("shared", (draw(st.sampled_from(KEYS)), f"j{i}",
                                   draw(st.sampled_from(colocation_policies())))))
        elif kind == "whole":
            ops.append(("whole", draw(st.integers(1, 3))))
        elif kind == "frac":
            ops.append(("frac", draw(st.integers(10, 90))))
        else:
            ops.append(("release", draw(st.integers(0, 10 ** 6))))
    return ops


def check_invariants(topo: Topology, st_: NodeState) -> None:
    names: list[str] = []
    for g, u in st_.usage.items():
        assert 0 <= g < topo.size
        assert len(u.residents) <= st_.slots_per_gpu, "more jobs than slots"
        assert u.memory_used_mib <= topo.gpus[g].memory_mib, "more memory than the GPU has"
        if u.residents:
            assert u.core_percent == 0 and u.memory_mib == 0, "a GPU both whole and shared"
            assert g not in st_.free_gpus(topo)
        names += [r.name for r in u.residents]
    assert len(names) == len(set(names))


@settings(max_examples=80, deadline=None)
@given(topologies(min_gpus=1, max_gpus=6), st.integers(1, 4), operations())
def test_accounting_invariants(topo: Topology, slots: int,
                               ops: list[tuple[str, object]]) -> None:
    """Whatever sequence of shared, whole and vGPU requests and releases arrives, through any
    co-location policy: never more jobs than slots on a GPU, never more memory than it has,
    never a GPU both whole (or vGPU-split) and shared, never a job twice."""
    st_ = NodeState(slots_per_gpu=slots)
    for kind, arg in ops:
        try:
            if kind == "shared":
                key, name, policy = arg  # type: ignore[misc]
                d = EV.place(policy, topo, st_, shared(key, name=name))
                assert d.gpus[0] not in st_.unhealthy
                st_ = st_.with_allocation(d)
            elif kind == "whole":
                st_ = st_.with_allocation(gputopo(topo, st_, Request(count=arg)))  # type: ignore[arg-type]
            elif kind == "frac":
                st_ = st_.with_allocation(gputopo(topo, st_, Request.fraction(arg / 100, 500)))  # type: ignore[operator]
            else:
                everyone = [(g, r.name) for g, u in sorted(st_.usage.items())
                            for r in u.residents]
                if everyone:
                    g, name = everyone[arg % len(everyone)]  # type: ignore[operator]
                    st_ = st_.without_resident(g, name)
        except NoFit:
            pass
        check_invariants(topo, st_)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(colocation_policies()), st.sampled_from(KEYS), st.sampled_from(KEYS),
       st.sampled_from(KEYS))
def test_decisions_are_deterministic(policy: str, a: str, b: str, new: str) -> None:
    st_ = state(tuple(range(3, 8)), g0=residents(a, gpu=0), g1=residents(b, gpu=1))
    EV.clear_decisions()
    try:
        first = EV.place(policy, DGX, st_, shared(new))
    except NoFit as exc:
        with pytest.raises(NoFit, match=str(exc)[:20]):
            EV.clear_decisions()
            EV.place(policy, DGX, st_, shared(new))
        return
    EV.clear_decisions()
    assert EV.place(policy, DGX, st_, shared(new)) == first


# ------------------------------------------------------------------ fourth mutation round
def test_gputopo_skips_a_join_that_adds_no_throughput_and_looks_further() -> None:
    """A shared GPU whose set would lose throughput (two light jobs, each slowed from 1.0 to
    1.9 by a heavy newcomer: 3 / 1.9 < 2 GPUs' worth, though δ = 3 t / 1.9 t ≥ 1 lets it
    pass Algorithm 2's checks) is skipped, and the next shared GPU is still considered: it is
    a later GPU that gains (+2/3 GPU, tier 1), not a refusal. Hand-computed with Tabrizian's
    model (``d = c / 0.5``, ``s = max(1, Σd)`` here)."""
    light, small, heavy = prof(0.1, 0.225, 0.01), prof(0.1, 0.1, 0.01), prof(0.1, 0.5, 0.01)
    st_ = state(tuple(range(2, 8)), g0=residents(light, light, gpu=0),
                g1=residents(small, gpu=1))
    d = gputopo(DGX, st_, shared(heavy))
    assert d.gpus == (1,)
    c = d.colocation
    assert c is not None and c.rank[0] == 1.0
    assert c.chosen.throughput_gain == pytest.approx(2 / 1.2 - 1)
    assert c.runner_up is None  # GPU 0's losing set is not even a fallback
    # alone, the losing GPU is no answer at all
    with pytest.raises(NoFit, match="no gain from joining"):
        gputopo(DGX, state(tuple(range(1, 8)), g0=residents(light, light, gpu=0)),
                shared(heavy))


def test_gputopo_opens_the_idle_gpu_whose_nvlink_peers_are_busy() -> None:
    """Tier 2's tie-break: among idle GPUs that cost the same PreservedBW, the one with the
    most busy NVLink peers (its links are lost to the free set anyway), then the lowest
    index. Four GPUs on one PCIe switch, one NVLink between 2 and 3, GPU 3 busy: taking any
    of 0, 1, 2 loses two PCIe links (2–3's NVLink is already gone), so GPU 2 — the one whose
    NVLink peer is busy — is opened, not GPU 0."""
    gpus = [GPU(i, deterministic_uuid("tie4", i), f"0000:{i + 1:02x}:00.0", "V100", 16160, 0,
                frozenset({0, 1})) for i in range(4)]
    topo = Topology.build("tie4", gpus, {(2, 3): 1}, PCIeLevel.PIX)
    d = gputopo(topo, state((3,)), shared(prof(0.1, 0.2, 0.01)))
    assert d.gpus == (2,)
    assert d.colocation is not None and d.colocation.rank == (2.0, 24.0, -1.0, 2.0)
    # with no NVLink peer busy every idle GPU ties, and the lowest index wins
    assert gputopo(topo, state((0,)), shared(prof(0.1, 0.2, 0.01))).gpus == (1,)


def test_shared_decision_fields() -> None:
    """A co-location decision carries the chosen GPU's own CPUs and NUMA node (Gaia §III-A's
    binding: DGX-1 GPU 5 sits on NUMA 1, CPUs 20-39 and 60-79), the job's memory, and no
    bandwidth figures (one GPU, no pattern)."""
    st_ = state((0, 1, 2, 3, 4, 6, 7))
    for policy in (colocate, exclusive, random_colocate):
        d = policy(DGX, st_, shared("vgg11:64"))
        assert d.gpus == (5,) and d.uuids == (DGX.gpus[5].uuid,) and d.mapping == (5,)
        assert d.cpu_affinity == "20-39,60-79" and d.numa_nodes == (1,)
        assert d.memory_mib == CAT["vgg11:64"].gpu_memory_mib
        assert (d.aggregated_bandwidth_gbps, d.pattern_bandwidth_gbps,
                d.effective_bandwidth_gbps, d.access_cost) == (0.0, 0.0, 0.0, 0.0)


def test_no_slot_reason_counts_the_full_gpus() -> None:
    """The NoFit reason counts every GPU whose slots are all taken."""
    st_ = state(tuple(range(2, 8)), slots=1, g0=residents("vgg11:64", gpu=0),
                g1=residents("vgg11:64", gpu=1))
    with pytest.raises(NoFit, match="2 shared GPU"):
        colocate(DGX, st_, shared("vgg19:64"))


# ------------------------------------------------------------------ seventh mutation round
def test_gputopo_equal_gains_go_to_the_set_that_runs_faster_together() -> None:
    """Tier 1 on a tie of throughput gain: two shared GPUs each holding one light job with
    the newcomer's own compute and bandwidth demand, so every member of either set is slowed
    by the same factor s (interference only) and both joins add the same throughput. The
    resident on GPU 0 iterates in 0.3 s, the one on GPU 1 in 0.1 s: joining GPU 1 gives
    δ = (0.1 + 0.1) / 0.1 s = 2 / s, joining GPU 0 δ = (0.3 + 0.1) / 0.3 s = 4 / 3s (Eq. 4.1),
    so GPU 1 — the set that runs faster together — wins although its index is higher. The
    decision carries the default policy's name and its tier in the reason."""
    slow, fast, new = prof(0.3, 0.1, 0.01), prof(0.1, 0.1, 0.01), prof(0.1, 0.1, 0.01)
    st_ = state(tuple(range(2, 8)), g0=residents(slow, gpu=0), g1=residents(fast, gpu=1))
    d = gputopo(DGX, st_, shared(new))
    c = d.colocation
    assert d.gpus == (1,) and c is not None and c.runner_up is not None
    assert c.runner_up.gpu == 0 and JOIN_GAIN <= c.chosen.throughput_gain <= 1.0
    assert c.chosen.throughput_gain == pytest.approx(c.runner_up.throughput_gain, abs=1e-12)
    assert c.chosen.delta / c.runner_up.delta == pytest.approx(1.5)
    assert d.policy == "gputopo" and d.reason.startswith("gputopo co-location tier 1: ")


def test_algorithm2_joins_a_set_exactly_at_the_threshold() -> None:
    """§4.2.4 bounds the set's ΣC by the threshold inclusively: a threshold equal to the
    predicted set's ΣC lets the job join; one just below it refuses."""
    exact = predict([CAT["vgg19:64"], CAT["vgg11:64"]]).sum_c
    light = state(g0=residents("vgg19:64"))
    assert colocate(ONE, light, shared("vgg11:64", threshold=exact)).gpus == (0,)
    with pytest.raises(NoFit, match="threshold"):
        colocate(ONE, light, shared("vgg11:64", threshold=exact * (1 - 1e-9)))
