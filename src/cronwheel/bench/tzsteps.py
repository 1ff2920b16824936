"""``cronwheel bench tz-steps``: the cost of one schedule step at a DST transition vs away.

A *step* is one ``next_after(t)`` call, the dispatcher's advance of a job. For
every zone whose UTC offset changes in the two years from ``--from`` (all zones
of the tz database, or a fixed handful at smoke size), and for each of its
transitions T in that window, the benchmark takes ``steps`` successive steps from
each of seven start points near T (T - 3 h, T - 1 h, T - 1 s, T, T + 1 s, T + 1 h,
T + 3 h) -- "at" the transition -- and the same from the same points ten days
earlier (or later, if that is near another transition) -- "away". It does this
for three expressions with their default DST policies: per second
(``* * * * * *``), per minute (``* * * * *``) and daily (``30 2 * * *``, the
wall time most zones skip or repeat).

Reported per expression: the mean cost of a step at and away from transitions
(µs), their ratio, and the worst zone's ratio (each zone's at/away mean). Every
series of steps is timed 3 times and its fastest run kept: the first run warms
what a long-running scheduler keeps warm (zone loads, the per-year tables of
offset changes), and the minimum filters out the other processes of a shared
machine. The
figures are wall-clock time on a shared machine: compare ratios, not absolute
values, across machines.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from cronwheel.domain.cron_schedule import forget_searches
from cronwheel.domain.schedules import cron
from cronwheel.domain.tz import load_zone, zone_names

EXPRESSIONS: dict[str, str] = {
    "per-second": "* * * * * *",
    "per-minute": "* * * * *",
    "daily": "30 2 * * *",
}
SMOKE_ZONES = (
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Chatham",
    "Asia/Gaza",
)
OFFSETS = tuple(timedelta(seconds=s) for s in (-3 * 3600, -3600, -1, 0, 1, 3600, 3 * 3600))
WINDOW = timedelta(days=730)
REPEAT = 3
AWAY = timedelta(days=10)
_PROBE = timedelta(hours=48)  # < the smallest spacing of offset changes (95 h)


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta | None:
    return instant.astimezone(zone).utcoffset()


def transitions(zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """The instants (whole seconds) in ``(start, end]`` at which ``zone``'s offset changes.

    Found by sampling every 48 hours and bisecting each change (offset changes in
    the tz database are more than 95 hours apart). Independent of the domain's
    own transition search, which is what is being measured.
    """
    found: list[datetime] = []
    low = start.replace(microsecond=0)
    while low < end:
        high = min(low + _PROBE, end)
        if _offset(zone, low) != _offset(zone, high):
            lo, hi = 0, int((high - low).total_seconds())
            old = _offset(zone, low)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _offset(zone, low + timedelta(seconds=mid)) == old:
                    lo = mid
                else:
                    hi = mid
            found.append(low + timedelta(seconds=hi))
        low = high
    return found


@dataclass(slots=True)
class _Cost:
    at_ns: int = 0
    at_steps: int = 0
    away_ns: int = 0
    away_steps: int = 0


def _time_steps(
    step: Callable[[datetime], datetime | None], starts: Iterable[datetime], n: int
) -> tuple[int, int]:
    """Total ns and count of ``n`` successive steps from each start (fastest of REPEAT)."""
    total = 0
    count = 0
    for start in starts:
        fastest: int | None = None
        for _ in range(REPEAT):
            t: datetime | None = start
            forget_searches()  # time the search, not the answer remembered by the last
            began = time.perf_counter_ns()
            done = 0
            while done < n and t is not None:
                t = step(t)
                done += 1
            took = time.perf_counter_ns() - began
            fastest = took if fastest is None else min(fastest, took)
        assert fastest is not None
        total += fastest
        count += done
    return total, count


def run_tz_steps(
    *,
    start: datetime,
    smoke: bool = False,
    steps: int = 1,
    zones: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Measure and return the figures as a JSON-safe dict (see the module docstring)."""
    start = start.astimezone(UTC)
    end = start + WINDOW
    names = zones if zones is not None else sorted(SMOKE_ZONES if smoke else zone_names())
    plan: list[tuple[str, list[datetime]]] = []
    for name in names:
        found = transitions(load_zone(name), start, end)
        if found:
            plan.append((name, found))
    costs: dict[str, dict[str, _Cost]] = {kind: {} for kind in EXPRESSIONS}
    for done, (name, found) in enumerate(plan):
        zone = load_zone(name)
        for kind, expr in EXPRESSIONS.items():
            schedule = cron(expr, name)
            step = schedule.next_after
            cost = costs[kind].setdefault(name, _Cost())
            for when in found:
                away = when - AWAY
                if transitions(zone, away - 2 * AWAY / 5, away + 2 * AWAY / 5):
                    away = when + AWAY
                ns, n = _time_steps(step, (when + d for d in OFFSETS), steps)
                cost.at_ns += ns
                cost.at_steps += n
                ns, n = _time_steps(step, (away + d for d in OFFSETS), steps)
                cost.away_ns += ns
                cost.away_steps += n
        if progress is not None:
            progress(done + 1, len(plan))
    return {
        "workload": "tz-steps",
        "from": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "size": "smoke" if smoke else "full",
        "zones": len(plan),
        "transitions": sum(len(found) for _, found in plan),
        "steps_per_point": steps,
        "expressions": {kind: _summary(EXPRESSIONS[kind], costs[kind]) for kind in EXPRESSIONS},
    }


def _summary(expr: str, by_zone: dict[str, _Cost]) -> dict[str, Any]:
    at_ns = sum(c.at_ns for c in by_zone.values())
    at_steps = sum(c.at_steps for c in by_zone.values())
    away_ns = sum(c.away_ns for c in by_zone.values())
    away_steps = sum(c.away_steps for c in by_zone.values())
    at_us = at_ns / max(at_steps, 1) / 1000
    away_us = away_ns / max(away_steps, 1) / 1000
    ratios = {
        name: (c.at_ns / max(c.at_steps, 1)) / max(c.away_ns / max(c.away_steps, 1), 1.0)
        for name, c in by_zone.items()
    }
    worst = max(ratios, key=ratios.__getitem__) if ratios else None
    return {
        "expr": expr,
        "steps_at": at_steps,
        "steps_away": away_steps,
        "at_us": round(at_us, 2),
        "away_us": round(away_us, 2),
        "ratio": round(at_us / away_us, 2) if away_us else None,
        "zone_ratio_median": round(statistics.median(ratios.values()), 2) if ratios else None,
        "zone_ratio_worst": round(ratios[worst], 2) if worst else None,
        "worst_zone": worst,
    }
