"""Request and response bodies: the API's schemas live only here.

Requests are strict (``"job_id": "1"`` is not an integer, unknown fields are
refused). Instants are RFC 3339 strings with an offset, parsed by the domain's
``parse_instant``; durations are seconds (a number) or text such as ``"1h30m"``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Instant = str
Duration = float | str
JobState = Literal["active", "paused", "done"]
FiringStateName = Literal[
    "scheduled",
    "queued",
    "claimed",
    "running",
    "succeeded",
    "dead",
    "cancelled",
    "skipped",
    "missed",
]


class _In(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- requests -------------------------------------------------------------------------


class ScheduleIn(_In):
    """``now``; ``at`` (``at``); ``every`` (``interval``, ``anchor``); ``cron`` (``cron``,
    ``tz``, ``dst_gap``, ``dst_overlap``). Keys of another kind are refused."""

    kind: Literal["now", "at", "every", "cron"]
    cron: str | None = Field(None, max_length=256, examples=["0 9 * * mon-fri"])
    tz: str | None = Field(None, max_length=64, examples=["Europe/Berlin"])
    dst_gap: Literal["next_valid", "skip", "shift"] | None = None
    dst_overlap: Literal["once", "twice"] | None = None
    at: Instant | None = Field(None, max_length=40, examples=["2026-05-01T09:00:00Z"])
    interval: Duration | None = Field(None, examples=["1h30m", 90])
    anchor: Instant | None = Field(None, max_length=40)


class PoliciesIn(_In):
    """Retry, lease and catch-up policies; omitted ones take their defaults."""

    max_attempts: int | None = Field(None, ge=1, le=1000)
    retry_backoff: Duration | None = None
    retry_backoff_max: Duration | None = None
    visibility_timeout: Duration | None = None
    timeout: Duration | None = None
    misfire: Literal["fire_once", "fire_all", "skip"] | None = None
    misfire_grace: Duration | None = None
    catchup_window: Duration | None = None
    max_catchup: int | None = Field(None, ge=1, le=10_000)
    priority: float | None = Field(None, ge=0.01, le=1000)
    max_concurrency: int | None = Field(None, ge=1, le=10_000)
    overlap: str | None = Field(None, max_length=32, examples=["skip", "buffer_one", "allow"])
    max_buffer: int | None = Field(None, ge=1, le=10_000)
    cancel_grace: Duration | None = None
    start_deadline: Duration | None = None
    jitter: Duration | None = None
    lateness_objective: Duration | None = None


class JobBody(_In):
    """A job definition for PUT /v1/jobs/{name} (the name is the path's)."""

    task: str = Field(max_length=200, examples=["send_digest"])
    schedule: ScheduleIn
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    policies: PoliciesIn | None = None
    paused: bool | None = Field(None, description="omitted: keep the current state")
    allow_past: bool = Field(False, description="accept an `at` in the past (fires at once)")
    start_at: Instant | None = Field(None, max_length=40, description="no firing before this")
    end_at: Instant | None = Field(None, max_length=40, description="no firing after this")
    max_runs: int | None = Field(None, ge=1, le=10**9, description="the job ends after N firings")


class JobCreate(JobBody):
    name: str = Field(max_length=200, examples=["nightly-report"])


class JobPatch(_In):
    """Fields to change; the others keep their values (policies merge key by key)."""

    task: str | None = Field(None, max_length=200)
    schedule: ScheduleIn | None = None
    args: list[Any] | None = None
    kwargs: dict[str, Any] | None = None
    policies: PoliciesIn | None = None
    paused: bool | None = None
    allow_past: bool = False


OverlapName = Literal[
    "skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow"
]


class BackfillIn(_In):
    start: Instant = Field(max_length=40, examples=["2026-03-01T00:00:00Z"])
    end: Instant = Field(max_length=40, examples=["2026-03-02T00:00:00Z"])
    overlap: OverlapName | None = Field(None, description="overrides the job's overlap policy")


class TriggerIn(_In):
    overlap: OverlapName | None = Field(None, description="overrides the job's overlap policy")


class EnqueueIn(_In):
    task: str = Field(max_length=200, examples=["resize_image"])
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)


