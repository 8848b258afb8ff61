"""The headline: what gputopo buys over the stack a cluster runs today, through the real
kube-scheduler.

Two stacks replay the same seeded stream of single-node jobs and gangs on one local control
plane (etcd, kube-apiserver, kube-controller-manager's Job controller, kwok) with 8 DGX-1
V100 nodes in two racks (``topology.gputopo.io/rack``; four 100 Gb/s EDR NICs each), time
divided by ``--scale``:

* **default** — the default kube-scheduler (no extender) and NVIDIA's device plugin: every job
  is a batch/v1 Job (a gang: an Indexed Job of several pods) the Job controller runs at once;
  kube-scheduler places each pod on its own; each pod's GPUs are what NVIDIA's plugin picks
  when the pod starts (go-gpuallocator's best-effort preferred allocation:
  ``nvidia-best-effort`` on the node's free GPUs, in bind order). A gang's first pods hold
  their GPUs until its last one is placed; a gang not whole 600 s (scaled) after its first pod
  fails — torchrun's rendezvous timing out — and is submitted again (a new Job: the Job
  controller's failure backoff is not scaled with the replay's time, so it is left out).
* **gputopo** — kube-scheduler with the gputopo extender (the Helm chart's configuration) and
  ``gputopo planner``: every job is a suspended Indexed Job the planner admits whole
  (``planner/gang.py``: the tightest domain, by bandwidth, then PreservedBW), the extender
  keeps each pod on its planned node and picks its GPUs. Both bound the postponement of a
  sensitive job to 1 800 s, scaled (before session 11 it was 1 800 s of wall time: unbounded
  within a run).

Jobs come from :func:`simulator.multinode_workloads.hierarchy_workload` (MAPA's networks and
run times; 30 % gangs of 2-4 pods of 4 or 8 GPUs). Like the simulator, a job runs
``runtime_s × bandwidth_factor(bottleneck, ideal, comm_share)``: its bottleneck bandwidth is
predicted from where its pods actually landed (:func:`topology.gang.predict`: each pod's GPU
set inside its node, gputopo-v1, with the pod's ranks in the set's best ring order — NCCL
searches the ring that maximises its bottleneck, whatever the GPUs' index order, and on a DGX-1
the order with the best gputopo-v1 EffBW has the best bottleneck for every ring of 3-8 GPUs;
the same judge on both stacks; its ring between nodes through the NICs its GPUs use, at the
rack's or the spine's share), *ideal* is the best any placement on the idle cluster gets. When
a job's pods are all running, the replay writes that duration on each pod
(``kwok.gputopo.io/run-duration``) and kwok completes them then.

Reported per seed and stack (unscaled seconds): makespan (first submission to last
completion), mean job completion time (submission to completion), the worst bandwidth-
sensitive multi-GPU job's bottleneck bandwidth (and the 25th percentile and median), GPU-hours
held by partial gangs and rendezvous timeouts.

Run: ``.venv/bin/python -m benchmarks.bench_headline [--seeds 1,2,3] [--jobs 60]
[--scale 30]``; writes ``benchmarks/results/headline.json``, ``headline.md`` and
``headline.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

import yaml

from localcluster import ControlPlane, find_binaries
from localcluster.controlplane import wait_until
from localcluster.gpucluster import GpuCluster, scheduler_config
from localcluster.planning import ANN_RUN_DURATION, PlannerProcess, gang_manifest, job_stages
from simulator.multinode_workloads import MultiJob, MultiWorkload, hierarchy_workload
from simulator.runtime import bandwidth_factor
from topology import catalog
from topology.contract import (
    ANN_BW_SENSITIVE,
    ANN_GPU_INDICES,
    ANN_PATTERN,
    LABEL_BLOCK,
    LABEL_RACK,
)
from topology.gang import Gang, GangNode, choose, predict
from topology.hierarchy import DEFAULT as HIERARCHY
from topology.policies.base import Decision, NodeState, NoFit, Request
from topology.policies.default import POSTPONE_MAX_S
from topology.policies.evaluate import Evaluator

OUT = Path(__file__).parent / "results"
MACHINE = "dgx1-v100"
RACKS = {f"dgx-r{r}-{i}": f"r{r}" for r in range(2) for i in range(4)}
STACKS = ("default", "gputopo")
RUN_LABEL = "bench.gputopo.io/run"
JOB_LABEL = "bench.gputopo.io/job"
#: The Job object a pod belongs to (a restarted job's new Job has a new name).
KNAME_LABEL = "bench.gputopo.io/kname"
#: torchrun's rendezvous join timeout, unscaled seconds.
RENDEZVOUS_S = 600.0
NAMESPACE = "default"


def workload(seed: int, jobs: int, rate: float) -> MultiWorkload:
    """The replayed stream: 8 DGX-1 V100 in two racks of four, 30 % gangs of 2-4 pods."""
    return hierarchy_workload(jobs=jobs, seed=seed, rate=rate, gangs=0.3, blocks=1, racks=2,
                              nodes=4, max_pods=4)


def job_name(job: MultiJob) -> str:
    return f"job-{job.id}"


def manifest(job: MultiJob, stack: str, run: str, kname: str | None = None) -> dict[str, Any]:
    """The Job for ``job`` in ``stack`` (module docstring), named ``kname`` (default: the
    job's name)."""
    kname = kname or job_name(job)
    ann = {ANN_PATTERN: job.pattern, ANN_BW_SENSITIVE: "true" if job.sensitive else "false"}
    if stack == "gputopo":
        obj = gang_manifest(job_name(job), pods=job.pods, gpus=job.gpus, annotations=ann)
    else:
        obj = gang_manifest(job_name(job), pods=job.pods, gpus=job.gpus)
        obj["metadata"]["labels"] = {}  # not the planner's
        obj["metadata"]["annotations"] = {}
        obj["spec"]["suspend"] = False
        obj["spec"]["backoffLimit"] = 10_000  # pods deleted by a timed-out rendezvous return
        obj["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    tmeta = obj["spec"]["template"]["metadata"]
    tmeta["labels"] = {**tmeta.get("labels", {}), RUN_LABEL: run, JOB_LABEL: job_name(job),
                       KNAME_LABEL: kname}
    tmeta["annotations"] = {**tmeta.get("annotations", {}), **ann}
    obj["metadata"]["labels"] = {**obj["metadata"].get("labels", {}), RUN_LABEL: run}
    obj["metadata"]["name"] = kname
    return obj


@dataclass
class JobState:
    """One job as the replay follows it (wall-clock times)."""

    job: MultiJob
    submitted: float = 0.0
    bound: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)  # pod → where
    partial_since: float | None = None
    started: float | None = None
    ended: float | None = None
    bottleneck: float = math.inf
    ideal: float = math.inf
    factor: float = 1.0
    timeouts: int = 0
    partial_gpu_s: float = 0.0
    succeeded: set[str] = field(default_factory=set)
    nodes: tuple[str, ...] = ()
    kname: str = ""  # the Job object's name (a restarted job gets a new one)
    placed: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)  # at start


