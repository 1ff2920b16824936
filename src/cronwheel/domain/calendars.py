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
from datetime import date, timedelta
from typing import Any

from cronwheel.domain.transitions import StepBudget
from cronwheel.errors import InvalidScheduleError

__all__ = ["Calendar", "calendar_named"]

_NAME = re.compile(r"^([A-Z]{2,4})(?:-([A-Za-z0-9][A-Za-z0-9 .'-]{0,39}))?$")
_ONE_DAY = timedelta(days=1)
_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class Calendar:
    """A resolved calendar: ``excluded(day)`` is the holiday's name on an excluded day
    and ``None`` on a day the schedule may fire."""

    name: str  # canonical: "DE-BY", "US", "NYSE"
    market: bool  # a financial market rather than a country
    code: str
    subdiv: str | None
    language: str | None
    _years: dict[int, Mapping[date, str]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    def excluded(self, day: date) -> str | None:
        """The holiday's name if the calendar excludes ``day``, else ``None``."""
        return self._holidays(day.year).get(day)

    def next_allowed(self, day: date, budget: StepBudget) -> date | None:
        """The first day after ``day`` this calendar does not exclude (``None``: past
        9999-12-31); each day looked at spends ``budget``."""
        while True:
            budget.spend()
            if day == date.max:
                return None
            day += _ONE_DAY
            if self.excluded(day) is None:
                return day

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


def calendar_named(name: object, *, field_name: str = "calendar") -> Calendar:
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
def _resolve(name: str, field: str) -> Calendar:
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
    return Calendar(
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
