"""The ``gputopo`` command: one typer app, subcommands registered by modules.

Each module in :data:`COMMAND_MODULES` exposes ``register(app: typer.Typer) -> None``.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Sequence
from typing import Any, TypeVar, cast

import typer
from typer.core import TyperGroup

from gputopo_cli.common import EXIT_BAD_INPUT

_T = TypeVar("_T")


def _library_error(name: str) -> type[Exception]:
    """The CLI library's exception class ``name`` (``UsageError``, ``ClickException``),
    reached through the public :class:`typer.BadParameter`: typer ships its own copy of
    click, whose exceptions are not the installed click's."""
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == name:
            return cast("type[Exception]", cls)
    raise ImportError(f"typer.BadParameter derives from no {name}")


_USAGE_ERROR = _library_error("UsageError")
_CLI_ERROR = _library_error("ClickException")


class OneLineErrors(TyperGroup):
    """The root command: a usage error the CLI library detects (an unknown option, a value
    of the wrong type, a missing required option) is reported as every other bad input is,
    ``gputopo <command>: error: <message>`` on one line of stderr, exit code 2 — not the
    library's usage block and boxed panel. Help (``--help``, no arguments) is unchanged."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args,
                                **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args,
                                **extra)
        except typer.Abort:
            print("Aborted!", file=sys.stderr)
            sys.exit(1)
        except _CLI_ERROR as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # help: the library prints it
                return super().main(args, prog_name, complete_var, True,
                                    windows_expand_args, **extra)
            ctx = getattr(exc, "ctx", None)
            where = getattr(ctx, "command_path", None) or "gputopo"
            message = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
            print(f"{where}: error: {message} (see {where} --help)", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT if isinstance(exc, _USAGE_ERROR)
                     else getattr(exc, "exit_code", 1))
        # outside standalone mode the library returns an Exit's code, or a command's value
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=OneLineErrors,
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
