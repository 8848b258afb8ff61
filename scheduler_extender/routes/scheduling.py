"""``POST /filter`` and ``POST /prioritize`` (read-only).

Both run on the event loop itself, not the thread pool: they are CPU-bound, never block on
I/O, and are bounded by the decision budget; the thread hop cost more than their work on a
100-node cluster. Bind, which waits on the Kubernetes API, keeps the thread pool.

kube-scheduler calls the two inside its one serial scheduling cycle, so every microsecond
spent on them is added to every pod. :class:`scheduler_extender.routes.fastpath.VerbFastPath`
answers them (and ``/bind``) as an ASGI middleware, ahead of FastAPI's router. The FastAPI
routes below stay: they document the verbs in the OpenAPI schema and answer whenever the
middleware is not installed; both go through :func:`answer`, so they cannot disagree.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request, Response

from scheduler_extender.routes.deps import (
    Runtime,
    RuntimeDep,
    json_response,
    read_body,
    timed,
    verb_route,
)
from scheduler_extender.schemas import ExtenderArgs, ExtenderFilterResult, HostPriority

router = APIRouter(tags=["scheduling"])

ScoringVerb = Literal["filter", "prioritize"]


def answer(rt: Runtime, verb: ScoringVerb, args: ExtenderArgs) -> Any:
    """The reply to one parsed ``filter`` or ``prioritize`` call, counted and timed in
    ``rt.metrics`` (an ``Error`` in a filter reply counts as outcome ``error``).

    Returns:
        filter: an ``ExtenderFilterResult`` dict; prioritize: a ``HostPriorityList``.
    """
    with timed(rt.metrics, verb) as outcome:
        if verb == "filter":
            result: Any = rt.extender.filter(args)
            if result["Error"]:
                outcome.value = "error"
        else:
            result = rt.extender.prioritize(args)
    return result


@verb_route(router, "/filter", ExtenderArgs, ExtenderFilterResult, "ExtenderFilterResult")
async def filter_nodes(request: Request, rt: RuntimeDep) -> Response:
    """Nodes that can host the pod (``Nodes`` or ``NodeNames``, matching the request) and
    ``FailedNodes`` / ``FailedAndUnresolvableNodes`` with a reason each; a bad pod gets
    ``Error`` (HTTP 200, as kube-scheduler expects)."""
    return json_response(answer(rt, "filter", await read_body(request, ExtenderArgs)))


@verb_route(router, "/prioritize", ExtenderArgs, list[HostPriority], "HostPriorityList")
async def prioritize_nodes(request: Request, rt: RuntimeDep) -> Response:
    """``[{"Host", "Score"}]``, 0–10 per node (see :mod:`topology.policies.scoring`)."""
    return json_response(answer(rt, "prioritize", await read_body(request, ExtenderArgs)))
