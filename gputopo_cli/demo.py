"""``gputopo demo``: a real extender on loopback, a seeded stream of GPU pods, and the
difference topology awareness makes.

The demo starts the extender (memory state, uvicorn in a background thread) and plays
kube-scheduler: for every pod it POSTs ``/filter``, ``/prioritize`` and ``/bind`` with bodies
shaped like kube-scheduler v1.28's (the captured fixtures' Pod and Node shapes; even pods use
``nodeCacheCapable: true`` — ``NodeNames`` — odd pods send full Node objects), picks the node
with the highest score (ties: by name, as a deterministic stand-in for kube-scheduler's random
tie-break), and binds. Pods finish after a seeded lifetime, so GPUs are recycled; a pod that
fits nowhere waits and is retried after the next departure.

The same stream is then played against the stack a cluster runs without gputopo: the
default kube-scheduler's node choice (LeastAllocated: the feasible node with the most free
GPUs) with NVIDIA's device plugin picking the GPUs (``nvidia-best-effort``: go-gpuallocator's
best-effort preferred allocation), and with lowest free indices (``baseline``: a device plugin
without a preferred allocation). Every placement is judged with one model (gputopo-v1; MAPA
Eq. 2 alongside, clamped at 0 where it predicts less — it was fitted on 2-5-GPU NCCL rings and
goes negative outside them), and a bandwidth-sensitive pod runs longer when its EffBW is below
the best an idle node offers (the simulator's run-time model, MAPA Fig. 16:
:func:`simulator.runtime.bandwidth_factor`), so placement shows in the makespan and the job
completion times too. The summary puts the worst sensitive job first: it is what a user of a
shared cluster notices.
"""

from __future__ import annotations

import copy
import logging
import math
import random
import socket
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import uvicorn
from fastapi import FastAPI

from scheduler_extender.app import create_app
from scheduler_extender.settings import ExtenderSettings
from scheduler_extender.state import MemoryState
from simulator.runtime import bandwidth_factor
from topology import contract as _contract
from topology.contract import (
    ANN_BW_SENSITIVE,
    ANN_PATTERN,
    ANN_TOPOLOGY,
    RESOURCE_GPU,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
)
from topology.patterns import parse_pattern
from topology.policies.base import Request
from topology.policies.common import MODEL_GPUTOPO, MODEL_MAPA, effective_bandwidth, mapped_edges
from topology.policies.evaluate import Evaluator
from topology.policies.registry import DEFAULT_POLICY, policies
from topology.serialization import dumps

BASELINE = "baseline"
#: The GPU choice of NVIDIA's device plugin (go-gpuallocator's best-effort preferred
#: allocation), played with kube-scheduler's own node choice: the stack without gputopo.
DEFAULT_STACK = "nvidia-best-effort"
#: How the demo's kube-scheduler picks among the nodes that pass filter: ``extender`` = the
#: highest ``/prioritize`` score (gputopo in the scheduler), ``least-allocated`` = the node
#: with the most free GPUs (kube-scheduler without an extender; the simulator's rule).
NODE_CHOICES = ("extender", "least-allocated")
#: Share of a sensitive pod's run time spent communicating (the simulator's default for a
#: sensitive job of no known network, docs/simulator.md); insensitive pods do not slow down.
SENSITIVE_COMM_SHARE = 0.5
#: MiB per ``gputopo.io/vgpu-memory`` unit (the contract's, once it defines one).
_MEMORY_UNIT_MIB: int = getattr(_contract, "DEFAULT_VGPU_MEMORY_UNIT_MIB", 1)
PATTERNS = ("ring", "all-to-all", "tree")

