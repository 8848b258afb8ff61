"""Publishing the node's topology for the extender: one annotation set and two labels.

=========================================  ====================================================
key                                        value
=========================================  ====================================================
annotation ``gputopo.io/topology``         :func:`topology.serialization.dumps` of the
                                           discovered topology (the extender's only view of
                                           the hardware)
annotation ``gputopo.io/unhealthy-gpus``   comma-separated indices of GPUs with critical XIDs
                                           ("" when all are healthy)
annotation ``gputopo.io/vgpu-memory-unit-mib``  MiB per ``gputopo.io/vgpu-memory`` device
annotation ``gputopo.io/gpu-shared-slots``  co-location slots per GPU
                                        (``gputopo.io/gpu-shared`` devices per GPU)
annotation ``gputopo.io/network``          the node's compute NICs and each GPU's path to
                                           them (:func:`topology.network.dumps`), when known
label ``gputopo.io/gpu-model``             the GPU model, sanitised to a label value
                                           (``Tesla V100-SXM2-16GB`` → ``Tesla-V100-SXM2-16GB``;
                                           ``mixed`` when the GPUs differ)
label ``gputopo.io/topology-class``        :attr:`topology.model.Topology.topology_class`
labels ``gputopo.io/topology-manager-*``,  this node's kubelet NUMA-alignment settings
``gputopo.io/cpu-manager-policy``          (:func:`topology.numa_alignment.kubelet_config_labels`;
                                           :mod:`device_plugin.kubelet_config`), always all
                                           four so a change back to ``none`` is seen
=========================================  ====================================================

The plugin publishes at start, every ``publish_interval_s``, and at once when GPU health
changes. A merge patch only touches these keys.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from topology.contract import (
    ANN_GPU_SHARED_SLOTS,
    ANN_NETWORK,
    ANN_TOPOLOGY,
    ANN_UNHEALTHY_GPUS,
    ANN_VGPU_MEMORY_UNIT,
    LABEL_GPU_MODEL,
    LABEL_TOPOLOGY_CLASS,
)
from topology.model import Topology
from topology.network import NodeNetwork
from topology.network import dumps as dumps_network
from topology.numa_alignment import KubeletConfig, kubelet_config_labels
from topology.serialization import dumps

log = logging.getLogger(__name__)



class PublishError(RuntimeError):
    """The node could not be patched; one line."""


@dataclass(frozen=True)
class NodeMetadata:
    """What the plugin publishes on its Node."""

    annotations: Mapping[str, str]
    labels: Mapping[str, str]


_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def label_value(text: str) -> str:
    """A valid label value from free text: runs of other characters become ``-``, trimmed to
    63 characters, starting and ending alphanumeric ("" stays "")."""
    value = _LABEL_BAD.sub("-", text.strip())[:63]
    return value.strip("-_.")


def gpu_model_label(topology: Topology) -> str:
    """The ``gputopo.io/gpu-model`` label value (``mixed`` for heterogeneous nodes,
    ``unknown`` when NVML gave no name)."""
    names = {g.name for g in topology.gpus}
    if len(names) > 1:
        return "mixed"
    return label_value(next(iter(names))) or "unknown"


def node_metadata(
    topology: Topology, unhealthy: frozenset[str], unit_mib: int, shared_slots: int = 3, *,
    kubelet: KubeletConfig | None = None, network: NodeNetwork | None = None,
) -> NodeMetadata:
    """The annotations and labels for ``topology`` with ``unhealthy`` GPU UUIDs
    (``shared_slots``: co-location slots per GPU, published as
    ``gputopo.io/gpu-shared-slots``), the kubelet's NUMA-alignment settings (None: the
    kubelet's defaults) and the node's NICs (``gputopo.io/network``; None: not published)."""
    bad = sorted(g.index for g in topology.gpus if g.uuid in unhealthy)
    extra = {ANN_NETWORK: dumps_network(network)} if network is not None else {}
    return NodeMetadata(
        annotations={
            ANN_TOPOLOGY: dumps(topology),
            ANN_UNHEALTHY_GPUS: ",".join(str(i) for i in bad),
            ANN_VGPU_MEMORY_UNIT: str(unit_mib),
            ANN_GPU_SHARED_SLOTS: str(shared_slots),
            **extra,
        },
        labels={
            LABEL_GPU_MODEL: gpu_model_label(topology),
            LABEL_TOPOLOGY_CLASS: topology.topology_class,
            **kubelet_config_labels(kubelet or KubeletConfig()),
        },
    )


class NodePublisher(Protocol):
    """Where node metadata goes."""

    def publish(self, node: str, meta: NodeMetadata) -> None:
        """Merge ``meta`` into the Node ``node``.

        Raises:
            PublishError: the update failed.
        """
        ...


class KubeNodePublisher:
    """Merge-patches the Node through the official client (``CoreV1Api``)."""

    def __init__(self, api: Any, timeout_s: float = 10.0) -> None:
        self.api = api
        self.timeout_s = timeout_s

    def publish(self, node: str, meta: NodeMetadata) -> None:
        from kubernetes.client.exceptions import ApiException

        body = {"metadata": {"annotations": dict(meta.annotations), "labels": dict(meta.labels)}}
        try:
            self.api.patch_node(node, body, _request_timeout=self.timeout_s)
        except ApiException as exc:
            raise PublishError(f"patching node {node}: HTTP {exc.status} {exc.reason}") from None
        except Exception as exc:
            raise PublishError(
                f"patching node {node}: {type(exc).__name__}: {' '.join(str(exc).split())}"
            ) from None


class FileNodePublisher:
    """**Test-only**: writes ``{"node": ..., "annotations": ..., "labels": ...}`` to a file
    (atomically), merged with what is there."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def publish(self, node: str, meta: NodeMetadata) -> None:
        try:
            current = json.loads(self.path.read_text()) if self.path.exists() else {}
        except (OSError, json.JSONDecodeError):
            current = {}
        doc = {
            "node": node,
            "annotations": {**current.get("annotations", {}), **meta.annotations},
            "labels": {**current.get("labels", {}), **meta.labels},
            "publications": int(current.get("publications", 0)) + 1,
        }
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
            os.replace(tmp, self.path)
        except OSError as exc:
            raise PublishError(f"writing {self.path}: {exc.strerror or exc}") from None


