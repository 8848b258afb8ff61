"""Run a workload under several policies and write the report (the ``gputopo simulate`` core).

Usage from Python::

    from simulator.run import simulate
    results, summary = simulate("dgx1-v100", "mapa", ["baseline", "mapa-preserve", "gputopo"],
                                seed=1, out="out/mapa-dgx1")
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simulator import SimulationError, output_dir
from simulator.engine import RunResult, Simulation
from simulator.report import write_all
from simulator.runtime import JUDGES
from simulator.workloads import MAX_NODES, Workload, check_most, load_workload
from topology.colocation.model import DEFAULT_SLOTS, DEFAULT_THRESHOLD
from topology.model import Topology, TopologyError
from topology.policies.default import POSTPONE_MAX_S
from topology.policies.memo import Memo
from topology.sources import load_topology, load_topology_text


def parse_policies(text: str | Sequence[str]) -> list[str]:
    """``"a,b,c"`` → ``["a", "b", "c"]`` (duplicates dropped, order kept).

    Raises:
        SimulationError: empty list.
    """
    items = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for p in (x.strip() for x in items):
        if p and p not in out:
            out.append(p)
    if not out:
        raise SimulationError("no policy given; e.g. --policies baseline,gputopo")
    return out


def resolve_topology(topology: str | Topology | None, workload: Workload) -> Topology:
    """``topology``, or the workload's own cluster machine when None (a workload that
    defines its cluster, e.g. Tabrizian's two single-V100 machines).

    Raises:
        SimulationError: no topology given and the workload names none, or a bad source.
    """
    if isinstance(topology, Topology):
        return topology
    src = topology if topology is not None else (
        workload.default_topology if workload.own_cluster else None)
    if src is None:
        raise SimulationError(f"--topology is required for workload {workload.name} (it "
                              "defines no cluster)")
    try:
        if src.lstrip().startswith("{"):
            return load_topology_text(src, origin=f"workload {workload.name}")
        return load_topology(src)
    except TopologyError as exc:
        raise SimulationError(str(exc)) from None


def simulate(
    topology: str | Topology | None,
    workload: str | Workload,
    policies: str | Sequence[str],
    *,
    nodes: int | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    queue: str = "fifo",
    node_choice: str | None = None,
    judge: str = JUDGES[0],
    make_plots: bool = True,
    group_nodes: bool = True,
    progress: Callable[[str], None] | None = None,
    slots: int = DEFAULT_SLOTS,
    threshold: float = DEFAULT_THRESHOLD,
    postpone_max_s: float = POSTPONE_MAX_S,
) -> tuple[list[RunResult], dict[str, Any]]:
    """Simulate ``workload`` on ``nodes`` × ``topology`` once per policy.

    Args:
        topology: a topology source (catalog name or file) or a :class:`Topology`; None =
            the workload's own cluster (``Workload.default_topology``).
        workload: a workload spec (:func:`simulator.workloads.load_workload`) or a Workload.
        policies: registered policy names (``"a,b"`` or a list).
        nodes: node count; None = the workload's default.
        seed: workload generator seed.
        out: output directory (CSV per run, ``summary.json``, ``details.json``,
            ``summary.md``, ``workload.json``, PNG plots); None writes nothing.
        queue: ``fifo`` or ``backfill``.
        node_choice: force one node-choice rule for every policy (None = each policy's own).
        judge: EffBW model for the metrics and the run-time model.
        make_plots: write the PNG plots.
        group_nodes: ask policies once per (class, state) group (False: once per node).
        progress: called with one line per finished policy.
        slots: co-location slots per GPU (shared jobs).
        threshold: co-location ΣC threshold (Tabrizian §4.2.4, Eq. 4.3 units).
        postpone_max_s: how long the default policy may postpone a bandwidth-sensitive job
            for a better set, s after its first postponement (0 = never;
            :class:`simulator.engine.Simulation`).

    Returns:
        The runs and the ``summary.json`` mapping.

    Raises:
        SimulationError: any bad input (unknown topology, workload, policy, …), one line.
    """
    if isinstance(topology, str):  # a bad --topology is reported before the workload is built
        try:
            topo: Topology | None = load_topology(topology)
        except TopologyError as exc:
            raise SimulationError(str(exc)) from None
    else:
        topo = topology
    names = parse_policies(policies)
    if nodes is not None and nodes < 1:
        raise SimulationError("--nodes must be at least 1")
    wl = workload if isinstance(workload, Workload) else load_workload(
        workload, seed=seed, nodes=nodes)
    topo = resolve_topology(topo, wl)
    n = nodes if nodes is not None else wl.default_nodes
    check_most(n, "nodes", MAX_NODES, wl.name)
    memo = Memo()  # per-class tables shared by this simulation's runs (decisions are not)
    sims = [Simulation(topo, n, wl, p, queue=queue, node_choice=node_choice, judge=judge,
                       group_nodes=group_nodes, memo=memo, slots=slots,
                       threshold=threshold, postpone_max_s=postpone_max_s)
            for p in names]  # validates every input first
    results: list[RunResult] = []
    for sim in sims:
        res = sim.run()
        results.append(res)
        if progress:
            progress(f"{res.policy}: {len(res.records)} jobs in {res.wall_s:.1f} s")
    summary: dict[str, Any] = {}
    if out is not None:
        path = output_dir(out, wl.to_json())
        meta = {
            "topology": f"{topo.name} (class {topo.topology_class})",
            "nodes": n,
            "workload": f"{wl.name}: {wl.description}",
            "jobs": len(wl.jobs),
            "seed": seed,
            "queue": queue,
            "effbw_model": judge,
            "interference": wl.interference,
            "postpone_max_s": postpone_max_s,
        }
        if wl.has_shared:
            meta.update({"profiles": wl.profiles, "slots_per_gpu": slots,
                         "colocation_threshold": threshold})
        title = f"{wl.name} on {n} x {topo.name}"
        summary = write_all(results, path, title=title, meta=meta, make_plots=make_plots)
    else:
        from simulator.report import summary as one

        summary = {r.policy: one(r) for r in results}
    return results, summary
