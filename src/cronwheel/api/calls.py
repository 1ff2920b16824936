"""Where the API's endpoints run: on the event loop, or in the thread pool.

The endpoints are plain functions that call the store. Given to FastAPI as they are,
each request would take three trips through the thread pool (the token check, the
endpoint, the response's validation), and every trip wakes a thread and hands the GIL
back and forth: profiled under load, that was most of a request's cost. So every
endpoint is given to FastAPI wrapped in a coroutine (:class:`ApiRoute`), which calls
it either

- **on the event loop** (``store_calls_on_loop=True``): for a store whose calls never
  overlap anyway — SQLite's one connection under one lock, the memory store's lock —
  a thread buys nothing, and the request runs start to end on the loop;
- **in the thread pool**, once (the default): for PostgreSQL, whose pool serves
  several calls at once while each waits on its round trips.

**Answers.** FastAPI validates what an endpoint returns against its response model
and then serializes it: for a list of 100 jobs that was a quarter of the request.
The documents come from one codec (``cronwheel.wire``) whose shapes the API's tests
check against the same models (``tests/api``; the schemathesis run checks every
answer against the OpenAPI document), so an app built with
``validate_responses=False`` (``cronwheel api``) writes an endpoint's dict with orjson
directly, with the route's status code (or the one the endpoint set on its
``Response``) and the headers the endpoint set. What validation added is added here
too: the optional keys a document leaves out, as null (or the field's default), at
every level of the model (:func:`filler`, planned once per route); integers beyond 64
bits, which orjson does not write, go through the standard library's encoder.

Both choices are the app's (``create_api``), carried to the endpoints by a context
variable that :class:`ServingMode` sets for each request.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import json
import os
import threading
import types
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any, TypeVar

import orjson
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from cronwheel.api.write_group import WriteGroup
from cronwheel.store.async_port import AsyncCalls

T = TypeVar("T")
E = TypeVar("E", bound=Callable[..., Any])
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_ON_LOOP: ContextVar[bool] = ContextVar("cronwheel_store_calls_on_loop", default=False)
_UNCHECKED: ContextVar[bool] = ContextVar("cronwheel_unchecked_answers", default=False)
_GROUP: ContextVar[WriteGroup | None] = ContextVar("cronwheel_write_group", default=None)
_SUB_RESPONSE = "cronwheel_sub_response"  # the parameter that receives FastAPI's Response


class _StoreThreads:
    """The process's threads for store calls, made at their first use: a pool made
    before a fork would have no threads in the child, so a child starts afresh."""

    SIZE = 40  # as many as anyio's default thread limiter, which ran these calls before

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._pool = None

    def get(self) -> ThreadPoolExecutor:
        pool = self._pool
        if pool is not None:  # every call after the first: no lock taken
            return pool
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.SIZE, thread_name_prefix="cronwheel-api-store")
            return self._pool


_STORE_THREADS = _StoreThreads()


async def store_call(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``func(*args, **kwargs)`` on the loop or in the thread pool, as the app runs
    its store calls."""
    if _ON_LOOP.get():
        return func(*args, **kwargs)
    context = contextvars.copy_context()
    call = functools.partial(context.run, func, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_STORE_THREADS.get(), call)


