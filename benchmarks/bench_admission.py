"""What the chart's admission policies cost, on the real kube-apiserver (docs/security.md).

* **Time to take effect**: from creating the policies and bindings to the first refused patch
  of another node by a device plugin (ValidatingAdmissionPolicy) and the first routed GPU pod
  (MutatingAdmissionPolicy), polled together every 10 ms; then from deleting them to the first
  allowed patch / unrouted pod. Repeated ``--rounds`` times on one control plane.
* **Per-request cost**: client-side wall time of a device plugin's Node merge patch (its pod-
  bound token) and of a GPU pod create (server-side dry run, the admin), with and without the
  policies, in alternating blocks so that drift of a shared host hits both alike.

Run: ``.venv/bin/python -m benchmarks.bench_admission [--quick]``; writes
``benchmarks/results/admission.json``. Needs the control-plane binaries and helm
(``scripts/build-k8s-tools.sh``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from device_plugin.plugin import core_api
from localcluster import ControlPlane, find_binaries
from localcluster.chart import DEFAULT_NAMESPACE, render_manifests
from localcluster.controlplane import SERVICE_ACCOUNT_ISSUER

RESULTS = Path(__file__).parent / "results" / "admission.json"
SA = "gputopo-device-plugin"
POLL_S = 0.01


def _plugin_api(cp: ControlPlane, node: str) -> Any:
    """A device plugin's client with a token bound to its pod on ``node``."""
    core: Any = cp.core_v1()
    pod = core.create_namespaced_pod(DEFAULT_NAMESPACE, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"plugin-{node}"},
        "spec": {"nodeName": node, "serviceAccountName": SA,
                 "containers": [{"name": "c", "image": "pause"}]}})
    token = core.create_namespaced_service_account_token(
        SA, DEFAULT_NAMESPACE, k8s_client.AuthenticationV1TokenRequest(
            spec=k8s_client.V1TokenRequestSpec(
                audiences=[SERVICE_ACCOUNT_ISSUER],
                bound_object_ref=k8s_client.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=pod.metadata.name,
                    uid=pod.metadata.uid)))).status.token
    path = cp.workdir / "plugin.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": cp.server_url,
                                               "certificate-authority": str(cp.ca_path)}}],
        "users": [{"name": "p", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "p"}}],
        "current-context": "c"}))
    return core_api(path)


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(1000 * statistics.median(ordered), 2),
            "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
            "mean_ms": round(1000 * statistics.fmean(ordered), 2), "n": len(ordered)}


def run(rounds: int, requests: int) -> dict[str, Any]:
    """Measure; see the module docstring."""
    objs = render_manifests()
    policies = [o for o in objs if "AdmissionPolicy" in o["kind"]]
    with ControlPlane(find_binaries()) as cp:
        dyn = DynamicClient(cp.api_client())
        core: Any = cp.core_v1()
        core.create_namespace(k8s_client.V1Namespace(
            metadata=k8s_client.V1ObjectMeta(name=DEFAULT_NAMESPACE)))
        cp.create_default_serviceaccount("default")
        for o in objs:
            if o not in policies:
                res = dyn.resources.get(api_version=o["apiVersion"], kind=o["kind"])
                ns = o["metadata"].get("namespace") if res.namespaced else None
                res.create(body=o, namespace=ns)
        for node in ("node-a", "node-b"):
            cp.add_kwok_node(node, {"cpu": 8})
        plugin = _plugin_api(cp, "node-a")
        gpu_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu"},
                   "spec": {"containers": [{"name": "m", "image": "cuda", "resources": {
                       "limits": {"nvidia.com/gpu": "1"}}}]}}

        def patch(node: str) -> bool:
            try:
                plugin.patch_node(node, {"metadata": {"annotations": {"bench": str(time.time())}}})
            except ApiException as exc:
                if exc.status != 403:
                    raise
                return False
            return True

        def routed() -> bool:
            pod = core.create_namespaced_pod("default", gpu_pod, dry_run="All")
            return bool(pod.spec.scheduler_name != "default-scheduler")

        def install() -> None:
            for o in policies:
                dyn.resources.get(api_version=o["apiVersion"], kind=o["kind"]).create(body=o)

        def uninstall() -> None:
            for o in policies:
                dyn.resources.get(api_version=o["apiVersion"], kind=o["kind"]).delete(
                    name=o["metadata"]["name"])

        effect: dict[str, list[float]] = {"deny_after_create_s": [], "route_after_create_s": [],
                                          "allow_after_delete_s": [],
                                          "unrouted_after_delete_s": []}
        latency: dict[str, list[float]] = {f"{what}_{state}": [] for what in
                                           ("plugin_node_patch", "gpu_pod_create_dry_run")
                                           for state in ("with", "without")}
        def took_effect(deny: Callable[[], bool], route: Callable[[], bool],
                        keys: tuple[str, str]) -> None:
            """Poll both policies' effect together; record each from ``t0``."""
            seen: dict[str, float] = {}
            while len(seen) < 2:
                if time.monotonic() - t0 > 60:
                    raise TimeoutError("the policies did not take effect")
                for key, check in zip(keys, (deny, route), strict=True):
                    if key not in seen and check():
                        seen[key] = time.monotonic() - t0
                time.sleep(POLL_S)
            for key, value in seen.items():
                effect[key].append(value)

        for _ in range(rounds):
            t0 = time.monotonic()
            install()
            took_effect(lambda: not patch("node-b"), routed,
                        ("deny_after_create_s", "route_after_create_s"))
            for state in ("with", "without"):
                if state == "without":
                    t0 = time.monotonic()
                    uninstall()
                    took_effect(lambda: patch("node-b"), lambda: not routed(),
                                ("allow_after_delete_s", "unrouted_after_delete_s"))
                for _ in range(requests):
                    t = time.perf_counter()
                    patch("node-a")
                    latency[f"plugin_node_patch_{state}"].append(time.perf_counter() - t)
                    t = time.perf_counter()
                    routed()
                    latency[f"gpu_pod_create_dry_run_{state}"].append(time.perf_counter() - t)
    return {
        "host": platform.node(), "python": platform.python_version(),
        "rounds": rounds, "requests_per_block": requests,
        "take_effect_s": {k: {"max": round(max(v), 3), "median": round(statistics.median(v), 3)}
                          for k, v in effect.items()},
        "latency": {k: _ms(v) for k, v in latency.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 50 requests")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    rounds, requests = (2, 50) if args.quick else (args.rounds, args.requests)
    result = run(rounds, requests)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
