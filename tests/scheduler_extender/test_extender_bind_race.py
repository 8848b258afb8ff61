"""Concurrent binds never hand out a GPU twice, and never more than a node has."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st

from gputopo_cli.demo import http_client, serve
from scheduler_extender.app import create_app
from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs
from scheduler_extender.settings import ExtenderSettings
from scheduler_extender.state import MemoryState
from scheduler_extender.verbs import Extender
from tests.scheduler_extender.helpers import POLICY, bind_args, gpu_pod, names_args
from topology import catalog, contract
from topology.contract import parse_assignment
from topology.policies.base import FULL_CORE


def _filter(ext: Extender, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    return ext.filter(ExtenderArgs.model_validate(names_args(pod, nodes)))


def _bind(ext: Extender, pod: dict[str, Any], node: str) -> dict[str, str]:
    return ext.bind(ExtenderBindingArgs.model_validate(bind_args(pod, node)))


def assert_consistent(state: MemoryState) -> None:
    """Per GPU: at most one whole holder and never whole + shares; shares fit the GPU."""
    whole: dict[tuple[str, int], int] = defaultdict(int)
    core: dict[tuple[str, int], int] = defaultdict(int)
    mem: dict[tuple[str, int], int] = defaultdict(int)
    for a in state.allocations():
        topo = state.node_topology(a.node)
        assert not isinstance(topo, Exception)
        for g in a.gpus:
            assert 0 <= g < topo.size
            if a.fractional:
                core[(a.node, g)] += a.core_percent
                mem[(a.node, g)] += a.memory_mib
                assert mem[(a.node, g)] <= topo.gpus[g].memory_mib
            else:
                whole[(a.node, g)] += 1
    for key, n in whole.items():
        assert n == 1, f"GPU {key} handed out {n} times"
        assert core[key] == 0 and mem[key] == 0, f"GPU {key} both whole and shared"
    for key, total in core.items():
        assert total <= FULL_CORE, f"GPU {key} shares exceed one GPU: {total}%"
    per_node: dict[str, int] = defaultdict(int)
    for (node, _), _n in whole.items():
        per_node[node] += 1
    for node, used in per_node.items():
        topo = state.node_topology(node)
        assert not isinstance(topo, Exception) and used <= topo.size


def test_sixteen_threads_race_for_one_node() -> None:
    state = MemoryState({"n0": catalog.get("dgx1-v100")})
    ext = Extender(state, POLICY)
    pods = [gpu_pod(f"p{i:02d}", 2) for i in range(16)]
    for p in pods:  # every pod passes filter on the idle node
        assert _filter(ext, p, ["n0"])["NodeNames"] == ["n0"]
    barrier = threading.Barrier(len(pods))
    results: dict[str, dict[str, str]] = {}

    def go(p: dict[str, Any]) -> None:
        barrier.wait()
        results[p["metadata"]["name"]] = _bind(ext, p, "n0")

    threads = [threading.Thread(target=go, args=(p,)) for p in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    ok = sorted(n for n, r in results.items() if r["Error"] == "")
    assert len(results) == 16 and len(ok) == 4
    assert all("only 0 of 8 GPUs free" in r["Error"] for r in results.values() if r["Error"])
    handed = []
    for name in ok:
        rec = state.bound_pod("default", name)
        assert rec is not None
        handed += parse_assignment(rec.annotations).gpu_indices
    assert sorted(handed) == list(range(8))
    assert_consistent(state)


def test_race_over_real_http() -> None:
    """The same race through uvicorn: binds run in the server's thread pool."""
    state = MemoryState({"n0": catalog.get("dgx1-v100")})
    app = create_app(ExtenderSettings(policy=POLICY, state="memory", eval_budget_ms=0), state)
    pods = [gpu_pod(f"h{i:02d}", 2) for i in range(16)]
    results: list[str] = []
    with serve(app) as url:
        with http_client(url) as c:
            for p in pods:
                assert c.post("/filter", json=names_args(p, ["n0"])).json()["NodeNames"] == ["n0"]
        barrier = threading.Barrier(len(pods))

        def go(p: dict[str, Any]) -> None:
            with httpx.Client(base_url=url, timeout=30) as c:
                barrier.wait()
                results.append(c.post("/bind", json=bind_args(p, "n0")).json()["Error"])

        threads = [threading.Thread(target=go, args=(p,)) for p in pods]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert len(results) == 16 and results.count("") == 4
    assert sorted(g for a in state.allocations() for g in a.gpus) == list(range(8))
    assert_consistent(state)


