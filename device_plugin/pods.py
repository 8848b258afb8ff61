"""Pods as the plugin sees them, and where it reads them from.

:class:`PodInfo` is the plain-data view of one pod (only what identity and allocation need),
parsed from the Kubernetes JSON form. A :class:`PodSource` lists the pods bound to a node and
patches a pod's annotations. Implementations:

* :class:`KubePodSource` — the API server (official client; a fresh, quorum-read LIST with
  ``fieldSelector=spec.nodeName=<node>`` per call, so the plugin never acts on a stale cache);
* :class:`MemoryPodSource` — in-process tests and benchmarks;
* :class:`FilePodSource` — **tests only** (``--pod-source file:PATH``): pods from a JSON file
  the test writes, annotation patches kept beside it in ``PATH.patches.json``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Protocol

from topology.text import read_utf8

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class PodSourceError(RuntimeError):
    """Pods could not be listed or patched; the message is one line."""


@dataclass(frozen=True)
class ContainerInfo:
    """One container's device-plugin-relevant facts.

    Attributes:
        name: container name.
        init: an init container.
        restartable: an init container with ``restartPolicy: Always`` (a sidecar, which keeps
            its devices like an app container).
        limits: integral resource limits (extended resources only need limits: the API
            server forces requests == limits for them).
    """

    name: str
    init: bool = False
    restartable: bool = False
    limits: Mapping[str, int] = field(default_factory=dict)

    @property
    def keeps_devices(self) -> bool:
        """App containers and sidecars keep their devices; plain init containers hand them
        back for reuse by later containers (kubelet devicemanager ``devicesToReuse``)."""
        return not self.init or self.restartable


@dataclass(frozen=True)
class PodInfo:
    """A pod bound to (or listed for) a node.

    Attributes:
        namespace, name, uid: identity.
        node_name: ``spec.nodeName`` ("" when unbound).
        created: ``metadata.creationTimestamp`` as a UTC datetime (second precision).
        phase: ``status.phase`` ("" when unknown).
        deleting: ``metadata.deletionTimestamp`` is set.
        annotations: ``metadata.annotations``.
        containers: init containers (spec order) then app containers (spec order): the
            order in which the kubelet allocates devices.
    """

    namespace: str
    name: str
    uid: str
    node_name: str
    created: datetime
    phase: str = ""
    deleting: bool = False
    annotations: Mapping[str, str] = field(default_factory=dict)
    containers: tuple[ContainerInfo, ...] = ()

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        """Succeeded or Failed."""
        return self.phase in TERMINAL_PHASES

    def requesting(self, resource: str) -> tuple[ContainerInfo, ...]:
        """Containers with a positive limit on ``resource``, in kubelet allocation order."""
        return tuple(c for c in self.containers if c.limits.get(resource, 0) > 0)

    def with_annotations(self, patch: Mapping[str, str | None]) -> PodInfo:
        """A copy with ``patch`` applied (None deletes a key)."""
        ann = dict(self.annotations)
        for k, v in patch.items():
            if v is None:
                ann.pop(k, None)
            else:
                ann[k] = v
        return replace(self, annotations=ann)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> PodInfo:
        """Parse a pod in Kubernetes JSON form (``kubectl get pod -o json``).

        Limits that are not whole numbers (``500m``) are left out: extended resources are
        integral, and the plugin only looks at its own.

        Raises:
            PodSourceError: required fields are missing or of the wrong type.
        """
        try:
            meta = obj.get("metadata") or {}
            spec = obj.get("spec") or {}
            status = obj.get("status") or {}
            containers = [_container(c, init=True) for c in spec.get("initContainers") or []] + [
                _container(c, init=False) for c in spec.get("containers") or []
            ]
            return cls(
                namespace=str(meta.get("namespace") or "default"),
                name=str(meta["name"]),
                uid=str(meta.get("uid") or ""),
                node_name=str(spec.get("nodeName") or ""),
                created=_timestamp(meta.get("creationTimestamp")),
                phase=str(status.get("phase") or ""),
                deleting=bool(meta.get("deletionTimestamp")),
                annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
                containers=tuple(containers),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise PodSourceError(f"malformed pod object: {type(exc).__name__}: {exc}") from None


def _container(c: Mapping[str, Any], *, init: bool) -> ContainerInfo:
    limits: dict[str, int] = {}
    resources = c.get("resources") or {}
    merged = dict(resources.get("requests") or {})
    merged.update(resources.get("limits") or {})
    for key, raw in merged.items():
        value = _integral(raw)
        if value is not None:
            limits[str(key)] = value
    return ContainerInfo(
        name=str(c["name"]),
        init=init,
        restartable=init and c.get("restartPolicy") == "Always",
        limits=limits,
    )


_SUFFIXES = {
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def _integral(raw: object) -> int | None:
    """A Kubernetes quantity as an int when it is a whole number, else None."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    text = str(raw).strip()
    mult = 1
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            mult, text = _SUFFIXES[suffix], text[: -len(suffix)]
            break
    try:
        value = Decimal(text) * mult
    except InvalidOperation:
        return None
    return int(value) if value == value.to_integral_value() else None


