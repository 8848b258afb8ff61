"""Extender latency: filter + prioritize over many nodes, and bind, warm and cold.

Scenarios (targets are for the warm filter + prioritize p99, as kube-scheduler sees it):

* 100 nodes × 8 GPUs (``dgx1-v100``) — target p99 ≤ 10 ms;
* 1,000 nodes × 16 GPUs (``mapa-cubemesh-16``; a 16-GPU topology built here if the catalog
  lacks it) — target p99 ≤ 50 ms.

The extender runs in its own process, as ``gputopo extender`` would (uvicorn on loopback, the
default settings — exact decisions, no time budget — and the same GC settings); this process
plays kube-scheduler over HTTP. Before measuring, the server fills its MemoryState
cluster to about 70 % of the GPUs by binding a seeded stream of pods (1–5 GPUs, ring / tree /
all-to-all, sensitive or not, ~10 % 0.25–0.5 GPU shares). Then:

* **warm** — a steady-state stream: every pod goes through ``/filter`` and ``/prioritize``
  (timed), the highest-scored node (ties by name), ``/bind`` (timed), and one running pod ends
  (a benchmark-only ``/_bench/delete`` route), so occupancy stays put. The stream starts
  right after the fill, which never called filter: the first pod of each of the ~27 request
  shapes meets every node state uncached, and those calls are in the warm figures;
* **cold** — the same calls right after every cache was emptied (decision, precheck and score
  caches, per-class score tables, subset tables and link matrices, parsed topologies, the
  workers' decision caches — ``/_bench/clear``): the first pod after a restart.

With a budget, decisions that miss it are answered provisionally (filter: pass on capacity,
prioritize: 0) and finished by the workers; each scenario reports how many node groups were
provisional. The 1,000-node case also runs with no budget (every decision exact before
answering). Bodies use ``nodeCacheCapable: true`` (node names); the 100-node case also runs with
full Node objects (``nodeCacheCapable: false``). Latencies are client-side round trips on a
machine that may be doing other things (the JSON records CPUs and load average).

**Pending pods (issue 24's lookahead).** With ``--pending N`` the next N pods of the stream
are pending while a pod is decided (the server's ``state.pending``, set before each pod's
filter, untimed), as kube-scheduler's queue would hold them, so the default policy weighs them;
``--compare-pending N`` runs every scenario twice in one invocation, with none and with N
pending, and reports the ratio of the filter + prioritize p99 (the machine is shared: compare
ratios within one run).

Run: ``.venv/bin/python -m benchmarks.bench_extender [--quick] [--policy NAME]
[--scenarios dgx1,cubemesh16] [--pending N | --compare-pending N] [--out FILE]``; prints a
table and writes ``benchmarks/results/extender.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import platform
import random
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "results" / "extender.json"
PATTERNS = ("ring", "tree", "all-to-all")
OCCUPANCY = 0.7
#: MiB per ``gputopo.io/vgpu-memory`` unit (the contract's, once it defines one).
MEMORY_UNIT_MIB: int = getattr(
    __import__("topology.contract").contract, "DEFAULT_VGPU_MEMORY_UNIT_MIB", 1
)


def cubemesh16() -> Any:
    """``mapa-cubemesh-16`` from the catalog, else two DGX-1 cube-meshes joined GPU i to i+8
    by one NVLink (a stand-in with the same size and degree)."""
    from topology import catalog
    from topology.model import GPU, PCIeLevel, Topology, deterministic_uuid

    if "mapa-cubemesh-16" in catalog.names():
        return catalog.get("mapa-cubemesh-16")
    from topology.catalog import DGX1_V100_NVLINKS

    nv: dict[tuple[int, int], int] = {}
    for (a, b), c in DGX1_V100_NVLINKS.items():
        nv[(a, b)] = c
        nv[(a + 8, b + 8)] = c
    for i in range(8):
        nv[(i, i + 8)] = 1
    gpus = [GPU(i, deterministic_uuid("cubemesh16", i), f"0000:{i:02x}:00.0",
                "Tesla V100-SXM2-16GB", 16160, i // 8, frozenset()) for i in range(16)]
    return Topology.build("cubemesh16", gpus, nv, PCIeLevel.SYS)


def machine(name: str) -> Any:
    from topology import catalog

    return cubemesh16() if name == "cubemesh16" else catalog.get(name)


@dataclass
class Scenario:
    name: str
    machine: str
    nodes: int
    target_ms: float
    node_objects: bool = False
    budget_ms: float | None = None  # None = the settings default


def pod(rng: random.Random, serial: int) -> dict[str, Any]:
    """A kube-scheduler-shaped pod of the benchmark's mix."""
    name = f"b-{serial:06d}"
    ann: dict[str, str] = {}
    if rng.random() < 0.1:
        share = rng.choice((25, 50))
        mem = share * 80 // MEMORY_UNIT_MIB or 1  # vgpu-memory counts units of the contract
        limits = {"gputopo.io/vgpu-core": str(share), "gputopo.io/vgpu-memory": str(mem)}
    else:
        k = rng.choices((1, 2, 3, 4, 5), weights=(25, 30, 15, 20, 10))[0]
        limits = {"nvidia.com/gpu": str(k)}
        if k > 1:
            ann = {"gputopo.io/pattern": rng.choice(PATTERNS),
                   "gputopo.io/bandwidth-sensitive": "true" if rng.random() < 0.75 else "false"}
    return {
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}",
                     "annotations": ann},
        "spec": {"containers": [{"name": "main", "image": "cuda",
                                 "resources": {"limits": limits, "requests": limits}}]},
        "status": {"phase": "Pending"},
    }