NODES = {"a0": "dgx1-v100", "a1": "dgx1-v100", "b0": "gaia-4gpu"}
#: MiB per vgpu-memory unit (the contract's, once it defines one).
MEMORY_UNIT_MIB: int = getattr(contract, "DEFAULT_VGPU_MEMORY_UNIT_MIB", 1)

pod_requests = st.one_of(
    st.tuples(st.just("whole"), st.integers(1, 8)),
    st.tuples(st.just("share"), st.integers(5, 100), st.sampled_from([0, 1024, 8000, 16000])),
)


def _pod_for(name: str, spec: tuple[Any, ...]) -> dict[str, Any]:
    if spec[0] == "whole":
        return gpu_pod(name, spec[1])
    units = spec[2] // MEMORY_UNIT_MIB  # vgpu-memory counts the contract's units
    limits = {"gputopo.io/vgpu-core": str(spec[1]), "gputopo.io/vgpu-memory": str(units)}
    return gpu_pod(name, resources={"limits": limits})


@given(
    batches=st.lists(
        st.tuples(
            st.lists(st.tuples(pod_requests, st.sampled_from(sorted(NODES))), min_size=1,
                     max_size=4),
            st.lists(st.integers(0, 50), max_size=3),  # pods to delete after the batch
        ),
        min_size=1, max_size=8,
    )
)
def test_random_streams_never_double_allocate(
    batches: list[tuple[list[tuple[tuple[Any, ...], str]], list[int]]],
) -> None:
    state = MemoryState({n: catalog.get(m) for n, m in NODES.items()})
    ext = Extender(state, POLICY)
    live: list[str] = []
    serial = 0
    for binds, deletions in batches:
        pods = []
        for spec, node in binds:
            serial += 1
            p = _pod_for(f"r{serial}", spec)
            _filter(ext, p, sorted(NODES))
            pods.append((p, node))
        out: list[tuple[str, str]] = []

        def go(p: dict[str, Any], node: str, sink: list[tuple[str, str]]) -> None:
            sink.append((p["metadata"]["name"], _bind(ext, p, node)["Error"]))

        threads = [threading.Thread(target=go, args=(p, n, out)) for p, n in pods]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        live += [name for name, err in out if err == ""]
        assert_consistent(state)
        for i in deletions:
            if live:
                state.delete_pod("default", live.pop(i % len(live)))
        assert_consistent(state)
        assert {a.pod.name for a in state.allocations()} == set(live)


class _SlowAPI(MemoryState):
    """A memory state whose bind (the API call) waits until released."""

    def __init__(self, nodes: dict[str, Any]) -> None:
        super().__init__(nodes)
        self.entered = threading.Event()
        self.go_on = threading.Event()

    def bind(self, pod: Any, node: str, decision: Any) -> None:
        self.entered.set()
        assert self.go_on.wait(30)
        super().bind(pod, node, decision)


def test_bind_reserves_before_it_waits_for_the_api() -> None:
    """With every bind thread busy on a slow API call, the next bind request is still decided
    and reserved at once, so a filter that follows sees those GPUs taken (kube-scheduler
    filters the next pod while this one's bind is in flight)."""
    state = _SlowAPI({"n0": catalog.get("dgx1-v100")})
    app = create_app(ExtenderSettings(policy=POLICY, state="memory", eval_budget_ms=0,
                                      bind_concurrency=1), state)
    first, second, big = gpu_pod("first", 2), gpu_pod("second", 2), gpu_pod("big", 5)
    results: dict[str, str] = {}
    with serve(app) as url:
        with http_client(url) as c:
            for p in (first, second):
                assert c.post("/filter", json=names_args(p, ["n0"])).json()["NodeNames"] == [
                    "n0"]

        def go(p: dict[str, Any]) -> None:
            with httpx.Client(base_url=url, timeout=30) as c:
                results[p["metadata"]["name"]] = c.post("/bind", json=bind_args(p, "n0")).json()[
                    "Error"]

        threads = [threading.Thread(target=go, args=(first,))]
        threads[0].start()
        assert state.entered.wait(10)  # the only bind thread is in the API call
        threads.append(threading.Thread(target=go, args=(second,)))
        threads[1].start()
        deadline = time.monotonic() + 10
        while state.allocation("uid-second") is None:
            assert time.monotonic() < deadline, "the second bind did not reserve"
            time.sleep(0.01)
        with http_client(url) as c:
            reply = c.post("/filter", json=names_args(big, ["n0"])).json()
        assert reply["NodeNames"] == []
        assert reply["FailedNodes"] == {"n0": "only 4 of 8 GPUs free; the pod asks for 5"}
        state.go_on.set()
        for t in threads:
            t.join(30)
    assert results == {"first": "", "second": ""}
    assert_consistent(state)


