"""Placement through the real kube-scheduler: gputopo against the stack a cluster runs without
it (kube-scheduler's defaults + NVIDIA's device plugin), on the same MAPA stream (issue 24).

Set-up (``localcluster``, one control plane for every run): etcd + kube-apiserver on loopback,
kwok, ``--nodes`` kwok DGX-1 V100 nodes (8 GPUs, 80 CPUs each, the device plugin's capacity and
topology annotation), kube-scheduler v1.36 built from source. The stream is the simulator's
``mapa`` generator (``--jobs`` jobs, 1–5 GPUs, ring, four sensitive networks and two
insensitive ones, all submitted at t = 0) for each ``--seeds`` seed: the same jobs as
``gputopo simulate -w mapa:jobs=N --seed S``.

The two stacks, one after the other on the same cluster (every pod deleted in between):

* **gputopo** — the chart's KubeSchedulerConfiguration (the extender called for filter,
  prioritize and bind, weight 5, beside kube-scheduler's own plugins) and the real
  ``gputopo extender --state kubernetes``; pods carry ``gputopo.io/pattern: ring`` and their
  bandwidth sensitivity, and the extender sees the pending ones (its lookahead). The GPUs are
  the ones bind wrote (``gputopo.io/gpu-indices``).
* **default** — kube-scheduler's default profile (NodeResourcesFit LeastAllocated,
  BalancedAllocation, …), no extender. The GPUs are what NVIDIA's device plugin would answer
  the kubelet's ``GetPreferredAllocation`` with: go-gpuallocator's best-effort policy
  (``nvidia-best-effort``) on the node's free GPUs when the pod is seen bound (kwok runs no
  kubelet, so this benchmark plays the plugin; pods on a node are allocated in the order they
  are bound, as the kubelet admits them).

Both schedulers run with ``podInitialBackoffSeconds = podMaxBackoffSeconds = 1``. Every pod
asks for 8 CPUs and 32 GiB per GPU (what LeastAllocated weighs: it scores CPU and memory, not
extended resources) and the same GPUs in both stacks.

**Time.** A job runs, from the moment it is seen bound, for its run time on the GPU set it got
(:mod:`simulator.runtime`: the judge's EffBW of the set, best arrangement, against the ideal;
MAPA Fig. 16's saturation at 50 GB/s), compressed ``--ms-per-s`` milliseconds of wall time per
simulated second; then the benchmark deletes the pod. Makespan is the last deletion minus the
first create, in simulated seconds. The scheduler's and the extender's own latency is wall time
and so counts in simulated time ``1000 / ms-per-s`` times over, against gputopo (it does more
per pod): the comparison is conservative for it. The extender's bounded postponement is
compressed with the jobs (``--postpone-max-s`` 1 800 simulated seconds, 180 s of wall time at
100 ms per s), as the simulator bounds it; before session 11 it was 1 800 s of wall time, longer
than a whole run, so a pod could wait without bound.

**Repeats.** One stack's makespan on one stream moves by 5–9 % between runs (kube-scheduler's
queue order depends on timing: ROBUST.md §3), more than gputopo's lead by Eq. 2. ``--repeats
R`` runs R pairs per seed and judge, the stacks taking turns going first, and reports each
stack's mean (every pair is kept under ``runs``).

Run: ``.venv/bin/python -m benchmarks.bench_replay [--seeds 1,2,3] [--judges eq2,bottleneck]
[--nodes 8] [--jobs 150] [--ms-per-s 25] [--repeats 1]``; prints a table and writes
``benchmarks/results/replay.json``. ``replay(...)`` is reusable: another scenario builds its own
cluster and pods and calls it per stack.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import platform
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from localcluster import ControlPlane
from localcluster.controlplane import DEFAULT_SCHEDULER_CONFIG, wait_until
from localcluster.gpucluster import GpuCluster, GpuPod, scheduler_config
from simulator import runtime as rt
from simulator.workloads import Job, load_workload
from topology.contract import ANN_GPU_INDICES
from topology.model import Topology
from topology.patterns import Pattern, parse_pattern
from topology.policies.base import NodeState, Request
from topology.policies.default import POSTPONE_MAX_S
from topology.policies.evaluate import Evaluator

OUT = Path(__file__).parent / "results" / "replay.json"
MACHINE = "dgx1-v100"
RUN_LABEL = "gputopo.io/replay-run"
#: What each pod asks per GPU besides the GPU (LeastAllocated scores these).
CPU_PER_GPU, MEMORY_GIB_PER_GPU = 8, 32


def with_backoff(config_yaml: str, seconds: int = 1) -> str:
    """``config_yaml`` with kube-scheduler's pod backoff pinned to ``seconds`` (initial and
    maximum): a pod that did not fit is retried within a second, in both stacks."""
    cfg = yaml.safe_load(config_yaml) or {}
    cfg["podInitialBackoffSeconds"] = seconds
    cfg["podMaxBackoffSeconds"] = seconds
    return str(yaml.safe_dump(cfg, sort_keys=False))


def pod_manifest(job: Job, scheduler: str, namespace: str, run: str,
                 annotate: bool) -> dict[str, Any]:
    """The pod of one job: its GPUs, CPUs and memory; for gputopo its pattern and
    sensitivity."""
    gp = GpuPod(f"job-{job.id}", gpus=job.gpus,
                pattern=job.pattern if annotate and job.gpus > 1 else None,
                sensitive=job.sensitive if annotate else None, labels={RUN_LABEL: run})
    body = gp.manifest(namespace, scheduler)
    res = body["spec"]["containers"][0]["resources"]
    res["requests"].update(cpu=str(CPU_PER_GPU * job.gpus),
                           memory=f"{MEMORY_GIB_PER_GPU * job.gpus}Gi")
    return body


@dataclass
class _Job:
    job: Job
    pattern: Pattern
    node: str = ""
    gpus: tuple[int, ...] = ()
    start: float = 0.0
    end: float = 0.0
    effbw: float = 0.0
    ideal: float | None = None
    factor: float = 1.0


@dataclass
class Replay:
    """One stack's run: what each job got and when (simulated seconds)."""

    stack: str
    judge: str
    jobs: list[_Job] = field(default_factory=list)
    makespan_s: float = 0.0
    wall_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        sens = [j for j in self.jobs if j.job.sensitive and j.job.gpus > 1 and j.ideal]
        ratios = [j.effbw / j.ideal for j in sens if j.ideal]
        return {
            "stack": self.stack, "judge": self.judge, "jobs": len(self.jobs),
            "makespan_s": round(self.makespan_s, 1),
            "mean_sensitive_effbw_ratio": round(float(np.mean(ratios)), 4) if ratios else None,
            "min_sensitive_effbw_ratio": round(float(np.min(ratios)), 4) if ratios else None,
            "mean_sensitive_effbw_gbps": round(float(np.mean([j.effbw for j in sens])), 2)
            if sens else None,
            "mean_wait_s": round(float(np.mean([j.start for j in self.jobs])), 1),
            "wall_s": round(self.wall_s, 1),
        }


