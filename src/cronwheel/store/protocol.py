"""The Store ports: the single source of truth, behind semantic methods.

Split by who uses it: :class:`DispatchPort`, :class:`WorkerPort`, :class:`JobsPort` and
:class:`ApiJobsPort` (jobs and firings), :class:`AdminPort` and :class:`ApiAdminPort`
(schema, status, nodes, tokens); each component is typed against its port;
:class:`Store` and :class:`ApiStore`, their unions, are what an implementation provides.

Three implementations (SQLite, PostgreSQL, memory) pass one contract suite
(``tests/contract``; the state machine in ``test_transitions.py``). They all keep:

- Instants in and out are aware UTC datetimes. Expiry of leases and claims is
  judged by the *store's* clock (``now()`` in SQL on PostgreSQL; on SQLite,
  whose processes share one host, and in memory, the clock the store was built with).
- Every state change is a compare-and-swap: an update that matches no row
  changes nothing and is reported, never silently retried against newer state.
- Every leader write carries its :class:`Lease` and checks holder, epoch and
  expiry in the same transaction; a mismatch raises :class:`LeaseLostError`
  and writes nothing.
- Transient failures (locked database, lost connection) raise
  :class:`StoreUnavailableError` after bounded internal retries; callers back
  off and try again. They are never reported as lost work.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol

from cronwheel.domain.attempts import Attempt
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import (
    Firing,
    FiringId,
    Job,
    JobEvent,
    JobId,
    JobSpec,
    Lease,
    NodeInfo,
)
from cronwheel.domain.results import (  # re-exported: the stores import it from here
    CancelResult as CancelResult,  # noqa: PLC0414
)
from cronwheel.domain.skips import SkipResult
from cronwheel.store.async_port import AsyncCalls  # re-exported (__all__)
from cronwheel.store.bulk_port import BulkPort as BulkPort  # noqa: PLC0414 (JobsPort's)
from cronwheel.store.calendar_port import CalendarChange, CalendarPort  # re-exported
from cronwheel.store.history_port import HistoryPort  # re-exported (__all__)
from cronwheel.store.quota_port import QuotaPort  # re-exported (__all__)
from cronwheel.store.records import (  # re-exported (__all__): callers import them here
    JOB_STATES,
    SERVED_TASKS_REFRESH,
    TOKEN_ROLES,
    UNSERVED_SCAN,
    WORKER_ALIVE_WITHIN,
    AddedFirings,
    ApiToken,
    Completion,
    CursorMove,
    EnqueueResult,
    JobAdvance,
    PlannedFiring,
    ServedTask,
    StoreStatus,
    TzRecord,
)
from cronwheel.store.retention_port import RetentionPort  # re-exported (__all__)
from cronwheel.store.tz_port import TzPort  # re-exported (__all__)
from cronwheel.store.worker_port import WorkerPort  # re-exported (__all__)

__all__ = [
    "DISPATCHER_LEASE",
    "JOB_STATES",
    "SERVED_TASKS_REFRESH",
    "TOKEN_ROLES",
    "UNSERVED_SCAN",
    "WORKER_ALIVE_WITHIN",
    "AddedFirings",
    "AdminPort",
    "ApiAdminPort",
    "ApiJobsPort",
    "ApiStore",
    "ApiToken",
    "AsyncCalls",
    "CalendarChange",
    "CalendarPort",
    "CancelResult",
    "Completion",
    "CursorMove",
    "DispatchPort",
    "EnqueueResult",
    "HistoryPort",
    "JobAdvance",
    "JobsPort",
    "PlannedFiring",
    "QuotaPort",
    "RetentionPort",
    "ServedTask",
    "Store",
    "StoreStatus",
    "TzPort",
    "TzRecord",
    "WorkerPort",
]

DISPATCHER_LEASE = "dispatcher"


class DispatchPort(TzPort, RetentionPort, Protocol):
    """The dispatcher's port: leadership, due jobs, fenced enqueues, the reaper (and, from
    TzPort, the cluster's tz database; from RetentionPort, the retention pass)."""

    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> Lease | None:
        """Renew the lease if ``holder`` holds it unexpired, else take it over if it has
        expired (epoch + 1). Returns the lease held afterwards, or None if another holder
        has it."""
        ...

    def release_lease(self, lease: Lease) -> None:
        """Give the lease up early (clean shutdown) if still held by this holder and epoch."""
        ...

    def jobs_version(self) -> int:
        """A number that changes whenever a job is created, changed, paused or deleted."""
        ...

    def due_jobs(
        self, horizon: datetime, *, limit: int, after: tuple[datetime, int] | None = None
    ) -> list[Job]:
        """Unpaused jobs with ``next_fire_at <= horizon``, ordered by ``(next_fire_at, id)``
        and after ``after`` in that order (keyset paging): an index range scan."""
        ...

    def enqueue(self, lease: Lease, advances: Sequence[JobAdvance]) -> EnqueueResult:
        """In ONE transaction: check ``lease`` (holder, epoch, unexpired by the store's
        clock) or raise LeaseLostError; for each advance, CAS the job's cursor and, if it
        moved, insert its firings QUEUED (a duplicate ``(job_id, scheduled_for)`` is
        ignored and counted) and record its missed ranges."""
        ...

    def requeue_expired(self, *, limit: int = 1000) -> int:
        """Reaper: RUNNING firings whose claim lease has expired go back to QUEUED (or DEAD
        when attempts are exhausted; the attempt is recorded as expired), except those whose
        cancellation was requested: their worker is gone before the handler stopped, and
        they become CANCELLED (a cancelled firing is never run again); RUNNING firings
        whose cancellation was requested more than their job's ``cancel_grace`` ago become
        CANCELLED (lease revoked: the worker's late result is rejected); QUEUED firings
        past their start deadline become MISSED. Returns the count of changes."""
        ...

    def upkeep(self) -> None:
        """The store's own upkeep, run by the leader about once a second, away from the
        commits firings wait on: SQLite checkpoints its write-ahead log there (else the
        commit of a claim or a start that takes the log past its threshold runs the
        checkpoint, 5-9 ms, before it returns); the other stores have none."""
        ...