class Replay:
    """One stack's replay of one workload (module docstring)."""

    def __init__(self, gc: GpuCluster, wl: MultiWorkload, stack: str, run: str, scale: float,
                 ideal: Mapping[tuple[int, int, bool], float]) -> None:
        self.gc = gc
        self.wl = wl
        self.stack = stack
        self.run = run
        self.scale = scale
        self.ideal = ideal
        self.topo = catalog.get(MACHINE)
        self.network = catalog.network(MACHINE)
        self.paths = {n: HIERARCHY.path(n, {LABEL_BLOCK: "b0", LABEL_RACK: r})
                      for n, r in RACKS.items()}
        self.used: dict[str, set[int]] = {n: set() for n in RACKS}
        self.jobs = {job_name(j): JobState(j) for j in wl.jobs}
        self.evaluator = Evaluator()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[str] = []

    # ------------------------------------------------------------------ the device plugin
    def _best_effort(self, node: str, gpus: int) -> tuple[int, ...]:
        """The GPUs NVIDIA's plugin hands a pod starting on ``node`` (best effort over the
        free GPUs); the lowest free ones if its preferred allocation cannot serve it."""
        state = NodeState.whole(self.used[node])
        try:
            return self.evaluator.place("nvidia-best-effort", self.topo, state,
                                        Request(count=gpus)).gpus
        except NoFit:
            free = [g for g in range(self.topo.size) if g not in self.used[node]]
            return tuple(free[:gpus])

    # ------------------------------------------------------------------ pods
    def on_pod(self, pod: Mapping[str, Any], deleted: bool) -> None:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        name = str(labels.get(JOB_LABEL, ""))
        st = self.jobs.get(name)
        if st is None:
            return
        pname = str(meta.get("name"))
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        now = time.monotonic()
        with self.lock:
            if labels.get(KNAME_LABEL) != st.kname:
                return  # a pod of a Job given up (_restart released it and deletes it)
            if deleted or phase == "Failed":
                where = st.bound.pop(pname, None)
                if where is not None:
                    self.used[where[0]] -= set(where[1])
                if not st.bound:
                    st.partial_since = None
                return
            if phase == "Succeeded":
                where = st.bound.pop(pname, None)
                if where is not None:
                    self.used[where[0]] -= set(where[1])
                st.succeeded.add(pname)
                if len(st.succeeded) >= st.job.pods and st.ended is None:
                    st.ended = now
                return
            if not node or pname in st.bound:
                return
            if self.stack == "gputopo":
                text = (meta.get("annotations") or {}).get(ANN_GPU_INDICES)
                if not text:
                    return
                gpus = tuple(int(x) for x in str(text).split(","))
            else:
                gpus = self._best_effort(str(node), st.job.gpus)
            overlap = self.used[str(node)] & set(gpus)
            if overlap:
                self.errors.append(f"{pname}: GPUs {sorted(overlap)} of {node} given twice")
            self.used[str(node)] |= set(gpus)
            st.bound[pname] = (str(node), gpus)
            if st.partial_since is None:
                st.partial_since = now
            if len(st.bound) == st.job.pods and st.started is None:
                self._start(st, now)

    def _start(self, st: JobState, now: float) -> None:
        by_node: dict[str, list[Decision]] = {}
        pattern = st.job.request().effective_pattern()
        for node, gpus in st.bound.values():
            by_node.setdefault(node, []).append(_decision(_best_order(pattern.edges,
                                                                       tuple(sorted(gpus)))))
        parts = [(GangNode(n, self.paths[n], self.topo, NodeState(), self.network), ds)
                 for n, ds in sorted(by_node.items(), key=lambda kv: self.paths[kv[0]])]
        req = st.job.request()
        intra, inter = predict(HIERARCHY, req, parts)
        st.bottleneck = min(intra, inter.gbps)
        st.ideal = self.ideal[(st.job.pods, st.job.gpus, st.job.sensitive)]
        st.factor = 1.0 if not (math.isfinite(st.bottleneck) and math.isfinite(st.ideal)) \
            else bandwidth_factor(st.bottleneck, st.ideal, st.job.comm_share)
        st.started = now
        st.partial_since = None
        st.nodes = tuple(sorted(by_node))
        st.placed = dict(st.bound)
        duration = st.job.runtime_s * st.factor / self.scale
        for pname in list(st.bound):
            try:
                self.gc.core.patch_namespaced_pod(
                    pname, NAMESPACE, {"metadata": {"annotations": {
                        ANN_RUN_DURATION: f"{duration:.3f}s"}}})
            except Exception as exc:  # noqa: BLE001 - reported
                self.errors.append(f"{pname}: duration not set: {exc}")

    # ------------------------------------------------------------------ loops
    def _watch(self) -> None:
        from kubernetes import watch

        while not self.stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(self.gc.core.list_namespaced_pod, NAMESPACE,
                                      label_selector=f"{RUN_LABEL}={self.run}",
                                      timeout_seconds=30):
                    self.on_pod(event["raw_object"], event["type"] == "DELETED")
                    if self.stop.is_set():
                        break
            except Exception:  # noqa: BLE001 - reopen the watch
                time.sleep(0.1)
            finally:
                w.stop()

    def _rendezvous(self) -> None:
        """default: a gang not whole ``RENDEZVOUS_S`` (scaled) after its first pod fails."""
        limit = RENDEZVOUS_S / self.scale
        last = time.monotonic()
        while not self.stop.wait(0.2):
            now = time.monotonic()
            victims = []
            with self.lock:
                for name, st in self.jobs.items():
                    if st.started is None and st.bound:
                        st.partial_gpu_s += (now - last) * sum(len(g) for _, g in
                                                               st.bound.values())
                    if st.started is None and st.partial_since is not None and \
                            now - st.partial_since > limit:
                        victims.append((name, self._give_up(st)))
            last = now
            for name, old in victims:
                try:
                    self._restart(self.jobs[name], old)
                except Exception as exc:  # noqa: BLE001 - keep watching; reported
                    self.errors.append(f"{name}: restart failed: {exc}")
                    print(f"  {name}: restart failed: {' '.join(str(exc).split())[:300]}",
                          flush=True)

    def _give_up(self, st: JobState) -> str:
        """The rendezvous of ``st``'s current Job timed out: its pods hold nothing from now on
        (``_restart`` deletes them) and the events of its pods are ignored; returns the old
        Job's name. Called under ``self.lock``, in the same critical section that saw the gang
        not started: a pod bound in between must not start a gang that is being given up (its
        replacement would then never be started, and the replay would never end)."""
        st.timeouts += 1
        st.partial_since = None
        old = st.kname
        for node, gpus in st.bound.values():
            self.used[node] -= set(gpus)
        st.bound.clear()
        st.kname = f"{job_name(st.job)}-r{st.timeouts}"
        return old

    def _restart(self, st: JobState, old: str) -> None:
        """The rendezvous gave up (``_give_up``): the training job fails and is submitted again
        (a new Job object: its pods come back at once, not after the Job controller's failure
        backoff, which is not scaled with the replay's time)."""
        from kubernetes import client as k8s

        batch = k8s.BatchV1Api(self.gc.cp.api_client())
        try:
            batch.delete_namespaced_job(old, NAMESPACE, propagation_policy="Background",
                                        grace_period_seconds=0)
        except Exception as exc:  # noqa: BLE001 - reported
            self.errors.append(f"{old}: not deleted: {exc}")
        # The replay's controller-manager runs the Job controller only (no garbage collector):
        # the old Job's pods would stay, holding their GPUs, unless deleted here.
        self.gc.core.delete_collection_namespaced_pod(
            NAMESPACE, label_selector=f"{KNAME_LABEL}={old}", grace_period_seconds=0)
        batch.create_namespaced_job(NAMESPACE, cast(Any, manifest(st.job, self.stack, self.run,
                                                                  st.kname)))

    def execute(self) -> dict[str, Any]:
        """Submit the stream on time, follow it to the last completion; the stack's row."""
        from kubernetes import client as k8s

        batch = k8s.BatchV1Api(self.gc.cp.api_client())
        threads = [threading.Thread(target=self._watch, daemon=True)]
        if self.stack == "default":
            threads.append(threading.Thread(target=self._rendezvous, daemon=True))
        for t in threads:
            t.start()
        time.sleep(0.5)
        t0 = time.monotonic()
        for job in self.wl.jobs:
            wait = t0 + job.arrival_s / self.scale - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            st = self.jobs[job_name(job)]
            st.submitted = time.monotonic()
            st.kname = job_name(job)
            batch.create_namespaced_job(NAMESPACE, cast(Any, manifest(job, self.stack,
                                                                     self.run)))
        horizon = sum(j.runtime_s * j.pods for j in self.wl.jobs) / self.scale * 3 + 600
        try:
            wait_until(lambda: all(s.ended is not None for s in self.jobs.values()), horizon,
                       f"every {self.stack} job to complete", interval_s=0.5)
        finally:
            self.stop.set()
        return self.row(t0)

    def row(self, t0: float) -> dict[str, Any]:
        states = list(self.jobs.values())
        first = min(s.submitted for s in states)
        end = max(cast(float, s.ended) for s in states)
        judged = [(name, s) for name, s in self.jobs.items() if s.job.sensitive
                  and s.job.pods * s.job.gpus > 1 and math.isfinite(s.bottleneck)]
        sens = [s.bottleneck for _, s in judged]
        wname, worst = min(judged, key=lambda kv: kv[1].bottleneck)
        share = [s.bottleneck / s.ideal for _, s in judged if math.isfinite(s.ideal)]
        return {
            "makespan_s": round((end - first) * self.scale, 1),
            "mean_jct_s": round(statistics.mean((cast(float, s.ended) - s.submitted)
                                                * self.scale for s in states), 1),
            "worst_sensitive_gbps": round(min(sens), 2),
            "p25_sensitive_gbps": round(_percentile(sens, 25), 2),
            "median_sensitive_gbps": round(statistics.median(sens), 2),
            "worst_sensitive_job": {"job": wname, "pods": worst.job.pods,
                                    "gpus_per_pod": worst.job.gpus,
                                    "ideal_gbps": round(worst.ideal, 2),
                                    "placed": sorted([n, sorted(g)]
                                                     for n, g in worst.placed.values())},
            # extra, not the target: each job against the best its shape gets on the idle
            # cluster (a NIC-bound gang's best is about 25 GB/s wherever it runs)
            "worst_sensitive_share_of_ideal": round(min(share), 3) if share else None,
            "partial_gpu_hours": round(sum(s.partial_gpu_s for s in states) * self.scale
                                       / 3600, 2),
            "timeouts": sum(s.timeouts for s in states),
            "gangs_in_one_rack": round(sum(len({RACKS[n] for n in s.nodes}) == 1
                                           for s in states if s.job.gang)
                                       / max(1, sum(s.job.gang for s in states)), 3),
            "errors": self.errors[:10],
            "jobs": {name: {"submitted_s": round((s.submitted - first) * self.scale, 1),
                            "started_s": round((cast(float, s.started) - first) * self.scale,
                                               1),
                            "ended_s": round((cast(float, s.ended) - first) * self.scale, 1),
                            "gpus": {p: [n, list(g)] for p, (n, g) in s.placed.items()},
                            "bottleneck_gbps": s.bottleneck if math.isfinite(s.bottleneck)
                            else None, "factor": round(s.factor, 4)}
                     for name, s in self.jobs.items()},
        }


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


