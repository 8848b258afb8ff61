"""Wiring: settings → GPUs (NVML or a fake topology) → health → ResourceSlices and the Node's
topology → (with a kubelet) the checkpoint, the preparer and the two sockets; a clean shutdown
on SIGTERM/SIGINT.

This is the only module that knows every piece; each piece takes plain values and is tested on
its own (``tests/dra_driver``).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from dra_driver.api import (
    dra_health_pb2_grpc,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2_grpc,
    pluginregistration_pb2_grpc,
)
from dra_driver.checkpoint import Checkpoint, CheckpointError
from dra_driver.prepare import ClaimSource, FileClaimSource, KubeClaimSource, Preparer
from dra_driver.server import (
    DRAPluginV1beta1Servicer,
    DRAPluginV1Servicer,
    HealthServicer,
    RegistrationServicer,
    SocketWatcher,
)
from dra_driver.settings import DRADriverSettings
from dra_driver.slices import (
    FileSliceStore,
    KubeSliceStore,
    SliceLoop,
    SlicePublisher,
    SliceStore,
)
from gpunode import kube
from gpunode.container import minor_numbers
from gpunode.grpcserver import UnixServer
from gpunode.health import HealthState, start_nvml_watch, start_xid_file_feeder
from gpunode.publish import (
    FileNodePublisher,
    KubeNodePublisher,
    NodePublisher,
    PublishLoop,
    node_metadata,
)
from gpunode.signals import run_until_signalled
from topology.contract import DEFAULT_VGPU_MEMORY_UNIT_MIB
from topology.dra import DRIVER, gpu_devices, pci_bus_id, pcie_roots
from topology.model import Topology, TopologyError
from topology.sources import describe_memory

log = logging.getLogger("dra_driver")


class DriverError(RuntimeError):
    """The driver cannot start; the message is one line."""


def open_gpus(settings: DRADriverSettings) -> tuple[Any, Topology]:
    """The NVML binding and the node's topology, by the device plugin's one path
    (:func:`topology.discovery.source.open_node_gpus`).

    Raises:
        DriverError: the source cannot be read or NVML discovery failed.
    """
    from topology.discovery.source import open_node_gpus

    try:
        gpus = open_node_gpus(settings.topology, node_name=settings.node_name,
                              gpu_memory_mib=settings.gpu_memory_mib,
                              gpu_model=settings.gpu_model)
    except (TopologyError, OSError) as exc:
        raise DriverError(str(exc)) from None
    return gpus.nvml, gpus.topology


def sysfs_pcie_roots(topology: Topology, sys_root: Path = Path("/sys")) -> dict[int, str]:
    """GPU index → ``pcieRoot`` read as the upstream ``deviceattribute`` helper reads it:
    ``<sys>/bus/pci/devices/<bus id>`` links to ``<sys>/devices/pci<domain>:<bus>/…``; GPUs
    whose link cannot be read keep the topology's root (:func:`topology.dra.pcie_roots`)."""
    out = pcie_roots(topology)
    for g in topology.gpus:
        bus = pci_bus_id(g.pci_bus_id)
        if bus is None:
            continue
        try:
            target = os.readlink(sys_root / "bus" / "pci" / "devices" / bus)
        except OSError:
            continue
        parts = [p for p in Path(target).parts if p.startswith("pci")]
        if parts and ":" in parts[0]:
            out[g.index] = parts[0]
    return out


