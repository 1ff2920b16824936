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

The choice is the app's (``create_api``), carried to the endpoints by a context
variable that :class:`StoreCallMode` sets for each request.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, MutableMapping
from contextvars import ContextVar
from typing import Any, TypeVar

from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

T = TypeVar("T")
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_ON_LOOP: ContextVar[bool] = ContextVar("cronwheel_store_calls_on_loop", default=False)


async def store_call(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``func(*args, **kwargs)`` on the loop or in the thread pool, as the app runs
    its store calls."""
    if _ON_LOOP.get():
        return func(*args, **kwargs)
    return await run_in_threadpool(func, *args, **kwargs)


def _as_coroutine(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """``endpoint`` as a coroutine function with the same signature (FastAPI reads the
    parameters through ``__wrapped__``) that runs it by :func:`store_call`."""

    @functools.wraps(endpoint)
    async def run(*args: Any, **kwargs: Any) -> Any:
        return await store_call(endpoint, *args, **kwargs)

    return run


class ApiRoute(APIRoute):
    """An APIRoute whose plain-function endpoint runs by :func:`store_call`."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(endpoint):
            endpoint = _as_coroutine(endpoint)
        super().__init__(path, endpoint, **kwargs)


class StoreCallMode:
    """Pure ASGI: the requests under it run their store calls on the event loop."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = _ON_LOOP.set(True)
        try:
            await self.app(scope, receive, send)
        finally:
            _ON_LOOP.reset(token)
