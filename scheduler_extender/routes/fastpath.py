"""The verbs kube-scheduler calls for every pod — ``POST /filter``, ``/prioritize`` and
``/bind`` — answered by an ASGI middleware ahead of FastAPI's router.

kube-scheduler calls filter and prioritize inside its one serial scheduling cycle, so every
microsecond spent on them is added to every pod; bind runs in its parallel binding cycles, but
on a shared host its CPU is taken from the API server and the scheduler. FastAPI's routing
(route matching, the request object, dependency solving, the exception middlewares) cost
about a fifth of a 100-node filter + prioritize round trip (docs/performance.md, "The scoring
fast path"). The middleware answers through the same functions as the routes —
:func:`scheduler_extender.routes.scheduling.answer` and
:func:`scheduler_extender.routes.binding.answer_bind` — so the two cannot disagree; the routes
stay for the OpenAPI schema and answer whenever the middleware is not installed.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

from scheduler_extender.auth import send_error, send_json
from scheduler_extender.routes.binding import answer_bind
from scheduler_extender.routes.deps import Runtime, describe_validation, parse_body
from scheduler_extender.routes.scheduling import ScoringVerb, answer
from scheduler_extender.schemas import ExtenderArgs, ExtenderBindingArgs

_PATHS: dict[str, tuple[ScoringVerb | Literal["bind"], type[BaseModel]]] = {
    "/filter": ("filter", ExtenderArgs),
    "/prioritize": ("prioritize", ExtenderArgs),
    "/bind": ("bind", ExtenderBindingArgs),
}


class VerbFastPath:
    """ASGI middleware: ``POST /filter``, ``/prioritize`` and ``/bind`` answered here, the
    same way the routes would, without FastAPI's routing and dependency layers.

    Installed innermost of the app's own middleware, so caller authentication and the
    not-synced gate still run first; everything else (other paths, other methods) goes on to
    the app. A body that is not valid ``ExtenderArgs`` / ``ExtenderBindingArgs`` gets HTTP 400
    with the same ``Error`` as the routes (and is counted ``bad_request``); an exception from
    the verb propagates to the app's error handler (HTTP 500 with an ``Error``), as from a
    route.
    """

    def __init__(self, app: ASGIApp, *, runtime: Runtime) -> None:
        self.app = app
        self.rt = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = _PATHS.get(scope["path"]) if scope["type"] == "http" else None
        if route is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        verb, model = route
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the caller is gone: nothing to answer
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        try:
            args: Any = parse_body(b"".join(chunks), model)
        except RequestValidationError as exc:
            self.rt.metrics.requests.labels(verb=verb, outcome="bad_request").inc()
            await send_error(send, 400, describe_validation(exc))
            return
        if verb == "bind":
            await send_json(send, 200, await answer_bind(self.rt, args))
        else:
            await send_json(send, 200, answer(self.rt, verb, args))
