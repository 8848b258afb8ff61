"""One way to name a topology everywhere one is expected (CLI, benchmarks, simulator, tests).

A *source* is a string:

* a catalog machine name (``dgx1-v100``; see :mod:`topology.catalog`), or
* a path to a file holding one of
  - the annotation JSON (``gputopo.io/v1``, :mod:`topology.serialization`),
  - the same document written as YAML,
  - saved ``nvidia-smi topo -m`` output (:mod:`topology.nvidia_smi`).

Files are recognised by content, not by extension: a JSON object, a ``GPU0 …`` matrix
header, or a YAML mapping carrying ``schemaVersion``.

**One truth.** :func:`load_topology` is the one way from a source to the model: ``gputopo
topology show SRC`` prints it, and the device plugin started with ``--fake-topology SRC``
impersonates exactly it through the fake NVML and publishes what discovery then reads back
(``topology.discovery.source``). Every source goes through :func:`complete`, which fills in
what a source may not say and a driver always does:

* **PCI bus ids.** NVML names each NVLink's far end by its PCI bus id, so a fake driver needs
  one distinct bus id per GPU. ``nvidia-smi topo -m`` prints none, and a topology file may
  leave ``pciBusId`` empty: GPU ``i`` then gets the placeholder ``FFFF:<i as 2 hex
  digits>:00.0`` (PCI domain ``FFFF``, so a placeholder is easy to recognise; the device
  number goes up if a given bus id already holds that address). Given bus ids
  are normalised (``DDDD:BB:DD.F``, upper-case hex); two GPUs with the same bus id, or text
  that is not a bus id, is an error.
* **GPU model and memory** (MiB; 0 in the model means unknown): the memory from the source;
  else from the GPU model via the catalog (:func:`topology.catalog.gpu_memory_mib`) — the model
  the source names, or, for GPUs it names none for (a ``nvidia-smi topo -m`` text),
  ``gpu_model`` (the CLI's, the device plugin's and the DRA driver's ``--gpu-model``, a catalog
  model: those GPUs then also carry its name); else ``gpu_memory_mib`` (``--gpu-memory-mib``);
  else it stays unknown (0), and the device plugin then does not advertise
  ``gputopo.io/vgpu-memory`` nor the DRA driver a ``memory`` capacity.
  :func:`describe_memory` says which was used (``gputopo topology show`` prints it, the node
  programs log it at start-up).
* **A machine without NVLink** has NVLink generation 2 (the model's default) and no
  NVSwitch: NVML cannot report a generation or a switch without links, and neither changes
  any bandwidth there.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import yaml

from topology import catalog, nvidia_smi, serialization
from topology.discovery.nvml import DEFAULT_NVLINK_GENERATION, normalize_bus_id
from topology.model import GPU, Topology, TopologyError, format_cpu_list
from topology.text import DuplicateKeyError, load_yaml, path_exists, path_is_file

#: Refuse files larger than this (bytes): topology files are a few KiB.
MAX_FILE_BYTES = 8 * 1024 * 1024


def _looks_like_path(src: str) -> bool:
    return "/" in src or "\\" in src or Path(src).suffix != "" or src.startswith("~")


#: PCI domain of placeholder bus ids (:func:`complete`).
PLACEHOLDER_DOMAIN = 0xFFFF

_BUS_ID_SHAPE = re.compile(r"^[0-9A-F]{4,8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")


def _bus_ids(gpus: tuple[GPU, ...]) -> list[str]:
    """Normalised bus ids, placeholders for missing ones (see the module docstring)."""
    given: dict[str, int] = {}
    out: list[str] = []
    for g in gpus:
        text = g.pci_bus_id.strip()
        if not text:
            out.append("")
            continue
        bus = normalize_bus_id(text)
        if not _BUS_ID_SHAPE.match(bus):
            raise TopologyError(
                f"GPU {g.index}: pciBusId {g.pci_bus_id!r} is not a PCI bus id (DDDD:BB:DD.F)"
            )
        if bus in given:
            raise TopologyError(f"GPUs {given[bus]} and {g.index} have the same pciBusId {bus}")
        given[bus] = g.index
        out.append(bus)
    for i, bus in enumerate(out):
        if bus:
            continue
        device = i // 256
        candidate = f"{PLACEHOLDER_DOMAIN:04X}:{i % 256:02X}:{device:02X}.0"
        while candidate in given:  # a given bus id took the slot: next device number
            device += 1
            candidate = f"{PLACEHOLDER_DOMAIN:04X}:{i % 256:02X}:{device:02X}.0"
        given[candidate] = i
        out[i] = candidate
    return out


def catalog_model(model: str) -> str:
    """The catalog's spelling of the GPU model ``model`` (case and spacing ignored).

    Raises:
        TopologyError: no catalog machine has that model (the message lists the models).
    """
    wanted = " ".join(model.split()).lower()
    for name in catalog.gpu_models():
        if " ".join(name.split()).lower() == wanted:
            return name
    raise TopologyError(f"unknown GPU model {model!r}; the catalog knows "
                        f"{', '.join(sorted(catalog.gpu_models()))}")


def memory_origins(
    topology: Topology, *, gpu_memory_mib: int | None = None, gpu_model: str | None = None
) -> list[str]:
    """Where :func:`complete` takes each GPU's memory from, for ``topology`` as read from its
    source (before :func:`complete`): ``source`` (the source gives it), ``catalog:<model>``
    (the catalog's entry for the model the source names), ``model:<model>`` (the catalog's
    entry for ``gpu_model``, the source naming none), ``flag`` (``gpu_memory_mib``) or
    ``unknown``."""
    model = catalog_model(gpu_model) if gpu_model else ""
    out = []
    for g in topology.gpus:
        name = g.name or model
        if g.memory_mib > 0:
            out.append("source")
        elif catalog.gpu_memory_mib(name):
            out.append(f"{'catalog' if g.name else 'model'}:{catalog_model(name)}")
        elif gpu_memory_mib:
            out.append("flag")
        else:
            out.append("unknown")
    return out


def complete(
    topology: Topology, *, gpu_memory_mib: int | None = None, gpu_model: str | None = None
) -> Topology:
    """``topology`` with every GPU's PCI bus id and, where it can be known, its model and
    memory filled in (rules in the module docstring). A complete topology comes back equal
    (``==``) and with the same name.

    Args:
        topology: the model read from a source (or discovered through NVML).
        gpu_memory_mib: framebuffer size, MiB, for GPUs whose memory neither the source nor
            the catalog knows; None leaves them unknown (0).
        gpu_model: a catalog GPU model (``Tesla V100-SXM2-16GB``) for GPUs the source names
            no model for (a ``nvidia-smi topo -m`` text): they get that name, and their
            memory from the catalog's entry.

    Raises:
        TopologyError: a bus id is not one, two GPUs share a bus id, ``gpu_memory_mib`` is
            not positive, or ``gpu_model`` is not a catalog model.
    """
    if gpu_memory_mib is not None and gpu_memory_mib <= 0:
        raise TopologyError(f"GPU memory must be a positive number of MiB, got {gpu_memory_mib}")
    model = catalog_model(gpu_model) if gpu_model else ""
    buses = _bus_ids(topology.gpus)
    gpus: list[GPU] = []
    for g, bus in zip(topology.gpus, buses, strict=True):
        memory = g.memory_mib
        name = g.name or model
        if memory <= 0:
            memory = catalog.gpu_memory_mib(name) or gpu_memory_mib or 0
        if bus != g.pci_bus_id or memory != g.memory_mib or name != g.name:
            g = replace(g, pci_bus_id=bus, memory_mib=memory, name=name)
        gpus.append(g)
    generation, nvswitch = topology.nvlink_generation, topology.nvswitch
    if not any(lk.nvlinks for row in topology.links for lk in row):
        generation, nvswitch = DEFAULT_NVLINK_GENERATION, False
    if (tuple(gpus), generation, nvswitch) == (
        topology.gpus, topology.nvlink_generation, topology.nvswitch
    ):
        return topology
    return replace(topology, gpus=tuple(gpus), nvlink_generation=generation, nvswitch=nvswitch)


def unknown_memory(topology: Topology) -> list[int]:
    """Indices of the GPUs whose memory is unknown (0 MiB) in ``topology``."""
    return [g.index for g in topology.gpus if g.memory_mib <= 0]


def load_topology(
    src: str, *, gpu_memory_mib: int | None = None, gpu_model: str | None = None
) -> Topology:
    """Resolve ``src`` (catalog name or file path) to a complete :class:`Topology`.

    A catalog name wins over a file of the same name in the working directory. An
    ``nvidia-smi`` text is named after the file (its stem), which also seeds the GPUs'
    deterministic UUIDs. The result has gone through :func:`complete` (bus ids, model,
    memory).

    Args:
        src: catalog name or file path.
        gpu_memory_mib: memory, MiB, for GPUs whose memory the source and the catalog do
            not know (see :func:`complete`).
        gpu_model: the catalog GPU model of GPUs the source names none for.

    Raises:
        TopologyError: one line: an unknown name (listing the catalog), a missing or
            unreadable file, a file that is none of the accepted formats, the
            format-specific error of a malformed document, a bad bus id, or an unknown
            ``gpu_model``.
    """
    topology = read_topology(src)
    try:
        return complete(topology, gpu_memory_mib=gpu_memory_mib, gpu_model=gpu_model)
    except TopologyError as exc:
        if src.strip().lower() in catalog.names():
            raise
        raise TopologyError(f"{src.strip()}: {exc}") from None


def describe_memory(
    src: str | None, topology: Topology, *, gpu_memory_mib: int | None = None,
    gpu_model: str | None = None,
) -> str:
    """One line saying where the GPUs' memory of ``topology`` (complete, from ``src``; None
    = NVML) came from, e.g. ``GPU memory: 16160 MiB for GPUs 0-7 from the catalog's Tesla
    V100-SXM2-16GB entry (--gpu-model)``; what ``gputopo topology show``, the device plugin
    and the DRA driver print."""
    if src is None:
        origins = ["source" if g.memory_mib > 0 else "unknown" for g in topology.gpus]
    else:
        try:
            origins = memory_origins(read_topology(src), gpu_memory_mib=gpu_memory_mib,
                                     gpu_model=gpu_model)
        except TopologyError:
            origins = ["source" if g.memory_mib > 0 else "unknown" for g in topology.gpus]
    where = src or "NVML"
    groups: dict[tuple[str, int], list[int]] = {}
    for g, origin in zip(topology.gpus, origins, strict=True):
        groups.setdefault((origin, g.memory_mib), []).append(g.index)
    parts = []
    for (origin, mib), idx in groups.items():
        gpus = f"GPU{'s' if len(idx) > 1 else ''} {format_cpu_list(idx)}"
        kind, _, model = origin.partition(":")
        if kind == "unknown":
            parts.append(f"unknown for {gpus} ({where} gives none and names no catalog model; "
                         "set --gpu-memory-mib or --gpu-model)")
            continue
        how = {"source": f"from {where}", "flag": "from --gpu-memory-mib",
               "catalog": f"from the catalog's {model} entry",
               "model": f"from the catalog's {model} entry (--gpu-model)"}[kind]
        parts.append(f"{mib} MiB for {gpus} {how}")
    return "GPU memory: " + "; ".join(parts)


def read_topology(src: str) -> Topology:
    """The topology ``src`` describes, as read (before :func:`complete`).

    Raises:
        TopologyError: as :func:`load_topology`.
    """
    src = src.strip()
    if not src:
        raise TopologyError("empty topology source; give a catalog name or a file path")
    if src.lower() in catalog.names():
        return catalog.get(src)
    path = Path(src).expanduser()
    if not path_exists(path):
        if _looks_like_path(src):
            raise TopologyError(f"topology file not found: {src}")
        raise TopologyError(
            f"unknown topology {src!r}: not a catalog machine ({', '.join(catalog.names())}) "
            "and no such file"
        )
    if not path_is_file(path):
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
            data = load_yaml(stripped)
        except DuplicateKeyError as exc:
            raise TopologyError(f"YAML topology: {exc.problem}") from None
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
