"""Clocks: every component reads time from a :class:`Clock`, never from ``datetime.now()``.

``now()`` is wall-clock UTC (what schedules are about); ``monotonic()`` is for
sleeps, deadlines and durations, and never jumps. :class:`FakeClock` lets tests
move time by hand (trio's MockClock idea): no test sleeps to make time pass.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, an aware UTC datetime."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...


class SystemClock:
    """The real clocks of this host."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to. Thread-safe."""

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._mono = 1000.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, delta: timedelta | float) -> datetime:
        seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        if seconds < 0:
            raise ValueError("time only moves forward on a FakeClock; use set() for wall jumps")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            self._mono += seconds
            return self._now

    def set(self, instant: datetime) -> None:
        """Jump the wall clock (forwards or backwards); the monotonic clock is untouched."""
        if instant.tzinfo is None:
            raise ValueError("FakeClock needs an aware datetime")
        with self._lock:
            self._now = instant.astimezone(UTC)
