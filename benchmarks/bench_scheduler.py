"""Scheduling throughput of the real kube-scheduler: with gputopo, without an extender, and
with a trivial extender — side by side in one run on one local control plane per size.

Set-up (``localcluster``): etcd + kube-apiserver on loopback, kwok, kwok DGX-1 V100 nodes
(8 GPUs each, the device-plugin-like capacity and topology annotation of
``localcluster.gpucluster.add_gpu_node``), kube-scheduler with the Helm chart's
KubeSchedulerConfiguration (``nodeCacheCapable`` as rendered), the real
``gputopo extender --state kubernetes`` as a child process.

Sizes (``--sizes``; both by default, each on a fresh control plane):

* ``50x200`` — 50 nodes, 200 pods asking for 2 whole GPUs each (fills the cluster exactly);
* ``100x1000`` — 100 nodes, 1,000 pods of a seeded mix: per 20 pods 3 ask for 2 GPUs, 4 for
  one GPU and 13 for a share (25 % vGPU-core, 4 GiB); two GPU pods per node would hold only
  400 pods, so the larger size mixes in the shares that make up most real pod counts.

Scenarios, each with the size's pods created at once (8 client threads; a watch records when
each pod gets its node), each measured in two modes:

* **stream** — the scheduler is running while the pods are created; pods/s counts from the
  first create call to the last bind ("created → all bound"), so the client's create rate and
  its competition for the CPUs are part of it;
* **backlog** — kube-scheduler is stopped, the pods are created, then it is started; pods/s
  counts from the first bind to the last: what the scheduler (and the extender) sustain.
* **paced** (only with ``--modes …,paced``) — the scheduler is running and the pods arrive at
  ``--paced-rate`` per second (default 20), below what the cluster sustains: the latencies,
  bind's among them, of a cluster that keeps up, as most production clusters do most of the
  time, rather than of a queue.

* ``no-extender`` — pods asking for CPU only, under the same scheduler: the extender manages
  only GPU resources, so kube-scheduler never calls it (its own bind, its own client QPS);
* ``gputopo`` — the GPU pods: filter, prioritize and bind go to the gputopo extender, which
  decides the GPUs and binds the pod with its decision;
* ``trivial-extender`` — the same GPU pods and the same configuration pointed at a trivial
  extender (``http.server`` with TCP_NODELAY: every node passes, every score 0, bind = one
  Binding through the official client, its reply read so the connection is reused), the
  reference of ``shared/docs/CONTROL-PLANE-NOTES.md``.

Between runs every pod is deleted and the cluster is idle again. Each scenario runs
``--repeats`` times (after one unmeasured warm-up run of ``no-extender``); the JSON keeps every
run and the median, and for gputopo the server-side latency per verb (count, mean, p50, p99)
from the extender's ``gputopo_extender_request_seconds`` histogram (scraped before and after
each run; quantiles interpolated inside buckets as Prometheus' ``histogram_quantile`` does).

Every run of gputopo and of the trivial extender also records the extender process's CPU
(user + system, ``/proc/PID/stat``) per pod scheduled (``extender_cpu_ms_per_pod``): on a
shared 2-core machine what an extender burns is taken from the API server and kube-scheduler,
and unlike pods/s this figure barely moves with the machine's load. Where that CPU goes:
:mod:`benchmarks.profile_extender`. Every run also records the CPU per pod of each component
of the stack (``host_cpu_ms_per_pod``: etcd, kube-apiserver, kwok, kube-scheduler, both
extenders — the idle one still watches pods — and this benchmark's creates and watch) and its
total: in stream mode the 2 cores are the limit, so pods/s follows 2,000 ms / that total.

The *binding floor* is what the API server alone takes for a Binding on this host at that
moment: the size's pods, created for no scheduler, bound directly with the official client
(one at a time, then 16 at a time), each Binding carrying as many annotations as gputopo's.
No extender's bind can be faster; on a shared machine it sets the bind latency.

kube-scheduler's extender client publishes no latency metric, so the *client-observed*
latency comes from a probe: after the measured runs, one more stream run of gputopo and of
the trivial extender with kube-scheduler pointed at :mod:`benchmarks.timing_proxy`, which
times each verb call as its client sees it. The probe's pods/s are recorded but not compared
(the proxy costs CPU). The host is shared: the JSON records the load average before and after.

Run: ``.venv/bin/python -m benchmarks.bench_scheduler [--sizes 50x200,100x1000]
[--repeats 3] [--no-probe]``; prints a Markdown table and writes
``benchmarks/results/scheduler.json``.

**A/B of two extender settings**: ``--compare-extender-args '--bind-concurrency 64'`` starts a
second gputopo extender (``gputopo-b``) with those options on the same control plane and
measures it in turn with the others, so both settings meet the same API server, the same
moment's load and the same trivial-extender reference; ``--modes backlog`` and
``--no-baseline`` leave out what such a comparison does not need. The JSON's ``compared``
holds B's ratio to the trivial extender per repeat beside A's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shlex
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from localcluster import ControlPlane, ManagedProcess
from localcluster.controlplane import free_port, wait_until
from localcluster.gpucluster import ExtenderProcess, GpuCluster, GpuPod, scheduler_config

OUT = Path(__file__).parent / "results" / "scheduler.json"
MACHINE = "dgx1-v100"
RUN_LABEL = "gputopo.io/bench-run"
MODES = ("stream", "backlog")
#: Pods per second created in ``paced`` mode (``--paced-rate``).
PACED_RATE = 20.0


# ---------------------------------------------------------------------------- trivial extender
def serve_trivial_extender(port: int, kubeconfig: str | None) -> None:
    """Serve the trivial extender on 127.0.0.1:``port`` until killed.

    ``/filter`` passes every node (``NodeNames`` in, ``NodeNames`` out), ``/prioritize`` scores
    every node 0, ``/bind`` creates the pod's Binding with the official client (without a
    ``kubeconfig``, bind answers an ``Error``: :mod:`benchmarks.bench_verbs` calls only the
    first two).
    """
    from kubernetes import client, config

    core = (client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
            if kubeconfig else None)

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
            elif self.path.endswith("/bind") and core is None:
                reply = {"Error": "this trivial extender has no API server to bind with"}
            elif self.path.endswith("/bind"):
                binding = client.V1Binding(
                    metadata=client.V1ObjectMeta(name=body["PodName"], uid=body["PodUID"]),
                    target=client.V1ObjectReference(kind="Node", name=body["Node"]),
                )
                try:
                    assert core is not None  # the branch above
                    resp: Any = core.create_namespaced_pod_binding(
                        body["PodName"], body["PodNamespace"], binding, _preload_content=False)
                    resp.read()  # the raw reply (a Status, which the client cannot read as a
                    resp.release_conn()  # Binding); read it so the connection is reused
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
def trivial_extender(cp: ControlPlane) -> Iterator[tuple[str, int]]:
    """The trivial extender as a child process (this module, ``--serve-trivial``); yields its
    URL and PID, stops it by PID on exit."""
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
        assert proc.pid is not None
        yield url, proc.pid
    finally:
        proc.stop()


# ---------------------------------------------------------------------------- timing proxy
@contextmanager
def timing_proxy(cp: ControlPlane, target: str) -> Iterator[str]:
    """:mod:`benchmarks.timing_proxy` in front of ``target`` as a child process; yields its
    URL, stops it by PID on exit."""
    port = free_port()
    proc = ManagedProcess(
        "timing-proxy",
        [sys.executable, "-m", "benchmarks.timing_proxy", "--port", str(port),
         "--target", target],
        cp.workdir / "logs" / f"timing-proxy-{port}.log",
        cwd=Path(__file__).resolve().parents[1],
    ).start()

    def up() -> bool:
        if proc.exited():
            raise RuntimeError(f"timing proxy exited:\n{proc.log_tail()}")
        import socket

        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True

    try:
        wait_until(up, 30, "the timing proxy")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def proxy_samples(url: str) -> dict[str, list[float]]:
    """The proxy's ``verb -> [seconds]`` since the last call (and start a new collection)."""
    with urllib.request.urlopen(f"{url}/_proxy/stats", timeout=10) as resp:
        data: dict[str, list[float]] = json.loads(resp.read())
    return data


