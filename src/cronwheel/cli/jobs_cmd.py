"""``cronwheel jobs add|list|show|pause|resume|delete|explain|trigger|backfill|skip``."""

from __future__ import annotations

import json
from typing import Any

import click

from cronwheel.cli.common import open_cli_store, shown_ids, store_option
from cronwheel.cli.remote import client, url_option
from cronwheel.errors import ValidationError

_OVERLAPS = ["skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow"]
_NS = click.option("--namespace", default="default", show_default=True, help="Job namespace.")


@click.group("jobs")
def jobs_group() -> None:
    """Create, inspect and control jobs."""


def _register_add() -> None:
    from cronwheel.cli.jobs_add import add_command

    jobs_group.add_command(add_command)


_register_add()  # `jobs add` lives in jobs_add.py: its policy flags come from one table


@jobs_group.command("list")
@click.option("--prefix", help="Only names starting with this text (taken literally).")
@click.option("--task", help="Only jobs of this task.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@_NS
@store_option
@url_option
def list_command(
    prefix: str | None,
    task: str | None,
    limit: int,
    as_json: bool,
    namespace: str,
    store_url: str,
    url: str | None,
) -> None:
    """List jobs with their next firing."""
    from itertools import islice

    from cronwheel.cli import render

    if url is not None:
        with client(url, namespace) as api:
            pages = api.list_jobs(task=task, name_prefix=prefix, page_size=min(limit, 500))
            jobs = list(islice(pages, limit))
    else:
        store = open_cli_store(store_url)
        try:
            jobs = store.list_jobs(namespace=namespace, name_prefix=prefix, task=task, limit=limit)
            jobs = [shown_ids(store).job(j) for j in jobs]  # the API's ids
        finally:
            store.close()
    if as_json:
        click.echo(json.dumps([render.job_dict(j) for j in jobs], indent=2, ensure_ascii=False))
    else:
        render.jobs_table(jobs)


def _job_action(name: str, namespace: str, store_url: str, action: str, url: str | None) -> None:
    if url is not None:
        with client(url, namespace) as api:
            {"delete": api.delete_job, "pause": api.pause, "resume": api.resume}[action](name)
        click.echo(f"{action}d job {name!r}" if action != "pause" else f"paused job {name!r}")
        return
    store = open_cli_store(store_url)
    try:
        if action == "delete":
            store.delete_job(namespace, name)
        else:
            store.set_paused(namespace, name, action == "pause")
    finally:
        store.close()
    click.echo(f"{action}d job {name!r}" if action != "pause" else f"paused job {name!r}")


@jobs_group.command("show")
@click.argument("name")
@click.option(
    "--count",
    type=click.IntRange(1, 100),
    default=5,
    show_default=True,
    help="Upcoming firings to preview.",
)
@click.option("--json", "as_json", is_flag=True)
@_NS
@store_option
@url_option
def show_command(
    name: str, count: int, as_json: bool, namespace: str, store_url: str, url: str | None
) -> None:
    """Show one job: schedule, policies, cursor, upcoming and recent firings."""
    from itertools import islice

    from cronwheel.cli import render

    if url is not None:
        with client(url, namespace) as api:
            job = api.get_job(name)
            firings = list(islice(api.list_firings(name, page_size=10), 10))
            events: list[Any] = []  # missed-instant records are not served by the API yet
    else:
        store = open_cli_store(store_url)
        try:
            job = store.get_job(namespace, name)
            firings = store.list_firings(job_id=job.id, limit=10)
            events = store.job_events(job.id, limit=10)
            ids = shown_ids(store)  # the API's ids
            job, firings = ids.job(job), [ids.firing(f) for f in firings]
        finally:
            store.close()
    if as_json:
        doc = render.job_dict(job) | {
            "upcoming": render.upcoming(job, count),
            "recent_firings": [f.to_dict() for f in firings],
            "missed": [render.event_dict(e) for e in events],
        }
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        render.job_detail(job, render.upcoming(job, count), firings, events)


@jobs_group.command("pause")
@click.argument("name")
@_NS
@store_option
@url_option
def pause_command(name: str, namespace: str, store_url: str, url: str | None) -> None:
    """Stop firing a job (missed instants follow its misfire policy on resume)."""
    _job_action(name, namespace, store_url, "pause", url)


@jobs_group.command("resume")
@click.argument("name")
@_NS
@store_option
@url_option
def resume_command(name: str, namespace: str, store_url: str, url: str | None) -> None:
    """Resume a paused job."""
    _job_action(name, namespace, store_url, "resume", url)


@jobs_group.command("delete")
@click.argument("name")
@_NS
@store_option
@url_option
def delete_command(name: str, namespace: str, store_url: str, url: str | None) -> None:
    """Delete a job and its firing history."""
    _job_action(name, namespace, store_url, "delete", url)


@jobs_group.command("explain")
@click.argument("name")
@click.option("--since", help="RFC 3339 start (default: 24 hours ago).")
@click.option("--until", "until_text", help="RFC 3339 end (default: now).")
@click.option("--json", "as_json", is_flag=True)
@_NS
@store_option
def explain_command(
    name: str,
    since: str | None,
    until_text: str | None,
    as_json: bool,
    namespace: str,
    store_url: str,
) -> None:
    """Why did (or didn't) NAME run? One line per occurrence of its schedule."""
    from datetime import timedelta

    from cronwheel.domain.fates import explain
    from cronwheel.domain.schedules import parse_instant

    store = open_cli_store(store_url)
    try:
        now = store.now()
        until = parse_instant(until_text, "until") if until_text else now
        start = parse_instant(since, "since") if since else until - timedelta(hours=24)
        if start > until:
            raise ValidationError("must not be after --until", field="since")
        job = store.get_job(namespace, name)
        firings = store.list_job_firings(
            job.id,
            scheduled_from=start,
            scheduled_to=until + timedelta(microseconds=1),
            limit=5000,
        )
        events = store.job_events(job.id, limit=5000)
        firings = [shown_ids(store).firing(f) for f in firings]  # the API's ids
    finally:
        store.close()
    occurrences = explain(job, since=start, until=until, now=now, firings=firings, events=events)
    if as_json:
        click.echo(json.dumps([o.to_dict() for o in occurrences], indent=2, ensure_ascii=False))
        return
    if not occurrences:
        click.echo(f"no occurrence of {name!r} between {start.isoformat()} and {until.isoformat()}")
    for o in occurrences:
        click.echo(f"{o.nominal:32}  {o.fate:22}  {o.detail}")


@jobs_group.command("trigger")
@click.argument("name")
@click.option(
    "--overlap",
    type=click.Choice(_OVERLAPS),
    help="Override the job's overlap policy for this firing (e.g. allow).",
)
@_NS
@store_option
@url_option
def trigger_command(
    name: str, overlap: str | None, namespace: str, store_url: str, url: str | None
) -> None:
    """Fire NAME now, without moving its schedule."""
    if url is not None:
        with client(url, namespace) as api:
            firing = api.trigger(name, overlap=overlap)
    else:
        store = open_cli_store(store_url)
        try:
            added = store.add_firings(
                namespace, name, [store.now()], note="trigger", overlap=overlap
            )
            if not added.inserted:
                raise ValidationError("the job already has a firing at this instant", field="name")
            firing = shown_ids(store).firing(added.inserted[0])  # the API's ids
        finally:
            store.close()
    click.echo(f"triggered job {name!r}: firing {firing.id} ({firing.idempotency_key})")


@jobs_group.command("backfill")
@click.argument("name")
@click.option("--start", "start_text", required=True, help="RFC 3339 start of the range.")
@click.option("--end", "end_text", required=True, help="RFC 3339 end of the range (past).")
@click.option(
    "--overlap",
    type=click.Choice(_OVERLAPS),
    help="Override the job's overlap policy for these firings.",
)
@_NS
@store_option
@url_option
def backfill_command(
    name: str,
    start_text: str,
    end_text: str,
    overlap: str | None,
    namespace: str,
    store_url: str,
    url: str | None,
) -> None:
    """Fire every instant of NAME's schedule in a past range (at most 1000)."""
    from cronwheel.domain.policies import instants_between
    from cronwheel.domain.schedules import LISTING_STEPS, next_after_within, parse_instant
    from cronwheel.domain.transitions import StepBudget

    start, end = parse_instant(start_text, "start"), parse_instant(end_text, "end")
    if url is not None:
        with client(url, namespace) as api:
            doc = api.backfill(name, start, end, overlap=overlap)
        inserted, duplicates = doc["inserted"], doc["duplicates"]
    else:
        store = open_cli_store(store_url)
        try:
            if end > store.now():
                raise ValidationError("backfill covers past instants only", field="end")
            job = store.get_job(namespace, name)
            instants = instants_between(
                next_after_within(job.spec.schedule, StepBudget(LISTING_STEPS)), start, end
            )
            inserted, duplicates = _backfill_with_progress(
                store, namespace, name, instants, overlap
            )
        finally:
            store.close()
    click.echo(
        f"backfilled job {name!r}: {inserted} firing(s) queued, "
        f"{duplicates} instant(s) already had one"
    )


def _backfill_with_progress(
    store: Any, namespace: str, name: str, instants: list[Any], overlap: str | None
) -> tuple[int, int]:
    """Queue the instants in chunks of 100 (one transaction each), with a progress bar."""
    from rich.progress import Progress

    inserted = duplicates = 0
    with Progress(transient=True, console=_stderr_console()) as progress:
        bar = progress.add_task(f"backfill {name}", total=len(instants))
        for lo in range(0, len(instants), 100):
            chunk = instants[lo : lo + 100]
            added = store.add_firings(namespace, name, chunk, note="backfill", overlap=overlap)
            inserted += len(added.inserted)
            duplicates += added.duplicates
            progress.advance(bar, len(chunk))
    return inserted, duplicates


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


from cronwheel.cli.skip_cmd import skip_command  # noqa: E402 - its own module (file size)

jobs_group.add_command(skip_command)
