"""The extender and co-location slots (``gputopo.io/gpu-shared``): parsing, filter /
prioritize / bind with the co-location policies, accounting of slots, vGPU shares and whole
GPUs over the same GPUs, and the state rebuilt from annotations after a restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler_extender.kubernetes_state import KubernetesState
from scheduler_extender.podspec import PodSpecError, choose_policy, parse_pod
from scheduler_extender.profiles import ColocationInputs, ProfileLayers
from scheduler_extender.schemas import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderPreemptionArgs,
)
from scheduler_extender.state import Allocation, MemoryState, PodRef, ReservationConflict
from scheduler_extender.verbs import Extender
from tests.scheduler_extender.fake_kube import FakeKubeAPI
from tests.scheduler_extender.helpers import bind_args, gpu_pod, names_args
from topology import catalog
from topology.colocation.profile import builtin_catalog
from topology.contract import (
    ANN_COLOCATION,
    ANN_GPU_INDICES,
    ANN_GPU_SHARED_SLOTS,
    ANN_KERNEL_OCCUPANCY,
    ANN_MEM_BANDWIDTH_UTIL,
    ANN_POLICY,
    ANN_PROFILE,
    ANN_VGPU_MEMORY,
    AssignmentError,
    assignment_annotations,
    node_state_of,
    parse_assignment,
)

CAT = builtin_catalog()
DGX = catalog.get("dgx1-v100")
ONE = catalog.get("v100-1gpu")


def shared_pod(name: str, profile: str | None = None, *, policy: str | None = None,
               memory_units: int | None = None, slots: str = "1",
               extra: dict[str, str] | None = None) -> dict[str, Any]:
    ann = dict(extra or {})
    if profile:
        ann[ANN_PROFILE] = profile
    if policy:
        ann[ANN_POLICY] = policy
    limits = {"gputopo.io/gpu-shared": slots}
    if memory_units is not None:
        limits["gputopo.io/vgpu-memory"] = str(memory_units)
    return gpu_pod(name, annotations=ann, resources={"limits": limits})


def schedule(ext: Extender, state: MemoryState, pod: dict[str, Any],
             nodes: list[str]) -> tuple[str | None, dict[str, Any]]:
    """filter → prioritize → highest score (ties: first) → bind, as kube-scheduler would."""
    res = ext.filter(ExtenderArgs.model_validate(names_args(pod, nodes)))
    if res["Error"]:
        return None, res
    ok = res["NodeNames"]
    if not ok:
        return None, res
    scores = ext.prioritize(ExtenderArgs.model_validate(names_args(pod, ok)))
    best = max(ok, key=lambda n: (next(s["Score"] for s in scores if s["Host"] == n),
                                  -ok.index(n)))
    out = ext.bind(ExtenderBindingArgs.model_validate(bind_args(pod, best)))
    assert not out["Error"], out
    return best, res


def gpu_of(state: MemoryState, name: str) -> int:
    rec = state.bound_pod("default", name)
    assert rec is not None
    return int(rec.annotations[ANN_GPU_INDICES])


# ------------------------------------------------------------------ parsing


def test_parse_a_shared_pod() -> None:
    pod = shared_pod("a", "resnet18:64", memory_units=8)
    preq = parse_pod(pod)
    assert preq is not None and preq.policy is None
    sh = preq.request.shared
    assert sh is not None and preq.request.count == 1
    assert sh.name == "default/a" and sh.profile.key == "resnet18:64"
    assert sh.memory_mib == 8 * 256  # the vgpu-memory request wins over the profile's
    explicit = parse_pod(shared_pod("b", extra={
        ANN_KERNEL_OCCUPANCY: "2e6", ANN_MEM_BANDWIDTH_UTIL: "1e6",
        "gputopo.io/iteration-time-ms": "50"}))
    assert explicit is not None and explicit.request.shared is not None
    assert explicit.request.shared.profile.kernel_occupancy == 2e6
    default = parse_pod(shared_pod("c"))
    assert default is not None and default.request.shared is not None
    assert default.request.shared.profile.source == "default"
    user = ColocationInputs(CAT, user={"resnet18:64": CAT["vgg11:64"]}, threshold=1e7)
    mine = parse_pod(shared_pod("d", "resnet18:64"), colocation=user)
    assert mine is not None and mine.request.shared is not None
    assert mine.request.shared.profile == CAT["vgg11:64"]
    assert mine.request.shared.threshold == 1e7


@pytest.mark.parametrize("pod, message", [
    (shared_pod("x", slots="2"), "exactly one co-location slot"),
    (gpu_pod("x", resources={"limits": {"gputopo.io/gpu-shared": "1", "nvidia.com/gpu": "1"}}),
     "a shared pod asks for"),
    (gpu_pod("x", resources={"limits": {"gputopo.io/gpu-shared": "1",
                                        "gputopo.io/vgpu-core": "30"}}), "a shared pod asks"),
    (shared_pod("x", "resnet18"), "<model>:<batch>"),
    (shared_pod("x", extra={ANN_KERNEL_OCCUPANCY: "lots"}), "not a number"),
    (shared_pod("x", "vgg11:64", policy="mapa-preserve"), "does not place co-location"),
])
def test_bad_shared_pods(pod: dict[str, Any], message: str) -> None:
    with pytest.raises(PodSpecError, match=message):
        parse_pod(pod)


def test_choose_policy() -> None:
    preq = parse_pod(shared_pod("a", "vgg11:64"))
    assert preq is not None
    assert choose_policy(preq, "mapa-preserve", "colocate") == "colocate"
    assert choose_policy(preq, "gputopo", "colocate") == "gputopo"
    whole = parse_pod(gpu_pod("w", 2))
    assert whole is not None and choose_policy(whole, "mapa-preserve", "colocate") == \
        "mapa-preserve"


# ------------------------------------------------------------------ filter / prioritize / bind


def test_algorithm2_through_the_verbs() -> None:
    """Tabrizian Algorithm 2 (colocate): each pod goes to the GPU whose jobs have the lowest
    ΣC — idle GPUs first — and bind writes the co-location record."""
    state = MemoryState({"one": ONE, "two": ONE})
    ext = Extender(state, "colocate")
    n1, _ = schedule(ext, state, shared_pod("a", "vgg19:64"), ["one", "two"])
    n2, _ = schedule(ext, state, shared_pod("b", "resnet18:64"), ["one", "two"])
    assert {n1, n2} == {"one", "two"}  # spread: the idle GPU has ΣC = 0
    n3, _ = schedule(ext, state, shared_pod("c", "vgg11:64"), ["one", "two"])
    assert n3 == n1  # vgg19:64's ΣC (5.4e5) is lower than resnet18:64's (9.3e5)
    rec = state.bound_pod("default", "c")
    assert rec is not None
    doc = json.loads(rec.annotations[ANN_COLOCATION])
    assert doc["profile"] == "vgg11:64" and doc["residents"] == ["default/a (vgg19:64)"]
    assert rec.annotations[ANN_VGPU_MEMORY] == str(CAT["vgg11:64"].gpu_memory_mib)
    a = parse_assignment(rec.annotations)
    assert a.shared and not a.fractional and a.colocation is not None
    assert a.colocation.name == "default/c"
    st = state.node_state(n1)
    assert [r.name for r in st.residents(0)] == ["default/a", "default/c"]
    assert ext.state.node_state(n1).free_gpus(ONE) == ()


def test_a_pod_over_the_threshold_everywhere_stays_pending() -> None:
    state = MemoryState({"one": ONE, "two": ONE})
    ext = Extender(state, "colocate")
    schedule(ext, state, shared_pod("big-a", "resnet50:256"), ["one", "two"])
    schedule(ext, state, shared_pod("big-b", "resnet50:256"), ["one", "two"])
    node, res = schedule(ext, state, shared_pod("late", "vgg11:64"), ["one", "two"])
    assert node is None and not res["Error"]
    for reason in res["FailedNodes"].values():
        assert "threshold" in reason and "Algorithm 2" in reason


def test_deleting_pods_frees_slots() -> None:
    state = MemoryState({"one": ONE})
    ext = Extender(state, "gputopo")
    for i in range(3):
        assert schedule(ext, state, shared_pod(f"p{i}", "vgg11:64"), ["one"])[0] == "one"
    node, res = schedule(ext, state, shared_pod("p3", "vgg11:64"), ["one"])
    assert node is None and "3 slots taken" in res["FailedNodes"]["one"]
    assert state.delete_pod("default", "p1")
    assert schedule(ext, state, shared_pod("p3", "vgg11:64"), ["one"])[0] == "one"
    assert len(state.node_state("one").residents(0)) == 3


def test_gputopo_packs_and_keeps_whole_gpus() -> None:
    state = MemoryState({"dgx": DGX})
    ext = Extender(state, "gputopo")
    schedule(ext, state, shared_pod("a", "vgg19:64"), ["dgx"])
    schedule(ext, state, shared_pod("b", "vgg11:64"), ["dgx"])
    assert gpu_of(state, "a") == gpu_of(state, "b")
    whole, _ = schedule(ext, state, gpu_pod("w", 7), ["dgx"])
    assert whole == "dgx"
    w = state.bound_pod("default", "w")
    assert w is not None and str(gpu_of(state, "a")) not in w.annotations[ANN_GPU_INDICES].split(
        ",")


def test_non_colocating_default_policy_falls_back() -> None:
    state = MemoryState({"one": ONE})
    ext = Extender(state, "mapa-preserve", colocation_policy="colocate")
    assert schedule(ext, state, shared_pod("a", "vgg11:64"), ["one"])[0] == "one"
    rec = state.bound_pod("default", "a")
    assert rec is not None and rec.annotations["gputopo.io/decided-by"] == "colocate"
    with pytest.raises(ValueError, match="does not place"):
        Extender(state, "gputopo", colocation_policy="baseline")


def test_user_profiles_file_is_read_and_reread(tmp_path: Path) -> None:
    f = tmp_path / "profiles.yaml"
    f.write_text("apiVersion: gputopo.io/v1\nkind: ColocationProfiles\nmetadata: {name: m}\n"
                 "profiles:\n  bert:32: {iteration_s: 0.2, kernel_occupancy: 2e6, "
                 "mem_bandwidth_util: 1e6, gpu_memory_mib: 5000}\n")
    layers = ProfileLayers(user_file=f)
    state = MemoryState({"one": ONE})
    ext = Extender(state, "gputopo", profiles=layers)
    schedule(ext, state, shared_pod("a", "bert:32"), ["one"])
    rec = state.bound_pod("default", "a")
    assert rec is not None and json.loads(rec.annotations[ANN_COLOCATION])[
        "profile_source"] == "user"
    assert rec.annotations[ANN_VGPU_MEMORY] == "5000"
    f.write_text("not: [valid")  # a bad edit keeps the last good file
    assert layers.snapshot().user is not None and layers.problems()


class _FetchingState(MemoryState):
    """A memory state that can fetch the pods it was given (as the Kubernetes backend reads
    a pod no filter call was seen for)."""

    def __init__(self, nodes: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        super().__init__(nodes)
        self.pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}

    def fetch_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get((namespace, name))


def test_a_shared_pod_bound_without_a_filter_reads_the_extenders_profile_layers(
    tmp_path: Path,
) -> None:
    """Bind fetches a pod no filter call was seen for and parses it with the extender's own
    profile layers: the profile comes from the user's file, not from the shipped catalog
    (which has another one of that name)."""
    f = tmp_path / "profiles.yaml"
    f.write_text("apiVersion: gputopo.io/v1\nkind: ColocationProfiles\nmetadata: {name: m}\n"
                 "profiles:\n  bert:32: {iteration_s: 0.2, kernel_occupancy: 2e6, "
                 "mem_bandwidth_util: 1e6, gpu_memory_mib: 5000}\n")
    pod = shared_pod("a", "bert:32")
    shipped = parse_pod(pod)
    assert shipped is not None and shipped.request.shared is not None
    assert shipped.request.shared.memory_mib != 5000  # the shipped catalog's own profile
    state = _FetchingState({"one": ONE}, [pod])
    ext = Extender(state, "gputopo", profiles=ProfileLayers(user_file=f))
    out = ext.bind(ExtenderBindingArgs.model_validate(bind_args(pod, "one")))
    assert out == {"Error": ""}
    rec = state.bound_pod("default", "a")
    assert rec is not None and json.loads(rec.annotations[ANN_COLOCATION])[
        "profile_source"] == "user"
    assert rec.annotations[ANN_VGPU_MEMORY] == "5000"


# ------------------------------------------------------------------ accounting


def test_slots_shares_and_whole_gpus_never_mix() -> None:
    state = MemoryState({"one": ONE})
    ext = Extender(state, "gputopo")
    schedule(ext, state, shared_pod("a", "vgg11:64"), ["one"])
    # a vGPU share and a whole GPU do not fit the shared GPU
    share = gpu_pod("s", resources={"limits": {"gputopo.io/vgpu-core": "30"}})
    res = ext.filter(ExtenderArgs.model_validate(names_args(share, ["one"])))
    assert res["NodeNames"] == [] and "one" in res["FailedNodes"]
    res = ext.filter(ExtenderArgs.model_validate(names_args(gpu_pod("w", 1), ["one"])))
    assert res["NodeNames"] == []
    # the book refuses a racing reservation that would break a rule
    whole = Allocation(PodRef("default", "w"), "one", (0,))
    with pytest.raises(ReservationConflict, match="already in use"):
        state.book.add(whole, ONE)
    share_alloc = Allocation(PodRef("default", "s"), "one", (0,), 30, 0, fractional=True)
    with pytest.raises(ReservationConflict, match="co-located"):
        state.book.add(share_alloc, ONE)


def test_gpu_memory_is_never_overcommitted() -> None:
    state = MemoryState({"one": ONE})
    ext = Extender(state, "gputopo")
    # 16160 MiB: two 7 GiB reservations fit, a third does not (28 units x 256 MiB)
    assert schedule(ext, state, shared_pod("a", "vgg11:64", memory_units=28), ["one"])[0]
    assert schedule(ext, state, shared_pod("b", "vgg11:64", memory_units=28), ["one"])[0]
    node, res = schedule(ext, state, shared_pod("c", "vgg11:64", memory_units=28), ["one"])
    assert node is None and "MiB of free memory" in res["FailedNodes"]["one"]
    big = Allocation(PodRef("default", "c"), "one", (0,), memory_mib=7168,
                     colocation=state.node_state("one").residents(0)[0])
    with pytest.raises(ReservationConflict, match="MiB free"):
        state.book.add(big, ONE)


def test_node_slots_follow_the_device_plugin() -> None:
    state = MemoryState({"one": ONE})
    state.book.set_slots("one", 1)
    ext = Extender(state, "gputopo")
    assert schedule(ext, state, shared_pod("a", "vgg11:64"), ["one"])[0] == "one"
    node, res = schedule(ext, state, shared_pod("b", "vgg11:64"), ["one"])
    assert node is None and "all 1 slots taken" in res["FailedNodes"]["one"]


# ------------------------------------------------------------------ restart


def test_state_rebuilt_from_annotations(tmp_path: Path) -> None:
    """A restarted extender (KubernetesState over the API) rebuilds every GPU's residents,
    its slots (the node's gputopo.io/gpu-shared-slots) and decides on them."""
    state = MemoryState({"n0": ONE})
    ext = Extender(state, "gputopo")
    for name in ("a", "b"):
        schedule(ext, state, shared_pod(name, "vgg11:64"), ["n0"])
    api = FakeKubeAPI()
    try:
        api.add_node("n0", ONE)
        api.nodes["n0"]["metadata"]["annotations"][ANN_GPU_SHARED_SLOTS] = "2"
        for name in ("a", "b"):
            rec = state.bound_pod("default", name)
            assert rec is not None
            api.add_pod(name, f"uid-{name}", node="n0", annotations=dict(rec.annotations),
                        phase="Running")
        kube = KubernetesState(api)
        kube.resync_nodes()
        kube.resync_pods()
        st = kube.node_state("n0")
        assert [r.name for r in st.residents(0)] == ["default/a", "default/b"]
        assert st.slots_per_gpu == 2
        assert node_state_of([parse_assignment(state.bound_pod("default", n).annotations)  # type: ignore[union-attr]
                              for n in ("a", "b")]).residents(0) == st.residents(0)
        again = Extender(kube, "gputopo")
        res = again.filter(ExtenderArgs.model_validate(
            names_args(shared_pod("c", "vgg11:64"), ["n0"])))
        assert res["NodeNames"] == [] and "all 2 slots taken" in res["FailedNodes"]["n0"]
    finally:
        api.close()


def test_assignment_round_trip() -> None:
    state = MemoryState({"one": ONE})
    ext = Extender(state, "colocate")
    schedule(ext, state, shared_pod("a", "resnet18:128", memory_units=12), ["one"])
    rec = state.bound_pod("default", "a")
    assert rec is not None and rec.decision is not None
    ann = assignment_annotations(rec.decision, "one")
    a = parse_assignment(ann)
    assert a.memory_mib == 3072 and a.colocation is not None
    assert a.colocation.profile.kernel_occupancy == CAT["resnet18:128"].kernel_occupancy
    broken = dict(ann, **{ANN_COLOCATION: "{}"})
    with pytest.raises(AssignmentError, match="iteration_s"):
        parse_assignment(broken)


def test_preempt_for_a_shared_pod_judges_slots() -> None:
    """``/preempt`` for a ``gpu-shared`` pod asks the co-location policy about the node as
    the victims' eviction would leave it: evicting the heavy resident that keeps ΣC over the
    threshold helps; a node where nothing is proposed is dropped; the live state is
    untouched."""
    state = MemoryState({"one": ONE, "two": ONE})
    ext = Extender(state, "colocate")
    assert schedule(ext, state, shared_pod("big-a", "resnet50:256"), ["one"])[0] == "one"
    assert schedule(ext, state, shared_pod("big-b", "resnet50:256"), ["two"])[0] == "two"
    assert schedule(ext, state, shared_pod("mid", "vgg11:64"), ["one", "two"])[0] is None
    uids = {a.pod.name: a.pod.uid for a in state.allocations()}
    args = ExtenderPreemptionArgs.model_validate({
        "Pod": shared_pod("mid", "vgg11:64"), "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {
            "one": {"Pods": [{"UID": uids["big-a"]}], "NumPDBViolations": 0},
            "two": None,
        }})
    before = state.node_state("one").key()
    reply = ext.preempt(args)
    assert list(reply["NodeNameToMetaVictims"]) == ["one"]
    assert reply["NodeNameToMetaVictims"]["one"]["Pods"] == [{"UID": uids["big-a"]}]
    assert state.node_state("one").key() == before


