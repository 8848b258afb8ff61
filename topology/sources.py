"""One way to name a topology everywhere one is expected (CLI, benchmarks, simulator, tests).

A *source* is a string:

* a catalog machine name (``dgx1-v100``; see :mod:`topology.catalog`), or
* a path to a file holding one of
  - the annotation JSON (``gputopo.io/v1``, :mod:`topology.serialization`),
  - the same document written as YAML,
  - saved ``nvidia-smi topo -m`` output (:mod:`topology.nvidia_smi`).

Files are recognised by content, not by extension: a JSON object, a ``GPU0 …`` matrix
header, or a YAML mapping carrying ``schemaVersion``.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from topology import catalog, nvidia_smi, serialization
from topology.model import Topology, TopologyError

#: Refuse files larger than this (bytes): topology files are a few KiB.
MAX_FILE_BYTES = 8 * 1024 * 1024


def _looks_like_path(src: str) -> bool:
    return "/" in src or "\\" in src or Path(src).suffix != "" or src.startswith("~")


def load_topology(src: str) -> Topology:
    """Resolve ``src`` (catalog name or file path) to a :class:`Topology`.

    A catalog name wins over a file of the same name in the working directory. An
    ``nvidia-smi`` text is named after the file (its stem), which also seeds the GPUs'
    deterministic UUIDs.

    Raises:
        TopologyError: one line: an unknown name (listing the catalog), a missing or
            unreadable file, a file that is none of the accepted formats, or the
            format-specific error of a malformed document.
    """
    src = src.strip()
    if not src:
        raise TopologyError("empty topology source; give a catalog name or a file path")
    if src.lower() in catalog.names():
        return catalog.get(src)
    path = Path(src).expanduser()
    if not path.exists():
        if _looks_like_path(src):
            raise TopologyError(f"topology file not found: {src}")
        raise TopologyError(
            f"unknown topology {src!r}: not a catalog machine ({', '.join(catalog.names())}) "
            "and no such file"
        )
    if not path.is_file():
        raise TopologyError(f"topology source {src} is not a regular file")
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise TopologyError(f"topology file {src} is larger than {MAX_FILE_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TopologyError(f"topology file {src} is not UTF-8 text") from None
    except OSError as exc:
        raise TopologyError(f"cannot read topology file {src}: {exc.strerror or exc}") from None
    return load_topology_text(text, name=path.stem, origin=src)


def load_topology_text(text: str, *, name: str = "topology", origin: str = "<text>") -> Topology:
    """Parse topology ``text`` in any accepted format (detected by content).

    Args:
        text: annotation JSON, the same as YAML, or ``nvidia-smi topo -m`` output.
        name: name for an ``nvidia-smi`` topology (JSON/YAML carry their own).
        origin: where the text came from, for error messages.

    Raises:
        TopologyError: one line naming ``origin`` and the problem.
    """
    stripped = text.lstrip("\ufeff").strip()
    if not stripped:
        raise TopologyError(f"{origin}: empty file, not a topology")
    try:
        if stripped.startswith("{"):
            return serialization.loads(stripped)
        if nvidia_smi.is_topo_matrix(stripped):
            return nvidia_smi.parse_topo_matrix(stripped, name=name)
        try:
            data = yaml.safe_load(stripped)
        except yaml.YAMLError:
            data = None
        if isinstance(data, dict) and "schemaVersion" in data:
            try:
                as_json = json.dumps(data)
            except (TypeError, ValueError) as exc:
                raise TopologyError(f"YAML topology has values JSON cannot hold: {exc}") from None
            return serialization.loads(as_json)
    except TopologyError as exc:
        raise TopologyError(f"{origin}: {exc}") from None
    raise TopologyError(
        f"{origin}: not a topology: expected gputopo.io/v1 JSON or YAML (with schemaVersion) "
        "or saved `nvidia-smi topo -m` output"
    )
