"""Streams in the simulator: gputopo against NVIDIA best-effort + kube-scheduler's node choice,
20 seeds × {1 node, 8 nodes} × {Eq. 2, bottleneck} (issue 24), with a noise floor and the node
choice measured against spreading and packing.

* **Streams** — the simulator's many-seed mode (:mod:`simulator.many`) on ``mapa:jobs=150``
  (MAPA §4's stream: 1–5 GPUs, ring, four sensitive networks and two insensitive ones, all
  submitted at t = 0, FIFO) on DGX-1 V100 nodes, reference ``nvidia-best-effort`` with
  LeastAllocated: per seed the difference of mean sensitive EffBW/ideal and the makespan
  ratio.
* **Noise floor** — ``nvidia-best-effort-twin``: best-effort itself, except that on about half
  of the decisions (a hash of the free-GPU mask) it decides on the GPUs relabelled by a
  symmetry of the machine (on a DGX-1: GPU i ↔ i+4) and maps its answer back. Every twin
  decision has exactly best-effort's set score; only its tie-breaking differs. How far the twin
  lands from best-effort on a seed is how far a policy *as good as* best-effort can land by
  luck: a per-seed "≤ 1.0×" below that spread is not a property of the policy. The first
  rule's own twin (``gputopo-twin``, the same relabelling) tells which of its per-seed
  results are its rule's and which are its tie-breaking's luck.
* **Node choice** (8 nodes) — gputopo with its own rule (``extender``: the prioritize score,
  quality, fragmentation and the harm to the waiting jobs), with kube-scheduler's spreading
  (``least-allocated``) and with packing (``most-allocated``), each against best-effort.

* **Queue** — ``--queue fifo`` (MAPA's, the default: a job no node has room for blocks the
  jobs behind it) or ``backfill`` (it is skipped, as kube-scheduler skips an unschedulable pod
  and the replay through the real scheduler does). Under backfill every placement also moves
  which jobs start next, so the twins' spread — the noise floor — is several times wider.

Run: ``.venv/bin/python -m benchmarks.bench_streams [--seeds 0-19] [--jobs 150] [--queue
backfill --out benchmarks/results/streams-backfill.json]``; writes
``benchmarks/results/streams.json`` and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
from networkx.algorithms import isomorphism

from simulator.engine import DEFAULT_NODE_CHOICE, QUEUES, Simulation, node_choice_for
from simulator.many import many_seeds, mean_ratio_to_ideal, parse_seeds, table
from simulator.report import makespan
from simulator.workloads import load_workload
from topology import catalog
from topology.model import Topology
from topology.policies.base import Decision, NodeState, Request
from topology.policies.common import MODEL_GPUTOPO, whole_decision
from topology.policies.memo import Memo
from topology.policies.registry import get_policy, policies, register

OUT = Path(__file__).parent / "results" / "streams.json"
MACHINE = "dgx1-v100"
TWIN = "nvidia-best-effort-twin"


def symmetry(topology: Topology) -> list[int] | None:
    """A GPU relabelling other than the identity that keeps every link (NVLinks and PCIe
    level) and every GPU's NUMA node: a non-trivial automorphism of the machine, or None."""
    g = nx.Graph()
    for a in range(topology.size):
        g.add_node(a, numa=topology.gpus[a].numa_node)
        for b in range(a + 1, topology.size):
            lk = topology.links[a][b]
            g.add_edge(a, b, link=(lk.nvlinks, int(lk.pcie)))
    gm = isomorphism.GraphMatcher(
        g, g, node_match=lambda x, y: x["numa"] == y["numa"],
        edge_match=lambda x, y: x["link"] == y["link"])
    for m in gm.isomorphisms_iter():
        perm = [m[i] for i in range(topology.size)]
        if perm != list(range(topology.size)):
            return perm
    return None


def twin_name(base: str) -> str:
    """The twin of policy ``base`` (:data:`TWIN` for best-effort, ``<base>-twin`` else)."""
    return TWIN if base == "nvidia-best-effort" else f"{base}-twin"


def register_twin(topology: Topology, base: str = "nvidia-best-effort") -> bool:
    """Register :func:`twin_name` (``base``) for ``topology``'s symmetry: ``base`` deciding on
    the GPUs relabelled by that symmetry on about half of the free masks, its answer mapped
    back, with ``base``'s node choice and flags (so a lookahead policy still reads the queue);
    False when the machine has no symmetry."""
    perm = symmetry(topology)
    if perm is None:
        return False
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    name = twin_name(base)
    # the twin chooses its node as its base does (best-effort: kube-scheduler's LeastAllocated)
    DEFAULT_NODE_CHOICE[name] = node_choice_for(base)
    if name in policies():
        return True
    spec = get_policy(base)
    fn = spec.fn

    def twin(topo: Topology, state: NodeState, request: Request, memo: Memo) -> Decision:
        mask = state.mask(topo)
        if request.fractional or not ((mask * 2654435761) >> 9) & 1:
            return fn(topo, state, request, memo)
        free = state.free_gpus(topo)
        relabelled = NodeState.whole(perm[g] for g in range(topo.size) if g not in free)
        d = fn(topo, relabelled, request, memo)
        return whole_decision(name, topo, state, request, [inverse[g] for g in d.gpus],
                              MODEL_GPUTOPO, reason=d.reason)

    twin.__qualname__ = f"twin[{base}]"
    register(name, f"{base} deciding on relabelled GPUs on half of the free masks "
             "(benchmarks/bench_streams.py: the noise floor)",
             free_set_only=spec.free_set_only, lookahead=spec.lookahead)(twin)
    return True


