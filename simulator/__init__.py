"""gputopo's trace-driven placement simulator.

Replays a workload (MAPA §4 / §5, Amaral §5, or a file) through the registered placement
policies — called exactly as the scheduler extender calls them, through
:func:`topology.policies.evaluate.place` — on a cluster of identical nodes, and measures what
each policy does to the jobs. See ``docs/simulator.md``.

Entry points: :func:`simulator.run.simulate` (library), ``gputopo simulate`` (CLI).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["SimulationError", "output_dir"]


class SimulationError(ValueError):
    """Bad simulation input (workload, policy, topology) or an impossible run; one line."""


def output_dir(out: str | Path, workload: dict[str, Any]) -> Path:
    """Create the run's output directory and write ``workload.json`` (the workload as run, for
    replay) into it.

    Raises:
        SimulationError: the directory cannot be created.
    """
    path = Path(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SimulationError(f"cannot create output directory {out}: {exc.strerror}") from None
    (path / "workload.json").write_text(json.dumps(workload, indent=1) + "\n")
    return path
