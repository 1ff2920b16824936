"""The cron schedule: a cron expression in an IANA zone under a DST policy, on the days
of an optional calendar (re-exported by :mod:`cronwheel.domain.schedules`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

from cronwheel.domain.calendars import (
    Calendar,
    CalendarRules,
    StoredCalendar,
    calendar_named,
    check_stored_name,
    is_stored_name,
)
from cronwheel.domain.cron import CronExpr, parse_cron
from cronwheel.domain.instants import format_instant
from cronwheel.domain.transitions import StepBudget
from cronwheel.domain.tz import (
    DST_GAP_POLICIES,
    DST_OVERLAP_POLICIES,
    HORIZON_YEARS,
    DstGap,
    DstOverlap,
    Resolved,
    load_zone,
    next_instant,
)
from cronwheel.errors import InvalidScheduleError, NoFiringInHorizonError

__all__ = ["CronSchedule", "forget_searches", "instant_arg"]

_TINY = timedelta(microseconds=1)
# each expression's (zone, policies) latest search: (after, its answer) (_next_any_day)
_LAST_NEXT: dict[tuple[str, ZoneInfo, str, str], tuple[datetime, Resolved | None]] = {}
_LAST_NEXT_MAX = 4096


def forget_searches() -> None:
    """Forget every schedule's latest search (a benchmark timing the search itself)."""
    _LAST_NEXT.clear()


