"""Evaluators own their caches: two in one process share nothing, and both decide exactly
what the policy decides."""

from __future__ import annotations

import threading

import pytest

from topology import catalog
from topology.patterns import ring
from topology.policies.base import NodeState, NoFit, Request
from topology.policies.evaluate import Evaluator
from topology.policies.memo import Memo
from topology.policies.registry import get_policy
from topology.policies.scoring import node_score

TORUS = catalog.get("mapa-torus-16")
DGX = catalog.get("dgx1-v100")


def test_two_evaluators_in_one_process_share_nothing() -> None:
    a, b = Evaluator(), Evaluator()
    req = Request(4, pattern=ring(4))
    da = a.place("gputopo", TORUS, NodeState.whole([0, 5]), req)
    assert (a.hits, a.misses) == (0, 1)
    assert (b.hits, b.misses) == (0, 0)  # b saw nothing of a's work
    assert a.memo.rows > 0 and b.memo.rows == 0  # a's subset table is a's alone
    db = b.place("gputopo", TORUS, NodeState.whole([0, 5]), req)
    assert db == da and (b.hits, b.misses) == (0, 1)
    a.place("gputopo", TORUS, NodeState.whole([0, 5]), req)
    assert (a.hits, a.misses) == (1, 1)
    a.clear()
    assert (a.hits, a.misses) == (0, 0) and a.memo.rows == 0
    assert (b.hits, b.misses) == (0, 1) and b.memo.rows > 0  # clearing a leaves b alone
    assert b.place("gputopo", TORUS, NodeState.whole([0, 5]), req) == da
    assert b.hits == 1


def test_evaluators_decide_what_the_policy_decides_concurrently() -> None:
    """Two evaluators in two threads, the same stream: each equals the bare policy call."""
    stream = [(NodeState.whole(range(i % 5)), Request(2 + i % 3, pattern=ring(2 + i % 3)))
              for i in range(24)]
    want = [get_policy("gputopo").fn(DGX, s, r, Memo()) for s, r in stream]
    got: dict[int, list[object]] = {}

    def run(k: int) -> None:
        ev = Evaluator()
        got[k] = [ev.place("gputopo", DGX, s, r) for s, r in stream * 2][: len(stream)]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got[0] == want and got[1] == want


def test_a_memo_is_shared_only_on_purpose() -> None:
    memo = Memo()
    a, b = Evaluator(memo=memo), Evaluator(memo=memo)
    req = Request(3, pattern=ring(3))
    a.place("mapa-preserve", TORUS, NodeState(), req)
    rows = memo.rows
    b.place("mapa-preserve", TORUS, NodeState(), req)
    assert memo.rows == rows  # b used a's table ...
    assert (b.hits, b.misses) == (0, 1)  # ... but keeps its own decisions
    b.clear_decisions()
    assert memo.rows == rows


def test_no_fit_is_cached_and_raised_again() -> None:
    ev = Evaluator()
    full = NodeState.whole(range(8))
    for _ in range(2):
        with pytest.raises(NoFit):
            ev.place("gputopo", DGX, full, Request(1))
    assert (ev.hits, ev.misses) == (1, 1)


def test_node_scores_use_the_evaluators_memo() -> None:
    ev = Evaluator()
    req = Request(4, pattern=ring(4))
    d = ev.place("gputopo", DGX, NodeState.whole([0]), req)
    s = node_score("gputopo", DGX, NodeState.whole([0]), req, d, evaluator=ev)
    assert 0 <= s.score <= 10
    assert ev.hits + ev.misses >= 2  # the idle-node reference went through ev too
    other = Evaluator()
    assert node_score("gputopo", DGX, NodeState.whole([0]), req, d, evaluator=other) == s
