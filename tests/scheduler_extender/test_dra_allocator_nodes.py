"""Which nodes the DRA allocator may put a pod on, and how a set it cannot hand out as the
policy laid it is handed out: the node's taints against the pod's tolerations (Kubernetes'
``Toleration.ToleratesTaint``, k8s.io/api core/v1 ``toleration.go``), its nodeSelector, and
:func:`~scheduler_extender.dra.allocator.assign_tolerated`'s hand-out (thirteenth mutation
round, docs/testing.md)."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scheduler_extender.dra.allocator import assign_tolerated, node_admits

TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def _pod(tolerations: Sequence[Any] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"namespace": "ns", "name": "p"}, "spec": dict(spec)}
    if tolerations is not None:
        body["spec"]["tolerations"] = list(tolerations)
    return body


def _node(*taints: dict[str, str], **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": "n0", "labels": dict(labels)},
            "spec": {"taints": list(taints)}}


# Kubernetes' ToleratesTaint: an effect, when set, must be the taint's; a key, when set, the
# taint's; Exists tolerates any value, Equal (also the empty operator) the taint's value only
@pytest.mark.parametrize(("toleration", "tolerated"), [
    ({"operator": "Exists"}, True),                                     # everything
    ({"operator": "Exists", "effect": "NoSchedule"}, True),
    ({"operator": "Exists", "effect": "NoExecute"}, False),            # another effect
    ({"key": "dedicated", "operator": "Exists"}, True),
    ({"key": "other", "operator": "Exists"}, False),                   # another key
    ({"key": "dedicated", "operator": "Equal", "value": "gpu"}, True),
    ({"key": "dedicated", "value": "gpu"}, True),                      # "" is Equal
    ({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}, True),
    ({"key": "dedicated", "value": "gpu", "effect": "NoExecute"}, False),
    ({"key": "dedicated", "operator": "Equal", "value": "cpu"}, False),  # another value
    ({"key": "dedicated", "operator": "Equal"}, False),                # no value is ""
    ({"key": "other", "operator": "Equal", "value": "gpu"}, False),    # the value alone
    ({}, False),
])
def test_a_node_taint_is_tolerated_as_kubernetes_tolerates_it(
        toleration: dict[str, str], tolerated: bool) -> None:
    why = node_admits(_pod([toleration]), _node(TAINT))
    assert (why is None) is tolerated, why
    if not tolerated:
        assert why == "taint dedicated=gpu:NoSchedule"


@pytest.mark.parametrize("value", [None, ""])
def test_a_taint_without_a_value_is_tolerated_by_a_toleration_without_one(
        value: str | None) -> None:
    taint = {"key": "dedicated", "effect": "NoExecute"}
    tol: dict[str, str] = {"key": "dedicated", "operator": "Equal"}
    if value is not None:
        tol["value"] = value
    assert node_admits(_pod([tol]), _node(taint)) is None
    assert node_admits(_pod([{**tol, "value": "gpu"}]), _node(taint)) == (
        "taint dedicated=:NoExecute")


def test_any_of_the_pods_tolerations_may_tolerate_a_taint() -> None:
    # the ones that do not match (another effect, another key) are passed over, not the end
    others = [{"operator": "Exists", "effect": "NoExecute"},
              {"key": "other", "operator": "Exists"},
              {"key": "dedicated", "operator": "Equal", "value": "cpu"}]
    match = {"key": "dedicated", "operator": "Equal", "value": "gpu"}
    for i in range(len(others) + 1):
        tolerations = others[:i] + [match] + others[i:]
        assert node_admits(_pod(tolerations), _node(TAINT)) is None, tolerations
    assert node_admits(_pod(others), _node(TAINT)) is not None


def test_every_noschedule_or_noexecute_taint_must_be_tolerated() -> None:
    evict = {"key": "broken", "value": "", "effect": "NoExecute"}
    soft = {"key": "soft", "value": "x", "effect": "PreferNoSchedule"}  # never refuses
    tol = [{"key": "dedicated", "operator": "Exists"}]
    assert node_admits(_pod(tol), _node(soft, TAINT)) is None
    assert node_admits(_pod(tol), _node(TAINT, soft, evict)) == "taint broken=:NoExecute"
    assert node_admits(_pod(tol + [{"key": "broken", "operator": "Exists"}]),
                       _node(TAINT, soft, evict)) is None
    assert node_admits(_pod(), _node(soft)) is None


def _brute(arrangement: Sequence[int], counts: Sequence[int],
           forbidden: Sequence[Collection[int]]) -> bool:
    """Whether some hand-out gives each request ``counts[r]`` GPUs it may have."""
    slots = [r for r, c in enumerate(counts) for _ in range(c)]
    return any(all(g not in forbidden[r] for g, r in zip(perm, slots, strict=True))
               for perm in itertools.permutations(arrangement))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3).filter(lambda c: sum(c) <= 6).flatmap(
    lambda counts: st.tuples(
        st.just(counts),
        st.permutations(range(sum(counts))),
        st.lists(st.sets(st.integers(0, sum(counts) - 1), max_size=sum(counts)),
                 min_size=len(counts), max_size=len(counts)))))
# both of request 1's own GPUs forbidden to it: two GPUs must move into it, one at a time
@example(([2, 2], [0, 1, 2, 3], [set(), {2, 3}]))
def test_assign_tolerated_hands_out_every_gpu_once_and_only_where_allowed(
        case: tuple[list[int], list[int], list[set[int]]]) -> None:
    counts, arrangement, forbidden = case
    got = assign_tolerated(arrangement, counts, forbidden)
    assert (got is not None) is _brute(arrangement, counts, forbidden)
    if got is None:
        return
    assert sorted(got) == sorted(arrangement)  # every GPU once
    start = 0
    for r, c in enumerate(counts):  # split() hands out request after request
        mine = got[start:start + c]
        start += c
        assert not set(mine) & forbidden[r], (r, mine)
        # in the arrangement's order
        assert mine == sorted(mine, key=arrangement.index)
    if all(arrangement[p] not in forbidden[r] for p, r in enumerate(
            r for r, c in enumerate(counts) for _ in range(c))):
        assert got == list(arrangement)  # the pattern's split, untouched
