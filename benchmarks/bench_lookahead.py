"""What the lookahead costs filter + prioritize, in CPU time (issue 24: p99 within 1.2×).

``bench_extender --compare-pending N`` measures the same over loopback HTTP, but on a shared
2-core machine its wall-clock p99 swings by 2× between identical runs. This benchmark runs the
extender in-process (no HTTP) and times each pod's filter + prioritize with the thread's CPU
clock (``time.thread_time``), which other processes' load does not inflate, on the same stream
twice: with no pod pending and with the stream's next N pods pending (what kube-scheduler's
queue would hold), the cluster first filled to 70 % as ``bench_extender`` does; each pod is
bound to the best-scored node and one running pod ends, so occupancy stays put. The first
``--warmup`` pods are not timed (first-of-shape tables). Each stream runs in a fresh process
(a second stream in one process ran with the first one's heap and caches). ``--runs N``
repeats it and records every run; odd runs time the stream with pending pods first.

The interpreter is set up as the served extender's (``--interpreter extender``, the default
since session 5): after the fill, :func:`scheduler_extender.app.tune_interpreter` — what
``gputopo extender`` calls before serving and ``bench_extender``'s server after its fill
(garbage collector frozen at start-up, young generation collected every 50 000 net
allocations, not 700). ``--interpreter python`` keeps CPython's defaults, as every run
before session 5 did: there the collector's generation-1 passes (~3 ms) land on ~1 % of
pods, so they set the p99 of a stream that allocates more. Each stream also reports the
collector's CPU time inside the timed calls (``gc_ms``, from ``gc.callbacks``) and the
machine's load average when it ended.

``--mode interleaved`` (session 6) runs both streams in one fresh process instead, pod by
pod, alternating which goes first (:func:`interleaved`): on the shared 2-core machine the CPU's
speed changes between two isolated processes ten seconds apart (the same stream's p50 moved
0.66-1.54 ms), which lands on one stream's p99 only; interleaved, both streams see the same
machine, and each pod's excess with pending pods is recorded too (``excess_ms``). The
isolated mode stays the default and the command of record.

Run: ``.venv/bin/python -m benchmarks.bench_lookahead [--pods 300] [--pending 8] [--runs 1]
[--interpreter extender|python] [--mode isolated|interleaved]``; writes
``benchmarks/results/lookahead-cpu.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import multiprocessing
import os
import platform
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.bench_extender import _fill, machine, pct, pod

OUT = Path(__file__).parent / "results" / "lookahead-cpu.json"


class _Stream:
    """One extender (in-process, memory state) and the benchmark's pod stream with
    ``pending`` pods pending: the cluster filled to 70 % when made, the stream's pods drawn
    by :meth:`start` (after the interpreter is set up), one pod timed per :meth:`step`."""

    def __init__(self, name: str, nodes: int, pods: int, pending: int, warmup: int,
                 seed: int, policy: str) -> None:
        from scheduler_extender.app import create_app
        from scheduler_extender.settings import ExtenderSettings
        from scheduler_extender.state import MemoryState

        logging.getLogger("gputopo.extender").setLevel(logging.ERROR)
        topo = machine(name)
        self.names = [f"n-{i:04d}" for i in range(nodes)]
        self.state = MemoryState(dict.fromkeys(self.names, topo))
        self.settings = ExtenderSettings(state="memory", policy=policy)
        self.ext = create_app(self.settings, self.state).state.runtime.extender
        self.running = _fill(self.ext, self.state, random.Random(seed))
        self.pods, self.pending, self.warmup, self.seed = pods, pending, warmup, seed
        self.cpu: list[float] = []  # CPU ms per timed pod
        self.gc: list[float] = []  # of which the collector's

    def start(self) -> None:
        """Draw the stream's pods (the same for every ``pending``)."""
        self.rng = random.Random(self.seed + 1)
        future = random.Random(self.seed + 2)
        self.queue = [pod(future, 10_000_000 + i) for i in range(self.pods + self.pending)]

    def step(self, i: int, collecting: list[float]) -> None:
        """Pod ``i``: :meth:`prepare`, :meth:`timed`, :meth:`finish`."""
        self.prepare(i)
        self.timed(i, collecting)
        self.finish(i)

    def prepare(self, i: int) -> None:
        """The next ``pending`` pods become the pending ones (untimed: the watch's work)."""
        from scheduler_extender.schemas import ExtenderArgs

        state, queue = self.state, self.queue
        state.pending.clear()
        for j, q in enumerate(queue[i + 1:i + 1 + self.pending]):
            q["spec"]["schedulerName"] = state.pending.scheduler_name
            q["metadata"]["creationTimestamp"] = f"2024-01-01T00:00:{j:02d}Z"
            state.pending.observe(q)
        self.args = ExtenderArgs.model_validate({"Pod": queue[i], "NodeNames": self.names})

    def timed(self, i: int, collecting: list[float]) -> None:
        """Filter + prioritize pod ``i`` (timed from ``warmup`` on; ``collecting[0]``: the
        collector's CPU seconds so far)."""
        from scheduler_extender.schemas import ExtenderArgs

        ext, p = self.ext, self.queue[i]
        collected = collecting[0]
        t = time.thread_time()
        feasible = ext.filter(self.args)["NodeNames"] or []
        scores = ext.prioritize(ExtenderArgs.model_validate(
            {"Pod": p, "NodeNames": feasible})) if feasible else []
        took = (time.thread_time() - t) * 1e3
        if i >= self.warmup:
            self.cpu.append(took)
            self.gc.append((collecting[0] - collected) * 1e3)
        self.scores = scores

    def finish(self, i: int) -> None:
        """Bind pod ``i`` to the best-scored node and end one running pod (untimed)."""
        from scheduler_extender.schemas import ExtenderBindingArgs

        p, scores = self.queue[i], self.scores
        if scores:
            best = min(scores, key=lambda h: (-h["Score"], h["Host"]))["Host"]
            res = self.ext.bind(ExtenderBindingArgs(PodName=p["metadata"]["name"],
                                                    PodNamespace="bench",
                                                    PodUID=p["metadata"]["uid"], Node=best))
            if not res["Error"]:
                self.running.append(p["metadata"]["name"])
        if self.running:
            self.state.delete_pod("bench",
                                  self.running.pop(self.rng.randrange(len(self.running))))

    def summary(self) -> dict[str, Any]:
        cpu = self.cpu
        # the same pods without the collector's passes inside them: which stream a pass
        # lands in follows where the young generation fills up, not what the stream costs
        own = [c - g for c, g in zip(cpu, self.gc, strict=True)]
        return {"p50_ms": round(pct(cpu, 50), 3), "p90_ms": round(pct(cpu, 90), 3),
                "p99_ms": round(pct(cpu, 99), 3), "mean_ms": round(sum(cpu) / len(cpu), 3),
                "p99_without_gc_ms": round(pct(own, 99), 3),
                "pods_timed": len(cpu), "gc_ms": round(sum(self.gc), 1),
                "load_at_end": [round(x, 2) for x in os.getloadavg()]}


