"""Does the kubelet hand a pod the GPUs gputopo chose, when its Topology Manager aligns NUMA?
And what does following the kubelet cost in placement quality? (docs/cpu-pinning.md)

A seeded stream of whole-GPU pods (1–4 GPUs; 2-4 as rings or all-to-all; random lifetimes)
arrives at one node. Two extenders place it, each on its own copy of the node:

* **plain**: the policy alone (gputopo before the kubelet's settings were published);
* **aligned**: the extender as it is now: :func:`topology.numa_alignment.align` predicts the
  NUMA mask the kubelet's Topology Manager will pick from the node's free devices; the pod is
  refused where the kubelet would reject it, else the policy decides on the GPUs the kubelet
  would offer (:meth:`~topology.numa_alignment.Alignment.restrict`; for a ``best-effort``
  mask narrower than the pod, :func:`~topology.numa_alignment.complete_must_include`).

Every placement is then checked by the kubelet model run device by device
(:func:`topology.numa_alignment.kubelet_hands_over`: the 1.36 hint merge and
``devicesToAllocate`` with gputopo's ``GetPreferredAllocation``; the model is held to the real
kubelet code in tests/topology/test_numa_alignment_kubelet.py). Reported per machine, policy
and kubelet setting:

* ``plain_ok``: share of the plain extender's placements the kubelet accepts (the rest fail
  admission: ``UnexpectedAdmissionError`` for GPUs off the mask, ``TopologyAffinityError`` for
  a pod ``restricted`` / ``single-numa-node`` rejects);
* ``aligned_ok``: the same for the aligned extender (100 % is the point);
* ``refused``: share of arrivals the aligned extender keeps off the node because the kubelet
  would not take them (they wait or go elsewhere);
* ``effbw_plain`` / ``effbw_aligned``: mean predicted EffBW (GB/s) of the multi-GPU pods the
  aligned extender placed, for the GPUs it chose and for the GPUs the policy alone would have
  chosen on the same state: what the alignment costs those pods; ``worse``: the share of them
  that got a lower EffBW.

Kubelet settings: ``single-numa-node`` (pods Burstable: no CPU hints), ``restricted`` and
``best-effort`` with the static CPU manager and Guaranteed pods of 4 whole CPUs (the CPU
manager's hints, assuming free CPUs on every NUMA node: the extender cannot see its state).

Run: ``.venv/bin/python -m benchmarks.bench_numa_agreement [--quick]``; writes
``benchmarks/results/numa_agreement.json``.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, replace
from pathlib import Path

from topology import catalog
from topology.numa_alignment import (
    KubeletConfig,
    PodDemand,
    align,
    complete_must_include,
    kubelet_hands_over,
)
from topology.patterns import all_to_all, ring
from topology.policies.base import Decision, NodeState, NoFit, Request
from topology.policies.evaluate import Evaluator

OUT = Path(__file__).parent / "results" / "numa_agreement.json"
MACHINES = ("dgx1-v100", "dgx-a100", "pcie-8gpu")
POLICIES = ("gputopo", "baseline", "gaia", "mapa-preserve", "topo-aware")
SETTINGS: dict[str, tuple[KubeletConfig, PodDemand]] = {
    "single-numa-node": (KubeletConfig("single-numa-node"), PodDemand()),
    "restricted+static": (KubeletConfig("restricted", cpu_manager_policy="static"),
                          PodDemand(4, 4, 1)),
    "best-effort+static": (KubeletConfig("best-effort", cpu_manager_policy="static"),
                           PodDemand(4, 4, 1)),
}


@dataclass(frozen=True)
class Arrival:
    """One pod of the stream."""

    request: Request
    lifetime: int


def stream(pods: int, seed: int) -> list[Arrival]:
    """The seeded arrivals (the same for every machine, policy and setting)."""
    rng = random.Random(seed)
    out = []
    for _ in range(pods):
        count = rng.choices((1, 2, 3, 4), weights=(30, 35, 10, 25))[0]
        pattern = None if count == 1 else rng.choice((ring, all_to_all))(count)
        out.append(Arrival(Request(count, pattern=pattern), rng.randint(2, 10)))
    return out


def place(ev: Evaluator, policy: str, machine: str, state: NodeState,
          request: Request) -> Decision | None:
    try:
        return ev.place(policy, catalog.get(machine), state, request)
    except NoFit:
        return None


def run(machine: str, policy: str, setting: str, arrivals: list[Arrival]) -> dict[str, object]:
    topo = catalog.get(machine)
    config, demand = SETTINGS[setting]
    ev = Evaluator()
    plain: dict[int, int] = {}  # GPU -> departure time, the plain extender's node
    aligned: dict[int, int] = {}  # the aligned extender's node
    plain_placed = plain_ok = 0
    aligned_placed = aligned_ok = refused = arrived = 0
    bw_plain: list[float] = []
    bw_aligned: list[float] = []
    worse = 0
    for t, arrival in enumerate(arrivals):
        for busy in (plain, aligned):
            for g in [g for g, end in busy.items() if end <= t]:
                del busy[g]
        request = arrival.request
        # the plain extender
        state = NodeState.whole(plain)
        d = place(ev, policy, machine, state, request)
        if d is not None:
            plain_placed += 1
            plain_ok += kubelet_hands_over(topo, state, request, config, d.gpus, demand)
            for g in d.gpus:
                plain[g] = t + arrival.lifetime
        # the aligned extender
        state = NodeState.whole(aligned)
        free_choice = place(ev, policy, machine, state, request)
        if free_choice is None:
            continue  # the node cannot take the pod either way
        arrived += 1
        a = align(topo, state, request, config, demand)
        if not a.fits:
            refused += 1
            continue
        eligible = a.eligible
        if a.must_include:  # best-effort took part of the pod's GPUs: complete them

            def gpus(st: NodeState, r: Request = request) -> tuple[int, ...] | None:
                d = place(ev, policy, machine, st, r)
                return d.gpus if d is not None else None

            def bw(st: NodeState, r: Request = request) -> float | None:
                d = place(ev, policy, machine, st, r)
                return d.effective_bandwidth_gbps if d is not None else None

            done = complete_must_include(a, state, topo, request.count, gpus, bw)
            if done is None:
                refused += 1
                continue
            eligible = done
        d = place(ev, policy, machine, replace(a, eligible=eligible).restrict(state, topo),
                  request)
        if d is None:
            refused += 1
            continue
        aligned_placed += 1
        aligned_ok += kubelet_hands_over(topo, state, request, config, d.gpus, demand)
        if request.count > 1:
            bw_plain.append(free_choice.effective_bandwidth_gbps)
            bw_aligned.append(d.effective_bandwidth_gbps)
            worse += d.effective_bandwidth_gbps < free_choice.effective_bandwidth_gbps - 1e-9
        for g in d.gpus:
            aligned[g] = t + arrival.lifetime

    def pct(a: int, b: int) -> float | None:
        return round(100 * a / b, 1) if b else None

    def mean(xs: list[float]) -> float | None:
        return round(sum(xs) / len(xs), 2) if xs else None

    return {
        "machine": machine, "policy": policy, "setting": setting,
        "plain_placed": plain_placed, "plain_ok_pct": pct(plain_ok, plain_placed),
        "aligned_placed": aligned_placed, "aligned_ok_pct": pct(aligned_ok, aligned_placed),
        "refused_pct": pct(refused, arrived),
        "multi_gpu_pods": len(bw_aligned),
        "effbw_plain_gbps": mean(bw_plain), "effbw_aligned_gbps": mean(bw_aligned),
        "effbw_worse_pct": pct(worse, len(bw_aligned)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer pods (CI)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    pods = 300 if args.quick else 3000
    arrivals = stream(pods, args.seed)
    rows = [run(m, p, s, arrivals) for m in MACHINES for s in SETTINGS for p in POLICIES
            if m in catalog.names()]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"pods": pods, "seed": args.seed, "rows": rows}, indent=1) + "\n")
    print(f"{'machine':<10} {'setting':<19} {'policy':<13} {'plain ok%':>9} {'aligned ok%':>11} "
          f"{'refused%':>8} {'EffBW plain':>11} {'aligned':>8} {'worse%':>6}")
    for r in rows:
        print(f"{r['machine']:<10} {r['setting']:<19} {r['policy']:<13} "
              f"{r['plain_ok_pct']!s:>9} {r['aligned_ok_pct']!s:>11} {r['refused_pct']!s:>8} "
              f"{r['effbw_plain_gbps']!s:>11} {r['effbw_aligned_gbps']!s:>8} "
              f"{r['effbw_worse_pct']!s:>6}")
    bad = [r for r in rows if r["aligned_placed"] and r["aligned_ok_pct"] != 100.0]
    if bad:
        raise SystemExit(f"{len(bad)} runs placed pods the kubelet would not accept")


if __name__ == "__main__":
    main()
