"""The API's application factory: ``create_api(store, auth_required=..., max_body=...)``.

The JSON API alone; ``cronwheel.server.create_app`` adds the dashboard and ``/metrics``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from cronwheel.api.calls import ServingMode, async_calls_open
from cronwheel.api.errors import install_error_handlers
from cronwheel.api.fast import FastRoutes
from cronwheel.api.guard import DEFAULT_MAX_BODY, BodyGuard
from cronwheel.api.schemas import ErrorOut
from cronwheel.api.write_group import WriteGroup
from cronwheel.domain.clock import Clock, SystemClock
from cronwheel.observability.tracing_switch import tracing_wanted
from cronwheel.store.protocol import ApiStore

_ERROR = {"model": ErrorOut}
_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _ERROR | {"description": "malformed request (JSON, query, cursor, header)"},
    401: _ERROR | {"description": "missing or invalid bearer token"},
    403: _ERROR
    | {"description": "the token's role may not do this, or a cross-site browser request"},
    404: _ERROR | {"description": "no such resource in the token's namespace"},
    409: _ERROR | {"description": "conflict (name taken, key reused, state)"},
    429: _ERROR | {"description": "a namespace rate quota is used up; see Retry-After"},
    413: _ERROR | {"description": "body over the size limit"},
    415: _ERROR | {"description": "body is not application/json"},
    421: _ERROR | {"description": "a Host header this server does not answer for"},
    422: _ERROR | {"description": "invalid input; `field` names it"},
    503: _ERROR | {"description": "store unavailable; retry later"},
}


def create_api(
    store: ApiStore,
    *,
    auth_required: bool = True,
    max_body: int = DEFAULT_MAX_BODY,
    tracing: bool | None = None,
    store_calls_on_loop: bool = False,
    validate_responses: bool = True,
    fast_routes: bool = True,
    clock: Clock | None = None,
) -> FastAPI:
    """The HTTP API over ``store`` (which the caller opens, migrates and closes).
    ``tracing``: carry the requests' trace contexts with the jobs and firings they make
    (api/traced.py); None: as ``CRONWHEEL_TRACING`` says.

    Endpoints are plain functions calling the store: they run in the thread pool, or on
    the event loop with ``store_calls_on_loop`` (for a store whose calls never overlap,
    such as SQLite's one connection: see ``api.calls``); while the app is served (its
    lifespan), a store with AsyncCalls (PostgreSQL) serves the firing read on the loop,
    and a job's creation as one statement whose first instant is made from ``clock``
    (default: this host's), a guess of the store's clock the statement checks
    (``routes_jobs.create_job``).
    ``validate_responses=False`` writes the endpoints' documents with orjson, without
    FastAPI's response validation, and (``fast_routes``) answers the hottest routes
    without FastAPI's routing and dependency solving (``api.fast``: the same validation,
    authentication, endpoints and error documents).
    """
    from importlib.metadata import version

    from cronwheel.api import (
        routes_calendars,
        routes_firings,
        routes_jobs,
        routes_misc,
        routes_quota,
        routes_retention,
        routes_skip,
    )

    app = FastAPI(
        title="cronwheel",
        version=version("cronwheel"),
        summary="Distributed task scheduler: jobs, firings, status.",
        docs_url=None,  # the default docs page loads scripts from a CDN; see routes_misc.docs
        redoc_url=None,
        openapi_url="/openapi.json",
        responses=_RESPONSES,
        # cronwheel's metrics are Prometheus (/metrics) and its logs structlog: FastAPI's
        # own OpenTelemetry instrumentation looked up providers on every request
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
        # the store's AsyncCalls (api.calls.store_read), open while the app is served
        lifespan=async_calls_open,
    )
    app.state.store = store
    app.state.store_calls_on_loop = store_calls_on_loop
    app.state.async_calls = None
    app.state.auth_required = auth_required
    app.state.tracing = tracing_wanted(tracing)
    app.state.served_tasks = set()  # tasks seen served (routes_jobs.require_served)
    app.state.clock = clock or SystemClock()  # a guess of the store's (routes_jobs.create_job)
    install_error_handlers(app)
    app.include_router(routes_jobs.router)
    app.include_router(routes_skip.router)
    app.include_router(routes_firings.router)
    app.include_router(routes_misc.router)
    app.include_router(routes_quota.router)
    app.include_router(routes_retention.router)
    app.include_router(routes_calendars.router)
    if fast_routes and not validate_responses:
        app.add_middleware(FastRoutes, api=app)  # inside ServingMode: its mode applies
    if store_calls_on_loop or not validate_responses:
        grouping = getattr(store, "write_group", None) if store_calls_on_loop else None
        app.add_middleware(
            ServingMode,
            on_loop=store_calls_on_loop,
            unchecked=not validate_responses,
            group=None if grouping is None else WriteGroup(grouping),
        )
    app.add_middleware(BodyGuard, max_body=max_body)
    return app
