"""Claims as the API server returns them, for the DRA driver's tests."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from topology import dra
from topology.dra import DeviceKind


def claim(name: str, node: str, gpus: list[int], *, namespace: str = "default",
          kind: DeviceKind = DeviceKind.GPU, core: int = 0, mem: int = 0,
          uid: str | None = None, request: str = "gpus",
          extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An allocated ResourceClaim (API JSON) giving ``gpus`` of ``node``."""
    share_ids = [str(uuid.uuid4())] if kind is not DeviceKind.GPU else []
    results = dra.allocation_results(node, gpus, request=request, kind=kind, core_percent=core,
                                     memory_mib=mem, share_ids=share_ids)
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())},
        "spec": {"devices": {"requests": [{"name": request, "exactly": {
            "deviceClassName": dra.CLASS_GPU, "count": len(gpus)}}]}},
        "status": {"allocation": {"devices": {"results": [*(extra or []), *results]}}},
    }


def write_claims(path: Path, claims: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"items": claims}))
