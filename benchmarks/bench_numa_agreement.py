"""How often the kubelet's Topology Manager would pick the NUMA node(s) a policy put a pod's
GPUs on — the condition for the kubelet to honour gputopo's GPUs and pin a Guaranteed pod's
CPUs next to them (docs/cpu-pinning.md).

A seeded stream of whole-GPU pods (1–4 GPUs, rings and all-to-all, random lifetimes) arrives
at one node. Each policy places it; for the same free GPUs the kubelet's NUMA choice is
computed as the 1.36 kubelet does for a container whose only NUMA-aware resource is
``nvidia.com/gpu`` (``devicemanager/topology_hints.go`` ``generateDeviceTopologyHints``, then
``topologymanager`` ``HintMerger``: preferred before non-preferred, then the fewest NUMA nodes,
then the lowest-numbered mask). CPUs are assumed plentiful on every NUMA node (the CPU
manager would otherwise narrow the choice further; the extender cannot see its state).

Reported per machine and policy, over the pods placed:

* ``honoured``: the policy's GPUs all lie on the kubelet's mask — the kubelet offers them to
  ``GetPreferredAllocation`` and the pod starts;
* ``rejected``: the kubelet's best mask is not preferred — ``restricted`` and
  ``single-numa-node`` refuse the pod at admission whatever GPUs were chosen.

Run: ``.venv/bin/python -m benchmarks.bench_numa_agreement [--quick]``; writes
``benchmarks/results/numa_agreement.json``. This is a model of the kubelet's logic (there is
no kubelet here), used for measurement only; the product does not depend on it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from pathlib import Path

from topology import catalog
from topology.model import Topology
from topology.patterns import all_to_all, ring
from topology.policies.base import NodeState, NoFit, Request
from topology.policies.evaluate import Evaluator

OUT = Path(__file__).parent / "results" / "numa_agreement.json"
MACHINES = ("dgx1-v100", "dgx-a100", "pcie-8gpu")
POLICIES = ("baseline", "gputopo", "gaia", "mapa-preserve", "topo-aware")


def kubelet_mask(topo: Topology, free: list[int], count: int) -> tuple[frozenset[int], bool]:
    """The NUMA nodes the kubelet's Topology Manager picks for ``count`` GPUs out of ``free``,
    and whether that hint is preferred (device hints only; see the module docstring).

    Raises:
        ValueError: fewer than ``count`` free GPUs (the kubelet would give no hint).
    """
    numa = [g.numa_node for g in topo.gpus]
    nodes = sorted({n for n in numa if n is not None})

    def held(mask: frozenset[int], gpus: list[int]) -> int:
        return sum(1 for g in gpus if numa[g] in mask)

    masks = [frozenset(c) for k in range(1, len(nodes) + 1)
             for c in itertools.combinations(nodes, k)]
    everything = list(range(topo.size))
    min_size = min(len(m) for m in masks if held(m, everything) >= count)
    hints = [(m, len(m) == min_size) for m in masks if held(m, free) >= count]
    if not hints:
        raise ValueError("not enough free GPUs")

    def rank(h: tuple[frozenset[int], bool]) -> tuple[int, int, int]:
        mask, preferred = h
        return (0 if preferred else 1, len(mask), sum(1 << n for n in mask))

    best = min(hints, key=rank)
    return best


def run(machine: str, policy: str, pods: int, seed: int) -> dict[str, object]:
    topo = catalog.get(machine)
    ev = Evaluator()
    rng = random.Random(seed)
    busy: dict[int, int] = {}  # GPU -> departure time
    placed = honoured = rejected = 0
    for t in range(pods):
        for g in [g for g, end in busy.items() if end <= t]:
            del busy[g]
        count = rng.choices((1, 2, 3, 4), weights=(30, 35, 10, 25))[0]
        pattern = None if count == 1 else rng.choice((ring, all_to_all))(count)
        lifetime = rng.randint(2, 10)
        free = [g for g in range(topo.size) if g not in busy]
        if len(free) < count:
            continue
        try:
            d = ev.place(policy, topo, NodeState.whole(busy), Request(count, pattern=pattern))
        except NoFit:
            continue
        mask, preferred = kubelet_mask(topo, free, count)
        placed += 1
        honoured += all(topo.gpus[g].numa_node in mask for g in d.gpus)
        rejected += not preferred
        for g in d.gpus:
            busy[g] = t + lifetime
    return {
        "machine": machine, "policy": policy, "placed": placed,
        "honoured_pct": round(100 * honoured / placed, 1) if placed else None,
        "rejected_by_restricted_pct": round(100 * rejected / placed, 1) if placed else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer pods (CI)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    pods = 300 if args.quick else 3000
    rows = [run(m, p, pods, args.seed) for m in MACHINES for p in POLICIES
            if m in catalog.names()]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"pods": pods, "seed": args.seed, "rows": rows}, indent=1) + "\n")
    print(f"{'machine':<11} {'policy':<14} {'placed':>6} {'honoured %':>10} {'rejected %':>10}")
    for r in rows:
        print(f"{r['machine']:<11} {r['policy']:<14} {r['placed']:>6} {r['honoured_pct']!s:>10} "
              f"{r['rejected_by_restricted_pct']!s:>10}")


if __name__ == "__main__":
    main()
