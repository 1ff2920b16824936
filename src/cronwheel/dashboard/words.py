"""Schedules in words: ``*/15 * * * * *`` -> "every 15 seconds".

Covers the common shapes; anything else returns None and the dashboard shows the
schedule's own ``describe()``. Never guesses: a field it does not understand
makes the whole phrase None.
"""

from __future__ import annotations

import re

_DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
_DAY_NAMES = {d.lower(): i for i, d in enumerate(_DAYS[:7])}
_MONTHS = ["", "Jan", "Feb", "Mar", "Apr", "May", "Jun"]
_MONTHS += ["Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
_MONTH_NAMES = {m.lower(): i for i, m in enumerate(_MONTHS) if m}
_MACROS = {
    "@yearly": "every year on 1 Jan at 00:00",
    "@annually": "every year on 1 Jan at 00:00",
    "@monthly": "on day 1 of every month at 00:00",
    "@weekly": "every Sunday at 00:00",
    "@daily": "every day at 00:00",
    "@midnight": "every day at 00:00",
    "@hourly": "every hour at minute 0",
}
_NUM = re.compile(r"^\d{1,2}$")
_STEP = re.compile(r"^\*/(\d{1,2})$")


def _plural(n: int, unit: str) -> str:
    return f"every {unit}" if n == 1 else f"every {n} {unit}s"


def _time(sec: str, minute: str, hour: str) -> tuple[str, bool] | None:
    """The time-of-day phrase, and whether it names fixed clock times."""
    if sec == "*" and minute == "*" and hour == "*":
        return "every second", False
    if (m := _STEP.match(sec)) and minute == "*" and hour == "*":
        return _plural(int(m.group(1)), "second"), False
    if not _NUM.match(sec):
        return None
    at_sec = f":{int(sec):02d}" if int(sec) else ""
    if minute == "*" and hour == "*":
        return ("every minute" + (f" at second {int(sec)}" if at_sec else "")), False
    if (m := _STEP.match(minute)) and hour == "*" and not at_sec:
        return _plural(int(m.group(1)), "minute"), False
    if not _NUM.match(minute):
        return None
    if hour == "*":
        return f"every hour at minute {int(minute)}", False
    if (m := _STEP.match(hour)) and not at_sec:
        return f"at minute {int(minute)} of {_plural(int(m.group(1)), 'hour')}", False
    hours = hour.split(",")
    if all(_NUM.match(h) and int(h) < 24 for h in hours):
        times = [f"{int(h):02d}:{int(minute):02d}{at_sec}" for h in hours]
        return "at " + (" and ".join(times) if len(times) <= 2 else ", ".join(times)), True
    return None


def _names(field: str, names: dict[str, int], labels: list[str]) -> str | None:
    parts: list[str] = []
    for item in field.split(","):
        lo, _, hi = item.partition("-")
        try:
            a = names[lo.lower()] if lo.lower() in names else int(lo)
            b = (names[hi.lower()] if hi.lower() in names else int(hi)) if hi else None
        except ValueError:
            return None
        if not 0 <= a < len(labels) or (b is not None and not 0 <= b < len(labels)):
            return None
        parts.append(labels[a] if b is None else f"{labels[a]}–{labels[b]}")
    return ", ".join(parts)


def cron_words(expr: str) -> str | None:
    expr = expr.strip()
    if expr.startswith("@"):
        return _MACROS.get(expr.lower())
    fields = expr.split()
    if len(fields) == 5:
        fields = ["0", *fields]
    if len(fields) != 6:
        return None
    sec, minute, hour, dom, month, dow = fields
    timed = _time(sec, minute, hour)
    if timed is None:
        return None
    text, fixed = timed
    dom = "*" if dom == "?" else dom
    dow = "*" if dow == "?" else dow
    if dom == "*" and dow == "*":
        days = "every day" if fixed else ""
    elif dom == "*":
        named = _names(dow, _DAY_NAMES, _DAYS)
        if named is None:
            return None
        days = f"on {named}"
    elif dow == "*":
        if dom == "L":
            days = "on the last day of the month"
        elif all(_NUM.match(d) for d in dom.split(",")):
            days = f"on day {dom.replace(',', ', ')} of the month"
        else:
            return None
    else:
        return None  # both day fields restricted: the OR rule; describe() says it better
    if month != "*":
        named = _names(month, _MONTH_NAMES, _MONTHS)
        if named is None:
            return None
        days = f"{days} in {named}".strip()
    return f"{text} {days}".strip()
