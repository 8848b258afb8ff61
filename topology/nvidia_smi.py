"""Read and write the text of ``nvidia-smi topo -m`` (a.k.a. ``nvidia-smi topo --matrix``).

Amaral et al. §5.1 discover a machine's topology by running ``nvidia-smi topo --matrix``;
this module turns a saved copy of that output into a :class:`~topology.model.Topology`
(:func:`parse_topo_matrix`) and renders a topology back into that layout
(:func:`render_topo_matrix`), so fixtures, bug reports and machines without NVML access can
all be fed to the policies.

What the parser accepts (any driver generation we know of):

* a header row of device columns — ``GPU0 … GPUn-1``, then NICs (``mlx5_0`` on older
  drivers, ``NIC0`` on newer ones) — followed by zero or more of the ``CPU Affinity``,
  ``NUMA Affinity`` and ``GPU NUMA ID`` columns (unknown trailing columns are skipped);
* one row per device; NIC rows and NIC columns are checked for shape and tokens, then
  ignored (the model only holds GPUs);
* cells ``X`` (diagonal only; ``x`` too), ``NV#``, ``PIX``, ``PXB``, ``PHB``, ``NODE``,
  ``SYS`` and the old ``SOC`` (read as ``SYS``);
* tabs or runs of spaces between cells, Windows line ends, ANSI colour codes, text before
  the header (a shell prompt) and everything after the matrix (the ``Legend:`` and
  ``NIC Legend:`` blocks).

What the matrix does not say, and how we fill it in:

* **PCIe level of an NVLinked pair.** ``NV#`` hides the PCIe path. We infer it from
  locality: both GPUs in one NUMA node → ``NODE``; different NUMA nodes → ``SYS``. Without
  a NUMA column, identical non-empty CPU-affinity lists count as one NUMA node (``NODE``) and
  different lists as two (``SYS``); with neither, ``SYS`` — the most pessimistic level, so a
  policy never believes in a PCIe shortcut that may not exist. The level only matters when
  NVLink is ignored (Gaia's access-cost tree); NVLinked pairs are scored by their NVLinks.
* **NVSwitch.** Every pair shows the same ``NV#`` = k on NVSwitch machines (NV6 on a
  DGX-2, NV12 on a DGX A100, NV18 on a DGX H100). Point to point, that would need
  k × (n − 1) links per GPU; when that exceeds 18 (the most any GPU has, H100) and n ≥ 3,
  the links must go through switches and we set ``nvswitch=True``. Two GPUs joined by
  bridges (NV12 on an A100 PCIe pair) stay point to point.
* **NVLink generation** (for the per-link bandwidth, MAPA Table 1), unless given: from the
  model name when one is passed (P100 → 1, V100 → 2, A100/A800/A30 → 3, H100/H800/H200 → 4,
  B100/B200 → 5); else from the counts: any NV18 → 4, any NV12 → 3, eight GPUs with four
  single links each (the DGX-1 P100 cube-mesh) → 1, otherwise 2.
* **NUMA node**: the ``NUMA Affinity`` column; absent or ``N/A`` → unknown (``None``). We do
  not invent node ids from CPU lists (see topology/discovery/nvml.py for the same rule).
* **UUIDs** are :func:`~topology.model.deterministic_uuid` ``(name, index)``, bus ids are
  empty, model name and memory come from the keyword arguments. ``GPU NUMA ID`` (the NUMA
  node of the GPU's own memory on coherent systems such as GH200) is not modelled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from topology.model import (
    GPU,
    PCIeLevel,
    Topology,
    TopologyError,
    deterministic_uuid,
    format_cpu_list,
    parse_cpu_list,
)

__all__ = [
    "is_topo_matrix",
    "infer_nvlink_generation",
    "parse_topo_matrix",
    "render_topo_matrix",
]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_GPU_NAME = re.compile(r"^GPU(\d+)$")
_NV = re.compile(r"^NV(\d+)$")
_PCIE_TOKENS = frozenset({"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"})

#: Known trailing (non-device) header columns, as word tuples.
_EXTRA_COLUMNS: tuple[tuple[str, ...], ...] = (
    ("CPU", "Affinity"),
    ("NUMA", "Affinity"),
    ("GPU", "NUMA", "ID"),
)

#: The most NVLinks a single GPU has (H100 / B200: 18). More per GPU means NVSwitch.
_MAX_POINT_TO_POINT_LINKS = 18

#: Model-name fragments → NVLink generation (checked in order; first match wins).
_GENERATION_BY_MODEL: tuple[tuple[str, int], ...] = (
    ("GB200", 5), ("B200", 5), ("B100", 5),
    ("GH200", 4), ("H200", 4), ("H100", 4), ("H800", 4),
    ("A100", 3), ("A800", 3), ("A30", 3),
    ("V100", 2),
    ("P100", 1),
)  # fmt: skip

_LEGEND = """\
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""  # noqa: E501


