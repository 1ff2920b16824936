"""Cron expressions: parse once into a frozen :class:`CronExpr`, then match naive wall times.

This module knows nothing about time zones: it matches *wall-clock* times (naive
``datetime``); :mod:`cronwheel.domain.tz` maps wall times to instants.

Syntax
======

Five fields ``minute hour day-of-month month day-of-week`` or six with a leading
``second`` field, separated by spaces or tabs::

    field          values      names / specials
    second         0-59
    minute         0-59
    hour           0-23
    day-of-month   1-31        ?  L  L-n  nW  LW
    month          1-12        JAN-DEC
    day-of-week    0-7         SUN-SAT (0 and 7 are Sunday)  ?  nL  n#k

- ``*`` every value; ``a,b,c`` a list; ``a-b`` an inclusive range; ``*/n``,
  ``a-b/n`` and ``a/n`` (= ``a-<max>/n``) every n-th value (n >= 1, at most the
  number of values in the field). Names are case-insensitive and may appear in
  ranges (``MON-FRI``, ``JAN-MAR``).
- Ranges must be ascending: ``5-2`` is rejected, there is no wrap-around (this is
  what cronsim and Debian cron do). ``FRI-SUN`` is therefore rejected too; write
  ``FRI-SAT,SUN`` or ``5-7``.
- ``?`` is accepted alone in day-of-month and day-of-week and means ``*``.
- ``L`` last day of the month; ``L-n`` n days before it (n in 0..30; no match in
  months too short for it); ``nW`` the weekday (Mon-Fri) nearest to day n, never
  crossing into another month (``1W`` on a Saturday is Monday the 3rd; no match in
  months without day n); ``LW`` the last weekday of the month.
- ``nL`` the last day-of-week n of the month (``5L`` last Friday); ``n#k`` the
  k-th day-of-week n of the month, k in 1..5 (``MON#1`` first Monday).
- Macros: ``@yearly``/``@annually`` ``0 0 1 1 *``, ``@monthly`` ``0 0 1 * *``,
  ``@weekly`` ``0 0 * * 0``, ``@daily``/``@midnight`` ``0 0 * * *``,
  ``@hourly`` ``0 * * * *``.

The day-of-month / day-of-week rule (Vixie/Debian cron, as cronsim implements it)
-------------------------------------------------------------------------------

A field is *unrestricted* when its text **starts with** ``*`` (or is ``?``) —
so ``*/2`` counts as unrestricted, while ``1-31`` counts as restricted. If either
day field is unrestricted, a day must match both fields (the unrestricted one
matches everything when it is plain ``*``; ``*/2`` still filters). If both are
restricted, a day matches when EITHER field matches: ``0 0 13 * FRI`` fires on
every 13th and on every Friday.

Rejected (``InvalidScheduleError``, field ``cron``, with the reason): wrong field
count, values out of range (naming field and value), step 0, reversed ranges,
empty list items, unknown words, non-ASCII characters (so no Arabic-Indic or
fullwidth digits), control characters, input longer than 256 characters, and
expressions that can never fire (``0 0 30 2 *``): since the Gregorian calendar
repeats every 400 years, an expression with no match in 400 years never matches.
"""

from __future__ import annotations

import calendar
import re
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cronwheel.domain.memo import remembered
from cronwheel.domain.transitions import StepBudget
from cronwheel.errors import InvalidScheduleError

__all__ = ["MAX_EXPRESSION_LENGTH", "CronExpr", "parse_cron"]

