"""Run a multi-node workload under several policies and report (``gputopo simulate`` with a
multi-node workload; :mod:`simulator.multinode`).

Per policy (``summary.json``, exactly these keys):

* ``makespan_s`` — last completion − first submission;
* ``jct_s`` {min, p25, median, p75, p95, max} — completion − start, every job;
* ``completion_s`` {mean, median, p95} — completion − submission (waiting included);
* ``queueing_s`` {mean, median, p95} — start − submission;
* ``gangs`` — ``count``; ``rack_fitting`` (gangs an idle rack would hold) and
  ``in_one_rack_share`` of them; ``nvlink_fitting`` (gangs an idle NVLink domain would hold:
  one node without ``nvidia.com/gpu.clique`` labels) and ``in_one_nvlink_domain_share``;
* ``bottleneck_gbps`` {min, p25, median, p75, max} — predicted bottleneck bandwidth of the
  bandwidth-sensitive jobs with more than one GPU (gangs and single-node jobs alike), and
  ``gang_bottleneck_gbps`` the same for gangs; ``bottleneck_to_ideal`` their ratio to the
  bottleneck gputopo reaches on the idle cluster;
* ``partial`` — ``gangs`` that ever held GPUs while not all their pods were placed,
  ``gpu_hours`` so held, ``timeouts`` (rendezvous that gave up: the gang's pods failed and came
  back) and ``deadlocks`` (episodes when nothing ran and partial gangs held what the waiting
  pods needed) — ``default`` only;
* ``decision_ms`` {p50, p99} — wall time of the placement decisions of one job.

``summary.md`` holds the table, with makespan and mean completion time as ratios to
``default`` and ``kueue-tas``; ``jobs-<policy>.csv`` one row per job; ``workload.json`` the
workload as run; ``bottleneck.png`` (box plot of the gangs' bottleneck bandwidth) and
``makespan.png``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simulator import SimulationError, output_dir
from simulator.multinode import POLICIES, Cluster, MultiRecord, MultiResult, MultiSimulation
from simulator.multinode_workloads import MultiWorkload, load_multinode_workload
from topology.contract import LABEL_CLIQUE, LABEL_RACK
from topology.policies.common import MODEL_GPUTOPO
from topology.policies.default import POSTPONE_MAX_S
from topology.policies.memo import Memo

QKEYS = ("min", "p25", "median", "p75", "max")
JCT_KEYS = ("min", "p25", "median", "p75", "p95", "max")


def _q(values: Sequence[float], keys: Sequence[str] = QKEYS) -> dict[str, float | None]:
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return dict.fromkeys(keys)
    pct = {"min": 0, "p25": 25, "median": 50, "p75": 75, "p95": 95, "max": 100}
    arr = np.asarray(vals, dtype=np.float64)
    return {k: round(float(np.percentile(arr, pct[k])), 4) for k in keys}


def _mean_med_p95(values: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    return {"mean": round(float(arr.mean()), 3), "median": round(float(np.median(arr)), 3),
            "p95": round(float(np.percentile(arr, 95)), 3)}


def makespan(r: MultiResult) -> float:
    """Last completion − first submission, s."""
    return max(x.end_s for x in r.records) - min(x.job.arrival_s for x in r.records)


def _measured(r: MultiResult) -> list[MultiRecord]:
    return [x for x in r.records if x.job.sensitive and x.job.pods * x.job.gpus > 1]


def summary(r: MultiResult, cluster: Cluster) -> dict[str, Any]:
    """The ``summary.json`` entry of one policy (module docstring)."""
    rack, clique = cluster.level(LABEL_RACK), cluster.level(LABEL_CLIQUE)
    gangs = [x for x in r.records if x.job.gang]
    fits_rack = [x for x in gangs if x.job.pods <= cluster.domain_capacity(rack, x.job.gpus)]
    fits_nv = [x for x in gangs if x.job.pods <= cluster.domain_capacity(clique, x.job.gpus)]
    m = _measured(r)
    ratio = [x.bottleneck_gbps / x.ideal_gbps for x in m
             if math.isfinite(x.bottleneck_gbps) and math.isfinite(x.ideal_gbps)
             and x.ideal_gbps > 0]
    dec = np.asarray([x.decision_ms for x in r.records], dtype=np.float64)
    return {
        "makespan_s": round(makespan(r), 3),
        "jct_s": _q([x.jct_s for x in r.records], JCT_KEYS),
        "completion_s": _mean_med_p95([x.completion_s for x in r.records]),
        "queueing_s": _mean_med_p95([x.queueing_s for x in r.records]),
        "gangs": {
            "count": len(gangs),
            "rack_fitting": len(fits_rack),
            "in_one_rack_share": round(sum(x.in_one_rack for x in fits_rack)
                                       / len(fits_rack), 4) if fits_rack else None,
            "nvlink_fitting": len(fits_nv),
            "in_one_nvlink_domain_share": round(sum(x.in_one_nvlink_domain for x in fits_nv)
                                                / len(fits_nv), 4) if fits_nv else None,
        },
        "bottleneck_gbps": _q([x.bottleneck_gbps for x in m]),
        "gang_bottleneck_gbps": _q([x.bottleneck_gbps for x in m if x.job.gang]),
        "bottleneck_to_ideal": _q(ratio),
        "partial": {"gangs": r.partial_gangs,
                    "gpu_hours": round(sum(x.partial_gpu_s for x in r.records) / 3600, 3),
                    "timeouts": r.timeouts, "deadlocks": r.deadlocks},
        "decision_ms": {"p50": round(float(np.percentile(dec, 50)), 3),
                        "p99": round(float(np.percentile(dec, 99)), 3)},
    }


def _cell(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def table(summaries: dict[str, dict[str, Any]]) -> str:
    """The Markdown table of ``summary.md``."""
    def ratio(policy: str, ref: str, key: str, sub: str | None = None) -> str:
        if ref not in summaries:
            return "–"
        a, b = summaries[policy][key], summaries[ref][key]
        if sub:
            a, b = a[sub], b[sub]
        return f"{a / b:.2f}" if b else "–"

    lines = [
        "| policy | makespan, s | vs default | vs kueue-tas | mean completion, s | vs default "
        "| JCT median, s | rack-fitting gangs in one rack | in one NVLink domain "
        "| bottleneck GB/s min / p25 / median | gangs' bottleneck min / median "
        "| partial holds: gangs, GPU-h, timeouts, deadlocks |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p, s in summaries.items():
        g, b, gb, part = s["gangs"], s["bottleneck_gbps"], s["gang_bottleneck_gbps"], \
            s["partial"]
        share = g["in_one_rack_share"]
        nv = g["in_one_nvlink_domain_share"]
        lines.append(
            f"| {p} | {s['makespan_s']:.0f} | {ratio(p, 'default', 'makespan_s')} "
            f"| {ratio(p, 'kueue-tas', 'makespan_s')} | {s['completion_s']['mean']:.0f} "
            f"| {ratio(p, 'default', 'completion_s', 'mean')} | {s['jct_s']['median']:.0f} "
            f"| {'–' if share is None else f'{share:.0%}'} of {g['rack_fitting']} "
            f"| {'–' if nv is None else f'{nv:.0%}'} of {g['nvlink_fitting']} "
            f"| {_cell(b['min'])} / {_cell(b['p25'])} / {_cell(b['median'])} "
            f"| {_cell(gb['min'])} / {_cell(gb['median'])} "
            f"| {part['gangs']}, {part['gpu_hours']:.1f}, {part['timeouts']}, "
            f"{part['deadlocks']} |")
    return "\n".join(lines)


JOB_COLUMNS = ("job", "arrival_s", "pods", "gpus", "network", "sensitive", "start_s", "end_s",
               "first_pod_s", "nodes", "gpu_sets", "in_one_rack", "in_one_nvlink_domain",
               "intra_gbps", "inter_gbps", "inter_over", "bottleneck_gbps", "ideal_gbps",
               "factor", "partial_gpu_s", "evictions", "decision_ms")


def _fmt(v: float) -> str | float:
    return "" if not math.isfinite(v) else round(v, 4)


def write_jobs_csv(r: MultiResult, cluster: Cluster, path: Path) -> None:
    """One row per job (columns :data:`JOB_COLUMNS`; ``inf`` bandwidths left empty)."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(JOB_COLUMNS)
        for x in r.records:
            j = x.job
            w.writerow([
                j.id, j.arrival_s, j.pods, j.gpus, j.network, j.sensitive, x.start_s, x.end_s,
                "" if x.first_pod_s < 0 else x.first_pod_s,
                " ".join(cluster.names[i] for i in x.nodes),
                " ".join(",".join(map(str, g)) for g in x.gpus), x.in_one_rack,
                x.in_one_nvlink_domain, _fmt(x.intra_gbps), _fmt(x.inter_gbps), x.inter_over,
                _fmt(x.bottleneck_gbps), _fmt(x.ideal_gbps), round(x.factor, 4),
                round(x.partial_gpu_s, 1), x.evictions, round(x.decision_ms, 3)])