def percentile_ms(samples: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0–1, nearest rank) of ``samples`` (seconds), in milliseconds."""
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    rank = max(1, math.ceil(q * len(ordered)))
    return round(1000 * ordered[rank - 1], 2)


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
    backlog_config: str | None = None, *, rate: float | None = None,
) -> dict[str, Any]:
    """Create ``pods`` (8 threads) and wait until all are bound; times in seconds.

    Stream mode (``backlog_config`` None): the scheduler is running; ``pods_per_s`` counts
    from the first create call to the last bind, so it includes the client's create rate.
    Paced (``rate`` pods per second, stream mode): one thread creates pod *i* at
    ``i / rate`` seconds, an arrival rate below what the cluster sustains, so latencies are
    those of a cluster that keeps up rather than of a queue.
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

    if rate is None:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, labelled))
    else:
        for i, p in enumerate(labelled):
            time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            create(p)
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
        latencies = [watcher.bound[n] - created[n] for n in created]
        out.update(
            seconds=round(last - t0, 3),
            pods_per_s=round(len(pods) / (last - t0), 1),
            latency_p50_ms=percentile_ms(latencies, 0.5),
            latency_p99_ms=percentile_ms(latencies, 0.99),
        )
    else:
        out.update(
            seconds=round(last - first, 3),
            pods_per_s=round((len(pods) - 1) / max(last - first, 1e-9), 1),
        )
    return out


