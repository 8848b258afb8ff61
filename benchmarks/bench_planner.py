"""ANDREAS in simulation: cost and plan time of gputopo's planner (``andreas``), Algorithm 1 as
published (``andreas-paper``) and the first-principle baselines FIFO, EDF, PS (with ANDREAS'
configuration rule and, as ``-fastest``, with the fastest configuration) on §V-B's two
scenarios at N = 10, 50, 100 and 200 nodes (J = 10 N jobs) with seeds 1-3, Appendix B's ARMIDA
run, each workload's energy floor, what each of ``andreas``'s changes to the paper is worth
against the floor, and the plan time per rescheduling point against the implementation before
issue 22 (``benchmarks/andreas_reference.py``) on the same captured points.

Parts (``--only``, comma-separated; default all):

* ``costs`` — every (scenario, N, seed) simulated once per policy (``gputopo simulate
  --workload andreas-s<case> --nodes N --seed S``), several simulations at a time in separate
  processes (``--workers``). ``andreas-paper`` runs every one of MaxIt_RG = 1,000 iterations,
  about 1 s per point at N = 100: it runs at N = 10. The first seed's outputs at N = 10
  are kept under ``benchmarks/results/sim/andreas-s<case>-n10/``.
* ``ablation`` — the paper's Algorithm 1 with gputopo's changes added one at a time (early
  stopping, the move charge, shared idle power, the energy term over every job, the local
  search, the pressing incumbent, the shadow price = ``andreas``), at N = 10
  (``--ablation-sizes``), seeds 1-3; and the vacancy horizon and move charge around their
  defaults at N = 10.
* ``timing`` — ``andreas``'s rescheduling points at N = 100 (seed 1, both scenarios) are
  captured from its simulation; on every k-th of them, in this one process and one after the
  other, the reference (the shipped ``andreas`` before issue 22, MaxIt_RG = 1,000), the fast
  implementation with the paper's settings (the same plans) and ``andreas`` plan the same
  input; p50 / p99 of each (wall clock, and ``andreas``'s CPU time) and the ratios, with the
  load average before and after. The captured points are frozen out of the garbage collector
  (``gc.freeze``): they are the benchmark's data, and a full collection scanning them inside
  a timed call is not the planner's time. It also counts how often early stopping changed a
  plan (``andreas`` against itself with ``patience=None``).
* ``armida`` — Appendix B's eight jobs on ARMIDA.
* ``pressing`` (only when named) — on every 5th point the ``timing`` part captured,
  ``andreas`` with and without the pressing incumbent (``pressing_incumbent``): how often it
  changed the plan, how often f_OBJ (after the local search) went down or up and by how much,
  the local search's changes and the CPU time of both.

Run: ``nice .venv/bin/python -m benchmarks.bench_planner`` (a few hours of CPU: run it in the
background; ``--quick`` is N = 4 and 10, one seed, 200 iterations, and only prints). Each
finished simulation is kept under ``GPUTOPO_BENCH_UNITS`` (``/tmp/gputopo-bench-planner``),
keyed by the planner's source, so an interrupted run resumes. Plan times inside the
simulations are wall-clock in processes that share the machine with the other simulations;
the ``timing`` part's ratios are the comparable figures.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import pickle
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
SIM = RESULTS / "sim"
ROOT = Path(__file__).resolve().parent.parent
UNITS = Path(os.environ.get("GPUTOPO_BENCH_UNITS", "/tmp/gputopo-bench-planner"))
BASELINES = ["fifo", "edf", "ps"]
FASTEST = ["fifo-fastest", "edf-fastest", "ps-fastest"]
POLICIES = [*BASELINES, *FASTEST, "andreas", "andreas-paper"]
SIZES = {10: [1, 2, 3], 50: [1, 2, 3], 100: [1, 2, 3], 200: [1, 2, 3]}
QUICK = {4: [1], 10: [1]}
#: ``andreas-paper`` (every one of 1,000 iterations) runs up to this N.
PAPER_UP_TO = 10
#: Load sweep (the arrival rate relative to capacity; the tables: 1.0): (case, N, load).
SWEEP = [(1, 10, 1.3), (1, 10, 1.6), (2, 10, 1.3), (2, 10, 1.6)]
#: ANDREAS Table III (EUR): the ARMIDA validation's measured and predicted energy cost.
PAPER_ARMIDA = {"real_eur": 0.95111, "predicted_eur": 1.08438}
#: The timing part: N, and every how many-th captured point is timed.
TIMING_N = 100
TIMING_EVERY = 40
#: The pressing part: every how many-th captured point is planned with and without it.
PRESSING_EVERY = 5


def ablation_settings() -> dict[str, Any]:
    """The ablation ladder and the tuning sweeps: name -> PlannerSettings (seed set per run)."""
    from topology.planning.andreas import PlannerSettings

    paper = PlannerSettings.paper()
    ladder = {
        "paper": paper,
        "+early stop": replace(paper, patience=50),
        "+move charge": replace(paper, patience=50, move_penalty_eur=0.02),
        "+shared idle": replace(paper, patience=50, move_penalty_eur=0.02, shared_idle=True),
        "+energy all": replace(PlannerSettings(), local_search=False,
                               pressing_incumbent=False, shadow_window_s=0.0),
        "+local search": replace(PlannerSettings(), pressing_incumbent=False,
                                 shadow_window_s=0.0),
        "+pressing incumbent": replace(PlannerSettings(), shadow_window_s=0.0),
        "+shadow price (andreas)": PlannerSettings(),
    }
    sweep = {f"vacancy {v:g} s": PlannerSettings(vacancy_s=v)
             for v in (300.0, 900.0, 1800.0, 3600.0, 7200.0)}
    sweep |= {f"move charge {m:g} EUR": PlannerSettings(move_penalty_eur=m)
              for m in (0.005, 0.01, 0.02, 0.04)}
    return {**ladder, **sweep}


LADDER = ["paper", "+early stop", "+move charge", "+shared idle", "+energy all",
          "+local search", "+pressing incumbent", "+shadow price (andreas)"]


def _version() -> str:
    """A hash of the planner's source: finished units of an older planner are not reused."""
    h = hashlib.sha256()
    for rel in ("topology/planning", "simulator/planning_engine.py",
                "simulator/planning_workloads.py", "simulator/planning_report.py"):
        p = ROOT / rel
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _pct(values: Sequence[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else 0.0


# ------------------------------------------------------------------------------ simulations

#: One simulation: (workload spec, N or None, seed, policy, variant or "", MaxIt_RG, unused).
Task = tuple[str, int | None, int, str, str, int, str | None]


def _unit(task: Task) -> dict[str, Any]:
    """Run one simulation (in a worker process) or read its result from an earlier run."""
    from simulator.planning_engine import PlanningSimulation
    from simulator.planning_report import details, summary
    from simulator.planning_workloads import load_planning_workload
    from topology.planning.andreas import PlannerSettings

    workload, n, seed, policy, variant, iterations, _ = task
    name = f"{workload}-n{n}-seed{seed}-{policy}-{variant or 'default'}-it{iterations}"
    done = UNITS / _version() / (name.replace(" ", "_").replace("/", "_") + ".json")
    if done.is_file():
        return dict(json.loads(done.read_text()))
    base = ablation_settings()[variant] if variant else PlannerSettings()
    s = replace(base, seed=seed, max_iterations=iterations)
    wl = load_planning_workload(workload, seed=seed, nodes=n)
    t0 = time.perf_counter()
    res = PlanningSimulation(wl, policy, settings=s).run()
    print(f"== {name} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    out = {"summary": summary(res), "details": details(res),
           "late": sum(1 for o in res.outcomes if o.tardiness_s > 0),
           "plan_ms": {"p50": _pct(res.plan_ms, 50), "p99": _pct(res.plan_ms, 99),
                       "max": max(res.plan_ms, default=0.0), "points": len(res.plan_ms)},
           "wall_s": res.wall_s}
    done.parent.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(out))
    return out


def _run_all(tasks: list[Task], workers: int) -> list[dict[str, Any]]:
    """Every task, ``workers`` at a time, longest (largest N, andreas first) first."""
    from concurrent.futures import ProcessPoolExecutor

    order = sorted(range(len(tasks)), key=lambda k: (-(tasks[k][1] or 0),
                                                     not tasks[k][3].startswith("andreas")))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        done = dict(zip(order, pool.map(_unit, [tasks[k] for k in order]), strict=True))
    return [done[k] for k in range(len(tasks))]


def _floor(workload: str, nodes: int | None, seed: int) -> float:
    from simulator.planning_workloads import load_planning_workload

    return load_planning_workload(workload, seed=seed, nodes=nodes).energy_floor_eur()


def costs(sizes: dict[int, list[int]], iterations: int, workers: int,
          keep_outputs: bool) -> dict[str, Any]:
    """The ``costs`` part: per (scenario, N) the runs of every seed, by policy."""
    tasks: list[Task] = []
    keys: list[tuple[int, int, float, int]] = []
    for case in (1, 2):
        for n, seeds in sizes.items():
            for seed in seeds:
                for p in POLICIES:
                    if p == "andreas-paper" and n > PAPER_UP_TO:
                        continue
                    tasks.append((f"andreas-s{case}", n, seed, p, "", iterations, None))
                    keys.append((case, n, 1.0, seed))
    for case, n, load in SWEEP if keep_outputs and 10 in sizes else []:
        for seed in (1, 2, 3):
            for p in ("edf", "edf-fastest", "andreas"):
                tasks.append((f"andreas-s{case}:load={load}", n, seed, p, "", iterations, None))
                keys.append((case, n, load, seed))
    results = _run_all(tasks, workers)
    out: dict[str, Any] = {"scenarios": [], "sweep": []}
    groups: dict[tuple[int, int, float], dict[int, dict[str, Any]]] = {}
    for (case, n, load, seed), task, res in zip(keys, tasks, results, strict=True):
        groups.setdefault((case, n, load), {}).setdefault(seed, {})[task[3]] = res
    for (case, n, load), by_seed in groups.items():
        spec = f"andreas-s{case}" + (f":load={load}" if load != 1.0 else "")
        entry = {"case": case, "nodes": n, "jobs": 10 * n, "load": load,
                 "seeds": sorted(by_seed),
                 "floor_eur": {s: _floor(spec, n, s) for s in sorted(by_seed)},
                 "runs": {s: by_seed[s] for s in sorted(by_seed)}}
        out["scenarios" if load == 1.0 else "sweep"].append(entry)
    if keep_outputs and 10 in sizes:  # the first seed's outputs at N = 10, every policy
        for case in (1, 2):
            _write_outputs(case, 10, sizes[10][0], iterations)
    return out


def _write_outputs(case: int, n: int, seed: int, iterations: int) -> None:
    """``benchmarks/results/sim/andreas-s<case>-n<N>/``: summary.json, summary.md,
    details.json, costs.png (and Gantt charts at N <= 12) of every policy, first seed."""
    import shutil

    from simulator.planning_run import simulate_planning
    from topology.planning.andreas import PlannerSettings

    dest = SIM / f"andreas-s{case}-n{n}"
    if dest.exists():
        shutil.rmtree(dest)
    simulate_planning(f"andreas-s{case}", [p for p in POLICIES
                                           if p != "andreas-paper" or n <= PAPER_UP_TO],
                      nodes=n, seed=seed, out=dest,
                      settings=PlannerSettings(max_iterations=iterations, seed=seed))
    for f in dest.glob("*.csv"):  # per-job rows: large, and replayed from workload.json
        f.unlink()


def _merge_costs(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """``new``'s rows, and those of ``old`` for (scenario, N, load) it did not run."""
    if not old:
        return new
    out: dict[str, Any] = {}
    for part in ("scenarios", "sweep"):
        ran = {(e["case"], e["nodes"], e["load"]) for e in new.get(part, [])}
        rows = [e for e in old.get(part, []) if (e["case"], e["nodes"], e["load"]) not in ran]
        out[part] = sorted(rows + new.get(part, []),
                           key=lambda e: (e["case"], e["nodes"], e["load"]))
    return out


def ablation(iterations: int, workers: int, sizes: Sequence[int]) -> dict[str, Any]:
    """The ``ablation`` part: the ladder at ``sizes`` and the tuning sweeps at N = 10."""
    names = list(ablation_settings())
    tasks: list[Task] = []
    for case in (1, 2):
        for n in sizes:
            for seed in (1, 2, 3):
                for v in names:
                    if v not in LADDER and n != 10:
                        continue
                    if v == "paper" and n > PAPER_UP_TO:
                        continue
                    tasks.append((f"andreas-s{case}", n, seed, "andreas", v, iterations, None))
    results = _run_all(tasks, workers)
    out: dict[str, Any] = {}
    for task, res in zip(tasks, results, strict=True):
        case = int(task[0][-1])
        key = f"s{case}-n{task[1]}"
        out.setdefault(key, {}).setdefault(task[4], {})[task[2]] = res
    return out


def armida(iterations: int) -> dict[str, Any]:
    from simulator.planning_run import simulate_planning
    from topology.planning.andreas import PlannerSettings

    dest = SIM / "andreas-armida"
    res, summ = simulate_planning("andreas-armida", POLICIES, seed=1, out=dest,
                                  settings=PlannerSettings(max_iterations=iterations, seed=1))
    for f in dest.glob("*.csv"):
        f.unlink()
    return {"summary": summ, "paper": PAPER_ARMIDA,
            "late_jobs": {r.policy: sum(1 for o in r.outcomes if o.tardiness_s > 0)
                          for r in res},
            "preemptions": {r.policy: sum(o.preemptions for o in r.outcomes) for r in res}}


# ------------------------------------------------------------------------------ timing


def capture(case: int, n: int, seed: int, iterations: int) -> list[tuple[float, Any, Any]]:
    """The rescheduling points (T_c, nodes, jobs) of ``andreas`` on andreas-s<case> at N."""
    import simulator.planning_engine as engine
    from simulator.planning_workloads import load_planning_workload
    from topology.planning.andreas import PlannerSettings, plan

    path = UNITS / _version() / f"points-s{case}-n{n}-seed{seed}-it{iterations}.pickle"
    if path.is_file():
        return list(pickle.loads(path.read_bytes()))
    points: list[tuple[float, Any, Any]] = []
    real: Callable[..., Any] = plan

    def recording(now: float, nodes: Any, jobs: Any, s: Any, cache: Any = None) -> Any:
        points.append((now, list(nodes), list(jobs)))
        return real(now, nodes, jobs, s, cache=cache)

    setattr(engine, "plan", recording)  # noqa: B010 (the simulator's own name for plan)
    try:
        wl = load_planning_workload(f"andreas-s{case}", seed=seed, nodes=n)
        engine.PlanningSimulation(wl, "andreas", settings=PlannerSettings(
            max_iterations=iterations, seed=seed)).run()
    finally:
        setattr(engine, "plan", real)  # noqa: B010
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(points))
    return points


def _where(p: Any) -> tuple[str, int] | None:
    """A placement of either implementation as (node, GPUs), or None."""
    return None if p is None else (p.node, p.gpus)


def timing(n: int, every: int, iterations: int) -> dict[str, Any]:
    """The ``timing`` part (module docstring), per scenario."""
    from benchmarks import andreas_reference as ref
    from topology.planning.andreas import PlanCache, PlannerSettings, plan

    out: dict[str, Any] = {"nodes": n, "every": every, "iterations": iterations,
                           "load_before": os.getloadavg()}
    for case in (1, 2):
        points = capture(case, n, 1, iterations)
        captured, timed = len(points), points[::every]
        del points
        # the captured points (millions of objects) are the benchmark's, not the planner's:
        # out of the collector's way, so a full collection does not scan them mid-plan
        gc.collect()
        gc.freeze()
        cache = PlanCache()
        ours, paper, old = [], [], []
        cpu: dict[str, list[float]] = {"reference": [], "paper": [], "andreas": []}
        changed = differs = 0
        f_gap: list[float] = []
        jobs_n: list[int] = []
        s = PlannerSettings(max_iterations=iterations, seed=1)
        sp = PlannerSettings.paper(max_iterations=iterations, seed=1)
        s_full = replace(s, patience=None)
        rs = ref.PlannerSettings(max_iterations=iterations, seed=1)
        for now, nodes, jobs in timed:
            rn = [ref.PlanNode(x.name, x.gpu_model, x.gpus, x.power) for x in nodes]
            rj = [ref.PlanJob(j.id, j.due_s, j.weight_eur_per_h, j.remaining_epochs,
                              j.epoch_time_s, None if j.current is None else
                              ref.Placement(j.current.node, j.current.gpus), j.submitted_s,
                              j.progress_s) for j in jobs]
            t0, c0 = time.perf_counter(), time.process_time()
            a = ref.plan(now, rn, rj, rs)
            t1, c1 = time.perf_counter(), time.process_time()
            b = plan(now, nodes, jobs, sp, cache=cache)
            t2, c2 = time.perf_counter(), time.process_time()
            c = plan(now, nodes, jobs, s, cache=cache)
            t3, c3 = time.perf_counter(), time.process_time()
            old.append(t1 - t0)
            paper.append(t2 - t1)
            ours.append(t3 - t2)
            cpu["reference"].append(c1 - c0)
            cpu["paper"].append(c2 - c1)
            cpu["andreas"].append(c3 - c2)
            jobs_n.append(len(jobs))
            differs += any(_where(d.placement) != _where(b.decisions[k].placement)
                           for k, d in a.decisions.items())
            full = plan(now, nodes, jobs, s_full, cache=cache)
            if full.decisions != c.decisions:
                changed += 1
            f_gap.append(c.objective.selection_eur - full.objective.selection_eur)
        gc.unfreeze()
        out[f"s{case}"] = {
            "points_captured": captured, "points_timed": len(ours),
            "jobs_p50": _pct(jobs_n, 50), "jobs_max": max(jobs_n),
            "ms": {k: {"p50": 1000 * _pct(v, 50), "p99": 1000 * _pct(v, 99),
                       "mean": 1000 * statistics.fmean(v)}
                   for k, v in (("reference", old), ("paper", paper), ("andreas", ours))},
            "cpu_ms": {k: {"p50": 1000 * _pct(v, 50), "p99": 1000 * _pct(v, 99),
                           "mean": 1000 * statistics.fmean(v)} for k, v in cpu.items()},
            "paper_differs_from_reference": differs,
            "early_stop_changed_plan": changed,
            "early_stop_f_gap_eur": {"mean": statistics.fmean(f_gap), "max": max(f_gap)},
        }
        print(f"== timing s{case}: {json.dumps(out[f's{case}'])}", file=sys.stderr, flush=True)
    out["load_after"] = os.getloadavg()
    return out



def pressing(n: int, every: int, iterations: int) -> dict[str, Any]:
    """The ``pressing`` part (module docstring): ``andreas`` against itself without the
    pressing incumbent on every ``every``-th captured point, per scenario."""
    from topology.planning.andreas import PlanCache, PlannerSettings, plan

    out: dict[str, Any] = {"nodes": n, "every": every, "iterations": iterations}
    for case in (1, 2):
        points = capture(case, n, 1, iterations)
        timed = points[::every]
        del points
        gc.collect()
        gc.freeze()
        cache = PlanCache()
        s = PlannerSettings(max_iterations=iterations, seed=1)
        off = replace(s, pressing_incumbent=False)
        gap: list[float] = []
        moves = {"on": 0, "off": 0}
        cpu = {"on": 0.0, "off": 0.0}
        changed = 0
        for now, nodes, jobs in timed:
            c0 = time.process_time()
            a = plan(now, nodes, jobs, s, cache=cache)
            c1 = time.process_time()
            b = plan(now, nodes, jobs, off, cache=cache)
            c2 = time.process_time()
            cpu["on"] += c1 - c0
            cpu["off"] += c2 - c1
            moves["on"] += a.local_moves
            moves["off"] += b.local_moves
            changed += a.decisions != b.decisions
            gap.append(a.objective.selection_eur - b.objective.selection_eur)
        gc.unfreeze()
        out[f"s{case}"] = {
            "points": len(gap), "changed_plan": changed,
            "better": sum(g < -1e-9 for g in gap), "worse": sum(g > 1e-9 for g in gap),
            "f_gap_eur": {"mean": statistics.fmean(gap), "min": min(gap), "max": max(gap)},
            "local_moves": moves, "cpu_s": cpu,
        }
        print(f"== pressing s{case}: {json.dumps(out[f's{case}'])}", file=sys.stderr,
              flush=True)
    return out


# ------------------------------------------------------------------------------ tables


def _mean(entry: dict[str, Any], policy: str, key: str) -> float:
    vals = [r[policy]["summary"][key] for r in entry["runs"].values() if policy in r]
    return statistics.fmean(vals) if len(vals) == len(entry["runs"]) else math.nan


def _late(entry: dict[str, Any], policy: str) -> float:
    vals = [r[policy]["late"] for r in entry["runs"].values() if policy in r]
    return statistics.fmean(vals) if len(vals) == len(entry["runs"]) else math.nan


def _num(x: float, spec: str) -> str:
    return "–" if math.isnan(x) else format(x, spec)


def _red(ref: float, value: float) -> str:
    """(ref − value) / ref in percent, or a dash."""
    if math.isnan(ref) or math.isnan(value) or ref <= 0:
        return "–"
    return f"{100 * (ref - value) / ref:.1f} %"


def tables(doc: dict[str, Any]) -> str:
    """The Markdown report."""
    lines: list[str] = []
    if "costs" in doc:
        sc = doc["costs"]["scenarios"]
        lines += [
            "### Cost", "",
            "Mean total cost (energy + tardiness) over the seeds, EUR; `andreas`'s reduction "
            "against each baseline ((baseline − andreas) / baseline); the floor (no policy "
            "can cost less: every job on its cheapest configuration on fully busy nodes), "
            "how far `andreas` is above it, and *of the possible*: the share of EDF's cost "
            "above the floor that `andreas` saves ((EDF − andreas) / (EDF − floor)).", "",
            "| scenario | N | jobs | seeds | FIFO | EDF | PS | andreas-paper | andreas | "
            "vs FIFO | vs EDF | vs PS | paper vs EDF | floor | floor vs EDF | andreas above "
            "floor | of the possible | late EDF / andreas |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
            "---:|---:|"]
        for e in sc:
            t = {p: _mean(e, p, "total_cost_eur") for p in POLICIES}
            floor = statistics.fmean(e["floor_eur"].values())
            edf, ours = t["edf"], t["andreas"]
            possible = (f"{100 * (edf - ours) / (edf - floor):.0f} %"
                        if edf - floor > 0 else "–")
            lines.append(
                f"| s{e['case']} | {e['nodes']} | {e['jobs']} | {len(e['seeds'])} | "
                + " | ".join(_num(t[p], ".2f") for p in (*BASELINES, "andreas-paper",
                                                          "andreas"))
                + " | " + " | ".join(_red(t[p], ours) for p in BASELINES)
                + f" | {_red(edf, t['andreas-paper'])} | {floor:.2f} | {_red(edf, floor)} | "
                f"{100 * (ours - floor) / floor:.1f} % | {possible} | "
                f"{_num(_late(e, 'edf'), '.1f')} / {_num(_late(e, 'andreas'), '.1f')} |")
        lines += ["", "First-principle baselines (the fastest configuration the free GPUs "
                  "allow, no energy model): mean total cost, EUR, and `andreas`'s reduction",
                  "", "| scenario | N | FIFO-fastest | EDF-fastest | PS-fastest | andreas | "
                  "vs FIFO-fastest | vs EDF-fastest | vs PS-fastest |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for e in sc:
            t = {p: _mean(e, p, "total_cost_eur") for p in POLICIES}
            lines.append(f"| s{e['case']} | {e['nodes']} | "
                         + " | ".join(_num(t[p], ".2f") for p in (*FASTEST, "andreas"))
                         + " | " + " | ".join(_red(t[p], t["andreas"]) for p in FASTEST)
                         + " |")
        lines += ["", "Per seed: total cost of EDF and `andreas`, `andreas`'s reduction, "
                  "late jobs, preemptions (moves, resizes and preemptions of running jobs) "
                  "and plan time per rescheduling point of `andreas` in the simulation (wall "
                  "clock, several simulations at once on a shared 2-core machine)", "",
                  "| scenario | N | seed | floor | EDF | andreas | vs EDF | late EDF / andreas "
                  "| preemptions | points | plan p50 ms | plan p99 ms |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for e in sc:
            for seed, r in e["runs"].items():
                a, d = r["andreas"], r["edf"]
                lines.append(
                    f"| s{e['case']} | {e['nodes']} | {seed} | {e['floor_eur'][seed]:.2f} | "
                    f"{d['summary']['total_cost_eur']:.2f} | "
                    f"{a['summary']['total_cost_eur']:.2f} | "
                    f"{_red(d['summary']['total_cost_eur'], a['summary']['total_cost_eur'])}"
                    f" | {d['late']} / {a['late']} | {a['details']['preemptions']} | "
                    f"{a['plan_ms']['points']} | {a['plan_ms']['p50']:.1f} | "
                    f"{a['plan_ms']['p99']:.1f} |")
        if doc["costs"].get("sweep"):
            lines += ["", "Load sweep (arrival rate × capacity; above: 1.0), N = 10, seeds "
                      "1-3: mean total cost, EUR", "",
                      "| scenario | load | EDF | EDF-fastest | andreas | vs EDF | "
                      "vs EDF-fastest | late EDF / andreas |", "|---|---:|---:|---:|---:|---:|"
                      "---:|---:|"]
            for e in doc["costs"]["sweep"]:
                t = {p: _mean(e, p, "total_cost_eur") for p in ("edf", "edf-fastest",
                                                                "andreas")}
                lines.append(f"| s{e['case']} | {e['load']} | {t['edf']:.2f} | "
                             f"{t['edf-fastest']:.2f} | {t['andreas']:.2f} | "
                             f"{_red(t['edf'], t['andreas'])} | "
                             f"{_red(t['edf-fastest'], t['andreas'])} | "
                             f"{_late(e, 'edf'):.1f} / {_late(e, 'andreas'):.1f} |")
    if "ablation" in doc:
        lines += ["", "### Each change against the floor", "",
                  "Algorithm 1 as published, then gputopo's changes added one at a time "
                  "(the last row is `andreas`): mean total cost over seeds 1-3, EUR, its "
                  "distance above the floor and the mean preemptions per run", ""]
        ab = doc["ablation"]
        keys = sorted(ab, key=lambda k: (k[:2], int(k.split("-n")[1])))
        lines += ["| change | " + " | ".join(keys) + " |",
                  "|---|" + "---:|" * len(keys)]
        floors = doc.get("ablation_floor", {})
        for v in LADDER:
            cells = []
            for k in keys:
                runs = ab[k].get(v)
                if not runs:
                    cells.append("–")
                    continue
                tot = statistics.fmean(r["summary"]["total_cost_eur"] for r in runs.values())
                pre = statistics.fmean(r["details"]["preemptions"] for r in runs.values())
                fl = floors.get(k, math.nan)
                cells.append(f"{tot:.2f} (+{100 * (tot - fl) / fl:.1f} %, {pre:.0f})")
            lines.append(f"| {v} | " + " | ".join(cells) + " |")
        tuning = [v for v in ablation_settings() if v not in LADDER]
        n10 = [k for k in keys if k.endswith("-n10")]
        lines += ["", "Tuning at N = 10 (seeds 1-3, mean total cost, EUR; the defaults are "
                  "1800 s and 0.02 EUR)", "", "| setting | " + " | ".join(n10) + " |",
                  "|---|" + "---:|" * len(n10)]
        for v in tuning:
            cells = []
            for k in n10:
                runs = ab[k].get(v, {})
                cells.append(f"{statistics.fmean(r['summary']['total_cost_eur'] for r in runs.values()):.3f}"  # noqa: E501
                             if runs else "–")
            lines.append(f"| {v} | " + " | ".join(cells) + " |")
    if "timing" in doc:
        tm = doc["timing"]
        lines += ["", "### Plan time per rescheduling point", "",
                  f"`andreas`'s rescheduling points at N = {tm['nodes']} (seed 1), every "
                  f"{tm['every']}th timed in one process, one planner after the other on the "
                  f"same input, MaxIt_RG = {tm['iterations']}: the reference (the shipped "
                  "`andreas` before issue 22), the fast implementation with the paper's "
                  "settings (the same plans) and `andreas` (early stopping, local search)", "",
                  "| scenario | points | jobs p50 / max | reference p50 / p99 ms | "
                  "paper p50 / p99 ms | andreas p50 / p99 ms | andreas CPU p50 / p99 ms | "
                  "reference / paper (mean) | "
                  "reference / andreas (mean) | reference / andreas (p50) | "
                  "paper ≠ reference | early stop changed the plan | its f_OBJ cost, "
                  "mean / max EUR |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for case in ("s1", "s2"):
            t = tm[case]
            ms = t["ms"]
            cpu = t.get("cpu_ms", {}).get("andreas")
            cpu_ms = f"{cpu['p50']:.1f} / {cpu['p99']:.1f}" if cpu else "–"
            lines.append(
                f"| {case} | {t['points_timed']} | {t['jobs_p50']:.0f} / {t['jobs_max']} | "
                f"{ms['reference']['p50']:.0f} / {ms['reference']['p99']:.0f} | "
                f"{ms['paper']['p50']:.0f} / {ms['paper']['p99']:.0f} | "
                f"{ms['andreas']['p50']:.1f} / {ms['andreas']['p99']:.1f} | "
                f"{cpu_ms} | "
                f"{ms['reference']['mean'] / ms['paper']['mean']:.2f} | "
                f"{ms['reference']['mean'] / ms['andreas']['mean']:.1f} | "
                f"{ms['reference']['p50'] / ms['andreas']['p50']:.1f} | "
                f"{t['paper_differs_from_reference']} | {t['early_stop_changed_plan']} of "
                f"{t['points_timed']} | {t['early_stop_f_gap_eur']['mean']:.5f} / "
                f"{t['early_stop_f_gap_eur']['max']:.5f} |")
        if "load_before" in tm:
            lines += ["", "Load average (1, 5, 15 min) before: "
                      + " / ".join(f"{x:.1f}" for x in tm["load_before"]) + ", after: "
                      + " / ".join(f"{x:.1f}" for x in tm["load_after"]) + " (2 cores). "
                      "Wall-clock times include the time other processes held the cores; CPU "
                      "time (`time.process_time`) is the planner's own. The captured points "
                      "are frozen out of the garbage collector (`gc.freeze`)."]
    if "pressing" in doc:
        pr = doc["pressing"]
        lines += ["", "### The pressing incumbent", "",
                  f"Every {pr['every']}th captured point (N = {pr['nodes']}, seed 1), `andreas` "
                  "with and without `pressing_incumbent`: f_OBJ after the local search, EUR "
                  "(with − without)", "",
                  "| scenario | points | plan changed | f_OBJ lower / higher | mean / min / max "
                  "EUR | local-search changes with / without | CPU s with / without |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for case in ("s1", "s2"):
            t = pr[case]
            g = t["f_gap_eur"]
            lines.append(
                f"| {case} | {t['points']} | {t['changed_plan']} | {t['better']} / "
                f"{t['worse']} | {g['mean']:.4f} / {g['min']:.3f} / {g['max']:.3f} | "
                f"{t['local_moves']['on']} / {t['local_moves']['off']} | "
                f"{t['cpu_s']['on']:.1f} / {t['cpu_s']['off']:.1f} |")
    if "armida" in doc:
        arm = doc["armida"]
        lines += ["", "### ARMIDA (Appendix B)", "",
                  f"Energy cost, EUR (paper, Table III: predicted {PAPER_ARMIDA['predicted_eur']},"
                  f" measured {PAPER_ARMIDA['real_eur']})", "",
                  "| policy | energy € | tardiness € | floor € | late jobs | preemptions |",
                  "|---|---:|---:|---:|---:|---:|"]
        for p in POLICIES:
            s = arm["summary"][p]
            lines.append(f"| {p} | {s['energy_cost_eur']:.3f} | "
                         f"{s['tardiness_cost_eur']:.3f} | {s['energy_floor_eur']:.3f} | "
                         f"{arm['late_jobs'][p]}/8 | {arm['preemptions'][p]} |")
    if doc.get("wall_s"):
        parts = ", ".join(f"{k} {v / 60:.0f} min" for k, v in doc["wall_s"].items())
        lines += ["", f"Wall time: {parts} ({doc.get('workers', '?')} simulations at a time, "
                  "`nice`, on a 2-core machine shared with four other engineers' work; a "
                  "simulation that an earlier, interrupted run finished is not run again)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="N = 4 and 10, one seed, 200 iterations; prints only")
    ap.add_argument("--workers", type=int, default=2, help="simulations at a time (2)")
    ap.add_argument("--only", default="timing,armida,ablation,costs",
                    help="parts, comma-separated, run in this order: timing, armida, "
                    "ablation, costs; also pressing (not in the default)")
    ap.add_argument("--ablation-sizes", default="10", help="N of the ablation (10)")
    ap.add_argument("--sizes", default="10,50,100,200",
                    help="N of the costs part (10,50,100,200); its rows replace the same "
                    "rows of an earlier run, the others are kept")
    ap.add_argument("--seeds", default="1,2,3", help="seeds of the costs part (1,2,3)")
    args = ap.parse_args()
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = set(parts) - {"costs", "ablation", "timing", "armida", "pressing"}
    if unknown or args.workers < 1:
        ap.error(f"unknown part(s) {', '.join(sorted(unknown))}" if unknown
                 else "--workers must be at least 1")
    iterations = 200 if args.quick else 1000
    path = RESULTS / "planner.json"
    doc: dict[str, Any] = {}
    if not args.quick and path.is_file():  # keep the parts not run now
        old = json.loads(path.read_text())
        if old.get("format") == 2:
            doc = old
    doc.update({"format": 2, "iterations": iterations, "workers": args.workers})
    walls = doc.setdefault("wall_s", {})
    for part in parts:
        t = time.perf_counter()
        if part == "pressing":
            doc["pressing"] = pressing(10 if args.quick else TIMING_N,
                                       5 if args.quick else PRESSING_EVERY, iterations)
        elif part == "timing":
            doc["timing"] = timing(10 if args.quick else TIMING_N,
                                   5 if args.quick else TIMING_EVERY, iterations)
        elif part == "armida" and not args.quick:
            doc["armida"] = armida(iterations)
        elif part == "ablation":
            sizes = [10] if args.quick else [int(x) for x in args.ablation_sizes.split(",")]
            doc["ablation"] = ablation(iterations, args.workers, sizes)
            doc["ablation_floor"] = {
                f"s{c}-n{n}": statistics.fmean(_floor(f"andreas-s{c}", n, s)
                                               for s in (1, 2, 3))
                for c in (1, 2) for n in sizes}
        elif part == "costs":
            seeds = [int(x) for x in args.seeds.split(",")]
            sizes_c = QUICK if args.quick else {int(x): seeds for x in args.sizes.split(",")}
            new = costs(sizes_c, iterations, args.workers,
                        keep_outputs=not args.quick and 10 in sizes_c)
            doc["costs"] = _merge_costs(doc.get("costs"), new)
        walls[part] = time.perf_counter() - t
        if not args.quick:  # after each part: an interrupted run keeps what it finished
            path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
            (RESULTS / "planner.md").write_text(
                "# ANDREAS planner in simulation\n\nGenerated by `nice .venv/bin/python -m "
                "benchmarks.bench_planner` (parts in planner.json).\n\n" + tables(doc))
    print(tables(doc))


if __name__ == "__main__":
    main()