class JobsPort(BulkPort, Protocol):
    """Jobs and firings for the Python API and the CLI."""

    def create_job(self, spec: JobSpec, *, first_fire_at: datetime | None) -> Job:
        """Insert a job whose cursor starts at ``first_fire_at``.

        Raises ConflictError when ``(namespace, name)`` exists.
        """
        ...

    def create_jobs(self, items: Sequence[tuple[JobSpec, datetime | None]]) -> int:
        """Bulk registration: insert every ``(spec, first_fire_at)`` in one transaction, or
        none (ConflictError if any name exists). Returns the count. The fast path for
        large registrations: no per-job round trip."""
        ...

    def upsert_job(self, spec: JobSpec, *, first_fire_at: datetime | None) -> tuple[Job, bool]:
        """Create, or replace the spec of the job with this name; return (job, changed).

        The same spec twice is a no-op (``changed`` False, cursor untouched). A
        changed schedule moves the cursor to ``first_fire_at``.
        """
        ...

    def get_job(self, namespace: str, name: str) -> Job:
        """Raises JobNotFoundError."""
        ...

    def get_job_by_id(self, job_id: JobId) -> Job:
        """Raises JobNotFoundError."""
        ...

    def list_jobs(
        self,
        *,
        namespace: str | None = None,
        name_prefix: str | None = None,
        task: str | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[Job]:
        """Jobs ordered by id, those with ``id > after_id`` (cursor pagination)."""
        ...

    def set_paused(self, namespace: str, name: str, paused: bool) -> Job:
        """Pause or resume. Resuming keeps the cursor: missed instants follow the misfire
        policy. Each call records a ``paused``/``resumed`` job event (for ``explain``)."""
        ...

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a job and its firing history. Raises JobNotFoundError."""
        ...

    def skip_occurrences(
        self, namespace: str, name: str, instants: Sequence[datetime], reason: str
    ) -> list[SkipResult]:
        """Skip occurrences without pausing the job, in one transaction; a result per
        instant. An instant with no firing yet gets one born SKIPPED with ``reason``
        (the leader's enqueue of it is then a duplicate: it never runs, the cursor still
        advances): "skipped"; a QUEUED or CLAIMED firing becomes SKIPPED at once (a
        held one's start fails): "skipped"; a SKIPPED one: "already_skipped"; a RUNNING
        or finished one is left alone: "refused" with its state. The caller checks that
        the instants are occurrences (domain/skips.py). Raises JobNotFoundError."""
        ...

    def job_events(self, job_id: JobId, *, limit: int = 100) -> list[JobEvent]: ...

    def enqueue_now(self, spec: JobSpec) -> Firing:
        """Create a one-shot job and its QUEUED firing due now, in one transaction."""
        ...

    def get_firing(self, firing_id: FiringId) -> Firing:
        """Raises FiringNotFoundError."""

    def list_firings(
        self,
        *,
        job_id: JobId | None = None,
        namespace: str | None = None,
        states: Sequence[FiringState] | None = None,
        before_id: int | None = None,
        limit: int = 100,
        job_name: str | None = None,
        scheduled_from: datetime | None = None,
        scheduled_to: datetime | None = None,
        after_id: int | None = None,
    ) -> list[Firing]:
        """Newest first (by id); ``after_id < id < before_id`` and ``scheduled_from <=
        scheduled_for < scheduled_to`` for the bounds given; ``job_name`` is exact."""
        ...

    def list_attempts(self, firing_id: FiringId) -> list[Attempt]:
        """The firing's attempts in order, each exactly once: the recorded ones (failed,
        lease expired) and its current one read from its row (claimed, running,
        succeeded, cancelled). A held claim whose lease expired is not an attempt.
        Raises FiringNotFoundError."""

    def firing_with_attempts(self, firing_id: FiringId) -> tuple[Firing, list[Attempt]]:
        """``get_firing`` and ``list_attempts`` in one read of the store."""

    def cancel_firing(self, firing_id: FiringId) -> CancelResult:
        """QUEUED → CANCELLED at once ("cancelled"); RUNNING → request cooperative cancel
        ("cancel_requested"); a final firing is left alone ("already_final")."""
        ...

    def redrive_firing(self, firing_id: FiringId) -> Firing:
        """DEAD → QUEUED due now, with a fresh attempt budget and no cancellation request
        (one made before it died is spent). InvalidTransitionError otherwise."""
        ...


class AdminPort(Protocol):
    """Administration: schema, clock, leadership and nodes as seen from outside, status."""

    def migrate(self) -> int:
        """Bring the schema to the latest version (idempotent); return that version."""
        ...

    def close(self) -> None: ...

    def now(self) -> datetime:
        """The store's clock: the one leases and claims are judged by."""
        ...

    def get_lease(self, name: str) -> Lease | None: ...

    def list_nodes(self, *, alive_within: timedelta | None = None) -> list[NodeInfo]: ...

    def served_tasks(self, *, limit: int = 1000) -> list[ServedTask]:
        """The task names workers have served (their node info's ``tasks``, recorded on
        registration and refreshed on heartbeat), by name; empty before any worker
        registered. Task names are global: a worker claims its tasks in every namespace."""
        ...

    def unserved_queued(
        self, *, alive_within: timedelta, namespace: str | None = None, limit: int = 50
    ) -> dict[str, int]:
        """Queued firings (of ``namespace``, or every one) per task, for the tasks no
        worker node that heartbeated within ``alive_within`` serves: at most ``limit``
        tasks, most waiting first, counted over at most UNSERVED_SCAN queued firings."""
        ...

    def status(self, *, namespace: str | None = None) -> StoreStatus:
        """Counts, jobs and the oldest queued firing of the cluster, or of ``namespace``
        only; the lease and the nodes are the cluster's either way."""
        ...

    def id_key(self) -> bytes:
        """The cluster's secret for the ids users see (``domain/ids.py``): 32 random
        bytes, created once by ``migrate`` and never changed."""
        ...


class Store(DispatchPort, WorkerPort, JobsPort, AdminPort, QuotaPort, CalendarPort, Protocol):
    """Every port at once: what one store implementation provides."""


# -- HTTP API support ------------------------------------------------------------------
# Every Store implementation used behind ``cronwheel api`` implements these too.


class ApiJobsPort(HistoryPort, Protocol):
    """Jobs and firings as the HTTP API and the CLI see them: namespace-scoped (and, from
    HistoryPort, many jobs' backlogs and recent history in one read each)."""

    def search_jobs(
        self,
        namespace: str,
        *,
        state: str | None = None,
        task: str | None = None,
        name_prefix: str | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[Job]:
        """``list_jobs`` of one namespace plus a state filter: ``active`` (not paused,
        ``next_fire_at`` set), ``paused``, ``done`` (not paused, ``next_fire_at`` NULL).
        ``name_prefix`` is literal (no LIKE wildcards). Ordered by id, ``id > after_id``."""
        ...

    def list_job_firings(
        self,
        job_id: JobId,
        *,
        states: Sequence[FiringState] | None = None,
        scheduled_from: datetime | None = None,
        scheduled_to: datetime | None = None,
        before_id: int | None = None,
        limit: int = 100,
    ) -> list[Firing]:
        """One job's firings, newest first (by id), ``id < before_id`` when given, with
        ``scheduled_from <= scheduled_for < scheduled_to`` for the bounds given."""
        ...

    def add_firings(
        self,
        namespace: str,
        name: str,
        scheduled_for: Sequence[datetime],
        *,
        note: str,
        overlap: str | None = None,
    ) -> AddedFirings:
        """Insert QUEUED firings of the job due at these instants (trigger, backfill), in
        one transaction, without moving the job's cursor. An instant that already has a
        firing of the job is counted in ``duplicates``. Sends the wake-up hint.
        ``overlap`` overrides the job's overlap policy for these firings only (as
        Temporal's trigger/backfill overlap policy). Raises JobNotFoundError."""
        ...

    def enqueue_now_once(
        self, spec: JobSpec, *, key_hash: str, request_hash: str
    ) -> tuple[Firing, bool]:
        """``enqueue_now`` guarded by an idempotency key, in one transaction: when
        ``(spec.namespace, key_hash)`` is recorded with the same ``request_hash``, return
        (that firing, False) and create nothing; with another ``request_hash`` raise
        ConflictError; else enqueue, record the key and return (firing, True). A key is
        forgotten when its firing is deleted."""
        ...

    def async_calls(self) -> AsyncCalls | None:
        """A new AsyncCalls of this store for one event loop (store/async_port.py), or
        None where its reads are awaited no better than they are called."""
        ...


class ApiAdminPort(Protocol):
    """Administration through the HTTP API: liveness and bearer tokens."""

    def ping(self) -> None:
        """Run a trivial query; raise StoreUnavailableError unless the store answers."""
        ...

    def create_token(
        self, *, namespace: str, role: str, label: str | None, secret_hash: str
    ) -> ApiToken:
        """Insert a token (``role`` one of TOKEN_ROLES); ids are assigned by the store."""
        ...

    def get_token(self, token_id: int) -> ApiToken | None:
        """The token with this id, revoked or not; None when there is none."""
        ...

    def list_tokens(self, *, namespace: str | None = None) -> list[ApiToken]:
        """Tokens ordered by id, revoked ones included, optionally of one namespace."""
        ...

    def revoke_token(self, token_id: int) -> ApiToken:
        """Set ``revoked_at`` to now (kept if already set: idempotent). Raises NotFoundError."""
        ...


class ApiStore(Store, ApiJobsPort, ApiAdminPort, Protocol):
    """Store plus what ``cronwheel api`` needs: every implementation provides both."""
