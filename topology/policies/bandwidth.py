"""Bandwidth scores of a GPU set: AggBW, predicted EffBW (two models), PreservedBW.

MAPA's scores (Ranganath et al., SC'21):

* AggBW, Eq. 1 — sum of the hardware-edge bandwidths the pattern uses.
* Predicted EffBW, Eq. 2 with the Table 2 coefficients — a regression on (x, y, z), the
  counts of double-NVLink, single-NVLink and PCIe edges in the matched pattern M.
* PreservedBW, Eq. 3 — sum of edge bandwidths among the free GPUs left after the allocation.

Eq. 2 is kept exactly as published (:func:`effbw_mapa`). Its fit covered 2–5-GPU NCCL runs on
one DGX-1 V100 (31 samples), and outside that it misbehaves: counted over every pair of a
4-GPU all-to-all it ranks {0,2,5,7} (x,y,z = 0,2,4) at 73.9 GB/s above the fully NVLinked
{0,1,2,3} (3,3,0) at 33.6, and on 4- and 5-GPU rings an upgrade from PCIe to NVLink can
*lower* the prediction (ring (0,0,4) = 12.5 > (1,0,3) = 4.9). So the default policy uses
:func:`effbw_gputopo`, a monotone model fitted to Eq. 2 where Eq. 2 was trained (below).

Link types Eq. 2 never saw: a pair joined by 2 or more NVLinks (NV3, NV4, NV12, NVSwitch)
counts as a *double NVLink* (x) — the fastest class the regression knows; one NVLink counts as
a single NVLink (y); no NVLink counts as PCIe (z). The Eq. 2 figure is therefore a lower bound
on such machines; :func:`effbw_gputopo` uses their real GB/s instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from topology.model import Topology

#: MAPA Table 2, θ1 … θ14.
MAPA_THETA = (
    16.396, 4.536, 1.556, -20.694, -9.467, 7.615, -7.973,
    12.733, -4.195, -8.413, 62.851, 27.418, -5.114, -46.973,
)  # fmt: skip


def effbw_mapa(x: int, y: int, z: int) -> float:
    """MAPA predicted effective bandwidth, GB/s (MAPA §3.4.3, Eq. 2; θ from Table 2).

    Args:
        x: double-NVLink edges in the matched pattern.
        y: single-NVLink edges.
        z: PCIe edges.

    The formula is elementwise, so numpy arrays of counts work too (the matching search
    scores thousands of matches at once with this same function).

    Returns:
        θ1x + θ2y + θ3z + θ4/(x+1) + θ5/(y+1) + θ6/(z+1) + θ7xy + θ8yz + θ9zx
        + θ10/(xy+1) + θ11/(yz+1) + θ12/(zx+1) + θ13xyz + θ14/(xyz+1), exactly as published
        (it can be negative or non-monotone outside its training range).
    """
    t = MAPA_THETA
    return (
        t[0] * x + t[1] * y + t[2] * z
        + t[3] / (x + 1) + t[4] / (y + 1) + t[5] / (z + 1)
        + t[6] * x * y + t[7] * y * z + t[8] * z * x
        + t[9] / (x * y + 1) + t[10] / (y * z + 1) + t[11] / (z * x + 1)
        + t[12] * x * y * z + t[13] / (x * y * z + 1)
    )  # fmt: skip


def link_class(nvlinks: int) -> int:
    """Eq. 2 class of an edge: 0 = double NVLink (x; also NV3+ and NVSwitch), 1 = single
    NVLink (y), 2 = PCIe (z)."""
    if nvlinks >= 2:
        return 0
    if nvlinks == 1:
        return 1
    return 2


def count_links(topology: Topology, edges: Sequence[tuple[int, int]]) -> tuple[int, int, int]:
    """(x, y, z) of Eq. 2 over the given GPU-index edges."""
    c = [0, 0, 0]
    for a, b in edges:
        c[link_class(topology.links[a][b].nvlinks)] += 1
    return c[0], c[1], c[2]


# --- gputopo-v1: the default policy's monotone EffBW model --------------------------------
#: Scale, power-mean exponent and edge-count exponent of :func:`effbw_gputopo`.
#: Fitted (least squares, grid over p and beta, closed-form scale) to Eq. 2's predictions at
#: the 23 (x, y, z) points that occur on a DGX-1 V100 for 2- and 3-GPU all-to-all sets and
#: 4-GPU rings — the region where Eq. 2 was trained and is mostly sound — with the MAPA
#: Table 1 link bandwidths (50 / 25 / 12 GB/s). RMSE 7.6 GB/s; on NVLink-only points the
#: largest gap is 11.8 GB/s (ring (3,1,0): 56.9 vs 68.7); the biggest gaps are where Eq. 2
#: itself breaks monotonicity (ring (1,0,3): 4.9 in Eq. 2).
GPUTOPO_SCALE = 0.7844
GPUTOPO_P = -1.5
GPUTOPO_BETA = 0.45


def effbw_gputopo(weights: Sequence[float]) -> float:
    """gputopo-v1 predicted effective bandwidth of a matched pattern, GB/s.

    ``EffBW = c · m^β · M_p(w)``, where ``w`` are the link bandwidths (GB/s) of the pattern's
    m edges, ``M_p`` is their power mean with p = -1.5 (it leans toward the slowest link, as
    NCCL rings do), c = 0.784 and β = 0.45 (fit: see the module constants).

    Properties (tested): monotone — raising any edge's bandwidth never lowers the
    prediction; it uses real link speeds, so NV3+/NVSwitch links score by their GB/s; a
    pattern with no edge (a 1-GPU job) scores 0.

    Args:
        weights: GB/s of each pattern edge (all > 0).
    """
    m = len(weights)
    if m == 0:
        return 0.0
    s = sum(w**GPUTOPO_P for w in weights) / m
    return float(GPUTOPO_SCALE * (m**GPUTOPO_BETA) * s ** (1.0 / GPUTOPO_P))


def effbw_bottleneck(weights: Sequence[float]) -> float:
    """Bottleneck-link predicted effective bandwidth of a matched pattern, GB/s: the slowest
    of the pattern's edges.

    A ring all-reduce moves every byte over every edge of the ring in turn, so each step
    waits for its slowest link (NCCL's ring bus bandwidth is bounded by the ring's slowest
    hop); this model prices a pattern by that link alone. It is the pessimistic end of the
    project's models: gputopo-v1 leans toward the slowest link, this one *is* the slowest
    link. Monotone; a pattern with no edge (a 1-GPU job) scores 0.

    Args:
        weights: GB/s of each pattern edge.
    """
    return float(min(weights)) if len(weights) else 0.0


def aggregated_bandwidth(topology: Topology, edges: Sequence[tuple[int, int]]) -> float:
    """MAPA AggBW (§3.4.1, Eq. 1): sum of hardware-edge bandwidths over ``edges``, GB/s."""
    bw = topology.bandwidth_matrix
    return float(sum(bw[a][b] for a, b in edges))


def all_pairs(gpus: Sequence[int]) -> list[tuple[int, int]]:
    """Every pair of ``gpus`` (i < j by position)."""
    g = list(gpus)
    return [(g[i], g[j]) for i in range(len(g)) for j in range(i + 1, len(g))]


def preserved_bandwidth(topology: Topology, remaining: Sequence[int]) -> float:
    """MAPA PreservedBW (§3.5.1, Eq. 3): sum of edge bandwidths of the hardware graph induced
    by the free GPUs that remain, GB/s."""
    return aggregated_bandwidth(topology, all_pairs(remaining))


#: Gaia access cost per PCIe level (Gaia §III-B: SOC > PHB > PXB > PIX). NODE, which newer
#: drivers print, sits between PHB and SYS. NVLink pairs cost less than any PCIe path.
ACCESS_COST = {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0, 5: 5.0}
NVLINK_ACCESS_COST = 0.5


def pair_access_cost(topology: Topology, a: int, b: int) -> float:
    """Access cost between two GPUs: 0.5/NV# for NVLinked pairs, else the PCIe level's cost."""
    lk = topology.links[a][b]
    if lk.nvlinks > 0:
        return NVLINK_ACCESS_COST / lk.nvlinks
    return ACCESS_COST[int(lk.pcie)]


def access_cost(topology: Topology, gpus: Sequence[int]) -> float:
    """Gaia access cost of a GPU set: sum of :func:`pair_access_cost` over every pair."""
    return float(sum(pair_access_cost(topology, a, b) for a, b in all_pairs(gpus)))


def is_monotone_sample(values: Sequence[float]) -> bool:
    """True when ``values`` never decrease (helper for tests/benchmarks)."""
    return all(b >= a - 1e-9 for a, b in zip(values, values[1:], strict=False))


def isclose(a: float, b: float) -> bool:
    """Score equality used for tie-breaking (1e-9 relative)."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