def _error(line: int, message: str) -> TopologyError:
    return TopologyError(f"nvidia-smi topo -m text, line {line}: {message}")


def _clean_lines(text: str) -> list[str]:
    return _ANSI.sub("", text).replace("\x00", "").splitlines()


def _is_header(tokens: list[str]) -> bool:
    return bool(tokens) and tokens[0] == "GPU0" and not any(t.upper() == "X" for t in tokens)


def is_topo_matrix(text: str) -> bool:
    """Whether ``text`` looks like ``nvidia-smi topo -m`` output (it has a ``GPU0 …`` header
    row). A cheap test for content sniffing; :func:`parse_topo_matrix` does the checking."""
    return any(_is_header(line.split()) for line in _clean_lines(text))


@dataclass(frozen=True)
class _Header:
    line: int
    devices: tuple[str, ...]  # GPU and NIC column names, in order
    extras: tuple[str, ...]  # trailing columns, e.g. "CPU Affinity"


def _parse_header(tokens: list[str], line: int) -> _Header:
    devices: list[str] = []
    extras: list[str] = []
    i = 0
    while i < len(tokens):
        known = next(
            (words for words in _EXTRA_COLUMNS if tuple(tokens[i : i + len(words)]) == words),
            None,
        )
        if known is not None:
            extras.append(" ".join(known))
            i += len(known)
        elif extras:
            # An unknown trailing column (future drivers): its words up to the next known one.
            j = i
            while j < len(tokens) and not any(
                tuple(tokens[j : j + len(w)]) == w for w in _EXTRA_COLUMNS
            ):
                j += 1
            extras.append(" ".join(tokens[i:j]))
            i = j
        else:
            devices.append(tokens[i])
            i += 1
    gpu_columns = [d for d in devices if _GPU_NAME.match(d)]
    expected = [f"GPU{k}" for k in range(len(gpu_columns))]
    if gpu_columns != expected or devices[: len(gpu_columns)] != expected:
        raise _error(
            line,
            f"header GPU columns must be GPU0..GPU{len(gpu_columns) - 1} in order, "
            f"first in the row; got {' '.join(devices)}",
        )
    if len(set(devices)) != len(devices):
        raise _error(line, "a device column is listed twice in the header")
    return _Header(line, tuple(devices), tuple(extras))


def _check_cell(token: str, line: int, row: str, column: str) -> str:
    """Normalise one matrix cell (SOC → SYS) or raise on an unknown token."""
    if _NV.match(token):
        return token
    upper = token.upper()
    if upper == "X":
        return "X"
    if upper in _PCIE_TOKENS:
        return "SYS" if upper == "SOC" else upper
    raise _error(
        line,
        f"unknown link {token!r} in row {row}, column {column} "
        "(expected X, NV#, PIX, PXB, PHB, NODE, SYS or SOC)",
    )


def _numa_value(text: str, line: int) -> int | None:
    text = text.strip()
    if not text or text.upper() == "N/A":
        return None
    try:
        nodes = parse_cpu_list(text)  # an int, or a list such as "0-1"
    except TopologyError:
        raise _error(line, f"NUMA Affinity {text!r} is not a node number") from None
    return next(iter(nodes)) if len(nodes) == 1 else None


