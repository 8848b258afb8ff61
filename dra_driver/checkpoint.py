"""The driver's checkpoint: which claims it has prepared, so a restarted driver neither loses
nor prepares a claim twice.

One JSON file in the plugin's directory (``<plugin dir>/checkpoint.json``, on the host, like
the kubelet's own ``dra_manager_state``)::

    {"version": 1, "node": "<node>", "checksum": "<sha256 of the canonical claims JSON>",
     "claims": {"<uid>": {"namespace": …, "name": …, "pool": …,
                          "devices": [{"request": …, "device": "gpu-3", "shareID": …,
                                       "consumedCapacity": {…}}, …]}}}

``devices`` are the claim's allocation results of this driver as they were prepared, so the
claim's GPUs, its CDI spec and the node's holdings can be rebuilt from the file alone. Every
change is written whole and atomically (temp file, fsync, rename, fsync of the directory),
before the gRPC answer goes back: what the kubelet was told is prepared is on disk. A file
whose checksum does not match, of another node or another version, is refused: the driver
then does not start, rather than forget claims whose GPUs are in use.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topology.dra import ClaimAllocation, DRAContractError, claim_allocation

log = logging.getLogger(__name__)

VERSION = 1
FILE_NAME = "checkpoint.json"


class CheckpointError(RuntimeError):
    """The checkpoint is unreadable, corrupt or another node's; one line."""


@dataclass(frozen=True)
class PreparedClaim:
    """One prepared claim.

    Attributes:
        uid: the claim's UID.
        namespace, name: the claim.
        pool: the pool its devices came from (this node).
        devices: its allocation results of this driver (API dicts), allocation order.
    """

    uid: str
    namespace: str
    name: str
    pool: str
    devices: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    def allocation(self) -> ClaimAllocation:
        """The devices as a :class:`~topology.dra.ClaimAllocation`.

        Raises:
            CheckpointError: the recorded devices do not parse.
        """
        try:
            return claim_allocation(self.devices, pool=self.pool)
        except DRAContractError as exc:
            raise CheckpointError(f"claim {self.key} ({self.uid}) in the checkpoint: "
                                  f"{exc}") from None

    def to_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "pool": self.pool,
                "devices": [dict(d) for d in self.devices]}


def _canonical(claims: Mapping[str, Mapping[str, Any]]) -> str:
    return json.dumps(claims, sort_keys=True, separators=(",", ":"))


class Checkpoint:
    """The checkpoint file of one node's driver.

    Args:
        path: the file.
        node: this node; a file written for another node is refused.
    """

    def __init__(self, path: Path, node: str) -> None:
        self.path = path
        self.node = node

    def load(self) -> dict[str, PreparedClaim]:
        """The prepared claims by UID; none when the file does not exist.

        Raises:
            CheckpointError: unreadable, not JSON, wrong version or node, bad checksum, or a
                malformed entry.
        """
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise CheckpointError(f"reading {self.path}: {exc.strerror or exc}") from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            raise CheckpointError(f"{self.path} is not JSON (corrupt checkpoint)") from None
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise CheckpointError(f"{self.path}: not a version-{VERSION} checkpoint")
        if doc.get("node") != self.node:
            raise CheckpointError(f"{self.path} belongs to node {doc.get('node')!r}, not "
                                  f"{self.node!r}")
        claims = doc.get("claims")
        if not isinstance(claims, dict):
            raise CheckpointError(f"{self.path}: no claims map")
        digest = hashlib.sha256(_canonical(claims).encode()).hexdigest()
        if doc.get("checksum") != digest:
            raise CheckpointError(f"{self.path}: checksum mismatch (corrupt checkpoint)")
        out: dict[str, PreparedClaim] = {}
        for uid, c in claims.items():
            try:
                out[uid] = PreparedClaim(uid, str(c["namespace"]), str(c["name"]),
                                         str(c["pool"]), tuple(c["devices"]))
            except (KeyError, TypeError) as exc:
                raise CheckpointError(f"{self.path}: claim {uid} is malformed ({exc})") from None
            out[uid].allocation()  # parses, or CheckpointError
        return out

    def save(self, claims: Mapping[str, PreparedClaim]) -> None:
        """Write ``claims`` (by UID) atomically.

        The file is replaced whole (a temporary file, fsync'd, renamed over it), so a reader
        sees the old claims or the new ones. Once the rename is done the save has happened: a
        failure to sync the directory after it is logged, not raised.

        Raises:
            CheckpointError: the file cannot be written (it still holds the previous claims).
        """
        body = {uid: c.to_json() for uid, c in sorted(claims.items())}
        doc = {"version": VERSION, "node": self.node,
               "checksum": hashlib.sha256(_canonical(body).encode()).hexdigest(),
               "claims": body}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise CheckpointError(f"writing {self.path}: {exc.strerror or exc}") from None
        # the file now holds ``claims``: from here a failure must not tell the caller it does
        # not (it would forget a claim the file keeps, and a restarted driver would hold its
        # GPUs for nobody); what is lost is only that the rename may not survive a power cut
        try:
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            log.warning("checkpoint %s written, but its directory could not be synced (%s): "
                        "a power cut may bring back the previous one", self.path,
                        exc.strerror or exc)