def replay(
    gc: GpuCluster, jobs: Sequence[Job], *, stack: str, judge: str, ms_per_s: float,
    scheduler: str, annotate: bool, allocate: Callable[[str, int], tuple[int, ...]] | None,
    free: Callable[[str, tuple[int, ...]], None] | None = None, run: str = "r",
    timeout_s: float = 3600.0,
) -> Replay:
    """Submit ``jobs`` as pods at once, run each for its judged run time from when it is seen
    bound, delete it then; return what happened (module docstring).

    Args:
        gc: the cluster (its scheduler already started for ``scheduler``).
        jobs: the stream.
        stack: a label.
        judge: the EffBW model that prices run time.
        ms_per_s: wall milliseconds per simulated second.
        scheduler: the pods' ``spec.schedulerName``.
        annotate: put the gputopo pattern/sensitivity annotations on the pods.
        allocate: None = read the GPUs from the pod's ``gputopo.io/gpu-indices`` (gputopo
            bound it); else called with (node, count) when a pod is seen bound and returns its
            GPUs (the device plugin's answer).
        free: called with (node, GPUs) when a job ends (the device plugin's state).
        run: the run label put on the pods.
        timeout_s: wall seconds before giving up.

    Raises:
        TimeoutError: not every job finished in time.
    """
    from kubernetes import watch

    topo: Topology = next(iter(gc.nodes.values()))
    memo = Evaluator().memo
    scale = ms_per_s / 1000.0
    state = {f"job-{j.id}": _Job(j, parse_pattern(j.pattern, j.gpus)) for j in jobs}
    ends: list[tuple[float, str]] = []
    lock = threading.Condition()
    done: set[str] = set()
    stop = threading.Event()
    out = Replay(stack, judge)

    def on_bound(name: str, pod: Mapping[str, Any], now: float) -> None:
        rec = state[name]
        node = pod["spec"]["nodeName"]
        if allocate is None:
            ann = (pod.get("metadata") or {}).get("annotations") or {}
            text = ann.get(ANN_GPU_INDICES)
            if not text:
                return  # bind writes them with nodeName; wait for the event that has them
            gpus = tuple(int(g) for g in str(text).split(","))
        else:
            gpus = allocate(node, rec.job.gpus)
        rec.node, rec.gpus, rec.start = node, gpus, (now - t0) / scale
        if rec.pattern.edges:
            rec.effbw = rt.judge_effbw(topo, rec.pattern, gpus, judge, memo)
            rec.ideal = rt.ideal_effbw(topo, rec.pattern, judge, memo)
        rec.factor = rt.bandwidth_factor(rec.effbw, rec.ideal, rec.job.comm_share)
        run_s = rec.job.runtime_s * rec.factor
        with lock:
            heapq.heappush(ends, (now + run_s * scale, name))
            lock.notify_all()

    def watcher() -> None:
        seen: set[str] = set()
        while not stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(gc.core.list_namespaced_pod, gc.namespace,
                                      label_selector=f"{RUN_LABEL}={run}", timeout_seconds=30):
                    obj = event["raw_object"]
                    name = obj["metadata"]["name"]
                    if (event["type"] != "DELETED" and name not in seen and name in state
                            and (obj.get("spec") or {}).get("nodeName")):
                        before = len(state[name].gpus)
                        on_bound(name, obj, time.monotonic())
                        if len(state[name].gpus) or before:
                            seen.add(name)
                    if stop.is_set():
                        break
            except Exception:  # noqa: BLE001 - re-open the watch
                time.sleep(0.05)
            finally:
                w.stop()

    def finisher() -> None:
        while not stop.is_set():
            with lock:
                while not ends and not stop.is_set():
                    lock.wait(0.2)
                if stop.is_set():
                    return
                when, name = ends[0]
                wait = when - time.monotonic()
                if wait > 0:
                    lock.wait(min(wait, 0.2))
                    continue
                heapq.heappop(ends)
            rec = state[name]
            gc.core.delete_namespaced_pod(name, gc.namespace, grace_period_seconds=0)
            if free is not None:
                free(rec.node, rec.gpus)
            rec.end = (time.monotonic() - t0) / scale
            with lock:
                done.add(name)
                lock.notify_all()

    threads = [threading.Thread(target=watcher, daemon=True),
               threading.Thread(target=finisher, daemon=True)]
    threads[0].start()
    time.sleep(0.3)
    t0 = time.monotonic()
    threads[1].start()
    for j in jobs:  # in job order: kube-scheduler's queue keeps arrival order at equal priority
        body: Any = pod_manifest(j, scheduler, gc.namespace, run, annotate)
        gc.core.create_namespaced_pod(gc.namespace, body)
    deadline = t0 + timeout_s
    with lock:
        while len(done) < len(jobs):
            left = deadline - time.monotonic()
            if left <= 0:
                stop.set()
                raise TimeoutError(f"{stack}: {len(done)}/{len(jobs)} jobs finished")
            lock.wait(min(left, 1.0))
    stop.set()
    out.wall_s = time.monotonic() - t0
    out.jobs = list(state.values())
    out.makespan_s = max(r.end for r in out.jobs)
    return out