class _BrokenAPI(MemoryState):
    """A memory state whose bind (the API call) fails unexpectedly; with ``seen_bound`` the
    watch has first shown the pod bound (a Binding whose reply was lost)."""

    def __init__(self, nodes: dict[str, Any], *, seen_bound: bool) -> None:
        super().__init__(nodes)
        self.seen_bound = seen_bound

    def bind(self, pod: Any, node: str, decision: Any) -> None:
        if self.seen_bound:
            super().bind(pod, node, decision)  # confirms the reservation
        raise RuntimeError("connection reset")


def _filter_then_bind(state: MemoryState) -> tuple[dict[str, Any], str]:
    """Pod ``p`` (2 GPUs) filtered onto ``n0`` and bound there through the app over
    ``state``: the bind reply and the metrics page after it."""
    from fastapi.testclient import TestClient

    app = create_app(ExtenderSettings(policy=POLICY, state="memory", eval_budget_ms=0), state)
    pod = gpu_pod("p", 2)
    with TestClient(app) as client:
        assert client.post("/filter", json=names_args(pod, ["n0"])).json()["NodeNames"] == ["n0"]
        reply = client.post("/bind", json=bind_args(pod, "n0")).json()
        return reply, client.get("/metrics").text


def test_an_unexpected_bind_failure_releases_only_an_unconfirmed_reservation() -> None:
    """A bind that fails with something other than the API's refusal answers the error,
    counts it as ``internal`` and rolls the reservation back — but never drops GPUs the
    watch already shows the pod holding."""
    for seen_bound in (False, True):
        state = _BrokenAPI({"n0": catalog.get("dgx1-v100")}, seen_bound=seen_bound)
        reply, metrics = _filter_then_bind(state)
        assert reply["Error"] == "RuntimeError: connection reset"
        assert 'gputopo_extender_bind_errors_total{reason="internal"} 1.0' in metrics
        held = state.allocation("uid-p")
        if seen_bound:
            assert held is not None and held.confirmed and len(held.gpus) == 2
        else:
            assert held is None


class _RefusingAPI(MemoryState):
    """A memory state whose bind (the API call) is refused, or whose outcome is unknown."""

    def __init__(self, nodes: dict[str, Any], *, maybe_written: bool) -> None:
        super().__init__(nodes)
        self.maybe_written = maybe_written

    def bind(self, pod: Any, node: str, decision: Any) -> None:
        from scheduler_extender.state import BindError

        raise BindError("binding refused: conflict", maybe_written=self.maybe_written)


def test_an_api_bind_failure_keeps_the_gpus_only_when_the_binding_may_have_been_written() -> None:
    """The API's refusal is answered as the Error and counted as ``api``; the reservation is
    rolled back, unless the outcome is unknown (the Binding may be there: the GPUs stay
    reserved for the watch to confirm or drop)."""
    for maybe_written in (False, True):
        state = _RefusingAPI({"n0": catalog.get("dgx1-v100")}, maybe_written=maybe_written)
        reply, metrics = _filter_then_bind(state)
        assert reply["Error"] == "binding refused: conflict"
        assert 'gputopo_extender_bind_errors_total{reason="api"} 1.0' in metrics
        held = state.allocation("uid-p")
        assert (held is not None and not held.confirmed) if maybe_written else held is None


class _ConflictingReserve(MemoryState):
    """A memory state whose reservation always finds a GPU taken (two binds raced past the
    node lock, as two extender replicas could)."""

    def reserve(self, pod_key: str, node: str, decision: Any, *, pod: Any) -> None:
        from scheduler_extender.state import ReservationConflict

        raise ReservationConflict(f"GPU {decision.gpus[0]} on {node} is taken")


def _refusals_extender(state: MemoryState) -> Extender:
    from scheduler_extender.metrics import Metrics

    return Extender(state, POLICY, Metrics())


def _counted(ext: Extender, kind: str) -> float:
    assert ext.metrics is not None
    return float(ext.metrics.bind_errors.labels(reason=kind)._value.get())


