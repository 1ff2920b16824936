"""``cronwheel api``: serve the HTTP API with uvicorn.

Without tokens (``--no-auth``, the default) it binds loopback addresses only:
``--host 0.0.0.0`` without ``--auth`` refuses to start (exit 2). The access log
is off: request lines could carry credentials someone put in a query string.

It answers only the Host names it is bound to (``--allowed-host`` adds more) and
believes ``X-Forwarded-Proto``/``X-Forwarded-For`` from the ``--trusted-proxy``
addresses only (uvicorn's own proxy-header handling is off): see ``web.browser``.

``--workers N`` serves the port from N processes, each opening its own store
connections. On Linux each process listens on its own ``SO_REUSEPORT`` socket and
the kernel spreads connections over them (``cli.api_workers``: why, and the
supervisor that checks the port, restarts a child that dies and stops them all on
SIGINT/SIGTERM); elsewhere uvicorn's supervisor starts N children accepting on one
shared socket. On a SQLite store the API's store calls run on each process's event
loop (``api.calls``): its one connection serializes them anyway. Each answer leaves
in one write (``cli.http_protocol``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from cronwheel.cli.common import (
    F,
    log_options,
    setup_logs,
    store_option,
    tracing_option,
    tzdata_option,
)
from cronwheel.web.browser import is_loopback

__all__ = [
    "SETTINGS_ENV",
    "api_command",
    "app_from_env",
    "browser_options",
    "is_loopback",
    "server_options",
]

SETTINGS_ENV = "CRONWHEEL_API_PROCESS"  # the settings a --workers child builds its app from


def _hosts(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list[str]:
    from cronwheel.errors import ValidationError
    from cronwheel.web.browser import parse_allowed_hosts

    try:
        return parse_allowed_hosts(values)
    except ValidationError as exc:
        raise click.BadParameter(exc.message) from None


def _proxies(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list[str]:
    from cronwheel.errors import ValidationError
    from cronwheel.web.browser import parse_trusted_proxies

    try:
        return parse_trusted_proxies(values)
    except ValidationError as exc:
        raise click.BadParameter(exc.message) from None


def browser_options(f: F) -> F:
    """``--allowed-host`` and ``--trusted-proxy`` (``cronwheel api`` and ``serve``)."""
    f = click.option(
        "--trusted-proxy",
        "trusted_proxies",
        multiple=True,
        envvar="CRONWHEEL_TRUSTED_PROXIES",
        callback=_proxies,
        help="IP or CIDR of a reverse proxy whose X-Forwarded-Proto/-For are believed "
        "(repeatable; env CRONWHEEL_TRUSTED_PROXIES, comma-separated). Default: none.",
    )(f)
    return click.option(
        "--allowed-host",
        "allowed_hosts",
        multiple=True,
        envvar="CRONWHEEL_ALLOWED_HOSTS",
        callback=_hosts,
        help="Another Host name to answer besides the bound address's (repeatable; env "
        "CRONWHEEL_ALLOWED_HOSTS, comma-separated). Other Host headers get 421.",
    )(f)


@click.command("api")
@store_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option(
    "--auth/--no-auth",
    default=None,
    help="Require bearer tokens (needed for any non-loopback --host). Default: off on loopback.",
)
@click.option(
    "--max-body",
    type=click.IntRange(1024, 64 * 1024 * 1024),
    default=256 * 1024,
    show_default=True,
    help="Largest request body in bytes (413 beyond).",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Processes serving the port, each with its own store connections. On Linux each "
    "listens on its own SO_REUSEPORT socket (the kernel spreads new connections over them); "
    "without SO_REUSEPORT, uvicorn's supervisor with one shared socket.",
)
@browser_options
@tzdata_option
@tracing_option
@log_options
def api_command(
    store_url: str,
    host: str,
    port: int,
    auth: bool | None,
    max_body: int,
    workers: int,
    allowed_hosts: list[str],
    trusted_proxies: list[str],
    log_level: str | None,
    log_format: str | None,
) -> None:
    """Serve the HTTP JSON API (OpenAPI at /openapi.json, endpoint list at /docs)."""
    if not auth and not is_loopback(host):
        raise click.UsageError(
            f"--host {host} is not a loopback address: serving it requires --auth (tokens)"
        )
    from cronwheel.errors import ValidationError
    from cronwheel.web.browser import allowed_hosts_for

    try:
        hosts = allowed_hosts_for(host, allowed_hosts)
    except ValidationError as exc:
        raise click.BadParameter(exc.message, param_hint="--host") from None
    from cronwheel.cli import api_workers

    held = None
    if workers > 1:  # the port checked once here: "in use" is one line, not N tracebacks
        try:
            held = api_workers.hold_port(host, port, reuse_port=api_workers.reuse_port_supported())
        except api_workers.PortInUseError as exc:
            raise click.BadParameter(str(exc), param_hint="--port") from None
        port = held.getsockname()[1]  # --port 0: the one chosen
    setup_logs(log_level, log_format, "api")
    import uvicorn

    from cronwheel.cli.common import open_cli_store
    from cronwheel.store.url import sqlite_path

    settings: dict[str, Any] = {
        "store_url": store_url,
        "auth_required": bool(auth),
        "max_body": max_body,
        "allowed_hosts": None if hosts is None else sorted(hosts),
        "trusted_proxies": trusted_proxies,
        "store_calls_on_loop": sqlite_path(store_url) is not None,
        "log_level": log_level,
        "log_format": log_format,
    }
    store = open_cli_store(store_url)
    try:
        if auth and not store.list_tokens():
            click.echo(
                "cronwheel: warning: no API tokens yet; create one with "
                "`cronwheel tokens create --namespace NS --role write`",
                err=True,
            )
        click.echo(
            f"cronwheel api on http://{host}:{port} (auth {'on' if auth else 'off'}"
            + (f", {workers} processes)" if workers > 1 else ")"),
            err=True,
        )
        if hosts is None:
            click.echo(
                "cronwheel api: answering any Host header; name this server's host names "
                "with --allowed-host to refuse the others",
                err=True,
            )
        options = server_options(host, port, log_level)
        if workers == 1:
            app = _app(store, settings)
            uvicorn.Server(uvicorn.Config(app, **options)).run()
            return
    finally:
        store.close()
    assert held is not None
    if api_workers.reuse_port_supported():
        import structlog

        env = dict(
            os.environ, **{SETTINGS_ENV: json.dumps(settings | {"host": host, "port": port})}
        )
        log = structlog.get_logger("cronwheel.api")
        try:
            code = api_workers.supervise(workers, api_workers.child_argv(), env, log=log)
        finally:
            held.close()
        if code:
            sys.exit(code)
        return
    from uvicorn.supervisors import Multiprocess

    os.environ[SETTINGS_ENV] = json.dumps(settings)  # the children inherit it
    config = uvicorn.Config(f"{__name__}:app_from_env", factory=True, workers=workers, **options)
    held.set_inheritable(True)  # uvicorn's children accept on it (Config.bind_socket's)
    Multiprocess(config, sockets=[held]).run()


def server_options(host: str, port: int, log_level: str | None) -> dict[str, Any]:
    """uvicorn's options for a serving process (one, or each of ``--workers``)."""
    from cronwheel.cli.http_protocol import OneWriteHttpToolsProtocol

    return {
        "http": OneWriteHttpToolsProtocol,  # each answer in one write
        "host": host,
        "port": port,
        "access_log": False,
        "server_header": False,
        "proxy_headers": False,  # the app believes --trusted-proxy peers only
        "log_level": (log_level or "warning"),
    }


