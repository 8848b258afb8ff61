"""The kubelet's own record of which pod holds which devices (pod-resources API ``List``).

The device-plugin API never says which pod an Allocate is for, but the kubelet's
pod-resources API lists every pod the kubelet knows (``GetActivePods``) and the devices it has
assigned to each container. The kubelet adds a pod to its pod manager *before* admitting it
(``HandlePodAdditions``), admits one pod at a time, and records a container's devices right
after our Allocate returns. So, during an Allocate for resource R, the pods the kubelet lists
with a container still lacking R devices are exactly the pod being admitted — which is how
:mod:`device_plugin.allocation` narrows its candidates. After allocation the same list tells
which pod really got a device set, which :meth:`~device_plugin.allocation.Allocator.pre_start`
checks before the container starts.

The socket is optional (it must be mounted into the plugin's pod): without it the plugin falls
back to the kubelet's admission order (creation time) and says so in its log and metrics.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import grpc

from device_plugin.api import podresources_pb2 as pr
from device_plugin.api import podresources_pb2_grpc as pr_grpc

log = logging.getLogger(__name__)

#: container name → resource name → device IDs
ContainerDevices = Mapping[str, Mapping[str, frozenset[str]]]


@dataclass(frozen=True)
class KubeletPods:
    """One ``List`` answer: ``(namespace, name)`` → container → resource → device IDs.

    Only app containers and restartable init containers appear (the kubelet leaves plain
    init containers out of ``List``).
    """

    pods: Mapping[tuple[str, str], ContainerDevices]

    def knows(self, namespace: str, name: str) -> bool:
        """The kubelet has this pod in its pod manager."""
        return (namespace, name) in self.pods

    def devices(self, namespace: str, name: str, container: str, resource: str) -> frozenset[str]:
        """Devices of ``resource`` the kubelet assigned to that container (empty if none)."""
        return self.pods.get((namespace, name), {}).get(container, {}).get(resource, frozenset())

    def listed_containers(self, namespace: str, name: str) -> frozenset[str]:
        """Containers of the pod that ``List`` reports."""
        return frozenset(self.pods.get((namespace, name), {}))

    def owner_of(self, resource: str, devices: frozenset[str]) -> tuple[str, str, str] | None:
        """``(namespace, name, container)`` holding exactly ``devices`` of ``resource``, or
        the first one holding any of them; None when nobody does."""
        partial: tuple[str, str, str] | None = None
        for (ns, name), containers in self.pods.items():
            for cname, by_resource in containers.items():
                held = by_resource.get(resource, frozenset())
                if held == devices:
                    return ns, name, cname
                if partial is None and held & devices:
                    partial = (ns, name, cname)
        return partial


class KubeletView(Protocol):
    """A source of :class:`KubeletPods`."""

    def snapshot(self) -> KubeletPods | None:
        """The kubelet's current view, or None when unavailable (the caller falls back)."""
        ...


class NoKubeletView:
    """Pod-resources disabled: always None."""

    def snapshot(self) -> KubeletPods | None:
        return None


class PodResourcesClient:
    """``PodResourcesLister.List`` over the kubelet's unix socket.

    Args:
        socket_path: e.g. ``/var/lib/kubelet/pod-resources/kubelet.sock``.
        timeout_s: per-call deadline, seconds.
    """

    def __init__(self, socket_path: str, timeout_s: float = 2.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._stub: pr_grpc.PodResourcesListerStub | None = None
        self._warned = False

    def _get_stub(self) -> pr_grpc.PodResourcesListerStub:
        with self._lock:
            if self._stub is None:
                self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
                self._stub = pr_grpc.PodResourcesListerStub(self._channel)
            return self._stub

    def _drop(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = None
            self._stub = None

    def snapshot(self) -> KubeletPods | None:
        if not os.path.exists(self.socket_path):
            self._warn(f"pod-resources socket {self.socket_path} does not exist")
            return None
        try:
            resp = self._get_stub().List(pr.ListPodResourcesRequest(), timeout=self.timeout_s)
        except grpc.RpcError as exc:
            self._drop()  # the kubelet may have restarted: reconnect next time
            code = exc.code() if hasattr(exc, "code") else None
            self._warn(f"pod-resources List failed: {code}")
            return None
        if self._warned:
            log.info("pod-resources API available again at %s", self.socket_path)
            self._warned = False
        pods: dict[tuple[str, str], dict[str, dict[str, frozenset[str]]]] = {}
        for p in resp.pod_resources:
            containers: dict[str, dict[str, frozenset[str]]] = {}
            for c in p.containers:
                by_res: dict[str, set[str]] = {}
                for d in c.devices:
                    by_res.setdefault(d.resource_name, set()).update(d.device_ids)
                containers[c.name] = {k: frozenset(v) for k, v in by_res.items()}
            pods[(p.namespace, p.name)] = containers
        return KubeletPods(pods)

    def _warn(self, message: str) -> None:
        if not self._warned:
            log.warning("%s; pod identity falls back to admission order", message)
            self._warned = True

    def close(self) -> None:
        """Close the channel."""
        self._drop()
