"""gputopo's DRA mode against NVIDIA's DRA model, and DRA-mode scheduling throughput.

Three parts (``--parts``, all by default):

* ``sim`` — the simulator: the MAPA stream (``--jobs`` jobs, seed ``--seed``: 1–5 GPUs, ring,
  sensitive or not) on 8 DGX-1 V100, placed by ``dra-first-fit`` (kube-scheduler's
  first fit over one device per GPU: NVIDIA's model), ``dra-first-fit-pcieroot`` (the same
  with ``matchAttribute: resource.kubernetes.io/pcieRoot`` on claims that fit one root) — both
  with kube-scheduler's random node choice — and ``gputopo`` (what the DRA allocator runs),
  in kube-scheduler's queue discipline (``backfill``) and MAPA's ``fifo``. EffBW (judged with
  gputopo-v1) of the bandwidth-sensitive multi-GPU jobs: min, p25, median; makespan.
* ``scheduler`` — the same stream through the real kube-scheduler 1.36 on 8 kwok DGX-1 V100
  nodes whose slices the real ``gputopo dra-driver`` publishes, one fresh cluster per model:
  NVIDIA's model (the driver without its allocator taint, no gputopo allocator: kube-scheduler
  allocates), the same with the pcieRoot constraint in the claim templates of 1–2 GPUs, and
  gputopo's DRA mode (``gputopo dra-allocator`` and the gate). Jobs run for their
  simulated time divided by ``--time-scale`` (kwok completes a pod when its
  ``kwok.gputopo.io/run-duration`` passes; the duration is set from the EffBW of the GPUs the
  pod got, with the simulator's run-time model). EffBW of the sensitive multi-GPU claims and
  makespan (scaled back).
* ``throughput`` — pods/s through the same kube-scheduler on one control plane with
  ``--tp-nodes`` DGX-1 V100 nodes of each kind: device-plugin mode (the extender decides and
  binds), gputopo's DRA mode (the allocator, the gate), and DRA with kube-scheduler allocating
  (NVIDIA's model: the allocator stopped, a namespace the gate skips) — ``--tp-pods`` pods of
  1–2 GPUs each, created by 8 threads, one run each, ``stream`` (created → all bound) and
  ``backlog`` (kube-scheduler started once the pods wait; first → last bind), with every
  component's CPU per pod.
* ``admission`` — kube-apiserver CPU per pod creation with and without the scheduling-gate
  policy, and with the policy's mutation written as a JSONPatch instead of the chart's
  ApplyConfiguration.

Run: ``.venv/bin/python -m benchmarks.bench_dra`` (``--parts`` a subset of
``sim,scheduler,throughput,admission``); prints Markdown tables and writes
``benchmarks/results/dra.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import yaml

from simulator import runtime as rt
from simulator.engine import Simulation
from simulator.report import makespan, quantiles
from simulator.workloads import Job, mapa
from topology import catalog
from topology.patterns import parse_pattern
from topology.policies.common import MODEL_GPUTOPO
from topology.policies.memo import Memo

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ("dra-first-fit", "dra-first-fit-pcieroot", "gputopo")
ANN_RUN = "kwok.gputopo.io/run-duration"
#: Namespace of the DRA pods kube-scheduler allocates itself (the gate policy skips it).
KS_NAMESPACE = "bench-kube-scheduler"


# ------------------------------------------------------------------------------ simulator
def part_sim(jobs: int, seed: int) -> dict[str, Any]:
    """The three models in the simulator, both queue disciplines."""
    topo = catalog.get("dgx1-v100")
    wl = mapa(jobs=jobs, seed=seed)
    out: dict[str, Any] = {}
    memo = Memo()
    for queue in ("backfill", "fifo"):
        for policy in MODELS:
            r = Simulation(topo, 8, wl, policy, queue=queue, memo=memo).run()
            eff = [x.effbw_gbps for x in r.records if x.measured]
            out[f"{policy}/{queue}"] = {
                "policy": policy, "queue": queue, "node_choice": r.node_choice,
                "effbw_sensitive_gbps": quantiles(eff), "makespan_s": round(makespan(r), 1),
                "jobs": len(r.records), "measured": len(eff),
            }
    return out


# ------------------------------------------------------------------------- real scheduler
def complete_stages(default_stages: Path, out: Path) -> Path:
    """kwok's stages with ``pod-complete`` finishing any Running pod :data:`ANN_RUN` after
    that annotation appears (not only Job pods); pods without it keep running."""
    docs = [d for d in yaml.safe_load_all(default_stages.read_text()) if d]
    stage = next(d for d in docs if (d.get("metadata") or {}).get("name") == "pod-complete")
    sel = stage["spec"]["selector"]
    path = f'.metadata.annotations["{ANN_RUN}"]'
    sel["matchExpressions"] = [e for e in sel.get("matchExpressions") or []
                               if "ownerReferences" not in str(e.get("key"))]
    sel["matchExpressions"].append({"key": path, "operator": "Exists"})
    stage["spec"]["delay"] = {"durationMilliseconds": 0,
                              "durationFrom": {"expressionFrom": path}}
    stage["spec"].pop("weightFrom", None)
    out.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return out


def run_time(job: Job, gpus: Sequence[int], ideal: float | None) -> float:
    """The job's run time on ``gpus`` (allocation order = pattern order), simulated s."""
    topo = catalog.get("dgx1-v100")
    if job.gpus < 2:
        return job.runtime_s
    eff = rt.judge_effbw(topo, parse_pattern(job.pattern, job.gpus), gpus, MODEL_GPUTOPO)
    return job.runtime_s * rt.bandwidth_factor(eff, ideal, job.comm_share)


