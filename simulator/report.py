"""Metrics and outputs of a simulation: per-job CSVs, ``summary.json``, the summary tables and
the plots.

Metrics per policy (``docs/simulator.md`` explains how to read them):

* EffBW of bandwidth-sensitive multi-GPU jobs (judged, GB/s): min, p25, median, p75, max; and
  the same for EffBW / ideal (the best set an idle node of the type offers, MAPA Fig. 4);
* the share of those jobs that got the exhaustive-optimum EffBW among the GPUs free when they
  were placed;
* queueing time of every job (placement − submission), makespan (last completion − first
  submission), JCT (completion − start, Tabrizian §6's definition) with its p95;
* for workloads with shared (co-located) jobs, a table of makespan, median/p95 JCT and queueing
  per policy with the ratio to ``exclusive`` (Tabrizian's FIFO baseline);
* fragmentation over time (``1 − Σ PreservedBW / Σ best PreservedBW`` of the free GPUs);
* decision time per job (p50, p99, ms).

Quantiles are linear-interpolated (numpy's default).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simulator.engine import JobRecord, RunResult
from simulator.workloads import id_key

QKEYS = ("min", "p25", "median", "p75", "max")
#: JCT quantiles also report the 95th percentile (Tabrizian's tail).
JCT_QKEYS = ("min", "p25", "median", "p75", "p95", "max")
#: Timelines longer than this are drawn as time-weighted means over PLOT_BINS bins.
MAX_STEPS = 600
PLOT_BINS = 200


def quantiles(values: Sequence[float]) -> dict[str, float | None]:
    """``{"min","p25","median","p75","max"}`` of ``values`` (None for an empty list)."""
    if not values:
        return dict.fromkeys(QKEYS)
    arr = np.asarray(values, dtype=np.float64)
    qs = np.percentile(arr, [0, 25, 50, 75, 100])
    return {k: round(float(v), 4) for k, v in zip(QKEYS, qs, strict=True)}


def jct_quantiles(values: Sequence[float]) -> dict[str, float | None]:
    """:data:`JCT_QKEYS` quantiles of ``values`` (None for an empty list)."""
    if not values:
        return dict.fromkeys(JCT_QKEYS)
    arr = np.asarray(values, dtype=np.float64)
    qs = np.percentile(arr, [0, 25, 50, 75, 95, 100])
    return {k: round(float(v), 4) for k, v in zip(JCT_QKEYS, qs, strict=True)}


def _measured(r: RunResult) -> list[JobRecord]:
    return [x for x in r.records if x.measured]


def makespan(r: RunResult) -> float:
    """Last completion − first submission, seconds."""
    return max(x.end_s for x in r.records) - min(x.job.arrival_s for x in r.records)


def summary(r: RunResult) -> dict[str, Any]:
    """The ``summary.json`` entry of one policy (exactly the documented keys)."""
    m = _measured(r)
    ratios = [x.ratio_to_ideal for x in m if x.ratio_to_ideal is not None]
    dec = np.asarray([x.decision_ms for x in r.records], dtype=np.float64)
    return {
        "effbw_sensitive_gbps": quantiles([x.effbw_gbps for x in m]),
        "effbw_ratio_to_ideal": quantiles([v for v in ratios if v is not None]),
        "queueing_time_s": quantiles([x.queueing_s for x in r.records]),
        "jct_s": jct_quantiles([x.jct_s for x in r.records]),
        "makespan_s": round(makespan(r), 3),
        "decision_ms": {
            "p50": round(float(np.percentile(dec, 50)), 4),
            "p99": round(float(np.percentile(dec, 99)), 4),
        },
    }


def time_weighted_mean(r: RunResult, attr: str) -> float:
    """Time-weighted mean of a timeline field over the run."""
    tl = r.timeline
    if len(tl) < 2:
        return float(getattr(tl[0], attr)) if tl else 0.0
    total = 0.0
    for a, b in zip(tl, tl[1:], strict=False):
        total += float(getattr(a, attr)) * (b.time_s - a.time_s)
    span = tl[-1].time_s - tl[0].time_s
    return total / span if span > 0 else float(getattr(tl[-1], attr))


def details(r: RunResult) -> dict[str, Any]:
    """Everything else worth keeping about a run (``details.json``)."""
    m = _measured(r)
    known = [x.got_optimum for x in m if x.got_optimum is not None]
    runs = [x.run_s for x in m]
    return {
        "node_choice": r.node_choice,
        "jobs": len(r.records),
        "sensitive_multi_gpu_jobs": len(m),
        "optimal_share": round(sum(known) / len(known), 4) if known else None,
        "optimal_unknown": len(m) - len(known),
        "effbw_eq2_sensitive_gbps": quantiles([x.effbw_eq2_gbps for x in m]),
        "run_time_sensitive_s": quantiles(runs),
        "run_time_all_s": quantiles([x.run_s for x in r.records]),
        "bandwidth_slowdown_sensitive": quantiles([x.bandwidth_factor for x in m]),
        "queueing_mean_s": round(float(np.mean([x.queueing_s for x in r.records])), 3),
        "postponed_jobs": sum(1 for x in r.records if x.postponements > 0),
        "fragmentation_mean": round(time_weighted_mean(r, "fragmentation"), 4),
        "utilisation_mean": round(time_weighted_mean(r, "busy_gpus") / r.total_gpus, 4),
        "decision_ms_mean": round(float(np.mean([x.decision_ms for x in r.records])), 4),
        **_colocation_details(r),
        "policy_cache": {"hits": r.cache_hits, "misses": r.cache_misses},
        "wall_s": round(r.wall_s, 3),
    }


def _colocation_details(r: RunResult) -> dict[str, Any]:
    shared = [x for x in r.records if x.job.shared]
    if not shared:
        return {}
    other = [x for x in r.records if not x.job.shared]
    return {
        "shared_jobs": len(shared),
        "shared_colocated_share": round(sum(1 for x in shared if x.corunners) / len(shared), 4),
        "shared_slowdown": quantiles([x.slowdown for x in shared]),
        "shared_jct_s": jct_quantiles([x.jct_s for x in shared]),
        "shared_queueing_mean_s": round(float(np.mean([x.queueing_s for x in shared])), 3),
        "whole_gpu_queueing_mean_s": (round(float(np.mean([x.queueing_s for x in other])), 3)
                                      if other else None),
        "turnaround_mean_s": round(float(np.mean([x.end_s - x.job.arrival_s
                                                  for x in r.records])), 3),
    }


JOB_COLUMNS = (
    "job", "network", "gpus_requested", "pattern", "sensitive", "profile", "min_utility",
    "arrival_s", "start_s", "end_s", "queueing_s", "run_s", "node", "gpus", "mapping",
    "effbw_gbps", "effbw_eq2_gbps", "policy_effbw_gbps", "ideal_gbps", "ratio_to_ideal",
    "best_available_gbps", "got_optimum", "bandwidth_factor", "decision_ms", "attempts",
    "postponements", "shared", "jct_s", "slowdown", "corunners", "predicted_delta",
)  # fmt: skip


def _fmt(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return round(v, 4)
    if isinstance(v, tuple):
        return " ".join(str(x) for x in v)
    return v


def write_jobs_csv(r: RunResult, path: Path) -> None:
    """One row per job (columns :data:`JOB_COLUMNS`)."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(JOB_COLUMNS)
        for x in r.records:
            j = x.job
            w.writerow([_fmt(v) for v in (
                j.id, j.network, j.gpus, j.pattern, j.sensitive, j.profile, j.min_utility,
                j.arrival_s, x.start_s, x.end_s, x.queueing_s, x.run_s, x.node, x.gpus,
                x.mapping, x.effbw_gbps, x.effbw_eq2_gbps, x.policy_effbw_gbps, x.ideal_gbps,
                x.ratio_to_ideal, x.best_available_gbps, x.got_optimum, x.bandwidth_factor,
                x.decision_ms, x.attempts, x.postponements, j.shared, x.jct_s, x.slowdown,
                ";".join(str(c) for c in sorted(x.corunners, key=id_key)), x.predicted_delta,
            )])  # fmt: skip


