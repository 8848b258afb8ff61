"""The ``DevicePlugin`` gRPC service, one server per resource, each on its own unix socket.

Thin by design: every RPC hands its request to one method of
:class:`~device_plugin.allocation.Allocator` or :class:`~device_plugin.allocation.Inventory`
and translates the result (or an :class:`~device_plugin.identity.IdentityError`, which becomes
``FAILED_PRECONDITION`` with the message naming the pod) into protobuf.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc

from device_plugin.allocation import Allocator, Inventory
from device_plugin.api import HEALTHY, UNHEALTHY
from device_plugin.api import api_pb2 as pb
from device_plugin.api import api_pb2_grpc as pb_grpc
from device_plugin.devices import ResourceSpec
from device_plugin.identity import IdentityError
from device_plugin.metrics import Metrics
from gpunode.grpcserver import UnixServer

log = logging.getLogger(__name__)

#: Options sent with Register and answered by GetDevicePluginOptions: the plugin proposes the
#: scheduler's devices, and verifies the kubelet's final assignment before each container start.
OPTIONS = pb.DevicePluginOptions(pre_start_required=True, get_preferred_allocation_available=True)


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    """The kubelet-facing service for one resource."""

    def __init__(
        self,
        spec: ResourceSpec,
        inventory: Inventory,
        allocator: Allocator,
        metrics: Metrics,
        stop: threading.Event,
    ) -> None:
        self.spec = spec
        self.inventory = inventory
        self.allocator = allocator
        self.metrics = metrics
        self.stop = stop

    def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> pb.DevicePluginOptions:
        return OPTIONS

    def _listing(self) -> pb.ListAndWatchResponse:
        devices = []
        healthy = 0
        for d, ok in self.inventory.listing(self.spec.name):
            healthy += ok
            topo = (
                pb.TopologyInfo(nodes=[pb.NUMANode(ID=d.numa_node)])
                if d.numa_node is not None
                else None
            )
            devices.append(pb.Device(ID=d.id, health=HEALTHY if ok else UNHEALTHY, topology=topo))
        self.metrics.devices.labels(self.spec.name).set(len(devices))
        self.metrics.healthy.labels(self.spec.name).set(healthy)
        return pb.ListAndWatchResponse(devices=devices)

    def ListAndWatch(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> Iterator[pb.ListAndWatchResponse]:
        health = self.inventory.health
        seen = health.version
        yield self._listing()
        while not self.stop.is_set() and context.is_active():
            now = health.wait_change(seen, timeout=1.0)
            if now != seen and not self.stop.is_set():
                seen = now
                yield self._listing()

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        out = []
        for creq in request.container_requests:
            try:
                ids = self.allocator.preferred(
                    self.spec.name,
                    list(creq.available_deviceIDs),
                    list(creq.must_include_deviceIDs),
                    creq.allocation_size,
                )
            except IdentityError as exc:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"gputopo: {exc}")
            out.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return pb.PreferredAllocationResponse(container_responses=out)

    def Allocate(
        self, request: pb.AllocateRequest, context: grpc.ServicerContext
    ) -> pb.AllocateResponse:
        out = []
        for creq in request.container_requests:
            try:
                alloc = self.allocator.allocate(self.spec.name, list(creq.devices_ids))
            except IdentityError as exc:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"gputopo: {exc}")
            g = alloc.grant
            out.append(
                pb.ContainerAllocateResponse(
                    envs=dict(g.envs),
                    devices=[
                        pb.DeviceSpec(container_path=c, host_path=h, permissions=p)
                        for c, h, p in g.devices
                    ],
                    mounts=[
                        pb.Mount(container_path=c, host_path=h, read_only=ro)
                        for c, h, ro in g.mounts
                    ],
                )
            )
        return pb.AllocateResponse(container_responses=out)

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        try:
            self.allocator.pre_start(self.spec.name, list(request.devices_ids))
        except IdentityError as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"gputopo: {exc}")
        return pb.PreStartContainerResponse()


class ResourceServer(UnixServer):
    """A gRPC server for one resource on ``<dir>/<spec.socket>``; restartable
    (:class:`gpunode.grpcserver.UnixServer`)."""

    def __init__(
        self,
        spec: ResourceSpec,
        directory: Path,
        servicer: DevicePluginServicer,
        max_workers: int = 8,
    ) -> None:
        self.spec = spec
        self.directory = directory
        self.servicer = servicer
        super().__init__(
            directory / spec.socket,
            lambda server: pb_grpc.add_DevicePluginServicer_to_server(servicer, server),
            spec.name, max_workers, thread_prefix=f"dp-{spec.kind}")

    @property
    def socket_path(self) -> Path:
        return self.path
