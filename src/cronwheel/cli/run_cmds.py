"""``cronwheel serve | scheduler | worker | migrate``: the long-running roles."""

from __future__ import annotations

import sys
from datetime import timedelta

import click

from cronwheel.cli.api_cmd import browser_options
from cronwheel.cli.common import (
    F,
    log_args,
    log_options,
    open_cli_store,
    setup_logs,
    store_option,
    tracing_option,
    tzdata_option,
)
from cronwheel.worker.config import DEFAULT_CONCURRENCY

_APP_HELP = "MODULE:APP of your cronwheel.App (default: the built-in example app)."


def metrics_port_option(f: F) -> F:
    return click.option(
        "--metrics-port",
        type=click.IntRange(1, 65535),
        envvar="CRONWHEEL_METRICS_PORT",
        default=None,
        help="Serve this process's Prometheus metrics on PORT (/metrics; default: off).",
    )(f)


def _start_metrics(port: int | None) -> None:
    """Serve this process's metrics; CRONWHEEL_METRICS_HOST (default 127.0.0.1) is the
    address to bind, e.g. 0.0.0.0 for a Prometheus on another host."""
    if port is not None:
        import os

        from cronwheel.observability.process import serve_metrics

        serve_metrics(port, os.environ.get("CRONWHEEL_METRICS_HOST", "127.0.0.1"))


def isolation_option(f: F) -> F:
    return click.option(
        "--isolation",
        type=click.Choice(["auto", "process"]),
        envvar="CRONWHEEL_ISOLATION",
        default="auto",
        show_default=True,
        help="Where handlers of tasks without their own isolation run: auto (a sync "
        "handler in a thread, an async one on the event loop) or process (a child "
        "process the worker kills on timeout, revocation or cancel grace).",
    )(f)


def tasks_option(f: F) -> F:
    return click.option(
        "--tasks",
        "tasks_file",
        envvar="CRONWHEEL_TASKS",
        type=click.Path(dir_okay=False),
        default=None,
        help="TOML file of HTTP and shell tasks the workers run (env CRONWHEEL_TASKS).",
    )(f)


@click.command("serve")
@click.argument("app_ref", metavar="[MODULE:APP]", required=False)
@store_option
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Worker processes to start.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1024),
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="Handlers each worker runs at once.",
)
@tasks_option
@isolation_option
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address of the API and dashboard process (a loopback address: auth is off).",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    envvar="CRONWHEEL_API_PORT",
    default=8080,
    show_default=True,
    help="Port of the API and dashboard (env CRONWHEEL_API_PORT).",
)
@click.option("--api/--no-api", "with_api", default=True, help="Start the API + dashboard.")
@browser_options
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65000),
    default=None,
    help="Scheduler metrics on PORT, worker i on PORT+i (default: off).",
)
@tzdata_option
@tracing_option
@log_options
def serve_command(
    app_ref: str | None,
    store_url: str,
    workers: int,
    concurrency: int,
    tasks_file: str | None,
    isolation: str,
    host: str,
    port: int,
    with_api: bool,
    allowed_hosts: list[str],
    trusted_proxies: list[str],
    metrics_port: int | None,
    log_level: str | None,
    log_format: str | None,
) -> None:
    """All-in-one node: a scheduler and worker processes on one store.

    \b
    With no MODULE:APP it runs the built-in example jobs, so you can watch
    firings happen:  cronwheel serve
    """
    from cronwheel.cli.api_cmd import is_loopback
    from cronwheel.node import load_app, load_task_file, serve

    if with_api and not is_loopback(host):
        raise click.UsageError(
            f"--host {host} is not a loopback address: serve's API runs without tokens; "
            "run `cronwheel api --auth --host ...` separately to serve other hosts"
        )
    setup_logs(log_level, log_format, "serve")
    app = load_app(app_ref, store_url)  # fail fast (exit 2) on a bad APP before starting children
    if tasks_file:
        load_task_file(app, tasks_file)  # ... and on a bad tasks file
    open_cli_store(store_url).close()  # create and migrate the store once
    click.echo(
        f"cronwheel serve: store {store_url}, {workers} worker process(es); "
        "Ctrl-C to stop. Try `cronwheel status` and `cronwheel firings list` "
        "in another terminal.",
        err=True,
    )
    if with_api:
        shown = f"[{host}]" if ":" in host else host
        click.echo(f"cronwheel serve: dashboard at http://{shown}:{port}/", err=True)
    sys.exit(
        serve(
            app_ref,
            store_url,
            workers=workers,
            concurrency=concurrency,
            log_args=log_args(log_level, log_format),
            tasks_file=tasks_file,
            isolation=isolation,
            api_host=host if with_api else None,
            api_port=port,
            api_args=[
                *(a for h in allowed_hosts for a in ("--allowed-host", h)),
                *(a for p in trusted_proxies for a in ("--trusted-proxy", p)),
            ],
            metrics_port=metrics_port,
        )
    )


