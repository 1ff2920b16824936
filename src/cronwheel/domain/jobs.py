"""Registering a job: its first instant and its policies from friendly arguments.

Shared by ``App`` (Python), the HTTP API and the CLI, so the three agree on when a
new job first fires and on what ``retries=3`` or ``timeout=30`` mean.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from cronwheel.domain.calendars import CalendarRules
from cronwheel.domain.models import DURATION_POLICIES, Job, JobPolicies, JobSpec
from cronwheel.domain.overlap import OverlapPolicy
from cronwheel.domain.policies import MisfirePolicy
from cronwheel.domain.policy_table import POLICIES_BY_NAME, parse_seconds_or_duration
from cronwheel.domain.schedules import AtSchedule, CronSchedule, NowSchedule, Schedule
from cronwheel.errors import CronwheelError, ValidationError


def first_fire_at(
    schedule: Schedule,
    now: datetime,
    *,
    allow_past: bool = False,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
) -> datetime | None:
    """The first instant a newly registered schedule fires at.

    ``at`` in the past is rejected unless ``allow_past`` (then it fires once, at
    once, as a misfire catch-up); ``now`` fires now. ``start_at``/``end_at`` bound
    the schedule: nothing fires before ``start_at`` or after ``end_at``.
    """
    if isinstance(schedule, NowSchedule):
        first: datetime | None = now
    elif isinstance(schedule, AtSchedule):
        if schedule.at < now and not allow_past:
            raise ValidationError(
                f"{schedule.at.isoformat()} is in the past (pass allow_past to fire it anyway)",
                field="schedule.at",
            )
        first = schedule.at if start_at is None or schedule.at >= start_at else None
    else:
        after = now if start_at is None else max(now, start_at - timedelta(microseconds=1))
        first = schedule.next_after(after)
    if first is not None and end_at is not None and first > end_at:
        return None
    return first


def bind_schedule(
    schedule: Schedule, namespace: str, lookup: Callable[[str, str], CalendarRules | None]
) -> Schedule:
    """``schedule`` with the current rules of the stored calendar it names, looked up
    in ``namespace`` (``lookup(namespace, name)``: the store's ``calendar_rules``); as
    it is when it names none or a built-in one. A name the namespace does not have is
    a ValidationError naming ``schedule.calendar``."""
    if not isinstance(schedule, CronSchedule) or schedule.stored_calendar is None:
        return schedule
    rules = lookup(namespace, schedule.stored_calendar)
    if rules is None:
        raise ValidationError(
            f"no calendar named {schedule.stored_calendar!r} in namespace {namespace!r} "
            "(define it first: cronwheel calendars set, PUT /v1/calendars/NAME, "
            "app.calendar)",
            field="schedule.calendar",
        )
    return schedule.with_calendar_rules(rules)


def bind_calendar(spec: JobSpec, lookup: Callable[[str, str], CalendarRules | None]) -> JobSpec:
    """``spec`` with its schedule bound by :func:`bind_schedule` (before its first
    instant is computed and it is stored)."""
    schedule = bind_schedule(spec.schedule, spec.namespace, lookup)
    return spec if schedule is spec.schedule else dataclasses.replace(spec, schedule=schedule)


def rebind_job(
    job: Job, rules: CalendarRules, now: datetime
) -> tuple[JobSpec, datetime | None] | None:
    """A job naming a stored calendar whose rules became ``rules``: its new spec and
    cursor (``None``: its schedule is unchanged). The cursor is searched again from the
    earlier of the old one and ``now``: a day the change excludes is passed over, one
    it includes is found, an overdue instant stays overdue (the misfire policy decides);
    an exhausted job stays exhausted. Raises what the schedule raises (no firing within
    the horizon), naming the job."""
    schedule = job.spec.schedule
    if not isinstance(schedule, CronSchedule) or schedule.stored_calendar is None:
        return None
    bound = schedule.with_calendar_rules(rules)
    if bound == schedule:
        return None
    spec = dataclasses.replace(job.spec, schedule=bound)
    if job.next_fire_at is None:
        return spec, None
    start = min(job.next_fire_at, now) - timedelta(microseconds=1)
    try:
        first = first_fire_at(bound, start, start_at=spec.start_at, end_at=spec.end_at)
    except CronwheelError as exc:
        raise type(exc)(f"job {job.name!r}: {exc.message}", field=exc.field) from None
    return spec, first


def require_substitutable_name(name: str) -> None:
    """Refuse a new job's name that no task template could carry safely: a ``.`` or
    ``..`` step between slashes (``..``, ``a/../b``: a URL path step that moves the path)
    and a name beginning with ``-`` (an option of a command). Checked when a job is
    registered; the worker refuses such values again where they land (names stored
    before this rule)."""
    if any(step in {".", ".."} for step in re.split(r"[/\\]", name)):
        raise ValidationError(
            "must not have a '.' or '..' step between slashes: a task's URL would read it as"
            " a path step",
            field="name",
        )
    if name.startswith("-"):
        raise ValidationError(
            "must not begin with '-': a task's command would read it as an option", field="name"
        )


def spec_first_fire_at(
    spec: JobSpec, now: datetime, *, allow_past: bool = False
) -> datetime | None:
    """``first_fire_at`` of a job spec being registered, within its ``start_at``/``end_at``
    bounds; its name must be one templates can carry (:func:`require_substitutable_name`)."""
    require_substitutable_name(spec.name)
    return first_fire_at(
        spec.schedule, now, allow_past=allow_past, start_at=spec.start_at, end_at=spec.end_at
    )


def first_fire_window(
    spec: JobSpec, around: datetime, *, margin: timedelta, allow_past: bool = False
) -> tuple[datetime, datetime] | None:
    """``spec_first_fire_at`` for a store clock only guessed (``around``, within
    ``margin``): ``(first, valid_from)`` such that ``spec_first_fire_at(spec, t)`` is
    ``first`` for every ``t`` from ``valid_from`` (``around - margin``) up to ``first``
    (excluded), or None when no such instant is known (the caller then reads the clock):
    an error, no instant, or not the same instant across the range.

    The first instant is the schedule's next after the clock (bounded by ``start_at``/
    ``end_at``): the one after ``around - margin``, when it is later than ``around``,
    is also the one after every clock up to itself."""
    since = around - margin
    try:
        first = spec_first_fire_at(spec, since, allow_past=allow_past)
    except ValidationError:
        return None
    if first is None or first <= around:
        return None  # exhausted, a `now` schedule, an `at` passed, an instant in the range
    return first, since


def build_policies(
    *,
    retries: int | None = None,
    max_attempts: int | None = None,
    **overrides: Any,
) -> JobPolicies:
    """JobPolicies from friendly keyword arguments (``retries=3`` = 4 attempts); the
    keywords are the rows of domain/policy_table.py."""
    for key in overrides:
        if key not in POLICIES_BY_NAME:
            known = ", ".join(POLICIES_BY_NAME)
            raise ValidationError(f"is not a job policy (the policies: {known})", field=key)
    if retries is not None and max_attempts is not None:
        raise ValidationError("give retries or max_attempts, not both", field="retries")
    values = {k: v for k, v in overrides.items() if v is not None}
    if retries is not None:
        if not isinstance(retries, int) or retries < 0:
            raise ValidationError("must be a non-negative integer", field="retries")
        values["max_attempts"] = retries + 1
    elif max_attempts is not None:
        values["max_attempts"] = max_attempts
    for key, value in list(values.items()):
        if key in DURATION_POLICIES and isinstance(value, int | float):
            values[key] = timedelta(seconds=value)
        elif key in DURATION_POLICIES and isinstance(value, str):  # "30s", "1h30m"
            values[key] = parse_seconds_or_duration(value, key)
    if "overlap" in values:
        try:
            values["overlap"] = OverlapPolicy(values["overlap"])
        except ValueError:
            names = ", ".join(p.value for p in OverlapPolicy)
            raise ValidationError(f"must be one of {names}", field="overlap") from None
    if "misfire" in values:
        try:
            values["misfire"] = MisfirePolicy(values["misfire"])
        except ValueError:
            raise ValidationError(
                "must be one of fire_once, fire_all, skip", field="misfire"
            ) from None
    try:
        return JobPolicies(**values)
    except TypeError as exc:
        raise ValidationError(str(exc), field="policies") from None


KNOWN_TASKS_SHOWN = 20


def require_served_task(task: str, served: Sequence[str]) -> None:
    """Refuse a job whose task no worker has ever served: a ValidationError naming
    ``task`` that lists the known tasks. ``served`` is the store's served tasks; while
    it is empty (no worker ever registered with the store) every task is accepted, so
    jobs can be declared before the first worker starts."""
    if not served or task in served:
        return
    shown = ", ".join(served[:KNOWN_TASKS_SHOWN])
    if len(served) > KNOWN_TASKS_SHOWN:
        shown += f" and {len(served) - KNOWN_TASKS_SHOWN} more"
    raise ValidationError(
        f"no worker has ever served task {task!r}; known tasks: {shown} "
        "(allow_unknown_task to add it anyway)",
        field="task",
    )
