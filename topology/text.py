"""Reading what people and programs write: small numbers in annotations, labels, flags and
device IDs, the text files they hand the programs, and the YAML and JSON in those files."""

from __future__ import annotations

import errno
import json
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node

_MERGE_TAG = "tag:yaml.org,2002:merge"


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


def path_exists(path: Path) -> bool:
    """``path.exists()``, but False for a name no file can have (longer than the system allows:
    ``ENAMETOOLONG``), which ``pathlib`` raises as :class:`OSError` instead. A command-line
    value that may be a name or a path (a catalog machine, a workload generator) is asked this
    first, so a long value is an unknown name, not a traceback."""
    try:
        return path.exists()
    except OSError:
        return False


def path_is_file(path: Path) -> bool:
    """``path.is_file()``, False where :func:`path_exists` is."""
    try:
        return path.is_file()
    except OSError:
        return False


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


class DuplicateKeyError(ConstructorError):
    """A YAML mapping spells one key twice (:func:`load_yaml`); ``problem`` names the key, its
    line and column."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that spells one key twice (YAML 1.2 §3.2.1.1:
    keys are unique; PyYAML keeps the last value silently). Merge keys (``<<``) may still be
    overridden: that is what they are for."""

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    fresh = key not in seen
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                if not fresh:
                    mark = key_node.start_mark
                    raise DuplicateKeyError(
                        None, None, f"duplicate key {key!r} (line {mark.line + 1}, column "
                        f"{mark.column + 1})", None)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[arg-type]


def load_yaml(text: str) -> Any:
    """One YAML document (``yaml.safe_load``), with every mapping's keys unique.

    Raises:
        DuplicateKeyError: a mapping spells a key twice (a ``yaml.YAMLError``; its message, one
            line, names the key, its line and column: ``duplicate key 'jobs' (line 7, column
            1)``).
        yaml.YAMLError: not YAML.
    """
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateJSONKey(key)
        out[key] = value
    return out


class _DuplicateJSONKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class DuplicateJSONKeyError(json.JSONDecodeError):
    """A JSON object spells one key twice (:func:`load_json`). ``msg`` names the key; when the
    text spells that key exactly twice (then both are in the one object) ``lineno``/``colno``
    point at the second and the message gives them, else the message is ``msg`` alone."""

    def __init__(self, key: str, doc: str, pos: int | None) -> None:
        super().__init__(f"duplicate key {key!r}", doc, 0 if pos is None else pos)
        self.key, self.located = key, pos is not None

    def __str__(self) -> str:
        return super().__str__() if self.located else self.msg


def load_json(text: str | bytes) -> Any:
    """One JSON document (``json.loads``), with every object's keys unique (RFC 8259 §4: names
    SHOULD be unique; ``json`` keeps the last value silently).

    Raises:
        DuplicateJSONKeyError: an object spells a key twice (a ``json.JSONDecodeError``).
        json.JSONDecodeError: not JSON.
        UnicodeDecodeError: ``bytes`` that are not UTF-8.
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except _DuplicateJSONKey as exc:
        doc = text.decode("utf-8") if isinstance(text, bytes) else text
        spellings = {json.dumps(exc.key), json.dumps(exc.key, ensure_ascii=False)}
        spots = sorted(m.start() for sp in spellings
                       for m in re.finditer(re.escape(sp) + r"\s*:", doc))
        raise DuplicateJSONKeyError(exc.key, doc, spots[1] if len(spots) == 2 else None) \
            from None
