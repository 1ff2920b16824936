"""The memory store's tables: plain rows under one lock.

Rows keep the columns of the SQL stores (instants as integer microseconds UTC, JSON
documents as text) and can be read by column name, so the shared decoders of
``store/codec.py`` turn them into domain values exactly as they turn SQLite rows.
Every value handed out is decoded from a row: callers never hold a live row.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cronwheel.domain.calendars import CalendarRecord
from cronwheel.domain.quotas import Quota
from cronwheel.store.protocol import ApiToken


class _Row:
    """Column access by name (``row["due_at"]``), as codec.Row expects."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


# the states a worker holds a firing in (its claim token and lease count)
HELD = ("claimed", "running")
# the states of a firing not finished yet (the index of active firings keeps these)
ACTIVE = ("queued", "claimed", "running")


@dataclass(slots=True, kw_only=True)
class JobRow(_Row):
    id: int
    namespace: str
    name: str
    task: str
    schedule: str
    payload: str
    policies: str
    spec_hash: str
    priority: float
    max_attempts: int
    visibility_us: int
    paused: int
    next_fire_at: int | None
    created_at: int
    updated_at: int
    shard: int
    max_concurrency: int | None
    overlap: str
    max_buffer: int
    cancel_grace_us: int
    start_deadline_us: int | None
    bounds: str
    remaining_runs: int | None
    trace_context: str | None = None
    last_fired_at: int | None = None
    missed_total: int = 0


@dataclass(slots=True, kw_only=True)
class FiringRow(_Row):
    id: int
    job_id: int
    namespace: str
    job_name: str
    task: str
    payload: str
    scheduled_for: int
    due_at: int
    vdeadline: int
    state: str
    max_attempts: int
    priority: float
    visibility_us: int
    enqueued_at: int
    enqueued_epoch: int | None
    shard: int
    note: str | None = None
    overlap_override: str | None = None
    attempt: int = 0
    claim_token: str | None = None
    worker_id: str | None = None
    lease_until: int | None = None
    started_at: int | None = None
    finished_at: int | None = None
    error: str | None = None
    cancel_requested_at: int | None = None
    reason: str | None = None
    buffered_at: int | None = None
    claimed_at: int | None = None


@dataclass(slots=True, kw_only=True)
class AttemptRow(_Row):
    """A recorded attempt (failed, lease expired): ``firing_attempts``."""

    firing_id: int
    attempt: int
    worker_id: str | None
    claimed_at: int | None
    started_at: int | None
    finished_at: int
    outcome: str
    error: str | None


@dataclass(slots=True, kw_only=True)
class LeaseRow(_Row):
    name: str
    holder: str
    epoch: int
    expires_at: int
    acquired_at: int


@dataclass(slots=True, kw_only=True)
class NodeRow(_Row):
    id: str
    kind: str
    hostname: str
    pid: int
    started_at: int
    heartbeat_at: int
    wake_addr: str | None
    info: str  # JSON text: a caller's later change to its dict never reaches the store
    clock_offset: float | None = None
    clock_uncertainty: float | None = None
    clock_flag: str | None = None
    tz_source: str | None = None
    tz_version: str | None = None


@dataclass(slots=True, kw_only=True)
class EventRow(_Row):
    id: int
    job_id: int
    at: int
    kind: str
    first_at: int | None
    last_at: int | None
    count: int
    exact: bool
    detail: str | None


@dataclass(slots=True, kw_only=True)
class IdempotencyRow:
    request_hash: str
    firing_id: int


@dataclass(slots=True)
class MemoryData:
    """Everything one in-memory store holds. Several :class:`MemoryStore` handles may
    share one (each with its own clock, as processes share a SQLite file); ``lock``
    makes each store method one atomic step, as a transaction does."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    jobs: dict[int, JobRow] = field(default_factory=dict)  # by id, in id order
    job_names: dict[tuple[str, str], int] = field(default_factory=dict)
    firings: dict[int, FiringRow] = field(default_factory=dict)  # by id, in id order
    firing_keys: dict[tuple[int, int], int] = field(default_factory=dict)  # (job, instant)
    events: dict[int, EventRow] = field(default_factory=dict)
    attempts: dict[tuple[int, int], AttemptRow] = field(default_factory=dict)  # (firing, n)
    leases: dict[str, LeaseRow] = field(default_factory=dict)
    nodes: dict[str, NodeRow] = field(default_factory=dict)
    served_tasks: dict[str, tuple[int, int]] = field(default_factory=dict)  # (first, last) µs
    tokens: dict[int, ApiToken] = field(default_factory=dict)
    id_key: bytes = field(default_factory=lambda: secrets.token_bytes(32))  # domain/ids.py
    idempotency: dict[tuple[str, str], IdempotencyRow] = field(default_factory=dict)
    # ids of firings that may be QUEUED or RUNNING (a superset: the scans of work to do
    # read these and drop the ones that have ended); a firing enters on insert and redrive
    maybe_active: set[int] = field(default_factory=set)
    fair_clocks: dict[str, int] = field(default_factory=dict)  # µs, per namespace
    quotas: dict[str, Quota] = field(default_factory=dict)  # a namespace's own quota
    calendars: dict[tuple[str, str], CalendarRecord] = field(default_factory=dict)
    # quota counters: (namespace, quota, window start µs; 0 for ever) -> count
    quota_usage: dict[tuple[str, str, int], int] = field(default_factory=dict)
    retention: dict[str, tuple[int, int]] = field(default_factory=dict)  # (keep_for µs, keep_last)
    jobs_version: int = 0
    tzdata: str | None = None  # the meta row 'tzdata': the cluster's tz database (JSON)
    tzdata_files: str | None = None  # the meta row 'tzdata_files': its zone files (JSON)
    wakeups: list[Callable[[], None]] = field(default_factory=list)
    _ids: dict[str, int] = field(default_factory=dict)

    def next_id(self, table: str) -> int:
        """Ids of a table count from 1 and are never reused (AUTOINCREMENT)."""
        n = self._ids.get(table, 0) + 1
        self._ids[table] = n
        return n

    def firings_of(self, job_id: int) -> list[FiringRow]:
        return [f for f in self.firings.values() if f.job_id == job_id]

    def running_count(self, job_id: int) -> int:
        """What a job's cap counts: its held (claimed) and running firings."""
        return sum(1 for f in self.firings_of(job_id) if f.state in HELD)

    def active(self) -> list[FiringRow]:
        """The QUEUED, CLAIMED and RUNNING firings, in id order (the others leave the
        index)."""
        rows = []
        for fid in sorted(self.maybe_active):
            f = self.firings.get(fid)
            if f is not None and f.state in ACTIVE:
                rows.append(f)
            else:
                self.maybe_active.discard(fid)
        return rows

    def delete_firings(self, gone: set[int]) -> None:
        """Firings and what cascades from them: their attempts and idempotency keys."""
        for fid in gone:
            f = self.firings.pop(fid)
            del self.firing_keys[(f.job_id, f.scheduled_for)]
        for attempt in [k for k in self.attempts if k[0] in gone]:
            del self.attempts[attempt]
        for key in [k for k, v in self.idempotency.items() if v.firing_id in gone]:
            del self.idempotency[key]

    def delete_job(self, job: JobRow) -> None:
        """The job and everything that cascades from it: firings, events, and the
        idempotency keys of its firings."""
        self.delete_firings({f.id for f in self.firings_of(job.id)})
        for eid in [e.id for e in self.events.values() if e.job_id == job.id]:
            del self.events[eid]
        del self.job_names[(job.namespace, job.name)]
        del self.jobs[job.id]