def node_choices(seeds: Sequence[int], jobs: int, judges: Sequence[str],
                 rules: Sequence[str], policy: str = "gputopo",
                 queue: str = "fifo") -> dict[str, Any]:
    """``policy`` under each node-choice rule against best-effort + LeastAllocated, 8 nodes,
    ``queue`` discipline (``fifo`` or ``backfill``)."""
    topo = catalog.get(MACHINE)
    out: dict[str, Any] = {}
    for judge in judges:
        out[judge] = {}
        rows: dict[str, list[tuple[float, float]]] = {r: [] for r in rules}
        for seed in seeds:
            wl = load_workload(f"mapa:jobs={jobs}", seed=seed)
            memo = Memo()
            ref = Simulation(topo, 8, wl, "nvidia-best-effort", judge=judge, memo=memo,
                             queue=queue).run()
            ref_ratio, ref_span = mean_ratio_to_ideal(ref), makespan(ref)
            for rule in rules:
                run = Simulation(topo, 8, wl, policy, judge=judge, memo=memo,
                                 node_choice=rule, queue=queue).run()
                rows[rule].append(((mean_ratio_to_ideal(run) or 0) - (ref_ratio or 0),
                                   makespan(run) / ref_span))
        for rule, vals in rows.items():
            d = [a for a, _ in vals]
            m = [b for _, b in vals]
            out[judge][rule] = {
                "effbw_ratio_delta": {"min": round(min(d), 4), "mean": round(float(np.mean(d)), 4),
                                      "max": round(max(d), 4)},
                "makespan_ratio": {"min": round(min(m), 4), "mean": round(float(np.mean(m)), 4),
                                   "max": round(max(m), 4)},
                "seeds_behind_effbw": sum(x < 0 for x in d),
                "seeds_behind_makespan": sum(x > 1 for x in m),
                "seeds": len(vals),
            }
    return out


def choice_table(doc: dict[str, Any]) -> str:
    lines = ["| judge | gputopo's node choice | Δ mean EffBW/ideal min / mean / max | "
             "seeds behind | makespan ratio min / mean / max | seeds behind |",
             "|---|---|---|---|---|---|"]
    for judge, by_rule in doc.items():
        for rule, s in by_rule.items():
            d, m = s["effbw_ratio_delta"], s["makespan_ratio"]
            lines.append(f"| {judge} | {rule} | {d['min']:+.3f} / {d['mean']:+.3f} / "
                         f"{d['max']:+.3f} | {s['seeds_behind_effbw']} of {s['seeds']} | "
                         f"{m['min']:.3f} / {m['mean']:.3f} / {m['max']:.3f} | "
                         f"{s['seeds_behind_makespan']} of {s['seeds']} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--jobs", type=int, default=150)
    ap.add_argument("--judges", default="eq2,bottleneck")
    ap.add_argument("--policies", default="gputopo,gputopo-unguarded",
                    help="gputopo's rules compared with best-effort (the first one also gets "
                         "the node-choice comparison)")
    ap.add_argument("--no-twin-of-first", dest="twin_of_first", action="store_false",
                    help="leave out the first rule's twin (it with its ties broken on "
                         "relabelled GPUs, as best-effort's twin)")
    ap.add_argument("--queue", choices=QUEUES, default="fifo",
                    help="queue discipline: MAPA's fifo (a job that does not fit blocks the "
                         "queue) or backfill (it is skipped, as kube-scheduler skips an "
                         "unschedulable pod)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    ours = [p for p in args.policies.split(",") if p.strip()]
    judges = [j for j in args.judges.split(",") if j.strip()]
    t0 = time.perf_counter()
    twin = register_twin(catalog.get(MACHINE))
    pols = ours + ([TWIN] if twin else [])
    if twin and args.twin_of_first:  # the first rule's own noise floor: its ties relabelled
        register_twin(catalog.get(MACHINE), ours[0])
        pols.append(twin_name(ours[0]))
    streams = {}
    for nodes in (1, 8):
        doc = many_seeds(MACHINE, f"mapa:jobs={args.jobs}", pols, seeds, judges=judges,
                         nodes=nodes, queue=args.queue)
        streams[str(nodes)] = doc
        print(f"## {nodes} node(s)\n\n{table(doc)}\n", flush=True)
    choices = node_choices(seeds, args.jobs, ["mapa-eq2", "bottleneck"],
                           ["extender", "least-allocated", "most-allocated"], ours[0],
                           queue=args.queue)
    print(choice_table(choices))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "streams",
        "command": f"python -m benchmarks.bench_streams --seeds {args.seeds} --jobs {args.jobs} "
                   f"--judges {args.judges} --policies {args.policies}"
                   + ("" if args.twin_of_first else " --no-twin-of-first")
                   + ("" if args.queue == "fifo" else f" --queue {args.queue}"),
        "queue": args.queue,
        "machine": MACHINE, "python": platform.python_version(), "cpus": os.cpu_count(),
        "wall_s": round(time.perf_counter() - t0, 1),
        "policies": ours, "streams": streams, "node_choice": choices,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
