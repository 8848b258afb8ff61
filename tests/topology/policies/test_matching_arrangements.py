"""MAPA's arrangement tables (:func:`topology.policies.matching._arrangements_and_perms`),
vectorised, equal the definition: map the pattern's edges through every permutation in
``itertools.permutations`` order and keep each distinct image with the first permutation
that produced it, in the order first produced (the order decides ties between arrangements,
so it is part of the result)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology.patterns import Pattern, all_to_all, ring, tree
from topology.policies.matching import _arrangements_and_perms


def by_definition(size: int, edges: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, np.ndarray]:
    seen: dict[tuple[tuple[int, int], ...], tuple[int, ...]] = {}
    for perm in itertools.permutations(range(size)):
        image = tuple(sorted((min(perm[a], perm[b]), max(perm[a], perm[b])) for a, b in edges))
        seen.setdefault(image, perm)
    return (np.array(list(seen), dtype=np.int64).reshape(len(seen), len(edges), 2),
            np.array(list(seen.values()), dtype=np.int64).reshape(len(seen), size))


def assert_same(size: int, edges: tuple[tuple[int, int], ...]) -> None:
    want_arr, want_perms = by_definition(size, edges)
    got_arr, got_perms = _arrangements_and_perms(size, edges)
    assert got_arr.dtype == want_arr.dtype and got_perms.dtype == want_perms.dtype
    np.testing.assert_array_equal(got_arr, want_arr)
    np.testing.assert_array_equal(got_perms, want_perms)


@pytest.mark.parametrize("make", [ring, tree, all_to_all], ids=["ring", "tree", "all-to-all"])
@pytest.mark.parametrize("k", range(1, 9))
def test_builtin_patterns_get_the_tables_of_the_definition(
    make: Callable[[int], Pattern], k: int,
) -> None:
    pattern = make(k)
    assert_same(pattern.size, pattern.edges)


def test_an_8_gpu_ring_has_2520_arrangements() -> None:
    arr, perms = _arrangements_and_perms(8, ring(8).edges)
    assert arr.shape == (2520, 8, 2) and perms.shape == (2520, 8)  # 7!/2


@st.composite
def graphs(draw: st.DrawFn) -> tuple[int, tuple[tuple[int, int], ...]]:
    size = draw(st.integers(1, 6))
    pairs = [(a, b) for a in range(size) for b in range(a + 1, size)]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True) if pairs else st.just([]))
    return size, tuple(chosen)


@settings(max_examples=60, deadline=None)
@given(graphs())
def test_any_pattern_graph_gets_the_tables_of_the_definition(
    g: tuple[int, tuple[tuple[int, int], ...]],
) -> None:
    assert_same(*g)
