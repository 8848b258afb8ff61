"""A kubelet stand-in for DRA drivers, built from the driver's own generated stubs.

It does what a 1.36 kubelet does with a DRA plugin (``pkg/kubelet/pluginmanager`` and
``pkg/kubelet/cm/dra/plugin``): find ``*-reg.sock`` in the registration directory, call
``Registration.GetInfo``, check the type (``DRAPlugin``) and pick the first of the plugin's
``supported_versions`` it speaks itself (``v1.DRAPlugin``, then ``v1beta1.DRAPlugin``: the
order of ``validateSupportedServices``), dial the endpoint, answer
``NotifyRegistrationStatus``; then call ``NodePrepareResources`` /
``NodeUnprepareResources`` of the chosen service for the claims it is given.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from dra_driver.api import dra_health_pb2 as health_pb
from dra_driver.api import dra_health_pb2_grpc as health_grpc
from dra_driver.api import dra_v1_pb2 as v1
from dra_driver.api import dra_v1_pb2_grpc as v1_grpc
from dra_driver.api import dra_v1beta1_pb2 as v1beta1
from dra_driver.api import dra_v1beta1_pb2_grpc as v1beta1_grpc
from dra_driver.api import pluginregistration_pb2 as reg
from dra_driver.api import pluginregistration_pb2_grpc as reg_grpc

#: What the 1.36 kubelet speaks, newest first (servicesSupportedByKubelet).
KUBELET_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


@dataclass(frozen=True)
class Claim:
    namespace: str
    name: str
    uid: str


class DRAKubeletStub:
    """See the module docstring.

    Args:
        registry_dir: the plugin-registration directory the stub watches.
        services: the DRA services this "kubelet" speaks (a 1.36 kubelet: both).
    """

    def __init__(self, registry_dir: Path, services: tuple[str, ...] = KUBELET_SERVICES) -> None:
        self.registry_dir = registry_dir
        self.services = services
        self.info: reg.PluginInfo | None = None
        self.chosen = ""
        self._channel: grpc.Channel | None = None
        self._stub: Any = None

    def register(self, timeout_s: float = 20.0) -> reg.PluginInfo:
        """Wait for a registration socket, GetInfo, validate, dial, notify.

        Raises:
            AssertionError: the plugin is not a DRA plugin or speaks no service we do.
            TimeoutError: no registration socket appeared.
        """
        deadline = time.monotonic() + timeout_s
        while True:  # a crashed plugin leaves a dead socket until its successor replaces it
            found = sorted(p for p in self.registry_dir.glob("*-reg.sock") if p.is_socket())
            try:
                if found:
                    info, chosen, ok = self._get_info(found[0])
                    break
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"no answering registration socket in {self.registry_dir}")
            time.sleep(0.05)
        assert ok, f"plugin speaks {list(info.supported_versions)}, kubelet {self.services}"
        self.info, self.chosen = info, chosen
        self.close()
        self._channel = grpc.insecure_channel(f"unix://{info.endpoint}")
        self._stub = (v1_grpc.DRAPluginStub(self._channel) if chosen == "v1.DRAPlugin"
                      else v1beta1_grpc.DRAPluginStub(self._channel))
        return info

    def _get_info(self, sock: Path) -> tuple[reg.PluginInfo, str, bool]:
        with grpc.insecure_channel(f"unix://{sock}") as ch:
            regstub = reg_grpc.RegistrationStub(ch)
            info = regstub.GetInfo(reg.InfoRequest(), timeout=2)
            assert info.type == "DRAPlugin", info.type
            chosen = next((s for s in info.supported_versions if s in self.services), "")
            ok = bool(chosen) and Path(info.endpoint).is_socket()
            regstub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=ok,
                                       error="" if ok else "no common service"), timeout=2)
        return info, chosen, ok

    def _pb(self) -> Any:
        return v1 if self.chosen == "v1.DRAPlugin" else v1beta1

    def prepare(self, *claims: Claim) -> Any:
        """``NodePrepareResources`` for ``claims``; returns the response."""
        pb = self._pb()
        req = pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims])
        return self._stub.NodePrepareResources(req, timeout=30, wait_for_ready=True)

    def unprepare(self, *claims: Claim) -> Any:
        """``NodeUnprepareResources`` for ``claims``; returns the response."""
        pb = self._pb()
        req = pb.NodeUnprepareResourcesRequest(
            claims=[pb.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims])
        return self._stub.NodeUnprepareResources(req, timeout=30, wait_for_ready=True)

    def watch_health(self) -> Any:
        """``NodeWatchResources`` on the plugin's endpoint: an iterator of reports (the
        kubelet's health stream, gate ResourceHealthStatus)."""
        assert self._channel is not None
        return health_grpc.DRAResourceHealthStub(self._channel).NodeWatchResources(
            health_pb.NodeWatchResourcesRequest(), timeout=60)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