# --- kube-scheduler-shaped objects (trimmed copies of the v1.28.7 fixtures) ------------------
_POD_TEMPLATE: dict[str, Any] = {
    "metadata": {
        "name": "", "namespace": "default", "uid": "", "resourceVersion": "1",
        "creationTimestamp": "2026-11-22T05:00:03Z", "labels": {"app": "gputopo-demo"},
        "annotations": {},
    },
    "spec": {
        "containers": [{
            "name": "main", "image": "registry.example/cuda-test:1.0",
            "command": ["sleep", "infinity"], "resources": {"limits": {}, "requests": {}},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
        }],
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
        "serviceAccount": "default", "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
             "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
             "effect": "NoExecute", "tolerationSeconds": 300},
        ],
        "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
    },
    "status": {"phase": "Pending", "qosClass": "Burstable"},
}  # fmt: skip

_NODE_TEMPLATE: dict[str, Any] = {
    "metadata": {
        "name": "", "uid": "", "resourceVersion": "1",
        "creationTimestamp": "2026-11-22T05:00:03Z",
        "labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"},
        "annotations": {},
    },
    "spec": {},
    "status": {
        "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
        "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "kubelet is posting ready status"}],
        "nodeInfo": {"kubeletVersion": "v1.28.7", "operatingSystem": "linux",
                     "architecture": "amd64"},
    },
}  # fmt: skip


@dataclass(frozen=True)
class DemoPod:
    """One pod of the stream.

    Attributes:
        name: pod name (``job-007``).
        uid: a deterministic UID.
        gpus: whole GPUs (0 for a share).
        share: fraction of one GPU for a share (0.25 / 0.5), else 0.
        pattern: communication pattern name (``-`` for one GPU or a share).
        sensitive: bandwidth-sensitive annotation.
        lifetime: arrivals it stays for once placed.
    """

    name: str
    uid: str
    gpus: int
    share: float
    pattern: str
    sensitive: bool
    lifetime: int

    @property
    def label(self) -> str:
        """``4`` or ``0.25`` — what the pod asks for."""
        return f"{self.share:g}" if self.share else str(self.gpus)


