"""Application pattern graphs (MAPA §3.1): which of a job's GPUs talk to which.

A pattern has ``size`` vertices ``0..size-1`` (the job's GPUs) and undirected edges between
the ones that communicate. Built-ins:

* ``all-to-all`` — every pair (the default; what NCCL collectives may use).
* ``ring`` — 0-1-2-…-(k-1)-0 (NCCL ring all-reduce, MAPA Fig. 8 left).
* ``tree`` — a binary tree, vertex i's parent is (i-1)//2 (NCCL tree, MAPA Fig. 8 middle).
* ``pair`` — disjoint pairs 0-1, 2-3, … (point-to-point peers, e.g. cudaMemcpyPeer); with an
  odd size the last GPU talks to GPU 0.
* an edge list ``"0-1,1-2,2-0"`` over vertices below the request's GPU count.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from topology.text import decimal_int

BUILTIN_PATTERNS = ("ring", "tree", "all-to-all", "pair")


class PatternError(ValueError):
    """A pattern text is malformed or does not fit the request."""


@dataclass(frozen=True)
class Pattern:
    """A communication pattern graph.

    Attributes:
        name: ``ring``, ``tree``, ``all-to-all``, ``pair`` or ``custom``.
        size: number of vertices (GPUs of the job).
        edges: undirected edges ``(a, b)`` with ``a < b``, sorted.
    """

    name: str
    size: int
    edges: tuple[tuple[int, int], ...]

    def graph(self) -> nx.Graph:
        """The pattern as a networkx graph on ``0..size-1``."""
        g = nx.Graph()
        g.add_nodes_from(range(self.size))
        g.add_edges_from(self.edges)
        return g

    def key(self) -> tuple[object, ...]:
        """Hashable identity (name does not matter, the edges do)."""
        return (self.size, self.edges)

    @property
    def is_complete(self) -> bool:
        """Every pair is an edge (the mapping of vertices to GPUs does not matter)."""
        return len(self.edges) == self.size * (self.size - 1) // 2

    def __str__(self) -> str:
        if self.name != "custom":
            return self.name
        return ",".join(f"{a}-{b}" for a, b in self.edges)


def _make(name: str, size: int, edges: set[tuple[int, int]]) -> Pattern:
    norm = sorted({(min(a, b), max(a, b)) for a, b in edges if a != b})
    return Pattern(name, size, tuple(norm))


def all_to_all(k: int) -> Pattern:
    """Every pair of ``k`` GPUs."""
    return _make("all-to-all", k, {(a, b) for a in range(k) for b in range(a + 1, k)})


def ring(k: int) -> Pattern:
    """A ring over ``k`` GPUs (for k = 2 a single edge, k = 1 no edge)."""
    return _make("ring", k, {(i, (i + 1) % k) for i in range(k)} if k > 1 else set())


def tree(k: int) -> Pattern:
    """A binary tree over ``k`` GPUs (parent of i is (i-1)//2)."""
    return _make("tree", k, {((i - 1) // 2, i) for i in range(1, k)})


def pair(k: int) -> Pattern:
    """Disjoint pairs 0-1, 2-3, …; with odd ``k`` the last GPU pairs with GPU 0."""
    edges = {(i, i + 1) for i in range(0, k - 1, 2)}
    if k % 2 == 1 and k > 1:
        edges.add((0, k - 1))
    return _make("pair", k, edges)


_BUILDERS = {"ring": ring, "tree": tree, "all-to-all": all_to_all, "pair": pair}


def parse_pattern(text: str, count: int) -> Pattern:
    """Parse a pattern name or edge list for a request of ``count`` GPUs.

    Args:
        text: ``ring``, ``tree``, ``all-to-all`` (also ``alltoall``/``all_to_all``), ``pair``,
            or an edge list ``"0-1,1-2"`` whose vertices are below ``count``.
        count: GPUs requested (>= 1).

    Raises:
        PatternError: unknown name, malformed edge, self-loop, or a vertex >= ``count``
            ("pattern larger than the request").
    """
    t = text.strip().lower().replace("_", "-")
    if t in ("alltoall", "all2all", "all-2-all"):
        t = "all-to-all"
    if t in _BUILDERS:
        return _BUILDERS[t](count)
    if not t:
        raise PatternError("empty pattern")
    edges: set[tuple[int, int]] = set()
    for part in t.split(","):
        part = part.strip()
        ends = [decimal_int(b) for b in part.split("-")]
        if len(ends) != 2 or ends[0] is None or ends[1] is None:
            raise PatternError(
                f"bad pattern {text!r}: expected one of {', '.join(BUILTIN_PATTERNS)} "
                f"or an edge list like 0-1,1-2"
            )
        a, b = ends[0], ends[1]
        if a == b:
            raise PatternError(f"bad pattern {text!r}: self-loop {a}-{b}")
        if max(a, b) >= count:
            raise PatternError(
                f"pattern {text!r} names GPU {max(a, b)} but the request has only {count} "
                f"GPU(s) (vertices are 0..{count - 1})"
            )
        edges.add((a, b))
    return _make("custom", count, edges)