def write_timeline_csv(r: RunResult, path: Path) -> None:
    """The cluster after every event instant."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("time_s", "busy_gpus", "queued", "running", "fragmentation"))
        for s in r.timeline:
            w.writerow((round(s.time_s, 4), s.busy_gpus, s.queued, s.running,
                        round(s.fragmentation, 5)))


def _cell(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def tables_markdown(results: Sequence[RunResult], reference: str | None = None) -> str:
    """The summary tables (Markdown): MAPA Table 3's normalised execution-time speed-ups, and
    placement quality, waiting and decision time."""
    if not results:
        return ""
    ref = next((r for r in results if r.policy == reference), None)
    if ref is None:
        ref = next((r for r in results if r.policy == "baseline"), results[0])
    ref_runs = quantiles([x.run_s for x in _measured(ref)])
    ref_span = makespan(ref)
    lines = [
        f"Execution-time speed-up of bandwidth-sensitive multi-GPU jobs at each quantile, and "
        f"throughput, normalised to `{ref.policy}` (MAPA Table 3; > 1 = faster):",
        "",
        "| Policy | MIN | 25th % | 50th % | 75th % | MAX | Tput |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        runs = quantiles([x.run_s for x in _measured(r)])
        cells = []
        for k in QKEYS:
            a, b = ref_runs[k], runs[k]
            cells.append("–" if not a or not b else f"{a / b:.3f}")
        tput = ref_span / makespan(r) if makespan(r) > 0 else 0.0
        lines.append(f"| {r.policy} | " + " | ".join(cells) + f" | {tput:.3f} |")
    lines += [
        "",
        "Placement quality (judged EffBW of bandwidth-sensitive multi-GPU jobs, GB/s), waiting "
        "and deciding:",
        "",
        "| Policy | EffBW min | p25 | median | p75 | max | EffBW/ideal median | optimum "
        "share | Eq. 2 median | queue mean s | queue p75 s | makespan s | frag. mean | "
        "decision p50 ms | p99 ms |",
        "|---|" + "---:|" * 15,
    ]
    for r in results:
        s, d = summary(r), details(r)
        e, q = s["effbw_sensitive_gbps"], s["queueing_time_s"]
        opt = d["optimal_share"]
        lines.append(
            f"| {r.policy} | {_cell(e['min'])} | {_cell(e['p25'])} | {_cell(e['median'])} | "
            f"{_cell(e['p75'])} | {_cell(e['max'])} | "
            f"{_cell(s['effbw_ratio_to_ideal']['median'], 3)} | "
            f"{'–' if opt is None else f'{opt:.2f}'} | "
            f"{_cell(d['effbw_eq2_sensitive_gbps']['median'])} | {d['queueing_mean_s']:.0f} | "
            f"{_cell(q['p75'], 0)} | {s['makespan_s']:.0f} | {d['fragmentation_mean']:.3f} | "
            f"{s['decision_ms']['p50']:.3f} | {s['decision_ms']['p99']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def colocation_table(results: Sequence[RunResult], reference: str = "exclusive") -> str:
    """Tabrizian §6's metrics per policy (Markdown): makespan, median and p95 JCT, mean and
    median queueing, each with its ratio to ``reference`` (``exclusive``: FIFO, every job
    alone on its GPU; else the first policy). Empty when no job is shared."""
    if not results or not any(x.job.shared for r in results for x in r.records):
        return ""
    ref = next((r for r in results if r.policy == reference), results[0])

    def stats(r: RunResult) -> tuple[float, float, float, float, float]:
        jct = [x.jct_s for x in r.records]
        q = [x.queueing_s for x in r.records]
        return (makespan(r), float(np.median(jct)), float(np.percentile(jct, 95)),
                float(np.mean(q)), float(np.median(q)))

    base = stats(ref)

    def cell(v: float, b: float) -> str:
        return f"{v:.1f} ({v / b:.2f})" if b > 0 else f"{v:.1f} (–)"

    lines = [
        f"Co-location (Tabrizian §6): each value with its ratio to `{ref.policy}` in brackets; "
        "JCT = completion − start, queueing = start − submission, seconds.",
        "",
        "| Policy | makespan | JCT median | JCT p95 | queueing mean | queueing median | "
        "co-located jobs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        v = stats(r)
        shared = [x for x in r.records if x.job.shared]
        co = sum(1 for x in shared if x.corunners)
        lines.append(
            f"| {r.policy} | {cell(v[0], base[0])} | {cell(v[1], base[1])} | "
            f"{cell(v[2], base[2])} | {cell(v[3], base[3])} | {cell(v[4], base[4])} | "
            f"{co}/{len(shared)} |"
        )
    return "\n".join(lines) + "\n"


def plots(results: Sequence[RunResult], out: Path, title: str) -> list[Path]:
    """Box plots of EffBW and EffBW/ideal by policy, the CDF of queueing time, and
    fragmentation over time (PNG, matplotlib's Agg backend). Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.policy for r in results]
    written: list[Path] = []

    fig, axes = plt.subplots(2, 1, figsize=(max(8.0, 0.9 * len(names) + 3), 9.5))
    data = [[x.effbw_gbps for x in _measured(r)] or [0.0] for r in results]
    axes[0].boxplot(data, whis=(0, 100))
    axes[0].set_title("EffBW of bandwidth-sensitive jobs")
    axes[0].set_ylabel("predicted EffBW, GB/s")
    ratio = [[v for x in _measured(r) if (v := x.ratio_to_ideal) is not None] or [0.0]
             for r in results]
    axes[1].boxplot(ratio, whis=(0, 100))
    axes[1].axhline(1.0, color="grey", lw=0.8, ls="--")
    axes[1].set_title("EffBW / ideal (best set on an idle node)")
    axes[1].set_ylabel("ratio")
    for ax in axes:
        ax.set_xticks(range(1, len(names) + 1), names, rotation=35, ha="right")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{title}: placement quality (boxes: quartiles, whiskers: min–max)")
    fig.tight_layout()
    path = out / "effbw_boxplot.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for r in results:
        q = np.sort([x.queueing_s for x in r.records])
        ax.step(q, np.arange(1, len(q) + 1) / len(q), where="post", label=r.policy)
    ax.set_xlabel("queueing time, s")
    ax.set_ylabel("share of jobs")
    ax.set_title(f"{title}: CDF of queueing time (left/up = better)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "queueing_cdf.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    smoothed = False
    for r in results:
        t = np.array([s.time_s for s in r.timeline])
        frag = np.array([s.fragmentation for s in r.timeline])
        busy = np.array([s.busy_gpus / r.total_gpus for s in r.timeline])
        if len(t) > MAX_STEPS and t[-1] > t[0]:  # time-weighted means over bins
            grid = np.linspace(t[0], t[-1], 20 * PLOT_BINS)
            idx = np.searchsorted(t, grid, side="right") - 1
            centres = grid.reshape(PLOT_BINS, -1).mean(axis=1)
            ax1.plot(centres, frag[idx].reshape(PLOT_BINS, -1).mean(axis=1), label=r.policy,
                     lw=1.2)
            ax2.plot(centres, busy[idx].reshape(PLOT_BINS, -1).mean(axis=1), label=r.policy,
                     lw=1.2)
            smoothed = True
        else:
            ax1.step(t, frag, where="post", label=r.policy, lw=1)
            ax2.step(t, busy, where="post", label=r.policy, lw=1)
    ax1.set_ylabel("fragmentation")
    ax1.set_title(f"{title}: fragmentation of the free GPUs over time "
                  "(0 = as well connected as possible)"
                  + (f"\n(time-weighted means over {PLOT_BINS} bins)" if smoothed else ""))
    ax2.set_ylabel("busy GPU share")
    ax2.set_xlabel("time, s")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    path = out / "fragmentation.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    if any(x.job.shared for r in results for x in r.records):
        written += _colocation_plots(results, out, title)
    return written


def _colocation_plots(results: Sequence[RunResult], out: Path, title: str) -> list[Path]:
    """Tabrizian Figs. 6.1/6.5 (CDF of JCT) and 6.3/6.7 (makespan per policy)."""
    import matplotlib.pyplot as plt

    written: list[Path] = []
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for r in results:
        j = np.sort([x.jct_s for x in r.records])
        ax.step(j, np.arange(1, len(j) + 1) / len(j), where="post", label=r.policy)
    ax.set_xlabel("job completion time (start to end), s")
    ax.set_ylabel("share of jobs")
    ax.set_title(f"{title}: CDF of JCT (Tabrizian Figs. 6.1/6.5)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "jct_cdf.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(results) + 2), 4.5))
    spans = [makespan(r) for r in results]
    bars = ax.bar(range(len(results)), spans, color="tab:blue")
    for b, v in zip(bars, spans, strict=True):
        ax.annotate(f"{v:.0f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom",
                    fontsize=8)
    ax.set_xticks(range(len(results)), [r.policy for r in results], rotation=20, ha="right")
    ax.set_ylabel("makespan, s")
    ax.set_title(f"{title}: makespan (Tabrizian Figs. 6.3/6.7)")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / "makespan.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written


def write_all(results: Sequence[RunResult], out: Path, *, title: str, meta: dict[str, Any],
              make_plots: bool = True) -> dict[str, Any]:
    """Write every output into ``out`` and return ``summary.json``'s content."""
    out.mkdir(parents=True, exist_ok=True)
    summ = {r.policy: summary(r) for r in results}
    for r in results:
        write_jobs_csv(r, out / f"jobs-{r.policy}.csv")
        write_timeline_csv(r, out / f"timeline-{r.policy}.csv")
    (out / "summary.json").write_text(json.dumps(summ, indent=2) + "\n")
    det = {"meta": meta, "policies": {r.policy: details(r) for r in results}}
    (out / "details.json").write_text(json.dumps(det, indent=2) + "\n")
    md = f"# {title}\n\n" + "\n".join(f"- {k}: {v}" for k, v in meta.items()) + "\n\n"
    colo = colocation_table(results)
    if colo:
        md += colo + "\n"
    md += tables_markdown(results)
    (out / "summary.md").write_text(md)
    if make_plots:
        plots(results, out, title)
    return summ