class PreviewIn(_In):
    cron: str = Field(max_length=256, examples=["30 2 * * *"])
    tz: str = Field("UTC", max_length=64, examples=["Europe/Berlin"])
    dst_gap: Literal["next_valid", "skip", "shift"] | None = None
    dst_overlap: Literal["once", "twice"] | None = None
    after: Instant | None = Field(None, max_length=40, description="default: now")
    count: int = Field(5, ge=1, le=1000)


# -- responses ------------------------------------------------------------------------


class ErrorDetail(_Out):
    code: str
    message: str
    field: str | None


class ErrorOut(_Out):
    error: ErrorDetail


class ScheduleOut(_Out):
    kind: str
    cron: str | None = None
    tz: str | None = None
    dst_gap: str | None = None
    dst_overlap: str | None = None
    at: str | None = None
    interval: str | None = None
    anchor: str | None = None


class PoliciesOut(_Out):
    """Durations in seconds; the same keys a request's ``policies`` takes."""

    model_config = ConfigDict(extra="allow")
    max_attempts: int
    retry_backoff: float
    retry_backoff_max: float
    visibility_timeout: float
    timeout: float | None
    misfire: str
    misfire_grace: float
    catchup_window: float
    max_catchup: int
    priority: float


class UpcomingOut(_Out):
    utc: str
    local: str


class JobOut(_Out):
    id: int
    namespace: str
    name: str
    task: str
    schedule: ScheduleOut
    schedule_text: str
    args: list[Any]
    kwargs: dict[str, Any]
    policies: PoliciesOut
    paused: bool
    state: JobState
    next_fire_at: str | None
    last_fired_at: str | None
    missed_total: int
    start_at: str | None = None
    end_at: str | None = None
    max_runs: int | None = None
    remaining_runs: int | None = None
    created_at: str
    updated_at: str
    next_fire_times: list[UpcomingOut] | None = None
    changed: bool | None = None


class JobList(_Out):
    items: list[JobOut]
    next_cursor: str | None


class FiringOut(_Out):
    model_config = ConfigDict(extra="allow")  # fields the domain adds flow through
    id: int
    job_id: int
    job: str
    namespace: str
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    state: FiringStateName
    scheduled_for: str
    due_at: str
    attempt: int
    max_attempts: int
    priority: float
    idempotency_key: str
    worker_id: str | None
    enqueued_at: str
    enqueued_epoch: int | None
    started_at: str | None
    finished_at: str | None
    lateness_ms: float | None
    error: str | None
    note: str | None
    cancel_requested: bool
    cancel_requested_at: str | None


class FiringList(_Out):
    items: list[FiringOut]
    next_cursor: str | None


class CancelOut(_Out):
    result: Literal["cancelled", "cancel_requested", "already_final"]
    firing: FiringOut


class BackfillOut(_Out):
    requested: int
    inserted: int
    duplicates: int
    firing_ids: list[int]


class PreviewItem(_Out):
    utc: str
    local: str
    abbrev: str | None
    note: str | None


class PreviewOut(_Out):
    cron: str
    tz: str
    dst_gap: str
    dst_overlap: str
    items: list[PreviewItem]


class NodeOut(_Out):
    id: str
    kind: str
    hostname: str
    pid: int
    heartbeat_at: str
    heartbeat_age_s: float


class StatusOut(_Out):
    now: str
    namespace: str
    leader: str | None
    epoch: int | None
    lease_expires_at: str | None
    schedulers: int
    workers: int
    nodes: list[NodeOut]
    queue_depth: int
    claimed: int
    running: int
    oldest_queued_due_at: str | None
    backlog: dict[str, int]


class HealthOut(_Out):
    status: str
