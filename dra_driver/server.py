"""The kubelet-facing gRPC: the DRA service (``v1`` and ``v1beta1`` on one socket) and the
plugin-registration service on the registration socket.

How a 1.36 kubelet finds and talks to the plugin (``pkg/kubelet/pluginmanager``,
``pkg/kubelet/cm/dra/plugin``): its plugin watcher sees ``<registry dir>/gpu.gputopo.io-reg.sock``
appear, calls ``Registration.GetInfo`` there, and gets :func:`plugin_info`: type
``DRAPlugin``, name ``gpu.gputopo.io``, the DRA socket's path as ``endpoint`` and the gRPC
services in ``supported_versions`` (``v1.DRAPlugin``, ``v1beta1.DRAPlugin``; the kubelet
takes the first one it also speaks). It dials the endpoint, answers
``NotifyRegistrationStatus``, and from then on calls ``NodePrepareResources`` /
``NodeUnprepareResources`` of the chosen service for the claims of the pods it starts and
stops. Both services are thin: every claim goes to :class:`~dra_driver.prepare.Preparer`. On
the same socket, ``v1alpha1.DRAResourceHealth`` streams the devices' health to the kubelet
(:class:`HealthServicer`).

:class:`gpunode.grpcserver.UnixServer` serves each socket; :class:`SocketWatcher`
restarts a server whose socket file was removed or replaced (a kubelet or node cleanup), as
the device plugin's watcher does for its sockets.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import grpc

from dra_driver.api import DRA_PLUGIN_TYPE, DRA_SERVICES
from dra_driver.api import dra_health_pb2 as health_pb
from dra_driver.api import dra_health_pb2_grpc as health_grpc
from dra_driver.api import dra_v1_pb2 as v1
from dra_driver.api import dra_v1_pb2_grpc as v1_grpc
from dra_driver.api import dra_v1beta1_pb2 as v1beta1
from dra_driver.api import dra_v1beta1_pb2_grpc as v1beta1_grpc
from dra_driver.api import pluginregistration_pb2 as reg
from dra_driver.api import pluginregistration_pb2_grpc as reg_grpc
from dra_driver.prepare import PreparedDevice, Preparer
from gpunode.grpcserver import UnixServer
from gpunode.health import HealthState
from topology.dra import DRIVER

log = logging.getLogger(__name__)


def plugin_info(endpoint: Path) -> reg.PluginInfo:
    """What ``GetInfo`` answers: a DRA plugin named :data:`~topology.dra.DRIVER` at
    ``endpoint`` speaking :data:`~dra_driver.api.DRA_SERVICES`."""
    return reg.PluginInfo(type=DRA_PLUGIN_TYPE, name=DRIVER, endpoint=str(endpoint),
                          supported_versions=list(DRA_SERVICES))


class RegistrationServicer(reg_grpc.RegistrationServicer):
    """``pluginregistration.Registration``: tells the kubelet who we are, hears whether it
    took us, and then calls ``on_registered`` — the driver republishes its slices then: a
    starting kubelet deletes every ResourceSlice of its node, and one whose plugin was gone
    too long deletes the driver's (``wipeResourceSlices`` in
    ``pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go``, 1.36)."""

    def __init__(self, endpoint: Path,
                 on_registered: Callable[[], None] | None = None) -> None:
        self.endpoint = endpoint
        self.on_registered = on_registered or (lambda: None)
        self.registered = threading.Event()
        self.last_error = ""

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:
        return plugin_info(self.endpoint)

    def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg.RegistrationStatusResponse:
        if request.plugin_registered:
            self.last_error = ""
            self.registered.set()
            log.info("registered with the kubelet as DRA driver %s (%s)", DRIVER, self.endpoint)
            self.on_registered()
        else:
            self.last_error = request.error
            self.registered.clear()
            log.error("the kubelet refused the registration of %s: %s", DRIVER, request.error)
        return reg.RegistrationStatusResponse()


class HealthServicer(health_grpc.DRAResourceHealthServicer):
    """``v1alpha1.DRAResourceHealth``: the health of every device of this node, streamed to
    the kubelet (which shows it in the ``allocatedResourcesStatus`` of pods holding the
    devices; gate ``ResourceHealthStatus``, beta in 1.36). A full list at once, at every
    health change, and at least every ``interval_s`` — the kubelet takes a device whose
    report is older than ``health_check_timeout_seconds`` as Unknown.

    Args:
        devices: GPU index → the names of its devices in the slices.
        pool: the pool (node name).
        uuids: GPU index → UUID.
        health: the GPUs' health.
        stop: set on shutdown (ends the streams).
        interval_s: the longest gap between two reports.
    """

    def __init__(self, devices: Mapping[int, Sequence[str]], pool: str,
                 uuids: Mapping[int, str], health: HealthState, stop: threading.Event,
                 interval_s: float = 10.0) -> None:
        self.devices = devices
        self.pool = pool
        self.uuids = uuids
        self.health = health
        self.stop = stop
        self.interval_s = interval_s

    def report(self) -> health_pb.NodeWatchResourcesResponse:
        """One full report, as of now."""
        reasons = self.health.reasons()
        now = int(time.time())
        out = []
        for index, names in sorted(self.devices.items()):
            uuid = self.uuids[index]
            bad = uuid in reasons
            xid = reasons.get(uuid)
            message = (f"GPU {index} ({uuid}): " + (f"critical XID {xid}" if xid is not None
                                                   else "NVML query failed")) if bad else ""
            for name in names:
                out.append(health_pb.DeviceHealth(
                    device=health_pb.DeviceIdentifier(pool_name=self.pool, device_name=name),
                    health=health_pb.UNHEALTHY if bad else health_pb.HEALTHY,
                    last_updated_time=now,
                    health_check_timeout_seconds=int(3 * self.interval_s),
                    message=message))
        return health_pb.NodeWatchResourcesResponse(devices=out)

    def NodeWatchResources(self, request: health_pb.NodeWatchResourcesRequest,
                           context: grpc.ServicerContext
                           ) -> Iterator[health_pb.NodeWatchResourcesResponse]:
        seen = self.health.version
        yield self.report()
        while not self.stop.is_set() and context.is_active():
            seen = self.health.wait_change(seen, timeout=self.interval_s)
            if not self.stop.is_set():
                yield self.report()


def _devices(pb: Any, devices: Sequence[PreparedDevice]) -> list[Any]:
    """``Device`` messages of the API version ``pb`` (v1beta1 has no ``share_id``: a share is
    named by pool and device alone there)."""
    share = "share_id" in pb.Device.DESCRIPTOR.fields_by_name
    return [pb.Device(request_names=list(d.request_names), pool_name=d.pool,
                      device_name=d.device, cdi_device_ids=list(d.cdi_device_ids),
                      **({"share_id": d.share_id} if share and d.share_id else {}))
            for d in devices]


def prepare_reply(pb: Any, preparer: Preparer, request: Any) -> Any:
    """``NodePrepareResourcesResponse`` of API version ``pb`` for ``request``'s claims."""
    out = pb.NodePrepareResourcesResponse()
    for c in request.claims:
        r = preparer.prepare(c.uid, c.namespace, c.name)
        out.claims[c.uid].CopyFrom(pb.NodePrepareResourceResponse(
            devices=_devices(pb, r.devices), error=r.error))
    return out


