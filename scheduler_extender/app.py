"""The extender's FastAPI application: :func:`create_app`.

Routes: ``POST /filter``, ``POST /prioritize``, ``POST /preempt``, ``POST /bind``
(kube-scheduler's extender verbs), ``GET /healthz``, ``GET /readyz``, ``GET /metrics``. Every
error reply is JSON with one ``Error`` line — a malformed body is 400 (FastAPI's 422 is
replaced), an unknown verb 404, a wrong method 405, anything unexpected 500 — never a
traceback.
"""

from __future__ import annotations

import gc
import inspect
import logging
import sys
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from scheduler_extender.auth import CallerAuth, send_error
from scheduler_extender.metrics import Metrics
from scheduler_extender.profiles import ProfileLayers
from scheduler_extender.routes import binding, health, metrics, preemption, scheduling
from scheduler_extender.routes.deps import (
    Runtime,
    bind_threads,
    describe_validation,
    json_response,
)
from scheduler_extender.routes.fastpath import VerbFastPath
from scheduler_extender.settings import ExtenderSettings
from scheduler_extender.state import ClusterState
from scheduler_extender.verbs import Extender

log = logging.getLogger("gputopo.extender")

SERVED = "POST /filter, /prioritize, /preempt, /bind; GET /healthz, /readyz, /metrics"
#: FastAPI's native OpenTelemetry off (FastAPI versions that have it): the extender exports
#: Prometheus metrics, and the check whether a tracer is configured ran on every request
#: (about 3 % of a filter + prioritize round trip's CPU).
_NO_OTEL: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {})
_VERBS = {"/filter": "filter", "/prioritize": "prioritize", "/preempt": "preempt",
          "/bind": "bind"}


class SyncedGate:
    """ASGI middleware: the verbs answer 503 with an ``Error`` until the cluster state has
    synced (nodes and pods listed).

    The HTTP server starts before the initial list finishes, and kube-scheduler calls the
    verbs as soon as the port answers — it does not look at ``/readyz``. An extender that
    decided then would see every node empty and give GPUs that bound pods hold; a reservation
    made in that window would even survive the pod list. That is what a restarted sidecar
    meets: its kube-scheduler is already running. 503 makes kube-scheduler retry the pod
    with back-off.
    """

    def __init__(self, app: Any, *, state: ClusterState, metrics: Metrics) -> None:
        self.app = app
        self.state = state
        self.metrics = metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        verb = _VERBS.get(scope.get("path", "")) if scope["type"] == "http" else None
        if verb is None or self.state.ready():
            await self.app(scope, receive, send)
            return
        self.metrics.requests.labels(verb=verb, outcome="not_ready").inc()
        await send_error(send, 503, "the extender's cluster state has not synced yet (nodes "
                                    "and pods are being listed); retry")


def tune_interpreter(switch_interval_s: float) -> None:
    """Interpreter settings for a long-running extender (call once, before serving).

    Args:
        switch_interval_s: the GIL switch interval, seconds (``ExtenderSettings.
            gil_switch_interval_ms`` / 1000; CPython's default is 0.005).

    * **Garbage collector.** The decision caches hold hundreds of thousands of small objects,
      and CPython's default thresholds then run full collections often enough to add
      50–150 ms pauses to filter calls. Freeze what exists at start (imports, catalog) and
      collect the young generation less often; cached values are acyclic and are freed by
      reference counting when evicted.
    * **GIL switch interval** (the settings' default 0.5 ms, not CPython's 5 ms). The event
      loop answers ``/filter`` and ``/prioritize`` while up to ``bind_concurrency`` bind threads
      and the two watch threads run Python too. A thread that wants the GIL waits until the
      holder gives it up, at the latest after the switch interval; kube-scheduler calls filter
      and prioritize inside its one serial scheduling cycle, so each such wait is added to
      every pod's cycle. With 5 ms, gputopo reached 0.58–0.87× a trivial extender's pods/s in
      the 100-node, 1,000-pod backlog; with 0.5 ms, 0.89–1.19× in the same conditions and
      less CPU per pod (``benchmarks/results/switch-interval.json``, docs/performance.md).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    sys.setswitchinterval(switch_interval_s)


def create_app(settings: ExtenderSettings, state: ClusterState) -> FastAPI:
    """Build the extender app over ``state`` with ``settings.policy`` as default policy.

    Args:
        settings: resolved settings (``policy``, ``eval_budget_ms``, ``eval_workers``,
            ``bind_concurrency``, ``postpone_max_s`` (set on the state's pending view) and
            ``auth`` / ``allowed_client_names`` — the
            :class:`~scheduler_extender.auth.CallerAuth` middleware — are read here; host,
            port and TLS belong to the server: :func:`scheduler_extender.auth.uvicorn_options`).
        state: the cluster state backend (:class:`MemoryState`, :class:`KubernetesState`).

    Returns:
        The app; ``app.state.runtime.extender`` is the :class:`Extender` (tests, the demo).

    Raises:
        UnknownPolicy: ``settings.policy`` is not registered.
    """
    app = FastAPI(
        title="gputopo scheduler extender",
        summary="Topology-aware GPU placement for kube-scheduler (filter, prioritize, preempt, "
        "bind).",
        version="1",
        **_NO_OTEL,
    )
    counters = Metrics()
    pending = getattr(state, "pending", None)
    if pending is not None:  # the bound of the default policy's postponement
        pending.postpone_max_s = settings.postpone_max_s
    extender = Extender(
        state, settings.policy, counters, budget_ms=settings.eval_budget_ms or None,
        workers=settings.eval_workers, memory_unit_mib=settings.vgpu_memory_unit_mib,
        profiles=ProfileLayers(settings.profile_catalog, settings.user_profiles,
                               settings.measured_profiles, settings.colocation_threshold),
        colocation_policy=settings.colocation_policy, lookahead_pods=settings.lookahead_pods,
    )
    rt = Runtime(extender=extender, metrics=counters,
                 bind_pool=bind_threads(settings.bind_concurrency))
    app.state.runtime = rt
    app.state.settings = settings
    # first added = innermost: authentication and the synced gate run before the fast path
    app.add_middleware(VerbFastPath, runtime=rt)
    app.add_middleware(SyncedGate, state=state, metrics=counters)
    if settings.auth != "none":  # added last: runs first (an unauthenticated caller learns
        app.add_middleware(CallerAuth, mode=settings.auth,  # nothing, not even readiness)
                           allowed_names=settings.allowed_client_names, metrics=counters)
    for r in (scheduling.router, preemption.router, binding.router, health.router,
              metrics.router):
        app.include_router(r)

    def count_bad(request: Request, outcome: str) -> None:
        verb = _VERBS.get(request.url.path)
        if verb is not None:
            rt.metrics.requests.labels(verb=verb, outcome=outcome).inc()

    @app.exception_handler(RequestValidationError)
    async def _bad_body(request: Request, exc: RequestValidationError) -> Response:
        count_bad(request, "bad_request")
        return json_response({"Error": describe_validation(exc)}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            verb = request.url.path.strip("/") or "/"
            message = f"unknown verb {verb!r}; this extender serves {SERVED}"
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}; see {SERVED}"
        else:
            message = str(exc.detail)
        return json_response({"Error": message}, status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> Response:
        log.exception("internal error on %s", request.url.path)
        count_bad(request, "internal_error")
        text = " ".join(f"{type(exc).__name__}: {exc}".split())
        return json_response({"Error": f"internal error: {text}"}, status_code=500)

    return app
