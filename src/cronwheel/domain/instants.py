"""Durations and instants as text: ``"1h30m"`` and RFC 3339 timestamps with an offset.

The schedule values (:mod:`cronwheel.domain.schedules`) and every edge that reads
a duration or an instant (API bodies, CLI options) parse and print them here.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

from cronwheel.errors import ValidationError

__all__ = ["MAX_INTERVAL", "format_duration", "format_instant", "parse_duration", "parse_instant"]

MAX_INTERVAL = timedelta(days=36525)  # 100 years
_TINY = timedelta(microseconds=1)

_DURATION_UNITS = {
    "w": timedelta(weeks=1),
    "d": timedelta(days=1),
    "h": timedelta(hours=1),
    "m": timedelta(minutes=1),
    "s": timedelta(seconds=1),
    "ms": timedelta(milliseconds=1),
    "us": timedelta(microseconds=1),
}
_UNIT_ORDER = list(_DURATION_UNITS)
_DURATION_PART = re.compile(r"([0-9]{1,12})(ms|us|w|d|h|m|s)", re.ASCII)


def parse_duration(text: str, *, field: str = "duration") -> timedelta:
    """Parse ``"90s"``, ``"5m"``, ``"1h30m"``, ``"2d"``, ``"500ms"`` (units w d h m s ms us).

    Units appear at most once, largest first; the result is positive and at most
    100 years. Raises :class:`ValidationError` naming ``field`` otherwise.
    """
    if not isinstance(text, str):
        raise ValidationError(f"expected a string, got {type(text).__name__}", field=field)
    if not text or len(text) > 64:
        raise ValidationError("expected a duration such as '90s', '5m' or '1h30m'", field=field)
    total = timedelta()
    position = 0
    last_unit = -1
    while position < len(text):
        match = _DURATION_PART.match(text, position)
        if match is None:
            raise ValidationError(
                f"bad duration {text!r}: expected e.g. '90s', '5m', '1h30m', '500ms'", field=field
            )
        unit_index = _UNIT_ORDER.index(match.group(2))
        if unit_index <= last_unit:
            raise ValidationError(
                f"bad duration {text!r}: units must appear once, largest first", field=field
            )
        last_unit = unit_index
        try:
            total += int(match.group(1)) * _DURATION_UNITS[match.group(2)]
        except OverflowError:
            raise ValidationError(f"duration {text!r} is too large", field=field) from None
        position = match.end()
    if total <= timedelta():
        raise ValidationError(f"duration {text!r} must be positive", field=field)
    if total > MAX_INTERVAL:
        raise ValidationError(f"duration {text!r} exceeds 100 years", field=field)
    return total


def format_duration(delta: timedelta) -> str:
    """The canonical text of a positive duration, inverse of :func:`parse_duration`."""
    micros = delta // _TINY
    parts = []
    for unit, size in _DURATION_UNITS.items():
        count, micros = divmod(micros, size // _TINY)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


_INSTANT_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]{1,9}))?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))",
    re.ASCII,
)


def parse_instant(text: str, field: str) -> datetime:
    """Parse a strict RFC 3339 timestamp with ``Z`` or an offset into an aware UTC datetime.

    ``2026-03-29T01:00:00Z``, ``2026-03-29T03:00:00.5+02:00``. Rejects dates
    without times, naive times, offsets of 24 h or more, leap seconds, year 0 and
    anything out of datetime's range (digits beyond microseconds are truncated).
    """
    if not isinstance(text, str):
        raise ValidationError(f"expected a string, got {type(text).__name__}", field=field)
    match = _INSTANT_RE.fullmatch(text) if len(text) <= 40 else None
    if match is None:
        raise ValidationError(
            f"{text[:40]!r} is not an RFC 3339 timestamp with an offset, "
            f"e.g. '2026-03-29T01:00:00Z'",
            field=field,
        )
    year, month, day, hour, minute, second, frac, zulu, sign, off_h, off_m = match.groups()
    if int(second) == 60:
        raise ValidationError("leap seconds are not supported", field=field)
    if not zulu and (int(off_h) > 23 or int(off_m) > 59):
        raise ValidationError(f"offset {sign}{off_h}:{off_m} is out of range", field=field)
    offset = timedelta()
    if not zulu:
        offset = timedelta(hours=int(off_h), minutes=int(off_m))
        offset = -offset if sign == "-" else offset
    try:
        local = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int((frac or "0").ljust(6, "0")[:6]),
            tzinfo=timezone(offset),
        )
        return local.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise ValidationError(f"{text!r} is not a valid instant: {exc}", field=field) from None


def format_instant(instant: datetime) -> str:
    """RFC 3339 in UTC with ``Z``; microseconds only when present."""
    return instant.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"
