"""Latency of the device plugin's GetPreferredAllocation and Allocate, over gRPC on a unix
socket, as the kubelet sees it (client-side wall time per call).

Per round a DGX-1 (8 V100) node is filled by the default policy, the extender's bind
annotations are written on the pods (``contract.assignment_annotations``), and the pods are
admitted one after another, like the kubelet's device manager does: GetPreferredAllocation
with the free devices, then Allocate with the answer. The node also lists ``--other-pods``
pods that need no GPU (the plugin reads every pod on the node per call). Pods come from the
in-memory pod source, so API-server latency is *not* included (a real LIST adds a round trip);
the kubelet's pod-resources ``List`` is served over a unix socket in the ``pod-resources``
mode, as on a real node.

Scenarios: whole GPUs (``nvidia.com/gpu``, 1/2/4-GPU pods) and GPU shares
(``gputopo.io/vgpu-core`` with 25 of 100 units, ``gputopo.io/vgpu-memory`` with 16 units),
each with and without the pod-resources view.

Run: ``.venv/bin/python -m benchmarks.bench_allocate [--quick]``; writes
``benchmarks/results/allocate.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from device_plugin.allocation import Allocator, Inventory
from device_plugin.api import api_pb2 as pb
from device_plugin.api import api_pb2_grpc as pb_grpc
from device_plugin.api import podresources_pb2 as pr
from device_plugin.api import podresources_pb2_grpc as pr_grpc
from device_plugin.devices import BY_NAME, build_devices
from device_plugin.kubelet_view import NoKubeletView, PodResourcesClient
from device_plugin.metrics import Metrics
from device_plugin.pods import MemoryPodSource, make_pod
from device_plugin.server import DevicePluginServicer, ResourceServer
from gpunode.health import HealthState
from topology import catalog
from topology.contract import (
    RESOURCE_GPU,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
    assignment_annotations,
)
from topology.policies.base import NodeState, NoFit, Request
from topology.policies.evaluate import Evaluator

#: This module's own evaluator (decision cache and policy memo; nothing shared).
place = Evaluator().place

OUT = Path(__file__).parent / "results" / "allocate.json"
NODE = "bench-node"
UNIT_MIB = 256


class _Kubelet(pr_grpc.PodResourcesListerServicer):
    """The kubelet's pod-resources List: pods received and the devices given to them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pods: dict[tuple[str, str], dict[str, set[str]]] = {}

    def List(self, request: Any, context: Any) -> pr.ListPodResourcesResponse:
        with self.lock:
            out = [
                pr.PodResources(
                    namespace=ns,
                    name=name,
                    containers=[
                        pr.ContainerResources(
                            name="main",
                            devices=[
                                pr.ContainerDevices(resource_name=r, device_ids=sorted(ids))
                                for r, ids in by_res.items()
                                if ids
                            ],
                        )
                    ],
                )
                for (ns, name), by_res in self.pods.items()
            ]
        return pr.ListPodResourcesResponse(pod_resources=out)


def _pods(topo: Any, kind: str, sizes: list[int]) -> list[tuple[dict[str, Any], dict[str, int]]]:
    """Pods that fill the node, with the annotations bind writes and their limits."""
    state = NodeState()
    out = []
    i = 0
    while True:
        if kind == "whole":
            req = Request(count=sizes[i % len(sizes)])
        else:
            req = Request(count=0, core_percent=25, memory_mib=16 * UNIT_MIB)
        try:
            d = place("gputopo", topo, state, req)
        except NoFit:
            break
        state = state.with_allocation(d)
        limits = (
            {RESOURCE_GPU: len(d.gpus)}
            if kind == "whole"
            else {RESOURCE_VGPU_CORE: 25, RESOURCE_VGPU_MEMORY: 16}
        )
        created = f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"
        pod = make_pod(
            f"gpu-{i}",
            NODE,
            created=created,
            annotations=assignment_annotations(d, NODE),
            limits=limits,
        )
        out.append((pod, limits))
        i += 1
    return out


