"""``POST /filter`` and ``POST /prioritize`` (read-only).

Both run on the event loop itself, not the thread pool: they are CPU-bound, never block on
I/O, and are bounded by the decision budget; the thread hop cost more than their work on a
100-node cluster. Bind, which waits on the Kubernetes API, keeps the thread pool.

kube-scheduler calls the two inside its one serial scheduling cycle, so every microsecond
spent on them is added to every pod. :class:`ScoringFastPath` answers them as an ASGI
middleware, ahead of FastAPI's router (route matching, the request object, dependency
solving, the exception middlewares): about a fifth of a 100-node filter + prioritize round
trip (docs/performance.md, "The scoring fast path"). The FastAPI routes below stay: they
document the verbs in the OpenAPI schema and answer whenever the middleware is not installed;
both go through :func:`answer`, so they cannot disagree.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from scheduler_extender.auth import send_error, send_json
from scheduler_extender.routes.deps import (
    Runtime,
    RuntimeDep,
    body_doc,
    describe_validation,
    json_response,
    parse_body,
    read_body,
    timed,
)
from scheduler_extender.schemas import ExtenderArgs, ExtenderFilterResult, HostPriority

router = APIRouter(tags=["scheduling"])

ScoringVerb = Literal["filter", "prioritize"]
_PATHS: dict[str, ScoringVerb] = {"/filter": "filter", "/prioritize": "prioritize"}


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
    return json_response(answer(rt, "filter", await read_body(request, ExtenderArgs)))


@router.post(
    "/prioritize",
    response_model=None,
    responses={200: {"model": list[HostPriority], "description": "HostPriorityList"}},
    openapi_extra=body_doc(ExtenderArgs),
)
async def prioritize_nodes(request: Request, rt: RuntimeDep) -> Response:
    """``[{"Host", "Score"}]``, 0–10 per node (see :mod:`topology.policies.scoring`)."""
    return json_response(answer(rt, "prioritize", await read_body(request, ExtenderArgs)))


class ScoringFastPath:
    """ASGI middleware: ``POST /filter`` and ``POST /prioritize`` answered here, the same way
    the routes would (:func:`answer`), without FastAPI's routing and dependency layers.

    Installed innermost of the app's own middleware, so caller authentication and the
    not-synced gate still run first; everything else (other paths, other methods) goes on to
    the app. A body that is not valid ``ExtenderArgs`` gets HTTP 400 with the same ``Error``
    as the routes (and is counted ``bad_request``); an exception from the verb propagates to
    the app's error handler (HTTP 500 with an ``Error``), as from a route.
    """

    def __init__(self, app: ASGIApp, *, runtime: Runtime) -> None:
        self.app = app
        self.rt = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        verb = _PATHS.get(scope["path"]) if scope["type"] == "http" else None
        if verb is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the caller is gone: nothing to answer
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        try:
            args = parse_body(b"".join(chunks), ExtenderArgs)
        except RequestValidationError as exc:
            self.rt.metrics.requests.labels(verb=verb, outcome="bad_request").inc()
            await send_error(send, 400, describe_validation(exc))
            return
        await send_json(send, 200, answer(self.rt, verb, args))
