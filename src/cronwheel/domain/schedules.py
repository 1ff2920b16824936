"""Schedule values: ``now``, ``at``, ``every`` and ``cron``.

Each is a frozen value validated at construction (a bad expression raises at
import time of the user's module, not at 3 a.m.). ``next_after(t)`` is pure and
stateless: the first firing instant strictly after the aware instant ``t``, or
``None`` once the schedule is exhausted. All instants are aware UTC.

``to_dict()`` gives a JSON-safe mapping that :func:`schedule_from_dict` turns
back into an equal value::

    {"kind": "now"}
    {"kind": "at", "at": "2026-05-01T09:00:00Z"}
    {"kind": "every", "interval": "1h30m", "anchor": "1970-01-01T00:00:00Z"}
    {"kind": "cron", "cron": "0 9 * * mon-fri", "tz": "Europe/Berlin",
     "dst_gap": null, "dst_overlap": null}          # null: the default policy
    {"kind": "cron", ..., "calendar": "DE-BY"}       # only when it names a calendar

Past-instant checks (an ``at`` in the past) need a clock and belong to the registrar.
Durations and instants as text are parsed and printed by
:mod:`cronwheel.domain.instants` (re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Protocol, cast

from cronwheel.domain.calendars import CalendarRules
from cronwheel.domain.cron_schedule import CronSchedule, instant_arg
from cronwheel.domain.instants import (
    MAX_INTERVAL,
    format_duration,
    format_instant,
    parse_duration,
    parse_instant,
)
from cronwheel.domain.transitions import StepBudget
from cronwheel.domain.tz import (
    DstGap,
    DstOverlap,
    Resolved,
)
from cronwheel.errors import (
    CronwheelError,
    InvalidScheduleError,
    ScheduleBudgetError,
    ValidationError,
)

__all__ = [
    "LISTING_STEPS",
    "SCHEDULE_KEYS",
    "AtSchedule",
    "CronSchedule",
    "EverySchedule",
    "NowSchedule",
    "Schedule",
    "at",
    "cron",
    "every",
    "format_duration",
    "format_instant",
    "next_after_within",
    "next_firings",
    "now",
    "parse_duration",
    "parse_instant",
    "schedule_from_dict",
    "upcoming_instants",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TINY = timedelta(microseconds=1)
MIN_INTERVAL = timedelta(milliseconds=1)


class Schedule(Protocol):
    """What every schedule value offers."""

    @property
    def kind(self) -> str:
        """``"now"``, ``"at"``, ``"every"`` or ``"cron"``."""
        ...

    def next_after(self, t: datetime) -> datetime | None:
        """The first firing instant strictly after the aware ``t``; ``None`` when exhausted."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe mapping that :func:`schedule_from_dict` turns back into an equal value."""
        ...

    def describe(self) -> str:
        """A short human description."""
        ...


def _aware_utc(value: object, field_name: str) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidScheduleError(
            f"expected an aware datetime, got {type(value).__name__}", field=field_name
        )
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidScheduleError(
            "naive datetime: give a time zone (e.g. tzinfo=UTC)", field=field_name
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidScheduleError("instant out of range", field=field_name) from None


# --- the schedules -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class NowSchedule:
    """Fire once, immediately; the registrar sets that first instant itself."""

    kind: ClassVar[str] = "now"

    def next_after(self, t: datetime) -> datetime | None:
        instant_arg(t)
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "now"}

    def describe(self) -> str:
        return "now"


@dataclass(frozen=True, slots=True, kw_only=True)
class AtSchedule:
    """Fire once at ``at`` (an aware datetime, stored as UTC)."""

    kind: ClassVar[str] = "at"
    at: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "at", _aware_utc(self.at, "at"))

    def next_after(self, t: datetime) -> datetime | None:
        return self.at if self.at > instant_arg(t) else None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "at", "at": format_instant(self.at)}

    def describe(self) -> str:
        return f"at {format_instant(self.at)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class EverySchedule:
    """Fire at ``anchor + k * interval`` for every integer k (1 ms <= interval <= 100 years).

    Anchoring (rather than "interval after the last run") keeps the rhythm fixed
    across restarts and slow runs.
    """

    kind: ClassVar[str] = "every"
    interval: timedelta
    anchor: datetime = EPOCH

    def __post_init__(self) -> None:
        if not isinstance(self.interval, timedelta):
            raise InvalidScheduleError("expected a timedelta", field="interval")
        if not MIN_INTERVAL <= self.interval <= MAX_INTERVAL:
            raise InvalidScheduleError(
                f"interval {self.interval} must be between 1 ms and 100 years", field="interval"
            )
        object.__setattr__(self, "anchor", _aware_utc(self.anchor, "anchor"))

    def next_after(self, t: datetime) -> datetime | None:
        t = instant_arg(t)
        k = (t - self.anchor) // self.interval + 1
        try:
            return self.anchor + k * self.interval
        except OverflowError:
            return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "every",
            "interval": format_duration(self.interval),
            "anchor": format_instant(self.anchor),
        }

    def describe(self) -> str:
        text = f"every {format_duration(self.interval)}"
        return text if self.anchor == EPOCH else f"{text} from {format_instant(self.anchor)}"


