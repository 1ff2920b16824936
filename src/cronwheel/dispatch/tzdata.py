"""One tz database across the cluster: the leader's side.

Every node computes instants with its own process's tz database
(``domain.tzdb``) and reports it in its node record. The leader records the
cluster's in the store (:class:`~cronwheel.store.records.TzRecord`: source,
version, a digest of each zone's compiled file). Two rules follow:

- **Leadership** (:func:`leadership_refusal`): a node whose version differs from
  the recorded one does not take the lease while a live scheduler node (one that
  heartbeated within ``alive_within``) reports the recorded version. Once none
  does (the fleet moved to the new version), it may lead.
- **Adoption** (:func:`adopt`): a leader whose version differs from the recorded
  one re-resolves, before it fires anything, the cursor of every cron job whose
  zone's file differs between the two (its digest), records each moved firing as a
  ``tz_moved`` job event with both instants (``move_cursors``, one fenced
  transaction per page of jobs), then records its version and its zone files
  (``record_tz``, fenced). A leader that loses the lease half way leaves the version
  unrecorded: the next one re-resolves again, and finds the moved cursors where it
  would put them (no second move, no second event).

Re-resolving a cursor: the cursor was computed as the first instant after a base,
with no instant of the schedule between the two: the last occurrence the cursor
passed (fired, or dropped by a misfire policy), or the moment the job was
registered, changed or bounded by its start. The latest of those known before the
cursor is such a base. An occurrence is a wall time: under the new rules it is the
instant of that same wall time (the old rules are the zone files the old version's
leader stored; the latest instant when the wall time occurs twice or not at all), so
an occurrence that already fired never fires again. A moment stays the same instant.
The new cursor is the first instant after the base under the new rules (bounded by
the job's end). Under unchanged rules this is the old cursor, so an unaffected zone
never moves; each computation has its own step budget (a schedule that cannot be
computed keeps its cursor, and is counted).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronwheel.domain.firing import format_instant
from cronwheel.domain.models import Job, JobId, Lease
from cronwheel.domain.policies import bounded
from cronwheel.domain.schedules import CronSchedule
from cronwheel.domain.tzdb import TzDatabase, zone_digests, zone_files, zone_from_bytes
from cronwheel.errors import InvalidScheduleError
from cronwheel.store.protocol import CursorMove, TzPort, TzRecord

_TINY = timedelta(microseconds=1)
# jobs read per page while re-resolving (each page renews the lease if due)
ADOPT_PAGE = 500


def leadership_refusal(store: TzPort, mine: TzDatabase, *, alive_within: timedelta) -> str | None:
    """Why this node must not take the lease (None: it may): its tz database's version
    differs from the cluster's, and a live scheduler node reports the cluster's."""
    record = store.tz_record()
    if record is None or record.version == mine.version:
        return None
    live = sorted(
        n.id
        for n in store.list_nodes(alive_within=alive_within)
        if n.kind == "scheduler" and n.tz_version == record.version
    )
    if not live:
        return None
    shown = ", ".join(live[:3]) + (f" and {len(live) - 3} more" if len(live) > 3 else "")
    return (
        f"this node's tz database {mine.describe()} differs from the cluster's "
        f"{record.describe()}, which live scheduler node(s) use: {shown}"
    )


@dataclass(slots=True)
class Adoption:
    """What adopting a tz database did."""

    old: TzRecord | None
    new: TzRecord
    zones: list[str] = field(default_factory=list)  # zones whose file differs
    moves: list[CursorMove] = field(default_factory=list)  # the cursors re-resolved
    moved: list[JobId] = field(default_factory=list)  # those written (not changed meanwhile)
    failed: int = 0  # cursors that could not be recomputed (kept)


def adopt(
    store: TzPort,
    lease: Lease,
    mine: TzDatabase,
    *,
    keep_lease: Callable[[], None],
    page: int = ADOPT_PAGE,
) -> Adoption | None:
    """Make ``mine`` the cluster's tz database (see the module docstring); None when it
    already is. Raises LeaseLostError if the lease is lost meanwhile (the pages moved so
    far stay moved, the version is not recorded: the next leader re-resolves)."""
    old = store.tz_record()
    if old is not None and old.version == mine.version:
        return None
    digests = zone_digests(mine)
    new = TzRecord(source=mine.source, version=mine.version, zones=digests)
    done = Adoption(old=old, new=new)
    if old is not None:  # none recorded before: no rules to compare with
        done.zones = sorted(z for z, d in digests.items() if old.zones.get(z) != d)
    old_files = store.tz_zone_files() if done.zones else {}
    old_zones: dict[str, ZoneInfo | None] = {}
    after = 0
    while done.zones:
        keep_lease()
        rows = store.tz_zone_jobs(done.zones, after_id=after, limit=page)
        moves: list[CursorMove] = []
        for job, last_missed in rows:
            tz = str(job.spec.schedule.to_dict().get("tz"))
            if tz not in old_zones:
                data = old_files.get(tz)
                old_zones[tz] = None if data is None else zone_from_bytes(tz, data)
            try:
                move = reresolve(
                    job, last_missed, old_version=_version(old), new=mine, old_zone=old_zones[tz]
                )
            except InvalidScheduleError:
                done.failed += 1
                continue
            if move is not None:
                moves.append(move)
        keep_lease()
        done.moved += store.move_cursors(lease, moves)
        done.moves += moves
        if len(rows) < page:
            break
        after = rows[-1][0].id
    keep_lease()
    store.record_tz(lease, new, zone_files(mine))
    return done


def _version(record: TzRecord | None) -> str:
    return "?" if record is None else record.version


def reresolve(
    job: Job,
    last_missed: datetime | None,
    *,
    old_version: str,
    new: TzDatabase,
    old_zone: ZoneInfo | None = None,
) -> CursorMove | None:
    """The move of ``job``'s cursor under this process's tz database (None: it stays).
    ``old_zone``: the job's zone under the old rules (None: unknown; occurrences are
    then kept as instants). Raises InvalidScheduleError when the new instant cannot be
    computed."""
    schedule = job.spec.schedule
    cursor = job.next_fire_at
    if cursor is None or not isinstance(schedule, CronSchedule):
        return None
    zone = schedule.zone
    start = None if job.spec.start_at is None else job.spec.start_at - _TINY
    occurrences = (job.last_fired_at, last_missed)
    moments = (job.created_at, job.updated_at, start)
    below = [_same_wall(t, old_zone, zone) for t in occurrences if t is not None and t < cursor]
    below += [t for t in moments if t is not None and t < cursor]
    if not below:
        return None
    instant = bounded(schedule.next_after, end_at=job.spec.end_at)(max(below))
    if instant == cursor:
        return None
    shown = "none (the schedule ends)" if instant is None else format_instant(instant)
    return CursorMove(
        job_id=job.id,
        namespace=job.namespace,
        job=job.name,
        old=cursor,
        new=instant,
        detail=(
            f"tz database {old_version} -> {new.version}: the rules of {schedule.tz} "
            f"changed; the firing at {format_instant(cursor)} moved to {shown}"
        ),
    )


def _same_wall(instant: datetime, old_zone: ZoneInfo | None, zone: ZoneInfo) -> datetime:
    """The instant of ``instant``'s wall time under the old rules, under the new ones: the
    same occurrence (first or second) of a wall time both repeat, else the later instant
    of one the new rules repeat or skip."""
    if old_zone is None:
        return instant
    local = instant.astimezone(old_zone)
    wall = local.replace(tzinfo=None)
    new0, new1 = (wall.replace(tzinfo=zone, fold=f) for f in (0, 1))
    if new0.utcoffset() == new1.utcoffset():
        return new0.astimezone(UTC)
    old0, old1 = (wall.replace(tzinfo=old_zone, fold=f) for f in (0, 1))
    repeated_now = _offset(new0) > _offset(new1)  # else skipped: a gap
    if repeated_now and old0.utcoffset() != old1.utcoffset():
        return (new1 if local.fold else new0).astimezone(UTC)
    return max(new0.astimezone(UTC), new1.astimezone(UTC))


def _offset(local: datetime) -> timedelta:
    offset = local.utcoffset()
    assert offset is not None
    return offset
