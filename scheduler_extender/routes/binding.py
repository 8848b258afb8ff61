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

    The decision is made and reserved at once, on the event loop (no I/O), so the next
    pods' filter already sees these GPUs taken; only the API call runs in a worker thread
    (the Kubernetes client blocks), at most ``bind_concurrency`` at once: one per
    keep-alive connection kept for Bindings. A pod no filter call was seen for is fetched
    from the API first, in the worker thread too."""
    args = await read_body(request, ExtenderBindingArgs)
    with timed(rt.metrics, "bind") as outcome:
        step = rt.extender.bind_prepare(args)
        if step is None:
            result = await anyio.to_thread.run_sync(
                rt.extender.bind, args, limiter=rt.bind_limiter)
        elif isinstance(step, dict):
            result = step
        else:
            result = await anyio.to_thread.run_sync(
                rt.extender.bind_commit, step, limiter=rt.bind_limiter)
        if result["Error"]:
            outcome.value = "error"
    return json_response(result)
