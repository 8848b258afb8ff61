"""The NUMA-alignment model (:mod:`topology.numa_alignment`) against the kubelet's own code.

``scripts/kubelet-numa`` (built by ``scripts/build-k8s-tools.sh --kubelet-numa`` from
k8s.io/kubernetes v1.36.3) runs, on each case, the device manager's ``GetTopologyHints`` /
``GetPodTopologyHints``, the static CPU manager's ``GetTopologyHints`` /
``GetPodTopologyHints`` (on the real pod object: QoS, whole CPUs, init containers), the
Topology Manager policy's ``Merge``, and ``devicesToAllocate`` with the merged hint against a
plugin that proposes devices the way gputopo's does. The model must give the same hints, the
same merged hint and admission, and the same allocation, on thousands of random cases.

Skipped, with the reason, when the harness cannot be built (no Go toolchain; or
``GPUTOPO_SKIP_E2E`` set and it is not built yet).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from localcluster.binaries import BinariesUnavailable, find_kubelet_numa
from scheduler_extender.podspec import pod_demand, request_from_pod
from topology import catalog
from topology.contract import (
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
)
from topology.numa_alignment import (
    TOPOLOGY_MANAGER_POLICIES,
    Hint,
    KubeletConfig,
    align,
    bits,
    cpus_per_numa,
    device_hints,
    devices_to_allocate,
    generate_hints,
    gpu_numa_nodes,
    kubelet_free_gpus,
    mask_of,
    merge,
    unit_views,
)
from topology.policies.base import FULL_CORE, GPUUsage, NodeState, Resident

UNIT_MIB = 256


@pytest.fixture(scope="module")
def harness() -> Path:
    skip_env = os.environ.get("GPUTOPO_SKIP_E2E", "").strip().lower() not in ("", "0", "false")
    try:
        return find_kubelet_numa(allow_build=not skip_env)
    except BinariesUnavailable as exc:
        pytest.skip(f"kubelet-numa harness unavailable: {exc}")


def run(harness: Path, cases: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    text = "\n".join(json.dumps(c) for c in cases) + "\n"
    proc = subprocess.run([str(harness)], input=text, capture_output=True, text=True,
                          timeout=600, check=True)
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(out) == len(cases)
    for a in out:
        assert not a.get("error"), a
    return out


def go_hint(h: Mapping[str, Any]) -> Hint:
    nodes = h["nodes"]
    return Hint(None if nodes is None else mask_of(nodes), bool(h["preferred"]))


def go_hints(hs: Sequence[Mapping[str, Any]] | None) -> list[Hint] | None:
    return None if hs is None else [go_hint(h) for h in hs]


# ------------------------------------------------------------------ random cases
def pod(rng: random.Random, limits: Mapping[str, int], uid: str) -> dict[str, Any]:
    """A pod with one device container; CPU/memory make it Guaranteed (whole or fractional
    CPUs), Burstable or BestEffort; sometimes an init container or a sidecar with CPUs."""
    dev = {r: str(n) for r, n in limits.items()}
    kind = rng.choice(["guaranteed", "guaranteed", "fractional", "burstable", "besteffort"])
    cpus = rng.choice([1, 2, 4, 8, 20, 33])
    if kind == "guaranteed":
        res = {"requests": {**dev, "cpu": str(cpus), "memory": "1Gi"},
               "limits": {**dev, "cpu": str(cpus), "memory": "1Gi"}}
    elif kind == "fractional":
        res = {"requests": {**dev, "cpu": "1500m", "memory": "1Gi"},
               "limits": {**dev, "cpu": "1500m", "memory": "1Gi"}}
    elif kind == "burstable":
        res = {"requests": {**dev, "cpu": "1"}, "limits": {**dev, "cpu": "2"}}
    else:
        res = {"requests": dict(dev), "limits": dict(dev)}
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": res}]}
    if kind == "guaranteed" and rng.random() < 0.3:
        extra = str(rng.choice([1, 3, 50]))
        side = {"name": "side", "resources": {
            "requests": {"cpu": extra, "memory": "1Gi"}, "limits": {"cpu": extra, "memory": "1Gi"}}}
        if rng.random() < 0.5:
            side["restartPolicy"] = "Always"
        spec["initContainers"] = [side]
    return {"metadata": {"name": f"p{uid}", "namespace": "default", "uid": uid}, "spec": spec}


def abstract_case(rng: random.Random, i: int) -> dict[str, Any]:
    """Random NUMA nodes (1-4 of 0-7), devices of one or two resources with random health,
    allocation and NUMA (some without), CPUs per node, policy, scope, CPU manager."""
    nodes = sorted(rng.sample(range(8), rng.randint(1, 4)))
    cpus = [{"numa": n, "count": rng.choice([2, 4, 8, 16]), "free": 0} for n in nodes]
    for c in cpus:
        c["free"] = rng.randint(0, c["count"])
    resources = [RESOURCE_GPU] if rng.random() < 0.6 else [RESOURCE_VGPU_CORE,
                                                           RESOURCE_VGPU_MEMORY]
    devices: dict[str, list[dict[str, Any]]] = {}
    limits: dict[str, int] = {}
    plugin: dict[str, Any] = {}
    for res in resources:
        ds = []
        for k in range(rng.randint(1, 10)):
            numa = rng.choice(nodes) if rng.random() > 0.05 else -1
            ds.append({"id": f"d{k}", "numa": numa, "healthy": rng.random() > 0.1,
                       "allocated": rng.random() < 0.35})
        devices[res] = ds
        free = [d["id"] for d in ds if d["healthy"] and not d["allocated"]]
        limits[res] = rng.randint(1, max(1, min(len(ds), 6)))
        want = rng.sample(free, min(len(free), limits[res])) if free else []
        plugin[res] = {"kind": "gpu", "want": sorted(want)}
    closest = rng.random() < 0.2
    distances: dict[int, list[int]] | None = None
    if closest:  # symmetric, self 10 (what the firmware's SLIT gives)
        far = {(a, b): rng.choice([11, 12, 20, 21, 32]) for a in range(8) for b in range(a + 1, 8)}
        distances = {a: [10 if a == b else far[min(a, b), max(a, b)] for b in range(8)]
                     for a in nodes}
    return {
        "id": i, "policy": rng.choice(TOPOLOGY_MANAGER_POLICIES),
        "scope": rng.choice(["container", "pod"]), "prefer_closest": closest,
        "distances": distances,
        "cpu_manager": rng.choice(["static", "static", "none"]), "cpus": cpus,
        "pod": pod(rng, limits, f"u{i}"), "devices": devices, "plugin": plugin,
    }


def model_answer(case: Mapping[str, Any]) -> dict[str, Any]:
    """The model's answer to an abstract case, shaped like the harness's."""
    nodes = [c["numa"] for c in case["cpus"]]
    limits = case["pod"]["spec"]["containers"][0]["resources"]["limits"]
    dev_hints: dict[str, list[Hint] | None] = {}
    for res, ds in case["devices"].items():
        total: dict[int | None, int] = {}
        avail: dict[int | None, int] = {}
        for d in ds:
            n = None if d["numa"] < 0 or d["numa"] not in nodes else d["numa"]
            total[n] = total.get(n, 0) + 1
            if d["healthy"] and not d["allocated"]:
                avail[n] = avail.get(n, 0) + 1
        dev_hints[res] = device_hints(total, avail, int(limits[res]))
    providers: list[dict[str, list[Hint] | None]] = [dict(dev_hints)]
    cpu: list[Hint] | None = None
    if case["cpu_manager"] == "static":
        demand = pod_demand(case["pod"])
        want = demand.cpus(case["scope"])
        if want > 0:
            cpu = generate_hints({c["numa"]: c["count"] for c in case["cpus"]},
                                 {c["numa"]: c["free"] for c in case["cpus"]}, want)
            providers.append({"cpu": cpu})
        else:
            providers.append({})
    dist = ({int(k): v for k, v in case["distances"].items()}
            if case.get("distances") else None)
    result = merge(case["policy"], nodes, providers, prefer_closest=case["prefer_closest"],
                   distances=dist)
    allocated: dict[str, list[str]] = {}
    errors: dict[str, str] = {}
    if result.admit:
        mask = None if case["policy"] == "none" else result.hint.mask
        for res, ds in case["devices"].items():
            avail_ids = {d["id"]: (None if d["numa"] < 0 else d["numa"]) for d in ds
                         if d["healthy"] and not d["allocated"]}
            want = case["plugin"][res]["want"]
            try:
                got = devices_to_allocate(mask, avail_ids, int(limits[res]),
                                          lambda a, m, size, w=want: _propose(w, a, m, size))
                allocated[res] = sorted(got)
            except ValueError as exc:
                errors[res] = str(exc)
    return {"device_hints": dev_hints, "cpu_hints": cpu, "hint": result.hint,
            "admit": result.admit, "allocated": allocated, "errors": errors}


def _propose(want: Sequence[str], available: frozenset[str], must: frozenset[str],
             size: int) -> list[str]:
    """gputopo's GetPreferredAllocation for whole devices (device_plugin.identity.propose)."""
    if any(d not in want for d in must):
        raise ValueError("the kubelet insists on another device")
    chosen = sorted(must) + [d for d in want if d in available and d not in must]
    if len(chosen) < size:
        raise ValueError("not offered")
    return chosen[:size]


