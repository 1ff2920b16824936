"""The HTTP server's application: the JSON API, the dashboard and ``/metrics``.

``cronwheel api`` serves ``create_app(store, ...)``. The API (``cronwheel.api``) and
the dashboard (``cronwheel.dashboard``) do not know each other: they are put
together here, and share only ``cronwheel.web``.

In front of both (outermost first): uvicorn's proxy-headers middleware for the
``trusted_proxies`` only (the scheme and client address they report), the browser
guard (``web.browser``: the Host check, cross-site state changes) and the API's body
guard (``api.guard``).
"""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from cronwheel.api import create_api
from cronwheel.api.guard import DEFAULT_MAX_BODY
from cronwheel.dashboard import mount
from cronwheel.domain.clock import Clock
from cronwheel.store.protocol import ApiStore
from cronwheel.web.browser import BrowserGuard, parse_allowed_hosts, parse_trusted_proxies
from cronwheel.web.tokens import TOKEN_CACHE_S, TokenCache


def create_app(
    store: ApiStore,
    *,
    auth_required: bool = True,
    max_body: int = DEFAULT_MAX_BODY,
    allowed_hosts: Iterable[str] | None = None,
    trusted_proxies: Iterable[str] = (),
    tracing: bool | None = None,
    store_calls_on_loop: bool = False,
    validate_responses: bool = True,
    fast_routes: bool = True,
    token_cache_s: float = TOKEN_CACHE_S,
    clock: Clock | None = None,
) -> FastAPI:
    """The API over ``store`` (which the caller opens, migrates and closes), with the
    dashboard at ``/`` and ``/ui/...`` and Prometheus at ``/metrics``.

    ``allowed_hosts``: the Host names answered (``web.browser.allowed_hosts_for`` derives
    them from the bind address, as ``cronwheel api`` does); None answers any Host, for a
    caller that checks it elsewhere. ``trusted_proxies``: IP addresses or networks whose
    ``X-Forwarded-Proto``/``X-Forwarded-For`` are believed (none by default). Serving the
    app with uvicorn, pass ``proxy_headers=False``: the app does this itself.
    ``tracing``: as ``create_api``'s (README "Tracing").

    ``store_calls_on_loop``: run the API's store calls on the event loop (see
    ``api.calls``; ``cronwheel api`` does for SQLite); ``validate_responses=False``:
    write the API's answers with orjson, unvalidated (``cronwheel api`` does), and then,
    with ``fast_routes``, answer the hottest routes without FastAPI's routing
    (``api.fast``). Token
    records are believed for ``token_cache_s`` seconds of ``clock``'s monotonic time
    (``web.tokens.TokenCache``): the bound within which a revoked token stops working.
    ``clock.now()`` is also the guess of the store's clock that a creation's one
    statement is checked against (``create_api``).
    """
    hosts = None if allowed_hosts is None else parse_allowed_hosts(allowed_hosts)
    proxies = parse_trusted_proxies(trusted_proxies)
    app = create_api(
        store,
        auth_required=auth_required,
        max_body=max_body,
        store_calls_on_loop=store_calls_on_loop,
        validate_responses=validate_responses,
        fast_routes=fast_routes,
        tracing=tracing,
        clock=clock,
    )
    app.state.token_cache = TokenCache(app.state.clock.monotonic, token_cache_s)
    mount(app)
    app.add_middleware(BrowserGuard, allowed_hosts=hosts)
    if proxies:
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=proxies)
    app.state.trusted_proxies = tuple(proxies)
    return app
