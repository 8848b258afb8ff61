"""``NodePrepareResources`` / ``NodeUnprepareResources`` without the gRPC: read the claim,
check it against what is already prepared, write its CDI spec, record it in the checkpoint.

The kubelet sends only a claim's namespace, name and UID; the allocation is in the claim's
``status.allocation.devices.results``, read from the API server (:class:`KubeClaimSource`).
Preparing a claim:

1. already prepared (in the checkpoint, e.g. after a driver or kubelet restart): answer the
   same devices again, rewriting its CDI spec if the file is gone — never prepared twice;
2. read the claim; its UID must be the one the kubelet named (a claim deleted and re-created
   under the same name is another claim);
3. this driver's results (:func:`topology.dra.claim_allocation`, pool = this node): none →
   nothing to do; a GPU that is unhealthy now → refused;
4. add them to the holdings of every prepared claim (:func:`topology.dra.add_allocation`): a
   claim that would hand out a GPU already held (whole, in another view, beyond its compute,
   memory or slots) is refused with the rule it breaks — whoever wrote the allocation, the
   node does not double-book a GPU;
5. write the CDI spec (:mod:`dra_driver.cdi`), then the checkpoint; only then answer.

Unpreparing removes the spec, then the checkpoint entry; an unknown claim is already
unprepared (the kubelet may repeat the call). Errors are per claim, one line, returned in the
claim's ``error`` (the kubelet retries); one lock serialises all of it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from dra_driver.cdi import CDIError, cdi_device_id, claim_spec, remove_spec, spec_path, write_spec
from dra_driver.checkpoint import Checkpoint, CheckpointError, PreparedClaim
from topology.colocation.model import DEFAULT_SLOTS
from topology.dra import (
    DRIVER,
    ClaimAllocation,
    DRAContractError,
    Holding,
    add_allocation,
    claim_allocation,
    remove_allocation,
)
from topology.model import Topology
from topology.text import read_utf8

log = logging.getLogger(__name__)


class ClaimSourceError(RuntimeError):
    """A claim could not be read; one line."""


class ClaimSource(Protocol):
    """Where ResourceClaims are read from."""

    def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        """The claim as API JSON (``metadata``, ``status``).

        Raises:
            ClaimSourceError: not found or unreadable.
        """
        ...


class KubeClaimSource:
    """Reads claims through the official client (``ResourceV1Api``), as raw JSON so every
    field of the 1.36 allocation (``shareID``, ``consumedCapacity``) arrives as sent."""

    def __init__(self, api_client: Any, timeout_s: float = 10.0) -> None:
        from kubernetes import client

        self.api = client.ResourceV1Api(api_client)
        self.timeout_s = timeout_s

    def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        from kubernetes.client.exceptions import ApiException

        try:
            resp: Any = self.api.read_namespaced_resource_claim(
                name, namespace, _preload_content=False, _request_timeout=self.timeout_s)
            doc: Mapping[str, Any] = json.loads(resp.data)
            return doc
        except ApiException as exc:
            raise ClaimSourceError(
                f"reading ResourceClaim {namespace}/{name}: HTTP {exc.status} {exc.reason}"
            ) from None
        except Exception as exc:
            raise ClaimSourceError(f"reading ResourceClaim {namespace}/{name}: "
                                   f"{type(exc).__name__}: {' '.join(str(exc).split())}") from None


class FileClaimSource:
    """**Test-only**: claims from a JSON file (a list of ResourceClaim objects, or ``kubectl
    get resourceclaims -o json``), re-read on every call."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        try:
            doc = json.loads(read_utf8(self.path))
        except (OSError, json.JSONDecodeError) as exc:
            raise ClaimSourceError(f"reading claims file {self.path}: {exc}") from None
        items = doc.get("items", []) if isinstance(doc, dict) else doc
        if not isinstance(items, list):
            raise ClaimSourceError(f"claims file {self.path}: not a list of ResourceClaims")
        for c in items:
            meta = c.get("metadata") if isinstance(c, Mapping) else None
            if not isinstance(meta, Mapping):
                continue
            if meta.get("namespace") == namespace and meta.get("name") == name:
                return dict(c)
        raise ClaimSourceError(f"ResourceClaim {namespace}/{name} not found in {self.path}")


@dataclass(frozen=True)
class PreparedDevice:
    """One device in a ``NodePrepareResourceResponse``."""

    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True)
class PrepareResult:
    """The answer for one claim: its devices, or an error."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


def _base_request(request: str) -> str:
    """A result's request without its subrequest (``gpus/large`` → ``gpus``), as the kubelet
    matches containers' ``resources.claims[].request``."""
    return request.split("/", 1)[0]


def _allocation_results(claim: Mapping[str, Any]) -> object:
    """A claim's ``status.allocation.devices.results`` ([] where a level is absent or not
    an object: nothing allocated)."""
    node: object = claim
    for key in ("status", "allocation", "devices", "results"):
        if not isinstance(node, Mapping):
            return []
        node = node.get(key)
    return [] if node is None else node


