"""The ``gputopo`` command: one typer app, subcommands registered by modules.

Each module in :data:`COMMAND_MODULES` exposes ``register(app: typer.Typer) -> None``.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import TypeVar, cast

import typer

_T = TypeVar("_T")

app = typer.Typer(
    name="gputopo",
    help="Topology-aware GPU scheduling for Kubernetes: placement policies, scheduler "
    "extender, device plugin, job planner, simulator.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMAND_MODULES = (
    "gputopo_cli.cmd_device_plugin",
    "gputopo_cli.cmd_dra_driver",
    "gputopo_cli.cmd_extender",
    "gputopo_cli.cmd_place",
    "gputopo_cli.cmd_topology",
    "gputopo_cli.cmd_simulate",
    "gputopo_cli.cmd_cluster",
    "gputopo_cli.cmd_pin",
    "gputopo_cli.cmd_planner",
    "gputopo_cli.cmd_dra_allocator",
)

#: A line that starts a list item: ``* x``, ``- x``, ``• x``, ``1. x``, ``2) x``.
_ITEM = re.compile(r"^(?:[*\-•]|\d+[.)])\s")


def unwrap_help(text: _T) -> _T:
    """``text`` with the hard wraps of its docstring undone, so that the terminal wraps it.

    Docstrings are wrapped at 100 columns for the source; typer's rich help prints their line
    breaks as they are (the commands table keeps them all; a command's page all but the first
    paragraph's), which breaks sentences mid-line at any other width. Paragraphs (blank-line
    separated) stay apart; inside one, lines are joined with a space, except that a list item
    (``* …``, ``- …``, ``1. …``) starts a new line and click's ``\\b`` (keep as is) and
    indented blocks are left alone. Anything but text (None, typer's default placeholders)
    is returned as it is.
    """
    if not isinstance(text, str):
        return text
    out: list[str] = []
    for para in inspect.cleandoc(text).split("\n\n"):
        lines = para.split("\n")
        if lines[0].startswith("\b") or all(ln.startswith((" ", "\t")) for ln in lines):
            out.append(para)
            continue
        joined: list[str] = []
        for ln in lines:
            if joined and not _ITEM.match(ln.strip()):
                joined[-1] = f"{joined[-1]} {ln.strip()}"
            else:
                joined.append(ln.strip())
        out.append("\n".join(joined))
    return cast(_T, "\n\n".join(out))


def tidy_help(typer_app: typer.Typer) -> None:
    """Apply :func:`unwrap_help` to the help of ``typer_app``, its commands and its command
    groups, recursively (a command without ``help=`` takes its callback's docstring, as
    typer would)."""
    typer_app.info.help = unwrap_help(typer_app.info.help)
    for cmd in typer_app.registered_commands:
        doc = cmd.help or (inspect.getdoc(cmd.callback) if cmd.callback else None)
        cmd.help = unwrap_help(doc)
    for group in typer_app.registered_groups:
        group.help = unwrap_help(group.help)
        if group.typer_instance is not None:
            tidy_help(group.typer_instance)


for _mod in COMMAND_MODULES:
    importlib.import_module(_mod).register(app)
tidy_help(app)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