# ---------------------------------------------------------------------------- CPU per pod
def cpu_seconds(pid: int) -> tuple[float, float]:
    """``(user, system)`` CPU seconds of process ``pid`` so far, all threads (``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks  # utime, stime


def cpu_per_pod(before: tuple[float, float], after: tuple[float, float],
                pods: int) -> dict[str, float]:
    """The extender's CPU between two :func:`cpu_seconds` readings per pod scheduled, ms:
    ``user``, ``system`` and ``total``. Unlike pods/s this barely depends on what else the
    shared machine runs, so it compares runs taken at different times."""
    user, system = after[0] - before[0], after[1] - before[1]
    return {"user": round(1000 * user / pods, 2), "system": round(1000 * system / pods, 2),
            "total": round(1000 * (user + system) / pods, 2)}


def host_cpu(gc: GpuCluster, extra: Mapping[str, int | None]) -> dict[tuple[str, int], float]:
    """CPU seconds (user + system) so far of every live process of the stack, by component
    and PID: the control plane's (etcd, kube-apiserver, kwok, kube-scheduler, …), the gputopo
    extender, the ``extra`` ones (name → PID: the trivial extender) and this benchmark
    (``benchmark``: the pod creates and the bind watch)."""
    pids: dict[str, int | None] = {p.name: p.pid for p in gc.cp.processes if not p.exited()}
    pids.update({"gputopo-extender": gc.extender.pid, **extra, "benchmark": os.getpid()})
    out: dict[tuple[str, int], float] = {}
    for name, pid in pids.items():
        if pid is None:
            continue
        try:
            out[name, pid] = sum(cpu_seconds(pid))
        except (OSError, IndexError, ValueError):  # exited meanwhile
            continue
    return out


def host_cpu_per_pod(before: Mapping[tuple[str, int], float],
                     after: Mapping[tuple[str, int], float], pods: int) -> dict[str, float]:
    """Milliseconds of CPU per pod scheduled, by component, between two :func:`host_cpu`
    readings, and their ``total``: on a 2-core host whose CPUs every component shares, the
    stream runs' pods/s is about 2,000 / ``total``. A process started during the run (the
    scheduler of a backlog run) counts from 0; one stopped during it loses its share."""
    per: dict[str, float] = {}
    for (name, pid), secs in after.items():
        per[name] = per.get(name, 0.0) + secs - before.get((name, pid), 0.0)
    out = {name: round(1000 * v / pods, 2) for name, v in sorted(per.items())}
    out["total"] = round(sum(out.values()), 2)
    return out


# ---------------------------------------------------------------------------- extender metrics
Histograms = dict[str, dict[str, Any]]


def extender_histograms(url: str) -> Histograms:
    """``verb -> {"buckets": {le: cumulative count}, "count", "sum"}`` of
    ``gputopo_extender_request_seconds`` from the extender's ``/metrics`` (parsed with
    prometheus-client's exposition parser), plus ``bind-api`` (``..._bind_api_seconds``: the
    Binding's API round trip inside bind) and ``bind-errors`` (a ``count`` of binds answered
    with an ``Error``)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: Histograms = {}
    for family in text_string_to_metric_families(text):
        if family.name == "gputopo_extender_requests":
            for s in family.samples:
                if s.labels.get("verb") == "bind" and s.labels.get("outcome") != "ok" and (
                        s.name.endswith("_total")):
                    h = out.setdefault("bind-errors", {"buckets": {}, "count": 0.0, "sum": 0.0})
                    h["count"] += s.value
            continue
        if family.name not in ("gputopo_extender_request_seconds",
                               "gputopo_extender_bind_api_seconds"):
            continue
        for s in family.samples:
            verb = s.labels.get("verb", "bind-api")
            h = out.setdefault(verb, {"buckets": {}, "count": 0.0, "sum": 0.0})
            if s.name.endswith("_bucket"):
                h["buckets"][s.labels["le"]] = s.value
            elif s.name.endswith("_count"):
                h["count"] = s.value
            elif s.name.endswith("_sum"):
                h["sum"] = s.value
    return out