def make_stream(count: int, seed: int) -> list[DemoPod]:
    """A seeded mix: 1–5 GPUs (ring / all-to-all / tree, mostly sensitive) and ~15 % shares
    of 0.25–0.5 GPU; lifetimes 6–24 arrivals."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        name = f"job-{i + 1:03d}"
        uid = f"00000000-0000-4000-8000-{seed % 10_000:04d}{i:08d}"
        lifetime = rng.randint(6, 24)
        if rng.random() < 0.15:
            out.append(DemoPod(name, uid, 0, rng.choice((0.25, 0.5)), "-", False, lifetime))
            continue
        gpus = rng.choices((1, 2, 3, 4, 5), weights=(25, 30, 15, 20, 10))[0]
        if gpus == 1:
            out.append(DemoPod(name, uid, 1, 0.0, "-", False, lifetime))
            continue
        pattern = rng.choice(PATTERNS)
        sensitive = rng.random() < 0.75
        out.append(DemoPod(name, uid, gpus, 0.0, pattern, sensitive, lifetime))
    return out


def pod_object(p: DemoPod) -> dict[str, Any]:
    """The ``v1.Pod`` kube-scheduler would send for ``p``."""
    pod = copy.deepcopy(_POD_TEMPLATE)
    pod["metadata"]["name"] = p.name
    pod["metadata"]["uid"] = p.uid
    res = pod["spec"]["containers"][0]["resources"]
    res["requests"] = {"cpu": "1", "memory": "1Gi"}
    if p.share:
        core = str(round(p.share * 100))
        mem = str(round(p.share * 16384 / _MEMORY_UNIT_MIB))  # vgpu-memory counts units
        res["limits"] = {RESOURCE_VGPU_CORE: core, RESOURCE_VGPU_MEMORY: mem}
        res["requests"].update(res["limits"])
    else:
        res["limits"] = {RESOURCE_GPU: str(p.gpus)}
        res["requests"][RESOURCE_GPU] = str(p.gpus)
        if p.gpus > 1:
            pod["metadata"]["annotations"] = {
                ANN_PATTERN: p.pattern, ANN_BW_SENSITIVE: "true" if p.sensitive else "false",
            }  # fmt: skip
    return pod


def node_object(name: str, topology_json: str) -> dict[str, Any]:
    """A ``v1.Node`` as kube-scheduler sends it, with the topology annotation."""
    node = copy.deepcopy(_NODE_TEMPLATE)
    node["metadata"]["name"] = name
    node["metadata"]["uid"] = f"node-{name}"
    node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    node["metadata"]["annotations"] = {ANN_TOPOLOGY: topology_json}
    return node


# --- running the extender on loopback ---------------------------------------------------------
@contextmanager
def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run ``app`` with uvicorn in a background thread; yields its base URL.

    Raises:
        OSError: the port cannot be bound.
        RuntimeError: the server did not start within 10 s.
    """
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets whose proto says
    # TCP, and accepted sockets inherit it; with proto 0 every reply waits ~40 ms (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    actual = sock.getsockname()[1]
    from scheduler_extender.auth import uvicorn_options  # the extender's own server options

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            **uvicorn_options(mode="none", tls_cert=None, tls_key=None,
                                              client_ca=None))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name="gputopo-demo-extender")
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("the extender did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{actual}"
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()


def http_client(base_url: str) -> httpx.Client:
    """An httpx client with TCP_NODELAY: without it, Nagle's algorithm on the client plus
    delayed ACKs on the server add ~40 ms to every POST whose headers and body go out in two
    writes."""
    transport = httpx.HTTPTransport(
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    )
    return httpx.Client(base_url=base_url, timeout=30, transport=transport)


# --- playing kube-scheduler -------------------------------------------------------------------
@dataclass
class Placement:
    """Where a pod went."""

    pod: DemoPod
    tick: int
    node: str
    gpus: tuple[int, ...]
    effbw_gputopo: float
    effbw_mapa: float
    score: int | None
    waited: int = 0
    best_effbw: float = 0.0
    runs_for: int = 0

    @property
    def sensitive(self) -> bool:
        """A bandwidth-sensitive pod with more than one GPU (the jobs whose EffBW counts)."""
        return self.pod.sensitive and self.pod.gpus >= 2

    @property
    def finish(self) -> int:
        """The tick it finishes: placed at :attr:`tick`, runs :attr:`runs_for` ticks."""
        return self.tick + self.runs_for

    @property
    def jct(self) -> int:
        """Job completion time, ticks: from arrival to finish (waiting included)."""
        return self.waited + self.runs_for


@dataclass
class RunResult:
    """One policy's run over the stream.

    Attributes:
        policy: the extender's policy (who picked the GPUs).
        node_choice: how the node was picked (:data:`NODE_CHOICES`).
        label: the name the summary gives the run.
    """

    policy: str
    node_choice: str = "extender"
    label: str = ""
    placements: list[Placement] = field(default_factory=list)
    never_placed: list[DemoPod] = field(default_factory=list)
    total_wait: int = 0

    @property
    def makespan(self) -> int:
        """Ticks from the first arrival (tick 1) to the last finish (0 when nothing ran)."""
        return max((pl.finish for pl in self.placements), default=1) - 1

    @property
    def mean_jct(self) -> float:
        """Mean job completion time (arrival to finish), ticks."""
        return float(np.mean([pl.jct for pl in self.placements])) if self.placements else 0.0


class _Scheduler:
    """A minimal kube-scheduler: filter → prioritize → highest score (ties by name) → bind."""

    def __init__(self, client: httpx.Client, state: MemoryState) -> None:
        self.client = client
        self.state = state
        self.names = state.node_names()
        self.node_objects = [
            node_object(n, dumps(t)) for n, t in ((n, state.node_topology(n)) for n in self.names)
            if not isinstance(t, Exception)
        ]  # fmt: skip
        self.calls = 0

    def schedule(self, p: DemoPod, by_objects: bool,
                 node_choice: str = "extender") -> tuple[str, int | None] | str:
        """Bind ``p``; returns ``(node, score)`` or the reason it fits nowhere. With
        ``least-allocated`` the node is the feasible one with the most free GPUs (ties by
        name) and prioritize is not called (score None): kube-scheduler without gputopo."""
        pod = pod_object(p)
        if by_objects:
            args: dict[str, Any] = {"Pod": pod, "Nodes": {"metadata": {}, "items":
                                    self.node_objects}, "NodeNames": None}
        else:
            args = {"Pod": pod, "Nodes": None, "NodeNames": self.names}
        r = self.client.post("/filter", json=args)
        self.calls += 1
        r.raise_for_status()
        res = r.json()
        if res["Error"]:
            return str(res["Error"])
        if by_objects:
            feasible = [n["metadata"]["name"] for n in res["Nodes"]["items"]]
        else:
            feasible = list(res["NodeNames"])
        if not feasible:
            reasons = {**res["FailedNodes"], **res["FailedAndUnresolvableNodes"]}
            if not reasons:
                return "no node fits"
            first = min(reasons)
            return f"no node fits (e.g. {first}: {reasons[first]})"
        score: int | None = None
        if node_choice == "least-allocated":
            node = min(feasible, key=lambda n: (-self._free(n), n))
        else:
            if by_objects:
                keep = set(feasible)
                args["Nodes"] = {"metadata": {}, "items": [
                    n for n in self.node_objects if n["metadata"]["name"] in keep]}
            else:
                args["NodeNames"] = feasible
            r = self.client.post("/prioritize", json=args)
            self.calls += 1
            r.raise_for_status()
            scores = {h["Host"]: h["Score"] for h in r.json()}
            node = min(feasible, key=lambda n: (-scores.get(n, 0), n))
            score = scores.get(node, 0)
        r = self.client.post("/bind", json={
            "PodName": p.name, "PodNamespace": "default", "PodUID": p.uid, "Node": node})
        self.calls += 1
        r.raise_for_status()
        if r.json()["Error"]:
            return str(r.json()["Error"])
        return node, score

    def _free(self, node: str) -> int:
        """Free whole GPUs of ``node`` (what LeastAllocated ranks by)."""
        topo = self.state.node_topology(node)
        if isinstance(topo, Exception):
            return 0
        return len(self.state.node_state(node).free_gpus(topo))


def _effbw(
    state: MemoryState, p: DemoPod, node: str, reference: str, evaluator: Evaluator
) -> tuple[tuple[int, ...], float, float, float]:
    """GPUs, EffBW (gputopo-v1, MAPA Eq. 2) of the bound pod, and the gputopo-v1 EffBW of
    ``reference``'s choice on an idle node of the class (the best achievable)."""
    rec = state.bound_pod("default", p.name)
    topo = state.node_topology(node)
    if rec is None or rec.decision is None or isinstance(topo, Exception):
        return (), 0.0, 0.0, 0.0
    d = rec.decision
    if p.gpus < 2:
        return d.gpus, 0.0, 0.0, 0.0
    pattern = parse_pattern(p.pattern, p.gpus)
    edges = mapped_edges(pattern, d.mapping)
    best_d = evaluator.ideal(reference, topo, Request(count=p.gpus, pattern=pattern,
                                                      bandwidth_sensitive=p.sensitive))
    best = effective_bandwidth(topo, mapped_edges(pattern, best_d.mapping), MODEL_GPUTOPO)
    return (
        d.gpus,
        effective_bandwidth(topo, edges, MODEL_GPUTOPO),
        effective_bandwidth(topo, edges, MODEL_MAPA),
        best,
    )


def run_stream(
    policy: str, nodes: str, stream: list[DemoPod], *, port: int = 0,
    echo: Callable[[str], None] | None = None, header: list[str] | None = None,
    reference: str | None = None, node_choice: str = "extender", label: str = "",
) -> RunResult:
    """Play ``stream`` through a fresh extender running ``policy`` on ``nodes``.

    A pod holds its GPUs for its lifetime stretched by its placement
    (:func:`simulator.runtime.bandwidth_factor` with :data:`SENSITIVE_COMM_SHARE` for a
    sensitive multi-GPU pod, against the best EffBW an idle node offers), rounded up to
    whole ticks.

    Args:
        policy: the extender's default policy.
        nodes: memory nodes spec (``dgx1-v100:4``).
        stream: the pods, one arrival per tick.
        port: loopback port (0 = any free one).
        echo: receives one line per event (None = silent).
        header: lines printed once the extender is up.
        reference: policy whose idle-node choice is "the best achievable" (default: the
            default policy when registered, else ``policy``).
        node_choice: how the demo's kube-scheduler picks a node (:data:`NODE_CHOICES`).
        label: the run's name in the summary (default: the policy).

    Raises:
        ValueError: an unknown ``node_choice``.
    """
    if node_choice not in NODE_CHOICES:
        raise ValueError(f"unknown node choice {node_choice!r}; use {' or '.join(NODE_CHOICES)}")
    if reference is None:
        reference = DEFAULT_POLICY if DEFAULT_POLICY in policies() else policy
    state = MemoryState.from_spec(nodes)
    settings = ExtenderSettings(policy=policy, state="memory", nodes=nodes, eval_budget_ms=0)
    app = create_app(settings, state)  # exact decisions: the demo is about placement quality
    result = RunResult(policy, node_choice, label or policy)
    evaluator = Evaluator()  # the reference decisions (the extender keeps its own)
    say = echo or (lambda _line: None)
    running: list[tuple[int, DemoPod, str, tuple[int, ...]]] = []  # (end tick, pod, node, gpus)
    pending: list[tuple[int, DemoPod]] = []
    with serve(app, port=port) as url, http_client(url) as client:
        sched = _Scheduler(client, state)
        say(f"extender ({policy}) listening on {url}"
            + ("" if node_choice == "extender" else f"; nodes chosen {node_choice}"))
        if header:
            for line in header:
                say(line)
        tick = 0
        queue = list(stream)
        while queue or pending:
            tick += 1
            for item in [r for r in running if r[0] <= tick]:
                running.remove(item)
                _, p, node, gpus = item
                state.delete_pod("default", p.name)
                say(f"{tick:>4}  {p.name} finished; frees {node} GPU {_fmt_gpus(gpus)}")
            arrivals = [queue.pop(0)] if queue else []
            if not queue and not arrivals and not running:
                break  # nothing will ever free up: the rest waits forever
            still: list[tuple[int, DemoPod]] = []
            for arrived, p in pending + [(tick, a) for a in arrivals]:
                got = sched.schedule(p, by_objects=(int(p.name[-3:]) % 2 == 1),
                                     node_choice=node_choice)
                if isinstance(got, str):
                    if arrived == tick:
                        say(f"{tick:>4}  {p.name:<8} {p.label:>4}  waits: {got}")
                    still.append((arrived, p))
                    continue
                node, score = got
                gpus, eff, eff_mapa, best = _effbw(state, p, node, reference, evaluator)
                pl = Placement(p, tick, node, gpus, eff, eff_mapa, score, tick - arrived, best)
                comm = SENSITIVE_COMM_SHARE if pl.sensitive else 0.0
                pl.runs_for = math.ceil(p.lifetime * bandwidth_factor(eff, best, comm) - 1e-9)
                result.placements.append(pl)
                result.total_wait += tick - arrived
                running.append((pl.finish, p, node, gpus))
                say(_placement_line(pl))
            pending = still
        result.never_placed = [p for _, p in pending]
        say(f"      ({sched.calls} HTTP calls to the extender)")
    return result


def _fmt_gpus(gpus: tuple[int, ...]) -> str:
    return ",".join(str(g) for g in gpus) or "-"


def _placement_line(pl: Placement) -> str:
    p = pl.pod
    sens = "yes" if p.sensitive else "no"
    eff = f"{pl.effbw_gputopo:6.1f}" if p.gpus >= 2 else "     -"
    waited = f"  (waited {pl.waited})" if pl.waited else ""
    score = "  " if pl.score is None else f"{pl.score:>2}"
    slower = f", runs {pl.runs_for}/{p.lifetime}" if pl.runs_for > p.lifetime else ""
    return (
        f"{pl.tick:>4}  {p.name:<8} {p.label:>4}  {p.pattern:<10} {sens:<4} -> "
        f"{pl.node:<16} GPU {_fmt_gpus(pl.gpus):<10} score {score}  EffBW {eff}{waited}"
        f"{slower}"
    )


def _stats(values: list[float]) -> tuple[float, float, float]:
    """(min, p25, median) of ``values``; NaN for none."""
    if not values:
        return float("nan"), float("nan"), float("nan")
    a = np.array(values)
    return float(a.min()), float(np.percentile(a, 25)), float(np.median(a))


def _cell(value: float, width: int = 14) -> str:
    return f"{'-':>{width}}" if math.isnan(value) else f"{value:>{width}.1f}"


def summary(runs: list[RunResult]) -> list[str]:
    """The comparison table as lines: the worst sensitive job first, then the quartile and
    the median of the sensitive multi-GPU jobs' EffBW (gputopo-v1), how many got the best an
    idle node offers, MAPA Eq. 2's view (clamped at 0, with a note when it had to be),
    makespan and mean JCT (ticks), waits."""
    sel = {id(run): [pl for pl in run.placements if pl.sensitive] for run in runs}
    head = f"  {'':<34}" + "".join(f"{run.label:>14}" for run in runs)
    lines = [
        "",
        "Bandwidth-sensitive multi-GPU jobs (predicted effective bandwidth, GB/s, gputopo-v1 "
        "for every run), worst job first:",
        "",
        head,
    ]
    stats = {id(run): _stats([pl.effbw_gputopo for pl in sel[id(run)]]) for run in runs}
    for row, k in (("worst sensitive job", 0), ("25th percentile", 1), ("median", 2)):
        lines.append(f"  {row:<34}" + "".join(_cell(stats[id(run)][k]) for run in runs))
    lines.append(f"  {'at the best an idle node offers':<34}" + "".join(
        f"{sum(1 for pl in sel[id(run)] if pl.effbw_gputopo >= pl.best_effbw - 1e-6):>9}"
        f"/{len(sel[id(run)]):<4}" for run in runs))
    eq2 = {id(run): _stats([pl.effbw_mapa for pl in sel[id(run)]]) for run in runs}
    clamped = any(v[0] < 0 for v in eq2.values())
    lines.append(f"  {'MAPA Eq. 2: worst' + (' (*)' if clamped else ''):<34}" + "".join(
        _cell(v[0] if math.isnan(v[0]) else max(0.0, v[0])) for v in eq2.values()))
    lines.append(f"  {'MAPA Eq. 2: median':<34}" + "".join(
        _cell(v[2] if math.isnan(v[2]) else max(0.0, v[2])) for v in eq2.values()))
    lines += [
        "",
        "Every job (ticks; a sensitive job runs longer when its EffBW is below the best):",
        "",
        head,
        f"  {'makespan':<34}" + "".join(f"{run.makespan:>14d}" for run in runs),
        f"  {'mean job completion time':<34}" + "".join(_cell(run.mean_jct) for run in runs),
        f"  {'ticks spent waiting (all pods)':<34}" + "".join(
            f"{run.total_wait:>14d}" for run in runs),
    ]
    never = [f"{run.label}: {len(run.never_placed)}" for run in runs if run.never_placed]
    if never:
        lines.append(f"  never placed: {', '.join(never)}")
    notes = [f"{run.label}: {_describe(run)}." for run in runs]
    if clamped:
        below = [pl for run in runs for pl in sel[id(run)] if pl.effbw_mapa < 0]
        kinds = sorted({f"{pl.pod.gpus}-GPU {pl.pod.pattern}" for pl in below})
        notes.append(
            f"(*) MAPA Eq. 2 predicts less than nothing for {len(below)} of these "
            f"{sum(len(v) for v in sel.values())} placements ({', '.join(kinds)}): it was "
            "fitted on 2-5-GPU NCCL runs of one DGX-1 V100 and goes below zero outside them "
            "(MAPA §3.4.3), so those count as 0; gputopo-v1 is the judge.")
    lines.append("")
    for note in notes:
        lines += textwrap.wrap(note, 98, initial_indent="  ", subsequent_indent="    ")
    return lines


def _describe(run: RunResult) -> str:
    if run.policy == DEFAULT_STACK and run.node_choice == "least-allocated":
        return ("kube-scheduler picks the node (LeastAllocated), NVIDIA's device plugin "
                "the GPUs (best-effort preferred allocation)")
    if run.policy == BASELINE:
        return "lowest free GPU indices (a device plugin with no preferred allocation)"
    return f"gputopo's extender picks the GPUs (policy {run.policy}) and scores the nodes"


def headline(runs: list[RunResult]) -> str | None:
    """One sentence: the first run against the default stack's run (None without one)."""
    mine = runs[0]
    other = next((r for r in runs[1:] if r.policy == DEFAULT_STACK), None)
    if other is None:
        return None
    a = [pl.effbw_gputopo for pl in mine.placements if pl.sensitive]
    b = [pl.effbw_gputopo for pl in other.placements if pl.sensitive]
    parts = []
    if a and b and min(b) > 0:
        parts.append(f"its worst sensitive job gets {min(a) / min(b):.2f}x the bandwidth "
                     f"({min(a):.1f} vs {min(b):.1f} GB/s)")
    if other.makespan:
        parts.append(f"the stream ends in {mine.makespan / other.makespan:.2f}x the time")
    if other.mean_jct:
        parts.append(f"mean job completion time is {mine.mean_jct / other.mean_jct:.2f}x")
    if not parts:
        return None
    return f"{mine.label} against {other.label}: " + "; ".join(parts) + "."


def run_demo(
    nodes: str = "dgx1-v100:4", pods: int = 40, seed: int = 7, port: int = 0,
    echo: Callable[[str], None] = print,
) -> list[RunResult]:
    """The whole demo: the default policy with a printed trace, then the default stack
    (kube-scheduler's LeastAllocated + ``nvidia-best-effort``) and ``baseline`` quietly, then
    the summary, worst job first. Returns the runs."""
    logging.getLogger("gputopo.extender").setLevel(logging.ERROR)
    main_policy = DEFAULT_POLICY if DEFAULT_POLICY in policies() else BASELINE
    stream = make_stream(pods, seed)
    echo(f"gputopo demo: {pods} pods (seed {seed}) on {nodes}, scheduled through a real "
         f"extender over HTTP")
    echo("Each pod: POST /filter -> /prioritize -> pick the highest score -> /bind.")
    header = [
        "",
        "tick  pod      GPUs  pattern    sens    node             GPUs chosen     "
        "score     EffBW (GB/s, gputopo-v1)",
    ]
    runs = [run_stream(main_policy, nodes, stream, port=port, echo=echo, header=header,
                       reference=main_policy, label=main_policy)]
    others = [(DEFAULT_STACK, "least-allocated", "default stack"),
              (BASELINE, "least-allocated", "lowest index")]
    for policy, choice, label in others:
        if policy == main_policy or policy not in policies():
            continue
        echo("")
        echo(f"Replaying the same stream with {label} ({policy}, nodes {choice}) ...")
        runs.append(run_stream(policy, nodes, stream, echo=None, reference=main_policy,
                               node_choice=choice, label=label))
    for line in summary(runs):
        echo(line)
    closing = headline(runs)
    if closing:
        echo("")
        for part in textwrap.wrap(closing, 100):
            echo(part)
    return runs
