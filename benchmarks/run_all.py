"""Every benchmark and the papers' simulations, with one command, into one report.

Runs, in order:

1. the benchmarks that exist — ``bench_extender`` (filter + prioritize, bind),
   ``bench_matching`` (pruned vs exhaustive search), ``bench_allocate`` (device plugin),
   ``bench_planner`` (ANDREAS: §V-B's cost tables at N = 10, 50, 100, the ARMIDA run and the
   plan time per rescheduling point; about an hour at full size), ``bench_numa_agreement``
   (whether the kubelet's Topology Manager accepts the GPUs chosen, with and without the
   extender following it, and what that costs in EffBW) — each
   as its own process,
   keeping its JSON under ``benchmarks/results/``;
2. the simulations (``simulator``; the same policy code the extender runs):
   MAPA's 300-job trace on a DGX-1 V100 and on the 16-GPU cube-mesh and torus; Amaral's
   prototype (Table 1, one Minsky), scenario 1 (100 jobs, 5 Minsky) and scenario 2 (10 000 jobs,
   1 000 Minsky); every registered comparison policy; Tabrizian's co-location workloads
   (best and worst case with two and ten data workers on two single-V100 machines, and the
   mixed stream on DGX-1 nodes) under ``exclusive``, ``random-colocate``, ``colocate`` and
   ``gputopo``, and a load sweep of the mixed stream (``colocation-sweep``);
3. decision time per job at 1 000 machines, asking every node as the extender's filter does
   (Amaral scenario 2 on Minsky, and a MAPA-style stream on 1 000 DGX-1 V100).

Writes ``benchmarks/results/REPORT.md`` (tables), ``benchmarks/results/COLOCATION.md`` (the
co-location tables) and ``benchmarks/results/sim/<scenario>/`` (summary.json, summary.md,
details.json, plots; the per-job CSVs are not committed).

Run: ``.venv/bin/python -m benchmarks.run_all`` (full, several minutes) or ``--quick``
(reduced sizes, a CI-sized smoke run). ``--skip-benchmarks`` runs only the simulations;
``--only NAME[,NAME]`` picks scenarios and benchmarks (``planner`` = ``bench_planner``;
``tabrizian`` = every co-location scenario and the sweep); a partial run prints its report
instead of replacing REPORT.md.
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
#: Tabrizian's comparison (§6): FIFO with every job alone, blind packing, Algorithm 2, ours.
COLOCATION_POLICIES = ["exclusive", "random-colocate", "colocate", "gputopo"]
COLOCATION = RESULTS / "COLOCATION.md"
#: The mixed stream's load sweep: arrival rates (jobs/min), seeds, queue disciplines.
SWEEP_RATES, SWEEP_SEEDS, SWEEP_QUEUES = (2.0, 3.0, 4.0, 6.0, 8.0), (0, 1, 2), ("fifo",
                                                                              "backfill")


@dataclass(frozen=True)
class Scenario:
    """One simulation of the report."""

    name: str
    title: str
    topology: str | None  # None: the workload's own cluster
    workload: str
    quick_workload: str
    nodes: int | None
    quick_nodes: int | None
    policies: tuple[str, ...] = tuple(POLICIES)


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
    Scenario("tabrizian-best", "Tabrizian §6.2 best case, two data workers (Fig. 6.3b)", None,
             "tabrizian-best", "tabrizian-best", None, None, tuple(COLOCATION_POLICIES)),
    Scenario("tabrizian-best-w10", "Tabrizian §6.2 best case, ten data workers (Fig. 6.3a)",
             None, "tabrizian-best:workers=10", "tabrizian-best:workers=10", None, None,
             tuple(COLOCATION_POLICIES)),
    Scenario("tabrizian-worst", "Tabrizian §6.3 worst case, two data workers (Fig. 6.7b)",
             None, "tabrizian-worst", "tabrizian-worst", None, None,
             tuple(COLOCATION_POLICIES)),
    Scenario("tabrizian-worst-w10", "Tabrizian §6.3 worst case, ten data workers (Fig. 6.7a)",
             None, "tabrizian-worst:workers=10", "tabrizian-worst:workers=10", None, None,
             tuple(COLOCATION_POLICIES)),
    Scenario("tabrizian-mix", "Shared single-GPU jobs mixed with exclusive multi-GPU MAPA jobs "
             "on 4 DGX-1 V100", None, "tabrizian-mix", "tabrizian-mix:jobs=60", None, None,
             tuple(COLOCATION_POLICIES)),
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
              ("bench_allocate", "allocate.json"), ("bench_planner", "planner.json"),
              ("bench_numa_agreement", "numa_agreement.json")]
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


def _colocation_row(workload: str, results: list[Any]) -> list[str]:
    """Table rows: makespan, median/p95 JCT, mean queueing, each with its ratio to exclusive."""
    import numpy as np

    def stats(r: Any) -> tuple[float, float, float, float]:
        jct = [x.jct_s for x in r.records]
        span = max(x.end_s for x in r.records) - min(x.job.arrival_s for x in r.records)
        return (span, float(np.median(jct)), float(np.percentile(jct, 95)),
                float(np.mean([x.queueing_s for x in r.records])))

    ref = stats(next(r for r in results if r.policy == "exclusive"))
    rows = []
    for r in results:
        v = stats(r)
        cells = [f"{a:.0f} ({a / b:.2f})" if b > 0 else f"{a:.0f} (–)"
                 for a, b in zip(v, ref, strict=True)]
        rows.append(f"| {workload} | {r.policy} | " + " | ".join(cells) + " |")
    return rows


def _sweep(quick: bool) -> tuple[str, list[dict[str, Any]]]:
    """The mixed stream at several loads and seeds: mean ratio to exclusive per policy."""
    from statistics import mean

    from simulator.run import simulate

    rates = (3.0, 6.0) if quick else SWEEP_RATES
    seeds = SWEEP_SEEDS[:2] if quick else SWEEP_SEEDS
    jobs = 60 if quick else 200
    raw: list[dict[str, Any]] = []
    for queue in SWEEP_QUEUES:
        for rate in rates:
            for seed in seeds:
                results, _ = simulate(None, f"tabrizian-mix:jobs={jobs},rate={rate:g}",
                                      COLOCATION_POLICIES, seed=seed, queue=queue,
                                      make_plots=False)
                for r in results:
                    multi = [x.queueing_s for x in r.records if not x.job.shared]
                    raw.append({
                        "queue": queue, "rate_per_min": rate, "seed": seed, "policy": r.policy,
                        "makespan_s": max(x.end_s for x in r.records)
                        - min(x.job.arrival_s for x in r.records),
                        "turnaround_mean_s": mean(x.end_s - x.job.arrival_s
                                                  for x in r.records),
                        "multi_gpu_queueing_mean_s": mean(multi) if multi else 0.0,
                    })
    lines = ["| queue | jobs/min | policy | makespan / exclusive | turnaround / exclusive | "
             "multi-GPU jobs' mean wait, s |", "|---|---:|---|---:|---:|---:|"]
    for queue in SWEEP_QUEUES:
        for rate in rates:
            cell = [x for x in raw if x["queue"] == queue and x["rate_per_min"] == rate]
            base = {x["seed"]: x for x in cell if x["policy"] == "exclusive"}
            for pol in COLOCATION_POLICIES[1:]:
                mine = [x for x in cell if x["policy"] == pol]
                span = mean(x["makespan_s"] / base[x["seed"]]["makespan_s"] for x in mine)
                tat = mean(x["turnaround_mean_s"] / base[x["seed"]]["turnaround_mean_s"]
                           for x in mine)
                wait = mean(x["multi_gpu_queueing_mean_s"] for x in mine)
                lines.append(f"| {queue} | {rate:g} | {pol} | {span:.3f} | {tat:.3f} | "
                             f"{wait:.0f} |")
    text = (f"Mean over seeds {', '.join(map(str, seeds))} of each run's ratio to `exclusive` "
            f"({jobs} jobs per run, 4 × DGX-1 V100):\n\n" + "\n".join(lines) + "\n")
    return text, raw


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
    if "tabrizian" in only:
        only |= {sc.name for sc in SCENARIOS if sc.name.startswith("tabrizian")}
        only |= {"colocation-sweep"}
    colocation_rows: list[str] = []
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
        print(f"== {sc.name}: {workload} on {nodes or 'its'} x {sc.topology or 'own cluster'}",
              file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        results, _ = simulate(
            sc.topology, workload, list(sc.policies), nodes=nodes, seed=args.seed, out=out,
            progress=lambda line: print("   " + line, file=sys.stderr, flush=True))
        took = time.perf_counter() - t0
        md = (out / "summary.md").read_text().split("\n", 2)[2]
        where = (f"--topology {sc.topology} " if sc.topology else "") + (
            f"--nodes {nodes} " if nodes else "")
        plots = (f"[JCT CDF](sim/{sc.name}/jct_cdf.png), [makespan](sim/{sc.name}/makespan.png)"
                 if sc.policies != tuple(POLICIES) else
                 f"[EffBW](sim/{sc.name}/effbw_boxplot.png), "
                 f"[queueing CDF](sim/{sc.name}/queueing_cdf.png), "
                 f"[fragmentation](sim/{sc.name}/fragmentation.png)")
        parts += [f"### {sc.title}", "",
                  f"`gputopo simulate {where}--workload {workload} --policies "
                  f"{','.join(sc.policies)} --seed {args.seed} --out "
                  f"benchmarks/results/sim/{sc.name}` ({took:.0f} s). Plots: {plots}.", "",
                  md, ""]
        if sc.policies == tuple(COLOCATION_POLICIES):
            colocation_rows += _colocation_row(sc.name, results)

    if colocation_rows or "colocation-sweep" in only or (not only):
        colo = [
            "# Co-location (Tabrizian 2020): simulated",
            "",
            f"Generated by `.venv/bin/python -m benchmarks.run_all --only tabrizian"
            f"{' --quick' if args.quick else ''}` (seed {args.seed}); how close this comes to "
            "the thesis and why: `docs/simulator.md`. Each cell: value (ratio to `exclusive`, "
            "FIFO with every job alone on its GPU). JCT = completion − start (§6), seconds.",
            "",
            "| workload | policy | makespan | JCT median | JCT p95 | queueing mean |",
            "|---|---|---:|---:|---:|---:|",
            *colocation_rows,
            "",
        ]
        if not only or "colocation-sweep" in only:
            print("== colocation-sweep", file=sys.stderr, flush=True)
            sweep_md, sweep_raw = _sweep(args.quick)
            (RESULTS / "colocation_sweep.json").write_text(json.dumps(sweep_raw, indent=1)
                                                           + "\n")
            colo += ["## The mixed stream at several loads", "", sweep_md]
        COLOCATION.write_text("\n".join(colo) + "\n")
        parts += ["## Co-location", "", *colo[2:]]

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
    if only:  # a partial run must not replace the full report
        print("\n".join(parts))
        return
    REPORT.write_text("\n".join(parts) + "\n")
    print(f"wrote {REPORT.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
