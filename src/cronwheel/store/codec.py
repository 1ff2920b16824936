"""Conversions between stored rows and domain values, shared by both stores."""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Protocol

from cronwheel.domain.attempts import Attempt, AttemptOutcome
from cronwheel.domain.clock import ClockEstimate
from cronwheel.domain.firing import FiringState
from cronwheel.domain.memo import remembered
from cronwheel.domain.models import (
    ClaimedFiring,
    Epoch,
    Firing,
    FiringId,
    Job,
    JobEvent,
    JobId,
    JobPolicies,
    JobSpec,
    Lease,
    NodeInfo,
    bounds_json,
    policies_json,
)
from cronwheel.domain.schedules import Schedule, schedule_from_dict
from cronwheel.store.protocol import ApiToken, TzRecord

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Row(Protocol):
    """A result row addressable by column name (sqlite3.Row, psycopg dict rows)."""

    def __getitem__(self, key: str, /) -> Any: ...


SHARDS = 256
_SORTED_JSON = json.JSONEncoder(
    sort_keys=True
)  # made once: json.dumps(sort_keys=...) makes one per call


def duration_us(delta: timedelta) -> int:
    """timedelta -> integer microseconds (exact, no float rounding)."""
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def to_us(instant: datetime) -> int:
    """Aware datetime -> integer microseconds since the Unix epoch."""
    return duration_us(instant - _EPOCH)


def from_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def opt_us(instant: datetime | None) -> int | None:
    return None if instant is None else to_us(instant)


def opt_dt(us: int | None) -> datetime | None:
    return None if us is None else from_us(us)


def shard_of(namespace: str, name: str) -> int:
    """A fixed shard key for hot statements (see DESIGN.md, scale path)."""
    return zlib.crc32(f"{namespace}\x00{name}".encode("utf-8", "surrogatepass")) % SHARDS


def job_params(spec: JobSpec) -> dict[str, Any]:
    policies = spec.policies
    payload = spec.payload
    schedule = spec.schedule.to_dict()
    return {
        "namespace": spec.namespace,
        "name": spec.name,
        "task": spec.task,
        "schedule": _SORTED_JSON.encode(schedule),
        "payload": payload,
        "policies": policies_json(policies),
        "spec_hash": spec.spec_hash(payload=payload, schedule=schedule),
        "priority": float(policies.priority),
        "max_attempts": policies.max_attempts,
        "visibility_us": int(policies.visibility_timeout.total_seconds() * 1_000_000),
        "paused": bool(spec.paused),  # SQLite stores it as 1/0
        "shard": shard_of(spec.namespace, spec.name),
        "max_concurrency": spec.max_concurrency,
        "overlap": policies.overlap.value,
        "max_buffer": policies.max_buffer,
        "cancel_grace_us": duration_us(policies.cancel_grace),
        "start_deadline_us": None
        if policies.start_deadline is None
        else duration_us(policies.start_deadline),
        "bounds": bounds_json(spec.bounds_dict()),
        "remaining_runs": spec.max_runs,
        "trace_context": None
        if not spec.trace_context
        else json.dumps(spec.trace_context, sort_keys=True),
    }


