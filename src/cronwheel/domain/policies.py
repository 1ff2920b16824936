"""Policies as pure functions: misfire catch-up planning, retry backoff, virtual deadlines.

Misfire policy (per job), applied whenever the dispatcher finds a job whose
cursor (``next_fire_at``) is older than ``now - misfire_grace`` — after a crash,
a takeover, a long pause, or a resume:

- ``fire_once`` (default): one catch-up firing for the *latest* missed instant;
  the older ones are recorded as missed.
- ``fire_all``: every missed instant inside ``catchup_window`` fires, at most
  ``max_catchup`` of them (the most recent); the rest are recorded as missed.
- ``skip``: nothing fires for the missed instants; they are recorded as missed.

Instants that are late by less than ``misfire_grace`` are not misfires: they
simply fire late. A catch-up never displaces an on-time firing: when catch-ups and
on-time firings fall due together (a takeover just before an instant) and the job's
cap has no room for all of them, the catch-ups that do not fit are coalesced into the
first on-time firing (:func:`coalesce_catchups`; recorded, never silent). Missed
instants are never dropped silently: they come back as :class:`MissedRange` records
(exact counts up to a bound, a lower bound past it, so a year-long outage of an
every-second job costs milliseconds, not minutes).
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from cronwheel.domain.firing import format_instant

ENUMERATION_CAP = 2_000  # instants walked one by one before jumping ahead
MAX_FIRINGS_PER_PLAN = 1_000  # a very fast schedule is planned over several ticks


class MisfirePolicy(StrEnum):
    FIRE_ONCE = "fire_once"
    FIRE_ALL = "fire_all"
    SKIP = "skip"


@dataclass(frozen=True, slots=True, kw_only=True)
class MissedRange:
    first: datetime
    last: datetime
    count: int
    exact: bool = True
    reason: str = "misfire"


@dataclass(frozen=True, slots=True, kw_only=True)
class FiringPlan:
    """What to do with one job now: fire these instants, record these misses, move the cursor."""

    fire: list[datetime] = field(default_factory=list)
    missed: list[MissedRange] = field(default_factory=list)
    next_cursor: datetime | None = None
    notes: dict[datetime, str] = field(default_factory=dict)  # a firing's note, by instant


NextAfter = Callable[[datetime], "datetime | None"]

_TINY = timedelta(microseconds=1)


def plan_firings(
    next_after: NextAfter,
    cursor: datetime,
    *,
    now: datetime,
    horizon: datetime,
    policy: MisfirePolicy,
    misfire_grace: timedelta,
    catchup_window: timedelta,
    max_catchup: int,
) -> FiringPlan:
    """Plan the firings of a job whose cursor is ``cursor`` (its next nominal instant).

    Fires every instant in ``[now - misfire_grace, horizon]`` (at most
    MAX_FIRINGS_PER_PLAN), applies ``policy`` to the instants before
    ``now - misfire_grace``, and returns the new cursor: the first instant not
    handled (None when the schedule is exhausted).
    """
    late_cutoff = now - misfire_grace
    fire: list[datetime] = []
    missed: list[MissedRange] = []
    t: datetime | None = cursor

    if t is not None and t < late_cutoff:
        t = _plan_misfires(
            next_after,
            t,
            late_cutoff=late_cutoff,
            window_start=now - catchup_window,
            policy=policy,
            max_catchup=max_catchup,
            fire=fire,
            missed=missed,
        )

    while t is not None and t <= horizon and len(fire) < MAX_FIRINGS_PER_PLAN:
        fire.append(t)
        t = next_after(t)
    return FiringPlan(fire=fire, missed=missed, next_cursor=t)


COALESCED = "coalesced into "  # how a coalesced range's reason starts (jobs explain)
# How the reason of a job's schedule failure starts: a range of no missed instant
# (count 0) at the instant after which the dispatcher could not compute the next one
# (its work budget exhausted, or none within the horizon); the job ended there.
SCHEDULE_ERROR = "schedule error: "


def coalesce_catchups(plan: FiringPlan, *, late_cutoff: datetime, room: int | None) -> FiringPlan:
    """A catch-up never displaces an on-time firing.

    The plan's catch-ups (instants before ``late_cutoff``, kept by the misfire policy)
    and its on-time firings (the rest) fall due together. ``room`` is how many due
    firings of the job its cap lets run or wait (``max_concurrency``, plus the buffer
    of ``buffer_one``/``buffer_all``); None when nothing is displaced (no cap, overlap
    ``allow``, or a newest-wins policy). The catch-ups that do not fit beside the
    on-time firings, oldest first, are coalesced into the first on-time firing: they
    are not fired, a ``MissedRange`` whose reason names that firing records them, and
    the on-time firing's note names them.
    """
    if room is None:
        return plan
    catchups = [t for t in plan.fire if t < late_cutoff]
    on_time = [t for t in plan.fire if t >= late_cutoff]
    excess = len(catchups) + len(on_time) - room
    if not catchups or not on_time or excess <= 0:
        return plan
    gone = catchups[: min(excess, len(catchups))]
    into = on_time[0]
    span = format_instant(gone[0]) + ("" if len(gone) == 1 else f"..{format_instant(gone[-1])}")
    record = MissedRange(
        first=gone[0],
        last=gone[-1],
        count=len(gone),
        reason=f"{COALESCED}the on-time firing at {format_instant(into)}",
    )
    note = f"coalesced the catch-up of {span} ({len(gone)}): the job's cap had no room for both"
    return FiringPlan(
        fire=[t for t in plan.fire if t not in gone],
        missed=[*plan.missed, record],
        next_cursor=plan.next_cursor,
        notes=plan.notes | {into: note},
    )


def _plan_misfires(
    next_after: NextAfter,
    start: datetime,
    *,
    late_cutoff: datetime,
    window_start: datetime,
    policy: MisfirePolicy,
    max_catchup: int,
    fire: list[datetime],
    missed: list[MissedRange],
) -> datetime | None:
    """Walk the instants before ``late_cutoff``; return the first instant at or after it."""
    keep = 1 if policy is MisfirePolicy.FIRE_ONCE else max_catchup
    if policy is MisfirePolicy.SKIP:
        keep = 0
    kept: deque[datetime] = deque(maxlen=keep) if keep > 0 else deque(maxlen=0)
    dropped_first: datetime | None = None
    dropped_last: datetime | None = None
    dropped = 0
    exact = True

    def drop(instant: datetime) -> None:
        nonlocal dropped_first, dropped_last, dropped
        if dropped_first is None:
            dropped_first = instant
        dropped_last = instant
        dropped += 1

    t: datetime | None = start
    walked = 0
    while t is not None and t < late_cutoff:
        if walked >= ENUMERATION_CAP:
            # Too many to walk one by one: jump close to the cutoff and count the
            # skipped stretch as one inexact range (a lower bound).
            jump = _jump_target(next_after, t, late_cutoff)
            if jump is not None and jump > t:
                drop(t)
                exact = False
                t = jump
                walked = 0
                continue
        eligible = policy is MisfirePolicy.FIRE_ONCE or t >= window_start
        if eligible and keep > 0:
            if len(kept) == kept.maxlen:
                drop(kept[0])
            kept.append(t)
        else:
            drop(t)
        walked += 1
        t = next_after(t)

    fire.extend(kept)
    if dropped:
        assert dropped_first is not None and dropped_last is not None
        missed.append(
            MissedRange(first=dropped_first, last=dropped_last, count=dropped, exact=exact)
        )
    return t


def _jump_target(next_after: NextAfter, t: datetime, late_cutoff: datetime) -> datetime | None:
    """The first instant after a point close enough to the cutoff to walk the rest."""
    span = late_cutoff - t
    while span > timedelta(seconds=1):
        span /= 2
        candidate = next_after(late_cutoff - span - _TINY)
        if candidate is None:
            return None
        # Count the instants between candidate and the cutoff, up to the cap.
        probe: datetime | None = candidate
        n = 0
        while probe is not None and probe < late_cutoff and n < ENUMERATION_CAP // 2:
            probe = next_after(probe)
            n += 1
        if n < ENUMERATION_CAP // 2:
            return candidate
    return next_after(late_cutoff - _TINY)


def retry_backoff(
    attempt: int,
    *,
    base: timedelta,
    maximum: timedelta,
    rng: random.Random | None = None,
) -> timedelta:
    """Exponential backoff with "equal jitter" before attempt ``attempt + 1``.

    ``attempt`` is the attempt that just failed (1-based). The delay is drawn
    uniformly from ``[d/2, d]`` where ``d = min(maximum, base * 2**(attempt-1))``,
    so retries of many firings that failed together spread out.
    """
    rng = rng or random.Random()
    exponent = min(max(attempt - 1, 0), 62)
    ceiling = min(maximum.total_seconds(), base.total_seconds() * (2**exponent))
    return timedelta(seconds=ceiling / 2 + rng.random() * ceiling / 2)


BASE_LATENCY = timedelta(seconds=1)


def virtual_deadline(
    due_at: datetime, priority: float, base_latency: timedelta = BASE_LATENCY
) -> datetime:
    """Claim order: ``due_at + base_latency / priority`` (weighted fair, never starving).

    A priority-10 firing due now outranks a priority-1 firing due up to 0.9 s
    ago, but no more: an old low-priority firing eventually comes first.
    """
    return due_at + base_latency / max(priority, 1e-3)


FAIR_QUANTUM = timedelta(milliseconds=1)


def fair_deadline(
    clock_us: int,
    due_us: int,
    priority: float,
    *,
    base_latency: timedelta = BASE_LATENCY,
    quantum: timedelta = FAIR_QUANTUM,
) -> tuple[int, int]:
    """Weighted fair queueing across namespaces (start-time fair queueing).

    Each namespace has a virtual clock (µs). A firing starts its virtual service at
    ``max(clock, due_at)`` and advances the clock by ``quantum / priority``; its claim
    key is that start plus ``base_latency / priority``. A namespace that floods
    10,000 firings pushes only its *own* clock ~10 s ahead, so another namespace's
    firing due now still sorts near the front: no tenant starves another, and an
    idle namespace cannot bank credit (the clock never lags real time).
    Returns ``(virtual_deadline_us, new_clock_us)``.
    """
    base_us, quantum_us = fair_steps(priority, base_latency=base_latency, quantum=quantum)
    start = max(clock_us, due_us)
    return start + base_us, start + quantum_us


def fair_steps(
    priority: float, *, base_latency: timedelta = BASE_LATENCY, quantum: timedelta = FAIR_QUANTUM
) -> tuple[int, int]:
    """A firing of ``priority``'s two steps in ``fair_deadline`` (µs): its base latency
    (start to virtual deadline) and its quantum (how far it moves its namespace's
    clock). PostgreSQL's one-statement enqueue takes them as parameters."""
    weight = max(priority, 1e-3)
    q = quantum.total_seconds() * 1_000_000 / weight
    b = base_latency.total_seconds() * 1_000_000 / weight
    return int(b), max(1, int(q))


