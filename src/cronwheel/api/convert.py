"""Between API bodies and domain values: schedules, policies, jobs, firings, cursors."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import json
import math
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import Request
from pydantic import BeforeValidator

from cronwheel.api.calls import store_call
from cronwheel.api.errors import HttpError
from cronwheel.api.schemas import PoliciesIn, ScheduleIn
from cronwheel.domain.firing import format_instant
from cronwheel.domain.ids import IdCodec, Kind
from cronwheel.domain.models import DURATION_POLICIES, Job, JobPolicies
from cronwheel.domain.numbers import parse_number
from cronwheel.domain.schedules import (
    SCHEDULE_KEYS,
    Schedule,
    every,
    format_duration,
    parse_duration,
    parse_instant,
    schedule_from_dict,
    upcoming_instants,
)
from cronwheel.domain.tz import load_zone
from cronwheel.errors import CronwheelError, ValidationError
from cronwheel.web.auth import store_of
from cronwheel.web.ids import ids_for, known_ids
from cronwheel.wire import job_to_json


def to_schedule(body: ScheduleIn) -> Schedule:
    """A domain schedule; errors name ``schedule.<key>``."""
    doc = body.model_dump(exclude_none=True)
    for key in sorted(doc.keys() - SCHEDULE_KEYS[body.kind]):
        raise ValidationError(f"not a key of a {body.kind} schedule", field=f"schedule.{key}")
    interval = doc.get("interval")
    if isinstance(interval, int | float):
        try:
            doc["interval"] = format_duration(every(interval).interval)
        except CronwheelError as exc:
            exc.field = "schedule.interval"
            raise
    return schedule_from_dict(doc)


def _duration(value: float | str, field: str) -> timedelta:
    if isinstance(value, str):
        return parse_duration(value, field=field)
    if not math.isfinite(value) or value < 0 or value > 100 * 365.25 * 86400:
        raise ValidationError("must be a number of seconds from 0 to 100 years", field=field)
    return timedelta(seconds=value)


_DEFAULT_POLICIES = JobPolicies()  # frozen: one shared value


def to_policies(body: PoliciesIn | None, base: JobPolicies | None = None) -> JobPolicies:
    """Policies from a body; keys not given keep ``base``'s values (or the defaults);
    an explicit null resets a key to its default."""
    base = base or _DEFAULT_POLICIES
    defaults = _DEFAULT_POLICIES
    changes: dict[str, Any] = {}
    given = {} if body is None else body.model_dump(exclude_unset=True)
    if not given:
        return base  # (a batch of 1,000 jobs without policies made 2,000 copies here)
    if "retries" in given:  # the friendly spelling of max_attempts (domain/policy_table.py)
        retries = given.pop("retries")
        if retries is not None and given.get("max_attempts") is not None:
            raise ValidationError(
                "give retries or max_attempts, not both", field="policies.retries"
            )
        given["max_attempts"] = None if retries is None else retries + 1
    for name, value in given.items():
        if value is None:
            changes[name] = getattr(defaults, name)
        elif name in DURATION_POLICIES:
            changes[name] = _duration(value, f"policies.{name}")
        else:
            changes[name] = value
    try:
        return dataclasses.replace(base, **changes)
    except CronwheelError as exc:
        if exc.field and not exc.field.startswith("policies"):
            exc.field = f"policies.{exc.field}"
        raise
    except TypeError as exc:  # a key this version's JobPolicies does not have
        raise ValidationError(str(exc), field="policies") from None


def instant(text: str, field: str) -> datetime:
    return parse_instant(text, field)


def query_instant(text: str | None, field: str) -> datetime | None:
    """An instant from a query parameter: malformed is a 400, like other query errors."""
    if text is None:
        return None
    try:
        return parse_instant(text, field)
    except ValidationError as exc:
        raise HttpError(400, "invalid_input", exc.message, field=field) from None


def _ascii_int(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):  # a parameter's default
        return value
    try:
        return parse_number(value, "value")
    except ValidationError as exc:
        raise ValueError(exc.message) from None  # pydantic names the parameter


# Every integer of a path, query or header: ASCII digits only, at most 19 of them
# (domain.numbers.parse_number), before the framework's int parsing (which takes
# '١٢', '+1', ' 1' and '1_000'); a refusal is a 400 naming the parameter.
AsciiInt = Annotated[int, BeforeValidator(_ascii_int)]


def next_fire_times(job: Job, count: int) -> list[dict[str, str]]:
    """The next ``count`` instants from the job's cursor, in UTC and the job's zone."""
    schedule: Any = job.spec.schedule  # a frozen dataclass: hashable, unless it holds a list
    cursor = job.next_fire_at
    try:
        found = _upcoming_cached(schedule, cursor, count)
    except TypeError:  # a schedule that cannot be a cache key
        found = _upcoming(schedule, cursor, count)
    return [{"utc": utc, "local": local} for utc, local in found]


def _upcoming(schedule: Schedule, cursor: datetime | None, count: int) -> tuple[Any, ...]:
    zone = load_zone(str(schedule.to_dict().get("tz") or "UTC"))
    return tuple(
        (format_instant(t), t.astimezone(zone).isoformat())
        for t in upcoming_instants(schedule, cursor, count)
    )


# The same instants for the same schedule and cursor (a pure function of them): the
# jobs created or upserted with one schedule within one period share them. Profiled,
# listing them was a fifth of a job create's CPU.
_upcoming_cached = functools.lru_cache(maxsize=1024)(_upcoming)


def ids_of(request: Request) -> IdCodec:
    """The codec of the ids users see (``domain/ids.py``), for this app's store."""
    return ids_for(store_of(request))


