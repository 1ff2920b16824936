"""Frozen value types shared by the store, the dispatcher and the workers."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from datetime import datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NewType

from cronwheel.domain.clock import ClockEstimate
from cronwheel.domain.firing import FiringState, format_instant, idempotency_key
from cronwheel.domain.names import validate_name, validate_namespace, validate_task
from cronwheel.domain.overlap import OverlapPolicy
from cronwheel.domain.policies import MisfirePolicy
from cronwheel.domain.retention import check_keep_for, check_keep_last
from cronwheel.errors import ValidationError

if TYPE_CHECKING:
    from cronwheel.domain.schedules import Schedule


JobId = NewType("JobId", int)
FiringId = NewType("FiringId", int)
Epoch = NewType("Epoch", int)

PAYLOAD_MAX_BYTES = 256 * 1024


# one encoder each, made once (json.dumps with options builds one per call: a bulk
# registration of 10,000 jobs spent a tenth of its time doing that)
_PAYLOAD_JSON = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False
)
_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False)


def encode_payload(args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> str:
    """Arguments as canonical JSON; raises ValidationError when not JSON-safe or too large."""
    if not args and not kwargs:
        return _NO_ARGS  # most jobs: no serialization at all
    try:
        text = _PAYLOAD_JSON.encode({"args": list(args), "kwargs": kwargs})
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"must be JSON-serialisable: {exc}", field="args") from None
    if len(text.encode("utf-8", "surrogatepass")) > PAYLOAD_MAX_BYTES:
        raise ValidationError(f"must encode to at most {PAYLOAD_MAX_BYTES} bytes", field="args")
    return text


_NO_ARGS = '{"args":[],"kwargs":{}}'


def _opt_s(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _retention_dict(keep_for: timedelta | None, keep_last: int | None) -> dict[str, Any]:
    """A job's retention overrides, only when set: a job without them keeps the
    policies document (and spec hash) it had before they existed."""
    out: dict[str, Any] = {}
    if keep_for is not None:
        out["keep_for_s"] = keep_for.total_seconds()
    if keep_last is not None:
        out["keep_last"] = keep_last
    return out


def _positive(value: timedelta, field_name: str) -> timedelta:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ValidationError("must be a positive duration", field=field_name)
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class JobPolicies:
    """How a job's firings are retried, leased and caught up. Defaults suit most jobs."""

    max_attempts: int = 3
    retry_backoff: timedelta = timedelta(seconds=1)
    retry_backoff_max: timedelta = timedelta(minutes=10)
    visibility_timeout: timedelta = timedelta(seconds=30)
    timeout: timedelta | None = None
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    misfire_grace: timedelta = timedelta(seconds=60)
    catchup_window: timedelta = timedelta(days=1)
    max_catchup: int = 100
    priority: float = 1.0
    max_concurrency: int | None = None  # None: 1 for recurring jobs, unlimited for one-shots
    overlap: OverlapPolicy = OverlapPolicy.SKIP
    max_buffer: int = 100
    cancel_grace: timedelta = timedelta(seconds=30)
    start_deadline: timedelta | None = None
    jitter: timedelta = timedelta(0)
    lateness_objective: timedelta | None = None  # p99 start lateness this job must meet
    keep_for: timedelta | None = None  # None: the namespace's retention (domain/retention.py)
    keep_last: int | None = None  # None: the namespace's retention

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or not 1 <= self.max_attempts <= 1000:
            raise ValidationError("must be an integer from 1 to 1000", field="max_attempts")
        _positive(self.retry_backoff, "retry_backoff")
        _positive(self.retry_backoff_max, "retry_backoff_max")
        _positive(self.visibility_timeout, "visibility_timeout")
        if self.visibility_timeout < timedelta(seconds=1):
            raise ValidationError("must be at least 1 second", field="visibility_timeout")
        if self.timeout is not None:
            _positive(self.timeout, "timeout")
        try:
            object.__setattr__(self, "misfire", MisfirePolicy(self.misfire))
        except ValueError:
            raise ValidationError(
                "must be one of fire_once, fire_all, skip", field="misfire"
            ) from None
        if not isinstance(self.misfire_grace, timedelta) or self.misfire_grace < timedelta(0):
            raise ValidationError("must be a non-negative duration", field="misfire_grace")
        _positive(self.catchup_window, "catchup_window")
        if not isinstance(self.max_catchup, int) or not 1 <= self.max_catchup <= 10_000:
            raise ValidationError("must be an integer from 1 to 10000", field="max_catchup")
        if (
            not isinstance(self.priority, int | float)
            or self.priority != self.priority
            or not 0.01 <= self.priority <= 1000
        ):
            raise ValidationError("must be a number from 0.01 to 1000", field="priority")
        if self.max_concurrency is not None and (
            not isinstance(self.max_concurrency, int) or not 1 <= self.max_concurrency <= 10_000
        ):
            raise ValidationError("must be an integer from 1 to 10000", field="max_concurrency")
        try:
            object.__setattr__(self, "overlap", OverlapPolicy(self.overlap))
        except ValueError:
            names = ", ".join(p.value for p in OverlapPolicy)
            raise ValidationError(f"must be one of {names}", field="overlap") from None
        if not isinstance(self.max_buffer, int) or not 1 <= self.max_buffer <= 10_000:
            raise ValidationError("must be an integer from 1 to 10000", field="max_buffer")
        _positive(self.cancel_grace, "cancel_grace")
        if self.start_deadline is not None:
            _positive(self.start_deadline, "start_deadline")
        if not isinstance(self.jitter, timedelta) or not (
            timedelta(0) <= self.jitter <= timedelta(days=1)
        ):
            raise ValidationError("must be a duration from 0 to 1 day", field="jitter")
        if self.lateness_objective is not None:
            _positive(self.lateness_objective, "lateness_objective")
        if self.keep_for is not None:
            check_keep_for(self.keep_for)
        if self.keep_last is not None:
            check_keep_last(self.keep_last)

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "retry_backoff_s": self.retry_backoff.total_seconds(),
            "retry_backoff_max_s": self.retry_backoff_max.total_seconds(),
            "visibility_timeout_s": self.visibility_timeout.total_seconds(),
            "timeout_s": _opt_s(self.timeout),
            "misfire": self.misfire.value,
            "misfire_grace_s": self.misfire_grace.total_seconds(),
            "catchup_window_s": self.catchup_window.total_seconds(),
            "max_catchup": self.max_catchup,
            "priority": float(self.priority),
            "max_concurrency": self.max_concurrency,
            "overlap": self.overlap.value,
            "max_buffer": self.max_buffer,
            "cancel_grace_s": self.cancel_grace.total_seconds(),
            "start_deadline_s": _opt_s(self.start_deadline),
            "jitter_s": self.jitter.total_seconds(),
            "lateness_objective_s": _opt_s(self.lateness_objective),
        } | _retention_dict(self.keep_for, self.keep_last)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobPolicies:
        def td(key: str) -> timedelta:
            return timedelta(seconds=float(d[key]))

        return cls(
            max_attempts=int(d["max_attempts"]),
            retry_backoff=td("retry_backoff_s"),
            retry_backoff_max=td("retry_backoff_max_s"),
            visibility_timeout=td("visibility_timeout_s"),
            timeout=None if d.get("timeout_s") is None else td("timeout_s"),
            misfire=MisfirePolicy(d["misfire"]),
            misfire_grace=td("misfire_grace_s"),
            catchup_window=td("catchup_window_s"),
            max_catchup=int(d["max_catchup"]),
            priority=float(d["priority"]),
            max_concurrency=d.get("max_concurrency"),
            overlap=OverlapPolicy(d.get("overlap", "skip")),
            max_buffer=int(d.get("max_buffer", 100)),
            cancel_grace=timedelta(seconds=float(d.get("cancel_grace_s", 30))),
            start_deadline=(None if d.get("start_deadline_s") is None else td("start_deadline_s")),
            jitter=timedelta(seconds=float(d.get("jitter_s", 0))),
            lateness_objective=(
                None if d.get("lateness_objective_s") is None else td("lateness_objective_s")
            ),
            keep_for=None if d.get("keep_for_s") is None else td("keep_for_s"),
            keep_last=None if d.get("keep_last") is None else int(d["keep_last"]),
        )


