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
        topology: Annotated[str, typer.Option("--topology", "-t", help="every node's topology: catalog name, topology JSON/YAML file, or saved `nvidia-smi topo -m` output")],
        workload: Annotated[str, typer.Option("--workload", "-w", help="mapa | amaral-prototype | amaral-s1 | amaral-s2, with optional :key=value,... (e.g. mapa:jobs=60), or a .json/.yaml/.csv file")],
        policies: Annotated[str, typer.Option("--policies", "-p", help="comma-separated policy names, e.g. baseline,mapa-preserve,gputopo")],
        out: Annotated[Path, typer.Option("--out", "-o", help="output directory (CSV per run, summary.json, summary.md, plots)")],
        nodes: Annotated[int | None, typer.Option("--nodes", "-n", help="number of identical nodes (default: the workload's: mapa 1, amaral-s1 5, amaral-s2 1000)")] = None,
        seed: Annotated[int, typer.Option("--seed", "-s", help="workload generator seed")] = 0,
        queue: Annotated[str, typer.Option("--queue", help="fifo (a job that fits nowhere blocks the queue) | backfill")] = "fifo",
        node_choice: Annotated[str | None, typer.Option("--node-choice", help="force one node-choice rule for all policies: extender | least-allocated | first-fit | most-allocated | utility")] = None,
        effbw_model: Annotated[str, typer.Option("--effbw-model", help="model that judges every placement and drives run times: gputopo-v1 | mapa-eq2")] = "gputopo-v1",
        plots: Annotated[bool, typer.Option("--plots/--no-plots", help="write PNG plots")] = True,
    ) -> None:
        """Simulate a workload on a cluster under each policy (same policy code as the extender).

        Writes DIR/jobs-<policy>.csv, DIR/timeline-<policy>.csv, DIR/summary.json,
        DIR/details.json, DIR/summary.md, DIR/workload.json and PNG plots; prints the summary
        tables. Bad input exits 2 with one line.
        """
        from simulator import SimulationError
        from simulator.report import tables_markdown
        from simulator.run import simulate as run

        try:
            results, _ = run(
                topology, workload, policies, nodes=nodes, seed=seed, out=out, queue=queue,
                node_choice=node_choice, judge=effbw_model, make_plots=plots,
                progress=lambda line: typer.echo(line, err=True),
            )
        except SimulationError as exc:
            fail(str(exc))
        typer.echo(tables_markdown(results))
        typer.echo(f"wrote {out}/summary.json, summary.md, details.json, per-policy CSVs"
                   + (" and plots" if plots else ""))
