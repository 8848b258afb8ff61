"""Publishing the node's ResourceSlices (:func:`topology.dra.resource_slices`) and keeping
them current.

:class:`SlicePublisher` computes the slices for the GPUs healthy now and makes the API
server's copy of this node's pool equal to them: server-side apply of each slice (field
manager ``gputopo-dra-driver``), deletion of slices of the pool it no longer needs. Every
slice carries the hash of the whole pool's content (annotation :data:`ANN_POOL_HASH`); while
the slices found carry the hash of what should be published, nothing is written, so a resync
costs one LIST. Whenever the content changes (a GPU turns unhealthy or recovers), the pool's
``generation`` goes up by one on every slice, as the API requires of a pool's slices, and
consumers drop the old slices' devices.

:class:`SliceLoop` publishes at start, every ``interval_s`` (repairing what someone else
changed or deleted) and at once when kicked (a health change). Failures are logged and
retried at the next tick.

Credentials: the DaemonSet's service account may create/update/delete ResourceSlices
(RBAC cannot say "of my node"); the chart's ValidatingAdmissionPolicy lets each driver pod
touch only slices whose ``spec.nodeName`` is its own node (docs/dra-driver.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from topology.colocation.model import DEFAULT_SLOTS
from topology.dra import DRIVER, resource_slices
from topology.model import Topology

log = logging.getLogger(__name__)

#: Slice annotation: sha256 of the pool's content (every slice's spec without the generation).
ANN_POOL_HASH = "gputopo.io/pool-hash"
FIELD_MANAGER = "gputopo-dra-driver"


class SliceError(RuntimeError):
    """The API refused or could not be reached; one line."""


class SliceStore(Protocol):
    """Where the node's slices live."""

    def list(self, node: str) -> list[dict[str, Any]]:
        """This driver's slices of ``node`` (API JSON).

        Raises:
            SliceError: the list failed.
        """
        ...

    def apply(self, body: Mapping[str, Any]) -> None:
        """Create or update one slice.

        Raises:
            SliceError: the write was refused or failed.
        """
        ...

    def delete(self, name: str) -> None:
        """Delete one slice (gone already is fine).

        Raises:
            SliceError: refused or failed.
        """
        ...


def _api_error(what: str, exc: Exception) -> SliceError:
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        body = ""
        try:
            body = str(json.loads(exc.body or "{}").get("message", ""))
        except (ValueError, AttributeError):
            pass
        return SliceError(f"{what}: HTTP {exc.status} {exc.reason}{': ' + body if body else ''}")
    return SliceError(f"{what}: {type(exc).__name__}: {' '.join(str(exc).split())}")


