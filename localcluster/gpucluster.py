"""GPU nodes, the gputopo extender and GPU pods on a :class:`~localcluster.ControlPlane`.

Shared by the end-to-end scheduling tests (``tests/e2e/test_scheduling.py``), the scheduler
throughput benchmark (``benchmarks/bench_scheduler.py``) and ``gputopo cluster-demo``::

    with ControlPlane() as cp, GpuCluster(cp) as cluster:
        cluster.start([("dgx-0", "dgx1-v100"), ("a100-0", "dgx-a100")])
        cluster.create_pod(GpuPod("ring", gpus=4, pattern="ring"))
        node = cluster.wait_bound(["ring"], timeout_s=60)["ring"]

Pieces:

* :func:`add_gpu_node`: a kwok node carrying what the device plugin would publish
  (``gpunode.publish.node_metadata``: the ``gputopo.io/topology`` annotation, the vGPU
  memory unit, the model and topology-class labels) and the capacity the kubelet would report
  from the plugin's devices (``nvidia.com/gpu`` = GPUs, ``gputopo.io/vgpu-core`` = 100 per GPU,
  ``gputopo.io/vgpu-memory`` = units per GPU, summed, ``gputopo.io/gpu-shared`` = co-location
  slots per GPU × GPUs).
* :class:`ExtenderProcess`: the real ``gputopo extender --state kubernetes`` as a child process
  on 127.0.0.1, stopped (or killed) by PID.
* :func:`scheduler_config`: the chart's KubeSchedulerConfiguration
  (:func:`localcluster.chart.render_scheduler_config`) with leader election off.
* :class:`GpuPod`: a GPU pod for ``gputopo-scheduler`` (whole GPUs, a share, or a
  co-location slot with its profile).

kwok nodes count ``gputopo.io/vgpu-memory`` in the contract's units
(:data:`topology.contract.DEFAULT_VGPU_MEMORY_UNIT_MIB`, 256 MiB), as the device
plugin and the extender do; :class:`GpuPod` takes MiB and writes units.
"""

from __future__ import annotations

import atexit
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from device_plugin.devices import memory_units
from gpunode.publish import node_metadata
from localcluster.chart import render_scheduler_config
from localcluster.controlplane import ControlPlane, ControlPlaneError, free_port, wait_until
from localcluster.process import ChildProcess, ManagedProcess
from scheduler_extender.podspec import pod_resources
from topology import catalog
from topology.colocation.model import DEFAULT_SLOTS
from topology.contract import (
    ANN_BW_SENSITIVE,
    ANN_PATTERN,
    ANN_POLICY,
    ANN_PROFILE,
    DEFAULT_VGPU_MEMORY_UNIT_MIB,
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
    Assignment,
    AssignmentError,
    node_state_of,
    parse_assignment,
)
from topology.discovery.nics import node_network
from topology.model import Topology, format_cpu_list
from topology.numa_alignment import KubeletConfig
from topology.policies.base import FULL_CORE, NodeState

SCHEDULER_NAME = "gputopo-scheduler"
"""The profile name of the chart's KubeSchedulerConfiguration (pods set it as schedulerName)."""

KWOK_VGPU_MEMORY_UNIT_MIB = DEFAULT_VGPU_MEMORY_UNIT_MIB
"""MiB per ``gputopo.io/vgpu-memory`` unit on kwok GPU nodes (see the module docstring)."""

DEFAULT_NAMESPACE = "default"
POD_IMAGE = "registry.k8s.io/pause:3.10"


def gputopo_command() -> list[str]:
    """The ``gputopo`` command of this interpreter's environment (the console script beside
    ``sys.executable``, else ``python -m gputopo_cli.main``)."""
    exe = Path(sys.executable).parent / "gputopo"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "gputopo_cli.main"]


# ---------------------------------------------------------------------------- nodes
def resolve_machine(machine: str | Topology) -> Topology:
    """A catalog topology by name (a :class:`Topology` is returned as is).

    Raises:
        topology.catalog.UnknownMachine: no such catalog entry.
    """
    return machine if isinstance(machine, Topology) else catalog.get(machine)


