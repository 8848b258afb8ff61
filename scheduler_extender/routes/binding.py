"""``POST /bind``: decide, reserve, bind (one Binding carrying the decision)."""

from __future__ import annotations

import anyio.to_thread
from fastapi import APIRouter, Request, Response

from scheduler_extender.routes.deps import RuntimeDep, body_doc, json_response, read_body, timed
from scheduler_extender.schemas import ExtenderBindingArgs, ExtenderBindingResult

router = APIRouter(tags=["binding"])


@router.post(
    "/bind",
    response_model=None,
    responses={200: {"model": ExtenderBindingResult, "description": "ExtenderBindingResult"}},
    openapi_extra=body_doc(ExtenderBindingArgs),
)
async def bind_pod(request: Request, rt: RuntimeDep) -> Response:
    """Bind the pod to ``Node`` on the GPUs the policy picks; ``Error`` says why not.
    Runs in a worker thread (the Kubernetes call blocks), at most ``bind_concurrency`` at
    once: one per keep-alive connection kept for Bindings."""
    args = await read_body(request, ExtenderBindingArgs)
    with timed(rt.metrics, "bind") as outcome:
        result = await anyio.to_thread.run_sync(rt.extender.bind, args, limiter=rt.bind_limiter)
        if result["Error"]:
            outcome.value = "error"
    return json_response(result)
