"""The multi-node simulation of issue 23: single-node jobs and gangs of 2-16 pods on 4 blocks
x 4 racks x 8 DGX-1 V100 nodes, under ``default``, ``gang``, ``kueue-tas`` and ``gputopo``,
over several seeds (:mod:`simulator.multinode`).

Run: ``.venv/bin/python -m benchmarks.bench_multinode [--seeds 1,2,3] [--jobs 300]``; writes
``benchmarks/results/multinode.json`` (every policy's ``summary.json`` entry per seed) and
``benchmarks/results/multinode.md`` (the table per seed and the targets: gputopo's makespan
at most 0.8x ``default``'s and 0.9x ``kueue-tas``'s, at least 95 % of the gangs an idle rack
would hold inside one rack, no partial holds).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.multinode_report import simulate_multinode, table

OUT = Path(__file__).parent / "results"
POLICIES = ("default", "gang", "kueue-tas", "gputopo")


def targets(s: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """gputopo's ratios and the issue's targets for one seed."""
    g = s["gputopo"]
    vs_default = g["makespan_s"] / s["default"]["makespan_s"]
    vs_kueue = g["makespan_s"] / s["kueue-tas"]["makespan_s"]
    share = g["gangs"]["in_one_rack_share"]
    return {
        "makespan_vs_default": round(vs_default, 3),
        "makespan_vs_kueue_tas": round(vs_kueue, 3),
        "in_one_rack_share": share,
        "partial_gangs": g["partial"]["gangs"],
        "met": bool(vs_default <= 0.8 and vs_kueue <= 0.9 and (share is None or share >= 0.95)
                    and g["partial"]["gangs"] == 0),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_multinode",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--spec", default="hierarchy",
                    help="workload spec without jobs= (default: hierarchy)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    doc: dict[str, Any] = {"benchmark": "bench_multinode", "spec": args.spec,
                           "jobs": args.jobs, "seeds": {}}
    lines = ["# Multi-node simulation (issue 23)", "",
             f"`python -m benchmarks.bench_multinode --seeds {args.seeds} --jobs {args.jobs}`"
             f" — workload `{args.spec}:jobs={args.jobs}`.", ""]
    for seed in seeds:
        t0 = time.perf_counter()
        _, s = simulate_multinode(f"{args.spec}:jobs={args.jobs}", POLICIES, seed=seed,
                                  progress=lambda line: print("  " + line, flush=True))
        t = targets(s)
        doc["seeds"][str(seed)] = {"summary": s, "targets": t,
                                   "wall_s": round(time.perf_counter() - t0, 1)}
        lines += [f"## Seed {seed}", "", table(s), "",
                  f"gputopo: makespan {t['makespan_vs_default']:.2f}x default, "
                  f"{t['makespan_vs_kueue_tas']:.2f}x kueue-tas; rack-fitting gangs in one "
                  f"rack {t['in_one_rack_share']:.0%}; partial holds {t['partial_gangs']} — "
                  f"targets {'met' if t['met'] else 'MISSED'}.", ""]
        print(f"seed {seed}: {t}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "multinode.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "multinode.md").write_text("\n".join(lines))
    print(f"wrote {args.out / 'multinode.json'} and multinode.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
