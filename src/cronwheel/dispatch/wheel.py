"""A hierarchical timing wheel (Varghese & Lauck): O(1) insert, cancel and expiry.

Level 0 has ``slots`` buckets of one tick each; level ``k`` has ``slots``
buckets of ``slots**k`` ticks. An item lands in the lowest level whose span
covers its distance from the current tick; when the lower level wraps, the
next level's bucket is cascaded down. Items further out than the top level
wait in an overflow bucket that is re-examined on every top-level wrap.

Items never expire early: an item with deadline ``d`` expires on the first
``advance(now)`` with ``now >= d`` (at most one tick after ``d`` when advanced
every tick). Keys are unique: inserting a key again replaces the old entry.

Beside the wheel, a calendar counts the items by coarse deadline bucket
(``calendar`` wide): ``crowd_start`` tells when a consumer working through the
items at a known rate must start so that every item is taken by its deadline,
and ``take_earliest`` hands over the earliest bucket's items ahead of time.

Pure data structure: it never reads a clock; time is what ``advance`` is given.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(slots=True)
class _Entry(Generic[K, V]):
    key: K
    deadline: datetime
    tick: int
    value: V
    level: int = -1
    slot: int = -1


class TimingWheel(Generic[K, V]):
    def __init__(
        self,
        *,
        tick: timedelta,
        now: datetime,
        slots: int = 64,
        levels: int = 4,
        calendar: timedelta = timedelta(milliseconds=100),
    ):
        if tick <= timedelta(0):
            raise ValueError("tick must be positive")
        if slots < 2 or slots & (slots - 1):
            raise ValueError("slots must be a power of two")
        self._tick_us = tick // timedelta(microseconds=1)
        self._slots = slots
        self._bits = slots.bit_length() - 1
        self._levels = levels
        self._wheel: list[list[dict[K, _Entry[K, V]]]] = [
            [{} for _ in range(slots)] for _ in range(levels)
        ]
        self._overflow: dict[K, _Entry[K, V]] = {}
        self._entries: dict[K, _Entry[K, V]] = {}
        self._current = self._floor_tick(now)
        # coarse deadline bucket -> its keys (insertion-ordered dict used as a set)
        self._calendar_us = calendar // timedelta(microseconds=1)
        self._calendar: dict[int, dict[K, None]] = {}

    # -- time <-> ticks ------------------------------------------------------------
    def _floor_tick(self, instant: datetime) -> int:
        return ((instant - _EPOCH) // timedelta(microseconds=1)) // self._tick_us

    def _ceil_tick(self, instant: datetime) -> int:
        us = (instant - _EPOCH) // timedelta(microseconds=1)
        return -((-us) // self._tick_us)

    def _tick_time(self, tick: int) -> datetime:
        return _EPOCH + timedelta(microseconds=tick * self._tick_us)

    # -- public API --------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        """The keys held (a snapshot: safe to remove while iterating)."""
        return iter(list(self._entries))

    def deadline_of(self, key: K) -> datetime | None:
        entry = self._entries.get(key)
        return None if entry is None else entry.deadline

    def insert(self, key: K, deadline: datetime, value: V) -> None:
        self.remove(key)
        entry = _Entry(
            key=key,
            deadline=deadline,
            tick=max(self._ceil_tick(deadline), self._current),
            value=value,
        )
        self._entries[key] = entry
        self._place(entry)
        self._calendar.setdefault(self._day(deadline), {})[key] = None

    def remove(self, key: K) -> V | None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        self._uncalendar(entry)
        if entry.level < 0:
            self._overflow.pop(key, None)
        else:
            self._wheel[entry.level][entry.slot].pop(key, None)
        return entry.value

    def clear(self) -> None:
        for level in self._wheel:
            for bucket in level:
                bucket.clear()
        self._overflow.clear()
        self._entries.clear()
        self._calendar.clear()

    def advance(self, now: datetime) -> list[tuple[datetime, V]]:
        """Move time to ``now``; return the expired items as (deadline, value), earliest first."""
        target = self._floor_tick(now)
        expired: list[_Entry[K, V]] = []
        if not self._entries:
            self._current = max(self._current, target)
            return []
        # The current tick's bucket may have received items inserted "due now".
        self._drain(self._current, expired)
        while self._current < target:
            self._current += 1
            if self._current & (self._slots - 1) == 0:
                self._cascade(1)
            self._drain(self._current, expired)
            if not self._entries:
                self._current = target
                break
        expired.sort(key=lambda e: e.deadline)
        return [(e.deadline, e.value) for e in expired]

    def next_expiry(self) -> datetime | None:
        """The earliest instant at which ``advance`` may return something (a lower bound)."""
        if not self._entries:
            return None
        mask = self._slots - 1
        for offset in range(self._slots):
            tick = self._current + offset
            if offset and tick & mask == 0:
                break
            if self._wheel[0][tick & mask]:
                return self._tick_time(tick)
        # Nothing in the rest of level 0: the next cascade is the earliest possible expiry.
        return self._tick_time((self._current | mask) + 1)

    def crowd_start(self, rate: float) -> datetime | None:
        """The latest instant at which a consumer taking the items in deadline order,
        ``rate`` items per second, must start to take each bucket's items by the end of
        that calendar bucket (None: the wheel is empty). A lone item's start is its own
        deadline or later (``advance`` hands it over then); a crowd's is earlier by the
        time the items before and in its bucket take."""
        start: datetime | None = None
        count = 0
        for day in sorted(self._calendar):
            count += len(self._calendar[day])
            end_us = (day + 1) * self._calendar_us
            at = _EPOCH + timedelta(microseconds=end_us - count / rate * 1e6)
            if start is None or at < start:
                start = at
        return start

    def take_earliest(self) -> list[tuple[datetime, V]]:
        """Remove and return the items of the earliest calendar bucket, earliest first,
        whatever their deadline (the consumer takes them ahead of time)."""
        if not self._calendar:
            return []
        keys = list(self._calendar[min(self._calendar)])
        entries = [self._entries[k] for k in keys]
        for key in keys:
            self.remove(key)
        entries.sort(key=lambda e: e.deadline)
        return [(e.deadline, e.value) for e in entries]

    # -- internals -------------------------------------------------------------------
    def _day(self, deadline: datetime) -> int:
        return ((deadline - _EPOCH) // timedelta(microseconds=1)) // self._calendar_us

    def _uncalendar(self, entry: _Entry[K, V]) -> None:
        day = self._day(entry.deadline)
        keys = self._calendar.get(day)
        if keys is not None:
            keys.pop(entry.key, None)
            if not keys:
                del self._calendar[day]

    def _place(self, entry: _Entry[K, V]) -> None:
        delta = entry.tick - self._current
        for level in range(self._levels):
            if delta < self._slots << (self._bits * level):
                slot = (entry.tick >> (self._bits * level)) & (self._slots - 1)
                entry.level, entry.slot = level, slot
                self._wheel[level][slot][entry.key] = entry
                return
        entry.level, entry.slot = -1, -1
        self._overflow[entry.key] = entry

    def _drain(self, tick: int, out: list[_Entry[K, V]]) -> None:
        bucket = self._wheel[0][tick & (self._slots - 1)]
        if not bucket:
            return
        keep: list[_Entry[K, V]] = []
        for entry in bucket.values():
            if entry.tick <= tick:
                out.append(entry)
                del self._entries[entry.key]
                self._uncalendar(entry)
            else:
                keep.append(entry)
        bucket.clear()
        for entry in keep:
            bucket[entry.key] = entry

    def _cascade(self, level: int) -> None:
        if level >= self._levels:
            pending = list(self._overflow.values())
            self._overflow.clear()
            for entry in pending:
                self._place(entry)
            return
        slot = (self._current >> (self._bits * level)) & (self._slots - 1)
        if slot == 0:
            self._cascade(level + 1)
        bucket = self._wheel[level][slot]
        pending = list(bucket.values())
        bucket.clear()
        for entry in pending:
            self._place(entry)
