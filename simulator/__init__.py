"""gputopo's trace-driven placement simulator.

Replays a workload (MAPA §4 / §5, Amaral §5, or a file) through the registered placement
policies — called exactly as the scheduler extender calls them, through
:func:`topology.policies.evaluate.place` — on a cluster of identical nodes, and measures what
each policy does to the jobs. See ``docs/simulator.md``.

Entry points: :func:`simulator.run.simulate` (library), ``gputopo simulate`` (CLI).
"""

from __future__ import annotations

__all__ = ["SimulationError"]


class SimulationError(ValueError):
    """Bad simulation input (workload, policy, topology) or an impossible run; one line."""
