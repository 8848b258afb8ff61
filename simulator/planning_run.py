"""Run a planning workload under several policies and write the report (the ``gputopo
simulate`` path for ``andreas-*`` workloads and planning workload files).

Usage from Python::

    from simulator.planning_run import simulate_planning
    results, summary = simulate_planning("andreas-s1", ["fifo", "edf", "ps", "andreas"],
                                         nodes=10, seed=1, out="out/andreas-s1")
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simulator import SimulationError, output_dir
from simulator.planning_engine import POLICIES, PlanningResult, PlanningSimulation
from simulator.planning_report import write_all
from simulator.planning_workloads import PlanningWorkload, cluster_of, load_planning_workload
from topology.planning.andreas import PlannerSettings, PlanningError

#: The default comparison (§V-B).
DEFAULT_POLICIES = ("fifo", "edf", "ps", "andreas")


def simulate_planning(
    workload: str | PlanningWorkload,
    policies: str | Sequence[str] = DEFAULT_POLICIES,
    *,
    topology: str | None = None,
    nodes: int | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    settings: PlannerSettings | None = None,
    make_plots: bool = True,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[PlanningResult], dict[str, Any]]:
    """Simulate a planning workload once per policy.

    Args:
        workload: a spec (:func:`simulator.planning_workloads.load_planning_workload`) or a
            :class:`PlanningWorkload`.
        policies: names from :data:`simulator.planning_engine.POLICIES` (``"a,b"`` or a
            list).
        topology: every node's machine when the workload has no cluster of its own (then
            ``nodes`` of them); with a workload cluster, None.
        nodes: N for ``andreas-s1``/``-s2`` (default 10); the node count with ``topology``.
        seed: generator seed (jobs), also the planner's seed unless ``settings`` gives one.
        out: output directory, or None to write nothing.
        settings: planner settings (defaults: the paper's).
        make_plots: write PNG plots.
        progress: called with one line per finished policy.

    Returns:
        The runs and ``summary.json``'s mapping.

    Raises:
        SimulationError: any bad input, one line.
    """
    from simulator.run import parse_policies

    names = parse_policies(policies)
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        raise SimulationError(f"unknown planning policy {unknown[0]!r}; use "
                              f"{', '.join(POLICIES)}")
    if nodes is not None and nodes < 1:
        raise SimulationError("--nodes must be at least 1")
    wl = workload if isinstance(workload, PlanningWorkload) else load_planning_workload(
        workload, seed=seed, nodes=nodes)
    cluster = None
    if topology is not None:
        if wl.cluster is not None:
            raise SimulationError(f"{wl.name} defines its own cluster; drop --topology")
        cluster = cluster_of(topology, nodes if nodes is not None else 1)
    try:
        s = settings or PlannerSettings(seed=seed)
    except PlanningError as exc:
        raise SimulationError(str(exc)) from None
    sims = [PlanningSimulation(wl, p, cluster=cluster, settings=s) for p in names]
    results: list[PlanningResult] = []
    for sim in sims:
        res = sim.run()
        results.append(res)
        if progress:
            progress(f"{res.policy}: {len(res.outcomes)} jobs, {res.rescheduling_points} "
                     f"rescheduling points in {res.wall_s:.1f} s")
    summary: dict[str, Any] = {}
    if out is not None:
        path = output_dir(out, wl.to_json())
        used = sims[0].cluster
        kinds: dict[str, int] = {}
        for n in used:
            kinds[n.machine] = kinds.get(n.machine, 0) + 1
        meta = {
            "workload": f"{wl.name}: {wl.description}",
            "cluster": ", ".join(f"{c} x {m}" for m, c in kinds.items()),
            "jobs": len(wl.jobs),
            "seed": seed,
            "rho": s.rho,
            "max_iterations": s.max_iterations,
            "rescheduling_interval_s": s.interval_s,
            "pue": s.price.pue,
            "eur_per_kwh": s.price.eur_per_kwh,
            "energy_floor_eur": round(results[0].energy_floor_eur, 6) if results else None,
        }
        summary = write_all(results, path, title=f"{wl.name} on {len(used)} nodes", meta=meta,
                            make_plots=make_plots)
    else:
        from simulator.planning_report import summary as one

        summary = {r.policy: one(r) for r in results}
    return results, summary
