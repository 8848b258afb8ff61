"""``POST /bind``: decide, reserve, bind (one Binding carrying the decision)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from scheduler_extender.routes.deps import (
    Runtime,
    RuntimeDep,
    json_response,
    read_body,
    timed,
    verb_route,
)
from scheduler_extender.schemas import ExtenderBindingArgs, ExtenderBindingResult

router = APIRouter(tags=["binding"])


async def answer_bind(rt: Runtime, args: ExtenderBindingArgs) -> dict[str, Any]:
    """The ``ExtenderBindingResult`` of one parsed bind call, counted and timed in
    ``rt.metrics`` (an ``Error`` counts as outcome ``error``).

    The decision is made and reserved at once, on the event loop (no I/O), so the next
    pods' filter already sees these GPUs taken; only the API call runs on one of
    ``rt``'s bind threads (the Kubernetes client blocks), at most ``bind_concurrency`` at
    once: one per keep-alive connection kept for Bindings. A pod no filter call was seen
    for is fetched from the API first, on the bind thread too."""
    with timed(rt.metrics, "bind") as outcome:
        step = rt.extender.bind_prepare(args)
        if step is None:
            result = await rt.in_bind_thread(rt.extender.bind, args)
        elif isinstance(step, dict):
            result = step
        else:
            result = await rt.in_bind_thread(rt.extender.bind_commit, step)
        if result["Error"]:
            outcome.value = "error"
    return result


@verb_route(router, "/bind", ExtenderBindingArgs, ExtenderBindingResult, "ExtenderBindingResult")
async def bind_pod(request: Request, rt: RuntimeDep) -> Response:
    """Bind the pod to ``Node`` on the GPUs the policy picks; ``Error`` says why not
    (:func:`answer_bind`)."""
    return json_response(await answer_bind(rt, await read_body(request, ExtenderBindingArgs)))