async def ids_ready(request: Request) -> IdCodec:
    """``ids_of(request)`` for a coroutine endpoint: by a store call the first time
    only (the key is read once), then with none."""
    codec = known_ids(store_of(request))
    return codec if codec is not None else await store_call(ids_of, request)


def job_out(
    ids: IdCodec, job: Job, *, upcoming: int = 0, changed: bool | None = None
) -> dict[str, Any]:
    """The job's wire shape (its shown id), plus its next instants (``upcoming``) and
    ``changed``."""
    doc = job_to_json(job)
    doc["id"] = ids.encode("job", job.id)  # ids.job(job)'s, without copying the job
    if upcoming:
        doc["next_fire_times"] = next_fire_times(job, upcoming)
    if changed is not None:
        doc["changed"] = changed
    return doc


# -- cursors ------------------------------------------------------------------------
# Opaque to clients: base64url of {"ns", "k", "p"}, the position a shown id (never
# the store's). The namespace and listing kind inside must match the request's, so
# a cursor never crosses namespaces; every query is filtered by the token's
# namespace anyway, so editing the position only moves within what the token may
# see. Every failure answers the same 400.


def _bad_cursor() -> HttpError:
    return HttpError(400, "invalid_cursor", "the cursor is not valid here", field="cursor")


def _kind_of(listing: str) -> Kind:
    return "job" if listing == "jobs" else "firing"


def encode_cursor(ids: IdCodec, namespace: str, kind: str, position: int) -> str:
    """The cursor after the store's id ``position``."""
    shown = ids.encode(_kind_of(kind), position)
    raw = json.dumps({"ns": namespace, "k": kind, "p": shown}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(ids: IdCodec, text: str, namespace: str, kind: str) -> int:
    """The store's id a cursor holds (400 ``invalid_cursor`` when it is no cursor here)."""
    if len(text) > 512:
        raise _bad_cursor()
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, binascii.Error, UnicodeDecodeError, RecursionError):
        raise _bad_cursor() from None
    if not isinstance(doc, dict) or doc.get("ns") != namespace or doc.get("k") != kind:
        raise _bad_cursor()
    position = doc.get("p")
    internal = ids.decode(_kind_of(kind), position) if type(position) is int else None
    if internal is None:
        raise _bad_cursor()
    return internal