def _driver_taints() -> bool:
    """The installed ``gputopo dra-driver`` can leave its allocator taint off (then the
    NVIDIA-model runs pass ``--no-allocator-taint``; without the flag there is no taint)."""
    import subprocess

    from localcluster.gpucluster import gputopo_command

    out = subprocess.run([*gputopo_command(), "dra-driver", "--help"], capture_output=True,
                         text=True, check=False).stdout
    return "allocator-taint" in out


def part_scheduler(jobs: int, seed: int, scale: float, timeout_s: float) -> dict[str, Any]:
    """The stream through the real kube-scheduler, one fresh cluster per model."""
    from localcluster import ControlPlane, find_binaries
    from localcluster.dra import DraCluster, DraPod, claim_gpus, pod_claims

    topo = catalog.get("dgx1-v100")
    wl = mapa(jobs=jobs, seed=seed)
    memo = Memo()
    ideals = {k: rt.ideal_effbw(topo, parse_pattern("ring", k), MODEL_GPUTOPO, memo)
              for k in range(2, 6)}
    untaint = ("--no-allocator-taint",) if _driver_taints() else ()
    out: dict[str, Any] = {}
    binaries = find_binaries()
    for model in MODELS:
        gputopo = model == "gputopo"
        with ControlPlane(binaries) as cp, DraCluster(cp) as dc:
            stages = complete_stages(cp.default_kwok_stages(), cp.workdir / "stages.yaml")
            dc.start([(f"dgx-{i}", "dgx1-v100") for i in range(8)], allocator=gputopo,
                     gate=gputopo, driver_args=() if gputopo else untaint,
                     kwok_stages=stages)
            client = dc.client
            for k in range(1, 6):
                client.create_claim_template(f"gpus-{k}", gpus=k)
                if model == "dra-first-fit-pcieroot" and k == 2:  # a DGX-1 root holds 2 GPUs
                    _add_pcie_constraint(client, f"gpus-{k}")
            by_name = {f"j{j.id}": j for j in wl.jobs}
            got: dict[str, tuple[str, tuple[int, ...]]] = {}
            done: dict[str, float] = {}
            t0 = time.monotonic()
            for name, j in by_name.items():
                client.create_pod(DraPod(name, template=f"gpus-{j.gpus}", pattern=j.pattern,
                                         sensitive=j.sensitive))
            deadline = time.monotonic() + timeout_s
            while len(done) < len(by_name) and time.monotonic() < deadline:
                pods = client.list_pods()
                claims = client.list_claims()
                now = time.monotonic() - t0
                finished = []
                for p in pods:
                    name = p["metadata"]["name"]
                    if name not in by_name:
                        continue
                    if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                        done.setdefault(name, now)
                        finished.append(name)
                    elif name not in got and p["spec"].get("nodeName"):
                        mine = pod_claims(p, claims)
                        alloc = claim_gpus(mine[0]) if mine else None
                        if alloc is None:
                            continue
                        got[name] = alloc
                        j = by_name[name]
                        secs = run_time(j, alloc[1], ideals.get(j.gpus)) / scale
                        client.core.patch_namespaced_pod(name, client.namespace, {
                            "metadata": {"annotations": {ANN_RUN: f"{secs:.3f}s"}}})
                client.delete_pods(finished)  # their claims go with them
                time.sleep(0.2)
            eff = [rt.judge_effbw(topo, parse_pattern(by_name[n].pattern, by_name[n].gpus),
                                  gpus, MODEL_GPUTOPO)
                   for n, (_node, gpus) in got.items()
                   if by_name[n].sensitive and by_name[n].gpus > 1]
            span = max(done.values()) * scale if done else float("nan")
            out[model] = {"effbw_sensitive_gbps": quantiles(eff), "makespan_s": round(span, 1),
                          "completed": len(done), "jobs": len(by_name), "time_scale": scale}
    return out