def gpu_capacity(
    topology: Topology, unit_mib: int, shared_slots: int = DEFAULT_SLOTS
) -> dict[str, str]:
    """The extended-resource capacity the kubelet reports for the device plugin's devices:
    ``nvidia.com/gpu`` (GPUs), ``gputopo.io/vgpu-core`` (100 per GPU),
    ``gputopo.io/vgpu-memory`` (⌊memory MiB / ``unit_mib``⌋ per GPU, summed),
    ``gputopo.io/gpu-shared`` (``shared_slots`` per GPU; none when 0)."""
    out = {
        RESOURCE_GPU: str(topology.size),
        RESOURCE_VGPU_CORE: str(100 * topology.size),
        RESOURCE_VGPU_MEMORY: str(sum(memory_units(g.memory_mib, unit_mib) for g in topology.gpus)),
    }
    if shared_slots:
        out[RESOURCE_GPU_SHARED] = str(shared_slots * topology.size)
    return out


def add_gpu_node(
    cp: ControlPlane,
    name: str,
    machine: str | Topology,
    *,
    unit_mib: int = KWOK_VGPU_MEMORY_UNIT_MIB,
    taints: Sequence[Mapping[str, str]] = (),
    shared_slots: int = DEFAULT_SLOTS,
    kubelet: KubeletConfig | None = None,
    labels: Mapping[str, str] | None = None,
) -> Topology:
    """Create a kwok GPU node looking as if the device plugin ran on it.

    Args:
        cp: a started control plane.
        name: node name.
        machine: a catalog name (``dgx1-v100``, ``dgx-a100``, ``pcie-8gpu``, ...) or a topology.
        unit_mib: MiB per ``gputopo.io/vgpu-memory`` unit (published and used for capacity).
        taints: ``{"key", "value", "effect"}`` taints to put on the node.
        shared_slots: co-location slots per GPU (published as ``gputopo.io/gpu-shared-slots``
            and counted in the ``gputopo.io/gpu-shared`` capacity).
        kubelet: the kubelet NUMA-alignment settings its plugin publishes (None: the
            kubelet's defaults).
        labels: more node labels (e.g. its block and rack: ``topology.gputopo.io/rack``).

    Returns:
        The node's topology (its annotation is ``topology.serialization.dumps`` of it).

    Raises:
        topology.catalog.UnknownMachine: unknown catalog name.
        kubernetes.client.exceptions.ApiException: the API server refused.
    """
    topo = resolve_machine(machine)
    network = node_network(topo, machine if isinstance(machine, str) else None)
    meta = node_metadata(topo, frozenset(), unit_mib, shared_slots, kubelet=kubelet,
                         network=network)
    cpus = {c for g in topo.gpus for c in g.cpu_affinity}
    capacity = {"cpu": str(max(len(cpus), 8)), "memory": "1Ti",
                **gpu_capacity(topo, unit_mib, shared_slots)}
    cp.add_kwok_node(name, capacity, annotations=meta.annotations,
                     labels={**meta.labels, **(labels or {})})
    if taints:
        cp.core_v1().patch_node(name, {"spec": {"taints": [dict(t) for t in taints]}})
    return topo


