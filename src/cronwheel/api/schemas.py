"""Request and response bodies: the API's schemas live only here (the batch endpoints'
in ``schemas_batch.py``).

Requests are strict (``"job_id": "1"`` is not an integer, unknown fields are
refused). Instants are RFC 3339 strings with an offset, parsed by the domain's
``parse_instant``; durations are seconds (a number) or text such as ``"1h30m"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, create_model

from cronwheel.api.schema_base import InModel as _In
from cronwheel.api.schema_base import OutModel as _Out
from cronwheel.domain.policy_table import POLICY_TABLE, Policy

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
AttemptOutcomeName = Literal[
    "claimed", "running", "succeeded", "failed", "lease_expired", "cancelled"
]


# -- requests -------------------------------------------------------------------------


class ScheduleIn(_In):
    """``now``; ``at`` (``at``); ``every`` (``interval``, ``anchor``); ``cron`` (``cron``,
    ``tz``, ``dst_gap``, ``dst_overlap``, ``calendar``). Keys of another kind are refused."""

    kind: Literal["now", "at", "every", "cron"]
    cron: str | None = Field(None, max_length=256, examples=["0 9 * * mon-fri"])
    tz: str | None = Field(None, max_length=64, examples=["Europe/Berlin"])
    dst_gap: Literal["next_valid", "skip", "shift"] | None = None
    dst_overlap: Literal["once", "twice"] | None = None
    calendar: str | None = Field(
        None,
        max_length=64,
        examples=["DE-BY"],
        description="days excluded (local dates in tz): a built-in calendar, a country (US), "
        "a country and subdivision (DE-BY) or a market (NYSE) of the holidays data; or a "
        "calendar of the namespace (office: /v1/calendars)",
    )
    calendar_def: dict[str, Any] | None = Field(
        None,
        description="output only: the rules of the namespace's calendar the job names; on "
        "input it is replaced by the calendar's current rules",
    )
    at: Instant | None = Field(None, max_length=40, examples=["2026-05-01T09:00:00Z"])
    interval: Duration | None = Field(None, examples=["1h30m", 90])
    anchor: Instant | None = Field(None, max_length=40)


def _policy_field(policy: Policy) -> tuple[Any, Any]:
    """A request field of one policy row: durations are seconds or text; omitted or
    null is the default."""
    desc = f"{policy.help} ({policy.unit}; default {policy.default})"
    if policy.kind == "duration":
        return (Duration | None, Field(None, description=desc))
    if policy.kind == "choice":
        return (Literal[policy.choices] | None, Field(None, description=desc))
    kind: type = int if policy.kind == "int" else float
    return (kind | None, Field(None, ge=policy.low, le=policy.high, description=desc))


# Retry, lease and catch-up policies, one field per row of domain/policy_table.py (the
# CLI's flags and the dashboard's form come from the same table); omitted ones take
# their defaults. Type checkers see the base class; the fields are made at import.
if TYPE_CHECKING:
    PoliciesIn = _In
else:
    PoliciesIn = create_model(
        "PoliciesIn",
        __base__=_In,
        __doc__="Retry, lease and catch-up policies; omitted ones take their defaults.",
        **{p.name: _policy_field(p) for p in POLICY_TABLE},
    )


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
    allow_unknown_task: bool = Field(
        False, description="accept a task no worker has served yet (refused otherwise, 422)"
    )


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
    allow_unknown_task: bool = Field(
        False, description="accept a task no worker has served yet (refused otherwise, 422)"
    )


OverlapName = Literal[
    "skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow"
]


class BackfillIn(_In):
    start: Instant = Field(max_length=40, examples=["2026-03-01T00:00:00Z"])
    end: Instant = Field(max_length=40, examples=["2026-03-02T00:00:00Z"])
    overlap: OverlapName | None = Field(None, description="overrides the job's overlap policy")


class SkipIn(_In):
    """Exactly one of ``at`` (occurrences of the schedule) and ``next`` (the next N)."""

    at: list[Instant] | None = Field(None, examples=[["2026-05-01T09:00:00Z"]])
    next: int | None = Field(None, examples=[1], description="1..100")
    reason: str | None = Field(None, max_length=500, examples=["bank holiday"])


class TriggerIn(_In):
    overlap: OverlapName | None = Field(None, description="overrides the job's overlap policy")


class EnqueueIn(_In):
    task: str = Field(max_length=200, examples=["resize_image"])
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    allow_unknown_task: bool = Field(
        False, description="accept a task no worker has served yet (refused otherwise, 422)"
    )


class PreviewIn(_In):
    cron: str = Field(max_length=256, examples=["30 2 * * *"])
    tz: str = Field("UTC", max_length=64, examples=["Europe/Berlin"])
    dst_gap: Literal["next_valid", "skip", "shift"] | None = None
    dst_overlap: Literal["once", "twice"] | None = None
    calendar: str | None = Field(None, max_length=64, examples=["DE-BY"])
    after: Instant | None = Field(None, max_length=40, description="default: now")
    count: int = Field(5, ge=1, le=1000)


# -- responses ------------------------------------------------------------------------


class SkipResultOut(_Out):
    at: str
    outcome: Literal["skipped", "already_skipped", "refused"]
    state: str | None
    firing_id: int | None


class SkipOut(_Out):
    job: str
    reason: str
    results: list[SkipResultOut]


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
    calendar: str | None = None
    calendar_def: dict[str, Any] | None = None
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


class AttemptOut(_Out):
    """One attempt of a firing: a claim that started it (or holds it, or was cancelled
    holding it)."""

    attempt: int
    worker_id: str | None
    claimed_at: str | None
    started_at: str | None
    finished_at: str | None
    outcome: AttemptOutcomeName
    error: str | None


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
    claimed_at: str | None
    started_at: str | None
    finished_at: str | None
    lateness_ms: float | None = Field(
        description="the first attempt's started_at - scheduled_for, in milliseconds"
    )
    error: str | None
    note: str | None
    cancel_requested: bool
    cancel_requested_at: str | None
    attempts: list[AttemptOut] | None = Field(
        None, description="every attempt in order (GET /v1/firings/{id} only)"
    )


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
    calendar: str | None = None
    items: list[PreviewItem]


class NodeClockOut(_Out):
    offset_ms: float = Field(description="the store's clock minus the node's (+: node behind)")
    uncertainty_ms: float = Field(description="how far that estimate may be off")
    flagged: bool = Field(description="past its bounds: a flagged worker claims nothing")
    flag: str | None = Field(description="why it is flagged")


class NodeOut(_Out):
    id: str
    kind: str
    hostname: str
    pid: int
    heartbeat_at: str
    heartbeat_age_s: float
    clock: NodeClockOut | None = Field(description="its clock as last reported (null: unknown)")
    tz_source: str | None = Field(description="where its tz database comes from")
    tz_version: str | None = Field(description="its tz database's IANA version")


class TzDatabaseOut(_Out):
    source: str
    version: str


class TzMismatchOut(_Out):
    id: str
    kind: str
    source: str | None
    version: str | None


class TzStatusOut(_Out):
    cluster: TzDatabaseOut | None = Field(
        description="the tz database the leader recorded (null: none recorded yet)"
    )
    process: TzDatabaseOut = Field(description="this API process's tz database")
    mismatched: list[TzMismatchOut] = Field(
        description="live nodes whose tz database version is not the cluster's"
    )
    mismatch: bool = Field(description="a live node, or this process, differs from the cluster")


class QuotaLimits(_Out):
    jobs: int = Field(description="registered jobs (not counting immediate one-shots)")
    firings_per_minute: int = Field(description="firings created per minute")
    min_interval: str = Field(description="shortest gap between two firings of a schedule")
    running: int = Field(description="firings held by workers (claimed or running)")
    backfill: int = Field(description="instants of one trigger or backfill call")
    backfill_per_day: int = Field(description="firings added by trigger/backfill per UTC day")


class QuotaCounts(_Out):
    jobs: int
    firings_per_minute: int = Field(description="this minute's")
    running: int
    backfill: int = Field(description="a per-call bound: always 0")
    backfill_per_day: int = Field(description="today's (UTC)")


class QuotaOut(_Out):
    namespace: str
    custom: bool = Field(description="false: the cluster's default quota")
    limits: QuotaLimits
    used: QuotaCounts
    skipped_firings: int = Field(
        description="scheduled firings stored SKIPPED over firings_per_minute (so far)"
    )


class QuotaIn(_In):
    """Limits to lower (an omitted one is kept). Only the cluster's operator raises
    them (`cronwheel quota set`)."""

    jobs: int | None = Field(None, ge=0)
    firings_per_minute: int | None = Field(None, ge=0)
    min_interval: str | None = Field(None, max_length=64, examples=["1s", "5m"])
    running: int | None = Field(None, ge=0)
    backfill: int | None = Field(None, ge=0)
    backfill_per_day: int | None = Field(None, ge=0)


class RetentionOut(_Out):  # domain/retention.py; custom false: the default
    namespace: str
    custom: bool
    keep_for_s: float
    keep_last: int


class RetentionIn(_In):
    keep_for: Duration | int | None = Field(None, examples=["7d", 86400])
    keep_last: int | None = None


class StatusOut(_Out):
    now: str
    namespace: str
    cluster: bool = Field(
        description="true: the cluster's view (a cluster token, or authentication off) with"
        " the leader and nodes and every namespace's counts; false: the token's namespace"
        " only, the leader and nodes null"
    )
    leader: str | None
    epoch: int | None
    lease_expires_at: str | None
    schedulers: int | None
    workers: int | None
    nodes: list[NodeOut] | None
    queue_depth: int = Field(description="queued firings: waiting for a worker's claim")
    claimed: int = Field(description="firings a worker holds (claimed) but has not started")
    running: int
    oldest_queued_due_at: str | None
    backlog: dict[str, int]
    unserved: dict[str, int] = Field(description="queued firings per task no live worker serves")
    quota: QuotaOut | None = Field(description="the namespace's quota and use (null: cluster)")
    tzdata: TzStatusOut | None = Field(
        None, description="the cluster's tz database and who differs (null: a namespace token)"
    )
    retention: RetentionOut | None = Field(None, description="the namespace's retention")


class HealthOut(_Out):
    status: str
