"""Scheduling throughput of the real kube-scheduler: with gputopo, without an extender, and
with a trivial extender — measured in one run on one local control plane.

Set-up (``localcluster``): etcd + kube-apiserver on loopback, kwok, ``--nodes`` kwok DGX-1 V100
nodes (8 GPUs each, the device-plugin-like capacity and topology annotation of
``localcluster.gpucluster.add_gpu_node``), kube-scheduler with the Helm chart's
KubeSchedulerConfiguration (``nodeCacheCapable`` as rendered), the real
``gputopo extender --state kubernetes`` as a child process.

Scenarios, each ``--pods`` pods created at once (8 client threads; a watch records when each
pod gets its node), each measured in two modes:

* **stream** — the scheduler is running while the pods are created; pods/s counts from the
  first create call to the last bind ("created → all bound"), so the client's create rate and
  its competition for the CPUs are part of it;
* **backlog** — kube-scheduler is stopped, the pods are created, then it is started; pods/s
  counts from the first bind to the last: what the scheduler (and the extender) sustain.


* ``no-extender`` — pods asking for CPU only, under the same scheduler: the extender manages
  only GPU resources, so kube-scheduler never calls it (its own bind, its own client QPS);
* ``gputopo`` — two-GPU pods (all-to-all, bandwidth-sensitive by default): filter, prioritize
  and bind go to the gputopo extender, which decides the GPUs, annotates the pod and binds it;
* ``trivial-extender`` — the same two-GPU pods and the same configuration pointed at a trivial
  extender (``http.server`` with TCP_NODELAY: every node passes, every score 0, bind = one
  Binding), the reference of ``shared/docs/CONTROL-PLANE-NOTES.md``.

Between runs every pod is deleted and the cluster is idle again. Each scenario runs
``--repeats`` times (after one unmeasured warm-up run of ``no-extender``); the JSON keeps every
run and the median, plus the extender's mean server-side latency per verb (from its
``/metrics``) in the gputopo runs. 50 nodes x 8 GPUs and 200 two-GPU pods fill the cluster
exactly. The host is shared: the JSON records the load average before and after.

Run: ``.venv/bin/python -m benchmarks.bench_scheduler [--nodes 50] [--pods 200] [--repeats 3]``;
prints a table and writes ``benchmarks/results/scheduler.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from localcluster import ControlPlane, ManagedProcess
from localcluster.controlplane import free_port, wait_until
from localcluster.gpucluster import GpuCluster, GpuPod, scheduler_config

OUT = Path(__file__).parent / "results" / "scheduler.json"
MACHINE = "dgx1-v100"
RUN_LABEL = "gputopo.io/bench-run"


# ---------------------------------------------------------------------------- trivial extender
def serve_trivial_extender(port: int, kubeconfig: str) -> None:
    """Serve the trivial extender on 127.0.0.1:``port`` until killed.

    ``/filter`` passes every node (``NodeNames`` in, ``NodeNames`` out), ``/prioritize`` scores
    every node 0, ``/bind`` creates the pod's Binding with the official client.
    """
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as kube-scheduler's client expects
        disable_nagle_algorithm = True  # else each keep-alive reply waits ~40 ms

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            pass

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            reply: Any
            if self.path.endswith("/filter"):
                reply = {"NodeNames": body.get("NodeNames") or [], "FailedNodes": {},
                         "Error": ""}
                if body.get("Nodes") is not None:
                    reply = {"Nodes": body["Nodes"], "FailedNodes": {}, "Error": ""}
            elif self.path.endswith("/prioritize"):
                names = body.get("NodeNames") or [
                    n["metadata"]["name"] for n in (body.get("Nodes") or {}).get("items", [])]
                reply = [{"Host": n, "Score": 0} for n in names]
            elif self.path.endswith("/bind"):
                binding = client.V1Binding(
                    metadata=client.V1ObjectMeta(name=body["PodName"], uid=body["PodUID"]),
                    target=client.V1ObjectReference(kind="Node", name=body["Node"]),
                )
                try:
                    core.create_namespaced_pod_binding(
                        body["PodName"], body["PodNamespace"], binding, _preload_content=False)
                    reply = {"Error": ""}
                except Exception as exc:  # noqa: BLE001 - reported to the scheduler
                    reply = {"Error": f"{type(exc).__name__}: {exc}"}
            else:
                self.send_error(404)
                return
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


@contextmanager
def trivial_extender(cp: ControlPlane) -> Iterator[str]:
    """The trivial extender as a child process (this module, ``--serve-trivial``); yields its
    URL, stops it by PID on exit."""
    port = free_port()
    proc = ManagedProcess(
        "trivial-extender",
        [sys.executable, "-m", "benchmarks.bench_scheduler", "--serve-trivial", str(port),
         "--kubeconfig", str(cp.kubeconfig_path)],
        cp.workdir / "logs" / "trivial-extender.log",
        cwd=Path(__file__).resolve().parents[1],
    ).start()
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.exited():
            raise RuntimeError(f"trivial extender exited:\n{proc.log_tail()}")
        import socket

        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True

    try:
        wait_until(up, 30, "the trivial extender")
        yield url
    finally:
        proc.stop()


# ---------------------------------------------------------------------------- one run
class BindWatch:
    """Records, per pod of one run, the monotonic time it was first seen bound (a watch on
    the run's label)."""

    def __init__(self, gc: GpuCluster, run: str) -> None:
        self.gc = gc
        self.run = run
        self.bound: dict[str, float] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> BindWatch:
        self._thread.start()
        return self

    def _loop(self) -> None:
        from kubernetes import watch

        selector = f"{RUN_LABEL}={self.run}"
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(self.gc.core.list_namespaced_pod, self.gc.namespace,
                                      label_selector=selector, timeout_seconds=30):
                    obj = event["raw_object"]
                    if (obj.get("spec") or {}).get("nodeName"):
                        name = obj["metadata"]["name"]
                        with self._cond:
                            self.bound.setdefault(name, time.monotonic())
                            self._cond.notify_all()
                    if self._stop.is_set():
                        break
            except Exception:  # noqa: BLE001 - re-open the watch
                time.sleep(0.05)
            finally:
                w.stop()

    def wait(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self.bound) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"only {len(self.bound)}/{count} pods bound")
                self._cond.wait(left)

    def stop(self) -> None:
        self._stop.set()