@cache
def _best_order(edges: tuple[tuple[int, int], ...], gpus: tuple[int, ...]) -> tuple[int, ...]:
    """Ranks over ``gpus`` in the order NCCL's ring search would find: the arrangement of the
    pattern with the highest gputopo-v1 EffBW."""
    import numpy as np

    from topology.policies.bandwidth import GPUTOPO_P
    from topology.policies.matching import _arrangements_and_perms

    if len(gpus) < 2 or not edges:
        return gpus
    _, perms = _arrangements_and_perms(len(gpus), edges)
    bw = np.array(catalog.get(MACHINE).bandwidth_matrix, dtype=float)
    maps = np.array(gpus)[perms]  # [A, n]: rank -> GPU
    e = np.array(edges)
    w = bw[maps[:, e[:, 0]], maps[:, e[:, 1]]]  # [A, m]
    with np.errstate(divide="ignore"):
        score = np.power(w, GPUTOPO_P).mean(axis=1) ** (1.0 / GPUTOPO_P)
    best = maps[int(np.argmax(score))]
    return tuple(int(x) for x in best)


def _decision(gpus: tuple[int, ...]) -> Decision:
    topo = catalog.get(MACHINE)
    return Decision(policy="replay", gpus=gpus, uuids=tuple(topo.gpus[g].uuid for g in gpus),
                    mapping=gpus, aggregated_bandwidth_gbps=0.0, pattern_bandwidth_gbps=0.0,
                    effective_bandwidth_gbps=0.0, bandwidth_model="gputopo-v1",
                    preserved_bandwidth_gbps=0.0, access_cost=0.0, cpu_affinity="",
                    numa_nodes=())