def instant_arg(t: datetime) -> datetime:
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError("next_after needs an aware datetime")
    return t.astimezone(UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class CronSchedule:
    """A cron expression evaluated in an IANA zone under a DST policy.

    ``dst_gap``/``dst_overlap`` left as ``None`` take Debian cron's default: a
    minute *or* hour field starting with ``*`` (``* 2``, ``*/10 2``, ``0 */2``)
    follows real time (``skip``/``twice``); any other (``30 2``, ``5 1-3``)
    follows wall time (``next_valid``/``once``). See :mod:`cronwheel.domain.tz`.

    ``calendar`` names the days it may fire on (:mod:`cronwheel.domain.calendars`): an
    occurrence whose local date in ``tz`` (after DST resolution) the calendar excludes
    does not fire, and the search jumps to the next allowed day rather than stepping
    through the excluded day's occurrences. A built-in name (``DE-BY``) resolves here;
    a stored one (``office``) carries its rules in ``calendar_def``, which the store
    fills in (:func:`cronwheel.domain.jobs.bind_calendar`): without them the schedule
    cannot compute its instants.
    """

    kind: ClassVar[str] = "cron"
    expr: str
    tz: str = "UTC"
    dst_gap: DstGap | None = None
    dst_overlap: DstOverlap | None = None
    calendar: str | None = None
    calendar_def: CalendarRules | None = None
    _expr: CronExpr = field(init=False, repr=False, compare=False)
    _calendar: Calendar | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parsed = parse_cron(self.expr)
        load_zone(self.tz)  # a known name (the zone is looked up again when used)
        resolved = self._resolve_calendar()
        if self.dst_gap is not None and self.dst_gap not in DST_GAP_POLICIES:
            raise InvalidScheduleError(
                f"unknown policy {self.dst_gap!r} (choose next_valid, skip or shift)",
                field="dst_gap",
            )
        if self.dst_overlap is not None and self.dst_overlap not in DST_OVERLAP_POLICIES:
            raise InvalidScheduleError(
                f"unknown policy {self.dst_overlap!r} (choose once or twice)", field="dst_overlap"
            )
        object.__setattr__(self, "expr", parsed.source)
        object.__setattr__(self, "_expr", parsed)
        object.__setattr__(self, "_calendar", resolved)
        if isinstance(resolved, Calendar):
            object.__setattr__(self, "calendar", resolved.name)

    def _resolve_calendar(self) -> Calendar | None:
        if self.calendar is None:
            if self.calendar_def is not None:
                raise InvalidScheduleError("rules without a calendar name", field="calendar_def")
            return None
        if not isinstance(self.calendar, str) or not is_stored_name(self.calendar):
            if self.calendar_def is not None:
                raise InvalidScheduleError(
                    "a built-in calendar has no rules of its own", field="calendar_def"
                )
            return calendar_named(self.calendar)
        check_stored_name(self.calendar, field_name="calendar")
        if self.calendar_def is None:
            return None
        if not isinstance(self.calendar_def, CalendarRules):
            raise InvalidScheduleError("expected calendar rules", field="calendar_def")
        return StoredCalendar(self.calendar, self.calendar_def)

    def with_calendar_rules(self, rules: CalendarRules) -> CronSchedule:
        """This schedule with its stored calendar's current rules."""
        return CronSchedule(
            expr=self.expr,
            tz=self.tz,
            dst_gap=self.dst_gap,
            dst_overlap=self.dst_overlap,
            calendar=self.calendar,
            calendar_def=rules,
        )

    @property
    def stored_calendar(self) -> str | None:
        """The name of the stored calendar this schedule names (``None``: none, or a
        built-in one)."""
        name = self.calendar
        return name if name is not None and is_stored_name(name) else None

    @property
    def expr_obj(self) -> CronExpr:
        return self._expr

    @property
    def calendar_obj(self) -> Calendar | None:
        """The resolved calendar (``None``: every day is allowed)."""
        return self._calendar

    def excluded_by_calendar(self, instant: datetime) -> str | None:
        """Why the calendar excludes the local date of ``instant`` in the schedule's zone
        (the holiday's name and the calendar's), or ``None`` when it may fire then."""
        if self._calendar is None:
            return None
        return self._calendar.reason(instant.astimezone(self.zone).date())

    @property
    def zone(self) -> ZoneInfo:
        """The zone, from this process's tz database (see :func:`load_zone`): a schedule
        kept across a change of database computes with the new one."""
        return load_zone(self.tz)

    @property
    def gap(self) -> DstGap:
        """The effective gap policy (explicit, else Debian's default for the expression)."""
        if self.dst_gap is not None:
            return self.dst_gap
        return "skip" if self._expr.follows_real_time else "next_valid"

    @property
    def overlap(self) -> DstOverlap:
        """The effective overlap policy (explicit, else Debian's default for the expression)."""
        if self.dst_overlap is not None:
            return self.dst_overlap
        return "twice" if self._expr.follows_real_time else "once"

    def next_after(self, t: datetime) -> datetime | None:
        resolved = self.next_after_with_note(t)
        return None if resolved is None else resolved.utc

    def next_after_with_note(
        self, t: datetime, *, budget: StepBudget | None = None
    ) -> Resolved | None:
        """The first firing strictly after ``t`` with its DST note (``None``: exhausted).

        See :func:`cronwheel.domain.tz.next_instant` for how overlaps and gaps are
        searched, its horizon and its budget (``budget``, default a fresh
        :class:`StepBudget`); instants are unique and strictly increasing under
        iteration. With a calendar, occurrences on the days it excludes are passed
        over: the search resumes at the local midnight of the next allowed day, so an
        excluded day costs one search whatever the expression's density; a first
        firing more than HORIZON_YEARS away raises NoFiringInHorizonError.
        """
        t = instant_arg(t)
        budget = StepBudget() if budget is None else budget
        calendar = self._calendar
        if calendar is None:
            if self.calendar is not None:  # a stored calendar whose rules are not here
                raise InvalidScheduleError(
                    f"calendar {self.calendar!r} is stored in the job's namespace: this "
                    "schedule was not loaded with its rules",
                    field="schedule.calendar",
                )
            return self._next_any_day(t, budget)
        cursor = t
        while True:
            found = self._next_any_day(cursor, budget)
            if found is None:
                return None
            try:
                day = found.utc.astimezone(self.zone).date()
            except OverflowError:  # the last hours of year 9999: no local date
                return None
            if calendar.reason(day) is None:
                return found
            if self._never_after(day):
                raise self._no_allowed_day(t, calendar.name)
            if found.utc.year - t.year > HORIZON_YEARS:
                raise self._no_allowed_day(t, calendar.name)
            allowed = calendar.next_allowed(day, budget)
            if allowed is None:
                return None
            try:
                midnight = datetime.combine(allowed, time(0), tzinfo=self.zone).astimezone(UTC)
            except OverflowError:
                return None
            cursor = max(found.utc, midnight - _TINY)

    def _no_allowed_day(self, t: datetime, name: str) -> NoFiringInHorizonError:
        return NoFiringInHorizonError(
            f"does not fire within {HORIZON_YEARS} years after {format_instant(t)} in "
            f"{self.tz}: calendar {name} excludes every day it matches",
            field="schedule.calendar",
        )

    def _never_after(self, day: date) -> bool:
        """Whether the stored calendar's weekdays exclude every day after ``day`` that
        the expression can match (one whose day-of-week field alone restricts its days):
        a search that would otherwise skip week after week to its horizon."""
        rules, expr = self.calendar_def, self._expr
        if rules is None or not expr.dom_star or expr.dow_star:
            return False
        cron_days = {*expr.dow_values, *expr.dow_last, *(n for n, _ in expr.dow_nth)}
        return rules.never_allows(frozenset((d - 1) % 7 for d in cron_days), day)

    def _next_any_day(self, t: datetime, budget: StepBudget) -> Resolved | None:
        """The first instant after ``t`` (any day), remembered per expression, zone and
        policies (``_LAST_NEXT``): the answer found after ``since`` is the answer after
        every ``t`` from ``since`` up to it, as no instant lies between. The API's
        creations of one schedule and the dispatcher's jobs sharing an expression (all
        due at one instant, then all asking for the next) compute it once."""
        zone = self.zone  # the tz database's current zone: a new database, a new key
        key = (self.expr, zone, self.gap, self.overlap)
        last = _LAST_NEXT.get(key)
        if last is not None:
            since, found = last
            if since <= t and (found is None or t < found.utc):
                return found
        found = next_instant(self._expr.next_wall, zone, self.gap, self.overlap, t, budget=budget)
        if len(_LAST_NEXT) >= _LAST_NEXT_MAX:
            _LAST_NEXT.clear()
        _LAST_NEXT[key] = (t, found)
        return found

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "kind": "cron",
            "cron": self.expr,
            "tz": self.tz,
            "dst_gap": self.dst_gap,
            "dst_overlap": self.dst_overlap,
        }
        if self.calendar is not None:  # absent otherwise: older jobs keep their spec hash
            doc["calendar"] = self.calendar
        if self.calendar_def is not None:
            doc["calendar_def"] = self.calendar_def.to_dict()
        return doc

    def describe(self) -> str:
        text = f"cron '{self.expr}' in {self.tz} (dst: {self.gap}/{self.overlap})"
        return text if self.calendar is None else f"{text}, calendar {self.calendar}"
