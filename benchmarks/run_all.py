"""Every benchmark and the papers' simulations, with one command, into one report.

Runs, in order:

1. the benchmarks that exist — ``bench_extender`` (filter + prioritize, bind),
   ``bench_matching`` (pruned vs exhaustive search), ``bench_allocate`` (device plugin),
   ``bench_planner`` (ANDREAS: §V-B's cost tables at N = 10, 50, 100, the ARMIDA run and the
   plan time per rescheduling point; about an hour at full size) — each as its own process,
   keeping its JSON under ``benchmarks/results/``;
2. the simulations (``simulator``; the same policy code the extender runs):
   MAPA's 300-job trace on a DGX-1 V100 and on the 16-GPU cube-mesh and torus; Amaral's
   prototype (Table 1, one Minsky), scenario 1 (100 jobs, 5 Minsky) and scenario 2 (10 000 jobs,
   1 000 Minsky); every registered comparison policy;
3. decision time per job at 1 000 machines, asking every node as the extender's filter does
   (Amaral scenario 2 on Minsky, and a MAPA-style stream on 1 000 DGX-1 V100).

Writes ``benchmarks/results/REPORT.md`` (tables) and ``benchmarks/results/sim/<scenario>/``
(summary.json, summary.md, details.json, plots; the per-job CSVs are not committed).

Run: ``.venv/bin/python -m benchmarks.run_all`` (full, several minutes) or ``--quick``
(reduced sizes, a CI-sized smoke run). ``--skip-benchmarks`` runs only the simulations;
``--only NAME[,NAME]`` picks scenarios and benchmarks (``planner`` = ``bench_planner``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
SIM = RESULTS / "sim"
REPORT = RESULTS / "REPORT.md"

POLICIES = ["baseline", "nvidia-best-effort", "gaia", "mapa-greedy", "mapa-preserve",
            "topo-aware", "topo-aware-p", "fcfs", "best-fit", "gputopo"]


@dataclass(frozen=True)
class Scenario:
    """One simulation of the report."""

    name: str
    title: str
    topology: str
    workload: str
    quick_workload: str
    nodes: int
    quick_nodes: int


SCENARIOS = [
    Scenario("mapa-dgx1", "MAPA §4: 300-job trace on one DGX-1 V100", "dgx1-v100", "mapa",
             "mapa:jobs=60", 1, 1),
    Scenario("mapa-cubemesh", "MAPA §5: 300-job trace on the 16-GPU cube-mesh",
             "mapa-cubemesh-16", "mapa", "mapa:jobs=40", 1, 1),
    Scenario("mapa-torus", "MAPA §5: 300-job trace on the 16-GPU 2-D torus", "mapa-torus-16",
             "mapa", "mapa:jobs=40", 1, 1),
    Scenario("amaral-prototype", "Amaral §5.2: Table 1 on one Minsky", "minsky",
             "amaral-prototype", "amaral-prototype", 1, 1),
    Scenario("amaral-s1", "Amaral §5.5.1: 100 jobs on 5 Minsky", "minsky", "amaral-s1",
             "amaral-s1:jobs=40", 5, 5),
    Scenario("amaral-s2", "Amaral §5.5.2: 10 000 jobs on 1 000 Minsky", "minsky", "amaral-s2",
             "amaral-s2:jobs=500", 1000, 50),
]

#: Decision time per job with every node asked (the extender's filter path), at 1 000 nodes.
SCALE = [
    ("amaral-s2 / 1000 x minsky", "minsky", "amaral-s2:jobs=2000", 1000,
     ["fcfs", "topo-aware-p", "gputopo"]),
    ("mapa stream / 1000 x dgx1-v100", "dgx1-v100",
     "mapa:jobs=3000,arrival=poisson,rate=600", 1000,
     ["baseline", "mapa-preserve", "gputopo"]),
]

#: A benchmark that runs longer than this is stopped and reported as timed out.
BENCHMARK_TIMEOUT_S = 1800

BENCHMARKS = [("bench_extender", "extender.json"), ("bench_matching", "matching.json"),
              ("bench_allocate", "allocate.json"), ("bench_planner", "planner.json")]
#: Benchmarks that take longer than :data:`BENCHMARK_TIMEOUT_S` at full size.
LONG_TIMEOUT_S = {"bench_planner": 3 * 3600}


def _run_benchmark(module: str, quick: bool) -> tuple[str, int, float]:
    path = Path(__file__).parent / f"{module}.py"
    if not path.exists():
        return f"`benchmarks/{module}.py` is not in this tree yet; skipped.", 0, 0.0
    cmd = [sys.executable, "-m", f"benchmarks.{module}"] + (["--quick"] if quick else [])
    t0 = time.perf_counter()
    # output to files, not pipes: a worker process the benchmark leaves behind would hold a
    # pipe open and block us after the benchmark itself has exited
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        try:
            proc = subprocess.run(cmd, cwd=ROOT, stdout=out_f, stderr=err_f, text=True,
                                  env={**os.environ, "MPLBACKEND": "Agg"},
                                  timeout=LONG_TIMEOUT_S.get(module, BENCHMARK_TIMEOUT_S))
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = -1
        out_f.seek(0)
        err_f.seek(0)
        stdout, stderr = out_f.read(), err_f.read()
    took = time.perf_counter() - t0
    out = stdout.strip() + ("\n" + stderr.strip() if rc else "")
    if rc == -1:
        out += f"\n(timed out after {LONG_TIMEOUT_S.get(module, BENCHMARK_TIMEOUT_S)} s)"
    lines = out.splitlines()
    if len(lines) > 40:  # keep the summary at the end; the full output is in its JSON
        lines = [f"… ({len(lines) - 40} lines above omitted)"] + lines[-40:]
    return "\n".join(lines), rc, took


def _decision_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| Scenario | Policy | grouped p50 ms | grouped p99 ms | every node p50 ms | "
             "every node p99 ms | every node mean ms | jobs |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['scenario']} | {r['policy']} | {r['grouped_p50']:.3f} | "
                     f"{r['grouped_p99']:.2f} | {r['every_p50']:.3f} | {r['every_p99']:.2f} | "
                     f"{r['every_mean']:.3f} | {r['jobs']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="reduced sizes (CI smoke run)")
    ap.add_argument("--skip-benchmarks", action="store_true", help="simulations only")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    import numpy as np

    from simulator.run import simulate

    only = {s.strip() for s in args.only.split(",") if s.strip()}
    started = time.perf_counter()
    parts: list[str] = [
        "# gputopo benchmark and simulation report",
        "",
        f"Generated {_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC')} on "
        f"{platform.machine()} / Python {platform.python_version()} "
        f"({os.cpu_count()} CPUs) by `.venv/bin/python -m benchmarks.run_all"
        f"{' --quick' if args.quick else ''}`"
        f"{' (reduced sizes)' if args.quick else ''}. Seed {args.seed}.",
        "",
        "How to read the tables and plots: `docs/simulator.md`. EffBW is judged for every "
        "policy with the gputopo-v1 model (the 'Eq. 2 median' column re-scores the same "
        "placements with MAPA's Eq. 2); run times follow it (MAPA Fig. 16).",
        "",
    ]
    wanted = [m for m, _ in BENCHMARKS if not only or m.removeprefix("bench_") in only]
    if not args.skip_benchmarks and wanted:
        parts += ["## Benchmarks", ""]
        for module in wanted:
            print(f"== {module}", file=sys.stderr, flush=True)
            text, rc, took = _run_benchmark(module, args.quick)
            status = "" if rc == 0 else f" — **exit {rc}**"
            parts += [f"### {module} ({took:.0f} s){status}", "", "```", text, "```", ""]

    parts += ["## Simulations", ""]
    SIM.mkdir(parents=True, exist_ok=True)
    (SIM / ".gitignore").write_text("*.csv\nworkload.json\n")
    for sc in SCENARIOS:
        if only and sc.name not in only:
            continue
        workload = sc.quick_workload if args.quick else sc.workload
        nodes = sc.quick_nodes if args.quick else sc.nodes
        out = SIM / sc.name
        print(f"== {sc.name}: {workload} on {nodes} x {sc.topology}", file=sys.stderr,
              flush=True)
        t0 = time.perf_counter()
        simulate(sc.topology, workload, POLICIES, nodes=nodes, seed=args.seed, out=out,
                 progress=lambda line: print("   " + line, file=sys.stderr, flush=True))
        took = time.perf_counter() - t0
        md = (out / "summary.md").read_text().split("\n", 2)[2]
        parts += [f"### {sc.title}", "",
                  f"`gputopo simulate --topology {sc.topology} --nodes {nodes} --workload "
                  f"{workload} --policies {','.join(POLICIES)} --seed {args.seed} --out "
                  f"benchmarks/results/sim/{sc.name}` ({took:.0f} s). Plots: "
                  f"[EffBW](sim/{sc.name}/effbw_boxplot.png), "
                  f"[queueing CDF](sim/{sc.name}/queueing_cdf.png), "
                  f"[fragmentation](sim/{sc.name}/fragmentation.png).", "", md, ""]

    if not only or "scale" in only:
        rows: list[dict[str, Any]] = []
        for label, topo, workload, nodes, pols in SCALE:
            if args.quick:
                workload = workload.split(":")[0] + ":jobs=300" + (
                    ",arrival=poisson,rate=600" if workload.startswith("mapa") else "")
                nodes = 100
            print(f"== scale: {label} ({workload}, {nodes} nodes)", file=sys.stderr, flush=True)
            grouped, _ = simulate(topo, workload, pols, nodes=nodes, seed=args.seed,
                                  make_plots=False)
            every, _ = simulate(topo, workload, pols, nodes=nodes, seed=args.seed,
                                make_plots=False, group_nodes=False)
            for g, e in zip(grouped, every, strict=True):
                gd = np.array([x.decision_ms for x in g.records])
                ed = np.array([x.decision_ms for x in e.records])
                rows.append({
                    "scenario": f"{label.split(' / ')[0]} / {nodes} x {topo}",
                    "policy": g.policy, "jobs": len(g.records),
                    "grouped_p50": float(np.percentile(gd, 50)),
                    "grouped_p99": float(np.percentile(gd, 99)),
                    "every_p50": float(np.percentile(ed, 50)),
                    "every_p99": float(np.percentile(ed, 99)),
                    "every_mean": float(ed.mean()),
                })
        (RESULTS / "decision_time.json").write_text(json.dumps(rows, indent=2) + "\n")
        parts += [
            "## Decision time per job at 1 000 machines", "",
            "Wall-clock time to place one job: run the policy for the nodes (through "
            "`evaluate.place`, the extender's cached entry point) and pick one. *Grouped*: once "
            "per (topology class, free-GPU state), as the simulator does by default; *every "
            "node*: once per node, as the extender's filter does (mostly cache hits). "
            "In-process, no HTTP (the extender's HTTP latency is `bench_extender` above).", "",
            _decision_table(rows), "",
        ]
    parts.append(f"Total time {time.perf_counter() - started:.0f} s.")
    REPORT.write_text("\n".join(parts) + "\n")
    print(f"wrote {REPORT.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
