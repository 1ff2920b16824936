"""``cronwheel next``: preview when a cron schedule fires, in UTC and local time.

The user's way to check a schedule before trusting it, DST rules included. This
is the edge: it may read the real clock (for the default ``--after``); the
domain it calls never does.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import click

from cronwheel.cli.common import store_option
from cronwheel.domain.clock import SystemClock
from cronwheel.domain.schedules import (
    CronSchedule,
    format_instant,
    next_firings,
    parse_instant,
)
from cronwheel.domain.tz import DST_GAP_POLICIES, DST_OVERLAP_POLICIES, Resolved
from cronwheel.errors import CronwheelError

MAX_COUNT = 1000


def _human_delta(delta: timedelta) -> str:
    """``1d 2h``, ``15m``, ``30s``: the two most significant units."""
    seconds = int(delta.total_seconds())
    if seconds <= 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return " ".join(parts[:2])


def _as_json(schedule: CronSchedule, rows: list[Resolved]) -> str:
    items: list[dict[str, Any]] = []
    for row in rows:
        local = row.utc.astimezone(schedule.zone)
        items.append(
            {
                "utc": format_instant(row.utc),
                "local": local.isoformat(),
                "abbrev": local.tzname(),
                "note": row.note,
            }
        )
    return json.dumps(items, indent=2)


def _print_table(
    schedule: CronSchedule, rows: list[Resolved], after: datetime, after_given: bool
) -> None:
    # rich is imported here, not at the top: `cronwheel next --json` should not pay for it.
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    gap_src = "explicit" if schedule.dst_gap is not None else "default"
    overlap_src = "explicit" if schedule.dst_overlap is not None else "default"
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 200  # piped output: keep each row on one line
    console.print(
        f"[bold]{escape(schedule.expr)}[/bold] in [bold]{schedule.tz}[/bold]"
        f"  dst gap: {schedule.gap} ({gap_src}), overlap: {schedule.overlap} ({overlap_src})"
        + ("" if schedule.calendar is None else f"  calendar: {schedule.calendar}")
        + f"  after {format_instant(after)}"
        + ("" if after_given else " (now)")
    )
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("#", justify="right", style="dim")
    table.add_column(f"local ({schedule.tz})", no_wrap=True)
    table.add_column("UTC", no_wrap=True)
    table.add_column("gap", justify="right", no_wrap=True)
    table.add_column("DST note")
    previous = after
    for index, row in enumerate(rows, start=1):
        local = row.utc.astimezone(schedule.zone)
        local_text = f"{local:%a %Y-%m-%d %H:%M:%S} {local.tzname()}"
        delta = _human_delta(row.utc - previous)
        gap_text = f"in {delta}" if index == 1 and not after_given else f"+{delta}"
        table.add_row(str(index), local_text, format_instant(row.utc), gap_text, row.note or "")
        previous = row.utc
    console.print(table)
    if not rows:
        console.print("no firing: none left whose local time is before year 10000")


def _bind(schedule: CronSchedule, namespace: str, store_url: str) -> CronSchedule:
    from cronwheel.cli.common import open_cli_store
    from cronwheel.domain.jobs import bind_schedule
    from cronwheel.store.calendar_port import calendar_rules_of

    store = open_cli_store(store_url)
    try:
        bound = bind_schedule(schedule, namespace, calendar_rules_of(store))
    except CronwheelError as exc:
        exc.field = "calendar"
        raise
    finally:
        store.close()
    assert isinstance(bound, CronSchedule)
    return bound


@click.command("next")
@click.argument("expr")
@click.option("--tz", "tz", default="UTC", show_default=True, help="IANA time zone name.")
@click.option("--after", default=None, help="RFC 3339 instant to start from (default: now).")
@click.option(
    "--count",
    type=click.IntRange(1, MAX_COUNT),
    default=5,
    show_default=True,
    help="How many firings to show (1-1000).",
)
@click.option(
    "--dst-gap",
    type=click.Choice(DST_GAP_POLICIES),
    default=None,
    help="Nonexistent wall times: next_valid, skip or shift (default, as Debian cron: "
    "skip if the minute or hour field starts with *, else next_valid).",
)
@click.option(
    "--dst-overlap",
    type=click.Choice(DST_OVERLAP_POLICIES),
    default=None,
    help="Repeated wall times: once or twice (default, as Debian cron: "
    "twice if the minute or hour field starts with *, else once).",
)
@click.option(
    "--calendar",
    default=None,
    help="Skip the days a calendar excludes (local dates in --tz): a country (US), a "
    "country and subdivision (DE-BY), a market (NYSE), or a calendar of --namespace in "
    "--store (office).",
)
@click.option(
    "--namespace", default="default", show_default=True, help="The stored calendar's namespace."
)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
def next_command(
    expr: str,
    tz: str,
    after: str | None,
    count: int,
    dst_gap: str | None,
    dst_overlap: str | None,
    calendar: str | None,
    namespace: str,
    store_url: str,
    as_json: bool,
) -> None:
    """Show the next firing instants of cron expression EXPR in zone --tz."""
    schedule = CronSchedule(
        expr=expr,
        tz=tz,
        dst_gap=dst_gap,  # type: ignore[arg-type]  # click.Choice guarantees the literal
        dst_overlap=dst_overlap,  # type: ignore[arg-type]
        calendar=calendar,
    )
    if schedule.stored_calendar is not None:  # the store is opened only for these
        schedule = _bind(schedule, namespace, store_url)
    start = SystemClock().now() if after is None else parse_instant(after, "--after")
    rows = next_firings(schedule, start, count)
    if as_json:
        click.echo(_as_json(schedule, rows))
    else:
        _print_table(schedule, rows, start, after is not None)