async def store_write(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """A write endpoint's ``func(*args, **kwargs)``: in this turn's :class:`WriteGroup`
    (one transaction with the other writes of the turn) when the app runs its store
    calls on the loop and its store groups writes (ServingMode sets a group only
    then); else as :func:`store_call`."""
    group = _GROUP.get()
    if group is None:
        return await store_call(func, *args, **kwargs)
    return await group.run(functools.partial(func, *args, **kwargs))


async def store_read(
    request: Request,
    call: Callable[[], T],
    aread: Callable[[AsyncCalls], Awaitable[T]],
) -> T:
    """A read of the app's store: ``aread`` of the app's AsyncCalls (store/async_port.py)
    when its lifespan opened them on this loop and the app's store calls are not on the
    loop already; else ``call()`` by :func:`store_call`."""
    calls = async_calls_of(request)
    if calls is not None:
        return await aread(calls)
    return await store_call(call)


def async_calls_of(request: Request) -> AsyncCalls | None:
    """The app's AsyncCalls when they serve this request: opened by its lifespan on this
    loop, and the app's store calls not on the loop already (None otherwise)."""
    if _ON_LOOP.get():
        return None
    calls: AsyncCalls | None = getattr(request.app.state, "async_calls", None)
    return calls if calls is not None and calls.ready() else None


def awaited(endpoint: E) -> E:
    """Marks a coroutine endpoint that makes its store calls itself (:func:`store_call`,
    :func:`store_read`): :class:`ApiRoute` writes its answer as a plain endpoint's."""
    endpoint.cronwheel_awaited = True  # type: ignore[attr-defined]
    return endpoint


@contextlib.asynccontextmanager
async def async_calls_open(app: Any) -> AsyncIterator[None]:
    """The app's lifespan: the store's AsyncCalls, if it has them, opened on the serving
    loop (``app.state.async_calls``) and closed at shutdown. An app whose store calls
    run on the loop (SQLite) has nothing to gain by them."""
    calls = None if app.state.store_calls_on_loop else app.state.store.async_calls()
    if calls is not None:
        await calls.open()
    app.state.async_calls = calls
    try:
        yield
    finally:
        app.state.async_calls = None
        if calls is not None:
            await calls.close()


Fill = Callable[[Any], None]


def filler(annotation: Any) -> Fill | None:
    """A function that adds to a document of type ``annotation`` (a response model, a
    list of them, optional) the optional keys it leaves out, at every level, with the
    model's defaults; None when there is nothing to add."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        fills = [f for f in (filler(a) for a in args if a is not type(None)) if f]
        if len(fills) != 1:
            return None
        (inner,) = fills
        return lambda value: None if value is None else inner(value)
    if origin is list and args:
        each = filler(args[0])
        if each is None:
            return None

        def fill_items(value: Any) -> None:
            for item in value:
                each(item)

        return fill_items
    if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return None
    defaults: dict[str, Any] = {}
    nested: dict[str, Fill] = {}
    for name, field in annotation.model_fields.items():
        if not field.is_required() and field.default_factory is None:
            defaults[name] = field.default  # the response models' defaults are immutable
        sub = filler(field.annotation)
        if sub is not None:
            nested[name] = sub

    def fill(doc: Any) -> None:
        if not isinstance(doc, dict):
            return
        for name, default in defaults.items():
            if name not in doc:
                doc[name] = default
        for name, sub in nested.items():
            if doc.get(name) is not None:
                sub(doc[name])

    return fill


def _as_coroutine(endpoint: Callable[..., Any], status_code: int | None) -> Callable[..., Any]:
    """``endpoint`` as a coroutine function that runs it by :func:`store_call`, with the
    same parameters (FastAPI reads their annotations through ``__wrapped__``) plus the
    Response FastAPI gives it, if it takes none itself."""
    signature = inspect.signature(endpoint)
    own = "response" in signature.parameters
    if not own:
        extra = inspect.Parameter(
            _SUB_RESPONSE, inspect.Parameter.KEYWORD_ONLY, annotation=Response
        )
        signature = signature.replace(parameters=[*signature.parameters.values(), extra])

    coroutine = inspect.iscoroutinefunction(endpoint)

    @functools.wraps(endpoint)
    async def run(*args: Any, **kwargs: Any) -> Any:
        sub: Response | None = kwargs.get("response") if own else kwargs.pop(_SUB_RESPONSE)
        if coroutine:
            result = await endpoint(*args, **kwargs)
        else:
            result = await store_call(endpoint, *args, **kwargs)
        if _UNCHECKED.get() and isinstance(result, dict) and sub is not None:
            fill: Fill | None = getattr(run, "fill", None)
            if fill is not None:
                fill(result)
            return _json(result, sub, status_code)
        return result

    run.__signature__ = signature  # type: ignore[attr-defined]
    return run


def _json(doc: dict[str, Any], sub: Response, status_code: int | None) -> Response:
    try:
        body = orjson.dumps(doc)
    except orjson.JSONEncodeError:  # an integer beyond 64 bits (a job's args may hold one)
        body = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
    answer = Response(
        body,
        status_code=getattr(sub, "status_code", None) or status_code or 200,
        media_type="application/json",
    )
    for name, value in sub.headers.items():
        if name != "content-length":
            answer.headers.append(name, value)
    return answer


class ApiRoute(APIRoute):
    """An APIRoute whose plain-function endpoint runs by :func:`store_call` (an
    :func:`awaited` one makes its calls itself), its answer written as the app says."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        wrapped = None
        if not inspect.iscoroutinefunction(endpoint) or getattr(
            endpoint, "cronwheel_awaited", False
        ):
            endpoint = wrapped = _as_coroutine(endpoint, kwargs.get("status_code"))
        super().__init__(path, endpoint, **kwargs)
        if wrapped is not None:
            wrapped.fill = filler(self.response_model)  # type: ignore[attr-defined]


class ServingMode:
    """Pure ASGI: the requests under it run their store calls on the event loop
    (``on_loop``), their writes in ``group`` (:func:`store_write`), and write their
    answers unvalidated (``unchecked``)."""

    def __init__(
        self, app: ASGIApp, *, on_loop: bool, unchecked: bool, group: WriteGroup | None = None
    ) -> None:
        self.app = app
        self.on_loop = on_loop
        self.unchecked = unchecked
        self.group = group

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop_token = _ON_LOOP.set(self.on_loop)
        unchecked_token = _UNCHECKED.set(self.unchecked)
        group_token = _GROUP.set(self.group)
        try:
            await self.app(scope, receive, send)
        finally:
            _GROUP.reset(group_token)
            _UNCHECKED.reset(unchecked_token)
            _ON_LOOP.reset(loop_token)