def test_model_equals_the_kubelet_on_random_cases(harness: Path) -> None:
    """5,000 random cases: device hints, CPU hints, merged hint, admission and the devices
    allocated are the kubelet's, exactly (allocation compared where the outcome does not
    depend on Go's random set order: the plugin's choice succeeds or every path fails)."""
    rng = random.Random(20250514)
    cases = [json.loads(json.dumps(abstract_case(rng, i))) for i in range(5000)]
    answers = run(harness, cases)
    seen = {"admit": 0, "reject": 0, "cpu": 0, "allocated": 0, "refused": 0, "closest": 0}
    for case, go in zip(cases, answers, strict=True):
        mine = model_answer(case)
        where = f"case {case['id']}: {json.dumps(case)}"
        for res, hs in go["device_hints"].items():
            assert go_hints(hs) == mine["device_hints"][res], where
        assert go_hints(go["cpu_hints"]) == mine["cpu_hints"], where
        assert go_hint(go["hint"]) == mine["hint"], where
        assert go["admit"] == mine["admit"], where
        seen["admit" if go["admit"] else "reject"] += 1
        seen["cpu"] += go["cpu_hints"] is not None
        seen["closest"] += bool(case["prefer_closest"] and go["hint"]["nodes"]
                                and len(go["hint"]["nodes"]) > 1)
        for res in case["devices"]:
            if res in go["allocated"] and set(go["allocated"][res]) == set(
                    case["plugin"][res]["want"]):
                assert mine["allocated"].get(res) == sorted(go["allocated"][res]), where
                seen["allocated"] += 1
            elif res in go["errors"] and "rpc failed" in go["errors"][res]:
                assert res not in mine["allocated"] or set(mine["allocated"][res]) != set(
                    case["plugin"][res]["want"]), where
                seen["refused"] += 1
    # the cases reach every branch
    assert min(seen.values()) > 100, seen