def bounded(next_after: NextAfter, *, end_at: datetime | None) -> NextAfter:
    """``next_after`` that stops after ``end_at`` (a job's end bound)."""
    if end_at is None:
        return next_after

    def inner(t: datetime) -> datetime | None:
        n = next_after(t)
        return n if n is not None and n <= end_at else None

    return inner


def jitter_offset(job_id: int, scheduled_for: datetime, jitter: timedelta) -> timedelta:
    """A deterministic delay in ``[0, jitter)`` for one firing: stable across leaders and
    redeliveries (a hash of the firing's identity, not a random draw), so spreading a
    herd of jobs never changes a firing's identity or its due time on retry."""
    if jitter <= timedelta(0):
        return timedelta(0)
    digest = hashlib.blake2b(
        f"{job_id}:{scheduled_for.isoformat()}".encode(), digest_size=8
    ).digest()
    fraction = int.from_bytes(digest, "big") / 2**64
    return timedelta(microseconds=int(jitter / timedelta(microseconds=1) * fraction))


MAX_BACKFILL = 1000


def instants_between(
    next_after: NextAfter, start: datetime, end: datetime, *, limit: int = MAX_BACKFILL
) -> list[datetime]:
    """Every schedule instant in ``[start, end]`` (a backfill); more than ``limit`` is a
    ValidationError naming ``end``."""
    from cronwheel.errors import ValidationError

    if start > end:
        raise ValidationError("must not be after end", field="start")
    out: list[datetime] = []
    try:
        t = next_after(start - _TINY)
    except OverflowError:  # start is the first representable instant
        t = next_after(start)
    while t is not None and t <= end:
        if len(out) == limit:
            raise ValidationError(
                f"the range holds more than {limit} firings; backfill it in parts", field="end"
            )
        out.append(t)
        t = next_after(t)
    return out
