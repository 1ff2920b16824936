"""Options and helpers shared by the CLI commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from cronwheel.store.url import DEFAULT_STORE_URL, require_shared

F = TypeVar("F", bound=Callable[..., Any])


def _shared_store(ctx: click.Context, _param: click.Parameter, url: str) -> str:
    """Every command runs in a process of its own (serve, scheduler, worker and api start
    more): refuse memory://, a store that dies with the process that holds it."""
    require_shared(url, ctx.command_path.removeprefix("cronwheel "))
    return url


def store_option(f: F) -> F:
    return click.option(
        "--store",
        "store_url",
        envvar="CRONWHEEL_STORE",
        default=DEFAULT_STORE_URL,
        show_default=True,
        callback=_shared_store,
        help="Store URL: sqlite:///path.db or postgresql://user@host/db (env CRONWHEEL_STORE).",
    )(f)


def _use_tzdata(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Choose this process's tz database (domain/tzdb.py) and hand the choice to the
    processes it starts (serve's children) through CRONWHEEL_TZDATA."""
    import os

    from cronwheel.domain.tzdb import TZDATA_ENV, use_tz_database
    from cronwheel.errors import ValidationError

    try:
        chosen = use_tz_database(value, field="--tzdata")
    except ValidationError as exc:
        raise click.BadParameter(exc.message, param_hint=exc.field or "--tzdata") from None
    os.environ[TZDATA_ENV] = chosen.source
    return chosen.source


def tzdata_option(f: F) -> F:
    return click.option(
        "--tzdata",
        default=None,
        expose_value=False,
        is_eager=True,
        callback=_use_tzdata,
        help="The tz database: 'bundled' (the tzdata package, the default), 'system' "
        "(/usr/share/zoneinfo) or a directory of compiled zones holding its tzdata.zi "
        "(env CRONWHEEL_TZDATA). Every node of a cluster should use the same version.",
    )(f)


def _use_tracing(_ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    """Turn tracing on for this process and the processes it starts (serve's children)
    through CRONWHEEL_TRACING (observability/tracing_switch.py)."""
    if not value:
        return value
    import os

    from cronwheel.errors import ValidationError
    from cronwheel.observability.tracing_switch import TRACING_ENV, tracing_wanted

    try:
        tracing_wanted(True, field="--tracing")
    except ValidationError as exc:
        raise click.BadParameter(exc.message, param_hint=exc.field or "--tracing") from None
    os.environ[TRACING_ENV] = "1"
    return value


def tracing_option(f: F) -> F:
    return click.option(
        "--tracing",
        is_flag=True,
        default=False,
        expose_value=False,
        is_eager=True,
        callback=_use_tracing,
        help="OpenTelemetry spans for enqueue, claim and run, through the application's "
        "tracer provider (env CRONWHEEL_TRACING=1; needs cronwheel[otel]; README 'Tracing').",
    )(f)


def log_options(f: F) -> F:
    f = click.option(
        "--log-level",
        type=click.Choice(["debug", "info", "warning", "error"]),
        default=None,
        help="Log level (env CRONWHEEL_LOG_LEVEL; default info).",
    )(f)
    return click.option(
        "--log-format",
        type=click.Choice(["console", "json"]),
        default=None,
        help="Human-readable lines or one JSON object per line (env CRONWHEEL_LOG_FORMAT).",
    )(f)


def log_args(log_level: str | None, log_format: str | None) -> list[str]:
    args: list[str] = []
    if log_level:
        args += ["--log-level", log_level]
    if log_format:
        args += ["--log-format", log_format]
    return args


def setup_logs(log_level: str | None, log_format: str | None, role: str) -> None:
    from cronwheel.observability import logs

    logs.configure(
        level=log_level, json=None if log_format is None else log_format == "json", role=role
    )


def open_cli_store(store_url: str) -> Any:
    from cronwheel.store.url import open_store

    return open_store(store_url)


def local_firing_id(store: Any, shown: int) -> Any:
    """The store's id of the firing shown as ``shown`` (the API's and the dashboard's
    id, ``domain/ids.py``); the same error as a firing that does not exist otherwise."""
    from cronwheel.domain.models import FiringId
    from cronwheel.errors import FiringNotFoundError
    from cronwheel.web.ids import internal_id

    internal = internal_id(store, "firing", shown)
    if internal is None:
        raise FiringNotFoundError(f"no firing with id {shown}", field="firing_id")
    return FiringId(internal)


def shown_ids(store: Any) -> Any:
    """The codec of the ids users see, for ``store`` (``web.ids.ids_for``)."""
    from cronwheel.web.ids import ids_for

    return ids_for(store)