def gpus_of(p: dict[str, Any]) -> float:
    lim = p["spec"]["containers"][0]["resources"]["limits"]
    if "nvidia.com/gpu" in lim:
        return float(lim["nvidia.com/gpu"])
    return int(lim["gputopo.io/vgpu-core"]) / 100


# ------------------------------------------------------------------------------ server side
def _fill(ext: Any, state: Any, rng: random.Random) -> list[str]:
    """Bind seeded pods to random nodes with room until OCCUPANCY of the GPUs are used."""
    from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs

    names = state.node_names()
    total = sum(state.node_topology(n).size for n in names)
    used, running, misses, serial = 0.0, [], 0, 0
    while used < OCCUPANCY * total and misses < 200:
        serial += 1
        p = pod(rng, serial)
        ext._parse_pod(ExtenderArgs.model_validate({"Pod": p}).Pod)  # as filter would
        res = ext.bind(ExtenderBindingArgs(PodName=p["metadata"]["name"], PodNamespace="bench",
                                           PodUID=p["metadata"]["uid"], Node=rng.choice(names)))
        if res["Error"]:
            misses += 1
            continue
        misses = 0
        used += gpus_of(p)
        running.append(p["metadata"]["name"])
    return running


def _server(sc: dict[str, Any], policy: str, seed: int, conn: Any) -> None:
    """Child process: build and fill the cluster, then serve the extender on loopback."""
    import uvicorn
    from fastapi import APIRouter

    from gputopo_cli.demo import serve
    from scheduler_extender.app import create_app, tune_interpreter
    from scheduler_extender.settings import ExtenderSettings
    from scheduler_extender.state import MemoryState

    logging.getLogger("gputopo.extender").setLevel(logging.ERROR)
    topo = machine(sc["machine"])
    names = [f"{sc['name']}-{i:04d}" for i in range(sc["nodes"])]
    state = MemoryState(dict.fromkeys(names, topo))
    settings = ExtenderSettings(policy=policy, state="memory")
    if sc["budget_ms"] is not None:
        settings = settings.model_copy(update={"eval_budget_ms": sc["budget_ms"]})
    app = create_app(settings, state)
    rt = app.state.runtime
    t0 = time.perf_counter()
    running = _fill(rt.extender, state, random.Random(seed))
    fill_s = time.perf_counter() - t0

    bench = APIRouter()

    @bench.post("/_bench/delete")
    def delete(body: dict[str, str]) -> dict[str, bool]:
        return {"deleted": state.delete_pod("bench", body["name"])}

    @bench.post("/_bench/clear")
    def clear() -> dict[str, bool]:
        rt.extender.clear_caches()  # decisions, scores, policy memo, workers' caches
        return {"cleared": True}

    @bench.post("/_bench/pending")
    def pending(body: dict[str, Any]) -> dict[str, int]:
        state.pending.clear()
        for i, p in enumerate(body["pods"]):
            p["spec"]["schedulerName"] = state.pending.scheduler_name
            p["metadata"]["creationTimestamp"] = f"2024-01-01T00:00:{i:02d}Z"
            state.pending.observe(p)
        return {"pending": len(state.pending)}

    @bench.get("/_bench/stats")
    def stats() -> dict[str, float]:
        return {"provisional": rt.metrics.provisional._value.get()}

    app.include_router(bench)
    tune_interpreter(settings.gil_switch_interval_ms / 1000)
    del uvicorn  # serve() runs it
    with serve(app) as url:
        conn.send({"url": url, "running": running, "fill_seconds": fill_s})
        conn.recv()  # until the parent is done
    rt.extender.close()


