"""History retention: which finished firings a store may delete, and when.

A namespace has a policy (its own record, else :data:`DEFAULT_RETENTION`); a job may
override either half with its ``keep_for`` / ``keep_last`` policies. A finished
firing is kept while either half keeps it:

- ``keep_for``: it finished less than this long ago (default 7 days; 0: the age
  alone keeps nothing);
- ``keep_last``: it is one of the ``keep_last`` newest firings of its job with the
  same outcome (succeeded, dead, cancelled, skipped, missed), by scheduled instant, as
  Kubernetes' ``successfulJobsHistoryLimit``/``failedJobsHistoryLimit`` (default 1:
  the last success and the last failure of every recurring job stay).

A one-shot job (``at`` or ``now``, ``app.enqueue``) goes as a whole, its row with its
firing, once that firing is finished and older than ``keep_for``: ``keep_last`` does
not apply to it (its one firing is always its last).

Never deleted: a firing that is not terminal (scheduled, queued, claimed, running:
:func:`prunable` says no whatever its age), and a job that still has one. Nothing
else the scheduler needs lives in firings: misfire recovery reads the job's cursor
(``next_fire_at``) and the dispatcher's ``missed`` events, the fencing uniqueness of
``(job, instant)`` only matters for instants at or after the cursor (never pruned,
they are not finished), and an ``Idempotency-Key`` of ``POST /v1/firings`` lives as
long as the firing it names (a retry after that creates a new firing). What pruning
removes is summed per job into one ``pruned`` job event (counts per outcome, the
first and last instant), which ``jobs explain`` shows as ``history pruned``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cronwheel.domain.firing import TERMINAL_STATES, FiringState
from cronwheel.errors import ValidationError

DEFAULT_KEEP_FOR = timedelta(days=7)
DEFAULT_KEEP_LAST = 1
MAX_KEEP_LAST = 1000
MAX_KEEP_FOR = timedelta(days=36525)  # 100 years
ONE_SHOT_KINDS = frozenset({"at", "now"})
PRUNED_EVENT = "pruned"  # the job event kind that sums what pruning removed


def check_keep_for(value: Any, field: str = "keep_for") -> timedelta:
    if not isinstance(value, timedelta) or not timedelta(0) <= value <= MAX_KEEP_FOR:
        raise ValidationError("must be a duration from 0 to 100 years", field=field)
    return value


def check_keep_last(value: Any, field: str = "keep_last") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_KEEP_LAST:
        raise ValidationError(f"must be an integer from 0 to {MAX_KEEP_LAST}", field=field)
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Retention:
    """How long a namespace (or, resolved, a job) keeps its finished firings."""

    keep_for: timedelta = DEFAULT_KEEP_FOR
    keep_last: int = DEFAULT_KEEP_LAST

    def __post_init__(self) -> None:
        check_keep_for(self.keep_for)
        check_keep_last(self.keep_last)

    def to_dict(self) -> dict[str, Any]:
        return {"keep_for_s": self.keep_for.total_seconds(), "keep_last": self.keep_last}

    def describe(self) -> str:
        days = self.keep_for / timedelta(days=1)
        age = f"{days:g} days" if days >= 1 else f"{self.keep_for.total_seconds():g}s"
        return f"finished firings kept {age} and the last {self.keep_last} per outcome per job"

    def resolved(self, keep_for: timedelta | None, keep_last: int | None) -> Retention:
        """This (namespace) policy with a job's own overrides applied."""
        return Retention(
            keep_for=self.keep_for if keep_for is None else keep_for,
            keep_last=self.keep_last if keep_last is None else keep_last,
        )


DEFAULT_RETENTION = Retention()


def retention_with(base: Retention, changes: dict[str, Any]) -> Retention:
    """``base`` with some halves changed (``keep_for`` a timedelta or seconds,
    ``keep_last`` an integer); ValidationError names an unknown or bad one."""
    values: dict[str, Any] = {"keep_for": base.keep_for, "keep_last": base.keep_last}
    for name, value in changes.items():
        if name not in values:
            raise ValidationError("is not a retention setting (keep_for, keep_last)", field=name)
        if name == "keep_for" and isinstance(value, int | float) and not isinstance(value, bool):
            if not 0 <= value <= MAX_KEEP_FOR.total_seconds():
                raise ValidationError("must be a duration from 0 to 100 years", field=name)
            values[name] = timedelta(seconds=value)
        else:
            values[name] = value
    check_keep_for(values["keep_for"])
    check_keep_last(values["keep_last"])
    return Retention(keep_for=values["keep_for"], keep_last=values["keep_last"])


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """A firing as pruning sees it: its state and finish, whether its job is a one-shot,
    and how many firings of its job with the same outcome are newer (counted up to the
    policy's ``keep_last``)."""

    state: FiringState
    finished_at: datetime | None
    one_shot: bool
    newer_same_outcome: int


