"""Helpers of the extender tests: a MemoryState-backed app, pods, the captured requests."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from scheduler_extender.app import create_app
from scheduler_extender.settings import ExtenderSettings
from scheduler_extender.state import MemoryState
from topology import catalog
from topology.policies.registry import DEFAULT_POLICY, policies

#: The default policy when its module exists, else the one that always does.
POLICY = DEFAULT_POLICY if DEFAULT_POLICY in policies() else "baseline"

REPO = Path(__file__).resolve().parents[2]
_CAPTURED = Path("shared") / "fixtures" / "kube-scheduler-extender"
#: The captured requests: ``../shared`` beside the checkout, or above it (a copy of the tree
#: one level down, as mutation testing makes in ``mutants/``, finds the same fixtures).
FIXTURES = next(
    (base / _CAPTURED for base in REPO.parents if (base / _CAPTURED).is_dir()),
    REPO.parent / _CAPTURED,
)
FIXTURE_NODES = ("gpu-node-00", "gpu-node-01")


def load_fixture(name: str) -> dict[str, Any]:
    """A captured request body; skips the test when the fixtures are not there."""
    path = FIXTURES / name
    if not path.is_file():
        pytest.skip(f"kube-scheduler fixtures not found at {FIXTURES} (../shared/fixtures)")
    return json.loads(path.read_bytes())  # type: ignore[no-any-return]


def fixture_state() -> MemoryState:
    """gpu-node-00/01 as DGX-1 V100 nodes (the fixtures' node names)."""
    return MemoryState({n: catalog.get("dgx1-v100") for n in FIXTURE_NODES})


def make_client(state: MemoryState, policy: str = POLICY) -> TestClient:
    """A TestClient over a fresh app (server exceptions surface as responses)."""
    app = create_app(ExtenderSettings(policy=policy, state="memory", eval_budget_ms=0), state)
    return TestClient(app, raise_server_exceptions=False)


def gpu_pod(
    name: str = "p", gpus: int | str = 2, *, uid: str | None = None,
    annotations: dict[str, str] | None = None, resources: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Pod shaped like the fixtures' (one container asking for ``gpus``)."""
    if resources is None:
        resources = {"limits": {"nvidia.com/gpu": str(gpus)},
                     "requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}",
                     "annotations": annotations or {}},
        "spec": {"containers": [{"name": "main", "image": "x", "resources": resources}]},
        "status": {"phase": "Pending"},
    }


def names_args(pod: dict[str, Any], nodes: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """ExtenderArgs in nodeCacheCapable mode."""
    return {"Pod": pod, "Nodes": None, "NodeNames": list(nodes)}


def bind_args(pod: dict[str, Any], node: str) -> dict[str, Any]:
    meta = pod["metadata"]
    return {"PodName": meta["name"], "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"], "Node": node}


def with_annotation(node: dict[str, Any], key: str, value: str) -> dict[str, Any]:
    out = copy.deepcopy(node)
    out["metadata"].setdefault("annotations", {})[key] = value
    return out


Schedule = Callable[[dict[str, Any], list[str]], str | None]