def infer_nvlink_generation(
    nvlinks: dict[tuple[int, int], int], size: int, gpu_name: str = ""
) -> int:
    """The NVLink generation of a machine, guessed from its model name or NV# counts.

    Args:
        nvlinks: NVLink count per GPU pair ``(i, j)``, ``i < j`` (pairs without NVLink may be
            left out).
        size: number of GPUs.
        gpu_name: model name, e.g. ``Tesla V100-SXM2-16GB`` ("" when unknown).

    Returns:
        The generation (1 = P100, 2 = V100, 3 = A100, 4 = H100, 5 = B200); rules in the module
        docstring. No NVLink at all → 2, the model's default (it then has no effect).
    """
    upper = gpu_name.upper()
    for fragment, generation in _GENERATION_BY_MODEL:
        if fragment in upper:
            return generation
    counts = [c for c in nvlinks.values() if c > 0]
    if not counts:
        return 2
    if max(counts) >= 18:
        return 4
    if max(counts) >= 12:
        return 3
    per_gpu = [0] * size
    for (a, b), c in nvlinks.items():
        per_gpu[a] += c
        per_gpu[b] += c
    if size == 8 and max(counts) == 1 and all(total == 4 for total in per_gpu):
        return 1
    return 2


def _looks_like_nvswitch(nvlinks: dict[tuple[int, int], int], size: int) -> bool:
    if size < 3:
        return False
    counts = {nvlinks.get((a, b), 0) for a in range(size) for b in range(a + 1, size)}
    if len(counts) != 1:
        return False
    (k,) = counts
    return k > 0 and k * (size - 1) > _MAX_POINT_TO_POINT_LINKS


def parse_topo_matrix(
    text: str,
    *,
    name: str = "nvidia-smi",
    gpu_name: str = "",
    memory_mib: int = 0,
    nvlink_generation: int | None = None,
) -> Topology:
    """Parse the output of ``nvidia-smi topo -m`` into a :class:`Topology`.

    Args:
        text: the command's output (any driver generation; see the module docstring).
        name: the topology's name; also seeds the GPUs' deterministic UUIDs.
        gpu_name: model name to give every GPU (the matrix has none).
        memory_mib: framebuffer size to give every GPU, MiB (the matrix has none).
        nvlink_generation: NVLink generation; ``None`` infers it
            (:func:`infer_nvlink_generation`).

    Returns:
        The topology: NV# counts, PCIe levels (inferred for NVLinked pairs), NUMA nodes and
        CPU affinity from the text.

    Raises:
        TopologyError: one line naming the problem and its line number: no ``GPU0 …`` header
            row, GPU columns out of order, a ragged row, an unknown cell token, a missing,
            duplicate or extra GPU row, a diagonal cell that is not ``X`` (or an ``X`` off it),
            an asymmetric pair, or a bad CPU list / NUMA value.
    """
    if not isinstance(text, str):
        raise TopologyError("nvidia-smi topo -m text must be a string")
    lines = _clean_lines(text)
    header: _Header | None = None
    start = 0
    for idx, raw in enumerate(lines):
        if _is_header(raw.split()):
            header = _parse_header(raw.split(), idx + 1)
            start = idx + 1
            break
    if header is None:
        raise TopologyError(
            "not nvidia-smi topo -m output: no header row of device columns "
            "starting with GPU0 was found"
        )

    ndev, nextra = len(header.devices), len(header.extras)
    gpu_count = sum(1 for d in header.devices if _GPU_NAME.match(d))
    cells: dict[int, list[str]] = {}
    extras: dict[int, dict[str, str]] = {}
    row_line: dict[int, int] = {}
    for idx in range(start, len(lines)):
        lineno = idx + 1
        tokens = lines[idx].split()
        if not tokens or tokens[0].rstrip(":") in ("Legend", "NIC"):
            break  # end of the matrix: blank line or the legend blocks
        label, values = tokens[0], tokens[1:]
        match = _GPU_NAME.match(label)
        if match:
            if len(values) != ndev + nextra:
                raise _error(
                    lineno,
                    f"row {label} has {len(values)} fields but the header (line "
                    f"{header.line}) has {ndev + nextra} columns",
                )
            gpu = int(match.group(1))
            if gpu >= gpu_count:
                raise _error(lineno, f"row {label} has no column in the header")
            if gpu in cells:
                raise _error(lineno, f"row {label} appears twice (first on line {row_line[gpu]})")
            row_line[gpu] = lineno
        elif not ndev <= len(values) <= ndev + nextra:
            raise _error(
                lineno,
                f"row {label} has {len(values)} fields; the header (line {header.line}) "
                f"has {ndev} device columns",
            )
        normalised = [
            _check_cell(tok, lineno, label, col)
            for tok, col in zip(values[:ndev], header.devices, strict=True)
        ]
        if match:
            cells[gpu] = normalised
            extras[gpu] = dict(zip(header.extras, values[ndev:], strict=True))

    for gpu in range(gpu_count):
        if gpu not in cells:
            raise _error(header.line, f"the header lists GPU{gpu} but there is no GPU{gpu} row")

    n = gpu_count
    nvlinks: dict[tuple[int, int], int] = {}
    tokens_by_pair: dict[tuple[int, int], str] = {}
    for i in range(n):
        for j in range(n):
            token = cells[i][j]
            if i == j:
                if token != "X":
                    raise _error(row_line[i], f"GPU{i}/GPU{i} is {token!r}; the diagonal must be X")
                continue
            if token == "X":
                raise _error(row_line[i], f"X off the diagonal at row GPU{i}, column GPU{j}")
            if j < i and token != cells[j][i]:
                raise _error(
                    row_line[i],
                    f"matrix is not symmetric: GPU{i}/GPU{j} is {token} but GPU{j}/GPU{i} "
                    f"(line {row_line[j]}) is {cells[j][i]}",
                )
            if i < j:
                tokens_by_pair[(i, j)] = token
                nv = _NV.match(token)
                if nv:
                    nvlinks[(i, j)] = int(nv.group(1))

    numa: list[int | None] = []
    cpus: list[frozenset[int]] = []
    for i in range(n):
        row = extras[i]
        try:
            cpus.append(parse_cpu_list(row.get("CPU Affinity", "")))
        except TopologyError as exc:
            raise _error(row_line[i], f"GPU{i}: {exc}") from None
        numa.append(_numa_value(row.get("NUMA Affinity", ""), row_line[i]))

    pcie: dict[tuple[int, int], PCIeLevel] = {}
    for (i, j), token in tokens_by_pair.items():
        if (i, j) not in nvlinks:
            pcie[(i, j)] = PCIeLevel.parse(token)
        elif numa[i] is not None and numa[j] is not None:
            pcie[(i, j)] = PCIeLevel.NODE if numa[i] == numa[j] else PCIeLevel.SYS
        elif cpus[i] and cpus[j]:
            pcie[(i, j)] = PCIeLevel.NODE if cpus[i] == cpus[j] else PCIeLevel.SYS
        else:
            pcie[(i, j)] = PCIeLevel.SYS

    gpus = [
        GPU(
            index=i,
            uuid=deterministic_uuid(name, i),
            pci_bus_id="",
            name=gpu_name,
            memory_mib=memory_mib,
            numa_node=numa[i],
            cpu_affinity=cpus[i],
        )
        for i in range(n)
    ]
    generation = (
        nvlink_generation
        if nvlink_generation is not None
        else infer_nvlink_generation(nvlinks, n, gpu_name)
    )
    return Topology.build(
        name,
        gpus,
        nvlinks,
        pcie,
        nvlink_generation=generation,
        nvswitch=_looks_like_nvswitch(nvlinks, n),
    )


