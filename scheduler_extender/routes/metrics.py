"""``GET /metrics`` (Prometheus text format)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from scheduler_extender.routes.deps import RuntimeDep

router = APIRouter(tags=["metrics"])


@router.get("/metrics")
async def metrics(rt: RuntimeDep) -> Response:
    """Request counts and latency per verb, bind errors, decisions per policy."""
    body, content_type = rt.metrics.render()
    return Response(content=body, media_type=content_type)
