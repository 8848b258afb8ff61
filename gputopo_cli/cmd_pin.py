"""``gputopo pin -- CMD [ARGS...]``: run CMD on the CPUs near the pod's GPUs.

The device plugin gives every container that receives gputopo GPUs the CPUs local to them
(Gaia §III-A: a task runs best on the CPUs of its GPUs' NUMA node) as ``GPUTOPO_CPU_AFFINITY``,
a Linux cpulist such as ``0-19,40-59`` (``gpunode/container.py``; the same list as the
pod's ``gputopo.io/cpu-affinity`` annotation). The device-plugin API cannot pin a process, and
the kubelet's CPU manager pins only Guaranteed pods with whole CPUs (docs/cpu-pinning.md). This
wrapper, used as the container's entrypoint, does it for every other pod:

1. read the affinity (``--cpus`` or ``$GPUTOPO_CPU_AFFINITY``);
2. intersect it with the CPUs this process may run on (``os.sched_getaffinity(0)``: the
   container's cpuset, which the CPU manager or a cgroup may have narrowed);
3. ``os.sched_setaffinity(0, ...)`` to that set, then ``os.execvp`` the command — it replaces
   this process (same PID, signals, exit status) and inherits the affinity.

No affinity given (unset or empty), or none of its CPUs allowed here: the command runs
unchanged, and one line on stderr says why. Bad input — no command, a malformed CPU list —
exits 2 with one line. A command that cannot be found exits 127, one that cannot be executed
126 (as a shell does).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, NoReturn

import typer

from gputopo_cli.common import fail
from topology.model import TopologyError, format_cpu_list, parse_cpu_list

#: The environment variable the device plugin's Allocate sets (gpunode/container.py).
AFFINITY_ENV = "GPUTOPO_CPU_AFFINITY"
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126
#: CPU numbers at or above this are refused before a range is expanded (Linux's NR_CPUS is
#: at most 8192; ``0-4000000000`` must be an error, not an out-of-memory).
MAX_CPU = 65536


@dataclass(frozen=True)
class PinPlan:
    """What ``gputopo pin`` will do.

    Attributes:
        cpus: the CPUs to pin to (empty: run unpinned).
        note: the line to print on stderr (why unpinned, or what it pins to).
    """

    cpus: frozenset[int]
    note: str


def plan(affinity: str | None, allowed: Iterable[int], source: str = AFFINITY_ENV) -> PinPlan:
    """Decide the CPU set from the affinity text and the CPUs allowed (pure).

    Args:
        affinity: a Linux cpulist (``"0-19,40-59"``), or None / blank when none was given.
        allowed: the CPUs this process may run on (``os.sched_getaffinity(0)``).
        source: where ``affinity`` came from (named in the note).

    Returns:
        The CPUs (the intersection; empty when there is nothing to pin to) and a note.

    Raises:
        TopologyError: ``affinity`` is not a cpulist (``"0-3,x"``, ``"5-2"``) or names a CPU
            number of :data:`MAX_CPU` or more.
    """
    allowed_set = frozenset(allowed)
    if affinity is None or not affinity.strip():
        return PinPlan(frozenset(), f"no CPU affinity given ({source} unset or empty); "
                                    "running the command unpinned")
    big = [n for n in re.findall(r"\d+", affinity) if int(n) >= MAX_CPU]
    if big:
        raise TopologyError(f"CPU {big[0]} is out of range (0-{MAX_CPU - 1}) in {affinity!r}")
    wanted = parse_cpu_list(affinity)
    if not wanted:
        return PinPlan(frozenset(), f"{source} names no CPU ({affinity.strip()!r}); running "
                                    "the command unpinned")
    cpus = wanted & allowed_set
    if not cpus:
        return PinPlan(frozenset(), f"none of the CPUs {format_cpu_list(wanted)} ({source}) "
                                    f"is allowed here (allowed: {format_cpu_list(allowed_set)}); "
                                    "running the command unpinned")
    return PinPlan(cpus, f"pinned to CPUs {format_cpu_list(cpus)} ({source} "
                         f"{format_cpu_list(wanted)} ∩ allowed {format_cpu_list(allowed_set)})")


def run(
    command: Sequence[str],
    affinity: str | None,
    source: str,
    *,
    quiet: bool = False,
) -> NoReturn:
    """Pin this process as :func:`plan` says, then exec ``command`` (does not return).

    Raises:
        typer.Exit: 2 on bad input, 127 / 126 when the command cannot be run.
    """
    if not command:
        fail("no command to run; usage: gputopo pin [--cpus LIST] -- CMD [ARGS...]")
    try:
        p = plan(affinity, os.sched_getaffinity(0), source)
    except TopologyError as exc:
        fail(f"{source}: {exc}")
    if p.cpus:
        os.sched_setaffinity(0, p.cpus)
    if not quiet or not p.cpus:
        print(f"gputopo pin: {p.note}", file=sys.stderr, flush=True)
    try:
        os.execvp(command[0], list(command))
    except FileNotFoundError:
        fail(f"command not found: {command[0]}", EXIT_NOT_FOUND)
    except PermissionError:
        fail(f"command not executable: {command[0]}", EXIT_NOT_EXECUTABLE)
    except OSError as exc:
        fail(f"cannot run {command[0]}: {exc.strerror or exc}", EXIT_NOT_EXECUTABLE)


def register(app: typer.Typer) -> None:
    """Add ``pin`` to the CLI."""

    @app.command(
        "pin",
        context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
    )
    def pin(
        command: Annotated[list[str] | None, typer.Argument(
            help="the command and its arguments (after --)", show_default=False)] = None,
        cpus: Annotated[str | None, typer.Option(
            "--cpus", help=f"CPU list to pin to (default: ${AFFINITY_ENV}, set by the device "
            "plugin)", show_default=False)] = None,
        quiet: Annotated[bool, typer.Option(
            "--quiet", "-q", help="say nothing when pinning succeeds")] = False,
    ) -> None:
        """Run CMD on the CPUs local to the pod's GPUs (those of $GPUTOPO_CPU_AFFINITY that
        this container may use): sched_setaffinity, then exec. With no affinity given it runs
        CMD unchanged and says so on stderr.

        Example entrypoint: gputopo pin -- python train.py --epochs 10
        """
        if cpus is not None:
            run(command or [], cpus, "--cpus", quiet=quiet)
        run(command or [], os.environ.get(AFFINITY_ENV), AFFINITY_ENV, quiet=quiet)