# ---------------------------------------------------------------------------- extender
class ExtenderProcess(ChildProcess):
    """``gputopo extender --state kubernetes`` on 127.0.0.1 as a child process.

    Args:
        kubeconfig: what the extender authenticates with.
        log_path: its log (appended to across restarts).
        policy: the default placement policy.
        port: listen port (default: a free one, kept across restarts).
        extra_args: more ``gputopo extender`` flags.
        ssl_context: the extender serves HTTPS (``--tls-cert`` … in ``extra_args``): the
            client context its readiness probe and :meth:`post` use (CA, client certificate).

    The child gets no ``GPUTOPO_EXTENDER_*`` variables from this environment, so only the
    flags decide its settings.
    """

    def __init__(
        self,
        kubeconfig: Path,
        log_path: Path,
        *,
        policy: str = "gputopo",
        port: int | None = None,
        extra_args: Sequence[str] = (),
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.ssl_context = ssl_context
        self.log_path = log_path
        self.policy = policy
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.process: ManagedProcess | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (``https://`` with an ``ssl_context``)."""
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}"

    def start(self, ready_timeout_s: float = 60.0) -> ExtenderProcess:
        """Start it and wait until ``/readyz`` says its state is synced (nodes and pods listed).

        Raises:
            ControlPlaneError: it exited, or was not ready within ``ready_timeout_s``.
        """
        if self.process is not None and not self.process.exited():
            raise ControlPlaneError("the extender is already running")
        args = [
            *gputopo_command(), "extender", "--state", "kubernetes",
            "--kubeconfig", str(self.kubeconfig), "--host", "127.0.0.1",
            "--port", str(self.port), "--policy", self.policy, *self.extra_args,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTOPO_EXTENDER_")}
        proc = ManagedProcess("gputopo-extender", args, self.log_path, env=env)
        self.process = proc.start()
        self.starts += 1
        atexit.register(self.stop)  # never outlive the caller, even without stop()

        def ready() -> bool:
            if proc.exited():
                raise ControlPlaneError(
                    f"gputopo extender exited while starting; log {self.log_path}:\n"
                    f"{proc.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=2,
                                            context=self.ssl_context) as resp:
                    return bool(resp.status == 200)
            except (OSError, urllib.error.URLError):
                return False

        deadline = time.monotonic() + ready_timeout_s
        while not ready():
            if time.monotonic() >= deadline:
                self.stop()
                raise ControlPlaneError(
                    f"gputopo extender not ready after {ready_timeout_s:.0f} s; log "
                    f"{self.log_path}:\n{proc.log_tail()}"
                )
            time.sleep(0.1)
        return self

    def post(self, verb: str, body: Mapping[str, Any], timeout_s: float = 10.0) -> Any:
        """POST ``body`` to ``/<verb>`` and return the decoded JSON reply.

        Raises:
            OSError: the request failed.
        """
        req = urllib.request.Request(
            f"{self.url}/{verb}", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}, method="POST",
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=timeout_s, context=self.ssl_context) as resp:
            return json.loads(resp.read())

    def idle_nodes(self, nodes: Sequence[str], gpus: int = 8) -> set[str]:
        """The nodes on which the extender sees at least ``gpus`` free GPUs (a ``/filter``
        probe for an anonymous pod: it changes no state)."""
        probe = GpuPod("idle-probe", gpus=gpus).manifest()
        reply = self.post("filter", {"Pod": probe, "NodeNames": list(nodes)})
        return set(reply.get("NodeNames") or [])


def scheduler_config(extender_url: str, **values: Any) -> str:
    """The chart's KubeSchedulerConfiguration for ``extender_url``, leader election off.

    Raises:
        localcluster.chart.ChartError, BinariesUnavailable: see ``render_scheduler_config``.
    """
    scheduler = dict(values.pop("scheduler", {}) or {})
    scheduler.setdefault("leaderElection", {"enabled": False})
    return render_scheduler_config(extender_url, scheduler=scheduler, **values)


def scheduler_name(config_yaml: str) -> str:
    """The ``schedulerName`` of the configuration's (first) profile."""
    cfg = yaml.safe_load(config_yaml) or {}
    profiles = cfg.get("profiles") or [{}]
    return str(profiles[0].get("schedulerName") or "default-scheduler")


# ---------------------------------------------------------------------------- pods
@dataclass(frozen=True)
class GpuPod:
    """A pod asking for whole GPUs (``gpus``), a share (``core_percent``/``memory_mib``), a
    co-location slot (``shared``, with ``memory_mib`` as its reserved GPU memory), or nothing
    gputopo manages (all zero).

    Attributes:
        name: pod name.
        gpus: ``nvidia.com/gpu``.
        core_percent: ``gputopo.io/vgpu-core``.
        memory_mib: GPU memory of a share, MiB; written as ``gputopo.io/vgpu-memory`` units
            of 256 MiB, rounded up.
        pattern: ``gputopo.io/pattern`` annotation (None: not set).
        sensitive: ``gputopo.io/bandwidth-sensitive`` annotation (None: not set).
        policy: ``gputopo.io/policy`` annotation (None: not set).
        node_selector: ``spec.nodeSelector``.
        tolerations: ``spec.tolerations`` (dicts as in the API).
        labels: extra labels.
        priority_class: ``spec.priorityClassName`` (None: the cluster default, priority 0).
        shared: ask for one ``gputopo.io/gpu-shared`` co-location slot.
        profile: ``gputopo.io/profile`` annotation (``<model>:<batch>``; None: not set).
        annotations: more annotations (e.g. ``gputopo.io/kernel-occupancy``).
    """

    name: str
    gpus: int = 0
    core_percent: int = 0
    memory_mib: int = 0
    pattern: str | None = None
    sensitive: bool | None = None
    policy: str | None = None
    node_selector: Mapping[str, str] | None = None
    tolerations: Sequence[Mapping[str, str]] = ()
    labels: Mapping[str, str] | None = None
    priority_class: str | None = None
    shared: bool = False
    profile: str | None = None
    annotations: Mapping[str, str] | None = None

    @property
    def fractional(self) -> bool:
        """A share of one GPU."""
        return self.gpus == 0 and not self.shared and (
            self.core_percent > 0 or self.memory_mib > 0)

    def limits(self) -> dict[str, str]:
        """The container's gputopo resource limits."""
        out: dict[str, str] = {}
        if self.gpus:
            out[RESOURCE_GPU] = str(self.gpus)
        if self.shared:
            out[RESOURCE_GPU_SHARED] = "1"
        if self.core_percent:
            out[RESOURCE_VGPU_CORE] = str(self.core_percent)
        if self.memory_mib:
            units = -(-self.memory_mib // KWOK_VGPU_MEMORY_UNIT_MIB)
            out[RESOURCE_VGPU_MEMORY] = str(units)
        return out

    def manifest(
        self, namespace: str = DEFAULT_NAMESPACE, scheduler: str = SCHEDULER_NAME
    ) -> dict[str, Any]:
        """The ``v1.Pod`` (a JSON dict) to create."""
        annotations: dict[str, str] = dict(self.annotations or {})
        if self.profile is not None:
            annotations[ANN_PROFILE] = self.profile
        if self.pattern is not None:
            annotations[ANN_PATTERN] = self.pattern
        if self.sensitive is not None:
            annotations[ANN_BW_SENSITIVE] = "true" if self.sensitive else "false"
        if self.policy is not None:
            annotations[ANN_POLICY] = self.policy
        limits = self.limits()
        spec: dict[str, Any] = {
            "schedulerName": scheduler,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "main", "image": POD_IMAGE,
                "resources": {"requests": {"cpu": "10m", **limits}, "limits": limits},
            }],
        }  # fmt: skip
        if self.node_selector:
            spec["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            spec["tolerations"] = [dict(t) for t in self.tolerations]
        if self.priority_class:
            spec["priorityClassName"] = self.priority_class
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name, "namespace": namespace,
                "labels": {"app.kubernetes.io/part-of": "gputopo-e2e", **(self.labels or {})},
                "annotations": annotations,
            },
            "spec": spec,
        }  # fmt: skip