def plots(results: Sequence[MultiResult], out: Path) -> None:
    """``bottleneck.png`` and ``makespan.png`` (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    data = [[x.bottleneck_gbps for x in _measured(r) if x.job.gang
             and math.isfinite(x.bottleneck_gbps)] or [0.0] for r in results]
    ax.boxplot(data, whis=(0, 100))
    ax.set_xticks(range(1, len(results) + 1), [r.policy for r in results])
    ax.set_ylabel("GB/s")
    ax.set_title("Predicted bottleneck bandwidth of bandwidth-sensitive gangs")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "bottleneck.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bars = ax.bar([r.policy for r in results], [makespan(r) for r in results],
                  color="#4c72b0")
    for b in bars:
        ax.annotate(f"{b.get_height():.0f}", (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("makespan, s")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "makespan.png", dpi=120)
    plt.close(fig)


def simulate_multinode(
    workload: str | MultiWorkload, policies: str | Sequence[str], *, seed: int = 0,
    out: str | Path | None = None, make_plots: bool = True,
    progress: Callable[[str], None] | None = None, judge: str = MODEL_GPUTOPO,
    postpone_max_s: float = POSTPONE_MAX_S,
) -> tuple[list[MultiResult], dict[str, dict[str, Any]]]:
    """Run ``workload`` under each policy; write the outputs to ``out`` (module docstring).
    ``judge`` and ``postpone_max_s`` as :class:`simulator.multinode.MultiSimulation`'s.

    Raises:
        SimulationError: any bad input, one line.
    """
    names = [p.strip() for p in (policies.split(",") if isinstance(policies, str)
                                 else policies) if p.strip()]
    names = list(dict.fromkeys(names))
    unknown = [p for p in names if p not in POLICIES]
    if not names or unknown:
        raise SimulationError(f"multi-node policies are {', '.join(POLICIES)}"
                              + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    wl = workload if isinstance(workload, MultiWorkload) else load_multinode_workload(
        workload, seed=seed)
    cluster = Cluster.build(wl.cluster)
    memo = Memo()
    sims = [MultiSimulation(wl, p, memo=memo, cluster=cluster, judge=judge,
                            postpone_max_s=postpone_max_s) for p in names]
    results = []
    for sim in sims:
        res = sim.run()
        results.append(res)
        if progress:
            progress(f"{res.policy}: {len(res.records)} jobs in {res.wall_s:.1f} s")
    summaries = {r.policy: summary(r, cluster) for r in results}
    if out is not None:
        path = output_dir(out, wl.to_json())
        (path / "summary.json").write_text(json.dumps(summaries, indent=1) + "\n")
        meta = {"workload": f"{wl.name}: {wl.description}", "jobs": len(wl.jobs),
                "seed": seed, "judge": sims[0].judge, "postpone_max_s": postpone_max_s,
                "nodes": len(cluster.names), "machine": cluster.topology.name,
                "levels": list(cluster.hierarchy.labels)}
        (path / "details.json").write_text(json.dumps(meta, indent=1) + "\n")
        (path / "summary.md").write_text(
            f"# {wl.name} on {len(cluster.names)} x {cluster.topology.name}\n\n"
            + table(summaries) + "\n")
        for r in results:
            write_jobs_csv(r, cluster, path / f"jobs-{r.policy}.csv")
        if make_plots:
            plots(results, path)
    return results, summaries