def histogram_delta(before: Histograms, after: Histograms) -> Histograms:
    """What was observed between two scrapes (per verb)."""
    out: Histograms = {}
    for verb, h in after.items():
        b = before.get(verb, {"buckets": {}, "count": 0.0, "sum": 0.0})
        out[verb] = {
            "buckets": {le: c - b["buckets"].get(le, 0.0) for le, c in h["buckets"].items()},
            "count": h["count"] - b["count"],
            "sum": h["sum"] - b["sum"],
        }
    return out


def histogram_merge(parts: Sequence[Histograms]) -> Histograms:
    """The sum of several deltas."""
    out: Histograms = {}
    for part in parts:
        for verb, h in part.items():
            m = out.setdefault(verb, {"buckets": {}, "count": 0.0, "sum": 0.0})
            for le, c in h["buckets"].items():
                m["buckets"][le] = m["buckets"].get(le, 0.0) + c
            m["count"] += h["count"]
            m["sum"] += h["sum"]
    return out


def histogram_quantile_ms(h: Mapping[str, Any], q: float) -> float:
    """The ``q`` quantile of a histogram delta in milliseconds, interpolated linearly inside
    its bucket as Prometheus' ``histogram_quantile`` does (so it is only as fine as the
    buckets of :mod:`scheduler_extender.metrics`)."""
    buckets = sorted((float(le), c) for le, c in h["buckets"].items())
    total = h["count"]
    if total <= 0 or not buckets:
        return float("nan")
    rank = q * total
    lower, below = 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank:
            if math.isinf(le):
                return round(1000 * lower, 2)
            inside = cum - below
            frac = (rank - below) / inside if inside > 0 else 1.0
            return round(1000 * (lower + (le - lower) * frac), 2)
        lower, below = le, cum
    return round(1000 * lower, 2)


def verb_summary(h: Histograms) -> dict[str, dict[str, float]]:
    """Per verb: count, mean, p50 and p99 (ms) of a histogram delta."""
    out: dict[str, dict[str, float]] = {}
    for verb, v in sorted(h.items()):
        if v["count"] <= 0:
            continue
        if not v["buckets"]:  # a plain count
            out[verb] = {"count": int(v["count"])}
            continue
        out[verb] = {
            "count": int(v["count"]),
            "mean_ms": round(1000 * v["sum"] / v["count"], 2),
            "p50_ms": histogram_quantile_ms(v, 0.5),
            "p99_ms": histogram_quantile_ms(v, 0.99),
        }
    return out


def reset(gc: GpuCluster, check_extender: bool,
          extenders: Sequence[ExtenderProcess] = ()) -> None:
    """Delete every pod, wait until they are gone (and the extender — every one of
    ``extenders``, else ``gc``'s — sees every node idle)."""
    gc.core.delete_collection_namespaced_pod(gc.namespace, grace_period_seconds=0)
    wait_until(lambda: not gc.list_pods(), 120, "every pod deleted", interval_s=0.2)
    if check_extender:
        names = list(gc.nodes)
        for ext in extenders or (gc.extender,):
            wait_until(lambda e=ext: e.idle_nodes(names) == set(names), 60,  # type: ignore[misc]
                       "the extender to see every node idle")  # fmt: skip


# ---------------------------------------------------------------------------- workloads
@dataclass(frozen=True)
class Size:
    """One cluster size and its GPU pods.

    Attributes:
        nodes: kwok DGX-1 V100 nodes (8 GPUs each).
        pods: pods per run.
        mix: ``gpu2`` (every pod asks for 2 whole GPUs) or ``mixed`` (whole GPUs and shares,
            see :func:`gpu_pods`).
    """

    nodes: int
    pods: int
    mix: str

    @property
    def label(self) -> str:
        return f"{self.nodes}x{self.pods}"


SIZES = {
    "50x200": Size(50, 200, "gpu2"),
    "100x1000": Size(100, 1000, "mixed"),
}
#: The ``mixed`` workload, per 20 pods: 3 asking for 2 GPUs, 4 for 1 GPU, 13 for a share
#: (25 % of a GPU's compute, 4 GiB). 1,000 pods need 500 whole GPUs of 800, plus at least
#: 163 GPUs of shares when they are packed four to a GPU (Gaia Fragment).
MIX = (("gpu2", 3), ("gpu1", 4), ("share", 13))
SHARE_CORE_PERCENT = 25
SHARE_MEMORY_MIB = 4096


