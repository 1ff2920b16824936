"""Clocks: every component reads time from a :class:`Clock`, never from ``datetime.now()``.

``now()`` is wall-clock UTC (what schedules are about); ``monotonic()`` is for
sleeps, deadlines and durations, and never jumps. :class:`FakeClock` lets tests
move time by hand (trio's MockClock idea): no test sleeps to make time pass.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from cronwheel.errors import ValidationError


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


# -- the store's clock, as a node sees it ------------------------------------------------
#
# Every node acts on the store's clock (the instants firings are due at, leases expire
# at, firings started at are all the store's). A node estimates its local clock's offset
# to it from round trips, as NTP does: a request sent at local t1 (wall) that read the
# store's clock at T and came back after a round trip of d seconds (monotonic) gives
#     offset = T - (t1 + d/2),  uncertainty = d/2
# since T was read somewhere inside the round trip. Of the last few samples the one with
# the smallest uncertainty wins (NTP's clock filter), its uncertainty growing with its
# age by the drift a crystal may have (PHI, 15 ppm, NTP's figure).

PHI = 15e-6  # seconds of drift allowed per second of a sample's age


@dataclass(frozen=True, slots=True)
class ClockSample:
    """One round trip to the store's clock."""

    offset: float  # seconds: the store's clock minus this node's wall clock
    delay: float  # the round trip, seconds (monotonic)
    taken_at: float  # this node's monotonic clock when it came back

    @property
    def uncertainty(self) -> float:
        return self.delay / 2


@dataclass(frozen=True, slots=True)
class ClockEstimate:
    """A node's view of its clock: its offset to the store's clock and how sure it is
    (both seconds), and why it is flagged (None: it is not)."""

    offset: float
    uncertainty: float
    flag: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClockBounds:
    """Past these a node's clock is flagged: the node claims no new firing until its
    estimate is back within them. ``max_offset`` bounds |offset| (an offset is corrected
    for, but one of many seconds is a host whose time service is broken);
    ``max_uncertainty`` bounds how far the corrected clock may be off (slow round trips
    to the store)."""

    max_offset: timedelta = timedelta(seconds=10)
    max_uncertainty: timedelta = timedelta(milliseconds=50)

    def __post_init__(self) -> None:
        for name in ("max_offset", "max_uncertainty"):
            value = getattr(self, name)
            if not isinstance(value, timedelta) or value <= timedelta(0):
                raise ValidationError("must be a positive duration", field=name)

    def flag(self, offset: float, uncertainty: float) -> str | None:
        """Why an estimate is out of bounds, or None."""
        limit = self.max_offset.total_seconds()
        if abs(offset) > limit:
            return f"clock offset {offset:+.3f} s is beyond ±{limit:g} s"
        limit = self.max_uncertainty.total_seconds()
        if uncertainty > limit:
            return f"clock uncertainty {uncertainty * 1000:.1f} ms is beyond {limit * 1000:g} ms"
        return None


def sample_clock(local: Clock, store_now: Callable[[], datetime]) -> ClockSample:
    """One round trip: ``store_now`` reads the store's clock (a store call)."""
    sent = local.monotonic()
    sent_wall = local.now()
    server = store_now()
    back = local.monotonic()
    delay = max(0.0, back - sent)
    midpoint = sent_wall + timedelta(seconds=delay / 2)
    return ClockSample((server - midpoint).total_seconds(), delay, back)


class StoreClock:
    """A :class:`Clock` that reads the store's time: this node's wall clock plus the
    offset estimated from the samples it is given (:meth:`add`). Before the first
    sample it is the local clock, flagged. Thread-safe.

    The last ``window`` samples are kept; the estimate is that of the one whose
    uncertainty (its half round trip, grown by PHI per second of age) is smallest. A
    sample that contradicts it — their intervals ``offset ± uncertainty`` do not
    meet, which no two true readings of one steady clock can do — means the local
    clock was stepped: the window restarts from that sample."""

    def __init__(self, local: Clock, bounds: ClockBounds | None = None, *, window: int = 8) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self.local = local
        self.bounds = bounds or ClockBounds()
        self._samples: deque[ClockSample] = deque(maxlen=window)
        self._best: ClockSample | None = None
        self._lock = threading.Lock()

    def add(self, sample: ClockSample) -> ClockEstimate:
        """Take one sample into account; the new estimate."""
        with self._lock:
            best = self._pick(sample.taken_at)
            if best is not None:
                apart = abs(sample.offset - best.offset)
                if apart > sample.uncertainty + self._spread(best, sample.taken_at):
                    self._samples.clear()  # the local clock was stepped
            self._samples.append(sample)
            self._best = self._pick(sample.taken_at)
        return self.estimate()

    def _spread(self, s: ClockSample, mono: float) -> float:
        return s.uncertainty + PHI * max(0.0, mono - s.taken_at)

    def _pick(self, mono: float) -> ClockSample | None:
        return min(self._samples, key=lambda s: self._spread(s, mono), default=None)

    def estimate(self) -> ClockEstimate:
        """The offset and its uncertainty now, and the flag (bounds passed, or no
        sample yet)."""
        with self._lock:
            best = self._best
            mono = self.local.monotonic()
        if best is None:
            return ClockEstimate(0.0, float("inf"), "no round trip to the store's clock yet")
        uncertainty = self._spread(best, mono)
        return ClockEstimate(best.offset, uncertainty, self.bounds.flag(best.offset, uncertainty))

    @property
    def measured(self) -> bool:
        """Whether a round trip was taken into account yet."""
        with self._lock:
            return self._best is not None

    def offset(self) -> float:
        with self._lock:
            best = self._best
        return 0.0 if best is None else best.offset

    def now(self) -> datetime:
        return self.local.now() + timedelta(seconds=self.offset())

    def monotonic(self) -> float:
        return self.local.monotonic()