def run_round(
    kind: str,
    oracle: bool,
    other_pods: int,
    sizes: list[int],
    workdir: Path,
    samples: dict[str, list[float]],
) -> None:
    topo = catalog.get("dgx1-v100")
    pods = _pods(topo, kind, sizes)
    source = MemoryPodSource([p for p, _l in pods])
    for j in range(other_pods):
        source.add(make_pod(f"cpu-{j}", NODE, limits={"cpu": 1}, phase="Running"))
    kubelet = _Kubelet()
    pr_server = None
    view: Any = NoKubeletView()
    if oracle:
        pr_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pr_grpc.add_PodResourcesListerServicer_to_server(kubelet, pr_server)
        pr_sock = workdir / f"pr-{time.monotonic_ns()}.sock"  # a fresh path per round
        pr_server.add_insecure_port(f"unix://{pr_sock}")
        pr_server.start()
        view = PodResourcesClient(str(pr_sock))
    metrics = Metrics()
    health = HealthState()
    allocator = Allocator(
        topo, NODE, source, view=view, unit_mib=UNIT_MIB, metrics=metrics, allocate_wait_s=0
    )
    inventory = Inventory(topo, health, UNIT_MIB)
    stop = threading.Event()
    resources = [RESOURCE_GPU] if kind == "whole" else [RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY]
    servers, clients, channels = [], {}, []
    for r in resources:
        spec = BY_NAME[r]
        srv = ResourceServer(
            spec, workdir, DevicePluginServicer(spec, inventory, allocator, metrics, stop)
        )
        srv.start()
        servers.append(srv)
        ch = grpc.insecure_channel(f"unix://{srv.socket_path}")
        channels.append(ch)
        clients[r] = pb_grpc.DevicePluginStub(ch)
    free = {r: [d.id for d in build_devices(topo, BY_NAME[r], UNIT_MIB)] for r in resources}
    try:
        for pod, limits in pods:
            key = ("default", pod["metadata"]["name"])
            with kubelet.lock:
                kubelet.pods[key] = {}
            for r, size in limits.items():
                t0 = time.perf_counter()
                pref = clients[r].GetPreferredAllocation(
                    pb.PreferredAllocationRequest(
                        container_requests=[
                            pb.ContainerPreferredAllocationRequest(
                                available_deviceIDs=free[r], allocation_size=size
                            )
                        ]
                    ),
                    timeout=10,
                )
                t1 = time.perf_counter()
                ids = list(pref.container_responses[0].deviceIDs)
                clients[r].Allocate(
                    pb.AllocateRequest(
                        container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)]
                    ),
                    timeout=10,
                )
                t2 = time.perf_counter()
                samples.setdefault(f"{r} preferred", []).append(t1 - t0)
                samples.setdefault(f"{r} allocate", []).append(t2 - t1)
                taken = set(ids)
                free[r] = [d for d in free[r] if d not in taken]
                with kubelet.lock:
                    kubelet.pods[key][r] = taken
    finally:
        stop.set()
        health.close()
        for ch in channels:
            ch.close()
        for srv in servers:
            srv.stop(0)
        if pr_server is not None:
            view.close()
            pr_server.stop(0).wait(5)


def _stats(xs: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in xs)

    def pct(p: float) -> float:
        return ms[min(len(ms) - 1, max(0, round(p / 100 * len(ms)) - 1))]

    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 3),
        "p99_ms": round(pct(99), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "max_ms": round(ms[-1], 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few rounds (CI smoke run)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per scenario")
    ap.add_argument("--other-pods", type=int, default=100, help="non-GPU pods listed on the node")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    rounds = args.rounds or (3 if args.quick else 60)
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    workdir = Path(tempfile.mkdtemp(prefix="gbench", dir="/tmp"))
    try:
        for kind, sizes in (("whole", [1, 2, 4, 1]), ("fractional", [])):
            for oracle in (False, True):
                samples: dict[str, list[float]] = {}
                for _ in range(2):  # warm-up (imports, channel set-up)
                    run_round(kind, oracle, args.other_pods, sizes, workdir, {})
                t0 = time.perf_counter()
                for _ in range(rounds):
                    run_round(kind, oracle, args.other_pods, sizes, workdir, samples)
                mode = "pod-resources" if oracle else "creation-order"
                for name, xs in sorted(samples.items()):
                    results[f"{name} [{mode}]"] = _stats(xs)
                print(f"{kind:10s} {mode:14s} {time.perf_counter() - t0:6.1f}s")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    doc = {
        "what": "client-side latency per RPC over a unix socket, in-memory pod source, "
        f"DGX-1 V100 node filled by the gputopo policy, {args.other_pods} other pods "
        "listed on the node",
        "rounds": rounds,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for name, st in results.items():
        print(f"{name:55s} n={st['n']:5d}  p50 {st['p50_ms']:7.3f} ms  p99 {st['p99_ms']:7.3f} ms")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