def _load(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def opt_instant(value: Any) -> datetime | None:
    """SQLite rows hold microseconds; PostgreSQL rows hold timestamptz (in UTC already:
    the store's sessions run with TimeZone=UTC)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo is UTC else value.astimezone(UTC)
    return from_us(int(value))


def req_instant(value: Any) -> datetime:
    instant = opt_instant(value)
    assert instant is not None
    return instant


def schedule_from_stored(value: Any) -> Schedule:
    """A schedule from its stored JSON text (SQLite) or mapping (PostgreSQL jsonb),
    cached: parsing a cron expression and loading its zone is the dominant cost of
    loading a herd of jobs that share a few schedules."""
    if isinstance(value, str):
        return _schedule_cached(value)
    # a mapping is keyed by its repr: jsonb hands each document's keys in one order (its
    # own), and a repr costs a fifth of a sorted json.dumps (`bench api`'s jobs list
    # made two a row); a mapping in another order is only another entry
    return remembered(_SCHEDULES, repr(value), lambda: schedule_from_dict(value), 16384)


@lru_cache(maxsize=16384)
def _schedule_cached(text: str) -> Schedule:
    return schedule_from_dict(json.loads(text))


def policies_from_stored(value: Any) -> JobPolicies:
    """JobPolicies from a stored JSON text (SQLite) or mapping (PostgreSQL jsonb), cached:
    claims and scans see the same few policy documents over and over."""
    if isinstance(value, str):
        return _policies_cached(value)
    return remembered(_POLICIES, repr(value), lambda: JobPolicies.from_dict(value), 4096)


@lru_cache(maxsize=4096)
def _policies_cached(text: str) -> JobPolicies:
    return JobPolicies.from_dict(json.loads(text))


# jsonb documents by repr (schedule_from_stored, policies_from_stored)
_SCHEDULES: dict[str, Schedule] = {}
_POLICIES: dict[str, JobPolicies] = {}


def _opt_rfc3339(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00"))


def job_from_row(row: Row) -> Job:
    payload = _load(row["payload"])
    bounds = _load(row["bounds"]) or {}
    spec = JobSpec(
        name=row["name"],
        task=row["task"],
        schedule=schedule_from_stored(row["schedule"]),
        args=tuple(payload["args"]),
        kwargs=payload["kwargs"],
        namespace=row["namespace"],
        policies=policies_from_stored(row["policies"]),
        paused=bool(row["paused"]),
        start_at=_opt_rfc3339(bounds.get("start_at")),
        end_at=_opt_rfc3339(bounds.get("end_at")),
        max_runs=bounds.get("max_runs"),
    )
    return Job(
        id=JobId(row["id"]),
        spec=spec,
        next_fire_at=opt_instant(row["next_fire_at"]),
        last_fired_at=opt_instant(row["last_fired_at"]),
        paused=bool(row["paused"]),
        missed_total=int(row["missed_total"]),
        remaining_runs=row["remaining_runs"],
        created_at=req_instant(row["created_at"]),
        updated_at=req_instant(row["updated_at"]),
    )


def new_job(row: Row, spec: JobSpec, first_fire_at: datetime | None) -> Job:
    """A job just inserted from ``spec`` (its row gives ``id`` and ``created_at``): what
    ``job_from_row`` of its full row gives, without reading the row back."""
    created = req_instant(row["created_at"])
    return Job(
        id=JobId(row["id"]),
        spec=spec,
        next_fire_at=opt_instant(first_fire_at),
        last_fired_at=None,
        paused=bool(spec.paused),
        missed_total=0,
        remaining_runs=spec.max_runs,
        created_at=created,
        updated_at=created,
    )


_STATES = {s.value: s for s in FiringState}


def firing_from_row(row: Row) -> Firing:
    payload = _load(row["payload"])
    return Firing(
        id=FiringId(row["id"]),
        job_id=JobId(row["job_id"]),
        job_name=row["job_name"],
        namespace=row["namespace"],
        task=row["task"],
        args=tuple(payload["args"]),
        kwargs=payload["kwargs"],
        scheduled_for=req_instant(row["scheduled_for"]),
        due_at=req_instant(row["due_at"]),
        state=_STATES[row["state"]],
        attempt=int(row["attempt"]),
        max_attempts=int(row["max_attempts"]),
        priority=float(row["priority"]),
        enqueued_at=req_instant(row["enqueued_at"]),
        enqueued_epoch=row["enqueued_epoch"],
        claim_token=row["claim_token"],
        worker_id=row["worker_id"],
        lease_until=opt_instant(row["lease_until"]),
        started_at=opt_instant(row["started_at"]),
        finished_at=opt_instant(row["finished_at"]),
        error=row["error"],
        note=row["note"],
        cancel_requested_at=opt_instant(row["cancel_requested_at"]),
        reason=row["reason"],
        overlap_override=row["overlap_override"],
        claimed_at=opt_instant(row["claimed_at"]),
    )


def attempt_from_row(row: Row, prefix: str = "") -> Attempt:
    """A recorded attempt (a ``firing_attempts`` row; its columns named with ``prefix``
    in a row joined to its firing's)."""
    return Attempt(
        attempt=int(row[prefix + "attempt"]),
        worker_id=row[prefix + "worker_id"],
        claimed_at=opt_instant(row[prefix + "claimed_at"]),
        started_at=opt_instant(row[prefix + "started_at"]),
        finished_at=opt_instant(row[prefix + "finished_at"]),
        outcome=AttemptOutcome(row[prefix + "outcome"]),
        error=row[prefix + "error"],
    )


def claimed_from_rows(
    rows: Iterable[Row],
    stored_policies: Callable[[Row], Any],
    stored_trace: Callable[[Row], Any] | None = None,
) -> list[ClaimedFiring]:
    """Claimed firing rows as ClaimedFirings, in claim order (virtual deadline, then id);
    ``stored_policies`` gives a row's job policies as stored, ``stored_trace`` its job's
    trace context as stored (JSON text or None)."""
    claimed = []
    for r in sorted(rows, key=lambda r: (r["vdeadline"], r["id"])):
        firing = firing_from_row(r)
        assert firing.lease_until is not None
        claimed.append(
            ClaimedFiring(
                firing=firing,
                claim_token=r["claim_token"],
                lease_until=firing.lease_until,
                policies=policies_from_stored(stored_policies(r)),
                trace_context=None if stored_trace is None else _trace(stored_trace(r)),
            )
        )
    return claimed


def _trace(stored: Any) -> dict[str, str] | None:
    return None if stored is None else {str(k): str(v) for k, v in _load(stored).items()}


def clock_params(clock: ClockEstimate | None) -> dict[str, Any]:
    """A node's reported clock as the nodes table's three columns."""
    if clock is None:
        return {"clock_offset": None, "clock_uncertainty": None, "clock_flag": None}
    return {
        "clock_offset": clock.offset,
        "clock_uncertainty": clock.uncertainty,
        "clock_flag": clock.flag,
    }


def node_from_row(row: Row) -> NodeInfo:
    return NodeInfo(
        id=row["id"],
        kind=row["kind"],
        hostname=row["hostname"],
        pid=int(row["pid"]),
        started_at=req_instant(row["started_at"]),
        heartbeat_at=req_instant(row["heartbeat_at"]),
        wake_addr=row["wake_addr"],
        info=_load(row["info"]) or {},
        clock=None
        if row["clock_offset"] is None
        else ClockEstimate(
            float(row["clock_offset"]), float(row["clock_uncertainty"]), row["clock_flag"]
        ),
        tz_source=row["tz_source"],
        tz_version=row["tz_version"],
    )


def event_from_row(row: Row) -> JobEvent:
    return JobEvent(
        id=int(row["id"]),
        job_id=JobId(row["job_id"]),
        at=req_instant(row["at"]),
        kind=row["kind"],
        first_at=opt_instant(row["first_at"]),
        last_at=opt_instant(row["last_at"]),
        count=int(row["count"]),
        exact=bool(row["exact"]),
        detail=row["detail"],
    )


def lease_from_row(row: Row) -> Lease:
    return Lease(
        name=row["name"],
        holder=row["holder"],
        epoch=Epoch(row["epoch"]),
        expires_at=req_instant(row["expires_at"]),
        acquired_at=req_instant(row["acquired_at"]),
    )


def token_from_row(row: Row) -> ApiToken:
    return ApiToken(
        id=int(row["id"]),
        namespace=row["namespace"],
        role=row["role"],
        label=row["label"],
        secret_hash=row["secret_hash"],
        created_at=req_instant(row["created_at"]),
        revoked_at=opt_instant(row["revoked_at"]),
    )


def tz_record_from_text(value: str | None) -> TzRecord | None:
    """The meta row's JSON as a record (None: no leader recorded one yet)."""
    if not value:
        return None
    doc = json.loads(value)
    return TzRecord(
        source=str(doc["source"]), version=str(doc["version"]), zones=dict(doc.get("zones", {}))
    )


def tz_record_text(record: TzRecord) -> str:
    return json.dumps(
        {"source": record.source, "version": record.version, "zones": record.zones},
        sort_keys=True,
    )


def tz_files_text(files: Mapping[str, bytes]) -> str:
    """A tz database's compiled zone files as one JSON text: names and sizes, and the
    files one after the other in one zlib stream (base64), which shares the bytes of
    the many identical ones (links): ~100 kB for the whole database."""
    names = sorted(files)
    blob = zlib.compress(b"".join(files[n] for n in names), 6)
    return json.dumps(
        {
            "names": names,
            "sizes": [len(files[n]) for n in names],
            "data": base64.b64encode(blob).decode(),
        }
    )


def tz_files_from_text(value: str | None) -> dict[str, bytes]:
    if not value:
        return {}
    doc = json.loads(value)
    data = zlib.decompress(base64.b64decode(doc["data"]))
    out: dict[str, bytes] = {}
    at = 0
    for name, size in zip(doc["names"], doc["sizes"], strict=True):
        out[name] = data[at : at + size]
        at += size
    return out
