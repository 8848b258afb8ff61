"""Outputs of a planning simulation: ``summary.json``, ``details.json``, ``summary.md`` (the
cost table with ANDREAS' reduction against each other policy), ``segments-<policy>.csv``,
``jobs-<policy>.csv`` and plots (``costs.png``; ``gantt-<policy>.png`` on small clusters).

``summary.json`` has, per policy, exactly: ``energy_cost_eur``, ``tardiness_cost_eur``,
``total_cost_eur``, ``energy_floor_eur`` (the workload's energy floor, the same for every
policy: no policy can cost less,
:meth:`simulator.planning_workloads.PlanningWorkload.energy_floor_eur`), ``makespan_s``
and ``plan_ms`` {``p50``, ``p99``} (the wall-clock time of one rescheduling point).
Percentiles are numpy's linear interpolation.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simulator.planning_engine import PlanningResult

SEGMENT_COLUMNS = ("job", "node", "gpu_model", "gpus", "start_s", "end_s", "epochs_done")
JOB_COLUMNS = ("job", "application", "profile", "epochs", "tardiness_weight", "arrival_s",
               "due_s", "end_s", "tardiness_s", "tardiness_eur", "segments", "preemptions")
#: Gantt charts are drawn for clusters up to this many nodes.
GANTT_MAX_NODES = 12


def _pct(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values, dtype=np.float64), q)), 4) \
        if values else 0.0


def summary(r: PlanningResult) -> dict[str, Any]:
    """The ``summary.json`` entry of one policy (exactly the documented keys)."""
    return {
        "energy_cost_eur": round(r.energy_cost_eur, 6),
        "tardiness_cost_eur": round(r.tardiness_cost_eur, 6),
        "total_cost_eur": round(r.total_cost_eur, 6),
        "energy_floor_eur": round(r.energy_floor_eur, 6),
        "makespan_s": round(r.makespan_s, 3),
        "plan_ms": {"p50": _pct(r.plan_ms, 50), "p99": _pct(r.plan_ms, 99)},
    }


def details(r: PlanningResult) -> dict[str, Any]:
    """More per policy (``details.json``)."""
    late = [o for o in r.outcomes if o.tardiness_s > 0]
    return {
        "jobs": len(r.outcomes),
        "late_jobs": len(late),
        "tardiness_h_total": round(sum(o.tardiness_s for o in r.outcomes) / 3600.0, 4),
        "preemptions": sum(o.preemptions for o in r.outcomes),
        "preempted_jobs": sum(1 for o in r.outcomes if o.preemptions),
        "segments": sum(len(o.segments) for o in r.outcomes),
        "rescheduling_points": r.rescheduling_points,
        "plan_ms_mean": round(float(np.mean(r.plan_ms)), 4) if r.plan_ms else 0.0,
        "plan_ms_max": round(max(r.plan_ms), 4) if r.plan_ms else 0.0,
        "node_energy_eur": {k: round(v, 6) for k, v in r.node_energy_eur.items()},
        "gpu_hours": round(sum((s.end_s - s.start_s) * s.gpus for s in r.segments) / 3600, 4),
        "wall_s": round(r.wall_s, 3),
    }


def reduction(reference: float, value: float) -> float | None:
    """(reference − value) / reference, or None when the reference is 0."""
    return None if reference <= 0 else (reference - value) / reference


def tables_markdown(results: Sequence[PlanningResult], ours: str = "andreas") -> str:
    """The cost table (Markdown): energy, tardiness and total cost per policy, ``ours``'s
    reduction of the total against each, lateness, preemptions and plan time."""
    mine = next((r for r in results if r.policy == ours), None)
    lines = [
        "| Policy | energy € | tardiness € | total € | "
        + (f"{ours} saves | " if mine else "")
        + "late jobs | preemptions | makespan s | plan p50 ms | plan p99 ms |",
        "|---|" + "---:|" * (9 if mine else 8),
    ]
    for r in results:
        s, d = summary(r), details(r)
        cells = [r.policy, f"{s['energy_cost_eur']:.3f}", f"{s['tardiness_cost_eur']:.3f}",
                 f"{s['total_cost_eur']:.3f}"]
        if mine:
            red = reduction(r.total_cost_eur, mine.total_cost_eur)
            cells.append("–" if r is mine or red is None else f"{100 * red:.1f} %")
        cells += [f"{d['late_jobs']}/{d['jobs']}", str(d["preemptions"]),
                  f"{s['makespan_s']:.0f}", f"{s['plan_ms']['p50']:.2f}",
                  f"{s['plan_ms']['p99']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_segments_csv(r: PlanningResult, path: Path) -> None:
    """One row per execution segment (columns :data:`SEGMENT_COLUMNS`)."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(SEGMENT_COLUMNS)
        for s in r.segments:
            w.writerow((s.job, s.node, s.gpu_model, s.gpus, round(s.start_s, 3),
                        round(s.end_s, 3), s.epochs_done))