def ideal_bottlenecks(wl: MultiWorkload) -> dict[tuple[int, int, bool], float]:
    """Per job shape, the bottleneck gputopo's chooser reaches on the idle cluster."""
    topo, net = catalog.get(MACHINE), catalog.network(MACHINE)
    idle = [GangNode(n, HIERARCHY.path(n, {LABEL_BLOCK: "b0", LABEL_RACK: r}), topo,
                     NodeState(), net) for n, r in RACKS.items()]
    ev = Evaluator()
    out: dict[tuple[int, int, bool], float] = {}
    for j in wl.jobs:
        key = (j.pods, j.gpus, j.sensitive)
        if key not in out:
            out[key] = choose(idle, HIERARCHY, Gang(j.pods, j.request()),
                              evaluator=ev).bottleneck_gbps
    return out


def clean(gc: GpuCluster) -> None:
    """Delete every Job and pod; wait until no pod is left."""
    from kubernetes import client as k8s

    batch = k8s.BatchV1Api(gc.cp.api_client())
    batch.delete_collection_namespaced_job(NAMESPACE, propagation_policy="Background")
    gc.core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
    wait_until(lambda: not gc.list_pods() and not batch.list_namespaced_job(NAMESPACE).items,
               180, "every Job and pod gone", interval_s=0.5)


