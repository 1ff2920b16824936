"""The hottest routes without FastAPI's routing and dependency solving.

Profiled under wrk (``cronwheel bench api``), most of a ``GET /v1/firings/{id}`` was
FastAPI's own work before the endpoint ran: matching the path against every route of
every included router, then solving the dependency graph (the bearer scheme, the
principal, the role) generically, with its caches and exit stacks. :class:`FastRoutes`
(pure ASGI, inside ``ServingMode``) answers ``GET /v1/firings/{firing_id}``,
``POST /v1/jobs`` and ``PUT /v1/jobs/{name}`` itself, with the *same* pieces FastAPI
would use, taken from the app's own routes:

- the route's path regex and convertors; its path, query and body parameters
  validated by FastAPI's own functions (``request_params_to_args``,
  ``request_body_to_args``) against the route's own fields;
- the same authentication functions (``api.auth``: the bearer scheme, the principal,
  the role checks), called in their dependency order;
- the route's own endpoint (the coroutine ``api.calls`` made of it, which runs the
  store call and writes the orjson answer), given the same arguments;
- the app's exception handlers for whatever the endpoint raises (Starlette's
  ``wrap_app_handling_exceptions`` over the handlers ``ExceptionMiddleware`` holds).

Anything else goes to FastAPI unchanged, the request's body replayed: another
method or path, a ``root_path``, a body whose ``Content-Type`` is not plainly
``application/json``, and every request that fails *before* the endpoint runs (no
token, a bad one, a missing role, a parameter or a body that does not validate).
Nothing has happened by then, so FastAPI answers it from the start, with its own
error documents; the fast path answers only requests that reach the endpoint. The
FastAPI routes stay the OpenAPI document's source; ``tests/api/test_fast_routes.py``
compares both paths' answers byte for byte over many inputs, hostile ones included.

Only an app that writes its answers unvalidated (``create_api(...,
validate_responses=False)``, as ``cronwheel api``) has these routes: the endpoint then
returns its finished Response. Dependency overrides (tests) turn them off.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import request_body_to_args, request_params_to_args
from fastapi.routing import APIRoute
from starlette._exception_handler import wrap_app_handling_exceptions
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import Response

from cronwheel.api.auth import PRINCIPAL_DEPENDENCIES, resolve_principal

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

FAST_ROUTES = (("GET", "/v1/firings/{firing_id}"), ("POST", "/v1/jobs"), ("PUT", "/v1/jobs/{name}"))
# the Content-Type values FastAPI certainly reads as JSON (others: FastAPI decides)
_JSON_TYPES = frozenset({b"application/json", b"application/json; charset=utf-8"})


class _Fallback(Exception):
    """Not for the fast path: FastAPI answers the request."""


@dataclass(frozen=True, slots=True)
class _Plan:
    route: APIRoute
    match: Callable[[str], Any]  # the route's path regex's match, as Starlette's routing
    convertors: dict[str, Any]
    principal: Dependant  # the principal dependency (api.auth's Reader or Writer)
    principal_name: str
    call: Callable[..., Awaitable[Any]]


def _route_contexts(app: Any) -> list[tuple[str | None, set[str], Any]]:
    """(path, methods, original route) of every route, in matching order."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # FastAPI before included routers were kept nested
        return [(r.path, set(r.methods or ()), r) for r in app.routes if hasattr(r, "path")]
    return [
        (rc.path, set(rc.methods or ()), rc.original_route)
        for rc in iter_route_contexts(app.routes)
    ]


def _plan(path: str | None, route: Any) -> _Plan | None:
    """How to answer ``route`` directly; None when it takes anything the fast path does
    not provide (headers, cookies, another dependency, a form body)."""
    if not isinstance(route, APIRoute):
        return None
    dependant = route.dependant
    if (
        dependant.header_params
        or dependant.cookie_params
        or len(dependant.dependencies) != 1
        or len(dependant.body_params) > 1
        or dependant.request_param_name is None
        or dependant.response_param_name is None
        or dependant.background_tasks_param_name is not None
        or dependant.security_scopes_param_name is not None
        or getattr(route, "_embed_body_fields", False)
        or (dependant.body_params and route.body_field is None)
    ):
        return None
    principal = dependant.dependencies[0]
    if principal.name is None or principal.call not in PRINCIPAL_DEPENDENCIES or route.path != path:
        return None
    return _Plan(
        route=route,
        match=route.path_regex.match,
        convertors=route.param_convertors,
        principal=principal,
        principal_name=principal.name,
        call=dependant.call,  # type: ignore[arg-type]
    )