class KubeSliceStore:
    """The API server, through the official client (``ResourceV1Api``; raw JSON in and out,
    server-side apply for writes)."""

    def __init__(self, api_client: Any, timeout_s: float = 10.0) -> None:
        from kubernetes import client

        self.api = client.ResourceV1Api(api_client)
        self.timeout_s = timeout_s

    def list(self, node: str) -> list[dict[str, Any]]:
        try:
            resp: Any = self.api.list_resource_slice(
                field_selector=f"spec.nodeName={node},spec.driver={DRIVER}",
                _preload_content=False, _request_timeout=self.timeout_s)
            items: list[dict[str, Any]] = json.loads(resp.data).get("items", [])
            return items
        except Exception as exc:
            raise _api_error(f"listing ResourceSlices of node {node}", exc) from None

    def apply(self, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        try:
            self.api.patch_resource_slice(
                name, dict(body), field_manager=FIELD_MANAGER, force=True,
                _content_type="application/apply-patch+yaml", _preload_content=False,
                _request_timeout=self.timeout_s)
        except Exception as exc:
            raise _api_error(f"applying ResourceSlice {name}", exc) from None

    def delete(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.delete_resource_slice(name, _preload_content=False,
                                           _request_timeout=self.timeout_s)
        except ApiException as exc:
            if exc.status != 404:
                raise _api_error(f"deleting ResourceSlice {name}", exc) from None
        except Exception as exc:
            raise _api_error(f"deleting ResourceSlice {name}", exc) from None


class MemorySliceStore:
    """In-process tests: slices in a dict, every write counted."""

    def __init__(self) -> None:
        self.slices: dict[str, dict[str, Any]] = {}
        self.writes = 0

    def list(self, node: str) -> list[dict[str, Any]]:
        return [json.loads(json.dumps(s)) for s in self.slices.values()
                if s["spec"]["nodeName"] == node and s["spec"]["driver"] == DRIVER]

    def apply(self, body: Mapping[str, Any]) -> None:
        self.writes += 1
        self.slices[body["metadata"]["name"]] = json.loads(json.dumps(body))

    def delete(self, name: str) -> None:
        self.writes += 1
        self.slices.pop(name, None)


class FileSliceStore(MemorySliceStore):
    """**Test-only**: the slices kept in a JSON file (a list), re-read before every call (so a
    test can delete them behind the driver's back, as a starting kubelet does) and rewritten
    on every change."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def _load(self) -> None:
        try:
            self.slices = {s["metadata"]["name"]: s for s in json.loads(self.path.read_text())}
        except (OSError, ValueError):
            self.slices = {}

    def _save(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(list(self.slices.values()), indent=1))
        os.replace(tmp, self.path)

    def list(self, node: str) -> list[dict[str, Any]]:
        self._load()
        return super().list(node)

    def apply(self, body: Mapping[str, Any]) -> None:
        self._load()
        super().apply(body)
        self._save()

    def delete(self, name: str) -> None:
        self._load()
        super().delete(name)
        self._save()


def pool_hash(slices: list[dict[str, Any]]) -> str:
    """sha256 of the slices' specs with the pool generation left out."""
    specs = []
    for s in slices:
        spec = dict(s["spec"])
        spec["pool"] = {k: v for k, v in spec["pool"].items() if k != "generation"}
        specs.append({"name": s["metadata"]["name"], "spec": spec})
    return hashlib.sha256(json.dumps(specs, sort_keys=True).encode()).hexdigest()


class SlicePublisher:
    """Makes the API's copy of ``node``'s pool equal to the slices of its healthy GPUs.

    Args:
        store: where the slices live.
        topology: the node's GPUs.
        node: the node name.
        slots: co-location slots per GPU (0: no slot devices).
        shares: publish share devices.
        roots: GPU index → ``pcieRoot`` (default from the topology).
        allocator_taint: taint every device with :data:`topology.dra.ALLOCATOR_TAINT`.
    """

    def __init__(self, store: SliceStore, topology: Topology, node: str, *,
                 slots: int = DEFAULT_SLOTS, shares: bool = True,
                 roots: Mapping[int, str] | None = None,
                 allocator_taint: bool = True) -> None:
        self.store = store
        self.topology = topology
        self.node = node
        self.slots = slots
        self.shares = shares
        self.roots = roots
        self.allocator_taint = allocator_taint
        self.generation = 0
        self.publications = 0

    def desired(self, unhealthy: frozenset[int], generation: int) -> list[dict[str, Any]]:
        """The slices to publish for GPUs ``unhealthy`` left out, at ``generation``."""
        slices = resource_slices(self.topology, self.node, generation=generation,
                                 unhealthy=unhealthy, slots=self.slots, shares=self.shares,
                                 roots=self.roots, allocator_taint=self.allocator_taint)
        digest = pool_hash(slices)
        for s in slices:
            s["metadata"]["annotations"] = {ANN_POOL_HASH: digest}
        return slices

    def sync(self, unhealthy: frozenset[int]) -> bool:
        """One round: returns True when something was written.

        Raises:
            SliceError: a list or write failed (the next round retries).
        """
        existing = self.store.list(self.node)
        want = self.desired(unhealthy, 0)
        digest = want[0]["metadata"]["annotations"][ANN_POOL_HASH]
        gens = [int(s["spec"]["pool"].get("generation", 0)) for s in existing]
        current = max(gens, default=0)
        names = {s["metadata"]["name"] for s in want}
        up_to_date = (
            len(existing) == len(want)
            and {s["metadata"]["name"] for s in existing} == names
            and all((s["metadata"].get("annotations") or {}).get(ANN_POOL_HASH) == digest
                    for s in existing)
            and all(g == current for g in gens)
        )
        if up_to_date:
            self.generation = current
            return False
        generation = max(current, self.generation) + 1
        for body in self.desired(unhealthy, generation):
            self.store.apply(body)
        for s in existing:
            if s["metadata"]["name"] not in names:
                self.store.delete(s["metadata"]["name"])
        self.generation = generation
        self.publications += 1
        devices = sum(len(s["spec"].get("devices", [])) for s in want)
        log.info("published %d ResourceSlice(s) of node %s, pool generation %d: %d devices%s",
                 len(want), self.node, generation, devices,
                 f" (unhealthy GPUs left out: {','.join(map(str, sorted(unhealthy)))})"
                 if unhealthy else "")
        return True


class SliceLoop:
    """Runs :meth:`SlicePublisher.sync` at start, every ``interval_s`` and when kicked."""

    def __init__(self, publisher: SlicePublisher, unhealthy: Callable[[], frozenset[int]],
                 interval_s: float, on_error: Callable[[], None] | None = None) -> None:
        self.publisher = publisher
        self.unhealthy = unhealthy
        self.interval_s = interval_s
        self.on_error = on_error or (lambda: None)
        self._kick = threading.Event()
        self.synced = threading.Event()

    def kick(self) -> None:
        """Sync again soon (from any thread)."""
        self._kick.set()

    def sync_once(self) -> bool:
        """One sync; False when it failed (logged)."""
        try:
            self.publisher.sync(self.unhealthy())
        except SliceError as exc:
            log.error("%s", exc)
            self.on_error()
            return False
        self.synced.set()
        return True

    def run(self, stop: threading.Event) -> None:
        """Loop until ``stop`` is set."""
        while not stop.is_set():
            self._kick.clear()
            try:
                ok = self.sync_once()
            except Exception:  # noqa: BLE001 - one bad pass must not end the publishing
                log.exception("publishing the ResourceSlices failed")
                self.on_error()
                ok = False
            self._kick.wait(self.interval_s if ok else min(self.interval_s, 2.0))

    def start(self, stop: threading.Event) -> threading.Thread:
        """:meth:`run` in a daemon thread."""
        t = threading.Thread(target=self.run, args=(stop,), name="gputopo-slices", daemon=True)
        t.start()
        return t