def _timestamp(raw: object) -> datetime:
    if isinstance(raw, datetime):
        return raw if raw.tzinfo else raw.replace(tzinfo=UTC)
    if not raw:
        return datetime.fromtimestamp(0, UTC)
    text = str(raw).replace("Z", "+00:00")
    return datetime.fromisoformat(text).astimezone(UTC)


class PodSource(Protocol):
    """Where the plugin reads pods and writes its allocation marker."""

    def list_pods(self, node: str) -> list[PodInfo]:
        """Every pod whose ``spec.nodeName`` is ``node`` (fresh, not cached).

        Raises:
            PodSourceError: the list failed.
        """
        ...

    def patch_annotations(self, pod: PodInfo, patch: Mapping[str, str | None]) -> None:
        """Set (or, with None, delete) annotations of ``pod`` (guarded by its UID).

        Raises:
            PodSourceError: the patch failed (including: the pod is gone or was replaced).
        """
        ...


class MemoryPodSource:
    """Pods held in memory (tests, benchmarks). Thread-safe."""

    def __init__(self, pods: Iterable[PodInfo | Mapping[str, Any]] = ()) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, PodInfo] = {}
        self.patches: list[tuple[str, dict[str, str | None]]] = []
        for p in pods:
            self.add(p)

    def add(self, pod: PodInfo | Mapping[str, Any]) -> PodInfo:
        """Add or replace a pod (by namespace/name)."""
        info = pod if isinstance(pod, PodInfo) else PodInfo.from_dict(pod)
        with self._lock:
            self._pods[info.key] = info
        return info

    def remove(self, key: str) -> None:
        """Forget the pod ``namespace/name``."""
        with self._lock:
            self._pods.pop(key, None)

    def get(self, key: str) -> PodInfo:
        """The pod ``namespace/name``."""
        with self._lock:
            return self._pods[key]

    def list_pods(self, node: str) -> list[PodInfo]:
        with self._lock:
            return [p for p in self._pods.values() if p.node_name == node]

    def patch_annotations(self, pod: PodInfo, patch: Mapping[str, str | None]) -> None:
        with self._lock:
            current = self._pods.get(pod.key)
            if current is None or (pod.uid and current.uid != pod.uid):
                raise PodSourceError(f"pod {pod.key} (uid {pod.uid}) no longer exists")
            self._pods[pod.key] = current.with_annotations(patch)
            self.patches.append((pod.key, dict(patch)))


