"""``cronwheel api``: serve the HTTP API with uvicorn.

Without tokens (``--no-auth``, the default) it binds loopback addresses only:
``--host 0.0.0.0`` without ``--auth`` refuses to start (exit 2). The access log
is off: request lines could carry credentials someone put in a query string.
"""

from __future__ import annotations

import ipaddress

import click

from cronwheel.cli.common import log_options, setup_logs, store_option


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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
@log_options
def api_command(
    store_url: str,
    host: str,
    port: int,
    auth: bool | None,
    max_body: int,
    log_level: str | None,
    log_format: str | None,
) -> None:
    """Serve the HTTP JSON API (OpenAPI at /openapi.json, endpoint list at /docs)."""
    if not auth and not is_loopback(host):
        raise click.UsageError(
            f"--host {host} is not a loopback address: serving it requires --auth (tokens)"
        )
    setup_logs(log_level, log_format, "api")
    import uvicorn

    from cronwheel.cli.common import open_cli_store
    from cronwheel.server import create_app

    store = open_cli_store(store_url)
    try:
        if auth and not store.list_tokens():
            click.echo(
                "cronwheel: warning: no API tokens yet; create one with "
                "`cronwheel tokens create --namespace NS --role write`",
                err=True,
            )
        app = create_app(store, auth_required=bool(auth), max_body=max_body)
        click.echo(
            f"cronwheel api on http://{host}:{port} (auth {'on' if auth else 'off'})", err=True
        )
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            access_log=False,
            server_header=False,
            log_level=(log_level or "warning"),
        )
        uvicorn.Server(config).run()
    finally:
        store.close()