def gpu_pods(size: Size) -> list[GpuPod]:
    """The GPU pods of one run of ``size`` (the same pods, in the same seeded order, for
    gputopo and the trivial extender)."""
    if size.mix == "gpu2":
        return [GpuPod(f"gpu2-{i:04d}", gpus=2) for i in range(size.pods)]
    kinds = [k for k, n in MIX for _ in range(n)]
    kinds = (kinds * (size.pods // len(kinds) + 1))[: size.pods]
    random.Random(12).shuffle(kinds)
    out = []
    for i, kind in enumerate(kinds):
        if kind == "share":
            out.append(GpuPod(f"share-{i:04d}", core_percent=SHARE_CORE_PERCENT,
                              memory_mib=SHARE_MEMORY_MIB))
        else:
            out.append(GpuPod(f"{kind}-{i:04d}", gpus=int(kind[-1])))
    return out


def cpu_pods(size: Size) -> list[GpuPod]:
    """As many pods asking for CPU only (the extender is never called for them)."""
    return [GpuPod(f"cpu-{i:04d}") for i in range(size.pods)]


# ---------------------------------------------------------------------------- binding floor
#: Annotations the floor's Bindings carry: as many keys, about as long, as gputopo's
#: assignment on a 2-GPU pod (not gputopo's own keys, so the extender does not book them).
FLOOR_ANNOTATIONS = {
    f"bench.gputopo.io/key-{i}": "GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0" for i in range(8)
}


def binding_floor(gc: GpuCluster, size: Size, concurrency: int) -> dict[str, Any]:
    """The API server's own Binding round trip on this host, now: ``size.pods`` pods that no
    scheduler picks up are bound directly (the official client, ``concurrency`` threads,
    each Binding carrying :data:`FLOOR_ANNOTATIONS`), timed per call, milliseconds. What any
    extender's bind costs at least."""
    from kubernetes import client

    pods = [replace(p, labels={RUN_LABEL: f"floor-{concurrency}"}) for p in cpu_pods(size)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(
            lambda p: gc.core.create_namespaced_pod(
                gc.namespace, p.manifest(gc.namespace, scheduler="no-scheduler")),
            pods,
        ))  # fmt: skip
    nodes = sorted(gc.nodes)
    seconds: list[float] = []

    def bind(i: int) -> None:
        p = pods[i]
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name=p.name, namespace=gc.namespace,
                                         annotations=dict(FLOOR_ANNOTATIONS)),
            target=client.V1ObjectReference(kind="Node", name=nodes[i % len(nodes)]),
        )
        t0 = time.perf_counter()
        resp: Any = gc.core.create_namespaced_pod_binding(
            p.name, gc.namespace, body, _preload_content=False)
        resp.read()
        resp.release_conn()
        seconds.append(time.perf_counter() - t0)

    t0 = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(bind, range(len(pods))))
    took = time.monotonic() - t0
    return {"concurrency": concurrency, "count": len(seconds),
            "bindings_per_s": round(len(seconds) / took, 1),
            "p50_ms": percentile_ms(seconds, 0.5), "p99_ms": percentile_ms(seconds, 0.99)}


