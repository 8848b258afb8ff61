"""``POST /bind``: decide, reserve, annotate, bind."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

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
    Runs in the thread pool: the Kubernetes calls block."""
    args = await read_body(request, ExtenderBindingArgs)
    with timed(rt.metrics, "bind") as outcome:
        result = await run_in_threadpool(rt.extender.bind, args)
        if result["Error"]:
            outcome.value = "error"
    return json_response(result)
