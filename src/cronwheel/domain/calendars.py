"""Calendars: the days a cron schedule may fire on, from maintained holiday data.

A cron schedule may name a calendar (``cron("0 9 * * mon-fri", tz="Europe/Berlin",
calendar="DE-BY")``); an occurrence whose *local date* in the schedule's zone (after
DST resolution) is a holiday of that calendar does not fire. The data comes from the
`holidays <https://pypi.org/project/holidays/>`_ package, imported on first use so
that ``import cronwheel.domain.cron`` stays light. Names:

    ``DE``, ``US``, ``JP`` ...      a country's public holidays (ISO 3166-1 alpha-2,
                                     upper case)
    ``DE-BY``, ``US-NY``            a country and one of its subdivisions (the codes
                                     ``holidays`` knows; its aliases such as
                                     ``DE-Bayern`` are accepted and stored as ``DE-BY``)
    ``NYSE``, ``XETR``, ``ECB`` ...  a financial market's closing days

Holiday names are in the country's own language (``Heilige Drei Könige`` for DE-BY
on 6 January), whatever the process's locale. A calendar holds no holidays outside
the years the ``holidays`` data covers for its country (for Germany 1991-2100): on
those days every occurrence fires.

A year's holidays are computed once per process and cached (a few milliseconds the
first time).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from cronwheel.domain.transitions import StepBudget
from cronwheel.errors import InvalidScheduleError

__all__ = [
    "MAX_DATES",
    "Calendar",
    "CalendarRecord",
    "CalendarRules",
    "HolidayCalendar",
    "StoredCalendar",
    "calendar_named",
    "check_stored_name",
    "is_stored_name",
]

_STORED = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_WEEKDAYS = re.compile(r"^[A-Za-z0-9,/-]{1,64}$")
# A stored calendar lists at most this many dates in each of exclude and include (a
# run of excluded days is walked day by day within a schedule computation's budget).
MAX_DATES = 1000
_NAME = re.compile(r"^([A-Z]{2,4})(?:-([A-Za-z0-9][A-Za-z0-9 .'-]{0,39}))?$")
_ONE_DAY = timedelta(days=1)
_LOCK = threading.Lock()


class Calendar:
    """The days a schedule may fire on: ``reason(day)`` says why ``day`` is excluded
    (``None``: allowed)."""

    __slots__ = ()
    name: str

    def reason(self, day: date) -> str | None:
        raise NotImplementedError

    def next_allowed(self, day: date, budget: StepBudget) -> date | None:
        """The first day after ``day`` this calendar does not exclude (``None``: past
        9999-12-31); each day looked at spends ``budget``."""
        while True:
            budget.spend()
            if day == date.max:
                return None
            day += _ONE_DAY
            if self.reason(day) is None:
                return day


@dataclass(frozen=True, slots=True)
class HolidayCalendar(Calendar):
    """A built-in calendar: the public holidays of a country (and subdivision) or the
    closing days of a market, from the ``holidays`` data."""

    name: str  # canonical: "DE-BY", "US", "NYSE"
    market: bool  # a financial market rather than a country
    code: str
    subdiv: str | None
    language: str | None
    _years: dict[int, Mapping[date, str]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    def holiday(self, day: date) -> str | None:
        """The holiday's name if ``day`` is one, else ``None``."""
        return self._holidays(day.year).get(day)

    def reason(self, day: date) -> str | None:
        holiday = self._holidays(day.year).get(day)
        return None if holiday is None else f"{holiday} ({self.name})"

    def _holidays(self, year: int) -> Mapping[date, str]:
        found = self._years.get(year)
        if found is None:
            found = _year(self.market, self.code, self.subdiv, self.language, year)
            with _LOCK:
                self._years[year] = found
        return found


def _entity(market: bool, code: str, subdiv: str | None, **kwargs: Any) -> Any:
    import holidays

    if market:
        return holidays.financial_holidays(code, subdiv=subdiv, **kwargs)
    return holidays.country_holidays(code, subdiv=subdiv, **kwargs)


def _year(
    market: bool, code: str, subdiv: str | None, language: str | None, year: int
) -> Mapping[date, str]:
    try:
        days = _entity(market, code, subdiv, years=year, language=language)
    except (ValueError, OverflowError, NotImplementedError):  # a year the data cannot hold
        return {}
    return dict(days.items())


def calendar_named(name: object, *, field_name: str = "calendar") -> HolidayCalendar:
    """The calendar a name stands for; an unknown name raises
    :class:`~cronwheel.errors.InvalidScheduleError` naming ``field_name`` and the reason."""
    return _resolve(_check_name(name, field_name), field_name)