def _timed_collector() -> tuple[list[float], Any]:
    """``[CPU seconds the collector ran, start of its current pass]`` and the
    ``gc.callbacks`` entry that keeps it (installed; remove it when done)."""
    collecting = [0.0, 0.0]

    def collector(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collecting[1] = time.thread_time()
        else:
            collecting[0] += time.thread_time() - collecting[1]

    gc.callbacks.append(collector)
    return collecting, collector


def stream(name: str, nodes: int, pods: int, pending: int, warmup: int,
           seed: int, policy: str = "gputopo", interpreter: str = "extender") -> dict[str, Any]:
    """CPU ms of each pod's filter + prioritize over ``pods`` pods with ``pending`` pending,
    the extender's default policy ``policy``; ``interpreter``: ``extender`` (set up as the
    served extender's) or ``python`` (CPython's defaults)."""
    from scheduler_extender.app import tune_interpreter

    one = _Stream(name, nodes, pods, pending, warmup, seed, policy)
    if interpreter == "extender":
        tune_interpreter(one.settings.gil_switch_interval_ms / 1000)
    collecting, collector = _timed_collector()
    one.start()
    for i in range(pods):
        one.step(i, collecting)
    gc.callbacks.remove(collector)
    return one.summary()


def interleaved(name: str, nodes: int, pods: int, pending: int, warmup: int, seed: int,
                policy: str, interpreter: str = "extender") -> dict[str, Any]:
    """Both streams in one fresh process, pod by pod: pod i of the stream with no pod pending,
    then pod i of the stream with ``pending`` pending (the other way round for odd i). Each
    stream has its own extender and cluster; what they share is the machine's state at the
    time, so a change of the CPU's speed between two isolated processes (on a shared machine
    the same stream's p50 moved 0.66-1.54 ms between runs ten seconds apart) does not land on
    one stream only. The untimed work of both streams (the pending view's parsing, the
    bind) runs outside both timed calls, so the collector's passes it provokes land in
    either stream alike. Returns each stream's :func:`stream` figures and, per timed pod, the
    CPU ms the stream with pending pods took more (``excess_ms``: median, p90 and mean)."""
    from scheduler_extender.app import tune_interpreter

    none = _Stream(name, nodes, pods, 0, warmup, seed, policy)
    some = _Stream(name, nodes, pods, pending, warmup, seed, policy)
    if interpreter == "extender":
        tune_interpreter(none.settings.gil_switch_interval_ms / 1000)
    collecting, collector = _timed_collector()
    none.start()
    some.start()
    for i in range(pods):
        # the untimed work of both first (the pending view's parsing allocates the most),
        # so the collector's passes it provokes land in either stream's timed calls alike
        none.prepare(i)
        some.prepare(i)
        for one in ((some, none) if i % 2 == 0 else (none, some)):
            one.timed(i, collecting)
        none.finish(i)
        some.finish(i)
    gc.callbacks.remove(collector)
    excess = [b - a for a, b in zip(none.cpu, some.cpu, strict=True)]
    return {"none": none.summary(), "some": some.summary(),
            "excess_ms": {"median": round(pct(excess, 50), 3),
                          "p90": round(pct(excess, 90), 3),
                          "mean": round(sum(excess) / len(excess), 3)}}


def isolated(name: str, nodes: int, pods: int, pending: int, warmup: int, seed: int,
             policy: str, interpreter: str = "extender") -> dict[str, Any]:
    """:func:`stream` in a fresh process: a stream run second in one process inherits the
    first one's heap (longer garbage collections) and warm caches, which moved the p99
    ratio by up to 1.5x depending on which stream went first."""
    return _fresh(stream, name, nodes, pods, pending, warmup, seed, policy, interpreter)


def _fresh(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``fn(*args)`` in a fresh (spawned) process."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(fn, *args).result()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=300)
    ap.add_argument("--pending", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--runs", type=int, default=1,
                    help="repeat the whole measurement; every run is recorded (odd runs "
                         "start with the stream with pending pods)")
    ap.add_argument("--clusters", default="dgx1-v100:100,cubemesh16:1000",
                    help="machine:nodes pairs")
    ap.add_argument("--policies", default="gputopo,gputopo-unguarded",
                    help="extender default policies; the first one with nothing pending is "
                         "the baseline every ratio_vs_first is taken against")
    ap.add_argument("--interpreter", choices=("extender", "python"), default="extender",
                    help="extender: garbage collector and GIL set up as the served extender's "
                         "(tune_interpreter); python: CPython's defaults (runs before session 5)")
    ap.add_argument("--mode", choices=("isolated", "interleaved"), default="isolated",
                    help="isolated: each stream in its own fresh process (the command of "
                         "record); interleaved: both streams in one fresh process, pod by pod "
                         "(see interleaved())")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    pols = [p for p in args.policies.split(",") if p.strip()]
    clusters = [(c.split(":")[0], int(c.split(":")[1])) for c in args.clusters.split(",")
                if c.strip()]
    rows = []
    for run in range(args.runs):
        for name, nodes in clusters:
            first: dict[str, Any] | None = None
            for policy in pols:
                extra: dict[str, Any] = {}
                if args.mode == "interleaved":
                    both = _fresh(interleaved, name, nodes, args.pods, args.pending,
                                  args.warmup, args.seed, policy, args.interpreter)
                    none, some = both["none"], both["some"]
                    extra = {"excess_ms": both["excess_ms"]}
                else:
                    order = (args.pending, 0) if run % 2 else (0, args.pending)
                    got = {n: isolated(name, nodes, args.pods, n, args.warmup, args.seed,
                                       policy, args.interpreter)
                           for n in order}
                    none, some = got[0], got[args.pending]
                first = none if first is None else first
                row = {"run": run + 1, "machine": name, "nodes": nodes, "policy": policy,
                       "interpreter": args.interpreter, "mode": args.mode,
                       "first_timed": ("alternating" if args.mode == "interleaved"
                                       else "pending" if run % 2 else "none"), "none": none,
                       f"pending_{args.pending}": some,
                       "ratio_p50": round(some["p50_ms"] / none["p50_ms"], 3),
                       "ratio_p99": round(some["p99_ms"] / none["p99_ms"], 3),
                       "ratio_p99_vs_first": round(some["p99_ms"] / first["p99_ms"], 3),
                       "ratio_p50_vs_first": round(some["p50_ms"] / first["p50_ms"], 3),
                       "ratio_p99_without_gc": round(some["p99_without_gc_ms"]
                                                     / none["p99_without_gc_ms"], 3),
                       **extra}
                rows.append(row)
                print(f"run {run + 1} {name} x {nodes} {policy}: CPU ms per filter+prioritize, "
                      f"none p50 {none['p50_ms']} p99 {none['p99_ms']}; {args.pending} pending "
                      f"p50 {some['p50_ms']} p99 {some['p99_ms']}; ratio p50 {row['ratio_p50']} "
                      f"p99 {row['ratio_p99']}; p99 vs {pols[0]} with none "
                      f"{row['ratio_p99_vs_first']}; GC ms {none['gc_ms']} / {some['gc_ms']}; "
                      f"p99 ratio without GC {row['ratio_p99_without_gc']}; "
                      + (f"excess per pod ms {extra['excess_ms']}; " if extra else "")
                      + f"load {some['load_at_end'][0]}", flush=True)
    args.out.write_text(json.dumps({
        "benchmark": "lookahead-cpu",
        "command": f"python -m benchmarks.bench_lookahead --pods {args.pods} --pending "
                   f"{args.pending} --warmup {args.warmup} --seed {args.seed} --runs "
                   f"{args.runs} --clusters {args.clusters} --policies {args.policies} "
                   f"--interpreter {args.interpreter} --mode {args.mode}",
        "python": platform.python_version(), "cpus": os.cpu_count(), "rows": rows,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
