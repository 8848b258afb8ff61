"""Wiring: settings → NVML (real or fake) → topology → servers, watcher, health, publishing,
metrics; and a clean shutdown on SIGTERM/SIGINT (our sockets removed).

This is the only module that knows every piece; each piece takes plain values and can be
built on its own in tests (see ``tests/device_plugin``).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from device_plugin.allocation import Allocator, Inventory
from device_plugin.devices import RESOURCES, ResourceSpec
from device_plugin.kubelet_config import KubeletConfigFileError, resolve_kubelet_config
from device_plugin.kubelet_view import KubeletView, NoKubeletView, PodResourcesClient
from device_plugin.metrics import Metrics
from device_plugin.pods import FilePodSource, KubePodSource, PodSource
from device_plugin.profiling import (
    ConfigMapProfileSink,
    FileProfileSink,
    ProfileLoop,
    ProfileSink,
)
from device_plugin.registration import KubeletWatcher
from device_plugin.server import DevicePluginServicer, ResourceServer
from device_plugin.settings import DevicePluginSettings
from gpunode import kube
from gpunode.container import minor_numbers
from gpunode.health import HealthState, start_nvml_watch, start_xid_file_feeder
from gpunode.publish import (
    FileNodePublisher,
    KubeNodePublisher,
    NodePublisher,
    PublishLoop,
    node_metadata,
)
from gpunode.signals import run_until_signalled
from topology.contract import RESOURCE_VGPU_MEMORY
from topology.discovery.nics import node_network
from topology.model import Topology, TopologyError
from topology.numa_alignment import KubeletConfig, KubeletConfigError
from topology.sources import describe_memory, unknown_memory

log = logging.getLogger("device_plugin")


class PluginError(RuntimeError):
    """The plugin cannot start; the message is one line."""


def core_api(kubeconfig: Path | None) -> Any:
    """A ``CoreV1Api`` from ``kubeconfig``, or from the in-cluster service account
    (:func:`gpunode.kube.core_api`); each caller gives its calls its own timeout
    (``api_timeout_s``).

    Raises:
        PluginError: no usable configuration.
    """
    try:
        return kube.core_api(kubeconfig)
    except kube.KubeConfigError as exc:
        raise PluginError(str(exc)) from None


def open_nvml(settings: DevicePluginSettings) -> tuple[Any, Topology]:
    """The NVML binding (fake or real) and the node's discovered topology, by the one path
    of :func:`topology.discovery.source.open_node_gpus`.

    On a fake node the topology is exactly what ``gputopo topology show <fake_topology>
    --output json`` prints (with the same ``--gpu-memory-mib``), discovered through the fake
    NVML; on a real node it is named after the Kubernetes node.

    Raises:
        PluginError: the fake topology cannot be read, the fake NVML cannot impersonate it, or
            NVML discovery failed.
    """
    from topology.discovery.source import open_node_gpus

    try:
        gpus = open_node_gpus(
            settings.fake_topology,
            node_name=settings.node_name,
            gpu_memory_mib=settings.gpu_memory_mib,
            gpu_model=settings.gpu_model,
        )
    except (TopologyError, OSError) as exc:
        raise PluginError(str(exc)) from None
    return gpus.nvml, gpus.topology


def advertised_resources(topology: Topology, shared_slots: int = 3
                         ) -> tuple[ResourceSpec, ...]:
    """The resources this node advertises: every one of :data:`RESOURCES`, except
    ``gputopo.io/vgpu-memory`` when no GPU's memory is known (advertising it with zero devices
    would look like a full node rather than an unknown one), and ``gputopo.io/gpu-shared``
    when ``shared_slots`` is 0."""
    out = RESOURCES
    if unknown_memory(topology) == list(range(topology.size)):
        out = tuple(r for r in out if r.kind != "memory")
    if shared_slots <= 0:
        out = tuple(r for r in out if r.kind != "shared")
    return out


def memory_notice(topology: Topology, settings: DevicePluginSettings) -> str | None:
    """The start-up line about GPU memory the plugin cannot know, None when it knows all."""
    unknown = unknown_memory(topology)
    if not unknown:
        return None
    source = settings.fake_topology or "NVML"
    why = (
        f"{source} gives no memory, the catalog does not know the GPU model "
        f"{topology.gpus[unknown[0]].name or '(unnamed)'!s} and --gpu-memory-mib is not set"
    )
    if len(unknown) == topology.size:
        return (
            f"GPU memory unknown for every GPU ({why}): {RESOURCE_VGPU_MEMORY} is not "
            "advertised; set --gpu-memory-mib (GPUTOPO_DP_GPU_MEMORY_MIB) to advertise it"
        )
    return (
        f"GPU memory unknown for GPUs {','.join(map(str, unknown))} ({why}): they get no "
        f"{RESOURCE_VGPU_MEMORY} devices; set --gpu-memory-mib to give them some"
    )


def kubelet_settings(settings: DevicePluginSettings) -> tuple[KubeletConfig, str]:
    """This node's kubelet NUMA-alignment settings and where they came from
    (:func:`device_plugin.kubelet_config.resolve_kubelet_config`).

    Raises:
        PluginError: the kubelet config file is unusable or holds a value the kubelet would
            not accept.
    """
    try:
        return resolve_kubelet_config(
            file=settings.kubelet_config_file,
            policy=settings.kubelet_topology_manager_policy,
            scope=settings.kubelet_topology_manager_scope,
            cpu_manager_policy=settings.kubelet_cpu_manager_policy,
        )
    except (KubeletConfigFileError, KubeletConfigError) as exc:
        raise PluginError(str(exc)) from None


@dataclass
class DevicePlugin:
    """A running device plugin (build with :meth:`build`, then :meth:`start` / :meth:`stop`)."""

    settings: DevicePluginSettings
    nvml: Any
    topology: Topology
    pods: PodSource
    publisher: NodePublisher
    view: KubeletView
    metrics: Metrics = field(default_factory=Metrics)
    stop_event: threading.Event = field(default_factory=threading.Event)
    profile_sink: ProfileSink | None = None

    def __post_init__(self) -> None:
        s = self.settings
        self.kubelet, self.kubelet_source = kubelet_settings(s)
        self.health = HealthState(recovery_s=s.health_recovery_s)
        self.inventory = Inventory(self.topology, self.health, s.vgpu_memory_unit_mib,
                                   s.shared_slots)
        proc = None if s.fake_topology else Path("/proc")
        self.allocator = Allocator(
            self.topology,
            s.node_name,
            self.pods,
            view=self.view,
            unit_mib=s.vgpu_memory_unit_mib,
            minors=minor_numbers(self.topology, proc),
            mps_pipe_dir=s.mps_pipe_dir,
            mps_shm_dir=s.mps_shm_dir,
            metrics=self.metrics,
            allocate_wait_s=s.allocate_wait_s,
            # a test node (fake topology) has no /dev/nvidia*: optionally omit missing nodes
            device_exists=os.path.exists if s.omit_missing_device_nodes else None,
        )
        self.resources = advertised_resources(self.topology, s.shared_slots)
        self.servers = [
            ResourceServer(
                spec,
                s.device_plugin_dir,
                DevicePluginServicer(
                    spec, self.inventory, self.allocator, self.metrics, self.stop_event
                ),
            )
            for spec in self.resources
        ]
        self.watcher = KubeletWatcher(
            s.kubelet_socket,
            self.servers,
            interval_s=s.watch_interval_s,
            on_registered=lambda r: self.metrics.registrations.labels(r).inc(),
        )
        self.network = node_network(self.topology, s.fake_topology)
        self.publish_loop = PublishLoop(
            self.publisher,
            s.node_name,
            lambda: node_metadata(self.topology, self.health.unhealthy(), s.vgpu_memory_unit_mib,
                                  s.shared_slots, kubelet=self.kubelet, network=self.network),
            s.publish_interval_s,
            on_error=self.metrics.annotation_errors.inc,
        )
        self.health.on_change(self.publish_loop.kick)
        self.profile_loop: ProfileLoop | None = None
        if s.dcgm_exporter_url and self.profile_sink is not None:
            self.profile_loop = ProfileLoop(
                s.dcgm_exporter_url, s.node_name, self.pods, self.profile_sink,
                interval_s=s.profile_interval_s, window=s.profile_window)
        self._metrics_server: Any = None
        for spec in self.resources:
            listing = self.inventory.listing(spec.name)
            self.metrics.devices.labels(spec.name).set(len(listing))
            self.metrics.healthy.labels(spec.name).set(sum(ok for _d, ok in listing))

    @classmethod
    def build(cls, settings: DevicePluginSettings) -> DevicePlugin:
        """Discover the GPUs and connect the pod source, node publisher and kubelet view.

        Raises:
            PluginError: discovery or the Kubernetes configuration failed.
        """
        nvml, topology = open_nvml(settings)
        api: Any = None

        def kube() -> Any:
            nonlocal api
            if api is None:
                api = core_api(settings.kubeconfig)
            return api

        pods: PodSource
        if settings.pod_source.startswith("file:"):
            pods = FilePodSource(Path(settings.pod_source.removeprefix("file:")))
        else:
            pods = KubePodSource(kube(), settings.api_timeout_s)
        publisher: NodePublisher
        if settings.node_sink.startswith("file:"):
            publisher = FileNodePublisher(Path(settings.node_sink.removeprefix("file:")))
        else:
            publisher = KubeNodePublisher(kube(), settings.api_timeout_s)
        view: KubeletView = (
            PodResourcesClient(settings.pod_resources_socket)
            if settings.pod_resources_socket
            else NoKubeletView()
        )
        sink: ProfileSink | None = None
        if settings.dcgm_exporter_url:
            target = settings.profile_sink
            if target.startswith("file:"):
                sink = FileProfileSink(Path(target.removeprefix("file:")))
            else:
                ns, name = target.removeprefix("configmap:").split("/")
                sink = ConfigMapProfileSink(kube(), ns, name, settings.api_timeout_s)
        return cls(settings, nvml, topology, pods, publisher, view, profile_sink=sink)

    def start(self) -> None:
        """Serve every resource, register, and start the watcher, health, publishing and
        metrics threads.

        Raises:
            PluginError: the device-plugin directory or the metrics port is unusable.
        """
        s = self.settings
        if not s.device_plugin_dir.is_dir():
            raise PluginError(f"device-plugin directory {s.device_plugin_dir} does not exist")
        if s.metrics_port:
            try:
                self._metrics_server = self.metrics.serve(s.metrics_port, s.metrics_host)
            except OSError as exc:
                raise PluginError(f"metrics port {s.metrics_port}: {exc.strerror or exc}") from None
        try:
            for server in self.servers:
                server.start()
        except OSError as exc:
            self.stop()
            raise PluginError(str(exc)) from None
        log.info("%s", describe_memory(s.fake_topology, self.topology,
                                       gpu_memory_mib=s.gpu_memory_mib, gpu_model=s.gpu_model))
        notice = memory_notice(self.topology, s)
        if notice:
            log.warning("%s", notice)
        log.info("kubelet NUMA alignment (%s): %s%s", self.kubelet_source,
                 self.kubelet.describe(),
                 "; the extender places GPUs on the NUMA node(s) the Topology Manager will "
                 "pick" if self.kubelet.aligning else "")
        uuids = [g.uuid for g in self.topology.gpus]
        start_nvml_watch(self.nvml, uuids, self.health, self.stop_event,
                         probe_interval_s=s.health_probe_interval_s)  # fmt: skip
        if s.fake_xid_file is not None:
            start_xid_file_feeder(s.fake_xid_file, self.nvml.inject_xid, self.stop_event,
                                  set_device_error=self.nvml.set_device_error)  # fmt: skip
        self.publish_loop.start(self.stop_event)
        if self.profile_loop is not None:
            self.profile_loop.start(self.stop_event)
            log.info("measuring co-location profiles from %s", s.dcgm_exporter_url)
        self.watcher.check()
        self.watcher.start(self.stop_event)
        log.info(
            "gputopo device plugin up on node %s: %d x %s (class %s), resources %s",
            s.node_name,
            self.topology.size,
            self.topology.gpus[0].name,
            self.topology.topology_class,
            ", ".join(r.name for r in self.resources),
        )

    def stop(self) -> None:
        """Stop everything and remove our sockets (idempotent)."""
        self.stop_event.set()
        self.health.close()
        self.publish_loop.wake()
        stoppers = [threading.Thread(target=server.stop) for server in self.servers]
        for t in stoppers:  # in parallel: each waits out its grace period
            t.start()
        for t in stoppers:
            t.join()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server = None
        close = getattr(self.view, "close", None)
        if callable(close):
            close()

    def run_until_signalled(self) -> None:
        """:meth:`start`, block until SIGTERM or SIGINT, then :meth:`stop`."""
        run_until_signalled(self.start, self.stop, self.stop_event, log,
                            "stopped; sockets removed")
