"""The API's application factory: ``create_api(store, auth_required=..., max_body=...)``.

The JSON API alone; ``cronwheel.server.create_app`` adds the dashboard and ``/metrics``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from cronwheel.api.errors import install_error_handlers
from cronwheel.api.guard import DEFAULT_MAX_BODY, BodyGuard
from cronwheel.api.schemas import ErrorOut
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
    store: ApiStore, *, auth_required: bool = True, max_body: int = DEFAULT_MAX_BODY
) -> FastAPI:
    """The HTTP API over ``store`` (which the caller opens, migrates and closes).

    Endpoints are sync: FastAPI runs them in its thread pool, and the store
    serializes what it must.
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
    )
    app.state.store = store
    app.state.auth_required = auth_required
    install_error_handlers(app)
    app.include_router(routes_jobs.router)
    app.include_router(routes_skip.router)
    app.include_router(routes_firings.router)
    app.include_router(routes_misc.router)
    app.include_router(routes_quota.router)
    app.include_router(routes_retention.router)
    app.include_router(routes_calendars.router)
    app.add_middleware(BodyGuard, max_body=max_body)
    return app
