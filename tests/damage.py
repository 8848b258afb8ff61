"""Generated bad input shared by the fuzz tests: any JSON value, and a document with one
part replaced by one or removed; and what a ``gputopo`` command must do with any input."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

#: Any JSON value, small: scalars of every kind (huge integers too) and shallow containers.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=6,
)


def paths(doc: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into ``doc`` (mapping keys and list indices), each parent before its
    children."""
    if isinstance(doc, dict):
        items: Any = doc.items()
    elif isinstance(doc, list):
        items = enumerate(doc)
    else:
        return
    for k, v in items:
        yield (*at, k)
        yield from paths(v, (*at, k))


def replaced(doc: Any, path: tuple[Any, ...], value: Any, *, remove: bool) -> Any:
    """A deep copy of ``doc`` with the part at ``path`` set to ``value``, or removed."""
    out = copy.deepcopy(doc)
    parent = out
    for k in path[:-1]:
        parent = parent[k]
    if remove:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


@st.composite
def damaged(draw: st.DrawFn, doc: Any, *, whole: int = 20) -> Any:
    """``doc`` with one part replaced by any JSON value or removed; one draw in ``whole``
    replaces the whole document."""
    if draw(st.integers(0, whole - 1)) == 0:
        return draw(JSON)
    return replaced(doc, draw(st.sampled_from(list(paths(doc)))), draw(JSON),
                    remove=draw(st.booleans()))


def exits_cleanly(r: Any) -> None:
    """A ``typer.testing`` result of a ``gputopo`` command run on any input: exit 0, 1 or 2,
    never a traceback, and an exit 2 says why in one line on stderr."""
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code in (0, 1, 2), (r.exit_code, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    if r.exit_code == 2:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0], r.stderr
