"""``gputopo --help`` and every command's help read as sentences at any terminal width:
the hard wraps of the source's docstrings are not printed (typer's rich help printed them)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gputopo_cli.main import app, unwrap_help

BOX = re.compile(r"[│╭╮╰╯─]")


def command_paths() -> list[tuple[str, ...]]:
    """Every command and group of the CLI, as argument paths (``()`` is ``gputopo``)."""
    out: list[tuple[str, ...]] = []

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        out.append(path)
        for name, sub in getattr(cmd, "commands", {}).items():  # a group
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return out


def help_text(path: tuple[str, ...]) -> str:
    cmd: Any = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return str(cmd.help or "")


def lines_of(output: str) -> list[str]:
    return [" ".join(BOX.sub(" ", ln).split()) for ln in output.splitlines()]


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p) or "gputopo")
def test_every_help_paragraph_is_printed_on_one_line(path: tuple[str, ...]) -> None:
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "1000"},
                           terminal_width=1000)
    assert r.exit_code == 0, r.output
    printed = lines_of(r.output)
    for para in unwrap_help(help_text(path)).split("\n\n"):
        for line in para.split("\n"):
            want = " ".join(line.replace("\b", "").split())
            if want:
                assert any(want in p for p in printed), (want, r.output)


def test_commands_table_has_one_line_per_command() -> None:
    r = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "1000"}, terminal_width=1000)
    printed = lines_of(r.output)
    root: Any = typer.main.get_command(app)
    for name in root.commands:
        row = [p for p in printed if p.startswith(f"{name} ")]
        assert len(row) == 1, r.output
        first = unwrap_help(help_text((name,))).split("\n\n")[0]
        assert " ".join(first.split()) in row[0]


def test_unwrap_help_keeps_paragraphs_lists_and_blocks() -> None:
    doc = """First sentence runs
    on. Second.

    * item one
      continues
    * item two

        indented block
        stays

    \b
    kept
    as is"""
    assert unwrap_help(doc) == (
        "First sentence runs on. Second.\n\n* item one continues\n* item two\n\n"
        "    indented block\n    stays\n\n\b\nkept\nas is")
    assert unwrap_help(None) is None