def measure(
    gc: GpuCluster, pods: Sequence[GpuPod], run: str, timeout_s: float,
    backlog_config: str | None = None,
) -> dict[str, Any]:
    """Create ``pods`` (8 threads) and wait until all are bound; times in seconds.

    Stream mode (``backlog_config`` None): the scheduler is running; ``pods_per_s`` counts
    from the first create call to the last bind, so it includes the client's create rate.
    Backlog mode: the scheduler is stopped, the pods are created, then kube-scheduler is
    started with ``backlog_config``; ``pods_per_s`` counts from the first bind to the last
    (scheduler-limited: no create calls compete, start-up excluded).
    """
    labelled = [replace(p, labels={RUN_LABEL: run}) for p in pods]
    if backlog_config is not None:
        gc.stop_scheduler()
    watcher = BindWatch(gc, run).start()
    time.sleep(0.3)  # let the watch open before the first create
    created: dict[str, float] = {}
    t0 = time.monotonic()

    def create(p: GpuPod) -> None:
        gc.create_pod(p)
        created[p.name] = time.monotonic()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, labelled))
    t_created = time.monotonic()
    if backlog_config is not None:
        gc.start_scheduler(backlog_config)
    try:
        watcher.wait(len(pods), timeout_s)
    finally:
        watcher.stop()
    first, last = min(watcher.bound.values()), max(watcher.bound.values())
    out: dict[str, Any] = {"create_seconds": round(t_created - t0, 3)}
    if backlog_config is None:
        latencies = sorted(watcher.bound[n] - created[n] for n in created)
        out.update(
            seconds=round(last - t0, 3),
            pods_per_s=round(len(pods) / (last - t0), 1),
            latency_p50_ms=round(1000 * latencies[len(latencies) // 2], 1),
            latency_p99_ms=round(1000 * latencies[int(len(latencies) * 0.99) - 1], 1),
        )
    else:
        out.update(
            seconds=round(last - first, 3),
            pods_per_s=round((len(pods) - 1) / max(last - first, 1e-9), 1),
        )
    return out


def extender_verb_seconds(gc: GpuCluster) -> dict[str, tuple[float, float]]:
    """``verb -> (count, total seconds)`` from the extender's ``/metrics``."""
    with urllib.request.urlopen(f"{gc.extender.url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        for suffix, slot in (("_count", 0), ("_sum", 1)):
            head = f"gputopo_extender_request_seconds{suffix}{{verb=\""
            if line.startswith(head):
                verb = line[len(head):].split('"', 1)[0]
                out.setdefault(verb, [0.0, 0.0])[slot] = float(line.rsplit(" ", 1)[1])
    return {verb: (c, s) for verb, (c, s) in out.items()}


def verb_means_ms(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, float]:
    """Mean server-side latency per verb between two scrapes, milliseconds."""
    out = {}
    for verb, (count, total) in after.items():
        c0, s0 = before.get(verb, (0.0, 0.0))
        if count > c0:
            out[verb] = round(1000 * (total - s0) / (count - c0), 2)
    return out


def reset(gc: GpuCluster, check_extender: bool) -> None:
    """Delete every pod, wait until they are gone (and the extender sees every node idle)."""
    gc.core.delete_collection_namespaced_pod(gc.namespace, grace_period_seconds=0)
    wait_until(lambda: not gc.list_pods(), 120, "every pod deleted", interval_s=0.2)
    if check_extender:
        names = list(gc.nodes)
        wait_until(lambda: gc.extender.idle_nodes(names) == set(names), 60,
                   "the extender to see every node idle")  # fmt: skip


# ---------------------------------------------------------------------------- main
def run(nodes: int, pods: int, repeats: int, timeout_s: float) -> dict[str, Any]:
    load_before = os.getloadavg()
    t_start = time.monotonic()
    with ControlPlane() as cp, GpuCluster(cp) as gc, trivial_extender(cp) as trivial_url:
        gc.start([(f"gpu-{i:03d}", MACHINE) for i in range(nodes)], scheduler=False)
        configs = {"gputopo": scheduler_config(gc.extender.url),
                   "trivial-extender": scheduler_config(trivial_url)}
        ext = yaml.safe_load(configs["gputopo"])["extenders"][0]
        gc.start_scheduler(configs["gputopo"])
        stack_seconds = time.monotonic() - t_start

        def cpu_pods() -> list[GpuPod]:
            return [GpuPod(f"cpu-{i:04d}") for i in range(pods)]

        def gpu_pods() -> list[GpuPod]:
            return [GpuPod(f"gpu2-{i:04d}", gpus=2) for i in range(pods)]

        plan: list[tuple[str, str, Callable[[], list[GpuPod]]]] = [
            ("no-extender", "gputopo", cpu_pods),
            ("gputopo", "gputopo", gpu_pods),
            ("trivial-extender", "trivial-extender", gpu_pods),
        ]
        measure(gc, cpu_pods(), "warmup", timeout_s)  # API server and scheduler warm-up
        reset(gc, check_extender=True)
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {
            name: {"stream": [], "backlog": []} for name, _, _ in plan
        }
        for rep in range(repeats):
            for name, config, make in plan:
                for mode in ("stream", "backlog"):
                    if mode == "stream" and gc.scheduler_config != configs[config]:
                        gc.start_scheduler(configs[config])
                    before = extender_verb_seconds(gc)
                    result = measure(gc, make(), f"{name}-{mode}-{rep}", timeout_s,
                                     configs[config] if mode == "backlog" else None)
                    if name == "gputopo":
                        result["extender_mean_ms"] = verb_means_ms(
                            before, extender_verb_seconds(gc))
                    runs[name][mode].append(result)
                    print(f"  {name:17s} {mode:8s} run {rep + 1}: {result['pods_per_s']:6.1f} "
                          f"pods/s ({result['seconds']:.2f} s; creates "
                          f"{result['create_seconds']:.2f} s)", flush=True)
                    reset(gc, check_extender=True)
        start_seconds = cp.start_seconds
    scenarios = {
        name: {
            mode: {
                "pods_per_s_median": statistics.median(r["pods_per_s"] for r in rs),
                "runs": rs,
            }
            for mode, rs in by_mode.items()
        }
        for name, by_mode in runs.items()
    }
    return {
        "benchmark": "bench_scheduler",
        "setup": {
            "nodes": nodes, "machine": MACHINE, "gpus_per_node": 8, "pods": pods,
            "gpu_pods": "2 x nvidia.com/gpu each (all-to-all, bandwidth-sensitive default)",
            "cpu_pods": "10m CPU each, no gputopo resource (the extender is not called)",
            "extender": {k: ext.get(k) for k in ("nodeCacheCapable", "weight", "httpTimeout")},
            "repeats": repeats, "client_threads": 8,
        },  # fmt: skip
        "control_plane_start_seconds": round(start_seconds or 0.0, 2),
        "stack_start_seconds": round(stack_seconds, 2),
        "scenarios": scenarios,
        "env": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_scheduler",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--nodes", type=int, default=50, help="kwok DGX-1 V100 nodes (8 GPUs each)")
    ap.add_argument("--pods", type=int, default=200, help="pods per run")
    ap.add_argument("--repeats", type=int, default=3, help="runs per scenario")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a run may take")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--serve-trivial", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_trivial is not None:
        serve_trivial_extender(args.serve_trivial, args.kubeconfig)
        return 0
    if args.nodes < 1 or args.pods < 1 or args.repeats < 1:
        ap.error("--nodes, --pods and --repeats must be positive")
    if 2 * args.pods > 8 * args.nodes:
        ap.error(f"{args.pods} two-GPU pods do not fit on {args.nodes} 8-GPU nodes")
    doc = run(args.nodes, args.pods, args.repeats, args.timeout)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"control plane start {doc['control_plane_start_seconds']:.2f} s "
          f"(whole stack {doc['stack_start_seconds']:.2f} s)")
    print(f"{'pods/s (median)':17s} {'stream':>8s} {'backlog':>8s}")
    for name, sc in doc["scenarios"].items():
        print(f"{name:17s} {sc['stream']['pods_per_s_median']:8.1f} "
              f"{sc['backlog']['pods_per_s_median']:8.1f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
