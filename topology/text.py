"""Reading the small numbers people and programs write into annotations, labels, flags and
device IDs."""

from __future__ import annotations


def decimal_int(text: str) -> int | None:
    """``text`` (surrounding blanks stripped) as a non-negative integer when it is ASCII
    digits only, else None.

    ``str.isdigit`` is no guard for ``int``: it accepts "²" and other Unicode digits, which
    ``int`` refuses (ValueError) or reads as another script's numerals ("١" is 1). A
    Kubernetes quantity, a GPU index or a count is written in ASCII.

    Examples: ``"3"`` → 3, ``" 12 "`` → 12, ``"-1"``, ``"1.0"``, ``"²"``, ``""`` → None.
    """
    t = text.strip()
    return int(t) if t.isascii() and t.isdigit() else None
