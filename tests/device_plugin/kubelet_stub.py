"""A kubelet stand-in built from the same generated API code as the plugin.

It serves ``Registration`` on ``<dir>/kubelet.sock`` and ``PodResourcesLister`` on its own
socket, and drives a registered plugin the way the kubelet's device manager does
(``pkg/kubelet/cm/devicemanager/manager.go``): it keeps a ListAndWatch stream per resource,
computes the available healthy devices, calls ``GetPreferredAllocation`` (only when more
devices are available than needed, as the kubelet does), ``Allocate`` with the preferred set,
records the container's devices (visible through pod-resources ``List`` only after Allocate
returns), and calls ``PreStartContainer``. :meth:`KubeletStub.restart` does what a restarting
kubelet does to the directory: deletes every socket in it, then re-creates ``kubelet.sock``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from device_plugin.api import api_pb2 as pb
from device_plugin.api import api_pb2_grpc as pb_grpc
from device_plugin.api import podresources_pb2 as pr
from device_plugin.api import podresources_pb2_grpc as pr_grpc


class _Registration(pb_grpc.RegistrationServicer):
    def __init__(self, stub: KubeletStub) -> None:
        self.stub = stub

    def Register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty:
        with self.stub.cond:
            self.stub.registrations.append(request)
            self.stub.cond.notify_all()
        return pb.Empty()


class _PodResources(pr_grpc.PodResourcesListerServicer):
    def __init__(self, stub: KubeletStub) -> None:
        self.stub = stub

    def List(
        self, request: pr.ListPodResourcesRequest, context: Any
    ) -> pr.ListPodResourcesResponse:
        with self.stub.cond:
            self.stub.list_calls += 1
            pods = []
            for (ns, name), containers in self.stub.known_pods.items():
                cres = []
                for cname in containers:
                    devs = [
                        pr.ContainerDevices(resource_name=res, device_ids=sorted(ids))
                        for (pns, pname, c, res), ids in self.stub.assigned.items()
                        if (pns, pname, c) == (ns, name, cname)
                    ]
                    cres.append(pr.ContainerResources(name=cname, devices=devs))
                pods.append(pr.PodResources(name=name, namespace=ns, containers=cres))
        return pr.ListPodResourcesResponse(pod_resources=pods)


@dataclass
class Stream:
    """The latest ListAndWatch answer of one resource and how many answers came."""

    devices: list[pb.Device] = field(default_factory=list)
    updates: int = 0


class KubeletStub:
    """See the module docstring.

    Args:
        directory: the device-plugin directory (short path: unix sockets are limited to 107
            bytes).
        pod_resources: serve the pod-resources API on ``<directory>/pod-resources.sock``.
    """

    def __init__(self, directory: Path, pod_resources: bool = True) -> None:
        self.dir = directory
        self.cond = threading.Condition()
        self.registrations: list[pb.RegisterRequest] = []
        self.known_pods: dict[tuple[str, str], list[str]] = {}
        self.assigned: dict[tuple[str, str, str, str], set[str]] = {}
        self.list_calls = 0
        self.streams: dict[str, Stream] = {}
        self._reg_server: grpc.Server | None = None
        self._pr_server: grpc.Server | None = None
        self._watchers: list[tuple[grpc.Channel, Any]] = []
        self.pod_resources_socket = directory / "pod-resources.sock"
        self._serve_pod_resources = pod_resources

    # ------------------------------------------------------------------ lifecycle
    @property
    def socket(self) -> Path:
        return self.dir / "kubelet.sock"

    def start(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._reg_server = server
        if self._serve_pod_resources and self._pr_server is None:
            prs = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            pr_grpc.add_PodResourcesListerServicer_to_server(_PodResources(self), prs)
            prs.add_insecure_port(f"unix://{self.pod_resources_socket}")
            prs.start()
            self._pr_server = prs

    def stop(self) -> None:
        for channel, call in self._watchers:
            call.cancel()
            channel.close()
        self._watchers.clear()
        if self._reg_server is not None:
            self._reg_server.stop(0).wait(2)
            self._reg_server = None
        if self._pr_server is not None:
            self._pr_server.stop(0).wait(2)
            self._pr_server = None

    def restart(self) -> None:
        """Like a kubelet restart: stop, delete every plugin socket and kubelet.sock in the
        directory, forget registrations, start again (new kubelet.sock)."""
        if self._reg_server is not None:
            self._reg_server.stop(0).wait(2)
            self._reg_server = None
        for channel, call in self._watchers:
            call.cancel()
            channel.close()
        self._watchers.clear()
        for entry in self.dir.iterdir():
            if entry.is_socket() and entry != self.pod_resources_socket:
                entry.unlink()
        with self.cond:
            self.registrations.clear()
            self.streams.clear()
        self.start()

    # ------------------------------------------------------------------ registration
    def wait_registered(
        self, resources: Iterable[str], timeout: float = 30.0
    ) -> dict[str, pb.RegisterRequest]:
        wanted = set(resources)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                got = {r.resource_name: r for r in self.registrations if r.resource_name in wanted}
                if set(got) == wanted:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"not registered: {sorted(wanted - set(got))}")
                self.cond.wait(left)

    def endpoint(self, resource: str) -> Path:
        with self.cond:
            reg = [r for r in self.registrations if r.resource_name == resource][-1]
        return self.dir / reg.endpoint

    def client(self, resource: str) -> pb_grpc.DevicePluginStub:
        channel = grpc.insecure_channel(f"unix://{self.endpoint(resource)}")
        return pb_grpc.DevicePluginStub(channel)

    # ------------------------------------------------------------------ ListAndWatch
    def watch(self, resource: str) -> None:
        """Open the ListAndWatch stream of ``resource`` and keep :attr:`streams` current."""
        channel = grpc.insecure_channel(f"unix://{self.endpoint(resource)}")
        call = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty())
        self._watchers.append((channel, call))
        with self.cond:
            self.streams[resource] = Stream()

        def run() -> None:
            try:
                for resp in call:
                    with self.cond:
                        s = self.streams.setdefault(resource, Stream())
                        s.devices = list(resp.devices)
                        s.updates += 1
                        self.cond.notify_all()
            except grpc.RpcError:
                pass

        threading.Thread(target=run, daemon=True).start()

    def wait_devices(self, resource: str, predicate: Any, timeout: float = 30.0) -> list[pb.Device]:
        """Block until the latest device list of ``resource`` satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                s = self.streams.get(resource)
                if s is not None and s.updates and predicate(s.devices):
                    return list(s.devices)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{resource}: condition not met; last {s}")
                self.cond.wait(left)

    def healthy(self, resource: str) -> set[str]:
        with self.cond:
            return {d.ID for d in self.streams[resource].devices if d.health == "Healthy"}

    # ------------------------------------------------------------------ admission
    def in_use(self, resource: str) -> set[str]:
        with self.cond:
            return {
                d for (_ns, _n, _c, r), ids in self.assigned.items() if r == resource for d in ids
            }

    def admit_container(
        self,
        namespace: str,
        pod: str,
        container: str,
        resource: str,
        size: int,
        *,
        containers: Iterable[str] = ("main",),
        prefer: bool = True,
        override: list[str] | None = None,
    ) -> pb.ContainerAllocateResponse:
        """Allocate ``size`` devices of ``resource`` for one container as the device manager
        does; ``override`` replaces the preferred set (a kubelet that ignores the plugin).

        Raises:
            grpc.RpcError: the plugin refused (GetPreferredAllocation or Allocate).
        """
        with self.cond:
            self.known_pods.setdefault((namespace, pod), list(containers))
        client = self.client(resource)
        available = sorted(self.healthy(resource) - self.in_use(resource))
        chosen: list[str]
        if override is not None:
            chosen = override
        elif prefer and size < len(available):
            resp = client.GetPreferredAllocation(
                pb.PreferredAllocationRequest(
                    container_requests=[
                        pb.ContainerPreferredAllocationRequest(
                            available_deviceIDs=available, allocation_size=size
                        )
                    ]
                ),
                timeout=10,
            )
            chosen = [d for d in resp.container_responses[0].deviceIDs if d in available][:size]
            chosen += [d for d in available if d not in chosen][: size - len(chosen)]
        else:
            chosen = available[:size]
        alloc = client.Allocate(
            pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=chosen)]
            ),
            timeout=10,
        )
        with self.cond:
            self.assigned[(namespace, pod, container, resource)] = set(chosen)
        return alloc.container_responses[0]

    def pre_start(self, namespace: str, pod: str, container: str, resource: str) -> None:
        with self.cond:
            ids = sorted(self.assigned[(namespace, pod, container, resource)])
        self.client(resource).PreStartContainer(
            pb.PreStartContainerRequest(devices_ids=ids), timeout=10
        )

    def admit_pod(
        self, namespace: str, pod: str, limits: Mapping[str, int], container: str = "main"
    ) -> dict[str, pb.ContainerAllocateResponse]:
        """Admit a one-container pod: every resource of ``limits``, then PreStart each."""
        out = {}
        for res, size in limits.items():
            out[res] = self.admit_container(
                namespace, pod, container, res, size, containers=[container]
            )
        for res in limits:
            self.pre_start(namespace, pod, container, res)
        return out

    def forget_pod(self, namespace: str, pod: str) -> None:
        """The pod ended: the kubelet frees its devices and drops it."""
        with self.cond:
            self.known_pods.pop((namespace, pod), None)
            for key in [k for k in self.assigned if k[:2] == (namespace, pod)]:
                del self.assigned[key]


def short_tmpdir(prefix: str = "gdp") -> Path:
    """A short temporary directory for unix sockets."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def wait_for(predicate: Any, timeout: float = 30.0, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until truthy; return its value or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(interval)


def socket_exists(path: Path) -> bool:
    try:
        return os.path.exists(path) and Path(path).is_socket()
    except OSError:
        return False
