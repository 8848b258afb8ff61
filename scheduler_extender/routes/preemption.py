"""``POST /preempt``: which of kube-scheduler's preemption proposals free usable GPUs."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from scheduler_extender.routes.deps import RuntimeDep, json_response, read_body, timed, verb_route
from scheduler_extender.schemas import ExtenderPreemptionArgs, ExtenderPreemptionResult

router = APIRouter(tags=["preemption"])


@verb_route(router, "/preempt", ExtenderPreemptionArgs, ExtenderPreemptionResult,
            "ExtenderPreemptionResult")
async def preempt(request: Request, rt: RuntimeDep) -> Response:
    """The candidate nodes whose proposed victims, once evicted, leave GPUs the pod's policy
    accepts, each with exactly the victims proposed (by UID); the other nodes are left out.
    Runs in the thread pool: preemption is rare, and deciding up to a hundred node states
    nobody has asked about before must not hold up the other verbs."""
    args = await read_body(request, ExtenderPreemptionArgs)
    with timed(rt.metrics, "preempt"):
        result = await run_in_threadpool(rt.extender.preempt, args)
    return json_response(result)