class DevicePlugins:
    """NVIDIA's device plugin on every node of the default stack: best-effort allocation on
    the node's free GPUs (thread-safe)."""

    def __init__(self, nodes: Mapping[str, Topology]) -> None:
        self.nodes = dict(nodes)
        self.busy: dict[str, set[int]] = {n: set() for n in nodes}
        self.evaluator = Evaluator()
        self._lock = threading.Lock()

    def allocate(self, node: str, count: int) -> tuple[int, ...]:
        """GetPreferredAllocation's answer for ``count`` GPUs on ``node``, now taken.

        Raises:
            RuntimeError: the node has fewer free GPUs (the scheduler over-committed it).
        """
        with self._lock:
            state = NodeState.whole(self.busy[node])
            d = self.evaluator.place("nvidia-best-effort", self.nodes[node], state,
                                     Request(count=count))
            self.busy[node].update(d.gpus)
            return d.gpus

    def free(self, node: str, gpus: tuple[int, ...]) -> None:
        with self._lock:
            self.busy[node].difference_update(gpus)


def run_pair(gc: GpuCluster, wl_jobs: Sequence[Job], seed: int, judge: str, ms_per_s: float,
             timeout_s: float, *, order: Sequence[str] = ("default", "gputopo"),
             rep: int = 0) -> dict[str, Any]:
    """Both stacks on one stream under one judge, in ``order``: one pair of runs."""
    model = rt.judge_name(judge)
    pair = {}
    for stack in order:
        reset(gc)
        run = f"s{seed}-{judge}-{stack}" + (f"-r{rep}" if rep else "")
        if stack == "gputopo":
            gc.start_scheduler(with_backoff(scheduler_config(gc.extender.url)))
            got = replay(gc, wl_jobs, stack=stack, judge=model, ms_per_s=ms_per_s,
                         scheduler=gc.scheduler_name, annotate=True, allocate=None,
                         run=run, timeout_s=timeout_s)
        else:
            gc.start_scheduler(with_backoff(DEFAULT_SCHEDULER_CONFIG),
                               name="default-scheduler")
            plugins = DevicePlugins(gc.nodes)
            got = replay(gc, wl_jobs, stack=stack, judge=model, ms_per_s=ms_per_s,
                         scheduler="default-scheduler", annotate=False,
                         allocate=plugins.allocate, free=plugins.free,
                         run=run, timeout_s=timeout_s)
        pair[stack] = got.summary()
        print(f"seed {seed} {model} {stack} (run {rep + 1}): {pair[stack]}", flush=True)
    return {"seed": seed, "judge": model, "order": list(order),
            **_compared(pair["default"], pair["gputopo"])}