class MemoryNodePublisher:
    """In-process tests: keeps every publication."""

    def __init__(self) -> None:
        self.published: list[tuple[str, NodeMetadata]] = []

    def publish(self, node: str, meta: NodeMetadata) -> None:
        self.published.append((node, meta))


class PublishLoop:
    """Publishes at start, every ``interval_s``, and when :meth:`kick` is called (health
    changes). Failures are logged and retried after at most 2 s."""

    def __init__(
        self,
        publisher: NodePublisher,
        node: str,
        make: Any,
        interval_s: float,
        on_error: Any = None,
    ) -> None:
        self.publisher = publisher
        self.node = node
        self.make = make  # () -> NodeMetadata
        self.interval_s = interval_s
        self.on_error = on_error or (lambda: None)
        self._kick = threading.Event()
        self.last: NodeMetadata | None = None

    def kick(self) -> None:
        """Publish again soon (from any thread)."""
        self._kick.set()

    def publish_once(self) -> bool:
        """Publish now; True on success."""
        meta = self.make()
        try:
            self.publisher.publish(self.node, meta)
        except PublishError as exc:
            log.error("%s", exc)
            self.on_error()
            return False
        if meta != self.last:
            log.info(
                "published topology of node %s (class %s, unhealthy GPUs: %s)",
                self.node,
                meta.labels.get(LABEL_TOPOLOGY_CLASS),
                meta.annotations.get(ANN_UNHEALTHY_GPUS) or "none",
            )
        self.last = meta
        return True

    def run(self, stop: threading.Event) -> None:
        """Loop until ``stop`` is set."""
        while not stop.is_set():
            try:
                ok = self.publish_once()
            except Exception:  # noqa: BLE001 - one bad pass must not end the publishing
                log.exception("publishing the topology of node %s failed", self.node)
                self.on_error()
                ok = False
            # a failure (API down, Node not created yet) is retried within seconds
            self._kick.wait(self.interval_s if ok else min(self.interval_s, 2.0))
            self._kick.clear()

    def start(self, stop: threading.Event) -> threading.Thread:
        """:meth:`run` in a daemon thread."""
        t = threading.Thread(target=self.run, args=(stop,), name="gputopo-publish", daemon=True)
        t.start()
        return t

    def wake(self) -> None:
        """Unblock :meth:`run` (on shutdown)."""
        self._kick.set()