# The work budget of a whole listing of instants (a preview, a job's upcoming ones):
# one budget for the listing, not one per instant, so its work is bounded whatever
# the count asked for. Listing 1000 instants of an every-second schedule in a zone
# with DST spends 4,000 steps, of a daily one 6,000, of a yearly one 20,000 (two
# offset changes a year); the sparsest expressions (29 February on a given weekday)
# reach year 9999 first: so long a listing of them is refused, "ask for fewer".
LISTING_STEPS = 25_000


def next_firings(
    schedule: CronSchedule, after: datetime, count: int, *, budget: StepBudget | None = None
) -> list[Resolved]:
    """Up to ``count`` successive firings strictly after ``after``, with DST notes.

    The preview of ``cronwheel next`` and ``POST /v1/schedules/preview``, which
    show each firing's local time too: fewer than ``count`` once the schedule is
    exhausted or its next local time is past year 9999 (east of UTC, 1 January
    10000 is still an instant of 9999: the schedule fires then, the preview stops).
    Raises :class:`~cronwheel.errors.NoFiringInHorizonError` like ``next_after``, and
    :class:`~cronwheel.errors.ScheduleBudgetError` past ``budget``, shared by the whole
    listing (default: a fresh one of LISTING_STEPS steps).
    """
    budget = StepBudget(LISTING_STEPS) if budget is None else budget
    rows: list[Resolved] = []
    cursor = after
    for _ in range(count):
        try:
            resolved = schedule.next_after_with_note(cursor, budget=budget)
        except ScheduleBudgetError as exc:
            raise ScheduleBudgetError(
                f"{exc.message} after {len(rows)} of the {count} instants asked for "
                f"(the last {format_instant(cursor)}): ask for fewer",
                field=exc.field,
            ) from None
        if resolved is None:
            break
        try:
            resolved.utc.astimezone(schedule.zone)
        except OverflowError:
            break
        rows.append(resolved)
        cursor = resolved.utc
    return rows


def upcoming_instants(
    schedule: Schedule, cursor: datetime | None, count: int, *, end_at: datetime | None = None
) -> list[datetime]:
    """A stored job's next ``count`` instants from its cursor (shown by the API, the
    dashboard and the CLI), under one budget of LISTING_STEPS steps: the listing stops
    early, never raises, where the next instant cannot be computed within it (or is
    past the horizon, or past ``end_at``)."""
    next_after = next_after_within(schedule, StepBudget(LISTING_STEPS))
    out: list[datetime] = []
    t = cursor
    while t is not None and len(out) < count and (end_at is None or t <= end_at):
        out.append(t)
        if len(out) == count:  # no search for an instant not shown
            break
        try:
            t = next_after(t)
        except (InvalidScheduleError, OverflowError):
            break
    return out


def next_after_within(schedule: Schedule, budget: StepBudget) -> Callable[[datetime], Any]:
    """``schedule.next_after`` with every call spending the one shared ``budget``: a
    listing of many instants (a backfill, the upcoming ones) is bounded as a whole."""
    if isinstance(schedule, CronSchedule):
        cron_schedule = schedule

        def cron_next(t: datetime) -> datetime | None:
            found = cron_schedule.next_after_with_note(t, budget=budget)
            return None if found is None else found.utc

        return cron_next

    def other_next(t: datetime) -> datetime | None:
        budget.spend()
        return schedule.next_after(t)

    return other_next


# --- constructors ------------------------------------------------------------------


def cron(
    expr: str,
    tz: str = "UTC",
    *,
    dst_gap: DstGap | None = None,
    dst_overlap: DstOverlap | None = None,
    calendar: str | None = None,
) -> CronSchedule:
    """A cron schedule; the zone defaults to UTC, never to the host's zone. ``calendar``
    (``"DE-BY"``, ``"US"``, ``"NYSE"``) excludes its holidays (local dates in ``tz``)."""
    return CronSchedule(
        expr=expr, tz=tz, dst_gap=dst_gap, dst_overlap=dst_overlap, calendar=calendar
    )


