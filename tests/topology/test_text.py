"""Numbers read from annotations, labels, flags and device IDs: ASCII digits only (found by
the generated watch events of ``tests/scheduler_extender/test_kubernetes_state_fuzz.py``:
``str.isdigit`` let "²" through to ``int``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from topology.contract import AssignmentError, parse_gpu_indices
from topology.patterns import PatternError, parse_pattern
from topology.text import decimal_int, read_utf8


@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("3", 3), (" 12 ", 12), ("007", 7),
    ("", None), (" ", None), ("-1", None), ("+1", None), ("1.0", None), ("1e3", None),
    ("²", None), ("١", None), ("３", None), ("1²", None), ("0x1", None),
])
def test_only_ascii_digits_are_a_number(text: str, value: int | None) -> None:
    assert decimal_int(text) == value


@pytest.mark.parametrize("text", ["²", "1,²", "١"])
def test_unicode_digits_are_not_gpu_indices(text: str) -> None:
    with pytest.raises(AssignmentError, match="is not a GPU index"):
        parse_gpu_indices(text)


@pytest.mark.parametrize("text", ["0-²", "١-0"])
def test_unicode_digits_are_not_pattern_vertices(text: str) -> None:
    with pytest.raises(PatternError, match="bad pattern"):
        parse_pattern(text, 2)


def test_a_file_that_is_not_utf8_is_an_oserror_saying_so(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("name: caf\u00e9\n", encoding="utf-8")
    bad.write_bytes(b"name: caf\xe9\n")
    assert read_utf8(good) == "name: caf\u00e9\n"
    with pytest.raises(OSError, match="not UTF-8 text") as exc:
        read_utf8(bad)
    assert exc.value.filename == str(bad)
    with pytest.raises(FileNotFoundError):
        read_utf8(tmp_path / "missing.yaml")
