"""The planner's postponement of sensitive single-pod jobs, measured in the multi-node simulator
(issue 24's bounded postponement carried to the jobs the planner admits).

For each scenario, seed and judge, :class:`simulator.multinode.MultiSimulation` runs the
``gputopo`` policy twice on the same jobs — with the postponement (``postpone_max_s`` 1 800 s,
the default) and without it (0) — and reports, per seed, with / without:

* the makespan and the mean job completion time (arrival to end), as ratios;
* the mean bottleneck bandwidth / ideal of the bandwidth-sensitive multi-GPU jobs (gangs
  included), as a difference;
* whether the worst such job's bottleneck bandwidth rose or fell.

Scenarios: ``headline`` — the README headline's stream (8 DGX-1 V100 in two racks of four,
60 jobs at 0.6 per minute, 30 % gangs of 2–4 pods: :func:`benchmarks.bench_headline.workload`);
``busy`` — the same cluster at 150 jobs, 3 per minute; ``hierarchy`` — ``bench_multinode``'s
128 nodes, 300 jobs (seeds 1–10 by default: a run takes seconds). Judges: gputopo-v1 (the
headline's), Eq. 2 and the bottleneck (:mod:`simulator.runtime`).

Run: ``.venv/bin/python -m benchmarks.bench_gang_postpone [--seeds 1-20]
[--hierarchy-seeds 1-10]``; writes ``benchmarks/results/gang_postpone.json`` and prints the
tables.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.bench_headline import workload as headline_workload
from simulator.many import parse_seeds
from simulator.multinode import MultiResult, MultiSimulation
from simulator.multinode_workloads import MultiWorkload, hierarchy_workload
from topology.policies.default import POSTPONE_MAX_S
from topology.policies.memo import Memo

OUT = Path(__file__).parent / "results" / "gang_postpone.json"
JUDGES = ("gputopo-v1", "mapa-eq2", "bottleneck")


def scenario(name: str, seed: int) -> MultiWorkload:
    """The workload of scenario ``name`` (module docstring) for ``seed``."""
    if name == "headline":
        return headline_workload(seed, 60, 0.6)
    if name == "busy":
        return headline_workload(seed, 150, 3.0)
    return hierarchy_workload(jobs=300, seed=seed)


def measures(r: MultiResult) -> dict[str, float]:
    """Makespan (s), mean completion time (s), mean and worst bottleneck of the sensitive
    multi-GPU jobs (relative to their ideal; GB/s)."""
    recs = r.records
    sens = [x for x in recs if x.job.sensitive and x.job.gpus * x.job.pods > 1]
    return {
        "makespan_s": max(x.end_s for x in recs) - min(x.job.arrival_s for x in recs),
        "jct_s": statistics.mean(x.end_s - x.job.arrival_s for x in recs),
        "sensitive_to_ideal": statistics.mean(min(1.0, x.bottleneck_gbps / x.ideal_gbps)
                                              for x in sens) if sens else 1.0,
        "worst_gbps": min((x.bottleneck_gbps for x in sens), default=float("inf")),
    }


def compare(name: str, seeds: Sequence[int], judge: str, memo: Memo) -> dict[str, Any]:
    """Per seed, with / without the postponement, and the distribution over the seeds."""
    rows = []
    for seed in seeds:
        wl = scenario(name, seed)
        on, off = (measures(MultiSimulation(wl, "gputopo", memo=memo, postpone_max_s=pm,
                                            judge=judge).run())
                   for pm in (POSTPONE_MAX_S, 0.0))
        rows.append({"seed": seed,
                     "makespan": round(on["makespan_s"] / off["makespan_s"], 4),
                     "jct": round(on["jct_s"] / off["jct_s"], 4),
                     "sensitive_delta": round(on["sensitive_to_ideal"]
                                              - off["sensitive_to_ideal"], 4),
                     "worst": (on["worst_gbps"] > off["worst_gbps"] + 1e-9)
                     - (on["worst_gbps"] < off["worst_gbps"] - 1e-9)})

    def spread(key: str) -> list[float]:
        v = [r[key] for r in rows]
        return [min(v), statistics.median(v), max(v)]

    return {"scenario": name, "judge": judge, "seeds": list(seeds), "per_seed": rows,
            "makespan": spread("makespan"), "jct": spread("jct"),
            "sensitive_delta": spread("sensitive_delta"),
            "makespan_above_1": sum(r["makespan"] > 1.0 + 1e-9 for r in rows),
            "jct_above_1": sum(r["jct"] > 1.0 + 1e-9 for r in rows),
            "sensitive_below_0": sum(r["sensitive_delta"] < -1e-9 for r in rows),
            "worst_up": sum(r["worst"] > 0 for r in rows),
            "worst_down": sum(r["worst"] < 0 for r in rows)}


def table(results: Sequence[dict[str, Any]]) -> str:
    """The comparison as a markdown table."""
    lines = ["| scenario | judge | makespan min / median / max (seeds > 1) | JCT min / median / "
             "max (seeds > 1) | Δ sensitive bottleneck/ideal min / median / max (seeds < 0) | "
             "worst job up / down |", "|---|---|---|---|---|---|"]
    for r in results:
        m, j, d = r["makespan"], r["jct"], r["sensitive_delta"]
        lines.append(f"| {r['scenario']} ({len(r['seeds'])} seeds) | {r['judge']} | "
                     f"{m[0]:.3f} / {m[1]:.3f} / {m[2]:.3f} ({r['makespan_above_1']}) | "
                     f"{j[0]:.3f} / {j[1]:.3f} / {j[2]:.3f} ({r['jct_above_1']}) | "
                     f"{d[0]:+.3f} / {d[1]:+.3f} / {d[2]:+.3f} ({r['sensitive_below_0']}) | "
                     f"{r['worst_up']} / {r['worst_down']} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1-20", help="seeds of the headline and busy scenarios")
    ap.add_argument("--hierarchy-seeds", default="1-10")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    memo = Memo()
    results = []
    for name, seeds in (("headline", parse_seeds(args.seeds)),
                        ("busy", parse_seeds(args.seeds)),
                        ("hierarchy", parse_seeds(args.hierarchy_seeds))):
        for judge in JUDGES:
            results.append(compare(name, seeds, judge, memo))
            print(table(results[-1:]).splitlines()[-1], flush=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