def every(interval: timedelta | str | float, *, anchor: datetime | None = None) -> EverySchedule:
    """Fire every ``interval`` (timedelta, text like ``"1h30m"``, or seconds as a number).

    Instants are ``anchor + k * interval``; the anchor defaults to the Unix epoch
    so the rhythm survives restarts without drift.
    """
    if isinstance(interval, bool):
        raise InvalidScheduleError("expected a duration, got bool", field="interval")
    if isinstance(interval, str):
        try:
            delta = parse_duration(interval, field="interval")
        except ValidationError as exc:
            raise InvalidScheduleError(exc.message, field="interval") from None
    elif isinstance(interval, int | float):
        if not math.isfinite(interval) or interval <= 0:
            raise InvalidScheduleError(
                f"interval must be a positive number of seconds, got {interval!r}",
                field="interval",
            )
        try:
            delta = timedelta(seconds=interval)
        except OverflowError:
            raise InvalidScheduleError("interval exceeds 100 years", field="interval") from None
    else:
        delta = interval
    return EverySchedule(interval=delta, anchor=EPOCH if anchor is None else anchor)


def at(instant: datetime | str) -> AtSchedule:
    """Fire once at an aware datetime or an RFC 3339 string with an offset."""
    if isinstance(instant, str):
        try:
            instant = parse_instant(instant, "at")
        except ValidationError as exc:
            raise InvalidScheduleError(exc.message, field="at") from None
    return AtSchedule(at=instant)


def now() -> NowSchedule:
    """Fire once, as soon as the job is registered."""
    return NowSchedule()


# The keys of each kind's dict (the API's schedule bodies accept the same).
SCHEDULE_KEYS: dict[str, frozenset[str]] = {
    "now": frozenset({"kind"}),
    "at": frozenset({"kind", "at"}),
    "every": frozenset({"kind", "interval", "anchor"}),
    "cron": frozenset({"kind", "cron", "tz", "dst_gap", "dst_overlap", "calendar", "calendar_def"}),
}


def schedule_from_dict(d: Mapping[str, Any]) -> Schedule:
    """Rebuild a schedule from :meth:`Schedule.to_dict` output, validating like the constructors.

    Errors name the field as ``schedule.<key>`` (``schedule.cron``, ``schedule.tz``).
    """
    if not isinstance(d, Mapping):
        raise InvalidScheduleError("expected an object", field="schedule")
    kind = d.get("kind")
    if not isinstance(kind, str) or kind not in SCHEDULE_KEYS:
        raise InvalidScheduleError(
            f"unknown kind {kind!r} (expected now, at, every or cron)", field="schedule.kind"
        )
    for key in d:
        if key not in SCHEDULE_KEYS[kind]:
            raise InvalidScheduleError(
                f"unknown key for a {kind} schedule", field=f"schedule.{key}"
            )
    try:
        return _build(kind, d)
    except CronwheelError as exc:
        exc.field = f"schedule.{exc.field or kind}"
        raise


def _require_str(d: Mapping[str, Any], key: str, *, optional: bool = False) -> str | None:
    value = d.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidScheduleError(f"expected a string, got {type(value).__name__}", field=key)
    return value


def _build(kind: str, d: Mapping[str, Any]) -> Schedule:
    if kind == "now":
        return NowSchedule()
    if kind == "at":
        return at(cast(str, _require_str(d, "at")))
    if kind == "every":
        interval = cast(str, _require_str(d, "interval"))
        anchor_text = _require_str(d, "anchor", optional=True)
        anchor = None if anchor_text is None else parse_instant(anchor_text, "anchor")
        return every(interval, anchor=anchor)
    expr = cast(str, _require_str(d, "cron"))
    tz = _require_str(d, "tz", optional=True)
    gap = _require_str(d, "dst_gap", optional=True)
    overlap = _require_str(d, "dst_overlap", optional=True)
    calendar = _require_str(d, "calendar", optional=True)
    rules_doc = d.get("calendar_def")
    rules = (
        None if rules_doc is None else CalendarRules.from_dict(rules_doc, prefix="calendar_def.")
    )
    return CronSchedule(
        expr=expr,
        tz="UTC" if tz is None else tz,
        dst_gap=cast("DstGap | None", gap),
        dst_overlap=cast("DstOverlap | None", overlap),
        calendar=calendar,
        calendar_def=rules,
    )