def _check_name(name: object, field: str) -> str:
    if not isinstance(name, str):
        raise InvalidScheduleError(
            f"expected a calendar name, got {type(name).__name__}", field=field
        )
    if _NAME.match(name) is None:
        raise InvalidScheduleError(
            f"{name[:80]!r} is not a calendar name: an upper-case country code (DE, US), a "
            "country and subdivision (DE-BY, US-NY) or a market (NYSE)",
            field=field,
        )
    return name


@functools.lru_cache(maxsize=512)
def _resolve(name: str, field: str) -> HolidayCalendar:
    import holidays

    match = _NAME.match(name)
    assert match is not None
    code, subdiv = match.group(1), match.group(2)
    market = len(code) > 2
    known = holidays.list_supported_financial() if market else holidays.list_supported_countries()
    if code not in known:
        kind = "market" if market else "country"
        raise InvalidScheduleError(
            f"unknown calendar {name!r}: the holidays data has no {kind} {code} "
            "(countries are ISO 3166-1 codes such as DE, US, JP; markets such as NYSE)",
            field=field,
        )
    entity = _entity(market, code, None)
    if subdiv is not None:
        subdiv = _subdivision(entity, code, subdiv, name, field)
    canonical = code if subdiv is None else f"{code}-{subdiv}"
    return HolidayCalendar(
        name=canonical,
        market=market,
        code=code,
        subdiv=subdiv,
        language=getattr(entity, "default_language", None),
    )


def _subdivision(entity: Any, code: str, subdiv: str, name: str, field: str) -> str:
    codes: tuple[str, ...] = tuple(getattr(entity, "subdivisions", ()))
    aliases: dict[str, str] = dict(getattr(entity, "subdivisions_aliases", {}) or {})
    folded = subdiv.casefold()
    for known in codes:
        if known.casefold() == folded:
            return known
    for alias, known in aliases.items():
        if alias.casefold() == folded:
            return known
    if not codes:
        raise InvalidScheduleError(
            f"unknown calendar {name!r}: {code} has no subdivisions in the holidays data",
            field=field,
        )
    shown = ", ".join(codes[:20]) + (" ..." if len(codes) > 20 else "")
    raise InvalidScheduleError(
        f"unknown calendar {name!r}: {code} has no subdivision {subdiv!r} (choose one of {shown})",
        field=field,
    )


# -- calendars stored by name in a namespace ------------------------------------------


def is_stored_name(name: str) -> bool:
    """Stored calendars have lower-case names (``office``); built-in ones are upper-case
    codes (``DE-BY``): the two never clash."""
    return name[:1].islower()


def check_stored_name(name: object, *, field_name: str = "name") -> str:
    if not isinstance(name, str) or _STORED.match(name) is None:
        shown = repr(name)[:80]
        raise InvalidScheduleError(
            f"{shown} is not a calendar name: a lower-case letter, then up to 63 lower-case "
            "letters, digits, '-' or '_' (upper-case codes such as DE-BY are the built-in "
            "calendars)",
            field=field_name,
        )
    return name


_RULE_KEYS = frozenset({"holidays", "exclude", "include", "weekdays"})