def prunable(c: Candidate, policy: Retention, now: datetime) -> bool:
    """Whether the firing may be deleted now under ``policy`` (the job's resolved one)."""
    if c.state not in TERMINAL_STATES or c.finished_at is None:
        return False
    if now - c.finished_at < policy.keep_for:
        return False
    if c.one_shot:
        return True
    return c.newer_same_outcome >= policy.keep_last


@dataclass(slots=True)
class PruneReport:
    """What one pruning run deleted (or, ``dry_run``, would delete): firings per outcome,
    one-shot jobs, the firings looked at, and whether the pass reached its end."""

    dry_run: bool
    firings: dict[str, int] = field(default_factory=dict)
    jobs: int = 0
    scanned: int = 0
    partitions: int = 0  # whole partitions dropped (PostgreSQL: store/postgres/partitions.py)
    done: bool = False
    cursor: tuple[datetime, int] | None = None  # where the next batch of the pass starts

    @property
    def deleted(self) -> int:
        return sum(self.firings.values())

    def add(self, other: PruneReport) -> None:
        for state, n in other.firings.items():
            self.firings[state] = self.firings.get(state, 0) + n
        self.jobs += other.jobs
        self.scanned += other.scanned
        self.partitions += other.partitions
        self.done = other.done
        self.cursor = other.cursor

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "firings": dict(sorted(self.firings.items())),
            "firings_total": self.deleted,
            "jobs": self.jobs,
            "scanned": self.scanned,
            "partitions": self.partitions,
            "done": self.done,
        }


def pruned_detail(counts: dict[str, int]) -> str:
    """A ``pruned`` event's detail: its counts per outcome (``succeeded=12 dead=1``)."""
    return " ".join(f"{state}={n}" for state, n in sorted(counts.items()) if n)


def pruned_counts(detail: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in (detail or "").split():
        state, _, n = part.partition("=")
        if n.isdigit():
            out[state] = int(n)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class PrunedSummary:
    """A job's ``pruned`` event: what pruning removed of its history, summed."""

    first_at: datetime
    last_at: datetime
    counts: dict[str, int]

    @property
    def count(self) -> int:
        return sum(self.counts.values())

    @property
    def detail(self) -> str:
        return pruned_detail(self.counts)


def merge_pruned(old: PrunedSummary | None, removed: list[tuple[str, datetime]]) -> PrunedSummary:
    """``old`` with more removed firings (outcome, scheduled instant) added."""
    counts = dict(old.counts) if old is not None else {}
    instants = [at for _, at in removed]
    if old is not None:
        instants += [old.first_at, old.last_at]
    for state, _ in removed:
        counts[state] = counts.get(state, 0) + 1
    return PrunedSummary(first_at=min(instants), last_at=max(instants), counts=counts)


def add_pruned(old: PrunedSummary | None, add: PrunedSummary) -> PrunedSummary:
    """``old`` with another summary's firings (a whole dropped day's) added."""
    if old is None:
        return add
    counts = dict(old.counts)
    for state, n in add.counts.items():
        counts[state] = counts.get(state, 0) + n
    return PrunedSummary(
        first_at=min(old.first_at, add.first_at),
        last_at=max(old.last_at, add.last_at),
        counts=counts,
    )


def pass_bounds(
    policies: list[Retention], job_keep_for: timedelta | None, job_keep_last: int | None
) -> tuple[timedelta, int]:
    """The shortest keep_for in use (``policies``: those of the namespaces that have
    jobs, each its own or the default; and the jobs' overrides) and the longest
    keep_last (any of those, the default's, the jobs' overrides): a pass looks only at
    firings finished longer ago than the first, and counts newer same-outcome firings
    up to the second. (Until 2026-12-07 the default's keep_for counted even where every
    namespace had its own: a store whose one namespace kept 30 days had each pass read
    23 days of firings to keep them all, docs/benchmarks.md "The retention pass's
    walk bounded by the policies in use".)"""
    keep_for = min([p.keep_for for p in policies] or [DEFAULT_RETENTION.keep_for])
    keep_last = max([p.keep_last for p in policies] + [DEFAULT_RETENTION.keep_last, 1])
    if job_keep_for is not None:
        keep_for = min(keep_for, job_keep_for)
    if job_keep_last is not None:
        keep_last = max(keep_last, job_keep_last)
    return keep_for, keep_last
