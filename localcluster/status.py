"""What ``gputopo cluster status`` prints about pods: each pod's phase, node and GPUs — from
its ResourceClaims' allocation in DRA mode, from its ``gputopo.io/*`` annotations otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from localcluster.dra import claim_gpus, pod_claims
from topology.contract import AssignmentError, parse_assignment


def pod_gpu_lines(kubeconfig: Path, mode: str) -> list[str]:
    """One line per pod of every namespace: ``namespace/name  phase  node  GPUs``."""
    api = k8s_config.new_client_from_config(config_file=str(kubeconfig))
    try:
        core = k8s_client.CoreV1Api(api)
        resp: Any = core.list_pod_for_all_namespaces(_preload_content=False)
        pods = json.loads(resp.data).get("items") or []
        claims: list[dict[str, Any]] = []
        if mode == "dra":
            res: Any = k8s_client.ResourceV1Api(api).list_resource_claim_for_all_namespaces(
                _preload_content=False)
            claims = json.loads(res.data).get("items") or []
    finally:
        api.close()
    lines = [f"{'pod':<36} {'phase':<10} {'node':<16} GPUs"]
    for pod in sorted(pods, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
        meta, spec = pod["metadata"], pod.get("spec") or {}
        gates = [g["name"] for g in spec.get("schedulingGates") or []]
        phase = "Gated" if gates else (pod.get("status") or {}).get("phase", "?")
        gpus = ""
        for c in pod_claims(pod, claims):
            got = claim_gpus(c)
            if got is not None:
                gpus += f"{c['metadata']['name']}: {','.join(map(str, got[1]))} "
        if not gpus:
            try:
                a = parse_assignment(meta.get("annotations"))
                gpus = ",".join(map(str, a.gpu_indices))
                if a.effective_bandwidth_gbps:
                    gpus += f" ({a.effective_bandwidth_gbps:.1f} GB/s)"
            except AssignmentError:
                gpus = "-"
        name = f"{meta['namespace']}/{meta['name']}"
        lines.append(f"{name:<36} {phase:<10} {spec.get('nodeName') or '-':<16} {gpus.strip()}")
    return lines
