"""Per-namespace quotas: what one namespace may take of a shared cluster.

A namespace without a quota record of its own has :data:`DEFAULT_QUOTA`. The store
enforces every quota inside the transaction of the write it guards (store/core/
quotas.py), so that two API servers cannot both pass one check:

- ``jobs``: registered jobs (``now`` one-shots made by an immediate enqueue are
  counted in ``firings_per_minute`` instead); a create over it is refused (422).
- ``min_interval``: the shortest gap between two consecutive firings of a job's
  schedule, checked when it is registered or its schedule changes (422, field
  ``schedule``).
- ``firings_per_minute``: firings created in one minute of the store's clock. An
  immediate enqueue, a trigger or a backfill over it is refused (429 with
  Retry-After); a scheduled firing the leader enqueues over it is not dropped: it is
  stored SKIPPED with the reason ``quota: firings_per_minute`` (its fate is visible).
- ``running``: firings held by workers (CLAIMED or RUNNING); a claim takes no more of
  a namespace's firings than that: the others wait in the queue. Not limited by
  default (:data:`UNLIMITED`): the claim order (virtual deadlines) already shares the
  workers between namespaces, and a limit costs every claim of the namespace a lock
  and a count (one PostgreSQL ``bench drain``: 5,203 jobs/s limited, 8,393 not);
  set one to cap a namespace's share of the workers.
- ``backfill``: instants of one trigger/backfill call (422), and
  ``backfill_per_day``: firings they add per UTC day (429 with Retry-After).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from cronwheel.domain.instants import format_duration, parse_duration
from cronwheel.domain.schedules import CronSchedule, EverySchedule, Schedule
from cronwheel.errors import (
    CronwheelError,
    PermissionDeniedError,
    QuotaExceededError,
    ValidationError,
)

# the instants of a schedule looked at for its shortest gap (see min_gap)
GAP_SCAN = 200
MINUTE = timedelta(minutes=1)
DAY = timedelta(days=1)
_MAX_COUNT = 1_000_000_000
# a count quota at this value is not limited (the default ``running``: see above)
UNLIMITED = _MAX_COUNT


@dataclass(frozen=True, slots=True, kw_only=True)
class Quota:
    """One namespace's limits. Counts are at least 0 (0 refuses everything of that
    kind); ``min_interval`` is a positive duration."""

    jobs: int
    firings_per_minute: int
    min_interval: timedelta
    running: int
    backfill: int
    backfill_per_day: int

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["min_interval"] = format_duration(self.min_interval)
        return out


# Defaults: they protect a shared cluster from one namespace (a firing every
# millisecond, endless backfills, a queue of millions held by one tenant's claims)
# yet never bite the design's load in one namespace: a million jobs a day, 10,000
# firings due in one second, and the benchmarks (scale: 1,000,000 jobs; herd: 10,000
# at one instant; drain: 20,000 immediate firings; limit: 50,000 firings enqueued;
# cron-mix: 100,000 cron jobs whose busiest minute has 66,670 firings,
# enqueued 5 s ahead so that one minute's window holds one second-0 crowd).
# min_interval 100 ms refuses the millisecond flood (at most 10 firings a second from
# one job) and allows the cron grammar's finest step (1 s) and the sub-second `every`
# schedules applications use (200 ms).
DEFAULT_QUOTA = Quota(
    jobs=2_000_000,
    firings_per_minute=100_000,
    min_interval=timedelta(milliseconds=100),
    running=UNLIMITED,
    backfill=1000,
    backfill_per_day=100_000,
)

QUOTA_NAMES = tuple(f.name for f in fields(Quota))
# the counter of scheduled firings the leader stored SKIPPED over firings_per_minute
SKIPPED = "quota_skipped"
SKIP_REASON = "quota: firings_per_minute"
COUNT_QUOTAS = tuple(n for n in QUOTA_NAMES if n != "min_interval")


def quota_with(base: Quota, changes: dict[str, Any]) -> Quota:
    """``base`` with ``changes`` (counts as ints, ``min_interval`` as a timedelta or a
    duration text such as ``"1s"``), each checked; ValidationError names the quota."""
    values: dict[str, Any] = {}
    for name, value in changes.items():
        if name not in QUOTA_NAMES:
            raise ValidationError(
                f"unknown quota {name!r} (expected one of {', '.join(QUOTA_NAMES)})", field=name
            )
        if value is None:
            continue
        if name == "min_interval":
            interval = parse_duration(value, field=name) if isinstance(value, str) else value
            if not isinstance(interval, timedelta) or interval <= timedelta(0):
                raise ValidationError("expected a positive duration such as '1s'", field=name)
            values[name] = interval
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"expected an integer, got {value!r}", field=name)
        if not 0 <= value <= _MAX_COUNT:
            raise ValidationError(f"must be between 0 and {_MAX_COUNT}", field=name)
        values[name] = value
    return replace(base, **values)


def raised(base: Quota, new: Quota) -> str | None:
    """The first limit ``new`` loosens against ``base`` (a count up, ``min_interval``
    down), or None when it only keeps or tightens them."""
    for name in QUOTA_NAMES:
        before, after = getattr(base, name), getattr(new, name)
        if (after < before) if name == "min_interval" else (after > before):
            return name
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaUse:
    """A namespace's quota and what it uses of it now: ``used`` has a number per
    count quota (``firings_per_minute``: this minute's; ``backfill_per_day``:
    today's; ``backfill``: 0, a per-call bound; and :data:`SKIPPED`, the scheduled
    firings stored SKIPPED over the quota so far) and ``custom`` says whether the
    namespace has a record of its own (else it has the defaults)."""

    namespace: str
    quota: Quota
    used: dict[str, int]
    custom: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "custom": self.custom,
            "limits": self.quota.to_dict(),
            "used": {n: self.used.get(n, 0) for n in COUNT_QUOTAS},
            "skipped_firings": self.used.get(SKIPPED, 0),
        }


def min_gap(schedule: Schedule, start: datetime | None) -> timedelta | None:
    """The shortest gap between two consecutive instants of ``schedule`` among its
    first :data:`GAP_SCAN` instants after ``start`` (None: one instant or none).
    Exact for ``every`` (its interval); for cron a bounded look with the schedule's
    own next-instant function (a rare shorter gap beyond the look is left to the
    firings-per-minute quota)."""
    if isinstance(schedule, EverySchedule):
        return schedule.interval
    if not isinstance(schedule, CronSchedule) or start is None:
        return None
    return _cron_gap(schedule, start)


@lru_cache(maxsize=4096)
def _cron_gap(schedule: CronSchedule, start: datetime) -> timedelta | None:
    best: timedelta | None = None
    try:
        previous = schedule.next_after(start - timedelta(microseconds=1))
        for _ in range(GAP_SCAN):
            if previous is None:
                break
            following = schedule.next_after(previous)
            if following is None:
                break
            gap = following - previous
            best = gap if best is None or gap < best else best
            previous = following
    except CronwheelError:  # a schedule past its step budget: what was seen stands
        return best
    return best


def only_tightened(base: Quota, new: Quota) -> Quota:
    """``new``, unless it raises a limit of ``base``: PermissionDeniedError naming it
    (a namespace may lower its own quota; only the cluster's operator raises one)."""
    loosened = raised(base, new)
    if loosened is not None:
        raise PermissionDeniedError(
            f"a namespace token may only lower its quota; {loosened} is raised by the "
            "cluster's operator (cronwheel quota set)",
            field=loosened,
        )
    return new


def check_interval(quota: Quota, namespace: str, gap: timedelta | None) -> None:
    """422 (field ``schedule``) when the schedule's shortest gap is under the quota."""
    if gap is not None and gap < quota.min_interval:
        raise QuotaExceededError(
            f"the schedule fires {format_duration(gap)} apart; this namespace's quota "
            f"min_interval is {format_duration(quota.min_interval)}",
            quota="min_interval",
            namespace=namespace,
            field="schedule",
        )


def refuse_count(quota: str, limit: int, *, namespace: str, what: str) -> QuotaExceededError:
    """The 422 of a count quota (jobs, backfill per call) that waiting will not free."""
    return QuotaExceededError(
        f"{what} would exceed this namespace's quota {quota} of {limit}",
        quota=quota,
        namespace=namespace,
    )


def refuse_rate(quota: str, limit: int, *, namespace: str, retry_after: int) -> QuotaExceededError:
    """The 429 of a rate quota: the window frees up in ``retry_after`` seconds."""
    retry_after = max(1, retry_after)
    return QuotaExceededError(
        f"this namespace's quota {quota} of {limit} is used up; retry in {retry_after} s",
        quota=quota,
        namespace=namespace,
        retry_after=retry_after,
    )
