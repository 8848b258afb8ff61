"""What policies and node scores may remember between decisions: an object, never a global.

A placement depends on the topology *class* (link matrix, GPU models, bandwidth table), the
free state and the request. Some of its inputs cost far more to compute than a decision and
depend on the class alone — the link-bandwidth matrices, MAPA's per-class subset tables
(:mod:`topology.policies.matching`), the score's PreservedBW extremes
(:mod:`topology.policies.scoring`). A :class:`Memo` keeps them. Whoever runs the policies owns
one and passes it in (through :class:`topology.policies.evaluate.Evaluator`): the extender,
each of its worker processes, the simulator, the CLI. Two memos never share anything, so two
evaluators in one process (tests, the simulator's runs, two extenders) cannot see each other's
state, and forgetting is :meth:`Memo.clear`.

Module-level state in :mod:`topology` is limited to the policy registry and to
``functools`` memoisation of pure functions of immutable arguments (a pattern's
arrangements, a :class:`~topology.model.Topology`'s access-cost tree), which cannot change a
result; ``tests/topology/test_no_global_state.py`` holds the package to that.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from topology.model import Topology

T = TypeVar("T")

#: Rows kept across all bounded entries (MAPA subset tables; least recently used go first):
#: at most (k + 5) × 8 bytes a row, so about 200 MB at the limit, typically a few MB (a
#: 16-GPU machine's tables have at most 8,008 rows).
TABLE_CACHE_ROWS = 2_000_000


class Memo:
    """Per-topology-class values and row-bounded tables (thread-safe).

    Args:
        max_rows: rows kept across :meth:`bounded` entries (default :data:`TABLE_CACHE_ROWS`).
    """

    def __init__(self, max_rows: int = TABLE_CACHE_ROWS) -> None:
        self.max_rows = max_rows
        self._per_class: dict[tuple[str, str], Any] = {}
        self._bounded: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._rows = 0
        self._lock = threading.Lock()

    def per_class(self, kind: str, topology: Topology, build: Callable[[Topology], T]) -> T:
        """The ``kind`` value of ``topology``'s class, built once with ``build(topology)``
        (every node of a class shares it, whatever its UUIDs). ``kind`` names what is kept
        (``"matrices"``, ``"score-tables"`` …); ``build`` must return the same for every
        topology of the class."""
        key = (kind, topology.topology_class)
        hit = self._per_class.get(key)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        value = build(topology)
        with self._lock:
            return self._per_class.setdefault(key, value)  # type: ignore[no-any-return]

    def bounded(self, key: Hashable, build: Callable[[], T], rows: Callable[[T], int]) -> T:
        """The value under ``key``, built with ``build()`` on a miss; ``rows(value)`` counts
        towards :attr:`max_rows`, and the least recently used entries go first when the sum
        exceeds it (the newest always stays)."""
        with self._lock:
            hit = self._bounded.get(key)
            if hit is not None:
                self._bounded.move_to_end(key)
                return hit[0]  # type: ignore[no-any-return]
        value = build()
        n = rows(value)
        with self._lock:
            if key not in self._bounded:
                self._bounded[key] = (value, n)
                self._rows += n
                while self._rows > self.max_rows and len(self._bounded) > 1:
                    self._rows -= self._bounded.popitem(last=False)[1][1]
            return self._bounded[key][0]  # type: ignore[no-any-return]

    @property
    def rows(self) -> int:
        """Rows held by :meth:`bounded` entries."""
        return self._rows

    def clear(self) -> None:
        """Forget everything (cold-cache benchmarks, tests)."""
        with self._lock:
            self._per_class.clear()
            self._bounded.clear()
            self._rows = 0
