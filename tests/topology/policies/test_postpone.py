"""The default policy's bounded postponement (issue 24): a bandwidth-sensitive multi-GPU job
that may wait is not placed on a busy node whose every free set is an EffBW pit."""

from __future__ import annotations

import pytest

from topology import catalog
from topology.patterns import ring
from topology.policies import robust
from topology.policies.base import NodeState, NoFit, Request
from topology.policies.default import POSTPONE_BELOW, gputopo
from topology.policies.memo import Memo

DGX = catalog.get("dgx1-v100")


def _req(count: int = 3, wait: bool = True, sensitive: bool = True) -> Request:
    return Request(count=count, pattern=ring(count), bandwidth_sensitive=sensitive,
                   wait_for_better=wait)


def _busy_but(free: set[int]) -> NodeState:
    return NodeState.whole(g for g in range(DGX.size) if g not in free)


def test_a_ring_waits_rather_than_take_an_eq2_pit() -> None:
    # {0,5,7}: one single NVLink and two PCIe hops; Eq. 2 predicts 6 % of the ideal
    state = _busy_but({0, 5, 7})
    with pytest.raises(NoFit, match=r"postponed: .*\{0,5,7\}.* 6% .*mapa-eq2"):
        gputopo(DGX, state, _req(), Memo())
    # a one-shot decision (the CLI, the per-decision benchmarks) still places it
    d = gputopo(DGX, state, _req(wait=False), Memo())
    assert sorted(d.gpus) == [0, 5, 7]


def test_a_set_at_or_above_the_threshold_is_taken() -> None:
    # {1,5,6}: the leftover, Eq. 2 52 % of the ideal, bottleneck 48 %: above 40 %
    d = gputopo(DGX, _busy_but({1, 5, 6}), _req(), Memo())
    assert sorted(d.gpus) == [1, 5, 6]
    # one good set among poor ones is enough: {4,5,6} is an NVLink triangle
    d = gputopo(DGX, _busy_but({0, 4, 5, 6, 7}), _req(), Memo())
    assert set(d.gpus) <= {4, 5, 6, 7}


def test_an_idle_node_and_insensitive_jobs_never_wait() -> None:
    # an idle node holds the ideal set; a node whose only unavailable GPUs are unhealthy
    # has nothing that will free up
    unhealthy = NodeState(unhealthy=frozenset(g for g in range(8) if g not in {0, 5, 7}))
    d = gputopo(DGX, unhealthy, _req(), Memo())
    assert sorted(d.gpus) == [0, 5, 7]
    d = gputopo(DGX, _busy_but({0, 5, 7}), _req(sensitive=False), Memo())
    assert sorted(d.gpus) == [0, 5, 7]


def test_postpone_reason_threshold_is_the_worst_model_share() -> None:
    memo = Memo()
    state = _busy_but({1, 5, 6})
    assert robust.postpone_reason(DGX, state, [1, 5, 6], ring(3), POSTPONE_BELOW, memo) is None
    # 0.5 is above the bottleneck's 48 % on {1,5,6}: the same set now waits
    why = robust.postpone_reason(DGX, state, [1, 5, 6], ring(3), 0.5, memo)
    assert why is not None and "bottleneck" in why and "48%" in why


def test_the_flag_is_part_of_the_cache_key_only_when_set() -> None:
    plain = Request(count=3, pattern=ring(3))
    assert plain.key() != _req(sensitive=True).key()
    assert "wait-for-better" not in plain.key()
