"""Distance of the pruned pattern search from the exhaustive optimum, and its cost.

For each case (machine, pattern, objective, free GPUs) the pruned search (the one the
policies run, budget ``EXACT_BUDGET``) is compared with an exhaustive search (budget large
enough to score every (subset, arrangement) pair — MAPA's full enumeration). Reports the gap
(1 - pruned/exhaustive, percent), the share of cases where the pruned search found an optimum,
and the time of each (as a ratio within one run; the machine is noisy).

Run: ``.venv/bin/python -m benchmarks.bench_matching [--quick]``; writes
``benchmarks/results/matching.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from pathlib import Path
from typing import Any

from topology import catalog
from topology.patterns import ring, tree
from topology.policies.matching import EXACT_BUDGET, Objective, arrangements, search
from topology.policies.memo import Memo

OUT = Path(__file__).parent / "results" / "matching.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer, smaller cases (CI)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    memo = Memo()  # per-class tables kept across cases, as a policy runner keeps them
    machines = [m for m in ("mapa-torus-16", "mapa-cubemesh-16") if m in catalog.names()]
    cases: list[dict[str, Any]] = []
    objectives: tuple[Objective, ...] = ("effbw-gputopo", "effbw-mapa", "aggbw")
    trials = 2 if args.quick else 6
    sizes = [(6, ring(6)), (8, ring(8))] if not args.quick else [(6, ring(6))]
    if not args.quick:
        sizes.append((7, tree(7)))
    for mname in machines:
        topo = catalog.get(mname)
        for k, pattern in sizes:
            for objective in objectives:
                for t in range(trials):
                    n_free = 16 if t == 0 else rng.randint(k + 2, 15)
                    free = sorted(rng.sample(range(16), n_free))
                    t0 = time.perf_counter()
                    pruned = search(topo, free, pattern, objective, memo=memo)
                    t1 = time.perf_counter()
                    full = search(topo, free, pattern, objective, budget=10**12, table=False)
                    t2 = time.perf_counter()
                    best = full.best.score(objective)
                    got = pruned.best.score(objective)
                    gap = 0.0 if best <= 0 else max(0.0, 1 - got / best) * 100
                    cases.append(
                        {
                            "machine": mname,
                            "pattern": f"{pattern.name}-{k}",
                            "objective": objective,
                            "free": n_free,
                            "exact": pruned.exact,
                            "gap_percent": round(gap, 3),
                            "pruned_s": round(t1 - t0, 4),
                            "exhaustive_s": round(t2 - t1, 4),
                            "matches": math.comb(n_free, k)
                            * int(arrangements(k, pattern.edges).shape[0]),
                        }
                    )
                    print(
                        f"{mname:17} {pattern.name}-{k} {objective:14} free={n_free:2} "
                        f"gap={gap:6.3f}% pruned={t1 - t0:7.3f}s exhaustive={t2 - t1:7.3f}s"
                    )
    inexact = [c for c in cases if not c["exact"]]
    summary = {
        "budget": EXACT_BUDGET,
        "cases": len(cases),
        "pruned_cases": len(inexact),
        "optimal_share": round(sum(c["gap_percent"] == 0 for c in cases) / max(1, len(cases)), 3),
        "gap_percent_mean": round(statistics.fmean([c["gap_percent"] for c in inexact]), 3)
        if inexact
        else 0.0,
        "gap_percent_max": max([c["gap_percent"] for c in inexact], default=0.0),
        "speedup_median": round(
            statistics.median([c["exhaustive_s"] / max(c["pruned_s"], 1e-6) for c in inexact]), 1
        )
        if inexact
        else 1.0,
    }
    print(json.dumps(summary, indent=2))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"summary": summary, "cases": cases}, indent=2) + "\n")


if __name__ == "__main__":
    main()
