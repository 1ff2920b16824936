"""``cronwheel jobs add``: its policy flags are made from the domain's policy table
(``domain/policy_table.py``), as the API's ``policies`` fields and the dashboard's
form are, so the three cannot drift."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import click

from cronwheel.cli.common import open_cli_store, shown_ids, store_option
from cronwheel.cli.remote import client, url_option
from cronwheel.domain.policy_table import POLICY_TABLE, policies_from_text
from cronwheel.errors import JobNotFoundError, ValidationError


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


def policy_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """One ``--<policy>`` option per row of the policy table, taken as text and parsed by
    the table (a bad value is a one-line error naming the policy, exit code 2)."""
    metavars = {"int": "N", "number": "NUMBER", "duration": "DURATION"}
    for policy in reversed(POLICY_TABLE):
        if policy.kind == "choice":
            metavar, unit = "[" + "|".join(policy.choices) + "]", ""
        else:
            metavar, unit = metavars[policy.kind], f"{policy.unit}; "
        command = click.option(
            policy.flag,
            policy.name,
            metavar=metavar,
            help=f"{policy.help} [{unit}default {policy.shown_default}]",
        )(command)
    return command


@click.command("add")
@click.argument("name")
@click.option("--task", required=True, help="Registered task name the job runs.")
@click.option("--cron", "cron_expr", help="Cron expression (5 or 6 fields, or @daily ...).")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone of --cron.")
@click.option("--dst-gap", type=click.Choice(["next_valid", "skip", "shift"]))
@click.option("--dst-overlap", type=click.Choice(["once", "twice"]))
@click.option(
    "--calendar",
    help="Skip the holidays of a calendar on --cron (local dates in --tz): a country (US), "
    "a country and subdivision (DE-BY) or a market (NYSE).",
)
@click.option("--every", "every_text", help="Fixed interval, e.g. 30s, 5m, 1h30m.")
@click.option("--anchor", help="RFC 3339 instant the --every interval is aligned to.")
@click.option("--at", "at_text", help="One instant, RFC 3339 with offset.")
@click.option("--allow-past", is_flag=True, help="Accept an --at in the past (fires at once).")
@click.option("--now", "now_flag", is_flag=True, help="Fire once, immediately.")
@click.option("--args", "args_json", help="JSON array of positional arguments.")
@click.option("--kwargs", "kwargs_json", help="JSON object of keyword arguments.")
@policy_options
@click.option("--start-at", "start_at_text", help="No firing before this RFC 3339 instant.")
@click.option("--end-at", "end_at_text", help="No firing after this RFC 3339 instant.")
@click.option("--max-runs", type=click.IntRange(1, 10**9), help="End the job after N firings.")
@click.option("--paused", is_flag=True, help="Create the job paused.")
@click.option("--replace", is_flag=True, help="Update the job if the name exists.")
@click.option(
    "--allow-unknown-task",
    is_flag=True,
    help="Accept a task no worker has served yet (refused once any worker registered).",
)
@click.option("--namespace", default="default", show_default=True, help="Job namespace.")
@store_option
@url_option
def add_command(
    name: str,
    task: str,
    cron_expr: str | None,
    tz: str,
    dst_gap: str | None,
    dst_overlap: str | None,
    calendar: str | None,
    every_text: str | None,
    anchor: str | None,
    at_text: str | None,
    allow_past: bool,
    now_flag: bool,
    args_json: str | None,
    kwargs_json: str | None,
    start_at_text: str | None,
    end_at_text: str | None,
    max_runs: int | None,
    paused: bool,
    replace: bool,
    allow_unknown_task: bool,
    namespace: str,
    store_url: str,
    url: str | None,
    **policy_texts: str | None,
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
    if calendar is not None and cron_expr is None:
        raise ValidationError("a calendar applies to a --cron schedule only", field="calendar")
    if cron_expr is not None:
        schedule: Any = schedules.cron(
            cron_expr,
            tz,
            dst_gap=dst_gap,  # type: ignore[arg-type]  # click.Choice guarantees the literal
            dst_overlap=dst_overlap,  # type: ignore[arg-type]
            calendar=calendar,
        )
    elif every_text is not None:
        anchor_at = schedules.parse_instant(anchor, "anchor") if anchor else None
        schedule = schedules.every(every_text, anchor=anchor_at)
    elif at_text is not None:
        schedule = schedules.at(at_text)
    else:
        schedule = schedules.now()

    given = policies_from_text({k: v for k, v in policy_texts.items() if v is not None})
    policies = build_policies(**given)
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
    # checked before any I/O; a calendar of the namespace is known only to the store
    stored = getattr(schedule, "stored_calendar", None) is not None
    first = None if stored else spec_first_fire_at(spec, SystemClock().now(), allow_past=allow_past)
    if url is not None:
        remote = {k: v.total_seconds() if isinstance(v, timedelta) else v for k, v in given.items()}
        with client(url, namespace) as api:
            kw: dict[str, Any] = {
                "args": spec.args,
                "kwargs": spec.kwargs,
                "policies": remote,
                "allow_past": allow_past,
                "bounds": {k: v for k, v in bounds.items() if v is not None},
                "allow_unknown_task": allow_unknown_task,
            }
            if replace:
                job, changed = api.put_job(name, task, schedule, paused=paused or None, **kw)
                verb = "updated" if changed else "unchanged"
            else:
                job, verb = api.create_job(name, task, schedule, paused=paused, **kw), "created"
    else:
        job, verb = _add_local(store_url, spec, first, replace, allow_unknown_task, allow_past)
    nxt = job.next_fire_at.isoformat() if job.next_fire_at else "never"
    click.echo(f"{verb} job {job.name!r} (id {job.id}): {schedule.describe()}; next firing {nxt}")


def _add_local(
    store_url: str,
    spec: Any,
    first: Any,
    replace: bool,
    allow_unknown_task: bool,
    allow_past: bool,
) -> tuple[Any, str]:
    from cronwheel.domain.clock import SystemClock
    from cronwheel.domain.jobs import bind_calendar, require_served_task, spec_first_fire_at
    from cronwheel.store.calendar_port import calendar_rules_of

    store = open_cli_store(store_url)
    try:
        bound = bind_calendar(spec, calendar_rules_of(store))
        if bound is not spec:  # it names a calendar of the namespace
            spec = bound
            first = spec_first_fire_at(spec, SystemClock().now(), allow_past=allow_past)
        if not allow_unknown_task and _task_is_new(store, spec, replace):
            require_served_task(spec.task, [t.task for t in store.served_tasks()])
        if replace:
            job, changed = store.upsert_job(spec, first_fire_at=first)
            verb = "updated" if changed else "unchanged"
        else:
            job, verb = store.create_job(spec, first_fire_at=first), "created"
        job = shown_ids(store).job(job)  # the API's id
    finally:
        store.close()
    return job, verb


def _task_is_new(store: Any, spec: Any, replace: bool) -> bool:
    """A new job, or (with --replace) a job moved to another task: as the API does."""
    if not replace:
        return True
    try:
        return bool(store.get_job(spec.namespace, spec.name).spec.task != spec.task)
    except JobNotFoundError:
        return True
