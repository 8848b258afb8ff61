"""MAPA's scores and the monotone gputopo-v1 model."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import catalog
from topology.patterns import ring
from topology.policies.bandwidth import (
    count_links,
    effbw_gputopo,
    effbw_mapa,
    link_class,
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
