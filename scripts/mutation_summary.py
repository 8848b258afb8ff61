"""Score a list of mutmut mutants (e.g. a sample from ``mutation_sample.py``) per module.

Reads each mutant's result from ``mutants/<path>.meta`` (mutmut 3.8.1's ``exit_code_by_key``
and ``durations_by_key``) and prints, per module, the counts, the score
``(killed + timeout) / run`` with its 95 % Wilson score interval (the sample is a uniform
draw, so the interval bounds the module's full score), the mean seconds per mutant, and the
survivors' names. "no tests" mutants count as run and not killed, as in mutmut's own score.

    .venv/bin/python scripts/mutation_summary.py benchmarks/results/mutation/round4-sample-50.txt
    .venv/bin/python scripts/mutation_summary.py --survivors FILE   # survivor names only
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

#: mutmut 3.8.1's ``status_by_exit_code`` (mutmut/stats.py), the codes a run can leave.
KILLED = {1, 3}
TIMEOUT = {36, -24, 24, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion k/n (0..1 bounds; (0, 1) when n = 0)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


def main(argv: list[str] | None = None) -> int:
    """Print the per-module table (or, with ``--survivors``, the survivor names)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", type=Path, help="file with one mutant name a line")
    parser.add_argument("--survivors", action="store_true")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.names.read_text().splitlines() if n.strip()]
    meta: dict[str, dict[str, dict[str, float | int | None]]] = {}
    by_module: dict[str, list[str]] = defaultdict(list)
    for name in names:
        module = name.split(".x", 1)[0]
        by_module[module].append(name)
        if module not in meta:
            path = Path("mutants") / (module.replace(".", "/") + ".py.meta")
            meta[module] = json.loads(path.read_text())
    for module, ms in by_module.items():
        codes = meta[module]["exit_code_by_key"]
        durs = meta[module].get("durations_by_key", {})
        run = [m for m in ms if codes.get(m) is not None]
        killed = sum(codes[m] in KILLED for m in run)
        timeout = sum(codes[m] in TIMEOUT for m in run)
        surv = [m for m in run if codes[m] in SURVIVED]
        no_tests = [m for m in run if codes[m] in NO_TESTS]
        if args.survivors:
            print("\n".join(surv + no_tests))
            continue
        n = len(run)
        lo, hi = wilson(killed + timeout, n)
        secs = [float(d) for m in run if (d := durs.get(m)) is not None]
        mean = sum(secs) / len(secs) if secs else float("nan")
        score = 100.0 * (killed + timeout) / n if n else float("nan")
        print(f"{module}: {len(ms)} sampled, {n} run: {killed} killed + {timeout} timeout, "
              f"{len(surv)} survived, {len(no_tests)} no tests — {score:.1f} % "
              f"(95 % Wilson {100 * lo:.1f}–{100 * hi:.1f} %); {mean:.1f} s/mutant")
    return 0


if __name__ == "__main__":
    sys.exit(main())