def write_jobs_csv(r: PlanningResult, path: Path) -> None:
    """One row per job (columns :data:`JOB_COLUMNS`)."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(JOB_COLUMNS)
        for o in r.outcomes:
            j = o.job
            w.writerow((j.id, j.application, j.profile or "", j.epochs, j.tardiness_weight,
                        j.arrival_s, j.due_s, round(o.end_s, 3), round(o.tardiness_s, 3),
                        round(o.tardiness_eur, 6), len(o.segments), o.preemptions))


def plots(results: Sequence[PlanningResult], out: Path, title: str) -> list[Path]:
    """``costs.png`` (energy and tardiness cost per policy, stacked) and, for clusters of at
    most :data:`GANTT_MAX_NODES` nodes, ``gantt-<policy>.png`` (each node's GPUs over time,
    one bar per segment, as ANDREAS Fig. 4). Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(results) + 2), 4.5))
    names = [r.policy for r in results]
    energy = [r.energy_cost_eur for r in results]
    tard = [r.tardiness_cost_eur for r in results]
    ax.bar(names, energy, label="energy")
    ax.bar(names, tard, bottom=energy, label="tardiness")
    ax.set_ylabel("EUR")
    ax.set_title(f"{title}: total cost = energy + tardiness")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / "costs.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    for r in results:
        if len(r.cluster) > GANTT_MAX_NODES:
            continue
        rows: list[tuple[str, int]] = [(n.name, g) for n in r.cluster for g in range(n.gpus)]
        row_of = {key: i for i, key in enumerate(rows)}
        jobs = sorted({s.job for s in r.segments})
        colours = plt.get_cmap("tab20")
        fig, ax = plt.subplots(figsize=(11, 0.5 * len(rows) + 1.8))
        # assign concrete GPU rows per node: a segment takes the lowest rows free at its start
        busy: dict[str, list[float]] = {n.name: [0.0] * n.gpus for n in r.cluster}
        for s in r.segments:
            free = [g for g, until in enumerate(busy[s.node]) if until <= s.start_s + 1e-9]
            for g in free[: s.gpus]:
                busy[s.node][g] = s.end_s
                y = row_of[(s.node, g)]
                ax.barh(y, s.end_s - s.start_s, left=s.start_s, height=0.8,
                        color=colours(jobs.index(s.job) % 20), edgecolor="black", lw=0.4)
                ax.text(s.start_s + (s.end_s - s.start_s) / 2, y, s.job, ha="center",
                        va="center", fontsize=7)
        ax.set_yticks(range(len(rows)), [f"{n} GPU {g}" for n, g in rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("time, s")
        ax.set_title(f"{title}: {r.policy} (one bar per execution segment)")
        ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
        path = out / f"gantt-{r.policy}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def write_all(results: Sequence[PlanningResult], out: Path, *, title: str,
              meta: dict[str, Any], make_plots: bool = True) -> dict[str, Any]:
    """Write every output into ``out`` and return ``summary.json``'s content."""
    out.mkdir(parents=True, exist_ok=True)
    summ = {r.policy: summary(r) for r in results}
    for r in results:
        write_segments_csv(r, out / f"segments-{r.policy}.csv")
        write_jobs_csv(r, out / f"jobs-{r.policy}.csv")
    (out / "summary.json").write_text(json.dumps(summ, indent=2) + "\n")
    det = {"meta": meta, "policies": {r.policy: details(r) for r in results}}
    (out / "details.json").write_text(json.dumps(det, indent=2) + "\n")
    md = f"# {title}\n\n" + "\n".join(f"- {k}: {v}" for k, v in meta.items()) + "\n\n"
    md += tables_markdown(results)
    (out / "summary.md").write_text(md)
    if make_plots:
        plots(results, out, title)
    return summ