class FilePodSource:
    """**Test-only** pod source: ``path`` holds a JSON list of pods (or a ``{"items": [...]}``
    list object) in Kubernetes form, written by the test; patches go to
    ``<path>.patches.json`` (``{"ns/name": {"annotation": "value"}}``) and are overlaid on
    every read, so a restarted plugin sees its own earlier patches."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.patch_path = path.with_name(path.name + ".patches.json")
        self._lock = threading.Lock()

    def _read_json(self, path: Path, default: Any) -> Any:
        try:
            text = read_utf8(path)
        except FileNotFoundError:
            return default
        except OSError as exc:
            raise PodSourceError(f"cannot read {path}: {exc.strerror or exc}") from None
        if not text.strip():
            return default
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise PodSourceError(f"{path} is not JSON: {exc.msg}") from None

    def _pods(self) -> list[PodInfo]:
        raw = self._read_json(self.path, [])
        items: Sequence[Any] = raw.get("items", []) if isinstance(raw, dict) else raw
        if not isinstance(items, list):
            raise PodSourceError(f"{self.path} must hold a list of pods")
        patches = self._read_json(self.patch_path, {})
        pods = [PodInfo.from_dict(item) for item in items]
        return [p.with_annotations(patches.get(p.key, {})) for p in pods]

    def list_pods(self, node: str) -> list[PodInfo]:
        with self._lock:
            return [p for p in self._pods() if p.node_name == node]

    def patch_annotations(self, pod: PodInfo, patch: Mapping[str, str | None]) -> None:
        with self._lock:
            patches = self._read_json(self.patch_path, {})
            entry = dict(patches.get(pod.key, {}))
            entry.update(patch)
            patches[pod.key] = entry
            tmp = self.patch_path.with_name(self.patch_path.name + f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(patches, indent=1, sort_keys=True))
            os.replace(tmp, self.patch_path)


class KubePodSource:
    """Pods from the API server through the official client.

    Args:
        api: a ``kubernetes.client.CoreV1Api``.
        timeout_s: per-request timeout, seconds.
    """

    def __init__(self, api: Any, timeout_s: float = 10.0) -> None:
        self.api = api
        self.timeout_s = timeout_s

    def list_pods(self, node: str) -> list[PodInfo]:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self.api.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}",
                _preload_content=False,
                _request_timeout=self.timeout_s,
            )
            data = json.loads(resp.data)
        except ApiException as exc:
            raise PodSourceError(
                f"listing pods on node {node}: HTTP {exc.status} {exc.reason}"
            ) from None
        except (OSError, ValueError) as exc:
            raise PodSourceError(f"listing pods on node {node}: {exc}") from None
        except Exception as exc:  # urllib3 errors (MaxRetryError, timeouts) are not OSError
            raise PodSourceError(
                f"listing pods on node {node}: {type(exc).__name__}: {' '.join(str(exc).split())}"
            ) from None
        return [PodInfo.from_dict(item) for item in data.get("items") or []]

    def patch_annotations(self, pod: PodInfo, patch: Mapping[str, str | None]) -> None:
        from kubernetes.client.exceptions import ApiException

        body: dict[str, Any] = {"metadata": {"annotations": dict(patch)}}
        if pod.uid:
            body["metadata"]["uid"] = pod.uid  # precondition: never patch a replacement pod
        try:
            self.api.patch_namespaced_pod(
                pod.name, pod.namespace, body, _request_timeout=self.timeout_s
            )
        except ApiException as exc:
            raise PodSourceError(
                f"patching pod {pod.key}: HTTP {exc.status} {exc.reason}"
            ) from None
        except Exception as exc:
            raise PodSourceError(
                f"patching pod {pod.key}: {type(exc).__name__}: {' '.join(str(exc).split())}"
            ) from None


def make_pod(
    name: str,
    node: str,
    *,
    namespace: str = "default",
    uid: str | None = None,
    created: str = "2026-01-01T00:00:00Z",
    annotations: Mapping[str, str] | None = None,
    limits: Mapping[str, int] | None = None,
    containers: Sequence[Mapping[str, Any]] | None = None,
    init_containers: Sequence[Mapping[str, Any]] | None = None,
    phase: str = "Pending",
) -> dict[str, Any]:
    """A pod in Kubernetes JSON form (tests, benchmarks, docs): one container ``main`` with
    ``limits`` unless ``containers`` is given."""
    if containers is None:
        containers = [
            {
                "name": "main",
                "image": "cuda",
                "resources": {"limits": {k: str(v) for k, v in (limits or {}).items()}},
            }
        ]
    spec: dict[str, Any] = {"nodeName": node, "containers": list(containers)}
    if init_containers:
        spec["initContainers"] = list(init_containers)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{namespace}-{name}",
            "creationTimestamp": created,
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        "status": {"phase": phase},
    }