def run_seed(seed: int, jobs: int, rate: float, scale: float,
             stacks: Sequence[str] = STACKS) -> dict[str, Any]:
    wl = workload(seed, jobs, rate)
    ideal = ideal_bottlenecks(wl)
    out: dict[str, Any] = {"jobs": len(wl.jobs), "gangs": sum(j.gang for j in wl.jobs)}
    binaries = find_binaries()
    bound = POSTPONE_MAX_S / scale  # the postponement's bound, scaled as the jobs' times
    with ControlPlane(binaries) as cp, GpuCluster(
            cp, extender_args=["--postpone-max-s", f"{bound:g}"]) as gc:
        cp.start_controller_manager(("job",))
        stages = job_stages(cp.default_kwok_stages(), cp.workdir / "kwok-job-stages.yaml")
        gc.start([(n, MACHINE) for n in RACKS], kwok_stages=stages, extender=False,
                 scheduler=False,
                 labels={n: {LABEL_BLOCK: "b0", LABEL_RACK: r} for n, r in RACKS.items()})
        cp.core_v1().create_namespace(cast(Any, {"metadata": {"name": "gputopo-system"}}))
        for stack in stacks:
            planner = None
            if stack == "default":
                gc.start_scheduler(_default_scheduler_config(), name="kube-scheduler-default")
            else:
                gc.extender.start()
                gc.start_scheduler(scheduler_config(gc.extender.url))
                settings = cp.workdir / "planner.yaml"
                settings.write_text(yaml.safe_dump({"debounce_s": 0.1,
                                                    "postpone_max_s": bound}))
                profiles = resources.files("simulator").joinpath("data/andreas-profiles.yaml")
                planner = PlannerProcess(cp.kubeconfig_path, cp.workdir / "logs" /
                                         "gputopo-planner.log", Path(str(profiles)),
                                         interval_s=1.0, extra_args=[
                                             "--namespace", NAMESPACE, "--config",
                                             str(settings)]).start()
            t = time.monotonic()
            load_before = _uptime()
            try:
                row = Replay(gc, wl, stack, f"{stack}-{seed}", scale, ideal).execute()
            finally:
                if planner is not None:
                    planner.stop()
            row["wall_s"] = round(time.monotonic() - t, 1)
            row["uptime_before"], row["uptime_after"] = load_before, _uptime()
            out[stack] = row
            print(f"  seed {seed} {stack:8s}: makespan {row['makespan_s']:.0f} s, mean JCT "
                  f"{row['mean_jct_s']:.0f} s, worst sensitive {row['worst_sensitive_gbps']} "
                  f"GB/s, partial {row['partial_gpu_hours']} GPU-h, timeouts "
                  f"{row['timeouts']} ({row['wall_s']:.0f} s)", flush=True)
            gc.stop_scheduler()
            clean(gc)
    return out


