"""``GET /healthz`` (liveness) and ``GET /readyz`` (the state backend has synced)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from scheduler_extender.routes.deps import RuntimeDep, json_response

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> Response:
    """Always 200 while the process serves HTTP."""
    return json_response({"status": "ok"})


@router.get("/readyz")
async def readyz(rt: RuntimeDep) -> Response:
    """200 once the cluster state is synced, else 503 with the reason."""
    if rt.extender.state.ready():
        return json_response({"status": "ready"})
    return json_response(
        {"status": "not ready", "Error": "cluster state has not synced yet"}, status_code=503
    )