# The policies given as durations (seconds or text like "5m" at the edges).
DURATION_POLICIES = frozenset(
    f.name for f in dataclass_fields(JobPolicies) if "timedelta" in str(f.type)
)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """What a user registers: a task, a schedule, arguments and policies."""

    name: str
    task: str
    schedule: Schedule
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    namespace: str = "default"
    policies: JobPolicies = field(default_factory=JobPolicies)
    paused: bool = False
    start_at: datetime | None = None  # no firing before this instant
    end_at: datetime | None = None  # no firing after this instant
    max_runs: int | None = None  # the job ends after this many firings
    # the W3C trace context (traceparent, tracestate) where the job was registered or
    # enqueued, when tracing is on (observability/tracing.py); not part of the spec: it
    # changes no hash and no equality
    trace_context: dict[str, str] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        validate_name(self.name)
        for name in ("start_at", "end_at"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise ValidationError("must be an aware instant", field=name)
        if self.start_at and self.end_at and self.end_at <= self.start_at:
            raise ValidationError("must be after start_at", field="end_at")
        if self.max_runs is not None and (
            not isinstance(self.max_runs, int) or not 1 <= self.max_runs <= 10**9
        ):
            raise ValidationError("must be an integer from 1 to 10^9", field="max_runs")
        validate_task(self.task)
        validate_namespace(self.namespace)
        if not isinstance(self.kwargs, dict):
            raise ValidationError("must be an object", field="kwargs")
        object.__setattr__(self, "args", tuple(self.args))

    @property
    def payload(self) -> str:
        return encode_payload(self.args, self.kwargs)

    @property
    def recurring(self) -> bool:
        return self.schedule.kind in ("every", "cron")

    @property
    def max_concurrency(self) -> int | None:
        """The effective cap: explicit, else 1 for recurring jobs, unlimited for one-shots;
        None means no cap (also for overlap ``allow``)."""
        if self.policies.overlap is OverlapPolicy.ALLOW:
            return None
        if self.policies.max_concurrency is not None:
            return self.policies.max_concurrency
        return 1 if self.recurring else None

    def bounds_dict(self) -> dict[str, Any]:
        return {
            "start_at": None if self.start_at is None else format_instant(self.start_at),
            "end_at": None if self.end_at is None else format_instant(self.end_at),
            "max_runs": self.max_runs,
        }

    def spec_hash(
        self, *, payload: str | None = None, schedule: dict[str, Any] | None = None
    ) -> str:
        """Changes whenever anything a user declared changes (upserts compare it).

        The SHA-256 of the canonical JSON document {"bounds", "payload", "policies",
        "schedule", "task"} (sorted keys, json's default separators), assembled from
        its parts so that the parts many jobs share are serialized once; ``payload`` and
        ``schedule`` (``self.payload``, ``self.schedule.to_dict()``) when the caller has
        them already."""
        payload = self.payload if payload is None else payload
        schedule = self.schedule.to_dict() if schedule is None else schedule
        doc = (
            f'{{"bounds": {bounds_json(self.bounds_dict())}, '
            f'"payload": {_dumps(payload)}, '
            f'"policies": {policies_json(self.policies)}, '
            f'"schedule": {_dumps(schedule)}, '
            f'"task": {_dumps(self.task)}}}'
        )
        return hashlib.sha256(doc.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _dumps(value: Any) -> str:
    return _CANONICAL_JSON.encode(value)


@lru_cache(maxsize=4096)
def policies_json(policies: JobPolicies) -> str:
    """``policies.to_dict()`` as canonical JSON, cached: a bulk registration or a herd
    shares a few policy values between many jobs."""
    return _dumps(policies.to_dict())


def bounds_json(bounds: dict[str, Any]) -> str:
    """A JobSpec's ``bounds_dict()`` as canonical JSON (almost always all unset)."""
    return _BOUNDS_UNSET if bounds == _NO_BOUNDS else _dumps(bounds)


_NO_BOUNDS: dict[str, Any] = {"start_at": None, "end_at": None, "max_runs": None}
_BOUNDS_UNSET = _dumps(_NO_BOUNDS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """A job as stored, with its cursor."""

    id: JobId
    spec: JobSpec
    next_fire_at: datetime | None
    last_fired_at: datetime | None
    paused: bool
    missed_total: int
    created_at: datetime
    updated_at: datetime
    remaining_runs: int | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def namespace(self) -> str:
        return self.spec.namespace


@dataclass(frozen=True, slots=True, kw_only=True)
class Firing:
    """One occurrence of a job, as stored."""

    id: FiringId
    job_id: JobId
    job_name: str
    namespace: str
    task: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    scheduled_for: datetime
    due_at: datetime
    state: FiringState
    attempt: int
    max_attempts: int
    priority: float
    enqueued_at: datetime
    enqueued_epoch: int | None
    claim_token: str | None = None
    worker_id: str | None = None
    lease_until: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    note: str | None = None
    cancel_requested_at: datetime | None = None
    reason: str | None = None
    overlap_override: str | None = None
    claimed_at: datetime | None = None

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.job_id, self.scheduled_for)

    @property
    def lateness(self) -> timedelta | None:
        """``started_at - scheduled_for`` of its first attempt, when the row holds it (its
        attempt is the first); None otherwise: a retried firing's row holds its last
        start, and its first is in its attempts (``domain/attempts.first_lateness``)."""
        if self.started_at is None or self.attempt != 1:
            return None
        return self.started_at - self.scheduled_for

    def to_dict(self) -> dict[str, Any]:
        def ts(v: datetime | None) -> str | None:
            return None if v is None else format_instant(v)

        lateness = self.lateness
        return {
            "id": self.id,
            "job_id": self.job_id,
            "job": self.job_name,
            "namespace": self.namespace,
            "task": self.task,
            "state": self.state.value,
            "scheduled_for": ts(self.scheduled_for),
            "due_at": ts(self.due_at),
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "priority": self.priority,
            "idempotency_key": self.idempotency_key,
            "worker_id": self.worker_id,
            "enqueued_at": ts(self.enqueued_at),
            "enqueued_epoch": self.enqueued_epoch,
            "claimed_at": ts(self.claimed_at),
            "started_at": ts(self.started_at),
            "finished_at": ts(self.finished_at),
            "lateness_ms": None if lateness is None else round(lateness.total_seconds() * 1000, 3),
            "error": self.error,
            "note": self.note,
            "reason": self.reason,
            "cancel_requested": self.cancel_requested_at is not None,
        }


# finished or given up: the states a job's lateness is sampled from (its firings that
# ran, or were cancelled, to the end), and the ones a "last outcome" is not (open work)
STARTED_STATES = (FiringState.SUCCEEDED, FiringState.DEAD, FiringState.CANCELLED)
OPEN_STATES = (FiringState.QUEUED, FiringState.CLAIMED, FiringState.RUNNING)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecentRuns:
    """What the jobs page, ``/metrics`` and ``cronwheel status`` read of one job's recent
    history (``ApiJobsPort.recent_runs``), without reading its firings whole:

    - ``lateness_s``: the first-attempt lateness (``started_at - scheduled_for``, in
      seconds) of its newest ``sample`` firings in STARTED_STATES (by id, newest first),
      only those whose attempt is 1 and that started (a retry's start is late by design),
      as ``observability.lateness.first_attempt_lateness_s`` of each of them;
    - ``last_id`` / ``last_state``: the newest of its newest ``sample`` firings (any state)
      that is not open (QUEUED, CLAIMED, RUNNING); None when there is none among them."""

    job_id: JobId
    lateness_s: tuple[float, ...] = ()
    last_id: FiringId | None = None
    last_state: FiringState | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimedFiring:
    """A firing a worker holds: the attempt's claim token and the policies it runs under."""

    firing: Firing
    claim_token: str
    lease_until: datetime
    policies: JobPolicies
    # its job's trace context (JobSpec.trace_context), None when none was captured
    trace_context: dict[str, str] | None = None

    @property
    def started(self) -> bool:
        """Claimed and started in one step (RUNNING); else held (CLAIMED) until the
        worker's ``start`` succeeds."""
        return self.firing.state is FiringState.RUNNING


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    """A named lease (the dispatcher's leadership). ``epoch`` is the fencing token."""

    name: str
    holder: str
    epoch: Epoch
    expires_at: datetime
    acquired_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInfo:
    id: str
    kind: str  # "scheduler" | "worker"
    hostname: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    wake_addr: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    # its clock's offset to the store's and whether it is flagged, as it last reported
    # them (domain/clock.py); None until it has
    clock: ClockEstimate | None = None
    # the tz database the node computes instants with (domain.tzdb.TzDatabase)
    tz_source: str | None = None
    tz_version: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobEvent:
    """A fate recorded for occurrences that produced no run (missed, skipped...)."""

    id: int
    job_id: JobId
    at: datetime
    kind: str
    first_at: datetime | None
    last_at: datetime | None
    count: int
    exact: bool
    detail: str | None = None