def pod_node(pod: Mapping[str, Any]) -> str | None:
    """``spec.nodeName`` of a pod dict (None while unbound)."""
    return (pod.get("spec") or {}).get("nodeName") or None


def pod_annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    """``metadata.annotations`` of a pod dict."""
    return dict((pod.get("metadata") or {}).get("annotations") or {})


@dataclass(frozen=True)
class Placement:
    """Where a bound GPU pod landed, read back from the API.

    Attributes:
        pod: pod name.
        node: ``spec.nodeName``.
        assignment: its ``gputopo.io/*`` output annotations, parsed.
        requested: its gputopo resource demand (``scheduler_extender.podspec.pod_resources``).
    """

    pod: str
    node: str
    assignment: Assignment
    requested: Mapping[str, int]


def placement_of(pod: Mapping[str, Any]) -> Placement | None:
    """The placement of a bound pod that asks for gputopo resources (None: unbound, or
    no gputopo resources).

    Raises:
        AssignmentError: it is bound but its annotations are missing or inconsistent.
    """
    node = pod_node(pod)
    requested = pod_resources(pod)
    if node is None or not any(requested.values()):
        return None
    return Placement(pod["metadata"]["name"], node, parse_assignment(pod_annotations(pod)),
                     requested)


def node_state(placements: Iterable[Placement], node: str) -> NodeState:
    """The used GPUs of ``node`` as the extender rebuilds them from these placements'
    annotations (whole GPUs: 100 % core; shares: summed)."""
    return node_state_of(pl.assignment for pl in placements if pl.node == node)


