"""Dependencies shared by the routers (swap them in tests with ``app.dependency_overrides``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.types import DecoratedCallable
from pydantic import BaseModel, ValidationError
from pydantic_core import to_json

from scheduler_extender.kubernetes_state import DEFAULT_BIND_CONCURRENCY
from scheduler_extender.metrics import Metrics
from scheduler_extender.verbs import Extender

A = TypeVar("A")
R = TypeVar("R")


def bind_threads(concurrency: int = DEFAULT_BIND_CONCURRENCY) -> ThreadPoolExecutor:
    """The threads that run binds' blocking API calls: ``concurrency`` at most
    (``ExtenderSettings.bind_concurrency``, one per keep-alive connection kept for
    Bindings); more binds wait for a free one, first come first served. Threads start on
    demand."""
    return ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="gputopo-bind")


@dataclass
class Runtime:
    """What the routes need: the verbs, the metrics, and the threads of binds served at once
    (:func:`bind_threads`)."""

    extender: Extender
    metrics: Metrics
    bind_pool: ThreadPoolExecutor = field(default_factory=bind_threads)

    async def in_bind_thread(self, fn: Callable[[A], R], arg: A) -> R:
        """``fn(arg)`` on a bind thread, awaited on the event loop: the executor's own hop.
        (anyio's ``to_thread.run_sync`` with a limiter — backend lookup, limiter, queue — was
        about 3 % of the extender's samples in the 100-node stream profile,
        ``benchmarks/profile_extender.py``.)"""
        return await asyncio.get_running_loop().run_in_executor(self.bind_pool, fn, arg)


async def get_runtime(request: Request) -> Runtime:
    """The app's :class:`Runtime` (set by :func:`scheduler_extender.app.create_app`).
    Async on purpose: FastAPI runs sync dependencies in the thread pool, a thread hop per
    request."""
    return request.app.state.runtime  # type: ignore[no-any-return]


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
M = TypeVar("M", bound=BaseModel)


async def read_body(request: Request, model: type[M]) -> M:
    """Parse the request body as ``model`` whatever its Content-Type (pydantic's JSON parser).

    Raises:
        RequestValidationError: malformed JSON or a schema violation (the app answers 400).
    """
    return parse_body(await request.body(), model)


def parse_body(raw: bytes, model: type[M]) -> M:
    """``raw`` (a request body; empty = JSON ``null``) parsed as ``model`` by pydantic's JSON
    parser.

    Raises:
        RequestValidationError: malformed JSON or a schema violation.
    """
    try:
        return model.model_validate_json(raw or b"null")
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from None


def describe_validation(exc: RequestValidationError) -> str:
    """The one-line ``Error`` of a body that is not valid JSON or not the verb's schema:
    the first problem, where it is, and how many more there are."""
    errors = exc.errors()
    if not errors:
        return "invalid request body"
    first = errors[0]
    if first.get("type") == "json_invalid":
        ctx = first.get("ctx") or {}
        text = f"malformed JSON body: {ctx.get('error', first.get('msg', 'invalid JSON'))}"
    else:
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        where = ".".join(loc) or "body"
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        text = f"invalid request body at {where}: {first.get('msg', 'invalid')}{more}"
    return " ".join(text.split())


def verb_route(
    router: APIRouter, path: str, args: type[BaseModel], reply: Any, reply_name: str
) -> Callable[[DecoratedCallable], DecoratedCallable]:
    """``router.post(path)`` for one of kube-scheduler's verbs, documented in the OpenAPI
    schema: ``args`` as the JSON request body (the handler parses it itself, whatever the
    Content-Type: :func:`read_body`) and ``reply`` (named ``reply_name``, the Go type) as
    the 200 reply; no response model (the handlers return their own JSON)."""
    return router.post(
        path,
        response_model=None,
        responses={200: {"model": reply, "description": reply_name}},
        openapi_extra={"requestBody": {
            "required": True,
            "content": {"application/json": {"schema": args.model_json_schema()}},
        }},
    )  # fmt: skip


class _Outcome:
    value = "ok"


@contextmanager
def timed(metrics: Metrics, verb: str) -> Iterator[_Outcome]:
    """Count and time one request of ``verb``; set ``.value`` to ``error`` when the reply
    carries an ``Error``."""
    outcome = _Outcome()
    start = time.perf_counter()
    try:
        yield outcome
    except Exception:
        outcome.value = "internal_error"
        raise
    finally:
        metrics.latency.labels(verb=verb).observe(time.perf_counter() - start)
        metrics.requests.labels(verb=verb, outcome=outcome.value).inc()


def json_response(body: Any, status_code: int = 200) -> Response:
    """A compact UTF-8 JSON response, encoded by pydantic-core's serializer (about 3× faster
    than ``json.dumps`` on a filter reply carrying 100 Node objects; no FastAPI re-encoding).
    """
    return Response(
        content=to_json(body),
        status_code=status_code,
        media_type="application/json",
    )
