"""Filter + prioritize over HTTP, gputopo against the trivial extender, without a cluster.

What kube-scheduler pays for the two calls it makes inside its serial scheduling cycle, one
pod at a time: the client round trip over loopback (keep-alive, TCP_NODELAY:
:class:`benchmarks.bench_extender.LeanClient`) and, for gputopo, the handlers' own time
from its ``gputopo_extender_request_seconds`` histogram
(:func:`benchmarks.bench_scheduler.extender_histograms`, prometheus-client's parser).

* **gputopo**: the extender app as :mod:`benchmarks.bench_extender` serves it (uvicorn with
  the extender's own server options, ``MemoryState``, 100 DGX-1 V100 nodes filled to 70 %
  with the same seeded pods), default settings;
* **trivial**: :func:`benchmarks.bench_scheduler.serve_trivial_extender` (every node passes,
  every score 0), the reference of ``benchmarks.bench_scheduler``.

Both get the same bodies (``nodeCacheCapable``: node names; pods of ``bench_extender``'s mix,
each with a ``resourceVersion`` as the API server gives them); pods are not bound, so every
call meets warm caches. Rounds alternate trivial, gputopo, … so a noisy host slows both.

Run: ``.venv/bin/python -m benchmarks.bench_verbs [--pods 500] [--rounds 4]``; prints one line
per round and writes ``benchmarks/results/verbs.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks import bench_extender as be
from benchmarks.bench_scheduler import (
    extender_histograms,
    histogram_delta,
    serve_trivial_extender,
)
from localcluster.controlplane import free_port

OUT = Path(__file__).parent / "results" / "verbs.json"
NODES = 100

def round_trips(url: str, pods: int, seed: int, gputopo: bool) -> dict[str, Any]:
    """``pods`` filter + prioritize pairs against ``url``: client p50 / mean per verb, ms;
    for gputopo also the handlers' mean, ms."""
    client = be.LeanClient(url)
    names = [f"dgx1-{i:04d}" for i in range(NODES)]
    rng = random.Random(seed)
    before = extender_histograms(url) if gputopo else {}
    times: dict[str, list[float]] = {"filter": [], "prioritize": []}
    try:
        for i in range(pods):
            pod = be.pod(rng, 20_000_000 + seed * pods + i)
            pod["metadata"]["resourceVersion"] = str(i + 1)
            body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()
            t = time.perf_counter()
            passed = client.call("POST", "/filter", body)["NodeNames"] or names
            times["filter"].append(time.perf_counter() - t)
            body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": passed}).encode()
            t = time.perf_counter()
            client.call("POST", "/prioritize", body)
            times["prioritize"].append(time.perf_counter() - t)
        after = extender_histograms(url) if gputopo else {}
    finally:
        client.close()
    out: dict[str, Any] = {}
    for verb, ts in times.items():
        row = {"p50_ms": round(statistics.median(ts) * 1e3, 3),
               "mean_ms": round(statistics.fmean(ts) * 1e3, 3)}
        if gputopo:
            seen = histogram_delta(before, after)[verb]
            row["handler_mean_ms"] = round(seen["sum"] / seen["count"] * 1e3, 3)
        out[verb] = row
    out["pair_p50_ms"] = round(statistics.median(
        [f + p for f, p in zip(times["filter"], times["prioritize"], strict=True)]) * 1e3, 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=500, help="pods per round")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per extender")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    trivial = ctx.Process(target=serve_trivial_extender, args=(port, None), daemon=True)
    trivial.start()
    parent, child = ctx.Pipe()
    scenario = be.Scenario("dgx1", "dgx1-v100", NODES, 10.0)
    server = ctx.Process(target=be._server, args=(asdict(scenario), "gputopo", 11, child))
    server.start()
    info = parent.recv()
    trivial_url = f"http://127.0.0.1:{port}"
    rounds: list[dict[str, Any]] = []
    try:
        round_trips(info["url"], 100, 99, True)  # warm-up: first pods of each shape
        round_trips(trivial_url, 100, 99, False)
        for r in range(args.rounds):
            t = round_trips(trivial_url, args.pods, r, False)
            g = round_trips(info["url"], args.pods, r, True)
            rounds.append({"trivial": t, "gputopo": g})
            handlers = (g["filter"]["handler_mean_ms"], g["prioritize"]["handler_mean_ms"])
            print(f"round {r + 1}: filter + prioritize p50 trivial {t['pair_p50_ms']:.2f} ms, "
                  f"gputopo {g['pair_p50_ms']:.2f} ms (handlers {handlers[0]:.2f} + "
                  f"{handlers[1]:.2f} ms)")
    finally:
        parent.send("done")
        server.join(30)
        trivial.terminate()
    med = {k: round(statistics.median(r[k]["pair_p50_ms"] for r in rounds), 3)
           for k in ("trivial", "gputopo")}
    print(f"median of rounds: trivial {med['trivial']:.2f} ms, gputopo {med['gputopo']:.2f} ms "
          f"per pod")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "verbs", "nodes": NODES, "machine": "dgx1-v100", "pods_per_round":
        args.pods, "cpus": os.cpu_count(), "load_average": [round(x, 2) for x in
                                                            os.getloadavg()],
        "median_pair_p50_ms": med, "rounds": rounds,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