def booking_problems(
    pods: Iterable[Mapping[str, Any]], topologies: Mapping[str, Topology],
    slots: int = DEFAULT_SLOTS,
) -> list[str]:
    """Everything wrong with the GPU bookings of ``pods`` (empty: all consistent).

    Checked for every bound pod asking for gputopo resources: its annotations parse and name
    its node; the GPUs exist on that node's topology (``topologies``) with the annotated
    UUIDs, CPU affinity and NUMA nodes; a whole-GPU pod got as many GPUs as it asked for, a
    share pod one GPU with the core percentage it asked for, a co-location pod
    (``gputopo.io/gpu-shared``) one GPU with its co-location record; and per node no GPU is
    held whole by two pods or whole and shared at once, no GPU carries both vGPU shares and
    co-located jobs or more co-located jobs than ``slots``, and the shares (or co-located
    jobs) of one GPU add up to at most 100 % of its compute and its memory (MiB).
    """
    problems: list[str] = []
    whole: dict[tuple[str, int], str] = {}
    shares: dict[tuple[str, int], list[tuple[str, int, int]]] = {}
    colocated: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for pod in pods:
        name = (pod.get("metadata") or {}).get("name", "?")
        try:
            pl = placement_of(pod)
        except AssignmentError as exc:
            problems.append(f"{name}: {exc}")
            continue
        if pl is None:
            continue
        a = pl.assignment
        topo = topologies.get(pl.node)
        if a.node != pl.node:
            problems.append(f"{name}: annotated for node {a.node}, bound to {pl.node}")
        if topo is None:
            problems.append(f"{name}: bound to {pl.node}, which has no known topology")
            continue
        if any(i < 0 or i >= topo.size for i in a.gpu_indices):
            problems.append(f"{name}: GPU indices {a.gpu_indices} not on {pl.node}")
            continue
        uuids = tuple(topo.gpus[i].uuid for i in a.gpu_indices)
        if a.gpu_uuids != uuids:
            problems.append(f"{name}: UUIDs {a.gpu_uuids} are not {pl.node}'s GPUs {uuids}")
        cpus = format_cpu_list(topo.cpu_affinity(a.gpu_indices))
        if a.cpu_affinity != cpus:
            problems.append(f"{name}: cpu-affinity {a.cpu_affinity!r}, expected {cpus!r}")
        if a.numa_nodes != topo.numa_nodes(a.gpu_indices):
            problems.append(f"{name}: numa-nodes {a.numa_nodes}, expected "
                            f"{topo.numa_nodes(a.gpu_indices)}")
        gpus = pl.requested[RESOURCE_GPU]
        if pl.requested[RESOURCE_GPU_SHARED]:
            if not a.shared or len(a.gpu_indices) != 1:
                problems.append(f"{name}: asked for a co-location slot, got {a.gpu_indices} "
                                "without a co-location record")
                continue
            colocated.setdefault((pl.node, a.gpu_indices[0]), []).append((name, a.memory_mib))
        elif gpus:
            if a.fractional or len(a.gpu_indices) != gpus:
                problems.append(f"{name}: asked for {gpus} GPUs, got {a.gpu_indices} "
                                f"(share {a.core_percent}%/{a.memory_mib} MiB)")
            for i in a.gpu_indices:
                other = whole.setdefault((pl.node, i), name)
                if other != name:
                    problems.append(f"{pl.node} GPU {i} given to both {other} and {name}")
        else:
            if not a.fractional or len(a.gpu_indices) != 1:
                problems.append(f"{name}: asked for a share, got {a.gpu_indices} whole")
                continue
            if a.core_percent != pl.requested[RESOURCE_VGPU_CORE]:
                problems.append(f"{name}: asked for {pl.requested[RESOURCE_VGPU_CORE]}% of a "
                                f"GPU, granted {a.core_percent}%")
            shares.setdefault((pl.node, a.gpu_indices[0]), []).append(
                (name, a.core_percent, a.memory_mib))
    for (node, i), held in sorted(shares.items()):
        names = ", ".join(n for n, _, _ in held)
        if (node, i) in whole:
            problems.append(f"{node} GPU {i} held whole by {whole[(node, i)]} and shared by "
                            f"{names}")
        core = sum(c for _, c, _ in held)
        mem = sum(m for _, _, m in held)
        capacity = topologies[node].gpus[i].memory_mib
        if core > FULL_CORE or mem > capacity:
            problems.append(f"{node} GPU {i} over-committed: {core}% and {mem} of {capacity} "
                            f"MiB ({names})")
    for (node, i), jobs in sorted(colocated.items()):
        names = ", ".join(n for n, _ in jobs)
        if (node, i) in whole:
            problems.append(f"{node} GPU {i} held whole by {whole[(node, i)]} and co-located "
                            f"by {names}")
        if (node, i) in shares:
            problems.append(f"{node} GPU {i} split into vGPU shares and co-located by {names}")
        mem = sum(m for _, m in jobs)
        capacity = topologies[node].gpus[i].memory_mib
        if len(jobs) > slots or mem > capacity:
            problems.append(f"{node} GPU {i} over-committed: {len(jobs)} co-located jobs "
                            f"(slots {slots}), {mem} of {capacity} MiB ({names})")
    return problems


