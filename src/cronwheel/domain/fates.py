"""Every nominal occurrence has a fate: the answer to "why didn't my job run at 09:00?".

``explain`` walks a job's schedule over a time range — for cron jobs the *wall-clock*
occurrences, so that a time a DST rule moved, doubled or dropped is shown too — and
gives each one its disposition from what the store recorded:

    fired        a firing ran (succeeded), or is queued/running now
    failed       it ran and ended DEAD after its attempts
    skipped      the overlap policy skipped it (the job was at its concurrency cap),
                 or an operator skipped it (``jobs skip``: who asked and why)
    missed       no leader fired it within the misfire grace and the misfire policy
                 dropped it, or its start deadline passed
    coalesced    missed by the leaders; its catch-up was folded into the on-time
                 firing it fell due with (the job's cap had no room for both)
    cancelled    someone cancelled it
    paused       the job was paused at that instant
    dst_skipped  the wall time did not exist that day and the gap policy is ``skip``
    dst_moved    the wall time did not exist; it fired at the transition / shifted time
    dst_doubled  the wall time occurred twice and fired at both (overlap ``twice``)
    dst_once     the wall time occurred twice and fired at the first only (``once``)
    deduplicated several wall times mapped to one instant (e.g. 02:00 and 02:30 both
                 to 03:00 under ``next_valid``): one firing served them all
    excluded_by_calendar  the schedule's calendar excludes its local date (the detail
                 names the holiday and the calendar: "Heilige Drei Könige (DE-BY)")
    schedule_error the dispatcher could not compute the job's instants past an earlier
                 one (work budget exhausted, or none within the horizon): the job ended
    pruned       its firing was deleted by the retention policy: the detail gives the
                 counts per outcome kept of the pruned range (domain/retention.py)
    upcoming     in the future
    not_due      before the job existed (or its start_at), after its end_at or its last
                 run (max_runs), or no record at all (reported, never hidden)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cronwheel.domain.firing import FiringState, format_instant
from cronwheel.domain.models import Firing, Job, JobEvent
from cronwheel.domain.policies import COALESCED, SCHEDULE_ERROR
from cronwheel.domain.retention import PRUNED_EVENT, pruned_counts
from cronwheel.domain.schedules import CronSchedule
from cronwheel.domain.skips import OPERATOR_SKIP
from cronwheel.domain.transitions import MAX_JUMP, StepBudget
from cronwheel.domain.tz import offset_at, resolve_wall

MAX_OCCURRENCES = 2000
_NO_RECORD = "no firing was recorded (history pruned?)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Occurrence:
    nominal: str  # the occurrence as the schedule names it (local wall time for cron)
    instant: datetime | None  # the UTC instant it maps to (None: dropped by a DST rule)
    fate: str
    detail: str
    firing_id: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "nominal": self.nominal,
            "instant": None if self.instant is None else format_instant(self.instant),
            "fate": self.fate,
            "detail": self.detail,
            "firing_id": self.firing_id,
        }


@dataclass(frozen=True, slots=True)
class _Nominal:
    label: str
    instant: datetime | None
    dst: str | None  # dst_* fate label, or None
    note: str | None
    excluded: str | None = None  # why the schedule's calendar excludes its local date


def _wall_bounds(
    schedule: CronSchedule, since: datetime, until: datetime
) -> tuple[datetime, datetime]:
    """The wall times whose instants can fall in ``[since, until]``: an instant is its
    wall time minus the offset then, and within a day of ``since`` (or ``until``) the
    offset is one of the two around it (changes are days apart)."""
    zone = schedule.zone

    def offsets(t: datetime) -> list[timedelta]:
        out = []
        for shift in (-MAX_JUMP, timedelta(0), MAX_JUMP):
            try:
                out.append(offset_at(zone, t + shift))
            except OverflowError:  # next to datetime's bounds
                continue
        return out

    low = min(offsets(since) or [-MAX_JUMP])
    high = max(offsets(until) or [MAX_JUMP])
    tiny = timedelta(microseconds=1)
    try:
        start = (since + low).replace(tzinfo=None) - tiny
    except OverflowError:
        start = datetime.min
    try:
        end = (until + high).replace(tzinfo=None)
    except OverflowError:
        end = datetime.max
    return start, end


def _nominal(job: Job, since: datetime, until: datetime, budget: StepBudget) -> Iterator[_Nominal]:
    """The schedule's occurrences in ``[since, until]``; every step of the walk spends
    ``budget`` (a ScheduleBudgetError past it), so a listing's work is bounded whatever
    the expression, zone and range."""
    schedule = job.spec.schedule
    if isinstance(schedule, CronSchedule):
        zone = schedule.zone
        expr = schedule.expr_obj
        wall, end_wall = _wall_bounds(schedule, since, until)
        seen: set[datetime] = set()
        while True:
            budget.spend()
            nxt = expr.next_wall(wall, until=end_wall, budget=budget)
            if nxt is None or nxt > end_wall:
                return
            wall = nxt
            label = f"{wall.isoformat(sep=' ')} {schedule.tz}"
            try:
                resolved = resolve_wall(wall, zone, schedule.gap, schedule.overlap)
                both = resolve_wall(wall, zone, schedule.gap, "twice")
            except OverflowError:  # a wall time of year 1 or 9999 that is no instant
                continue
            if not resolved:
                if since <= wall.replace(tzinfo=zone) <= until:
                    yield _Nominal(
                        label, None, "dst_skipped", "does not exist that day (gap: skip)"
                    )
                continue
            for r in resolved:
                if not since <= r.utc <= until:
                    continue
                if r.utc in seen:
                    yield _Nominal(label, r.utc, "deduplicated", r.note or "same instant")
                    continue
                seen.add(r.utc)
                dst = None
                if r.note and r.note.startswith("dst_gap"):
                    dst = "dst_moved"
                elif r.note and len(resolved) == 2:
                    dst = "dst_doubled"
                elif r.note and len(both) == 2:
                    dst = "dst_once"
                yield _Nominal(label, r.utc, dst, r.note, schedule.excluded_by_calendar(r.utc))
        return
    budget.spend()
    try:
        t = schedule.next_after(since - timedelta(microseconds=1))
    except OverflowError:  # since is the first representable instant
        t = schedule.next_after(since)
    while t is not None and t <= until:
        yield _Nominal(format_instant(t), t, None, None)
        budget.spend()
        t = schedule.next_after(t)


_FIRING_FATES = {
    FiringState.SUCCEEDED: ("fired", "ran and succeeded"),
    FiringState.QUEUED: ("fired", "queued to run"),
    FiringState.CLAIMED: ("fired", "held by a worker, not started yet"),
    FiringState.RUNNING: ("fired", "running"),
    FiringState.DEAD: ("failed", "ran and failed on every attempt (DEAD)"),
    FiringState.SKIPPED: ("skipped", "skipped by the overlap policy"),
    FiringState.MISSED: ("missed", "missed"),
    FiringState.CANCELLED: ("cancelled", "cancelled"),
}


def explain(
    job: Job,
    *,
    since: datetime,
    until: datetime,
    now: datetime,
    firings: Sequence[Firing],
    events: Sequence[JobEvent],
    budget: StepBudget | None = None,
) -> list[Occurrence]:
    """The fate of every nominal occurrence of ``job`` in ``[since, until]`` (at most
    MAX_OCCURRENCES). The walk's work is bounded by ``budget`` (default: a fresh
    :class:`StepBudget`): past it, :class:`~cronwheel.errors.ScheduleBudgetError`."""
    by_instant = {f.scheduled_for: f for f in firings}
    missed = [e for e in events if e.kind == "missed" and e.first_at and e.last_at]
    pauses = _pause_intervals(events, now)
    ended = _schedule_error(job, missed)
    missed = [e for e in missed if not (e.detail or "").startswith(SCHEDULE_ERROR)]
    pruned = next((e for e in events if e.kind == PRUNED_EVENT and e.first_at and e.last_at), None)
    out: list[Occurrence] = []
    for n in _nominal(job, since, until, StepBudget() if budget is None else budget):
        if len(out) >= MAX_OCCURRENCES:
            break
        occurrence = _fate(job, n, now, by_instant, missed, pauses)
        if pruned is not None and occurrence.detail.endswith(_NO_RECORD):
            occurrence = _pruned(occurrence, pruned)
        if ended is not None and occurrence.fate in ("upcoming", "not_due"):
            occurrence = _ended(occurrence, ended)
        out.append(occurrence)
    return out


def _pruned(o: Occurrence, event: JobEvent) -> Occurrence:
    """An occurrence with no record inside the range the retention policy pruned."""
    assert event.first_at is not None and event.last_at is not None
    if o.instant is None or not event.first_at <= o.instant <= event.last_at:
        return o
    counts = ", ".join(f"{n} {state}" for state, n in pruned_counts(event.detail).items())
    return Occurrence(
        nominal=o.nominal,
        instant=o.instant,
        fate="pruned",
        detail=f"history pruned: {event.count} firings between "
        f"{format_instant(event.first_at)} and {format_instant(event.last_at)} "
        f"were deleted by the retention policy ({counts})",
    )


def _schedule_error(job: Job, missed: list[JobEvent]) -> JobEvent | None:
    """The dispatcher's record that the job's schedule failed, since its last change."""
    for e in missed:
        if e.detail and e.detail.startswith(SCHEDULE_ERROR) and e.at >= job.updated_at:
            return e
    return None


def _ended(o: Occurrence, event: JobEvent) -> Occurrence:
    assert event.first_at is not None and event.detail is not None
    if o.instant is None or o.instant <= event.first_at:
        return o
    return Occurrence(
        nominal=o.nominal,
        instant=o.instant,
        fate="schedule_error",
        detail=f"the job ended: its instant after {format_instant(event.first_at)} could not "
        f"be computed ({event.detail.removeprefix(SCHEDULE_ERROR)}); fix its schedule",
    )


def _fate(
    job: Job,
    n: _Nominal,
    now: datetime,
    by_instant: dict[datetime, Firing],
    missed: list[JobEvent],
    pauses: list[tuple[datetime, datetime]],
) -> Occurrence:
    if n.instant is None or n.dst == "deduplicated":
        return Occurrence(
            nominal=n.label, instant=n.instant, fate=n.dst or "dst_skipped", detail=n.note or ""
        )
    t = n.instant
    prefix = f"{n.note}; " if n.note else ""
    firing = by_instant.get(t)
    if firing is not None:
        fate, text = _FIRING_FATES[firing.state]
        if firing.reason and firing.reason.startswith(OPERATOR_SKIP):
            text = firing.reason  # "skipped by <who>: <why>"
        elif firing.reason:
            text = f"{text}: {firing.reason}"
        if firing.note and firing.note.startswith("coalesced"):
            text = f"{text}; {firing.note}"
        if n.dst:
            fate = f"{fate} ({n.dst})"
        return Occurrence(
            nominal=n.label, instant=t, fate=fate, detail=prefix + text, firing_id=firing.id
        )
    if n.excluded is not None:
        return Occurrence(
            nominal=n.label,
            instant=t,
            fate="excluded_by_calendar",
            detail=f"{prefix}the calendar excludes this day: {n.excluded}",
        )
    for start, end in pauses:
        if start <= t < end:
            return Occurrence(
                nominal=n.label, instant=t, fate="paused", detail=f"{prefix}the job was paused"
            )
    for e in missed:
        assert e.first_at is not None and e.last_at is not None
        if e.first_at <= t <= e.last_at and e.detail and e.detail.startswith(COALESCED):
            return Occurrence(
                nominal=n.label,
                instant=t,
                fate="coalesced",
                detail=f"{prefix}no leader fired it in time; its catch-up was {e.detail} "
                "(the job's cap had no room for both)",
            )
        if e.first_at <= t <= e.last_at:
            policy = job.spec.policies.misfire.value
            return Occurrence(
                nominal=n.label,
                instant=t,
                fate="missed",
                detail=f"{prefix}no leader fired it in time; misfire policy "
                f"{policy} did not catch it up",
            )
    if job.spec.end_at is not None and t > job.spec.end_at:
        return Occurrence(
            nominal=n.label, instant=t, fate="not_due", detail="after the job's end_at bound"
        )
    if job.next_fire_at is None and job.remaining_runs == 0:
        return Occurrence(
            nominal=n.label,
            instant=t,
            fate="not_due",
            detail="after the job's last run (its max_runs were used)",
        )
    if t > now or (job.next_fire_at is not None and t >= job.next_fire_at):
        return Occurrence(
            nominal=n.label, instant=t, fate="upcoming", detail=prefix + "not yet due"
        )
    if job.spec.start_at is not None and t < job.spec.start_at:
        return Occurrence(
            nominal=n.label, instant=t, fate="not_due", detail="before the job's start_at bound"
        )
    if t <= job.created_at:
        return Occurrence(
            nominal=n.label, instant=t, fate="not_due", detail="before the job existed"
        )
    return Occurrence(
        nominal=n.label,
        instant=t,
        fate="not_due",
        detail=f"{prefix}{_NO_RECORD}",
    )


def _pause_intervals(events: Sequence[JobEvent], now: datetime) -> list[tuple[datetime, datetime]]:
    out: list[tuple[datetime, datetime]] = []
    start: datetime | None = None
    for e in sorted(events, key=lambda e: (e.at, e.id)):
        if e.kind == "paused" and start is None:
            start = e.at
        elif e.kind == "resumed" and start is not None:
            out.append((start, e.at))
            start = None
    if start is not None:
        out.append((start, now + timedelta(days=36500)))
    return out
