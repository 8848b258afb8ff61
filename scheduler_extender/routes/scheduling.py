"""``POST /filter`` and ``POST /prioritize`` (read-only).

Both run on the event loop itself, not the thread pool: they are CPU-bound, never block on
I/O, and are bounded by the decision budget; the thread hop cost more than their work on a
100-node cluster. Bind, which waits on the Kubernetes API, keeps the thread pool.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from scheduler_extender.routes.deps import RuntimeDep, body_doc, json_response, read_body, timed
from scheduler_extender.schemas import ExtenderArgs, ExtenderFilterResult, HostPriority

router = APIRouter(tags=["scheduling"])


@router.post(
    "/filter",
    response_model=None,
    responses={200: {"model": ExtenderFilterResult, "description": "ExtenderFilterResult"}},
    openapi_extra=body_doc(ExtenderArgs),
)
async def filter_nodes(request: Request, rt: RuntimeDep) -> Response:
    """Nodes that can host the pod (``Nodes`` or ``NodeNames``, matching the request) and
    ``FailedNodes`` / ``FailedAndUnresolvableNodes`` with a reason each; a bad pod gets
    ``Error`` (HTTP 200, as kube-scheduler expects)."""
    args = await read_body(request, ExtenderArgs)
    with timed(rt.metrics, "filter") as outcome:
        result = rt.extender.filter(args)
        if result["Error"]:
            outcome.value = "error"
    return json_response(result)


@router.post(
    "/prioritize",
    response_model=None,
    responses={200: {"model": list[HostPriority], "description": "HostPriorityList"}},
    openapi_extra=body_doc(ExtenderArgs),
)
async def prioritize_nodes(request: Request, rt: RuntimeDep) -> Response:
    """``[{"Host", "Score"}]``, 0–10 per node (see :mod:`topology.policies.scoring`)."""
    args = await read_body(request, ExtenderArgs)
    with timed(rt.metrics, "prioritize"):
        result = rt.extender.prioritize(args)
    return json_response(result)
