"""``gputopo simulate``: replay a workload through several policies and compare them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gputopo_cli.common import fail


def register(app: typer.Typer) -> None:
    """Add ``simulate`` to the CLI."""

    @app.command()
    def simulate(
        workload: Annotated[str, typer.Option("--workload", "-w", help="mapa | amaral-prototype | amaral-s1 | amaral-s2 | tabrizian-best | tabrizian-worst | tabrizian-mix | andreas-armida | andreas-s1 | andreas-s2 | hierarchy (multi-node jobs and gangs), with optional :key=value,... (e.g. mapa:jobs=60), or a .json/.yaml/.csv file")],
        policies: Annotated[str, typer.Option("--policies", "-p", help="comma-separated policy names, e.g. baseline,mapa-preserve,gputopo; for tabrizian-* workloads exclusive,random-colocate,colocate,gputopo; for andreas-* workloads: fifo,edf,ps,andreas (also andreas-paper, Algorithm 1 as published, and fifo-/edf-/ps-fastest); for hierarchy: default,gang,kueue-tas,gputopo")],
        out: Annotated[Path, typer.Option("--out", "-o", help="output directory (CSV per run, summary.json, summary.md, plots)")],
        topology: Annotated[str | None, typer.Option("--topology", "-t", help="every node's topology: catalog name, topology JSON/YAML file, or saved `nvidia-smi topo -m` output (optional for workloads that define their own cluster: tabrizian-*, andreas-*, files with a cluster)")] = None,
        nodes: Annotated[int | None, typer.Option("--nodes", "-n", help="number of nodes (default: the workload's: mapa 1, amaral-s1 5, amaral-s2 1000, tabrizian-best/worst 2, tabrizian-mix 4, andreas-s1/s2 10)")] = None,
        seed: Annotated[int, typer.Option("--seed", "-s", help="workload generator seed (and the planner's)")] = 0,
        queue: Annotated[str, typer.Option("--queue", help="fifo (a job that fits nowhere blocks the queue) | backfill")] = "fifo",
        node_choice: Annotated[str | None, typer.Option("--node-choice", help="force one node-choice rule for all policies: extender | least-allocated | first-fit | most-allocated | utility")] = None,
        effbw_model: Annotated[str, typer.Option("--judge", "--effbw-model", help="the EffBW model that judges every placement and prices run times, independent of the one that decides: gputopo-v1 | eq2 (mapa-eq2) | bottleneck; with --seeds, a comma-separated list")] = "gputopo-v1",
        seeds: Annotated[str | None, typer.Option("--seeds", help="many-seed mode: seeds like 0-19 or 1,4,7; every policy is run on every seed under every --judge and reported per seed against --reference (DIR/many.json, DIR/many.md)")] = None,
        reference: Annotated[str, typer.Option("--reference", help="many-seed mode: the policy every ratio is taken against, with its own node choice (default: NVIDIA best-effort with kube-scheduler's LeastAllocated)")] = "nvidia-best-effort",
        plots: Annotated[bool, typer.Option("--plots/--no-plots", help="write PNG plots")] = True,
        iterations: Annotated[int, typer.Option("--planner-iterations", help="andreas: MaxIt_RG, iterations of the Randomized Greedy per rescheduling point")] = 1000,
        interval: Annotated[float, typer.Option("--reschedule-every", help="andreas: seconds between periodic rescheduling points (also H in the worst-case tardiness)")] = 300.0,
        rho: Annotated[float, typer.Option("--rho", help="andreas: penalty coefficient for postponed jobs (ρ)")] = 100.0,
        slots: Annotated[int, typer.Option("--slots", help="co-location slots per GPU for shared jobs (gputopo.io/gpu-shared)")] = 3,
        threshold: Annotated[float, typer.Option("--threshold", help="co-location threshold on the sum of C (Tabrizian §4.2.4, Eq. 4.3 units)")] = 4e7,
        postpone_max_s: Annotated[float, typer.Option("--postpone-max-s", help="how long the default policy may postpone a bandwidth-sensitive job for a better GPU set, s after its first postponement (0 = never)")] = 1800.0,
    ) -> None:
        """Simulate a workload on a cluster under each policy (same policy code as the extender
        and the planner).

        Placement workloads write DIR/jobs-<policy>.csv, DIR/timeline-<policy>.csv; planning
        workloads (andreas-*) DIR/segments-<policy>.csv and DIR/jobs-<policy>.csv; multi-node
        workloads (hierarchy, files with gangs) DIR/jobs-<policy>.csv; all write
        DIR/summary.json, DIR/details.json, DIR/summary.md, DIR/workload.json and PNG plots, and
        print the summary tables. Bad input exits 2 with one line.
        """
        from simulator import SimulationError
        from simulator.multinode_workloads import is_multinode_spec
        from simulator.planning_workloads import is_planning_spec

        if is_multinode_spec(workload):
            from simulator.multinode_report import simulate_multinode, table

            try:
                _, summaries = simulate_multinode(
                    workload, policies, seed=seed, out=out, make_plots=plots,
                    progress=lambda line: typer.echo(line, err=True), judge=effbw_model,
                    postpone_max_s=postpone_max_s)
            except SimulationError as exc:
                fail(str(exc))
            typer.echo(table(summaries))
            typer.echo(f"wrote {out}/summary.json, summary.md, details.json, jobs CSVs"
                       + (" and plots" if plots else ""))
            return

        if is_planning_spec(workload):
            from simulator.planning_report import tables_markdown as planning_tables
            from simulator.planning_run import simulate_planning
            from topology.planning.andreas import PlannerSettings, PlanningError

            try:
                settings = PlannerSettings(rho=rho, max_iterations=iterations,
                                           interval_s=interval, seed=seed)
                results, _ = simulate_planning(
                    workload, policies, topology=topology, nodes=nodes, seed=seed, out=out,
                    settings=settings, make_plots=plots,
                    progress=lambda line: typer.echo(line, err=True))
            except (SimulationError, PlanningError) as exc:
                fail(str(exc))
            typer.echo(planning_tables(results))
            typer.echo(f"wrote {out}/summary.json, summary.md, details.json, segments and jobs "
                       "CSVs" + (" and plots" if plots else ""))
            return

        from simulator.report import colocation_table, tables_markdown
        from simulator.run import simulate as run

        if seeds is not None:
            from simulator.many import many_seeds, parse_seeds, write
            from simulator.many import table as many_table

            try:
                doc = many_seeds(topology, workload, policies, parse_seeds(seeds),
                                 judges=[j for j in effbw_model.split(",") if j.strip()],
                                 reference=reference, nodes=nodes, queue=queue,
                                 progress=lambda line: typer.echo(line, err=True),
                                 postpone_max_s=postpone_max_s)
            except SimulationError as exc:
                fail(str(exc))
            write(doc, out)
            typer.echo(many_table(doc))
            typer.echo(f"wrote {out}/many.json, many.md")
            return

        try:
            results_p, _ = run(
                topology, workload, policies, nodes=nodes, seed=seed, out=out, queue=queue,
                node_choice=node_choice, judge=effbw_model, make_plots=plots,
                progress=lambda line: typer.echo(line, err=True), slots=slots,
                threshold=threshold, postpone_max_s=postpone_max_s,
            )
        except SimulationError as exc:
            fail(str(exc))
        colo = colocation_table(results_p)
        if colo:
            typer.echo(colo)
        typer.echo(tables_markdown(results_p))
        typer.echo(f"wrote {out}/summary.json, summary.md, details.json, per-policy CSVs"
                   + (" and plots" if plots else ""))