def ratios(res: Mapping[str, Any]) -> dict[str, float]:
    """gputopo's row over the default stack's, for one seed."""
    d, g = res["default"], res["gputopo"]
    return {
        "makespan": round(g["makespan_s"] / d["makespan_s"], 3),
        "mean_jct": round(g["mean_jct_s"] / d["mean_jct_s"], 3),
        "worst_sensitive_bandwidth": round(g["worst_sensitive_gbps"]
                                           / d["worst_sensitive_gbps"], 2),
    }


def _uptime() -> str:
    """``uptime``'s line (the shared machine's load: the replay is wall-time scaled)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _default_scheduler_config() -> str:
    return yaml.safe_dump({"apiVersion": "kubescheduler.config.k8s.io/v1",
                           "kind": "KubeSchedulerConfiguration",
                           "profiles": [{"schedulerName": "default-scheduler"}]})


def markdown(doc: Mapping[str, Any]) -> str:
    lines = [
        f"`{doc.get('command', 'python -m benchmarks.bench_headline')}`: {doc['nodes']} "
        f"{doc['machine']} nodes in two racks, {doc['jobs']} jobs a seed at "
        f"{doc['rate_per_min']} a minute, time divided by {doc['scale']:g}; figures in "
        "unscaled seconds. Wall time and `uptime` per stack are in headline.json "
        f"(start: {doc.get('uptime_start', '?')}; end: {doc.get('uptime_end', '?')}).",
        "",
        "| seed | stack | makespan, s | mean JCT, s | worst sensitive job, GB/s | p25 / median "
        "| GPU-h held by partial gangs | rendezvous timeouts | extra: lowest share of own "
        "best |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    worst_lines = []
    for seed, res in doc["seeds"].items():
        if "ratios" not in res:
            continue
        for stack in STACKS:
            r = res[stack]
            lines.append(f"| {seed} | {stack} | {r['makespan_s']:.0f} | {r['mean_jct_s']:.0f} | "
                         f"{r['worst_sensitive_gbps']:.1f} | {r['p25_sensitive_gbps']:.1f} / "
                         f"{r['median_sensitive_gbps']:.1f} | {r['partial_gpu_hours']:.1f} | "
                         f"{r['timeouts']} | {_pct(r.get('worst_sensitive_share_of_ideal'))} |")
            w = r.get("worst_sensitive_job")
            if w:
                where = ", ".join(f"{n} {{{','.join(map(str, g))}}}" for n, g in w["placed"])
                worst_lines.append(f"- seed {seed}, {stack}: {w['job']} ({w['pods']} × "
                                   f"{w['gpus_per_pod']} GPUs) on {where}: "
                                   f"{r['worst_sensitive_gbps']:.1f} GB/s (its shape's best "
                                   f"on the idle cluster: {w['ideal_gbps']:.1f})")
        q = res["ratios"]
        lines.append(f"| {seed} | **gputopo / default** | **{q['makespan']:.2f}x** | "
                     f"**{q['mean_jct']:.2f}x** | **{q['worst_sensitive_bandwidth']:.2f}x** | "
                     "| | | |")
    lines += [
        "",
        "Extra column, not the target (which compares absolute GB/s): the lowest, over a "
        "run's sensitive jobs, of a job's bandwidth over the best its shape gets on the idle "
        "cluster. The worst sensitive job of each run:",
        "",
        *worst_lines,
        "",
        "Limits: kwok nodes, no GPU runs; a job's bandwidth is predicted (gputopo-v1 on its "
        "pattern inside each node, ranks in the ring order with the best bottleneck, as NCCL's "
        "ring search finds, on both stacks; the inter-node ring through the NICs its GPUs use, "
        "at the rack's or the spine's share) and sets its run time. A gang whose pods hold 4 "
        "GPUs each and that spans nodes is NIC-bound (about 25 GB/s) wherever it runs.",
    ]
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.0f} %"


def plot(doc: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = [s for s, res in doc["seeds"].items() if "ratios" in res]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    for ax, key, title in zip(axes, ("makespan_s", "mean_jct_s", "worst_sensitive_gbps"),
                              ("makespan, s", "mean job completion time, s",
                               "worst sensitive job, GB/s"), strict=True):
        x = range(len(seeds))
        w = 0.38
        for k, stack in enumerate(STACKS):
            vals = [doc["seeds"][s][stack][key] for s in seeds]
            ax.bar([i + (k - 0.5) * w for i in x], vals, w, label=stack,
                   color=("#999999", "#4c72b0")[k])
        ax.set_xticks(list(x), [f"seed {s}" for s in seeds])
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=2, frameon=False)
    fig.suptitle("8 DGX-1 V100 in 2 racks, real kube-scheduler: default stack vs gputopo",
                 x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_headline",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--rate", type=float, default=0.6, help="jobs per (unscaled) minute")
    ap.add_argument("--scale", type=float, default=30.0, help="time divided by this")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--stacks", default=",".join(STACKS),
                    help="run only these stacks, merged into --out's headline.json (each "
                         "stack's wall time and uptime are kept in its row)")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite headline.md and headline.png from --out's headline.json")
    args = ap.parse_args(argv)
    if args.render:
        done = json.loads((args.out / "headline.json").read_text())
        (args.out / "headline.md").write_text(markdown(done) + "\n")
        plot(done, args.out / "headline.png")
        print(markdown(done))
        return 0
    doc: dict[str, Any] = {"benchmark": "bench_headline", "machine": MACHINE,
                           "nodes": len(RACKS), "jobs": args.jobs, "rate_per_min": args.rate,
                           "scale": args.scale, "cpus": os.cpu_count(),
                           "command": " ".join(["python -m benchmarks.bench_headline",
                                                *(argv if argv is not None else sys.argv[1:])]),
                           "uptime_start": _uptime(), "seeds": {}}
    stacks = [s for s in STACKS if s in args.stacks.split(",")]
    if not stacks:
        ap.error(f"--stacks: none of {', '.join(STACKS)}")
    if len(stacks) < len(STACKS) and (args.out / "headline.json").exists():
        done = json.loads((args.out / "headline.json").read_text())
        if (done.get("jobs"), done.get("rate_per_min"), done.get("scale")) == \
                (args.jobs, args.rate, args.scale):
            doc["seeds"] = done.get("seeds", {})
            doc["command"] = f"{done.get('command')}; {doc['command']}"
            doc["uptime_start"] = done.get("uptime_start", doc["uptime_start"])
    for seed in (int(s) for s in args.seeds.split(",") if s.strip()):
        res = doc["seeds"].setdefault(str(seed), {})
        res.update(run_seed(seed, args.jobs, args.rate, args.scale, stacks))
        if all(s in res for s in STACKS):
            res["ratios"] = ratios(res)
        args.out.mkdir(parents=True, exist_ok=True)
        doc["uptime_end"] = _uptime()
        (args.out / "headline.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "headline.md").write_text(markdown(doc) + "\n")
    plot(doc, args.out / "headline.png")
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