class Preparer:
    """Prepares and unprepares claims on one node (module docstring).

    Args:
        topology: this node's GPUs.
        node: this node's name (= the pool).
        claims: where claims are read.
        checkpoint: the checkpoint; loaded now.
        cdi_dir: where CDI specs go.
        minors: GPU index → ``/dev/nvidia<minor>``.
        mps_pipe_dir, mps_shm_dir: host MPS directories.
        device_exists: leave out missing device nodes (fake-topology nodes).
        slots: co-location slots per GPU (the slice's ``slots`` capacity).
        unhealthy: the indices of unhealthy GPUs now.

    Raises:
        CheckpointError: the checkpoint is unusable or its claims overlap.
    """

    def __init__(
        self,
        topology: Topology,
        node: str,
        claims: ClaimSource,
        checkpoint: Checkpoint,
        *,
        cdi_dir: Path,
        minors: Mapping[int, int],
        mps_pipe_dir: Path,
        mps_shm_dir: Path | None = None,
        device_exists: Callable[[str], bool] | None = None,
        slots: int = DEFAULT_SLOTS,
        unhealthy: Callable[[], frozenset[int]] = frozenset,
    ) -> None:
        self.topology = topology
        self.node = node
        self.claims = claims
        self.checkpoint = checkpoint
        self.cdi_dir = cdi_dir
        self.minors = dict(minors)
        self.mps_pipe_dir = mps_pipe_dir
        self.mps_shm_dir = mps_shm_dir
        self.device_exists = device_exists
        self.slots = slots
        self.unhealthy = unhealthy
        self._lock = threading.Lock()
        self.prepared: dict[str, PreparedClaim] = checkpoint.load()
        self.holdings: dict[int, Holding] = {}
        for uid, c in self.prepared.items():
            try:
                add_allocation(self.holdings, uid, c.allocation(), topology, slots=slots)
            except DRAContractError as exc:
                raise CheckpointError(f"checkpoint claim {c.key}: {exc}") from None
        if self.prepared:
            log.info("checkpoint: %d prepared claim(s): %s", len(self.prepared),
                     ", ".join(sorted(c.key for c in self.prepared.values())))

    # ------------------------------------------------------------------ helpers
    def _devices(self, uid: str, alloc: ClaimAllocation) -> tuple[PreparedDevice, ...]:
        return tuple(
            PreparedDevice((_base_request(g.request),) if g.request else (), alloc.pool,
                           g.device, (cdi_device_id(uid, g.device),), g.share_id)
            for g in alloc.grants)

    def _write_spec(self, uid: str, key: str, alloc: ClaimAllocation) -> None:
        spec = claim_spec(self.topology, uid, key, alloc, minors=self.minors,
                          mps_pipe_dir=self.mps_pipe_dir, mps_shm_dir=self.mps_shm_dir,
                          device_exists=self.device_exists)
        write_spec(spec_path(self.cdi_dir, uid), spec)

    # ------------------------------------------------------------------ the two calls
    def prepare(self, uid: str, namespace: str, name: str) -> PrepareResult:
        """Prepare one claim (module docstring); never raises."""
        key = f"{namespace}/{name}"
        with self._lock:
            known = self.prepared.get(uid)
            if known is not None:
                alloc = known.allocation()
                try:
                    if not spec_path(self.cdi_dir, uid).exists():
                        self._write_spec(uid, key, alloc)
                        log.info("claim %s: CDI spec rewritten (already prepared)", key)
                except CDIError as exc:
                    return PrepareResult(error=str(exc))
                return PrepareResult(self._devices(uid, alloc))
            try:
                claim = self.claims.get(namespace, name)
            except ClaimSourceError as exc:
                return PrepareResult(error=str(exc))
            meta = claim.get("metadata") if isinstance(claim, Mapping) else None
            if not isinstance(meta, Mapping):
                return PrepareResult(error=f"ResourceClaim {key} as read has no metadata object")
            found_uid = str(meta.get("uid", ""))
            if found_uid != uid:
                return PrepareResult(error=f"ResourceClaim {key} has UID {found_uid or '(none)'}, "
                                           f"not {uid}: it was replaced")
            results = _allocation_results(claim)
            try:
                if not isinstance(results, list):
                    raise DRAContractError("status.allocation.devices.results is not a list")
                alloc = claim_allocation(results, pool=self.node)
            except DRAContractError as exc:
                return PrepareResult(error=f"ResourceClaim {key}: {exc}")
            if not alloc.grants:
                return PrepareResult()
            bad = sorted(set(alloc.gpus) & self.unhealthy())
            if bad:
                return PrepareResult(error=f"ResourceClaim {key}: GPU {bad[0]} of node "
                                           f"{self.node} is unhealthy")
            staged = dict(self.holdings)
            try:
                add_allocation(staged, uid, alloc, self.topology, slots=self.slots)
            except DRAContractError as exc:
                return PrepareResult(error=f"ResourceClaim {key} cannot be prepared: {exc}")
            ours = tuple(r for r in results if r.get("driver") == DRIVER)
            record = PreparedClaim(uid, namespace, name, alloc.pool, ours)
            try:
                self._write_spec(uid, key, alloc)
                self.checkpoint.save({**self.prepared, uid: record})
            except (CDIError, CheckpointError) as exc:
                try:
                    remove_spec(spec_path(self.cdi_dir, uid))
                except CDIError:
                    pass
                return PrepareResult(error=str(exc))
            self.prepared[uid] = record
            self.holdings = staged
            log.info("prepared claim %s (%s): GPUs %s as %s", key, uid,
                     ",".join(map(str, alloc.gpus)), alloc.kind.value)
            return PrepareResult(self._devices(uid, alloc))

    def unprepare(self, uid: str, namespace: str, name: str) -> str:
        """Unprepare one claim; returns "" or the error (never raises)."""
        key = f"{namespace}/{name}"
        with self._lock:
            known = self.prepared.get(uid)
            try:
                remove_spec(spec_path(self.cdi_dir, uid))
                if known is None:
                    return ""
                rest = {u: c for u, c in self.prepared.items() if u != uid}
                self.checkpoint.save(rest)
            except (CDIError, CheckpointError) as exc:
                return str(exc)
            self.prepared = rest
            remove_allocation(self.holdings, uid, known.allocation())
            log.info("unprepared claim %s (%s)", key, uid)
            return ""
