"""The values that cross the store's ports: what the dispatcher and the worker hand
the store (planned firings, job advances, completions) and what it answers (enqueue
results, status, tokens). The ports themselves are in protocol.py, which re-exports
these names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cronwheel.domain.models import Firing, FiringId, JobId, Lease, NodeInfo
from cronwheel.domain.policies import MissedRange


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedFiring:
    scheduled_for: datetime
    due_at: datetime | None = None  # when it may start (jitter); None: scheduled_for
    note: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobAdvance:
    """One job's part of an enqueue batch.

    The job's cursor moves from ``expected_next_fire_at`` to ``new_next_fire_at``
    (compare-and-swap), and only if that succeeds are ``firings`` inserted and
    ``missed`` recorded: the cursor and the firings move together or not at all.
    A job with a run limit has ``remaining_runs`` reduced by ``len(firings)`` in the
    same statement, and its cursor cleared when they are used up. Each firing's claim
    order comes from its namespace's fair clock (domain.policies.fair_deadline).
    """

    job_id: JobId
    expected_next_fire_at: datetime
    new_next_fire_at: datetime | None
    firings: Sequence[PlannedFiring] = ()
    missed: Sequence[MissedRange] = ()


@dataclass(slots=True, kw_only=True)
class EnqueueResult:
    inserted: list[FiringId] = field(default_factory=list)
    duplicates: int = 0  # (job_id, scheduled_for) already existed: the unique key held
    stale: list[JobId] = field(default_factory=list)  # cursor CAS failed: job changed meanwhile
    # inserted over the namespace's firings_per_minute quota: stored SKIPPED (reason
    # "quota: firings_per_minute"), never run; not in ``inserted``
    over_quota: list[FiringId] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """The outcome of one attempt, reported by the worker that holds the claim."""

    firing_id: FiringId
    claim_token: str
    succeeded: bool
    started_at: datetime
    finished_at: datetime
    error: str | None = None
    retry_at: datetime | None = None  # when to try again (None: no retry, go DEAD)
    cancelled: bool = False  # the handler stopped on a cancellation request: CANCELLED


# A worker's heartbeat refreshes the last_seen of the tasks it serves at most this often.
SERVED_TASKS_REFRESH = timedelta(minutes=1)
# unserved_queued counts at most this many queued firings.
UNSERVED_SCAN = 100_000
# A worker serves its tasks while its node heartbeated within this (status, dashboard).
WORKER_ALIVE_WITHIN = timedelta(seconds=30)


@dataclass(frozen=True, slots=True, kw_only=True)
class TzRecord:
    """The cluster's tz database, recorded by the leader that adopted it: its source
    and version, and a digest of each zone's compiled file (domain.tzdb.zone_digests),
    so the next version's leader can tell which zones' rules changed."""

    source: str
    version: str
    zones: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.version} ({self.source})"


@dataclass(frozen=True, slots=True, kw_only=True)
class CursorMove:
    """A job's cursor re-resolved under another tz database: from ``old`` (the stored
    cursor, compared and swapped) to ``new``; ``detail`` says why, for `jobs explain`."""

    job_id: JobId
    old: datetime
    new: datetime | None
    detail: str
    namespace: str = ""  # the job's namespace and name, for logs
    job: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServedTask:
    """A task name some worker served: when one first and last reported it."""

    task: str
    first_seen: datetime
    last_seen: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreStatus:
    now: datetime
    lease: Lease | None
    counts: dict[str, int]  # firings by state (active states, and terminal within the window)
    jobs: int
    paused_jobs: int
    oldest_queued_due_at: datetime | None
    nodes: list[NodeInfo]
    lateness_ms: list[float]  # recent first-attempt successes' lateness, newest first (bounded)
    tzdata: TzRecord | None = None  # the cluster's tz database, as its leader recorded it


JOB_STATES = ("active", "paused", "done")  # search_jobs(state=...): see its docstring
TOKEN_ROLES = ("read", "write", "admin")


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiToken:
    """A bearer token as stored: only the sha256 hex of its secret, never the secret."""

    id: int
    namespace: str
    role: str  # "read" | "write" | "admin"
    label: str | None
    secret_hash: str
    created_at: datetime
    revoked_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AddedFirings:
    inserted: list[Firing]
    duplicates: int  # instants that already had a firing of this job: left alone
