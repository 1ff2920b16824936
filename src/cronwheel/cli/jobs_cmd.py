"""``cronwheel jobs add|list|show|pause|resume|delete|explain|trigger|backfill|skip``."""

from __future__ import annotations

import json
from typing import Any

import click

from cronwheel.cli.common import open_cli_store, store_option
from cronwheel.cli.remote import client, url_option
from cronwheel.errors import ValidationError

_OVERLAPS = ["skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow"]
_NS = click.option("--namespace", default="default", show_default=True, help="Job namespace.")


def _json_arg(text: str | None, field: str, kind: type) -> Any:
    if text is None:
        return kind()
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValidationError(f"is not valid JSON: {exc.args[0]}", field=field) from None
    if not isinstance(value, kind):
        raise ValidationError(
            f"must be a JSON {'array' if kind is list else 'object'}", field=field
        )
    return value


@click.group("jobs")
def jobs_group() -> None:
    """Create, inspect and control jobs."""


@jobs_group.command("add")
@click.argument("name")
@click.option("--task", required=True, help="Registered task name the job runs.")
@click.option("--cron", "cron_expr", help="Cron expression (5 or 6 fields, or @daily ...).")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone of --cron.")
@click.option("--dst-gap", type=click.Choice(["next_valid", "skip", "shift"]))
@click.option("--dst-overlap", type=click.Choice(["once", "twice"]))
@click.option("--every", "every_text", help="Fixed interval, e.g. 30s, 5m, 1h30m.")
@click.option("--anchor", help="RFC 3339 instant the --every interval is aligned to.")
@click.option("--at", "at_text", help="One instant, RFC 3339 with offset.")
@click.option("--allow-past", is_flag=True, help="Accept an --at in the past (fires at once).")
@click.option("--now", "now_flag", is_flag=True, help="Fire once, immediately.")
@click.option("--args", "args_json", help="JSON array of positional arguments.")
@click.option("--kwargs", "kwargs_json", help="JSON object of keyword arguments.")
@click.option("--retries", type=click.IntRange(0, 999), help="Retries after a failed attempt.")
@click.option("--timeout", "timeout_text", help="Handler time limit, e.g. 30s.")
@click.option("--visibility-timeout", "vt_text", help="Claim lease, e.g. 30s.")
@click.option("--misfire", type=click.Choice(["fire_once", "fire_all", "skip"]))
@click.option("--priority", type=float, help="Weight (0.01-1000, default 1).")
@click.option(
    "--max-concurrency",
    type=click.IntRange(1, 10_000),
    help="Firings of this job running at once (default 1 for recurring jobs).",
)
@click.option(
    "--overlap",
    type=click.Choice(_OVERLAPS),
    help="When a firing is due while the job is at its cap (default skip).",
)
@click.option("--max-buffer", type=click.IntRange(1, 10_000), help="Bound of buffer_all.")
@click.option("--cancel-grace", "cancel_grace_text", help="Cooperative-cancel deadline, e.g. 30s.")
@click.option(
    "--start-deadline",
    "start_deadline_text",
    help="A firing not started within this is recorded MISSED, e.g. 5m.",
)
@click.option("--jitter", "jitter_text", help="Spread starts by up to this delay, e.g. 10s.")
@click.option("--start-at", "start_at_text", help="No firing before this RFC 3339 instant.")
@click.option("--end-at", "end_at_text", help="No firing after this RFC 3339 instant.")
@click.option("--max-runs", type=click.IntRange(1, 10**9), help="End the job after N firings.")
@click.option("--paused", is_flag=True, help="Create the job paused.")
@click.option("--replace", is_flag=True, help="Update the job if the name exists.")
@_NS
@store_option
@url_option
def add_command(
    name: str,
    task: str,
    cron_expr: str | None,
    tz: str,
    dst_gap: str | None,
    dst_overlap: str | None,
    every_text: str | None,
    anchor: str | None,
    at_text: str | None,
    allow_past: bool,
    now_flag: bool,
    args_json: str | None,
    kwargs_json: str | None,
    retries: int | None,
    timeout_text: str | None,
    vt_text: str | None,
    misfire: str | None,
    priority: float | None,
    max_concurrency: int | None,
    overlap: str | None,
    max_buffer: int | None,
    cancel_grace_text: str | None,
    start_deadline_text: str | None,
    jitter_text: str | None,
    start_at_text: str | None,
    end_at_text: str | None,
    max_runs: int | None,
    paused: bool,
    replace: bool,
    namespace: str,
    store_url: str,
    url: str | None,
) -> None:
    """Add a job NAME running TASK on one schedule (--cron, --every, --at or --now)."""
    from cronwheel.domain import schedules
    from cronwheel.domain.clock import SystemClock
    from cronwheel.domain.jobs import build_policies, spec_first_fire_at
    from cronwheel.domain.models import JobSpec

    chosen = [x for x in (cron_expr, every_text, at_text) if x is not None] + (
        ["now"] if now_flag else []
    )
    if len(chosen) != 1:
        raise ValidationError("give exactly one of --cron, --every, --at, --now", field="schedule")
    if cron_expr is not None:
        schedule: Any = schedules.cron(cron_expr, tz, dst_gap=dst_gap, dst_overlap=dst_overlap)  # type: ignore[arg-type]
    elif every_text is not None:
        anchor_at = schedules.parse_instant(anchor, "anchor") if anchor else None
        schedule = schedules.every(every_text, anchor=anchor_at)
    elif at_text is not None:
        schedule = schedules.at(at_text)
    else:
        schedule = schedules.now()

    def duration(text: str | None, field: str) -> Any:
        return schedules.parse_duration(text, field=field) if text else None

    policies = build_policies(
        retries=retries,
        timeout=duration(timeout_text, "timeout"),
        visibility_timeout=duration(vt_text, "visibility_timeout"),
        misfire=misfire,
        priority=priority,
        max_concurrency=max_concurrency,
        overlap=overlap,
        max_buffer=max_buffer,
        cancel_grace=duration(cancel_grace_text, "cancel_grace"),
        start_deadline=duration(start_deadline_text, "start_deadline"),
        jitter=duration(jitter_text, "jitter"),
    )
    bounds: dict[str, Any] = {
        "start_at": schedules.parse_instant(start_at_text, "start_at") if start_at_text else None,
        "end_at": schedules.parse_instant(end_at_text, "end_at") if end_at_text else None,
        "max_runs": max_runs,
    }
    spec = JobSpec(
        name=name,
        task=task,
        schedule=schedule,
        args=tuple(_json_arg(args_json, "args", list)),
        kwargs=_json_arg(kwargs_json, "kwargs", dict),
        namespace=namespace,
        policies=policies,
        paused=paused,
        **bounds,
    )
    first = spec_first_fire_at(spec, SystemClock().now(), allow_past=allow_past)
    if url is not None:
        remote = {
            "max_attempts": None if retries is None else retries + 1,
            "timeout": timeout_text,
            "visibility_timeout": vt_text,
            "misfire": misfire,
            "priority": priority,
            "max_concurrency": max_concurrency,
            "overlap": overlap,
            "max_buffer": max_buffer,
            "cancel_grace": cancel_grace_text,
            "start_deadline": start_deadline_text,
            "jitter": jitter_text,
        }
        with client(url, namespace) as api:
            kw: dict[str, Any] = {
                "args": spec.args,
                "kwargs": spec.kwargs,
                "policies": {k: v for k, v in remote.items() if v is not None},
                "allow_past": allow_past,
                "bounds": {k: v for k, v in bounds.items() if v is not None},
            }
            if replace:
                job, changed = api.put_job(name, task, schedule, paused=paused or None, **kw)
                verb = "updated" if changed else "unchanged"
            else:
                job, verb = api.create_job(name, task, schedule, paused=paused, **kw), "created"
    else:
        job, verb = _add_local(store_url, spec, first, replace)
    nxt = job.next_fire_at.isoformat() if job.next_fire_at else "never"
    click.echo(f"{verb} job {job.name!r} (id {job.id}): {schedule.describe()}; next firing {nxt}")


def _add_local(store_url: str, spec: Any, first: Any, replace: bool) -> tuple[Any, str]:
    store = open_cli_store(store_url)
    try:
        if replace:
            job, changed = store.upsert_job(spec, first_fire_at=first)
            verb = "updated" if changed else "unchanged"
        else:
            job, verb = store.create_job(spec, first_fire_at=first), "created"
    finally:
        store.close()
    return job, verb


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
        finally:
            store.close()
        if not added.inserted:
            raise ValidationError("the job already has a firing at this instant", field="name")
        firing = added.inserted[0]
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
    from cronwheel.domain.schedules import parse_instant

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
            instants = instants_between(job.spec.schedule.next_after, start, end)
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
