"""Reading what people and programs write: small numbers in annotations, labels, flags and
device IDs, and the text files they hand the programs."""

from __future__ import annotations

import errno
from pathlib import Path


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


def read_utf8(path: Path) -> str:
    """The text of file ``path``, decoded as UTF-8.

    A file that is not UTF-8 raises :class:`OSError` (``errno.EILSEQ``, ``strerror`` "not
    UTF-8 text") rather than ``UnicodeDecodeError``, so that a caller's ``except OSError``
    (cannot read the file) reports it in its one line, as it reports a missing file.

    Raises:
        OSError: unreadable, or not UTF-8 text.
    """
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise OSError(errno.EILSEQ, "not UTF-8 text", str(path)) from None