@dataclass(frozen=True, slots=True)
class CalendarRules:
    """What a stored calendar excludes: the ``holidays`` of a built-in calendar, the
    explicit ``exclude`` dates, and the days not among ``weekdays`` (cron's day-of-week
    syntax: ``mon-fri``, ``1-5``, ``sat,sun``); an ``include`` date is never excluded.

    Its dict (``to_dict``/``from_dict``) is what the store, the API and the CLI carry::

        {"holidays": "DE-BY", "exclude": ["2026-12-24"], "include": ["2026-12-27"],
         "weekdays": "mon-fri"}
    """

    holidays: str | None = None
    exclude: tuple[date, ...] = ()
    include: tuple[date, ...] = ()
    weekdays: str | None = None
    _holidays: HolidayCalendar | None = field(init=False, repr=False, compare=False)
    _weekdays: frozenset[int] | None = field(init=False, repr=False, compare=False)
    _exclude: frozenset[date] = field(init=False, repr=False, compare=False)
    _include: frozenset[date] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        holiday = None
        if self.holidays is not None:
            holiday = calendar_named(self.holidays, field_name="holidays")
            object.__setattr__(self, "holidays", holiday.name)
        object.__setattr__(self, "_holidays", holiday)
        days = None if self.weekdays is None else _weekday_set(self.weekdays)
        object.__setattr__(self, "_weekdays", days)
        for key in ("exclude", "include"):
            values = _dates(list(getattr(self, key)), key)  # dates, or YYYY-MM-DD text
            object.__setattr__(self, key, tuple(sorted(set(values))))
            object.__setattr__(self, f"_{key}", frozenset(values))
        both = sorted(self._exclude & self._include)
        if both:
            raise InvalidScheduleError(
                f"{both[0].isoformat()} is both excluded and included", field="include"
            )

    def reason(self, day: date) -> str | None:
        """Why ``day`` is excluded (``None``: allowed)."""
        if day in self._include:
            return None
        if day in self._exclude:
            return "an excluded date"
        if self._weekdays is not None and day.weekday() not in self._weekdays:
            return f"a {day.strftime('%A')}, not one of its weekdays ({self.weekdays})"
        if self._holidays is not None:
            return self._holidays.reason(day)
        return None

    def never_allows(self, weekdays: frozenset[int], after: date) -> bool:
        """Whether no day after ``after`` whose weekday (Monday = 0) is in ``weekdays``
        is allowed: none is among its weekdays, and no later include date is one."""
        if self._weekdays is None or not weekdays.isdisjoint(self._weekdays):
            return False
        return not any(d > after and d.weekday() in weekdays for d in self.include)

    def to_dict(self) -> dict[str, Any]:
        return {
            "holidays": self.holidays,
            "exclude": [d.isoformat() for d in self.exclude],
            "include": [d.isoformat() for d in self.include],
            "weekdays": self.weekdays,
        }

    @classmethod
    def from_dict(cls, doc: object, *, prefix: str = "") -> CalendarRules:
        """Rules from their dict, validated; an error names ``prefix`` + the key
        (``exclude[2]``)."""
        try:
            return cls._from_dict(doc)
        except InvalidScheduleError as exc:
            exc.field = f"{prefix}{exc.field}" if exc.field else prefix.rstrip(".")
            raise

    @classmethod
    def _from_dict(cls, doc: object) -> CalendarRules:
        if not isinstance(doc, Mapping):
            raise InvalidScheduleError("expected an object", field="")
        for key in doc:
            if key not in _RULE_KEYS:
                raise InvalidScheduleError(
                    "not a key of a calendar (holidays, exclude, include, weekdays)",
                    field=str(key)[:64],
                )
        holidays, weekdays = doc.get("holidays"), doc.get("weekdays")
        for key, value in (("holidays", holidays), ("weekdays", weekdays)):
            if value is not None and not isinstance(value, str):
                raise InvalidScheduleError(
                    f"expected a string, got {type(value).__name__}", field=key
                )
        return cls(
            holidays=holidays,
            exclude=_dates(doc.get("exclude"), "exclude"),
            include=_dates(doc.get("include"), "include"),
            weekdays=weekdays,
        )


def _dates(values: object, key: str) -> tuple[date, ...]:
    if values is None:
        return ()
    if not isinstance(values, list | tuple):
        raise InvalidScheduleError("expected a list of dates (YYYY-MM-DD)", field=key)
    if len(values) > MAX_DATES:
        raise InvalidScheduleError(f"{len(values)} dates; the limit is {MAX_DATES}", field=key)
    out: list[date] = []
    for i, value in enumerate(values):
        if isinstance(value, date) and not isinstance(value, datetime):
            out.append(value)
            continue
        if not isinstance(value, str) or _DATE.match(value) is None:
            raise InvalidScheduleError(
                f"{str(value)[:40]!r} is not a date (YYYY-MM-DD)", field=f"{key}[{i}]"
            )
        try:
            out.append(date.fromisoformat(value))
        except ValueError as exc:
            raise InvalidScheduleError(f"{value!r}: {exc}", field=f"{key}[{i}]") from None
    return tuple(out)


_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")


def _weekday_set(text: object) -> frozenset[int]:
    """Python weekdays (Monday = 0) from cron's day-of-week syntax."""
    from cronwheel.domain.cron import parse_cron

    if not isinstance(text, str) or _WEEKDAYS.match(text) is None or text in ("*", "?"):
        raise InvalidScheduleError(
            f"{str(text)[:64]!r} is not a list of weekdays (mon-fri, 1-5, sat,sun)",
            field="weekdays",
        )
    try:
        expr = parse_cron(f"0 0 * * {text}")
    except InvalidScheduleError as exc:
        raise InvalidScheduleError(exc.message, field="weekdays") from None
    if expr.dow_star or expr.dow_last or expr.dow_nth:
        raise InvalidScheduleError(
            f"{text!r} is not a list of weekdays (mon-fri, 1-5, sat,sun)", field="weekdays"
        )
    return frozenset((d - 1) % 7 for d in expr.dow_values)


@dataclass(frozen=True, slots=True)
class StoredCalendar(Calendar):
    """A stored calendar bound to a schedule: its name and its rules."""

    name: str
    rules: CalendarRules

    def reason(self, day: date) -> str | None:
        why = self.rules.reason(day)
        return None if why is None else f"calendar {self.name}: {why}"


@dataclass(frozen=True, slots=True)
class CalendarRecord:
    """A stored calendar as the store keeps it."""

    namespace: str
    name: str
    rules: CalendarRules
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        from cronwheel.domain.instants import format_instant

        return {
            "namespace": self.namespace,
            "name": self.name,
            **self.rules.to_dict(),
            "updated_at": format_instant(self.updated_at),
        }