class FastRoutes:
    """See the module docstring. ``api``: the FastAPI app whose routes these are."""

    def __init__(self, app: ASGIApp, *, api: Any) -> None:
        self.app = app
        self.api = api
        self._plans: dict[str, list[_Plan]] | None = None
        self._handlers: tuple[Any, Any] | None = None

    def _build(self) -> dict[str, list[_Plan]]:
        plans: dict[str, list[_Plan]] = {}
        for path, methods, route in _route_contexts(self.api):
            for method in methods:
                if (method, path) in FAST_ROUTES:
                    plan = _plan(path, route)
                    if plan is not None:
                        plans.setdefault(method, []).append(plan)
        # the handlers ExceptionMiddleware holds (Starlette.build_middleware_stack's split)
        handlers = {
            k: v for k, v in self.api.exception_handlers.items() if k not in (500, Exception)
        }
        middleware = ExceptionMiddleware(self.app, handlers=handlers)
        self._handlers = (middleware._exception_handlers, middleware._status_handlers)
        return plans

    def plans(self) -> dict[str, list[_Plan]]:
        if self._plans is None:
            self._plans = self._build()
        return self._plans

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("root_path") or self.api.dependency_overrides:
            await self.app(scope, receive, send)
            return
        found = None
        for plan in self.plans().get(scope["method"], ()):
            matched = plan.match(scope["path"])
            if matched is not None:
                found = plan, matched
                break
        if found is None:
            await self.app(scope, receive, send)
            return
        plan, matched = found
        chunks: list[bytes] = []
        more = True
        while more:  # the body guard has read it already: one message
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay(b"".join(chunks), message, receive), send)
                return
            chunks.append(message.get("body", b""))
            more = bool(message.get("more_body", False))
        raw = b"".join(chunks)
        replay = _replay(raw, None, receive)
        request = Request(scope, replay, send)
        try:
            values = await self._arguments(plan, matched, request, scope, raw)
        except Exception:  # _Fallback, or a refusal: FastAPI answers (nothing happened yet)
            await self.app(scope, _replay(raw, None, receive), send)
            return

        async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
            response = await plan.call(**values)
            assert isinstance(response, Response), "fast routes need unvalidated answers"
            await response(scope, receive, send)

        scope["starlette.exception_handlers"] = self._handlers
        await wrap_app_handling_exceptions(endpoint, request)(scope, replay, send)

    async def _arguments(
        self, plan: _Plan, matched: Any, request: Request, scope: Scope, raw: bytes
    ) -> dict[str, Any]:
        """The endpoint's arguments, as FastAPI's dependency solving makes them; raise
        when it would refuse the request."""
        dependant = plan.route.dependant
        values: dict[str, Any] = {
            plan.principal_name: await resolve_principal(plan.principal.call, request)
        }
        params = {k: plan.convertors[k].convert(v) for k, v in matched.groupdict().items()}
        scope["path_params"] = params
        found, errors = request_params_to_args(dependant.path_params, params)
        if errors:
            raise _Fallback
        values.update(found)
        if dependant.query_params:
            found, errors = request_params_to_args(dependant.query_params, request.query_params)
            if errors:
                raise _Fallback
            values.update(found)
        elif scope.get("query_string"):
            raise _Fallback  # FastAPI ignores it; no need to be sure here
        if dependant.body_params:
            if not raw or _content_type(scope) not in _JSON_TYPES:
                raise _Fallback
            found, errors = await request_body_to_args(
                dependant.body_params, json.loads(raw), embed_body_fields=False
            )
            if errors:
                raise _Fallback
            values.update(found)
        elif raw:
            raise _Fallback
        sub = Response()  # as solve_dependencies makes the endpoint's Response
        del sub.headers["content-length"]
        sub.status_code = None  # type: ignore[assignment]
        values[dependant.request_param_name] = request  # type: ignore[index]
        values[dependant.response_param_name] = sub  # type: ignore[index]
        return values


def _content_type(scope: Scope) -> bytes | None:
    """The first Content-Type header (the one Starlette's ``headers.get`` gives)."""
    for name, value in scope["headers"]:
        if name.lower() == b"content-type":
            return bytes(value)
    return None


def _replay(raw: bytes, pending: Message | None, receive: Receive) -> Receive:
    """A receive that gives ``raw`` (and then ``pending``, if any) before the rest."""
    queue: list[Message] = [{"type": "http.request", "body": raw, "more_body": False}]
    if pending is not None:
        queue = [{"type": "http.request", "body": raw, "more_body": True}, pending]

    async def replayed() -> Message:
        if queue:
            return queue.pop(0)
        return await receive()

    return replayed
