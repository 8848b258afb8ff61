"""Shared CLI plumbing: one-line errors with exit code 2 for bad input."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer

EXIT_BAD_INPUT = 2
EXIT_NO_FIT = 1


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``gputopo: error: <message>`` (one line) to stderr and exit with ``code``."""
    first = " ".join(str(message).split())
    print(f"gputopo: error: {first}", file=sys.stderr)
    raise typer.Exit(code)


def configure_logging(level: str) -> None:
    """Log to stderr at ``level`` (``DEBUG`` | ``INFO`` | ``WARNING`` | ``ERROR``, any case)
    with the format every long-running gputopo command uses."""
    import logging

    logging.basicConfig(level=level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
