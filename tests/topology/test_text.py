"""Numbers read from annotations, labels, flags and device IDs: ASCII digits only (found by
the generated watch events of ``tests/scheduler_extender/test_kubernetes_state_fuzz.py``:
``str.isdigit`` let "²" through to ``int``); files read as UTF-8; YAML and JSON whose
mappings spell a key twice refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from topology.contract import AssignmentError, parse_gpu_indices
from topology.patterns import PatternError, parse_pattern
from topology.text import (
    DuplicateJSONKeyError,
    DuplicateKeyError,
    decimal_int,
    load_json,
    load_yaml,
    path_exists,
    path_is_file,
    read_utf8,
)


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


@pytest.mark.parametrize(("text", "where"), [
    ("a: 1\nb: 2\na: 3\n", "duplicate key 'a' (line 3, column 1)"),
    ("jobs:\n  - {gpus: 2, gpus: 3}\n", "duplicate key 'gpus' (line 2, column 15)"),
    ("outer:\n  x: 1\n  x: 1\n", "duplicate key 'x' (line 3, column 3)"),
    ("1: a\n1: b\n", "duplicate key 1 (line 2, column 1)"),
])
def test_yaml_that_spells_a_key_twice_is_refused_naming_it(text: str, where: str) -> None:
    """PyYAML keeps the last value of a key given twice; a file that does is a mistake (which
    value did its author mean?), so it is refused with the key and its line."""
    assert yaml.safe_load(text) is not None  # what the library alone would have accepted
    with pytest.raises(DuplicateKeyError) as exc:
        load_yaml(text)
    assert isinstance(exc.value, yaml.YAMLError)
    assert str(exc.value) == where


@pytest.mark.parametrize("text", [
    "a: 1\nb: {c: [1, 2, {d: e}]}\n",
    "base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 3\n",  # a merge key's value may be overridden
    "m:\n  <<: [{x: 1}, {x: 2}]\n",
    "- {a: 1}\n- {a: 2}\n",  # the same key in two mappings
    "",
    "plain",
])
def test_yaml_without_a_repeated_key_reads_as_safe_load(text: str) -> None:
    assert load_yaml(text) == yaml.safe_load(text)


def test_yaml_that_is_not_yaml_is_still_a_yaml_error() -> None:
    with pytest.raises(yaml.YAMLError) as exc:
        load_yaml("a: [1, 2\n")
    assert not isinstance(exc.value, DuplicateKeyError)


def test_json_that_spells_a_key_twice_is_refused_at_the_second() -> None:
    text = '{"a": 1,\n "b": {"c": 1, "c": 2}}'
    with pytest.raises(DuplicateJSONKeyError) as exc:
        load_json(text)
    assert isinstance(exc.value, json.JSONDecodeError)
    assert exc.value.msg == "duplicate key 'c'"
    assert (exc.value.lineno, exc.value.colno) == (2, 16)
    assert str(exc.value) == "duplicate key 'c': line 2 column 16 (char 24)"
    with pytest.raises(json.JSONDecodeError, match="duplicate key 'a'"):
        load_json(b'{"a": 1, "a": 1}')
    with pytest.raises(DuplicateJSONKeyError, match="duplicate key 'caf\u00e9': line 1"):
        load_json('{"caf\u00e9": 1, "caf\\u00e9": 2}')  # one key, spelled two ways


def test_json_duplicate_spelled_more_than_twice_is_named_without_a_guessed_place() -> None:
    """The key also appears in another object: which appearance is the repeat is not known
    from the text alone, so no line is given rather than a wrong one."""
    with pytest.raises(DuplicateJSONKeyError) as exc:
        load_json('{"x": {"c": 1}, "y": {"c": 1, "c": 2}}')
    assert str(exc.value) == "duplicate key 'c'" and not exc.value.located


def test_json_without_a_repeated_key_reads_as_json_loads() -> None:
    for text in ('{"a": [1, {"b": 2}], "c": {"b": 3}}', "[1, 2]", '"x"', "null"):
        assert load_json(text) == json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        load_json('{"a": }')


def test_a_name_too_long_for_a_file_is_no_file(tmp_path: Path) -> None:
    """``pathlib`` raises OSError (ENAMETOOLONG) on such a name rather than saying False."""
    long = tmp_path / ("x" * 300)
    with pytest.raises(OSError):
        long.exists()
    assert not path_exists(long) and not path_is_file(long)
    f = tmp_path / "f.yaml"
    f.write_text("a: 1\n")
    assert path_exists(f) and path_is_file(f)
    assert path_exists(tmp_path) and not path_is_file(tmp_path)
    assert not path_exists(tmp_path / "missing") and not path_is_file(tmp_path / "missing")
