"""ANDREAS in simulation: the cost of FIFO, EDF, PS (with ANDREAS' configuration rule and, as
``-fastest``, with the fastest configuration), ``andreas`` and ``andreas-paper`` on §V-B's two
scenarios at N = 10, 50 and 100 nodes, a load sweep, Appendix B's ARMIDA run, each workload's
energy floor, and the planner's time per rescheduling point.

For each scenario and N it runs ``gputopo simulate --workload andreas-s<case> --nodes N
--policies fifo,edf,ps,andreas,andreas-paper --seed S`` (and the ``-fastest`` baselines) for a
few seeds (N = 10: seeds 1-3,
N = 50 and 100: seed 1; the paper reports averages over instances), several simulations at a
time in separate processes (``--workers``), keeps the outputs of the first seed below N = 100
under ``benchmarks/results/sim/andreas-s<case>-n<N>/`` and writes every figure to
``benchmarks/results/planner.json``. The tables printed (and copied into REPORT.md by
``benchmarks/run_all.py``) give the mean total cost per policy, ``andreas``'s reduction
against each, and the plan time per rescheduling point (p50 / p99 / max, ms) of ``andreas``.

Run: ``.venv/bin/python -m benchmarks.bench_planner`` (full: its longest simulation, N = 100
with ``andreas``, takes most of an hour on a shared 2-core machine) or ``--quick`` (N = 4 and 10,
one seed, 200 iterations). Plan times are wall-clock in a process that shares the machine with
the other simulations: an upper bound of what a planner alone would take.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
SIM = RESULTS / "sim"
#: Each finished simulation's figures, so that an interrupted run resumes where it stopped.
UNITS = Path(os.environ.get("GPUTOPO_BENCH_UNITS", "/tmp/gputopo-bench-planner"))
#: The policies of one simulation unit below N = 100 (the unit's name lists them).
RUN = ["fifo", "edf", "ps", "andreas", "andreas-paper"]
#: The first-principle variants (fastest configuration, no energy model): a unit of their own
#: (they plan in microseconds), so that adding them re-used the units of ``RUN`` already run.
FASTEST = ["fifo-fastest", "edf-fastest", "ps-fastest"]
#: Every policy in the tables.
POLICIES = ["fifo", "edf", "ps", *FASTEST, "andreas", "andreas-paper"]
FULL = {10: [1, 2, 3], 50: [1], 100: [1]}
#: The load sweep (§V-B does not give the arrival rate relative to capacity; ours is 1.0):
#: (scenario, N, load) -> seeds.
SWEEP = {(1, 10, 1.3): [1, 2, 3], (1, 10, 1.6): [1, 2, 3], (2, 10, 1.3): [1, 2, 3],
         (2, 10, 1.6): [1, 2, 3], (2, 50, 1.3): [1]}
#: From this N up, each policy is its own unit of work (and no outputs are written).
SPLIT_AT = 100
#: The policies run from N = 100 up, each its own unit.
POLICIES_AT_SPLIT = ["fifo", "edf", "ps", "andreas", "andreas-paper"]
#: The policies of the load sweep from N = 50 up (one unit; andreas-paper only below).
SWEEP_LARGE = ["fifo", "edf", "ps", "andreas"]
Task = tuple[str, int | None, int, list[str], int, str | None]
QUICK = {4: [1], 10: [1]}
#: ANDREAS Table III (EUR): the ARMIDA validation's measured and predicted energy cost.
PAPER_ARMIDA = {"real_eur": 0.95111, "predicted_eur": 1.08438}


def _pct(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else 0.0


def _stats(res: list[Any]) -> dict[str, Any]:
    """Late jobs, preemptions and plan-time quantiles (ms) per policy of one simulation."""
    return {
        "late_jobs": {r.policy: sum(1 for o in r.outcomes if o.tardiness_s > 0) for r in res},
        "preemptions": {r.policy: sum(o.preemptions for o in r.outcomes) for r in res},
        "plan_ms": {r.policy: {"p50": _pct(r.plan_ms, 50), "p99": _pct(r.plan_ms, 99),
                               "max": max(r.plan_ms, default=0.0), "points": len(r.plan_ms)}
                    for r in res},
    }


def _unit(task: Task) -> dict[str, Any]:
    """One simulation (run in a worker process): workload, N, seed, policies, MaxIt_RG and
    the output directory (None: write nothing)."""
    from simulator.planning_run import simulate_planning
    from topology.planning.andreas import PlannerSettings

    workload, n, seed, policies, iterations, dest = task
    done = UNITS / f"{workload}-n{n}-seed{seed}-{'+'.join(policies)}-it{iterations}.json"
    if done.is_file():  # finished by an earlier, interrupted run
        return dict(json.loads(done.read_text()))
    t0 = time.perf_counter()
    res, summ = simulate_planning(
        workload, policies, nodes=n, seed=seed, out=dest, make_plots=dest is not None,
        settings=PlannerSettings(max_iterations=iterations, seed=seed))
    print(f"== {workload} N={n} seed {seed} {','.join(policies)} "
          f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    result = {"summary": summ, **_stats(res)}
    done.parent.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(result))
    return result


def _merged(done: dict[int, dict[str, Any]], keys: list[tuple[int, int, float, int]],
            key: tuple[int, int, float, int]) -> dict[str, Any]:
    """The figures of every unit of one (scenario, N, load, seed), merged by policy."""
    merged: dict[str, Any] = {"seed": key[3], "summary": {}, "late_jobs": {},
                              "preemptions": {}, "plan_ms": {}}
    for k, unit_key in enumerate(keys):
        if unit_key == key:
            for field in ("summary", "late_jobs", "preemptions", "plan_ms"):
                merged[field].update({p: v for p, v in done[k][field].items()
                                      if p in POLICIES})
    return merged


def _floor(workload: str, nodes: int, seeds: list[int]) -> float:
    """Mean over ``seeds`` of the workload's energy floor, EUR (no policy costs less:
    :meth:`simulator.planning_workloads.PlanningWorkload.energy_floor_eur`)."""
    from simulator.planning_workloads import load_planning_workload

    return statistics.fmean(load_planning_workload(workload, seed=s, nodes=nodes)
                            .energy_floor_eur() for s in seeds)


def run(quick: bool, workers: int) -> dict[str, Any]:
    """Every simulation of the benchmark, ``workers`` at a time (separate processes: each
    simulation is single-threaded, and the results do not depend on how many run at once).

    The first seed of each (scenario, N) writes its outputs under ``benchmarks/results/sim/``
    (one directory per scenario, all policies); at N = 100 each policy runs as its own unit
    (the longest runs, split so that they overlap) and writes nothing.
    """
    from concurrent.futures import ProcessPoolExecutor

    sizes = QUICK if quick else FULL
    iterations = 200 if quick else 1000
    base = None if quick else SIM  # quick runs keep the committed full-size outputs

    def dest(name: str) -> str | None:
        return str(base / name) if base else None

    tasks: list[Task] = [("andreas-armida", None, 1, RUN, iterations, dest("andreas-armida")),
                         ("andreas-armida", None, 1, FASTEST, iterations, None)]
    keys: list[tuple[int, int, float, int]] = [(0, 0, 1.0, 0), (0, 0, 1.0, 0)]
    for case in (1, 2):
        for n, seeds in sizes.items():
            for seed in seeds:
                if n >= SPLIT_AT:
                    units = [[p] for p in POLICIES_AT_SPLIT]
                else:
                    units = [RUN]
                for policies in [*units, FASTEST]:
                    first = dest(f"andreas-s{case}-n{n}") if (
                        seed == seeds[0] and policies is RUN) else None
                    tasks.append((f"andreas-s{case}", n, seed, policies, iterations, first))
                    keys.append((case, n, 1.0, seed))
    sweep = {} if quick else SWEEP
    for (case, n, load), seeds in sweep.items():
        for seed in seeds:
            for policies in (RUN if n < SPLIT_AT // 2 else SWEEP_LARGE, FASTEST):
                tasks.append((f"andreas-s{case}:load={load}", n, seed, policies, iterations,
                              None))
                keys.append((case, n, load, seed))
    # longest first (N, then andreas before the baselines), so the pool ends together
    order = sorted(range(len(tasks)), key=lambda k: (-(tasks[k][1] or 0),
                                                     "andreas" not in tasks[k][3][0]))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        done = dict(zip(order, pool.map(_unit, [tasks[k] for k in order]), strict=True))
    out: dict[str, Any] = {"iterations": iterations, "scenarios": [], "sweep": [],
                           "armida": {}}
    arm = _merged(done, keys, (0, 0, 1.0, 0))
    out["armida"] = {
        "summary": arm["summary"], "paper": PAPER_ARMIDA, "late_jobs": arm["late_jobs"],
        "preemptions": arm["preemptions"],
        "andreas_energy_vs_paper_predicted":
            arm["summary"]["andreas"]["energy_cost_eur"] / PAPER_ARMIDA["predicted_eur"],
    }
    for case in (1, 2):
        for n, seeds in sizes.items():
            runs = [_merged(done, keys, (case, n, 1.0, seed)) for seed in seeds]
            out["scenarios"].append({"case": case, "nodes": n, "jobs": 10 * n, "load": 1.0,
                                     "runs": runs,
                                     "energy_floor_eur": _floor(f"andreas-s{case}", n, seeds)})
    for (case, n, load), seeds in sweep.items():
        runs = [_merged(done, keys, (case, n, load, seed)) for seed in seeds]
        out["sweep"].append({"case": case, "nodes": n, "jobs": 10 * n, "load": load,
                             "runs": runs, "energy_floor_eur": _floor(
                                 f"andreas-s{case}:load={load}", n, seeds)})
    return out


def mean_costs(entry: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Mean energy / tardiness / total cost over the seeds of one scenario and N (NaN for a
    policy that did not run there)."""
    out: dict[str, dict[str, float]] = {}
    for p in POLICIES:
        if any(p not in r["summary"] for r in entry["runs"]):
            out[p] = dict.fromkeys(("energy_cost_eur", "tardiness_cost_eur", "total_cost_eur",
                                    "late_jobs", "preemptions"), math.nan)
            continue
        rows = [r["summary"][p] for r in entry["runs"]]
        out[p] = {k: statistics.fmean(row[k] for row in rows)
                  for k in ("energy_cost_eur", "tardiness_cost_eur", "total_cost_eur")}
        out[p]["late_jobs"] = statistics.fmean(r["late_jobs"][p] for r in entry["runs"])
        out[p]["preemptions"] = statistics.fmean(r["preemptions"][p] for r in entry["runs"])
    return out