def _add_pcie_constraint(client: Any, template: str) -> None:
    """Give a template ``constraints: [{matchAttribute: resource.kubernetes.io/pcieRoot}]``
    (templates are immutable: delete and create again)."""
    ns = client.namespace
    resp: Any = client.resource.read_namespaced_resource_claim_template(
        template, ns, _preload_content=False)
    doc = json.loads(resp.data)
    client.resource.delete_namespaced_resource_claim_template(template, ns)
    doc["metadata"] = {"name": template, "namespace": ns}
    doc["spec"]["spec"]["devices"]["constraints"] = [
        {"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    client.resource.create_namespaced_resource_claim_template(ns, doc)


# ---------------------------------------------------------------------------- throughput
#: The DeviceClass of the DRA pods kube-scheduler allocates itself: gputopo's whole-GPU
#: devices under another name, so gputopo's allocator leaves their claims alone (it stays up,
#: warm, as in a cluster where other classes' pods come and go).
KS_CLASS = "first-fit.bench.gputopo.io"
SHORT = {"device-plugin": "dp", "dra": "gt", "dra-kube-scheduler": "ks"}


def _ks_class() -> dict[str, Any]:
    from topology import dra

    gpu = next(c for c in dra.device_classes() if c["metadata"]["name"] == dra.CLASS_GPU)
    return {**gpu, "metadata": {"name": KS_CLASS}}


def part_throughput(nodes: int, pods: int, timeout_s: float, repeats: int = 3) -> dict[str, Any]:
    """pods/s through one kube-scheduler, device-plugin mode and DRA mode (gputopo's
    allocator), on one control plane: ``nodes`` DGX-1 V100 of each kind, the same ``pods``
    pods of 1–2 GPUs in each run, created by 8 threads. Two ways, ``repeats`` rounds of every
    mode (alternating; the median is reported, every round kept):

    * ``stream`` — kube-scheduler running; from the first create to the last bind: the whole
      pipeline (in DRA mode the resourceclaim controller's claims and the allocator too);
    * ``backlog`` — kube-scheduler stopped while the pods are created (and, in DRA mode, their
      claims made and allocated); then started; from the first bind to the last: what the
      scheduler sustains.

    The CPU each component spent per pod in the stream runs is recorded beside them (median
    over the rounds)."""
    from concurrent.futures import ThreadPoolExecutor

    from benchmarks.bench_scheduler import RUN_LABEL, BindWatch
    from localcluster import ControlPlane, find_binaries
    from localcluster.controlplane import wait_until
    from localcluster.dra import DraClient, DraCluster, DraPod, apply_objects, claim_gpus
    from localcluster.gpucluster import GpuPod, add_gpu_node

    rng = np.random.default_rng(7)
    sizes = [int(k) for k in rng.integers(1, 3, size=pods)]
    out: dict[str, Any] = {"nodes_per_mode": nodes, "pods": pods, "gpus_asked": sum(sizes),
                           "repeats": repeats}
    nogate = {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                    "operator": "NotIn", "values": [KS_NAMESPACE]}]}
    untaint = ("--no-allocator-taint",) if _driver_taints() else ()
    rounds: dict[str, list[dict[str, Any]]] = {}
    with ControlPlane(find_binaries()) as cp, DraCluster(cp) as dc:
        dc.start([(f"dra-{i}", "dgx1-v100") for i in range(nodes)], driver_args=untaint,
                 values={"draAllocator": {"gate": {"namespaceSelector": nogate}}})
        for i in range(nodes):
            dc.nodes[f"dp-{i}"] = add_gpu_node(cp, f"dp-{i}", "dgx1-v100")
        client = dc.client
        cp.create_default_serviceaccount(KS_NAMESPACE)
        apply_objects(cp, [_ks_class()])
        ks = DraClient(cp.api_client(), KS_NAMESPACE, dc.scheduler_name)
        for k in (1, 2):
            client.create_claim_template(f"gpus-{k}", gpus=k)
            ks.create_claim_template(f"gpus-{k}", gpus=k, device_class=KS_CLASS)
        config = dc.scheduler_config
        procs = {p.name: p.pid for p in cp.processes if p.pid}
        for comp in (dc.extender, dc.allocator):
            if comp is not None and comp.pid and comp.process is not None:
                procs[comp.process.name] = comp.pid
        for rep in range(repeats):
            for way in ("stream", "backlog"):
                for mode in ("device-plugin", "dra", "dra-kube-scheduler"):
                    run = f"{way[:2]}-{SHORT[mode]}-{rep}"
                    names = [f"{run}-{i}" for i in range(pods)]
                    labels = {RUN_LABEL: run}

                    def create(pair: tuple[str, int], mode: str = mode,
                               labels: dict[str, str] = labels) -> None:
                        name, k = pair
                        if mode == "dra":
                            client.create_pod(DraPod(name, template=f"gpus-{k}", labels=labels))
                        elif mode == "dra-kube-scheduler":
                            ks.create_pod(DraPod(name, template=f"gpus-{k}", labels=labels))
                        else:
                            dc.create_pod(GpuPod(name, gpus=k, labels=labels))

                    if way == "backlog":
                        dc.stop_scheduler()
                    dc.namespace = (ks.namespace if mode == "dra-kube-scheduler"
                                    else client.namespace)
                    watch = BindWatch(dc, run).start()
                    cpu0 = {n: _cpu_s(p) for n, p in procs.items()}
                    t0 = time.monotonic()
                    with ThreadPoolExecutor(8) as ex:
                        list(ex.map(create, zip(names, sizes, strict=True)))
                    if way == "backlog":
                        if mode == "dra":  # the allocator works while the scheduler is off
                            wanted = set(names)

                            def allocated(wanted: set[str] = wanted) -> bool:
                                owners = [(c["metadata"].get("ownerReferences") or [{}])[0]
                                          .get("name") for c in client.list_claims()
                                          if claim_gpus(c) is not None]
                                return len(wanted & set(owners)) == len(wanted)

                            wait_until(allocated, timeout_s, "claims allocated",
                                       interval_s=0.1)
                        dc.start_scheduler(config)
                    watch.wait(pods, min(timeout_s, 180.0))
                    watch.stop()
                    first, last = min(watch.bound.values()), max(watch.bound.values())
                    span = last - (first if way == "backlog" else t0)
                    row: dict[str, Any] = {"pods_per_s": round(pods / span, 2),
                                           "seconds": round(span, 2)}
                    if way == "stream":
                        row["cpu_ms_per_pod"] = {
                            n: round(1000 * (_cpu_s(p) - cpu0[n]) / pods, 1)
                            for n, p in procs.items() if Path(f"/proc/{p}").exists()}
                    rounds.setdefault(f"{way}/{mode}", []).append(row)
                    dc.delete_all_pods()
                    dc.namespace = client.namespace
                    procs.update({p.name: p.pid for p in cp.processes if p.pid})
    for key, rows in rounds.items():
        med: dict[str, Any] = {
            "pods_per_s": round(float(np.median([r["pods_per_s"] for r in rows])), 2),
            "rounds_pods_per_s": [r["pods_per_s"] for r in rows]}
        if "cpu_ms_per_pod" in rows[0]:
            comps = sorted({c for r in rows for c in r["cpu_ms_per_pod"]})
            med["cpu_ms_per_pod"] = {c: round(float(np.median(
                [r["cpu_ms_per_pod"].get(c, 0.0) for r in rows])), 1) for c in comps}
            med["cpu_ms_per_pod"]["total"] = round(sum(med["cpu_ms_per_pod"].values()), 1)
            med["rounds_cpu_ms_per_pod"] = [r["cpu_ms_per_pod"] for r in rows]
        out[key] = med
    for way in ("stream", "backlog"):
        dp = out[f"{way}/device-plugin"]["pods_per_s"]
        out[f"ratio_{way}"] = round(out[f"{way}/dra"]["pods_per_s"] / dp, 3)
        out[f"ratio_{way}_kube_scheduler"] = round(
            out[f"{way}/dra-kube-scheduler"]["pods_per_s"] / dp, 3)
        out[f"ratio_{way}_rounds"] = [
            round(a["pods_per_s"] / b["pods_per_s"], 3)
            for a, b in zip(rounds[f"{way}/dra"], rounds[f"{way}/device-plugin"], strict=True)]
    return out