# ---------------------------------------------------------------------------- main
def run_size(size: Size, repeats: int, timeout_s: float, probe: bool,
             extender_args: Sequence[str] = (), *, compare_args: Sequence[str] | None = None,
             modes: Sequence[str] = MODES, baseline: bool = True,
             paced_rate: float = PACED_RATE) -> dict[str, Any]:
    """Every scenario on one fresh control plane of ``size``; see the module docstring.
    ``extender_args`` are added to the gputopo extender's command line; ``compare_args``
    (None: no such scenario) start a second gputopo extender, ``gputopo-b``, with these
    options instead, measured in turn with the others on the same control plane;
    ``baseline=False`` skips ``no-extender``."""
    t_start = time.monotonic()
    with ControlPlane() as cp, GpuCluster(cp) as gc, trivial_extender(cp) as (
            trivial_url, trivial_pid), ExitStack() as stack:
        gc.extender.extra_args = list(extender_args)
        gc.start([(f"gpu-{i:03d}", MACHINE) for i in range(size.nodes)], scheduler=False)
        configs = {"gputopo": scheduler_config(gc.extender.url),
                   "trivial-extender": scheduler_config(trivial_url)}
        extenders = {"gputopo": gc.extender}
        if compare_args is not None:
            b = ExtenderProcess(cp.kubeconfig_path, cp.workdir / "logs" / "gputopo-b.log",
                                extra_args=list(compare_args))
            stack.callback(b.stop)
            extenders["gputopo-b"] = b.start()
            configs["gputopo-b"] = scheduler_config(b.url)
        ext = yaml.safe_load(configs["gputopo"])["extenders"][0]
        gc.start_scheduler(configs["gputopo"])
        stack_seconds = time.monotonic() - t_start
        plan: list[tuple[str, str, Callable[[Size], list[GpuPod]]]] = [
            *([("no-extender", "gputopo", cpu_pods)] if baseline else []),
            ("gputopo", "gputopo", gpu_pods),
            ("trivial-extender", "trivial-extender", gpu_pods),
            *([("gputopo-b", "gputopo-b", gpu_pods)] if compare_args is not None else []),
        ]
        watchers = list(extenders.values())
        measure(gc, cpu_pods(size), "warmup", timeout_s)  # API server and scheduler warm-up
        reset(gc, check_extender=True, extenders=watchers)
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {
            name: {mode: [] for mode in modes} for name, _, _ in plan
        }
        deltas: dict[str, dict[str, list[Histograms]]] = {
            name: {mode: [] for mode in modes} for name in extenders}
        pids = {"trivial-extender": trivial_pid, **{n: e.pid for n, e in extenders.items()}}
        others = {"trivial-extender": trivial_pid,
                  **{n: e.pid for n, e in extenders.items() if n != "gputopo"}}
        for rep in range(repeats):
            for name, config, make in plan:
                for mode in modes:
                    if mode != "backlog" and gc.scheduler_config != configs[config]:
                        gc.start_scheduler(configs[config])
                    mine = extenders.get(name)
                    before = extender_histograms(mine.url) if mine is not None else {}
                    pid = pids.get(name)
                    cpu0 = cpu_seconds(pid) if pid is not None else None
                    host0 = host_cpu(gc, others)
                    result = measure(gc, make(size), f"{name}-{mode}-{rep}", timeout_s,
                                     configs[config] if mode == "backlog" else None,
                                     rate=paced_rate if mode == "paced" else None)
                    result["host_cpu_ms_per_pod"] = host_cpu_per_pod(
                        host0, host_cpu(gc, others), size.pods)
                    if pid is not None and cpu0 is not None:
                        result["extender_cpu_ms_per_pod"] = cpu_per_pod(
                            cpu0, cpu_seconds(pid), size.pods)
                    if mine is not None:
                        delta = histogram_delta(before, extender_histograms(mine.url))
                        deltas[name][mode].append(delta)
                        result["extender"] = verb_summary(delta)
                    runs[name][mode].append(result)
                    print(f"  {size.label} {name:17s} {mode:8s} run {rep + 1}: "
                          f"{result['pods_per_s']:6.1f} pods/s ({result['seconds']:.2f} s; "
                          f"creates {result['create_seconds']:.2f} s"
                          + (f"; extender CPU {result['extender_cpu_ms_per_pod']['total']:.2f}"
                             " ms/pod" if "extender_cpu_ms_per_pod" in result else "")
                          + ")", flush=True)
                    reset(gc, check_extender=True, extenders=watchers)
        floor = []
        for concurrency in (1, 16):
            floor.append(binding_floor(gc, size, concurrency))
            print(f"  {size.label} binding floor, {concurrency:2d} at a time: {floor[-1]}",
                  flush=True)
            reset(gc, check_extender=True, extenders=watchers)
        client: dict[str, Any] = {}
        if probe:
            for name, target in (("gputopo", gc.extender.url), ("trivial-extender", trivial_url)):
                with timing_proxy(cp, target) as proxy_url:
                    gc.start_scheduler(scheduler_config(proxy_url))
                    proxy_samples(proxy_url)
                    result = measure(gc, gpu_pods(size), f"{name}-probe", timeout_s)
                    samples = proxy_samples(proxy_url)
                    result["client"] = {
                        verb: {"count": len(v), "p50_ms": percentile_ms(v, 0.5),
                               "p99_ms": percentile_ms(v, 0.99)}
                        for verb, v in sorted(samples.items())
                    }
                    client[name] = result
                    print(f"  {size.label} {name:17s} probe    (via timing proxy): "
                          f"{result['pods_per_s']:6.1f} pods/s; bind client-observed "
                          f"{result['client'].get('bind', {})}", flush=True)
                    reset(gc, check_extender=True, extenders=watchers)
        start_seconds = cp.start_seconds
    scenarios = {
        name: {
            mode: {
                "pods_per_s_median": statistics.median(r["pods_per_s"] for r in rs),
                **({"extender_cpu_ms_per_pod_median": statistics.median(
                    r["extender_cpu_ms_per_pod"]["total"] for r in rs)}
                   if rs and "extender_cpu_ms_per_pod" in rs[0] else {}),
                **({"host_cpu_ms_per_pod_median": {
                    k: statistics.median(r["host_cpu_ms_per_pod"].get(k, 0.0) for r in rs)
                    for k in sorted(set().union(*(r["host_cpu_ms_per_pod"] for r in rs)))}}
                   if rs else {}),
                "runs": rs,
            }
            for mode, rs in by_mode.items()
        }
        for name, by_mode in runs.items()
    }

    def over_trivial(name: str) -> dict[str, float]:
        """Median pods/s of scenario ``name`` over the trivial extender's, per mode."""
        return {mode: round(scenarios[name][mode]["pods_per_s_median"]
                            / scenarios["trivial-extender"][mode]["pods_per_s_median"], 2)
                for mode in modes}

    ratio = over_trivial("gputopo")
    compared: dict[str, Any] = {}
    if compare_args is not None:
        compared = {
            "extender_args": list(compare_args),
            "gputopo_b_over_trivial": over_trivial("gputopo-b"),
            "ratio_per_repeat": {
                mode: {name: [round(a["pods_per_s"] / t["pods_per_s"], 2) for a, t in zip(
                    runs[name][mode], runs["trivial-extender"][mode], strict=True)]
                    for name in ("gputopo", "gputopo-b")}
                for mode in modes},
            "extender_server_side": {
                mode: verb_summary(histogram_merge(ds))
                for mode, ds in deltas["gputopo-b"].items()},
        }
    return {
        "setup": {
            "nodes": size.nodes, "machine": MACHINE, "gpus_per_node": 8, "pods": size.pods,
            "gpu_pods": (
                "2 x nvidia.com/gpu each (all-to-all, bandwidth-sensitive default)"
                if size.mix == "gpu2" else
                f"mixed, per 20 pods: {MIX[0][1]} x 2 GPUs, {MIX[1][1]} x 1 GPU, {MIX[2][1]} "
                f"x a share ({SHARE_CORE_PERCENT}% vgpu-core, {SHARE_MEMORY_MIB} MiB); "
                "seeded order"
            ),
            "cpu_pods": "10m CPU each, no gputopo resource (the extender is not called)",
            "extender": {k: ext.get(k) for k in ("nodeCacheCapable", "weight", "httpTimeout")},
            "repeats": repeats, "client_threads": 8,
        },  # fmt: skip
        "control_plane_start_seconds": round(start_seconds or 0.0, 2),
        "stack_start_seconds": round(stack_seconds, 2),
        "scenarios": scenarios,
        "gputopo_over_trivial": ratio,
        "extender_server_side": {
            mode: verb_summary(histogram_merge(ds)) for mode, ds in deltas["gputopo"].items()
        },
        **({"compared": compared} if compared else {}),
        "client_observed_probe": client,
        "binding_floor": floor,
    }