MAX_EXPRESSION_LENGTH = 256
# The Gregorian calendar (weekdays included) repeats every 400 years: searching
# that far is a complete search, not a heuristic.
_HORIZON_YEARS = 400
_MAX_YEAR = 9999
_CACHE_LIMIT = 4096

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"),
        start=1,
    )
}
_DAY_NAMES = {name: i for i, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
_DIGITS = frozenset("0123456789")
_ONE_SECOND = timedelta(seconds=1)
_ONE_MINUTE = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None

    @property
    def size(self) -> int:
        return self.high - self.low + 1


_SECOND = _FieldSpec("second", 0, 59)
_MINUTE = _FieldSpec("minute", 0, 59)
_HOUR = _FieldSpec("hour", 0, 23)
_DOM = _FieldSpec("day-of-month", 1, 31)
_MONTH = _FieldSpec("month", 1, 12, _MONTH_NAMES)
_DOW = _FieldSpec("day-of-week", 0, 7, _DAY_NAMES)


def _fail(reason: str) -> InvalidScheduleError:
    return InvalidScheduleError(reason, field="cron")


@dataclass(frozen=True, slots=True)
class CronExpr:
    """A parsed cron expression. Build it with :func:`parse_cron`.

    Value sets are sorted tuples; day-of-week values use 0 = Sunday .. 6 = Saturday.
    Instances are immutable and safe to share between threads (the per-month day
    cache is an idempotent memo).
    """

    source: str
    has_seconds: bool
    follows_real_time: bool  # minute or hour field starts with '*' (Debian's MIN_STAR|HR_STAR)
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: tuple[int, ...]
    dom_values: frozenset[int]
    dom_last_offsets: tuple[int, ...]  # L is offset 0, L-3 is offset 3
    dom_nearest: tuple[int, ...]  # nW
    dom_last_weekday: bool  # LW
    dow_values: frozenset[int]
    dow_last: tuple[int, ...]  # nL
    dow_nth: tuple[tuple[int, int], ...]  # n#k as (n, k)
    dom_star: bool
    dow_star: bool
    _day_cache: dict[tuple[int, int], tuple[int, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @property
    def day_or(self) -> bool:
        """True when both day fields are restricted: a day matches if either matches."""
        return not (self.dom_star or self.dow_star)

    def days_in(self, year: int, month: int) -> tuple[int, ...]:
        """The sorted days of ``year``-``month`` that the day fields allow."""
        key = (year, month)
        days = self._day_cache.get(key)
        if days is None:
            if len(self._day_cache) >= _CACHE_LIMIT:
                self._day_cache.clear()
            days = self._compute_days(year, month)
            self._day_cache[key] = days
        return days

    def _compute_days(self, year: int, month: int) -> tuple[int, ...]:
        first_weekday, ndays = calendar.monthrange(year, month)  # Monday = 0
        first_cron_dow = (first_weekday + 1) % 7  # cron: Sunday = 0

        def nearest_weekday(day: int) -> int:
            weekday = (first_weekday + day - 1) % 7
            if weekday == 5:  # Saturday: Friday before, unless that leaves the month
                return day - 1 if day > 1 else day + 2
            if weekday == 6:  # Sunday: Monday after, unless that leaves the month
                return day + 1 if day < ndays else day - 2
            return day

        dom = {d for d in self.dom_values if d <= ndays}
        dom.update(ndays - n for n in self.dom_last_offsets if ndays - n >= 1)
        dom.update(nearest_weekday(n) for n in self.dom_nearest if n <= ndays)
        if self.dom_last_weekday:
            dom.add(nearest_weekday(ndays))

        dow: set[int] = set()
        for n in self.dow_values:
            dow.update(range(1 + (n - first_cron_dow) % 7, ndays + 1, 7))
        for n in self.dow_last:
            first = 1 + (n - first_cron_dow) % 7
            dow.add(first + 7 * ((ndays - first) // 7))
        for n, k in self.dow_nth:
            day = 1 + (n - first_cron_dow) % 7 + 7 * (k - 1)
            if day <= ndays:
                dow.add(day)

        return tuple(sorted(dom | dow if self.day_or else dom & dow))

    def matches(self, wall: datetime) -> bool:
        """Whether the naive wall-clock time ``wall`` matches (microseconds ignored)."""
        return (
            wall.second in self.seconds
            and wall.minute in self.minutes
            and wall.hour in self.hours
            and wall.month in self.months
            and wall.day in self.days_in(wall.year, wall.month)
        )

    def next_wall(
        self,
        after: datetime,
        *,
        until: datetime | None = None,
        budget: StepBudget | None = None,
    ) -> datetime | None:
        """The first matching naive wall time strictly after ``after``.

        Jumps field by field (month, day, hour, minute, second). Returns ``None``
        when nothing matches within 400 years (for an expression accepted by
        :func:`parse_cron` that only happens near year 9999) or, when ``until``
        is given, up to ``until``. Each jump spends one step of ``budget``.
        """
        if after.tzinfo is not None:
            raise ValueError("next_wall takes a naive wall-clock datetime")
        try:
            if self.has_seconds:
                start = after.replace(microsecond=0) + _ONE_SECOND
            else:
                start = after.replace(second=0, microsecond=0) + _ONE_MINUTE
        except OverflowError:
            return None
        year, month, day = start.year, start.month, start.day
        hour, minute, second = start.hour, start.minute, start.second
        months, hours, minutes, seconds = self.months, self.hours, self.minutes, self.seconds
        last_year = min(year + _HORIZON_YEARS, _MAX_YEAR)
        stop = None if until is None else (until.year, until.month, until.day, until.hour)
        steps = 0
        cap = -1 if budget is None else budget.left + 1
        try:
            while year <= last_year and steps != cap:
                steps += 1
                if stop is not None and (year, month, day, hour) > stop:
                    return None
                i = bisect_left(months, month)
                if i == len(months):
                    year, month, day, hour, minute, second = year + 1, months[0], 1, 0, 0, 0
                    continue
                if months[i] != month:
                    month, day, hour, minute, second = months[i], 1, 0, 0, 0
                days = self.days_in(year, month)
                i = bisect_left(days, day)
                if i == len(days):
                    month, day, hour, minute, second = month + 1, 1, 0, 0, 0
                    if month > 12:
                        year, month = year + 1, 1
                    continue
                if days[i] != day:
                    day, hour, minute, second = days[i], 0, 0, 0
                i = bisect_left(hours, hour)
                if i == len(hours):
                    day, hour, minute, second = day + 1, 0, 0, 0
                    continue
                if hours[i] != hour:
                    hour, minute, second = hours[i], 0, 0
                i = bisect_left(minutes, minute)
                if i == len(minutes):
                    hour, minute, second = hour + 1, 0, 0
                    continue
                if minutes[i] != minute:
                    minute, second = minutes[i], 0
                i = bisect_left(seconds, second)
                if i == len(seconds):
                    minute, second = minute + 1, 0
                    continue
                found = datetime(year, month, day, hour, minute, seconds[i])
                return None if until is not None and found > until else found
            return None
        finally:
            if budget is not None:
                budget.spend(steps)


_PARSED: dict[str, CronExpr] = {}  # expressions parsed before (CronExpr is immutable)
_PARSED_MAX = 1024


def parse_cron(expr: str) -> CronExpr:
    """Parse a cron expression (syntax in the module docstring).

    Raises :class:`InvalidScheduleError` (field ``cron``) naming the field and the
    offending value, including for expressions that can never fire. The last 1,024
    expressions parsed are remembered (an API server parses the same few again and
    again); errors are not.
    """
    if not isinstance(expr, str):
        return _parse(expr)  # refused, naming the type
    return remembered(_PARSED, expr, lambda: _parse(expr), _PARSED_MAX)


def _parse(expr: str) -> CronExpr:
    if not isinstance(expr, str):
        raise _fail(f"expected a string, got {type(expr).__name__}")
    if len(expr) > MAX_EXPRESSION_LENGTH:
        raise _fail(f"expression is {len(expr)} characters long; the limit is 256")
    for position, char in enumerate(expr):
        if ord(char) > 127:
            raise _fail(f"non-ASCII character U+{ord(char):04X} at position {position}")
        if (ord(char) < 32 and char != "\t") or ord(char) == 127:
            raise _fail(f"control character U+{ord(char):04X} at position {position}")
    source = expr.strip()
    if not source:
        raise _fail("empty expression")
    text = source
    is_macro = source.startswith("@")
    if is_macro:
        macro = _MACROS.get(source.lower())
        if macro is None:
            known = " ".join(sorted(_MACROS))
            raise _fail(f"unknown macro {source!r} (known: {known})")
        text = macro
    parts = text.upper().split()
    if len(parts) not in (5, 6):
        raise _fail(
            f"expected 5 fields (minute hour day-of-month month day-of-week) "
            f"or 6 (with leading seconds), got {len(parts)}"
        )
    has_seconds = len(parts) == 6
    if not has_seconds:
        parts.insert(0, "0")
    sec_text, min_text, hour_text, dom_text, month_text, dow_text = parts

    seconds = _parse_plain(sec_text, _SECOND)
    minutes = _parse_plain(min_text, _MINUTE)
    hours = _parse_plain(hour_text, _HOUR)
    months = _parse_plain(month_text, _MONTH)
    dom_values, dom_last, dom_nearest, dom_lw = _parse_dom(dom_text)
    dow_values, dow_last, dow_nth = _parse_dow(dow_text)

    result = CronExpr(
        source=source,
        has_seconds=has_seconds,
        follows_real_time=min_text.startswith("*") or hour_text.startswith("*"),
        seconds=seconds,
        minutes=minutes,
        hours=hours,
        months=months,
        dom_values=dom_values,
        dom_last_offsets=dom_last,
        dom_nearest=dom_nearest,
        dom_last_weekday=dom_lw,
        dow_values=dow_values,
        dow_last=dow_last,
        dow_nth=dow_nth,
        dom_star=dom_text.startswith(("*", "?")),
        dow_star=dow_text.startswith(("*", "?")),
    )
    _check_can_fire(result)
    return result


def _check_can_fire(expr: CronExpr) -> None:
    plain_dom_only = not (expr.dom_last_offsets or expr.dom_nearest or expr.dom_last_weekday)
    if not expr.day_or and plain_dom_only and expr.dom_values:
        longest = max(calendar.monthrange(2000, m)[1] for m in expr.months)
        if min(expr.dom_values) > longest:
            months = ",".join(str(m) for m in expr.months)
            raise _fail(
                f"never fires: day-of-month {min(expr.dom_values)} does not occur "
                f"in month(s) {months}"
            )
    if expr.next_wall(datetime(1999, 12, 31, 23, 59, 59)) is None:
        raise _fail(
            "never fires: no date matches the day and month fields in 400 years "
            "(the calendar repeats every 400 years)"
        )


def _number(token: str, spec: _FieldSpec) -> int:
    if token and len(token) <= 4 and set(token) <= _DIGITS:
        value = int(token)
    elif spec.names is not None and token in spec.names:
        return spec.names[token]
    elif not token:
        raise _fail(f"{spec.name} field: missing value")
    else:
        raise _fail(f"{spec.name} field: {token.lower()!r} is not a valid value")
    if not spec.low <= value <= spec.high:
        raise _fail(f"{spec.name} field: value {value} is out of range {spec.low}-{spec.high}")
    return value


def _items(text: str, spec: _FieldSpec) -> list[str]:
    items = text.split(",")
    if any(item == "" for item in items):
        raise _fail(f"{spec.name} field: empty list item in {text.lower()!r}")
    return items


def _range_item(item: str, spec: _FieldSpec) -> range:
    """``*``, ``a``, ``a-b``, each optionally followed by ``/step``."""
    base, slash, step_text = item.partition("/")
    if base in ("*", "?"):
        if base == "?" and (slash or spec not in (_DOM, _DOW)):
            raise _fail(f"{spec.name} field: '?' must stand alone")
        low, high = spec.low, spec.high
    elif "-" in base:
        low_text, _, high_text = base.partition("-")
        low, high = _number(low_text, spec), _number(high_text, spec)
        if high < low:
            raise _fail(
                f"{spec.name} field: reversed range {base.lower()!r} "
                f"(ranges must ascend; wrap-around is not supported)"
            )
    else:
        low = _number(base, spec)
        high = spec.high if slash else low
    if not slash:
        return range(low, high + 1)
    if not step_text or not set(step_text) <= _DIGITS or len(step_text) > 4:
        raise _fail(f"{spec.name} field: bad step {step_text.lower()!r} in {item.lower()!r}")
    step = int(step_text)
    if step == 0:
        raise _fail(f"{spec.name} field: step 0 in {item.lower()!r}")
    if step > spec.size:
        raise _fail(f"{spec.name} field: step {step} exceeds the field's {spec.size} values")
    return range(low, high + 1, step)


def _parse_plain(text: str, spec: _FieldSpec) -> tuple[int, ...]:
    values: set[int] = set()
    for item in _items(text, spec):
        values.update(_range_item(item, spec))
    return tuple(sorted(values))


_L_OFFSET_RE = re.compile(r"L-([0-9]{1,2})", re.ASCII)
_NEAREST_RE = re.compile(r"([0-9]{1,2})W", re.ASCII)


def _parse_dom(
    text: str,
) -> tuple[frozenset[int], tuple[int, ...], tuple[int, ...], bool]:
    values: set[int] = set()
    last: set[int] = set()
    nearest: set[int] = set()
    last_weekday = False
    for item in _items(text, _DOM):
        if item == "L":
            last.add(0)
        elif item == "LW":
            last_weekday = True
        elif (m := _L_OFFSET_RE.fullmatch(item)) is not None:
            offset = int(m.group(1))
            if offset > 30:
                raise _fail(f"day-of-month field: offset {offset} in 'L-{offset}' exceeds 30")
            last.add(offset)
        elif (m := _NEAREST_RE.fullmatch(item)) is not None:
            nearest.add(_number(m.group(1), _DOM))
        elif "L" in item or "W" in item:
            raise _fail(
                f"day-of-month field: {item.lower()!r} is not valid "
                f"(use L, L-n, nW or LW alone in a list item)"
            )
        else:
            values.update(_range_item(item, _DOM))
    return frozenset(values), tuple(sorted(last)), tuple(sorted(nearest)), last_weekday


def _parse_dow(text: str) -> tuple[frozenset[int], tuple[int, ...], tuple[tuple[int, int], ...]]:
    values: set[int] = set()
    last: set[int] = set()
    nth: set[tuple[int, int]] = set()
    for item in _items(text, _DOW):
        if "#" in item:
            day_text, _, k_text = item.partition("#")
            day = _number(day_text, _DOW) % 7
            if not k_text or not set(k_text) <= _DIGITS or not 1 <= int(k_text) <= 5:
                raise _fail(f"day-of-week field: {item.lower()!r}: the k in n#k must be 1-5")
            nth.add((day, int(k_text)))
        elif item.endswith("L") and item not in _DAY_NAMES:
            if item == "L":
                raise _fail("day-of-week field: 'L' needs a weekday, e.g. 5L for the last Friday")
            last.add(_number(item[:-1], _DOW) % 7)
        else:
            values.update(v % 7 for v in _range_item(item, _DOW))
    return frozenset(values), tuple(sorted(last)), tuple(sorted(nth))