# ---------------------------------------------------------------------------- the stack
class GpuCluster:
    """kwok, GPU nodes, the extender and kube-scheduler (the chart's config) on ``cp``.

    Args:
        cp: a started control plane (stopping it stops what this started, too).
        policy: the extender's default policy.
        namespace: where pods go (its ``default`` ServiceAccount is created).
        extender_args: more ``gputopo extender`` flags (e.g. a replay's time-scaled
            ``--postpone-max-s``).
    """

    def __init__(
        self, cp: ControlPlane, *, policy: str = "gputopo", namespace: str = DEFAULT_NAMESPACE,
        extender_args: Sequence[str] = (),
    ) -> None:
        self.cp = cp
        self.namespace = namespace
        self.extender = ExtenderProcess(
            cp.kubeconfig_path, cp.workdir / "logs" / "gputopo-extender.log", policy=policy,
            extra_args=extender_args,
        )
        self.scheduler: ManagedProcess | None = None
        self.scheduler_config = ""
        self.scheduler_name = SCHEDULER_NAME
        self.nodes: dict[str, Topology] = {}

    def __enter__(self) -> GpuCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def core(self) -> k8s_client.CoreV1Api:
        """The admin ``CoreV1Api``."""
        return self.cp.core_v1()

    def start(
        self,
        nodes: Iterable[tuple[str, str | Topology]],
        *,
        extender: bool = True,
        scheduler: bool = True,
        unit_mib: int = KWOK_VGPU_MEMORY_UNIT_MIB,
        kwok_stages: Path | None = None,
        kubelet: Mapping[str, KubeletConfig] | None = None,
        labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        """Start kwok (with ``kwok_stages``, else its default stages), create the namespace
        and GPU nodes (``kubelet``: node name → the kubelet NUMA-alignment settings it
        publishes; ``labels``: node name → more labels), then the extender and the scheduler
        (each optional).

        Raises:
            ControlPlaneError: a process did not start.
            kubernetes.client.exceptions.ApiException: the API server refused an object.
        """
        self.cp.start_kwok(stages=kwok_stages)
        self.cp.create_default_serviceaccount(self.namespace)
        for name, machine in nodes:
            self.nodes[name] = add_gpu_node(self.cp, name, machine, unit_mib=unit_mib,
                                            kubelet=(kubelet or {}).get(name),
                                            labels=(labels or {}).get(name))
        if extender:
            self.extender.start()
        if scheduler:
            self.start_scheduler(scheduler_config(self.extender.url))

    def start_scheduler(self, config_yaml: str, name: str = "gputopo-scheduler") -> None:
        """(Re)start kube-scheduler with ``config_yaml``; the previous one is stopped first."""
        self.stop_scheduler()
        self.scheduler_config = config_yaml
        self.scheduler_name = scheduler_name(config_yaml)
        self.scheduler = self.cp.start_scheduler(config_yaml, name=name)

    def stop_scheduler(self) -> None:
        """Stop kube-scheduler (by PID); pods then wait unscheduled."""
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None

    def stop(self) -> None:
        """Stop the scheduler and the extender by PID (the control plane stops the rest)."""
        self.stop_scheduler()
        self.extender.stop()

    # ------------------------------------------------------------------ pods
    def create_pod(self, pod: GpuPod) -> None:
        """Create ``pod`` in :attr:`namespace` for :attr:`scheduler_name`.

        Raises:
            kubernetes.client.exceptions.ApiException: the API server refused it.
        """
        body = pod.manifest(self.namespace, self.scheduler_name)
        self.core.create_namespaced_pod(self.namespace, cast(Any, body))

    def create_priority_class(self, name: str, value: int) -> None:
        """Create (or keep) the PriorityClass ``name`` with ``value``, preempting lower
        priorities (``preemptionPolicy: PreemptLowerPriority``, the default).

        Raises:
            kubernetes.client.exceptions.ApiException: the API server refused it.
        """
        api = k8s_client.SchedulingV1Api(self.cp.api_client())
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value,
                "preemptionPolicy": "PreemptLowerPriority"}
        try:
            api.create_priority_class(cast(Any, body))
        except ApiException as exc:
            if exc.status != 409:
                raise

    def list_pods(self, label_selector: str = "") -> list[dict[str, Any]]:
        """Pods in :attr:`namespace` as JSON dicts (one LIST)."""
        resp: Any = self.core.list_namespaced_pod(
            self.namespace, label_selector=label_selector or None, _preload_content=False
        )
        items: list[dict[str, Any]] = json.loads(resp.data).get("items") or []
        return items

    def read_node(self, name: str) -> dict[str, Any]:
        """The Node ``name`` as a JSON dict."""
        resp: Any = self.core.read_node(name, _preload_content=False)
        node: dict[str, Any] = json.loads(resp.data)
        return node

    def pods_by_name(self, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """Pods of :attr:`namespace` by name (only ``names`` when given)."""
        wanted = set(names) if names is not None else None
        out = {}
        for p in self.list_pods():
            name = p["metadata"]["name"]
            if wanted is None or name in wanted:
                out[name] = p
        return out

    def wait_pods(
        self,
        names: Iterable[str],
        done: Callable[[dict[str, Any]], bool],
        timeout_s: float,
        what: str = "pods",
    ) -> dict[str, dict[str, Any]]:
        """Poll until every pod of ``names`` satisfies ``done``; return them by name.

        Raises:
            TimeoutError: not all did within ``timeout_s`` (the message names the laggards).
        """
        wanted = list(names)
        last: dict[str, dict[str, Any]] = {}

        def check() -> dict[str, dict[str, Any]] | None:
            nonlocal last
            last = self.pods_by_name(wanted)
            ok = all(n in last and done(last[n]) for n in wanted)
            return last if ok else None

        try:
            return wait_until(check, timeout_s, what, interval_s=0.2)
        except TimeoutError as exc:
            missing = [n for n in wanted if n not in last or not done(last[n])]
            raise TimeoutError(f"{exc}; not yet: {', '.join(missing[:20])}") from None

    def wait_bound(self, names: Iterable[str], timeout_s: float) -> dict[str, dict[str, Any]]:
        """:meth:`wait_pods` until each pod has a node."""
        return self.wait_pods(names, lambda p: pod_node(p) is not None, timeout_s, "pods bound")

    def delete_pods(self, names: Iterable[str], wait_s: float = 60.0) -> None:
        """Delete pods (grace 0) and wait until they are gone (kwok finalises them)."""
        targets = set(names)
        for name in targets:
            try:
                self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        wait_until(
            lambda: not targets & set(self.pods_by_name(targets)), wait_s, "pods deleted",
            interval_s=0.2,
        )  # fmt: skip

    def delete_all_pods(self, wait_s: float = 60.0) -> None:
        """Delete every pod of :attr:`namespace` and wait until they are gone."""
        self.delete_pods([p["metadata"]["name"] for p in self.list_pods()], wait_s)

    def scheduling_events(self, pod: str) -> list[str]:
        """Messages of the pod's ``FailedScheduling`` events (oldest first)."""
        events = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={pod},reason=FailedScheduling"
        )
        return [e.message or "" for e in events.items]
