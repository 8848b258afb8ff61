"""``gputopo cluster-demo``: the main job through a real kube-scheduler on a local control plane.

Steps (each printed as it happens):

1. find (or build, the first time: minutes) etcd, kube-apiserver, kube-scheduler, kwok, helm;
2. start etcd + kube-apiserver on 127.0.0.1, kwok, and kwok GPU nodes with catalog topologies
   (default: three DGX-1 V100, one DGX A100, one 8-GPU PCIe box);
3. start ``gputopo extender --state kubernetes`` and kube-scheduler with the
   KubeSchedulerConfiguration the Helm chart renders (``gpucluster.scheduler_config``);
4. create ``gputopo demo``'s seeded pod stream (:func:`gputopo_cli.demo.make_stream`: 1–5
   GPUs with ring / tree / all-to-all patterns, sensitive or not, some 0.25–0.5 GPU shares) as
   Pods through the API (``kubectl create`` equivalents), all at once;
5. wait (bounded) until every pod is bound, or kube-scheduler has reported why it cannot be;
6. print each pod's node, GPUs and predicted EffBW from its ``gputopo.io/*`` annotations, the
   pending pods with kube-scheduler's reason, and a summary (GPUs in use per node, the sensitive
   multi-GPU pods against the best an idle node of their class offers, a double-booking check);
7. stop everything by PID.

Pods are not deleted during the run (unlike ``gputopo demo``, nothing finishes), so a stream
asking for more GPUs than the cluster has leaves the rest Pending — with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from gputopo_cli.demo import DemoPod, make_stream
from localcluster.binaries import Binaries
from localcluster.controlplane import ControlPlane, wait_until
from localcluster.gpucluster import (
    GpuCluster,
    GpuPod,
    booking_problems,
    placement_of,
    pod_node,
    scheduler_config,
)
from scheduler_extender.podspec import request_from_pod
from topology.model import Topology
from topology.policies.base import NoFit, Request
from topology.policies.evaluate import Evaluator

DEFAULT_NODES = "dgx1-v100:3,dgx-a100:1,pcie-8gpu:1"


def gpu_pod(pod: DemoPod, **fields: Any) -> GpuPod:
    """The :class:`GpuPod` of a pod of ``gputopo demo``'s stream
    (:func:`gputopo_cli.demo.make_stream`): its whole GPUs with pattern and sensitivity
    annotations when it asks for more than one, or its share as ``vgpu-core`` (percent) and
    ``vgpu-memory`` (that share of 16 GiB, in MiB); ``fields`` override the rest."""
    if pod.share:
        return GpuPod(pod.name, core_percent=round(pod.share * 100),
                      memory_mib=round(pod.share * 16384), **fields)
    if pod.gpus > 1:
        return GpuPod(pod.name, gpus=pod.gpus, pattern=pod.pattern, sensitive=pod.sensitive,
                      **fields)
    return GpuPod(pod.name, gpus=pod.gpus, **fields)


@dataclass
class ClusterDemoResult:
    """What the demo saw.

    Attributes:
        bound: pod name → node.
        pending: pod name → kube-scheduler's last FailedScheduling message.
        problems: :func:`localcluster.gpucluster.booking_problems` (empty when consistent).
        control_plane_seconds: ``ControlPlane.start_seconds``.
        stopped_pids: ``(name, pid)`` of every process stopped at the end.
    """

    bound: dict[str, str] = field(default_factory=dict)
    pending: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    control_plane_seconds: float = 0.0
    stopped_pids: list[tuple[str, int]] = field(default_factory=list)


def _asks(p: GpuPod) -> str:
    if p.fractional:
        return f"{p.core_percent}%/{p.memory_mib // 1024}GiB"
    return str(p.gpus)


def _reason(message: str) -> str:
    """The useful middle of a FailedScheduling message (without the preemption epilogue)."""
    return message.split(". no new claims", 1)[0].split(" preemption:", 1)[0].strip()


def _settled(gc: GpuCluster, pods: dict[str, dict[str, Any]]) -> dict[str, str] | None:
    """Pending pod → reason once every pod is bound or has a FailedScheduling event."""
    reasons = {}
    for name, pod in pods.items():
        if pod_node(pod) is None:
            events = gc.scheduling_events(name)
            if not events:
                return None
            reasons[name] = events[-1]
    return reasons


def _best_effbw(
    evaluator: Evaluator, policy: str, topologies: Iterable[Topology], request: Request,
    default: float,
) -> float:
    """The highest EffBW ``policy`` reaches for ``request`` on an idle node of any of
    ``topologies`` (``default`` when none can host it)."""
    best = []
    for topo in topologies:
        try:
            best.append(evaluator.ideal(policy, topo, request).effective_bandwidth_gbps)
        except NoFit:
            continue
    return max(best, default=default)


def run_cluster_demo(
    *,
    nodes: list[tuple[str, Topology]],
    pods: int,
    seed: int,
    policy: str,
    timeout_s: float,
    binaries: Binaries,
    echo: Callable[[str], None] = print,
) -> ClusterDemoResult:
    """Run the demo (see the module docstring) and return what it saw.

    Args:
        nodes: ``(node name, topology)`` of the kwok GPU nodes.
        pods: pods in the stream.
        seed: the stream's seed.
        policy: the extender's default policy.
        timeout_s: how long to wait for the pods to settle.
        binaries: the control-plane executables.
        echo: where lines go.

    Raises:
        ControlPlaneError: a component did not start.
        localcluster.chart.ChartError, BinariesUnavailable: the chart cannot be rendered.
        TimeoutError: the pods did not settle within ``timeout_s``.
    """
    result = ClusterDemoResult()
    stream = [gpu_pod(d) for d in make_stream(pods, seed)]
    echo("binaries: " + ", ".join(
        path.parent.name for path in (binaries.etcd, binaries.kube_apiserver,
                                      binaries.kube_scheduler, binaries.kwok)))
    t0 = time.monotonic()
    with ControlPlane(binaries) as cp, GpuCluster(cp, policy=policy) as gc:
        result.control_plane_seconds = cp.start_seconds or 0.0
        echo(f"control plane: etcd + kube-apiserver on {cp.server_url}, up in "
             f"{result.control_plane_seconds:.1f} s")
        gc.start(nodes, scheduler=False)
        for name, topo in gc.nodes.items():
            echo(f"  node {name:<14} {topo.name:<10} {topo.size} GPUs  "
                 f"{topo.gpus[0].name}  (kwok)")
        echo(f"extender: gputopo extender --state kubernetes --policy {policy}, "
             f"{gc.extender.url} (pid {gc.extender.pid})")
        config = scheduler_config(gc.extender.url)
        gc.start_scheduler(config)
        ext = (yaml.safe_load(config).get("extenders") or [{}])[0]
        assert gc.scheduler is not None
        echo(f"kube-scheduler: profile {gc.scheduler_name}, the chart's config (extender "
             f"weight {ext.get('weight')}, nodeCacheCapable {ext.get('nodeCacheCapable')}) "
             f"(pid {gc.scheduler.pid})")
        echo(f"cluster ready in {time.monotonic() - t0:.1f} s")
        echo("")

        for p in stream:
            gc.create_pod(p)
        echo(f"created {len(stream)} pods (seed {seed}) in namespace {gc.namespace}; "
             f"waiting for kube-scheduler ...")
        t_sub = time.monotonic()
        names = [p.name for p in stream]
        wait_until(lambda: _settled(gc, gc.pods_by_name(names)) is not None, timeout_s,
                   "every pod bound or refused by kube-scheduler", interval_s=0.25)
        live = gc.pods_by_name(names)
        pending = _settled(gc, live) or {}
        echo(f"settled in {time.monotonic() - t_sub:.1f} s")
        echo("")
        echo(f"{'pod':<8} {'asks':>9}  {'pattern':<10} {'sens':<4}   {'node':<14} "
             f"{'GPUs':<16} EffBW (GB/s, predicted)")
        sensitive: list[tuple[float, float, float]] = []  # got, best of its class, best here
        classes = {t.topology_class: t for t in gc.nodes.values()}
        evaluator = Evaluator()
        for p in stream:
            sens = "yes" if p.sensitive else "no"
            pattern = p.pattern or "-"
            head = f"{p.name:<8} {_asks(p):>9}  {pattern:<10} {sens:<4}"
            pl = placement_of(live[p.name])
            if pl is None:
                reason = _reason(pending.get(p.name, "no scheduling decision yet"))
                echo(f"{head} Pending: {reason}")
                result.pending[p.name] = pending.get(p.name, "")
                continue
            result.bound[p.name] = pl.node
            a = pl.assignment
            gpus = ",".join(map(str, a.gpu_indices))
            if a.fractional:
                gpus += f" ({a.core_percent}%, {a.memory_mib} MiB)"
            eff = f"{a.effective_bandwidth_gbps:6.1f}" if len(a.gpu_indices) > 1 else "     -"
            echo(f"{head} -> {pl.node:<14} {gpus:<16} {eff}")
            if sens == "yes":
                request = request_from_pod(p.manifest())
                assert request is not None
                got = a.effective_bandwidth_gbps
                best = _best_effbw(evaluator, policy, [gc.nodes[pl.node]], request, got)
                anywhere = _best_effbw(evaluator, policy, classes.values(), request, got)
                sensitive.append((got, best, anywhere))

        result.problems = booking_problems(live.values(), gc.nodes)
        placements = [pl for pod in live.values() if (pl := placement_of(pod)) is not None]
        echo("")
        echo(f"summary: {len(result.bound)}/{len(stream)} pods bound by kube-scheduler through "
             f"the gputopo extender, {len(result.pending)} pending")
        for name, topo in gc.nodes.items():
            here = [pl.assignment for pl in placements if pl.node == name]
            whole = sum(len(a.gpu_indices) for a in here if not a.fractional)
            shared = {a.gpu_indices[0] for a in here if a.fractional}
            echo(f"  {name:<14} {whole}/{topo.size} GPUs whole, {len(shared)} shared")
        if sensitive:
            n = len(sensitive)
            class_best = sum(1 for got, best, _ in sensitive if got >= best - 0.05)
            any_best = sum(1 for got, _, anywhere in sensitive if got >= anywhere - 0.05)
            mean = sum(got for got, _, _ in sensitive) / n
            echo(f"  bandwidth-sensitive multi-GPU pods: {n}, mean predicted EffBW "
                 f"{mean:.1f} GB/s; the best an idle node offers: {class_best}/{n} of their "
                 f"node's class, {any_best}/{n} of any class in this cluster")
        echo("  GPU bookings (annotations vs topology, nothing given twice): "
             + ("consistent" if not result.problems else "; ".join(result.problems)))
        for proc in [gc.extender.process, *reversed(cp.processes)]:
            if proc is not None and proc.pid is not None:
                result.stopped_pids.append((proc.name, proc.pid))
    echo("stopped by PID: " + ", ".join(f"{n} ({pid})" for n, pid in result.stopped_pids))
    return result