def test_the_colocation_example_parses() -> None:
    import yaml

    path = Path(__file__).resolve().parents[2] / "examples" / "colocate-resnet18.yaml"
    pod = yaml.safe_load(path.read_text())
    preq = parse_pod(pod)
    assert preq is not None and preq.policy == "colocate"
    sh = preq.request.shared
    assert sh is not None and sh.profile.key == "resnet18:64" and sh.memory_mib == 8 * 256


def test_a_slot_larger_than_every_gpu_fails_filter_unresolvably() -> None:
    """A co-location slot reserving more memory than any GPU of the node has: refused at
    once, unresolvably (no eviction makes a GPU bigger), naming both sizes."""
    state = MemoryState({"one": ONE})
    ext = Extender(state, "gputopo")
    need = 100 * 256  # 100 units of 256 MiB
    res = ext.filter(ExtenderArgs.model_validate(
        names_args(shared_pod("big", "vgg11:64", memory_units=100), ["one"])))
    assert res["NodeNames"] == [] and res["FailedNodes"] == {}
    biggest = max(g.memory_mib for g in ONE.gpus)
    assert res["FailedAndUnresolvableNodes"] == {"one": (
        f"no GPU on the node has {need} MiB for the co-location slot; the largest has "
        f"{biggest} MiB")}