def test_every_bind_refusal_answers_its_reason_counts_its_kind_and_holds_nothing() -> None:
    """Each way a bind is refused gives the reason as the Error (never an empty one, which
    kube-scheduler reads as bound), the failure class in the result and in
    ``gputopo_extender_bind_errors_total{reason}``, and leaves nothing reserved for the pod;
    a bind that succeeds counts a decision of its policy."""
    from scheduler_extender.decision import BadRequest
    from scheduler_extender.state import PodRef

    dgx = catalog.get("dgx1-v100")

    def ref(pod: dict[str, Any], uid: str | None = None) -> PodRef:
        meta = pod["metadata"]
        return PodRef(meta["namespace"], meta["name"], meta["uid"] if uid is None else uid)

    # bound, then bound again: already-bound, naming the node and the GPUs
    state = MemoryState({"n0": dgx, "n1": dgx})
    ext = _refusals_extender(state)
    pod = gpu_pod("p", 2)
    _filter(ext, pod, ["n0"])
    ok = ext.binder.bind(ref(pod), "n0")
    assert ok.ok and ok.kind == "" and ok.decision is not None
    assert ext.metrics is not None
    assert ext.metrics.decisions.labels(policy=ok.decision.policy)._value.get() == 1
    gpus = ",".join(str(g) for g in ok.decision.gpus)
    again = ext.binder.bind(ref(pod), "n1")
    assert again.error == f"pod {ref(pod)} is already bound to n0 (GPUs {gpus})"
    assert again.kind == "already-bound" and _counted(ext, "already-bound") == 1
    # the live pod of that name has another UID: uid-mismatch
    other = ext.binder.bind(ref(pod, "someone-else"), "n0")
    assert other.error == "PodUID someone-else does not match the live pod's UID uid-p"
    assert other.kind == "uid-mismatch" and _counted(ext, "uid-mismatch") == 1
    # never filtered, and the memory backend cannot fetch it: unknown-pod
    stranger = ext.binder.bind(PodRef("default", "stranger", "uid-s"), "n0")
    assert "unknown to the extender" in stranger.error
    assert stranger.kind == "unknown-pod" and _counted(ext, "unknown-pod") == 1
    # the planner placed it on n1: planned-elsewhere
    planned = gpu_pod("planned", 1, annotations={"gputopo.io/planned-node": "n1"})
    _filter(ext, planned, ["n0", "n1"])
    there = ext.binder.bind(ref(planned), "n0")
    assert there.error.startswith("the gputopo planner placed this pod on node n1, not here")
    assert there.kind == "planned-elsewhere" and _counted(ext, "planned-elsewhere") == 1
    assert state.allocation("uid-planned") is None

    # the policy refuses the request at bind: bad-pod, with the policy's words
    bad = gpu_pod("bad", 1)
    _filter(ext, bad, ["n1"])

    def refuse(ask: Any, view: Any) -> Any:
        raise BadRequest("unknown job profile 'lenet'")

    ext.binder.decider.decide_exact = refuse  # type: ignore[method-assign]
    refused = ext.binder.bind(ref(bad), "n1")
    assert refused.error == "unknown job profile 'lenet'"
    assert refused.kind == "bad-pod" and _counted(ext, "bad-pod") == 1
    assert state.allocation("uid-bad") is None

    # a reservation racing another: conflict
    racing = _ConflictingReserve({"n0": dgx})
    ext = _refusals_extender(racing)
    pod = gpu_pod("r", 1)
    _filter(ext, pod, ["n0"])
    lost = ext.binder.bind(ref(pod), "n0")
    assert lost.error.startswith("cannot reserve: GPU ") and lost.error.endswith(" on n0 is taken")
    assert lost.kind == "conflict" and _counted(ext, "conflict") == 1
    assert racing.allocations() == []


def test_a_second_bind_while_the_first_awaits_confirmation_is_refused_as_in_flight() -> None:
    """The API's answer to the first bind is unknown (the GPUs stay reserved): a second bind
    of the pod is refused as ``in-flight``, naming the node and GPUs held, and does not
    decide again."""
    state = _RefusingAPI({"n0": catalog.get("dgx1-v100")}, maybe_written=True)
    ext = _refusals_extender(state)
    pod = gpu_pod("p", 2)
    _filter(ext, pod, ["n0"])
    from scheduler_extender.state import PodRef

    first = ext.binder.bind(PodRef("default", "p", "uid-p"), "n0")
    assert first.kind == "api"
    held = state.allocation("uid-p")
    assert held is not None and not held.confirmed
    gpus = ",".join(str(g) for g in held.gpus)
    second = ext.binder.bind(PodRef("default", "p", "uid-p"), "n0")
    assert second.error == (
        f"a bind of pod {PodRef('default', 'p', 'uid-p')} to n0 (GPUs {gpus}) is in flight "
        "or awaiting the watch's confirmation; not deciding again")
    assert second.kind == "in-flight" and _counted(ext, "in-flight") == 1
    assert state.allocation("uid-p") == held
