"""MAPA's scores and the monotone gputopo-v1 model."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import catalog
from topology.model import GPU, PCIeLevel, Topology, deterministic_uuid
from topology.patterns import ring
from topology.policies.bandwidth import (
    access_cost,
    aggregated_bandwidth,
    all_pairs,
    count_links,
    effbw_gputopo,
    effbw_mapa,
    is_monotone_sample,
    isclose,
    link_class,
    pair_access_cost,
    preserved_bandwidth,
)

DGX = catalog.get("dgx1-v100")
BW = {0: 50.0, 1: 25.0, 2: 12.0}  # x, y, z edges on DGX-1 V100


def test_eq2_reproduces_the_issue_numbers() -> None:
    # 4-GPU all-to-all: {0,2,5,7} has x,y,z = 0,2,4; {0,1,2,3} has 3,3,0
    assert count_links(DGX, list(itertools.combinations([0, 2, 5, 7], 2))) == (0, 2, 4)
    assert count_links(DGX, list(itertools.combinations([0, 1, 2, 3], 2))) == (3, 3, 0)
    assert effbw_mapa(0, 2, 4) == pytest.approx(73.9, abs=0.06)
    assert effbw_mapa(3, 3, 0) == pytest.approx(33.6, abs=0.05)


def test_eq2_is_not_monotone_on_rings_but_gputopo_is() -> None:
    # ring of 4: upgrading one PCIe edge to a double NVLink lowers Eq. 2 ...
    assert effbw_mapa(1, 0, 3) < effbw_mapa(0, 0, 4)
    # ... but never the gputopo-v1 model
    assert effbw_gputopo([50, 12, 12, 12]) > effbw_gputopo([12, 12, 12, 12])


def test_link_classes_for_unseen_links() -> None:
    assert link_class(12) == 0 and link_class(3) == 0  # NV3+ / NVSwitch count as double
    assert link_class(1) == 1 and link_class(0) == 2


@given(
    st.lists(st.sampled_from([12.0, 20.0, 25.0, 40.0, 50.0, 75.0, 300.0]), min_size=1, max_size=28),
    st.data(),
)
def test_gputopo_model_is_monotone(weights: list[float], data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(weights) - 1))
    faster = data.draw(st.floats(min_value=weights[i], max_value=600.0))
    upgraded = list(weights)
    upgraded[i] = faster
    assert effbw_gputopo(upgraded) >= effbw_gputopo(weights) - 1e-9


def _sound_points() -> list[tuple[int, int, int]]:
    """(x, y, z) of 2- and 3-GPU all-to-all sets and 4-GPU rings on DGX-1 V100."""
    pts = set()
    for k in (2, 3):
        for s in itertools.combinations(range(8), k):
            pts.add(count_links(DGX, list(itertools.combinations(s, 2))))
    r = ring(4)
    for s in itertools.permutations(range(8), 4):
        pts.add(count_links(DGX, [(s[a], s[b]) for a, b in r.edges]))
    return sorted(pts)


def test_gputopo_model_agrees_with_eq2_where_eq2_was_trained() -> None:
    pts = _sound_points()
    assert len(pts) == 23
    pred = [effbw_gputopo([BW[0]] * x + [BW[1]] * y + [BW[2]] * z) for x, y, z in pts]
    ref = [effbw_mapa(*p) for p in pts]
    rmse = math.sqrt(sum((a - b) ** 2 for a, b in zip(pred, ref, strict=True)) / len(pts))
    assert rmse < 8.0
    # On NVLink-only sets (z = 0), the ranking is the same as Eq. 2's.
    nv = [(p, a, b) for p, a, b in zip(pts, pred, ref, strict=True) if p[2] == 0]
    for (p1, a1, b1), (p2, a2, b2) in itertools.combinations(nv, 2):
        if sum(p1) == sum(p2) and abs(b1 - b2) > 1.0:
            assert (a1 > a2) == (b1 > b2), (p1, p2)
    # 2-GPU pairs within 10 %
    for p in [(1, 0, 0), (0, 1, 0), (0, 0, 1)]:
        a = effbw_gputopo([BW[i] for i in range(3) for _ in range(p[i])])
        assert a == pytest.approx(effbw_mapa(*p), rel=0.10)


def test_preserved_bandwidth_eq3() -> None:
    # idle DGX-1 minus {0,1,4}: the remaining 5 GPUs' induced graph
    rest = [2, 3, 5, 6, 7]
    expected = sum(DGX.link_bandwidth(a, b) for a, b in itertools.combinations(rest, 2))
    assert preserved_bandwidth(DGX, rest) == expected


def test_eq2_and_gputopo_v1_match_the_figures_the_module_quotes() -> None:
    """The module docstring's numbers (MAPA Table 2's θ, gputopo-v1's fit): Eq. 2's 4-ring
    (0,0,4) = 12.5 > (1,0,3) = 4.9; ring (3,1,0) 56.9 by gputopo-v1 against 68.7 by Eq. 2;
    over the 23 points, RMSE 7.6 GB/s and at most 11.8 GB/s apart on NVLink-only ones."""
    assert effbw_mapa(0, 0, 4) == pytest.approx(12.5, abs=0.05)
    assert effbw_mapa(1, 0, 3) == pytest.approx(4.9, abs=0.05)
    assert effbw_mapa(3, 1, 0) == pytest.approx(68.7, abs=0.05)
    assert effbw_gputopo([BW[0]] * 3 + [BW[1]]) == pytest.approx(56.9, abs=0.05)
    pts = _sound_points()
    pred = [effbw_gputopo([BW[0]] * x + [BW[1]] * y + [BW[2]] * z) for x, y, z in pts]
    ref = [effbw_mapa(*p) for p in pts]
    rmse = math.sqrt(sum((a - b) ** 2 for a, b in zip(pred, ref, strict=True)) / len(pts))
    assert f"{rmse:.1f}" == "7.6"
    gap = max(abs(a - b) for p, a, b in zip(pts, pred, ref, strict=True) if p[2] == 0)
    assert f"{gap:.1f}" == "11.8"


def test_gputopo_v1_of_one_link_and_of_none() -> None:
    """c · m^β · M_p(w): one edge of w GB/s predicts 0.7844 · w; no edge (one GPU) 0; equal
    edges predict c · m^0.45 · w."""
    assert effbw_gputopo([]) == 0.0
    assert effbw_gputopo([50.0]) == pytest.approx(0.7844 * 50.0)
    assert effbw_gputopo([25.0] * 4) == pytest.approx(0.7844 * 4**0.45 * 25.0)
    # the power mean (p = -1.5) leans toward the slower link
    mean = ((50.0**-1.5 + 12.0**-1.5) / 2) ** (1 / -1.5)
    assert effbw_gputopo([50.0, 12.0]) == pytest.approx(0.7844 * 2**0.45 * mean)


def _pair(nvlinks: int, level: PCIeLevel) -> Topology:
    gpus = [GPU(i, deterministic_uuid("pair", i), "", "G", 16384, 0, frozenset())
            for i in range(2)]
    return Topology.build("pair", gpus, {(0, 1): nvlinks}, level)


@pytest.mark.parametrize(("level", "cost"), [
    (PCIeLevel.PIX, 1.0), (PCIeLevel.PXB, 2.0), (PCIeLevel.PHB, 3.0), (PCIeLevel.NODE, 4.0),
    (PCIeLevel.SYS, 5.0),
])
def test_gaia_access_cost_of_a_pcie_pair_is_its_level(level: PCIeLevel, cost: float) -> None:
    assert pair_access_cost(_pair(0, level), 0, 1) == cost
    assert access_cost(_pair(0, level), [0, 1]) == cost


@pytest.mark.parametrize("nvlinks", [1, 2, 4, 12])
def test_gaia_access_cost_of_an_nvlink_pair_is_half_over_the_link_count(nvlinks: int) -> None:
    """NVLinked pairs cost less than any PCIe path, whatever PCIe level is beneath them."""
    assert pair_access_cost(_pair(nvlinks, PCIeLevel.SYS), 1, 0) == 0.5 / nvlinks


def test_access_cost_and_aggbw_sum_over_every_pair() -> None:
    # DGX-1 V100: 0-1 NV1, 0-3 NV2, 1-3 NV1 ... and 0-5 is PCIe across the sockets
    gpus = [0, 1, 3]
    assert all_pairs(gpus) == [(0, 1), (0, 3), (1, 3)]
    assert all_pairs([5]) == [] and all_pairs([]) == []
    assert access_cost(DGX, gpus) == pytest.approx(
        sum(pair_access_cost(DGX, a, b) for a, b in [(0, 1), (0, 3), (1, 3)]))
    assert access_cost(DGX, [4]) == 0.0
    assert aggregated_bandwidth(DGX, [(0, 1), (0, 3)]) == (
        DGX.link_bandwidth(0, 1) + DGX.link_bandwidth(0, 3))
    assert aggregated_bandwidth(DGX, []) == 0.0
    assert preserved_bandwidth(DGX, [2]) == 0.0


def test_monotone_sample_and_isclose_tolerances() -> None:
    assert is_monotone_sample([1.0, 1.0, 2.0]) and is_monotone_sample([]) and is_monotone_sample(
        [3.0])
    assert is_monotone_sample([1.0, 1.0 - 1e-10])  # within 1e-9: noise
    assert not is_monotone_sample([1.0, 1.0 - 1e-8, 2.0])
    assert not is_monotone_sample([2.0, 1.0])
    assert isclose(1.0, 1.0 + 1e-10) and isclose(0.0, 1e-10)
    assert not isclose(1.0, 1.0 + 1e-8) and not isclose(0.0, 1e-8)
    assert isclose(1e6, 1e6 * (1 + 5e-10)) and not isclose(1e6, 1e6 * (1 + 5e-9))
