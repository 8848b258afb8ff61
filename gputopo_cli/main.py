"""The ``gputopo`` command: one typer app, subcommands registered by modules.

Each module in :data:`COMMAND_MODULES` exposes ``register(app: typer.Typer) -> None``.
"""

from __future__ import annotations

import importlib

import typer

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
    "gputopo_cli.cmd_extender",
    "gputopo_cli.cmd_place",
    "gputopo_cli.cmd_topology",
    "gputopo_cli.cmd_simulate",
    "gputopo_cli.cmd_cluster",
    "gputopo_cli.cmd_pin",
    "gputopo_cli.cmd_planner",
)

for _mod in COMMAND_MODULES:
    importlib.import_module(_mod).register(app)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
