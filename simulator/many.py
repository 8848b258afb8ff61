"""Many seeds, several judges: per-seed ratios of each policy against a reference stack.

One seed of one workload is one draw: a policy that wins it may lose the next, and a judge
(the EffBW model that prices run time) that favours one policy may not favour another. The
many-seed mode runs every (judge, seed) pair, each policy on the same generated workload, and
reports per seed, against the reference policy with its own node choice (by default NVIDIA's
best-effort allocation with kube-scheduler's LeastAllocated: the stack a cluster runs without
gputopo):

* ``effbw_ratio_delta`` — the policy's mean EffBW / ideal over its bandwidth-sensitive
  multi-GPU jobs minus the reference's (> 0: its sensitive jobs got closer to their ideal);
* ``makespan_ratio`` — its makespan over the reference's (< 1: it finished sooner);

and, per judge and policy, their distribution over the seeds (min, p25, median, p75, max),
the worst seed of each, and how many seeds were lost (delta < 0, ratio > 1).

``simulator.run.simulate`` runs one seed; this runs it for every seed and judge with plots and
per-job files off (the per-seed summaries are kept).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simulator import SimulationError
from simulator.engine import RunResult
from simulator.report import makespan
from simulator.run import parse_policies, simulate
from simulator.runtime import judge_name
from topology.model import Topology
from topology.policies.default import POSTPONE_MAX_S

#: The stack a cluster runs without gputopo (with its default node choice: LeastAllocated).
DEFAULT_REFERENCE = "nvidia-best-effort"


def parse_seeds(text: str) -> list[int]:
    """``"0-19"``, ``"1,4,7"`` or a mix (``"0-4,9"``) → the seeds, in order, without repeats.

    Raises:
        SimulationError: not a seed list.
    """
    out: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            if "-" in part[1:]:
                lo, hi = part.split("-", 1) if not part.startswith("-") else ("", part)
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise SimulationError(f"bad --seeds {text!r}: use e.g. 0-19 or 1,4,7") from None
    seen: list[int] = []
    for s in out:
        if s not in seen:
            seen.append(s)
    if not seen:
        raise SimulationError("--seeds names no seed")
    return seen


def mean_ratio_to_ideal(run: RunResult) -> float | None:
    """Mean judged EffBW / ideal of the run's bandwidth-sensitive multi-GPU jobs (None
    without any)."""
    values = [r.ratio_to_ideal for r in run.records if r.measured and r.ratio_to_ideal
              is not None]
    return float(np.mean(values)) if values else None


def _spread(values: Sequence[float]) -> dict[str, float]:
    qs = np.percentile(np.asarray(values, dtype=np.float64), [0, 25, 50, 75, 100])
    return {k: round(float(v), 4) for k, v in zip(("min", "p25", "median", "p75", "max"), qs,
                                                  strict=True)}


def many_seeds(
    topology: str | Topology | None,
    workload: str,
    policies: str | Sequence[str],
    seeds: Sequence[int],
    *,
    judges: Sequence[str] = ("gputopo-v1",),
    reference: str = DEFAULT_REFERENCE,
    nodes: int | None = None,
    queue: str = "fifo",
    progress: Callable[[str], None] | None = None,
    postpone_max_s: float = POSTPONE_MAX_S,
) -> dict[str, Any]:
    """Run ``workload`` (a generator spec, reseeded per seed) under ``reference`` and every
    policy, for every judge and seed (module docstring).

    Args:
        topology: every node's topology (as :func:`simulator.run.simulate`).
        workload: a workload generator spec (``mapa:jobs=150``); a file would give every seed
            the same jobs.
        policies: the policies compared with ``reference``.
        seeds: generator seeds.
        judges: EffBW models that price run time (``gputopo-v1``, ``eq2``, ``bottleneck``).
        reference: the policy every ratio is taken against (its default node choice).
        nodes: node count (None = the workload's default).
        queue: ``fifo`` or ``backfill``.
        progress: called with one line per (judge, seed).
        postpone_max_s: the default policy's bounded postponement (s; 0 = off), as
            :func:`simulator.run.simulate`.

    Returns:
        ``{"reference", "judges", "seeds", "per_seed": [...], "summary": {judge: {policy:
        {...}}}}``: per seed and policy the mean EffBW / ideal, the makespan and both ratios;
        per judge and policy their spread, worst seed and losses.

    Raises:
        SimulationError: bad input (as :func:`simulator.run.simulate`), no seed, or the
            workload has no bandwidth-sensitive multi-GPU job.
    """
    names = [p for p in parse_policies(policies) if p != reference]
    if not names:
        raise SimulationError(f"name at least one policy besides the reference {reference}")
    if not seeds:
        raise SimulationError("--seeds names no seed")
    try:
        models = [judge_name(j) for j in judges]
    except ValueError as exc:
        raise SimulationError(str(exc)) from None
    per_seed: list[dict[str, Any]] = []
    for judge in models:
        for seed in seeds:
            runs, _ = simulate(topology, workload, [reference, *names], nodes=nodes,
                               seed=seed, judge=judge, queue=queue, make_plots=False,
                               postpone_max_s=postpone_max_s)
            ref = runs[0]
            ref_ratio, ref_span = mean_ratio_to_ideal(ref), makespan(ref)
            if ref_ratio is None:
                raise SimulationError(f"workload {workload} (seed {seed}) has no "
                                      "bandwidth-sensitive multi-GPU job to judge")
            row: dict[str, Any] = {"judge": judge, "seed": seed, "reference": {
                "mean_effbw_ratio": round(ref_ratio, 4), "makespan_s": round(ref_span, 1)}}
            for run in runs[1:]:
                ratio = mean_ratio_to_ideal(run)
                span = makespan(run)
                row[run.policy] = {
                    "mean_effbw_ratio": round(ratio or 0.0, 4),
                    "makespan_s": round(span, 1),
                    "effbw_ratio_delta": round((ratio or 0.0) - ref_ratio, 4),
                    "makespan_ratio": round(span / ref_span, 4) if ref_span > 0 else 1.0,
                }
            per_seed.append(row)
            if progress:
                progress(f"{judge} seed {seed}: " + ", ".join(
                    f"{p} {row[p]['effbw_ratio_delta']:+.3f} / {row[p]['makespan_ratio']:.3f}"
                    for p in names))
    summary: dict[str, dict[str, Any]] = {}
    for judge in models:
        rows = [r for r in per_seed if r["judge"] == judge]
        summary[judge] = {}
        for p in names:
            delta = [r[p]["effbw_ratio_delta"] for r in rows]
            spans = [r[p]["makespan_ratio"] for r in rows]
            summary[judge][p] = {
                "effbw_ratio_delta": _spread(delta),
                "makespan_ratio": _spread(spans),
                "worst_seed_effbw": rows[int(np.argmin(delta))]["seed"],
                "worst_seed_makespan": rows[int(np.argmax(spans))]["seed"],
                "seeds_behind_effbw": sum(1 for d in delta if d < 0),
                "seeds_behind_makespan": sum(1 for m in spans if m > 1.0),
                "seeds": len(rows),
            }
    return {"workload": workload, "nodes": nodes, "queue": queue, "reference": reference,
            "judges": models, "seeds": list(seeds), "policies": names,
            "per_seed": per_seed, "summary": summary}


def table(doc: dict[str, Any]) -> str:
    """The summary as Markdown: per judge and policy, the spread of both ratios over the
    seeds, the worst seed and the seeds lost."""
    lines = [
        f"Against `{doc['reference']}` (its own node choice), {len(doc['seeds'])} seeds of "
        f"`{doc['workload']}`" + (f" on {doc['nodes']} nodes" if doc["nodes"] else "") + ".",
        "",
        "| judge | policy | Δ mean EffBW/ideal min / median / max | worst seed | seeds behind "
        "| makespan ratio min / median / max | worst seed | seeds behind |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for judge, by_policy in doc["summary"].items():
        for p, s in by_policy.items():
            d, m = s["effbw_ratio_delta"], s["makespan_ratio"]
            lines.append(
                f"| {judge} | {p} | {d['min']:+.3f} / {d['median']:+.3f} / {d['max']:+.3f} | "
                f"{s['worst_seed_effbw']} | {s['seeds_behind_effbw']} of {s['seeds']} | "
                f"{m['min']:.3f} / {m['median']:.3f} / {m['max']:.3f} | "
                f"{s['worst_seed_makespan']} | {s['seeds_behind_makespan']} of {s['seeds']} |")
    return "\n".join(lines)


def write(doc: dict[str, Any], out: str | Path) -> Path:
    """``DIR/many.json`` and ``DIR/many.md``; returns DIR."""
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "many.json").write_text(json.dumps(doc, indent=2) + "\n")
    (path / "many.md").write_text(table(doc) + "\n")
    return path