#: The annotations the allocator adds when it lifts a 2-GPU pod's gate (as on a real pod).
LIFT_ANNOTATIONS = {
    "gputopo.io/node": "dgx1-v100-0", "gputopo.io/gpu-indices": "0,3",
    "gputopo.io/gpu-uuids": "GPU-df3ac597-d7a3-a6fd-d95d-8935ea176ee7,"
                            "GPU-4a1c7a0e-3f37-9d0b-2b1c-0c7f1f0e9a11",
    "gputopo.io/cuda-visible-devices": "GPU-df3ac597-d7a3-a6fd-d95d-8935ea176ee7,"
                                       "GPU-4a1c7a0e-3f37-9d0b-2b1c-0c7f1f0e9a11",
    "gputopo.io/effective-bandwidth-gbps": "50.0", "gputopo.io/decided-by": "gputopo",
    "gputopo.io/cpu-affinity": "0-19", "gputopo.io/numa-nodes": "0",
}


def jsonpatch_gate(objects: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The chart's gate policy with its mutation as a JSONPatch (adding the gate unless the
    pod has it) instead of an ApplyConfiguration: the same effect, another code path in
    kube-apiserver. The patch's value is an untyped map: a typed
    ``Object.spec.schedulingGates{...}`` value makes kube-apiserver 1.36.3 panic on the pod
    create ("reflect.Set: value of type *structpb.Struct is not assignable to type
    *structpb.Value")."""
    import copy

    gate = "gputopo.io/dra-allocation"
    add_one = (f"JSONPatch{{op: 'add', path: '/spec/schedulingGates/-', "
               f"value: {{'name': '{gate}'}}}}")
    add_list = (f"JSONPatch{{op: 'add', path: '/spec/schedulingGates', "
                f"value: [{{'name': '{gate}'}}]}}")
    out = [copy.deepcopy(dict(o)) for o in objects]
    for o in out:
        if o["kind"] != "MutatingAdmissionPolicy":
            continue
        o["spec"]["matchConditions"].append({"name": "not-gated-yet", "expression":
            f"!object.spec.?schedulingGates.orValue([]).exists(g, g.name == '{gate}')"})
        o["spec"]["mutations"] = [{"patchType": "JSONPatch", "jsonPatch": {
            "expression": f"has(object.spec.schedulingGates) ? [{add_one}] : [{add_list}]"}}]
    return out


def part_admission(pods: int, repeats: int = 2) -> dict[str, Any]:
    """kube-apiserver CPU per pod creation with and without the chart's scheduling-gate
    policy (MutatingAdmissionPolicy), and with that policy as a JSONPatch
    (:func:`jsonpatch_gate`), ``pods`` pods with a claim by 8 threads (after 10 warm-up
    creations), alternating, on a fresh control plane each: what the gate costs the API
    server. With the policy, the
    allocator's pod patch lifting the gate is priced too (the JSON patch ``release_ops``
    builds, by 8 threads): on half the pods with the decision's annotations, on the other half
    without. No other client watches pods there: fan-out to watchers is not in these
    figures."""
    from concurrent.futures import ThreadPoolExecutor

    from localcluster import ControlPlane, find_binaries
    from localcluster.dra import DraPod, apply_objects, dra_objects
    from scheduler_extender.dra.kube import release_ops

    out: dict[str, list[float]] = {"none": [], "gate": [], "gate-jsonpatch": []}
    lift: dict[str, list[float]] = {"with_annotations": [], "without": []}
    for _ in range(repeats):
        for which in out:
            with ControlPlane(find_binaries()) as cp:
                cp.create_default_serviceaccount("default")
                if which != "none":
                    policy = [o for o in dra_objects()
                              if o["kind"].startswith("MutatingAdmissionPolicy")]
                    apply_objects(cp, policy if which == "gate" else jsonpatch_gate(policy))
                    time.sleep(3)  # the policy is compiled and active
                core = cp.core_v1()
                for i in range(10):  # warm-up
                    core.create_namespaced_pod("default", cast(Any, DraPod(
                        f"w{i}", template="x").manifest()), _preload_content=False)
                api = next(p.pid for p in cp.processes if p.name == "kube-apiserver")
                assert api is not None
                before = _cpu_s(api)
                made: dict[int, Any] = {}

                def create(i: int, core: Any = core, made: dict[int, Any] = made) -> None:
                    made[i] = core.create_namespaced_pod(
                        "default", DraPod(f"g{i}", template="x").manifest(),
                        _preload_content=False)

                with ThreadPoolExecutor(8) as ex:
                    list(ex.map(create, range(pods)))
                out[which].append(round(1000 * (_cpu_s(api) - before) / pods, 2))
                gates = json.loads(made[0].data)["spec"].get("schedulingGates") or []
                assert (which == "none") == (not gates), (which, gates)
                if which != "gate":
                    continue
                half = pods // 2
                for label, idx, ann in (("with_annotations", range(half), LIFT_ANNOTATIONS),
                                        ("without", range(half, pods), {})):
                    def patch(i: int, core: Any = core, made: dict[int, Any] = made,
                              ann: dict[str, str] = ann) -> None:
                        pod = json.loads(made[i].data)
                        core.patch_namespaced_pod(
                            f"g{i}", "default", release_ops(pod, ann), _preload_content=False,
                            _content_type="application/json-patch+json")

                    before = _cpu_s(api)
                    with ThreadPoolExecutor(8) as ex:
                        list(ex.map(patch, idx))
                    lift[label].append(round(1000 * (_cpu_s(api) - before) / len(idx), 2))
    return {"pods": pods, "apiserver_cpu_ms_per_create": out,
            "gate_cost_ms": round(float(np.median(out["gate"]) - np.median(out["none"])), 2),
            "gate_jsonpatch_cost_ms": round(float(np.median(out["gate-jsonpatch"])
                                                  - np.median(out["none"])), 2),
            "apiserver_cpu_ms_per_gate_lift": lift}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / 100.0


# ------------------------------------------------------------------------------- report
def table(doc: Mapping[str, Any]) -> str:
    lines = []
    if "sim" in doc:
        lines += ["Simulator, MAPA stream on 8 DGX-1 V100 (EffBW of sensitive multi-GPU jobs, "
                  "GB/s; makespan s):", "",
                  "| model | queue | node choice | EffBW min | p25 | median | makespan |",
                  "|---|---|---|---:|---:|---:|---:|"]
        for r in doc["sim"].values():
            q = r["effbw_sensitive_gbps"]
            lines.append(f"| {r['policy']} | {r['queue']} | {r['node_choice']} | "
                         f"{q['min']:.1f} | {q['p25']:.1f} | {q['median']:.1f} | "
                         f"{r['makespan_s']:.0f} |")
        lines.append("")
    if "scheduler" in doc:
        lines += ["Real kube-scheduler 1.36, same stream (makespan scaled back to simulated s):",
                  "", "| model | EffBW min | p25 | median | makespan | completed |",
                  "|---|---:|---:|---:|---:|---:|"]
        for model, r in doc["scheduler"].items():
            q = r["effbw_sensitive_gbps"]
            lines.append(f"| {model} | {q['min']:.1f} | {q['p25']:.1f} | {q['median']:.1f} | "
                         f"{r['makespan_s']:.0f} | {r['completed']}/{r['jobs']} |")
        lines.append("")
    if "throughput" in doc:
        t = doc["throughput"]
        lines += ["Throughput through one kube-scheduler, pods/s (stream: created → all bound; "
                  "backlog: first → last bind):", "",
                  "| way | device-plugin | DRA, gputopo | DRA, kube-scheduler allocates | "
                  "gputopo DRA / device-plugin | kube-scheduler DRA / device-plugin |",
                  "|---|---:|---:|---:|---:|---:|"]
        for way in ("stream", "backlog"):
            lines.append(f"| {way} | {t[way + '/device-plugin']['pods_per_s']} | "
                         f"{t[way + '/dra']['pods_per_s']} | "
                         f"{t[way + '/dra-kube-scheduler']['pods_per_s']} | "
                         f"{t['ratio_' + way]} | {t['ratio_' + way + '_kube_scheduler']} |")
        lines.append("")
        if "cpu_ms_per_pod" in t.get("stream/dra", {}):
            comps = sorted({c for m in ("device-plugin", "dra", "dra-kube-scheduler")
                            for c in t[f"stream/{m}"]["cpu_ms_per_pod"]} - {"total"})
            lines += ["CPU per pod in the stream runs, ms (median of the rounds):", "",
                      "| component | device-plugin | DRA, gputopo | DRA, kube-scheduler |",
                      "|---|---:|---:|---:|"]
            for c in [*comps, "total"]:
                lines.append("| " + c + " | " + " | ".join(
                    str(t[f"stream/{m}"]["cpu_ms_per_pod"].get(c, 0.0))
                    for m in ("device-plugin", "dra", "dra-kube-scheduler")) + " |")
            lines.append("")
    if "admission" in doc:
        a = doc["admission"]
        lines += [f"kube-apiserver CPU per pod creation, ms: without the gate policy "
                  f"{a['apiserver_cpu_ms_per_create']['none']}, with it "
                  f"{a['apiserver_cpu_ms_per_create']['gate']} (+{a['gate_cost_ms']})"
                  + (f"; as a JSONPatch {a['apiserver_cpu_ms_per_create']['gate-jsonpatch']} "
                     f"(+{a['gate_jsonpatch_cost_ms']})" if "gate_jsonpatch_cost_ms" in a
                     else ""), ""]
        if "apiserver_cpu_ms_per_gate_lift" in a:
            g = a["apiserver_cpu_ms_per_gate_lift"]
            lines += [f"kube-apiserver CPU per gate lift (the allocator's pod patch), ms: with "
                      f"the decision's annotations {g['with_annotations']}, without "
                      f"{g['without']}", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_dra")
    ap.add_argument("--parts", default="sim,scheduler,throughput,admission")
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scheduler-jobs", type=int, default=120)
    ap.add_argument("--time-scale", type=float, default=50.0)
    ap.add_argument("--tp-nodes", type=int, default=8)
    ap.add_argument("--tp-pods", type=int, default=32)
    ap.add_argument("--tp-repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1200.0)
    ap.add_argument("--out", type=Path, default=RESULTS / "dra.json")
    args = ap.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    # the file of record holds every part: a run replaces only the parts it ran
    doc: dict[str, Any] = {}
    if args.out.exists():
        doc = json.loads(args.out.read_text())
    runs: dict[str, Any] = doc.setdefault("runs", {})
    if "command" in doc:  # the earlier layout: one command for the whole file
        old = {"command": doc.pop("command"), "loadavg_before": doc.pop("loadavg_before", None),
               "loadavg_after": doc.pop("loadavg_after", None)}
        for part in ("sim", "scheduler", "throughput", "admission"):
            if part in doc and part not in runs:
                runs[part] = old
    command = " ".join(["python -m benchmarks.bench_dra", *sys.argv[1:]])
    jobs = {
        "sim": lambda: part_sim(args.jobs, args.seed),
        "scheduler": lambda: part_scheduler(args.scheduler_jobs, args.seed, args.time_scale,
                                            args.timeout),
        "throughput": lambda: part_throughput(args.tp_nodes, args.tp_pods, args.timeout,
                                              args.tp_repeats),
        "admission": lambda: part_admission(300),
    }
    for part in ("sim", "scheduler", "throughput", "admission"):
        if part not in parts:
            continue
        start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        before, t0 = _uptime(), time.monotonic()
        doc[part] = jobs[part]()
        runs[part] = {"command": command, "started": start,
                      "wall_s": round(time.monotonic() - t0, 1),
                      "uptime_before": before, "uptime_after": _uptime(),
                      "cpus": os.cpu_count()}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(table(doc))
    print(f"wrote {args.out}")
    return 0


def _uptime() -> str:
    """``uptime``'s line (the load averages) now."""
    import subprocess

    try:
        return subprocess.run(["uptime"], capture_output=True, text=True,
                              check=False).stdout.strip()
    except OSError:
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