def unprepare_reply(pb: Any, preparer: Preparer, request: Any) -> Any:
    """``NodeUnprepareResourcesResponse`` of API version ``pb`` for ``request``'s claims."""
    out = pb.NodeUnprepareResourcesResponse()
    for c in request.claims:
        out.claims[c.uid].CopyFrom(pb.NodeUnprepareResourceResponse(
            error=preparer.unprepare(c.uid, c.namespace, c.name)))
    return out


class DRAPluginV1Servicer(v1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``."""

    def __init__(self, preparer: Preparer) -> None:
        self.preparer = preparer

    def NodePrepareResources(self, request: v1.NodePrepareResourcesRequest,
                             context: grpc.ServicerContext) -> v1.NodePrepareResourcesResponse:
        return cast(v1.NodePrepareResourcesResponse, prepare_reply(v1, self.preparer, request))

    def NodeUnprepareResources(self, request: v1.NodeUnprepareResourcesRequest,
                               context: grpc.ServicerContext
                               ) -> v1.NodeUnprepareResourcesResponse:
        return cast(v1.NodeUnprepareResourcesResponse,
                    unprepare_reply(v1, self.preparer, request))


class DRAPluginV1beta1Servicer(v1beta1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`` (the same answers, no share IDs)."""

    def __init__(self, preparer: Preparer) -> None:
        self.preparer = preparer

    def NodePrepareResources(self, request: v1beta1.NodePrepareResourcesRequest,
                             context: grpc.ServicerContext
                             ) -> v1beta1.NodePrepareResourcesResponse:
        return cast(v1beta1.NodePrepareResourcesResponse,
                    prepare_reply(v1beta1, self.preparer, request))

    def NodeUnprepareResources(self, request: v1beta1.NodeUnprepareResourcesRequest,
                               context: grpc.ServicerContext
                               ) -> v1beta1.NodeUnprepareResourcesResponse:
        return cast(v1beta1.NodeUnprepareResourcesResponse,
                    unprepare_reply(v1beta1, self.preparer, request))


class SocketWatcher:
    """Restarts servers whose socket was removed or replaced, every ``interval_s``."""

    def __init__(self, servers: Sequence[UnixServer], interval_s: float = 1.0) -> None:
        self.servers = list(servers)
        self.interval_s = interval_s
        self.restarts = 0

    def check(self) -> None:
        """One poll."""
        # the DRA socket before the registration socket: the kubelet dials the endpoint as
        # soon as it sees the registration socket
        for s in self.servers:
            if not s.alive():
                log.warning("socket %s is gone: restarting %s", s.path, s.name)
                try:
                    s.start()
                    self.restarts += 1
                except OSError as exc:
                    log.error("restarting %s: %s", s.name, exc)

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set."""
        while not stop.wait(self.interval_s):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - one bad poll must not end the restarts
                log.exception("socket watch failed")

    def start(self, stop: threading.Event) -> threading.Thread:
        """:meth:`run` in a daemon thread."""
        t = threading.Thread(target=self.run, args=(stop,), name="gputopo-dra-sockets",
                             daemon=True)
        t.start()
        return t