@dataclass
class DRADriver:
    """A running DRA driver (build with :meth:`build`, then :meth:`start` / :meth:`stop`)."""

    settings: DRADriverSettings
    nvml: Any
    topology: Topology
    slice_store: SliceStore
    node_publisher: NodePublisher | None
    claims: ClaimSource | None
    stop_event: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        s = self.settings
        self.health = HealthState(recovery_s=s.health_recovery_s)
        roots = pcie_roots(self.topology) if s.topology else sysfs_pcie_roots(self.topology)
        self.slices = SlicePublisher(self.slice_store, self.topology, s.node_name,
                                     slots=s.shared_slots, shares=s.shares, roots=roots,
                                     allocator_taint=s.allocator_taint)
        self.slice_loop = SliceLoop(self.slices, self.unhealthy_indices, s.publish_interval_s)
        self.health.on_change(self.slice_loop.kick)
        self.node_loop: PublishLoop | None = None
        if self.node_publisher is not None:
            self.node_loop = PublishLoop(
                self.node_publisher, s.node_name,
                lambda: node_metadata(self.topology, self.health.unhealthy(),
                                      DEFAULT_VGPU_MEMORY_UNIT_MIB, s.shared_slots),
                s.publish_interval_s)
            self.health.on_change(self.node_loop.kick)
        self.preparer: Preparer | None = None
        self.servers: list[UnixServer] = []
        self.registration: RegistrationServicer | None = None
        if not s.no_kubelet:
            assert self.claims is not None
            s.plugin_dir.mkdir(parents=True, exist_ok=True)
            proc = None if s.topology else Path("/proc")
            try:
                self.preparer = Preparer(
                    self.topology, s.node_name, self.claims,
                    Checkpoint(s.checkpoint_file, s.node_name), cdi_dir=s.cdi_dir,
                    minors=minor_numbers(self.topology, proc), mps_pipe_dir=s.mps_pipe_dir,
                    mps_shm_dir=s.mps_shm_dir,
                    device_exists=os.path.exists if s.omit_missing_device_nodes else None,
                    slots=s.shared_slots, unhealthy=self.unhealthy_indices)
            except CheckpointError as exc:
                raise DriverError(f"checkpoint: {exc}") from None
            preparer = self.preparer
            self.registration = RegistrationServicer(s.dra_socket, self.slice_loop.kick)
            registration = self.registration

            names = {g.index: [d["name"] for d in gpu_devices(self.topology, g.index,
                                                            slots=s.shared_slots,
                                                            shares=s.shares, roots={})]
                     for g in self.topology.gpus}
            health = HealthServicer(names, s.node_name,
                                    {g.index: g.uuid for g in self.topology.gpus},
                                    self.health, self.stop_event)

            def add_dra(server: grpc.Server) -> None:
                dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(
                    DRAPluginV1Servicer(preparer), server)
                dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(
                    DRAPluginV1beta1Servicer(preparer), server)
                dra_health_pb2_grpc.add_DRAResourceHealthServicer_to_server(health, server)

            def add_reg(server: grpc.Server) -> None:
                pluginregistration_pb2_grpc.add_RegistrationServicer_to_server(
                    registration, server)

            # 8 handlers: the kubelet holds one for its health stream while it prepares claims
            self.servers = [UnixServer(s.dra_socket, add_dra, "dra", max_workers=8),
                            UnixServer(s.registration_socket, add_reg, "registration")]
        self.watcher = SocketWatcher(self.servers, s.watch_interval_s)

    def unhealthy_indices(self) -> frozenset[int]:
        """Indices of the GPUs unhealthy now."""
        bad = self.health.unhealthy()
        return frozenset(g.index for g in self.topology.gpus if g.uuid in bad)

    @classmethod
    def build(cls, settings: DRADriverSettings) -> DRADriver:
        """Discover the GPUs and connect the API-facing pieces.

        Raises:
            DriverError: discovery, the Kubernetes configuration or the checkpoint failed.
        """
        nvml, topology = open_gpus(settings)
        client: Any = None

        def api() -> Any:
            nonlocal client
            if client is None:
                try:
                    client = kube.api_client(settings.kubeconfig)
                except kube.KubeConfigError as exc:
                    raise DriverError(str(exc)) from None
            return client

        t = settings.api_timeout_s
        store: SliceStore = (FileSliceStore(Path(settings.slice_sink.removeprefix("file:")))
                             if settings.slice_sink.startswith("file:")
                             else KubeSliceStore(api(), t))
        publisher: NodePublisher | None = None
        if settings.publish_node_metadata:
            if settings.node_sink.startswith("file:"):
                publisher = FileNodePublisher(Path(settings.node_sink.removeprefix("file:")))
            else:
                from kubernetes import client as k8s

                publisher = KubeNodePublisher(k8s.CoreV1Api(api()), t)
        claims: ClaimSource | None = None
        if not settings.no_kubelet:
            claims = (FileClaimSource(Path(settings.claim_source.removeprefix("file:")))
                      if settings.claim_source.startswith("file:")
                      else KubeClaimSource(api(), t))
        return cls(settings, nvml, topology, store, publisher, claims)

    def start(self) -> None:
        """Publish, watch health, serve the kubelet sockets.

        Raises:
            DriverError: a socket cannot be created.
        """
        s = self.settings
        log.info("%s", describe_memory(s.topology, self.topology,
                                       gpu_memory_mib=s.gpu_memory_mib, gpu_model=s.gpu_model))
        start_nvml_watch(self.nvml, [g.uuid for g in self.topology.gpus], self.health,
                         self.stop_event, probe_interval_s=s.health_probe_interval_s)
        if s.fake_xid_file is not None:
            start_xid_file_feeder(s.fake_xid_file, self.nvml.inject_xid, self.stop_event,
                                  set_device_error=self.nvml.set_device_error)
        self.slice_loop.start(self.stop_event)
        if self.node_loop is not None:
            self.node_loop.start(self.stop_event)
        try:
            for server in self.servers:  # DRA socket first: the kubelet dials it on GetInfo
                server.start()
        except OSError as exc:
            self.stop()
            raise DriverError(str(exc)) from None
        if self.servers:
            self.watcher.start(self.stop_event)
        log.info("gputopo DRA driver %s up on node %s: %d x %s (class %s)%s", DRIVER,
                 s.node_name, self.topology.size, self.topology.gpus[0].name or "GPU",
                 self.topology.topology_class,
                 ", no kubelet: publishing only" if s.no_kubelet else
                 f", registration {s.registration_socket}")

    def stop(self) -> None:
        """Stop everything and remove our sockets (idempotent). Slices stay: the pool
        remains valid across a restart (the kubelet removes a node's slices itself when its
        plugin deregisters for good; ``--no-kubelet`` pools belong to their node)."""
        self.stop_event.set()
        self.health.close()
        self.slice_loop.kick()
        if self.node_loop is not None:
            self.node_loop.wake()
        for server in self.servers:
            server.stop()

    def run_until_signalled(self) -> None:
        """:meth:`start`, block until SIGTERM or SIGINT, then :meth:`stop`."""
        run_until_signalled(self.start, self.stop, self.stop_event, log)