def _app(store: Any, settings: dict[str, Any]) -> Any:
    """The app of a serving process. What the process holds by then (the modules, the
    app) is frozen out of the cyclic garbage collector: a full collection walked all of
    it, 50-60 ms with the event loop stopped, about once a second at 2,500 requests/s
    (the API's p99 latency); frozen, one takes a few milliseconds."""
    import gc

    from cronwheel.server import create_app

    app = create_app(
        store,
        auth_required=settings["auth_required"],
        max_body=settings["max_body"],
        allowed_hosts=settings["allowed_hosts"],
        trusted_proxies=settings["trusted_proxies"],
        store_calls_on_loop=settings["store_calls_on_loop"],
        validate_responses=False,  # api.calls: the codec's shapes are checked by the tests
    )
    gc.freeze()
    return app


def app_from_env() -> Any:
    """The app of one ``--workers`` process: its own store, closed when it stops."""
    from collections.abc import AsyncIterator
    from contextlib import asynccontextmanager

    from cronwheel.cli.common import open_cli_store

    settings = json.loads(os.environ[SETTINGS_ENV])
    setup_logs(settings["log_level"], settings["log_format"], "api")
    store = open_cli_store(settings["store_url"])
    app = _app(store, settings)

    served = app.router.lifespan_context  # the app's own (api.calls.async_calls_open)

    @asynccontextmanager
    async def closing(_app: Any) -> AsyncIterator[None]:
        try:
            async with served(_app):
                yield
        finally:
            store.close()

    app.router.lifespan_context = closing
    return app