def run(sizes: Sequence[Size], repeats: int, timeout_s: float, probe: bool,
        extender_args: Sequence[str] = (), *, compare_args: Sequence[str] | None = None,
        modes: Sequence[str] = MODES, baseline: bool = True,
        paced_rate: float = PACED_RATE) -> dict[str, Any]:
    load_before = os.getloadavg()
    results = {size.label: run_size(size, repeats, timeout_s, probe, extender_args,
                                    compare_args=compare_args, modes=modes, baseline=baseline,
                                    paced_rate=paced_rate)
               for size in sizes}
    return {
        "benchmark": "bench_scheduler",
        "sizes": results,
        "extender_args": list(extender_args),
        "compare_extender_args": None if compare_args is None else list(compare_args),
        "modes": list(modes),
        **({"paced_rate": paced_rate} if "paced" in modes else {}),
        "env": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
    }


def table(doc: Mapping[str, Any]) -> str:
    """The side-by-side summary printed at the end (Markdown)."""
    nan = float("nan")
    lines = [
        "| cluster | mode | no extender | trivial extender | gputopo | gputopo / trivial "
        "| gputopo bind p50 / p99 (server) | of which the Binding call p50 / p99 "
        "| extender CPU per pod, trivial / gputopo |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, res in doc["sizes"].items():
        sc = res["scenarios"]
        compared = res.get("compared") or {}
        rows = [("gputopo", res["gputopo_over_trivial"], res["extender_server_side"])]
        if compared:
            rows.append(("gputopo-b", compared["gputopo_b_over_trivial"],
                         compared["extender_server_side"]))
        for mode in res["gputopo_over_trivial"]:
            for name, ratio, server in rows:
                verbs = server.get(mode, {})
                bind, api = verbs.get("bind", {}), verbs.get("bind-api", {})
                cpu = [sc[n][mode].get("extender_cpu_ms_per_pod_median", nan)
                       for n in ("trivial-extender", name)]
                base = sc.get("no-extender", {}).get(mode, {}).get("pods_per_s_median")
                lines.append(
                    f"| {label} | {mode}{' (B)' if name == 'gputopo-b' else ''} "
                    f"| {'–' if base is None else f'{base:.1f}'} "
                    f"| {sc['trivial-extender'][mode]['pods_per_s_median']:.1f} "
                    f"| {sc[name][mode]['pods_per_s_median']:.1f} "
                    f"| {ratio[mode]:.2f} "
                    f"| {bind.get('p50_ms', nan):.1f} / {bind.get('p99_ms', nan):.1f} ms "
                    f"| {api.get('p50_ms', nan):.1f} / {api.get('p99_ms', nan):.1f} ms "
                    f"| {cpu[0]:.2f} / {cpu[1]:.2f} ms |"
                )
        for fl in res.get("binding_floor", []):
            lines.append(
                f"| {label} | floor | | | | | a bare Binding, {fl['concurrency']} at a time: "
                f"{fl['p50_ms']:.1f} / {fl['p99_ms']:.1f} ms ({fl['bindings_per_s']:.0f}/s) | | |"
            )
        for name, probe in res.get("client_observed_probe", {}).items():
            bind = probe["client"].get("bind", {})
            lines.append(
                f"| {label} | probe | | | | | {name} bind client-observed "
                f"{bind.get('p50_ms', nan):.1f} / {bind.get('p99_ms', nan):.1f} ms | | |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_scheduler",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--sizes", default=",".join(SIZES),
                    help=f"comma-separated cluster sizes (NODESxPODS) of {', '.join(SIZES)}")
    ap.add_argument("--repeats", type=int, default=3, help="runs per scenario")
    ap.add_argument("--no-probe", action="store_true",
                    help="skip the client-observed latency probe (timing proxy)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a run may take")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--extender-args", default="",
                    help="extra command-line options of the gputopo extender, e.g. "
                         "'--bind-concurrency 64' (split like a shell does)")
    ap.add_argument("--compare-extender-args", default=None, metavar="ARGS",
                    help="also run a second gputopo extender ('gputopo-b', rows marked (B)) "
                         "with these options, in turn with the others on the same control "
                         "plane: an A/B of two settings under the same conditions")
    ap.add_argument("--modes", default=",".join(MODES),
                    help="comma-separated modes to run: stream, backlog (default both), "
                         "paced (pods created at --paced-rate)")
    ap.add_argument("--paced-rate", type=float, default=PACED_RATE,
                    help=f"pods per second created in paced mode (default {PACED_RATE:g})")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the no-extender scenario")
    ap.add_argument("--serve-trivial", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_trivial is not None:
        serve_trivial_extender(args.serve_trivial, args.kubeconfig)
        return 0
    labels = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in labels if s not in SIZES]
    if unknown or not labels:
        ap.error(f"unknown size(s) {', '.join(unknown) or '(none)'}; known: {', '.join(SIZES)}")
    if args.repeats < 1:
        ap.error("--repeats must be positive")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in (*MODES, "paced") for m in modes):
        ap.error(f"--modes takes stream, backlog and/or paced, got {args.modes!r}")
    if args.paced_rate <= 0:
        ap.error("--paced-rate must be positive")
    compare = (None if args.compare_extender_args is None
               else shlex.split(args.compare_extender_args))
    doc = run([SIZES[s] for s in labels], args.repeats, args.timeout, not args.no_probe,
              shlex.split(args.extender_args), compare_args=compare, modes=modes,
              baseline=not args.no_baseline, paced_rate=args.paced_rate)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print("pods/s, median of the repeats")
    print(table(doc))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