def _num(x: float, spec: str) -> str:
    """``x`` formatted, or a dash where the policy did not run (NaN)."""
    return "–" if math.isnan(x) else format(x, spec)


def _red(ref: float, value: float) -> str:
    """(ref − value) / ref in percent, or a dash."""
    if ref <= 0 or math.isnan(ref) or math.isnan(value):
        return "–"
    return f"{100 * (ref - value) / ref:.1f} %"


def tables(doc: dict[str, Any]) -> str:
    """The Markdown tables printed at the end."""
    lines = ["ANDREAS Appendix B (ARMIDA, Table V): energy cost, EUR (paper, Table III: "
             f"predicted {PAPER_ARMIDA['predicted_eur']}, measured {PAPER_ARMIDA['real_eur']})",
             "", "| policy | energy € | tardiness € | late jobs | preemptions |",
             "|---|---:|---:|---:|---:|"]
    arm = doc["armida"]
    for p in POLICIES:
        s = arm["summary"][p]
        lines.append(f"| {p} | {s['energy_cost_eur']:.3f} | {s['tardiness_cost_eur']:.3f} | "
                     f"{arm['late_jobs'][p]}/8 | {arm['preemptions'][p]} |")
    lines += ["", "§V-B, baselines with Algorithm 1's configuration rule (cheapest on time, else "
              "fastest): mean total cost (energy + tardiness), EUR, and andreas's reduction "
              "against each policy ((other − andreas) / other); seeds per N in "
              "benchmarks/results/planner.json. Floor: the energy no policy can go below "
              "(every job on its cheapest configuration on fully busy nodes), and so the most "
              "any policy could save against EDF", "",
              "| scenario | N | jobs | seeds | fifo € | edf € | ps € | andreas € | "
              "andreas-paper € | vs fifo | vs edf | vs ps | paper vs andreas | paper vs edf | "
              "floor € | floor vs edf |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    def row(e: dict[str, Any], head: list[str], costs: tuple[str, ...],
            against: tuple[str, ...], tail: list[str]) -> str:
        """One table row: ``head`` cells, the mean total cost of ``costs``, andreas's
        reduction against each of ``against``, then ``tail``."""
        tot = {p: mean_costs(e)[p]["total_cost_eur"] for p in POLICIES}
        return "| " + " | ".join(
            [*head, *(_num(tot[p], ".2f") for p in costs),
             *(_red(tot[p], tot["andreas"]) for p in against), *tail]) + " |"

    def late(e: dict[str, Any], policies: tuple[str, ...]) -> str:
        m = mean_costs(e)
        return "/".join(_num(m[p]["late_jobs"], ".0f") for p in policies)

    rule = ("fifo", "edf", "ps")
    for e in doc["scenarios"]:
        m = mean_costs(e)
        edf, stable = m["edf"]["total_cost_eur"], m["andreas-paper"]["total_cost_eur"]
        lines.append(row(e, [f"s{e['case']}", str(e["nodes"]), str(e["jobs"]),
                             str(len(e["runs"]))], (*rule, "andreas", "andreas-paper"), rule,
                         [_red(m["andreas"]["total_cost_eur"], stable), _red(edf, stable),
                          f"{e['energy_floor_eur']:.2f}", _red(edf, e["energy_floor_eur"])]))
    lines += ["", "§V-B, first-principle baselines (the fastest configuration the free GPUs "
              "allow, no energy model): mean total cost, EUR, andreas's reduction against "
              "each, and late jobs", "",
              "| scenario | N | fifo-fastest € | edf-fastest € | ps-fastest € | andreas € | "
              "vs fifo-fastest | vs edf-fastest | vs ps-fastest | late fifo/edf/ps-fastest |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    fastest = tuple(FASTEST)
    for e in doc["scenarios"]:
        lines.append(row(e, [f"s{e['case']}", str(e["nodes"])], (*fastest, "andreas"), fastest,
                         [late(e, fastest)]))
    if doc.get("sweep"):
        lines += ["", "Load sweep (arrival rate × capacity; the tables above: 1.0): mean total "
                  "cost, EUR, andreas's reduction against each baseline, and EDF's late jobs",
                  "", "| scenario | N | load | seeds | fifo € | edf € | ps € | edf-fastest € | "
                  "andreas € | andreas-paper € | vs fifo | vs edf | vs ps | vs edf-fastest | "
                  "late edf / andreas |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for e in doc["sweep"]:
            lines.append(row(e, [f"s{e['case']}", str(e["nodes"]), str(e["load"]),
                                 str(len(e["runs"]))],
                             (*rule, "edf-fastest", "andreas", "andreas-paper"),
                             (*rule, "edf-fastest"), [late(e, ("edf", "andreas"))]))
    shown = ("fifo", "edf", "ps", "andreas", "andreas-paper")
    lines += ["", "Energy only (mean, EUR), late jobs and preemptions (mean per run):", "",
              "| scenario | N | " + " | ".join(f"{p} energy €" for p in shown)
              + " | late fifo/edf/ps/andreas/stable | preemptions andreas / stable |",
              "|---|---:|" + "---:|" * (len(shown) + 2)]
    for e in doc["scenarios"]:
        m = mean_costs(e)
        lines.append(
            f"| s{e['case']} | {e['nodes']} | "
            + " | ".join(_num(m[p]['energy_cost_eur'], ".2f") for p in shown) + " | "
            + "/".join(_num(m[p]['late_jobs'], ".0f") for p in shown) + " | "
            + f"{_num(m['andreas']['preemptions'], '.0f')} / "
            + f"{_num(m['andreas-paper']['preemptions'], '.0f')} |")
    lines += ["", "Plan time per rescheduling point of andreas (first seed), ms "
              f"(MaxIt_RG = {doc['iterations']}; in-process, one core of a shared 2-core "
              "machine):", "", "| scenario | N | points | p50 | p99 | max |",
              "|---|---:|---:|---:|---:|---:|"]
    for e in doc["scenarios"]:
        pm = e["runs"][0]["plan_ms"]["andreas"]
        lines.append(f"| s{e['case']} | {e['nodes']} | {pm['points']} | {pm['p50']:.1f} | "
                     f"{pm['p99']:.1f} | {pm['max']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 4 and 10, one seed")
    ap.add_argument("--workers", type=int, default=max(2, (os.cpu_count() or 1) * 2),
                    help="simulations run at once (default: 2 x CPUs)")
    args = ap.parse_args()
    if args.workers < 1:
        ap.error("--workers must be at least 1")
    SIM.mkdir(parents=True, exist_ok=True)
    doc = run(args.quick, args.workers)
    text = tables(doc)
    if not args.quick:  # a quick run only prints: the committed results stay full-size
        (RESULTS / "planner.json").write_text(json.dumps(doc, indent=1) + "\n")
        (RESULTS / "planner.md").write_text(
            "# ANDREAS planner in simulation\n\nGenerated by `.venv/bin/python -m "
            "benchmarks.bench_planner`.\n\n" + text)
    print(text)


if __name__ == "__main__":
    main()