@click.command("scheduler")
@click.argument("app_ref", metavar="[MODULE:APP]", required=False)
@store_option
@click.option(
    "--lease-ttl",
    type=click.FloatRange(1, 600),
    default=5.0,
    show_default=True,
    help="Seconds a leader's lease lasts without renewal (takeover time).",
)
@metrics_port_option
@tzdata_option
@log_options
def scheduler_command(
    app_ref: str | None,
    store_url: str,
    lease_ttl: float,
    metrics_port: int | None,
    log_level: str | None,
    log_format: str | None,
) -> None:
    """Run a dispatcher: the leader fires jobs; others stand by to take over."""
    from cronwheel.dispatch.dispatcher import DispatcherConfig
    from cronwheel.node import load_app, run_scheduler

    setup_logs(log_level, log_format, "scheduler")
    app = load_app(app_ref, store_url)
    _start_metrics(metrics_port)
    run_scheduler(app, DispatcherConfig(lease_ttl=timedelta(seconds=lease_ttl)))


@click.command("worker")
@click.argument("app_ref", metavar="[MODULE:APP]", required=False)
@store_option
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1024),
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="Handlers run at once.",
)
@click.option(
    "--early-claims",
    type=click.IntRange(0, 100_000),
    default=5000,
    show_default=True,
    help="Claims held beyond --concurrency for firings not yet due (a crowd before its "
    "instant starts from local timers). A worker that dies strands them until their "
    "visibility timeout: 0 holds none.",
)
@click.option(
    "--max-clock-offset",
    type=click.FloatRange(0, 3600, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds this host's clock may be off the store's (the offset is corrected "
    "for); past it the worker is flagged and claims nothing until it is back within.",
)
@click.option(
    "--max-clock-uncertainty",
    type=click.FloatRange(0, 60_000, min_open=True),
    default=50.0,
    show_default=True,
    help="Milliseconds the estimate of that offset may be unsure by (half the best "
    "recent round trip to the store); past it the worker is flagged too.",
)
@click.option("--role", default="worker", hidden=True)
@tasks_option
@isolation_option
@metrics_port_option
@tzdata_option
@tracing_option
@log_options
def worker_command(
    app_ref: str | None,
    store_url: str,
    concurrency: int,
    early_claims: int,
    max_clock_offset: float,
    max_clock_uncertainty: float,
    role: str,
    tasks_file: str | None,
    isolation: str,
    metrics_port: int | None,
    log_level: str | None,
    log_format: str | None,
) -> None:
    """Run a worker: claim queued firings of this app's tasks and run them.

    \b
    --tasks FILE adds HTTP calls and shell commands defined in the worker's own
    configuration; the API can only refer to them by name.
    """
    from cronwheel.domain.clock import ClockBounds
    from cronwheel.node import load_app, load_task_file, run_worker
    from cronwheel.worker.worker import WorkerConfig

    setup_logs(log_level, log_format, role)
    app = load_app(app_ref, store_url)
    kinds = load_task_file(app, tasks_file) if tasks_file else None
    _start_metrics(metrics_port)
    config = WorkerConfig(
        concurrency=concurrency,
        early_claims=early_claims,
        isolation="process" if isolation == "process" else "auto",
        clock_bounds=ClockBounds(
            max_offset=timedelta(seconds=max_clock_offset),
            max_uncertainty=timedelta(milliseconds=max_clock_uncertainty),
        ),
    )
    run_worker(app, config, task_kinds=kinds)


@click.command("migrate")
@store_option
def migrate_command(store_url: str) -> None:
    """Create or upgrade the store's schema (idempotent)."""
    from rich.console import Console

    from cronwheel.store.url import open_store

    with Console(stderr=True).status(f"migrating {store_url} ..."):
        store = open_store(store_url, migrate=False)
        try:
            version = store.migrate()
        finally:
            store.close()
    click.echo(f"schema at version {version}")