# ------------------------------------------------------------------ gputopo nodes
MACHINES = ("dgx1-v100", "dgx-a100", "pcie-8gpu", "minsky", "summit", "gaia-4gpu", "t4-1")


PROFILE_ANNOTATIONS = {"gputopo.io/profile": "resnet18:64"}


def job_profile() -> Any:
    """A co-location job profile (the built-in catalog's resnet18:64)."""
    p = {"metadata": {"name": "j", "namespace": "default", "annotations": PROFILE_ANNOTATIONS},
         "spec": {"containers": [{"name": "c", "resources": {
             "limits": {RESOURCE_GPU_SHARED: "1"}}}]}}
    request = request_from_pod(p)
    assert request is not None and request.shared is not None
    return request.shared.profile


def gputopo_state(rng: random.Random, n: int, memory_units: int) -> NodeState:
    """Idle GPUs, GPUs held whole, split into vGPU shares, or carrying 1-3 co-located jobs
    (each reserving 8 vGPU-memory units), and a few unhealthy ones."""
    usage: dict[int, GPUUsage] = {}
    profile = job_profile()
    for g in range(n):
        kind = rng.choice(["idle", "idle", "idle", "whole", "whole", "share", "coloc"])
        if kind == "whole":
            usage[g] = GPUUsage(FULL_CORE, 0)
        elif kind == "share":
            usage[g] = GPUUsage(rng.randint(1, 90), UNIT_MIB * rng.randint(1, memory_units // 2))
        elif kind == "coloc":
            usage[g] = GPUUsage(residents=tuple(Resident(f"r{g}-{k}", profile, 8 * UNIT_MIB)
                                                for k in range(rng.randint(1, 3))))
    sick = frozenset(g for g in range(n) if rng.random() < 0.05)
    return NodeState(usage, sick)


def node_case(rng: random.Random, i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A catalog machine in a random gputopo state, a whole-GPU, vGPU-share or co-location-slot
    pod, the
    kubelet's device view of that state (:func:`kubelet_free_gpus`, :func:`unit_views`), and a
    candidate placement the extender could make (free GPUs, or a GPU with room for the share).
    Returns (harness case, what the model needs)."""
    while True:  # a state with somewhere to put the pod
        name = rng.choice([m for m in MACHINES if m in catalog.names()])
        topo = catalog.get(name)
        units = topo.gpus[0].memory_mib // UNIT_MIB
        state = gputopo_state(rng, topo.size, units)
        free = list(state.free_gpus(topo))
        core, mem = rng.randint(1, 60), rng.randint(0, 8)
        kind = rng.choices(["whole", "share", "slot"], weights=(55, 25, 20))[0]
        if kind == "share":
            room = [g.index for g in topo.gpus if g.index not in state.unhealthy
                    and not state.used(g.index).residents
                    and state.used(g.index).core_percent + core <= FULL_CORE
                    and state.used(g.index).memory_mib + mem * UNIT_MIB <= g.memory_mib
                    and not (state.used(g.index).core_percent == FULL_CORE
                             and state.used(g.index).memory_mib == 0)]
        else:  # a co-location slot: no whole holder, no vGPU share, a slot and memory free
            room = [g.index for g in topo.gpus if g.index not in state.unhealthy
                    and not state.used(g.index).core_percent
                    and not state.used(g.index).memory_mib
                    and len(state.used(g.index).residents) < state.slots_per_gpu
                    and state.used(g.index).resident_memory_mib + mem * UNIT_MIB
                    <= g.memory_mib]
        whole = kind == "whole"
        if (whole and free) or (not whole and room):
            break
    config = KubeletConfig(rng.choice(TOPOLOGY_MANAGER_POLICIES[1:]),
                           rng.choice(["container", "pod"]), rng.choice(["static", "none"]))
    devices: dict[str, list[dict[str, Any]]] = {}
    plugin: dict[str, Any] = {}
    if whole:
        n = rng.randint(1, min(len(free), 5))
        limits = {RESOURCE_GPU: n}
        k_free = kubelet_free_gpus(topo, state)
        devices[RESOURCE_GPU] = [
            {"id": f"g{g.index}", "numa": g.numa_node, "healthy": g.index not in state.unhealthy,
             "allocated": g.index not in k_free and g.index not in state.unhealthy}
            for g in topo.gpus]
        chosen = sorted(rng.sample(free, n))
        plugin[RESOURCE_GPU] = {"kind": "gpu", "want": [f"g{g}" for g in chosen]}
    else:
        limits = {RESOURCE_VGPU_CORE: core} if kind == "share" else {RESOURCE_GPU_SHARED: 1}
        if mem:
            limits[RESOURCE_VGPU_MEMORY] = mem
        views = unit_views(topo, state, UNIT_MIB)
        chosen = [rng.choice(room)]
        for res in limits:
            v = views[res]
            ds = []
            for g in topo.gpus:
                used = v.total[g.index] - v.free[g.index]
                for u in range(v.total[g.index]):
                    ds.append({"id": f"g{g.index}::{res[-4:]}-{u:03d}", "numa": g.numa_node,
                               "healthy": g.index not in state.unhealthy,
                               "allocated": g.index not in state.unhealthy and u < used})
            devices[res] = ds
            plugin[res] = {"kind": "unit", "want": [f"g{chosen[0]}"]}
    p = pod(rng, limits, f"n{i}")
    if kind == "slot":
        p["metadata"]["annotations"] = dict(PROFILE_ANNOTATIONS)
    per_numa = cpus_per_numa(topo)
    harness_case = {
        "id": i, "policy": config.topology_manager_policy,
        "scope": config.topology_manager_scope, "prefer_closest": False,
        "cpu_manager": config.cpu_manager_policy,
        "cpus": [{"numa": n, "count": per_numa[n], "free": per_numa[n]}
                 for n in gpu_numa_nodes(topo)],
        "pod": p, "devices": devices, "plugin": plugin,
    }
    return harness_case, {"topology": topo, "state": state, "config": config,
                          "chosen": chosen, "whole": whole}


def iter_node_cases(seed: int, count: int) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    rng = random.Random(seed)
    for i in range(count):
        yield node_case(rng, i)


def test_align_predicts_what_the_kubelet_accepts_on_gputopo_nodes(harness: Path) -> None:
    """On catalog machines in random gputopo states (whole GPUs, vGPU shares, co-located jobs,
    unhealthy GPUs),
    :func:`align` says a placement works (admitted, its GPUs eligible, the must-include GPUs
    in it) exactly when the real kubelet code admits the pod and allocates exactly the
    placement's devices. CPUs are plentiful here (the model's assumption; the Go side is given
    every CPU of each NUMA node free)."""
    pairs = list(iter_node_cases(7, 3000))
    answers = run(harness, [c for c, _ in pairs])
    agree = {"works": 0, "fails": 0, "slot works": 0, "slot fails": 0}
    for (case, info), go in zip(pairs, answers, strict=True):
        request = request_from_pod(case["pod"], memory_unit_mib=UNIT_MIB)
        assert request is not None
        a = align(info["topology"], info["state"], request, info["config"],
                  pod_demand(case["pod"]), unit_mib=UNIT_MIB)
        chosen = set(info["chosen"])
        predicted = a.fits and chosen <= a.eligible and a.must_include <= chosen
        if info["whole"]:
            want = set(case["plugin"][RESOURCE_GPU]["want"])
            works = go["admit"] and set(go["allocated"].get(RESOURCE_GPU, ())) == want
        else:
            gpu = f"g{info['chosen'][0]}::"
            works = go["admit"] and all(
                res in go["allocated"] and all(d.startswith(gpu) for d in go["allocated"][res])
                for res in case["devices"])
        where = f"case {case['id']}: {json.dumps(case)}; model {a}"
        assert go["admit"] == a.admitted, where
        assert predicted == works, where
        agree["works" if works else "fails"] += 1
        if request.shared is not None:
            agree["slot works" if works else "slot fails"] += 1
    assert min(agree.values()) > 50, agree


def test_bits_roundtrip() -> None:
    assert bits(mask_of([0, 3, 5])) == (0, 3, 5)