def _compared(d: Mapping[str, Any], g: Mapping[str, Any]) -> dict[str, Any]:
    """The two stacks' summaries (one run each, or each one's mean) and gputopo's makespan
    ratio and mean sensitive EffBW/ideal difference against the default stack."""
    return {
        "default": d, "gputopo": g,
        "makespan_ratio": round(g["makespan_s"] / d["makespan_s"], 4),
        "effbw_ratio_delta": round(g["mean_sensitive_effbw_ratio"]
                                   - d["mean_sensitive_effbw_ratio"], 4),
    }


def combine(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Pairs of runs of one seed and judge as one row: each stack's mean summary, the ratio of
    the mean makespans, the mean EffBW/ideal difference, and every pair under ``runs``.

    One pair is its own row (``runs`` omitted). The mean is taken over stacks' runs, not over
    per-pair ratios: the two stacks of a pair do not share their noise (ROBUST.md §3).

    Raises:
        ValueError: no run, or runs of different seeds or judges.
    """
    if not runs:
        raise ValueError("no run to combine")
    if len({(r["seed"], r["judge"]) for r in runs}) != 1:
        raise ValueError("runs of different seeds or judges")
    if len(runs) == 1:
        return dict(runs[0])

    def mean_summary(stack: str) -> dict[str, Any]:
        rows = [r[stack] for r in runs]
        out: dict[str, Any] = {"stack": stack, "judge": rows[0]["judge"], "runs": len(rows)}
        for key in rows[0]:
            vals = [row.get(key) for row in rows]
            if key in out or not all(v is None or (isinstance(v, int | float)
                                                   and not isinstance(v, bool)) for v in vals):
                continue  # a label
            nums = [float(v) for v in vals if v is not None]
            out[key] = round(float(np.mean(nums)), 4) if nums else None
        return out

    return {
        "seed": runs[0]["seed"], "judge": runs[0]["judge"],
        **_compared(mean_summary("default"), mean_summary("gputopo")),
        "makespan_ratio_per_pair": [r["makespan_ratio"] for r in runs],
        "runs": list(runs),
    }


def run_seed(gc: GpuCluster, seed: int, jobs_n: int, judges: Sequence[str], ms_per_s: float,
             timeout_s: float, repeats: int = 1) -> list[dict[str, Any]]:
    """Both stacks under every judge on the stream of ``seed``, ``repeats`` pairs each; the
    stacks take turns going first (a drift of the machine's load favours neither)."""
    wl = load_workload(f"mapa:jobs={jobs_n}", seed=seed)
    rows = []
    for judge in judges:
        runs = [run_pair(gc, wl.jobs, seed, judge, ms_per_s, timeout_s, rep=rep,
                         order=("default", "gputopo") if rep % 2 == 0
                         else ("gputopo", "default"))
                for rep in range(repeats)]
        rows.append(combine(runs))
    return rows


def reset(gc: GpuCluster) -> None:
    """Delete every pod and wait until the extender sees every node idle again."""
    gc.core.delete_collection_namespaced_pod(gc.namespace, grace_period_seconds=0)
    wait_until(lambda: not gc.list_pods(), 120, "every pod deleted", interval_s=0.2)
    names = list(gc.nodes)
    wait_until(lambda: gc.extender.idle_nodes(names) == set(names), 60,
               "the extender to see every node idle")


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = ["| seed | judge | pairs | default makespan s | gputopo makespan s | ratio | "
             "per pair | default mean EffBW/ideal | gputopo | Δ |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d, g = r["default"], r["gputopo"]
        per_pair = r.get("makespan_ratio_per_pair", [r["makespan_ratio"]])
        lines.append(f"| {r['seed']} | {r['judge']} | {len(per_pair)} | "
                     f"{d['makespan_s']:.0f} | {g['makespan_s']:.0f} | "
                     f"{r['makespan_ratio']:.3f} | "
                     f"{' / '.join(f'{x:.3f}' for x in per_pair)} | "
                     f"{d['mean_sensitive_effbw_ratio']:.3f} | "
                     f"{g['mean_sensitive_effbw_ratio']:.3f} | {r['effbw_ratio_delta']:+.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--judges", default="eq2,bottleneck")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=150)
    ap.add_argument("--ms-per-s", type=float, default=25.0,
                    help="wall milliseconds per simulated second")
    ap.add_argument("--timeout", type=float, default=3600.0, help="wall seconds per run")
    ap.add_argument("--repeats", type=int, default=1,
                    help="pairs of runs per seed and judge, the stacks taking turns first; "
                         "a row reports each stack's mean")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1 (got {args.repeats})")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    judges = [j for j in args.judges.split(",") if j.strip()]
    rows: list[dict[str, Any]] = []
    load0 = os.getloadavg()
    bound = ["--postpone-max-s", f"{POSTPONE_MAX_S * args.ms_per_s / 1000:g}"]
    with ControlPlane() as cp, GpuCluster(cp, extender_args=bound) as gc:
        gc.start([(f"dgx-{i}", MACHINE) for i in range(args.nodes)], scheduler=False)
        for seed in seeds:
            rows.extend(run_seed(gc, seed, args.jobs, judges, args.ms_per_s, args.timeout,
                                 args.repeats))
    doc = {
        "benchmark": "replay", "command": "python -m benchmarks.bench_replay "
        f"--seeds {args.seeds} --judges {args.judges} --nodes {args.nodes} --jobs {args.jobs} "
        f"--ms-per-s {args.ms_per_s:g} --repeats {args.repeats}",
        "repeats": args.repeats, "machine": MACHINE, "nodes": args.nodes, "jobs": args.jobs,
        "ms_per_simulated_s": args.ms_per_s,
        "python": platform.python_version(), "cpus": os.cpu_count(),
        "load_average_before_after": [round(x, 2) for x in (*load0, *os.getloadavg())],
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(table(rows))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