def render_topo_matrix(topology: Topology) -> str:
    """``nvidia-smi topo -m``-style text for ``topology`` (the layout of current drivers:
    tab-separated, ``CPU Affinity``, ``NUMA Affinity`` and ``GPU NUMA ID`` columns, legend).

    NVLinked pairs print as ``NV#`` (their PCIe level is not shown, as on a real machine);
    other pairs print their PCIe level. Unknown CPU affinity or NUMA node prints ``N/A``; the
    GPU NUMA ID column is always ``N/A``. ``parse_topo_matrix(render_topo_matrix(t))`` has
    the same NVLink counts, the same PCIe levels for pairs without NVLink, and the same CPU
    affinity and NUMA nodes as ``t``.
    """
    n = topology.size
    columns = [f"GPU{j}" for j in range(n)] + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    out = ["\t" + "\t".join(columns)]
    for i in range(n):
        cells = [" X " if i == j else topology.links[i][j].label for j in range(n)]
        gpu = topology.gpus[i]
        cpu = format_cpu_list(gpu.cpu_affinity) or "N/A"
        numa = "N/A" if gpu.numa_node is None else str(gpu.numa_node)
        out.append(f"GPU{i}\t" + "\t".join(cells) + f"\t{cpu}\t{numa}\t\tN/A")
    return "\n".join(out) + "\n\n" + _LEGEND