# ------------------------------------------------------------------------------ client side
class LeanClient:
    """A keep-alive HTTP/1.1 client with TCP_NODELAY (``http.client``): about half a
    millisecond cheaper per call than httpx, closer to kube-scheduler's Go client, so the
    figures are mostly the extender's."""

    def __init__(self, url: str) -> None:
        import http.client
        import socket

        host, port = url.split("//", 1)[1].rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        self.conn.connect()
        assert self.conn.sock is not None
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, method: str, path: str, body: bytes | None = None) -> Any:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        self.conn.request(method, path, body=body, headers=headers)
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {data[:200]!r}")
        return json.loads(data)

    def close(self) -> None:
        self.conn.close()


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def summarize(ms: list[float]) -> dict[str, float]:
    return {"n": len(ms), "p50_ms": round(pct(ms, 50), 3), "p99_ms": round(pct(ms, 99), 3),
            "mean_ms": round(statistics.fmean(ms), 3) if ms else float("nan"),
            "max_ms": round(max(ms), 3) if ms else float("nan")}


def run(sc: Scenario, policy: str, stream: int, cold_samples: int, seed: int,
        pending: int = 0) -> dict[str, Any]:
    from gputopo_cli.demo import node_object
    from topology.serialization import dumps

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_server, args=(asdict(sc), policy, seed, child), daemon=False)
    proc.start()
    info = parent.recv()
    rng = random.Random(seed + 1)
    names = [f"{sc.name}-{i:04d}" for i in range(sc.nodes)]
    ann = dumps(machine(sc.machine))
    objects = [node_object(n, ann) for n in names] if sc.node_objects else None
    running: list[str] = list(info["running"])

    def body(p: dict[str, Any], feasible: list[str] | None = None) -> bytes:
        args: dict[str, Any]
        if objects is not None:
            keep = set(feasible) if feasible is not None else None
            items = [o for o in objects if keep is None or o["metadata"]["name"] in keep]
            args = {"Pod": p, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
        else:
            args = {"Pod": p, "Nodes": None, "NodeNames": feasible or names}
        return json.dumps(args).encode()

    warm: dict[str, list[float]] = {"filter": [], "prioritize": [], "filter+prioritize": [],
                                    "bind": []}
    cold: dict[str, list[float]] = {"filter": [], "prioritize": [], "filter+prioritize": []}
    unschedulable = 0
    serial = 10_000_000
    client = LeanClient(info["url"])
    try:

        def cycle(p: dict[str, Any], sink: dict[str, list[float]], do_bind: bool) -> bool:
            b = body(p)
            t = time.perf_counter()
            res = client.call("POST", "/filter", b)
            t_f = time.perf_counter() - t
            feasible = ([n["metadata"]["name"] for n in res["Nodes"]["items"]]
                        if objects is not None else res["NodeNames"])
            sink["filter"].append(t_f * 1e3)
            if not feasible:
                return False
            b = body(p, feasible)
            t = time.perf_counter()
            prios = client.call("POST", "/prioritize", b)
            t_p = time.perf_counter() - t
            sink["prioritize"].append(t_p * 1e3)
            sink["filter+prioritize"].append((t_f + t_p) * 1e3)
            if not do_bind:
                return True
            best = min(prios, key=lambda h: (-h["Score"], h["Host"]))["Host"]
            t = time.perf_counter()
            r = client.call("POST", "/bind", json.dumps({
                "PodName": p["metadata"]["name"], "PodNamespace": "bench",
                "PodUID": p["metadata"]["uid"], "Node": best}).encode())
            sink["bind"].append((time.perf_counter() - t) * 1e3)
            return bool(r["Error"] == "")

        def provisional() -> float:
            return float(client.call("GET", "/_bench/stats")["provisional"])

        # first call after start: nothing cached, no class tables
        client.call("POST", "/_bench/clear", b"{}")
        serial += 1
        t = time.perf_counter()
        cycle(pod(rng, serial), {k: [] for k in warm}, False)
        first_call_ms = (time.perf_counter() - t) * 1e3

        prov0 = provisional()
        future = random.Random(seed + 2)
        queue = [pod(future, serial + 1 + i) for i in range(stream + pending)]
        for i in range(stream):
            serial += 1
            p = queue[i]
            if pending:
                client.call("POST", "/_bench/pending", json.dumps(
                    {"pods": queue[i + 1:i + 1 + pending]}).encode())
            if cycle(p, warm, True):
                running.append(p["metadata"]["name"])
            else:
                unschedulable += 1
            if running:
                gone = running.pop(rng.randrange(len(running)))
                client.call("POST", "/_bench/delete", json.dumps({"name": gone}).encode())
        warm_prov = provisional() - prov0
        prov0 = provisional()
        for _ in range(cold_samples):
            serial += 1
            client.call("POST", "/_bench/clear", b"{}")
            cycle(pod(rng, serial), cold, False)
        cold_prov = provisional() - prov0
    finally:
        client.close()
    parent.send("done")
    proc.join(30)
    if proc.is_alive():
        proc.terminate()
    fp = warm["filter+prioritize"]
    return {
        "scenario": sc.name, "machine": sc.machine, "nodes": sc.nodes,
        "gpus_per_node": machine(sc.machine).size, "policy": policy,
        "body": "Nodes (full Node objects)" if objects is not None else "NodeNames",
        "eval_budget_ms": sc.budget_ms if sc.budget_ms is not None else "default",
        "pending_pods": pending,
        "fill_pods": len(info["running"]), "fill_seconds": round(info["fill_seconds"], 2),
        "stream_pods": stream, "unschedulable_in_stream": unschedulable,
        "provisional_groups": {"warm": int(warm_prov), "cold": int(cold_prov)},
        "warm": {k: summarize(v) for k, v in warm.items()},
        "cold": {k: summarize(v) for k, v in cold.items()},
        "first_call_after_start_ms": round(first_call_ms, 2),
        "target_p99_ms": sc.target_ms,
        "meets_target": pct(fp, 99) <= sc.target_ms,
    }


def main() -> None:
    from scheduler_extender.settings import ExtenderSettings
    from topology.policies.registry import DEFAULT_POLICY, policies

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter streams (CI smoke run)")
    ap.add_argument("--policy", default=None, help="default: gputopo (baseline if missing)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--scenarios", default=None,
                    help="comma-separated scenario names (default: all)")
    ap.add_argument("--pending", type=int, default=0,
                    help="pods of the stream pending while each is decided (lookahead)")
    ap.add_argument("--compare-pending", type=int, default=0, metavar="N",
                    help="run each scenario with 0 and with N pending pods")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    policy = args.policy or (DEFAULT_POLICY if DEFAULT_POLICY in policies() else "baseline")
    stream = 60 if args.quick else 300
    cold = 5 if args.quick else 20
    default_budget = ExtenderSettings.model_fields["eval_budget_ms"].default
    scenarios = [
        Scenario("dgx1", "dgx1-v100", 100, 10.0),
        Scenario("dgx1-objects", "dgx1-v100", 100, 10.0, node_objects=True),
        Scenario("cubemesh16", "cubemesh16", 1000, 50.0),
        Scenario("cubemesh16-budget20", "cubemesh16", 1000, 50.0, budget_ms=20.0),
    ]
    if args.scenarios:
        keep = set(args.scenarios.split(","))
        scenarios = [sc for sc in scenarios if sc.name in keep]
    counts = [0, args.compare_pending] if args.compare_pending else [args.pending]
    results = [run(sc, policy, stream, cold, args.seed, n) for sc in scenarios for n in counts]
    print(f"policy {policy}; latencies in ms (client round trip over loopback HTTP); "
          f"default budget {default_budget:g} ms")
    print(f"{'scenario':<17}{'nodes':>6}{'gpus':>5} {'body':<8}"
          f"{'warm f+p p50':>13}{'p99':>8}{'bind p50':>9}{'p99':>7}"
          f"{'cold f+p p50':>13}{'p99':>8}{'first':>8}{'budget':>8}{'prov w/c':>12}  target")
    for r in results:
        w, c = r["warm"], r["cold"]
        r["scenario"] += f"+{r['pending_pods']}p" if r["pending_pods"] else ""
        body = "objects" if r["body"].startswith("Nodes") else "names"
        ok = "ok" if r["meets_target"] else "MISSED"
        budget = default_budget if r["eval_budget_ms"] == "default" else r["eval_budget_ms"]
        prov = f"{r['provisional_groups']['warm']}/{r['provisional_groups']['cold']}"
        print(f"{r['scenario']:<17}{r['nodes']:>6}{r['gpus_per_node']:>5} {body:<8}"
              f"{w['filter+prioritize']['p50_ms']:>13.2f}{w['filter+prioritize']['p99_ms']:>8.2f}"
              f"{w['bind']['p50_ms']:>9.2f}{w['bind']['p99_ms']:>7.2f}"
              f"{c['filter+prioritize']['p50_ms']:>13.2f}{c['filter+prioritize']['p99_ms']:>8.2f}"
              f"{r['first_call_after_start_ms']:>8.1f}{budget:>8g}{prov:>12}"
              f"  p99<={r['target_p99_ms']:g} {ok}")
    ratios: dict[str, dict[str, float]] = {}
    if args.compare_pending:
        for a, b in zip(results[::2], results[1::2], strict=True):
            fa, fb = a["warm"]["filter+prioritize"], b["warm"]["filter+prioritize"]
            ratios[a["scenario"]] = {q: round(fb[f"{q}_ms"] / fa[f"{q}_ms"], 3)
                                     for q in ("p50", "p99")}
            print(f"{a['scenario']}: warm filter+prioritize with {args.compare_pending} "
                  f"pending / with none: p50 {ratios[a['scenario']]['p50']}, "
                  f"p99 {ratios[a['scenario']]['p99']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": "python -m benchmarks.bench_extender" + (" --quick" if args.quick else "")
        + (f" --scenarios {args.scenarios}" if args.scenarios else "")
        + (f" --compare-pending {args.compare_pending}" if args.compare_pending else "")
        + (f" --pending {args.pending}" if args.pending else ""),
        "ratio_pending_over_none": ratios,
        "benchmark": "extender", "policy": policy, "seed": args.seed, "quick": args.quick,
        "default_eval_budget_ms": default_budget,
        "python": platform.python_version(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
        "results": results,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
