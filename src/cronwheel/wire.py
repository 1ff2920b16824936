"""The JSON shapes of the HTTP API, written by the API and read by the SDK client.

One codec for both sides so they cannot drift apart. Only the domain is imported:
no web framework, no HTTP client, no store.

- Policies travel as ``JobPolicies.to_dict()`` with the ``_s`` suffix of durations
  dropped: ``{"max_attempts": 3, "retry_backoff": 1.0, "timeout": null, ...}``.
- Schedules travel as ``Schedule.to_dict()``; a reader ignores null keys.
- Instants are RFC 3339 UTC text (``format_instant``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, TypeVar

from cronwheel.domain.attempts import Attempt, AttemptOutcome, first_lateness
from cronwheel.domain.batch import BatchResult
from cronwheel.domain.clock import ClockEstimate
from cronwheel.domain.firing import FiringState, format_instant
from cronwheel.domain.models import (
    DURATION_POLICIES,
    Firing,
    FiringId,
    Job,
    JobId,
    JobPolicies,
    JobSpec,
)
from cronwheel.domain.results import CancelResult
from cronwheel.domain.schedules import Schedule, parse_instant, schedule_from_dict
from cronwheel.domain.skips import SkipResult
from cronwheel.errors import CronwheelError

T = TypeVar("T")


def _ts(value: datetime | None) -> str | None:
    return None if value is None else format_instant(value)


def _instant(value: Any) -> datetime | None:
    return None if value is None else parse_instant(str(value), "instant")


def _req_instant(value: Any) -> datetime:
    return parse_instant(str(value), "instant")


# -- policies and schedules ----------------------------------------------------------
def policies_to_json(policies: JobPolicies) -> dict[str, Any]:
    return dict(_policies_doc(policies))


@lru_cache(maxsize=1024)
def _policies_doc(policies: JobPolicies) -> dict[str, Any]:
    """Cached (copied out by policies_to_json): a listing or a batch of a thousand jobs
    shares a few policy values."""
    return {k.removesuffix("_s"): v for k, v in policies.to_dict().items()}


def policies_from_json(doc: Mapping[str, Any]) -> JobPolicies:
    return JobPolicies.from_dict(
        {(f"{k}_s" if k in DURATION_POLICIES else k): v for k, v in doc.items()}
    )


def schedule_to_json(schedule: Schedule | Mapping[str, Any]) -> dict[str, Any]:
    """A schedule as a request sends it: its ``to_dict()`` without the null keys."""
    doc = dict(schedule) if isinstance(schedule, Mapping) else schedule.to_dict()
    return {k: v for k, v in doc.items() if v is not None}


def schedule_from_json(doc: Mapping[str, Any]) -> Schedule:
    return schedule_from_dict(schedule_to_json(doc))


# -- jobs ------------------------------------------------------------------------------
def job_state(job: Job) -> str:
    """``active`` (has a next instant), ``paused``, or ``done``."""
    if job.paused:
        return "paused"
    return "done" if job.next_fire_at is None else "active"


def job_to_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "namespace": job.namespace,
        "name": job.name,
        "task": job.spec.task,
        "schedule": job.spec.schedule.to_dict(),
        "schedule_text": job.spec.schedule.describe(),
        "args": list(job.spec.args),
        "kwargs": job.spec.kwargs,
        "policies": policies_to_json(job.spec.policies),
        "paused": job.paused,
        "state": job_state(job),
        "next_fire_at": _ts(job.next_fire_at),
        "last_fired_at": _ts(job.last_fired_at),
        "missed_total": job.missed_total,
        **job.spec.bounds_dict(),
        "remaining_runs": job.remaining_runs,
        "created_at": _ts(job.created_at),
        "updated_at": _ts(job.updated_at),
    }


def job_from_json(doc: Mapping[str, Any]) -> Job:
    spec = JobSpec(
        name=doc["name"],
        task=doc["task"],
        schedule=schedule_from_json(doc["schedule"]),
        args=tuple(doc["args"]),
        kwargs=dict(doc["kwargs"]),
        namespace=doc["namespace"],
        policies=policies_from_json(doc["policies"]),
        paused=bool(doc["paused"]),
        start_at=_instant(doc.get("start_at")),
        end_at=_instant(doc.get("end_at")),
        max_runs=doc.get("max_runs"),
    )
    return Job(
        id=JobId(int(doc["id"])),
        spec=spec,
        next_fire_at=_instant(doc["next_fire_at"]),
        last_fired_at=_instant(doc["last_fired_at"]),
        paused=bool(doc["paused"]),
        missed_total=int(doc["missed_total"]),
        remaining_runs=doc.get("remaining_runs"),
        created_at=_req_instant(doc["created_at"]),
        updated_at=_req_instant(doc["updated_at"]),
    )


# -- firings ---------------------------------------------------------------------------
def node_clock_to_json(clock: ClockEstimate | None) -> dict[str, Any] | None:
    """A node's clock as it last reported it (``/v1/status``, ``cronwheel status``):
    its offset to the store's clock and that offset's uncertainty in milliseconds, and
    why it is flagged (null: it is not); null when it has not measured it."""
    if clock is None:
        return None
    return {
        "offset_ms": round(clock.offset * 1000, 3),
        "uncertainty_ms": round(clock.uncertainty * 1000, 3),
        "flagged": clock.flag is not None,
        "flag": clock.flag,
    }


def clock_text(clock: Mapping[str, Any] | None) -> str:
    """A node's clock (:func:`node_clock_to_json`) in words: its offset ± uncertainty."""
    if clock is None:
        return "not measured"
    return f"{clock['offset_ms']:+.1f} ms ± {clock['uncertainty_ms']:.1f}"


def lateness_ms(lateness: timedelta | None) -> float | None:
    return None if lateness is None else round(lateness.total_seconds() * 1000, 3)


def firing_to_json(
    firing: Firing,
    *,
    attempts: Sequence[Attempt] | None = None,
    with_attempts: bool = False,
) -> dict[str, Any]:
    """The firing without its claim token. Given its ``attempts``, its ``lateness_ms`` is
    its first attempt's (not the row's latest start); ``with_attempts`` lists them."""
    doc = firing.to_dict() | {
        "args": list(firing.args),
        "kwargs": firing.kwargs,
        "cancel_requested_at": _ts(firing.cancel_requested_at),
    }
    if attempts is not None:
        doc["lateness_ms"] = lateness_ms(first_lateness(firing, attempts))
        if with_attempts:
            doc["attempts"] = [a.to_dict() for a in attempts]
    return doc


def attempt_from_json(doc: Mapping[str, Any]) -> Attempt:
    return Attempt(
        attempt=int(doc["attempt"]),
        worker_id=doc["worker_id"],
        claimed_at=_instant(doc["claimed_at"]),
        started_at=_instant(doc["started_at"]),
        finished_at=_instant(doc["finished_at"]),
        outcome=AttemptOutcome(doc["outcome"]),
        error=doc["error"],
    )


@dataclass(frozen=True, slots=True)
class FiringPage:
    """One page of ``GET /v1/firings``: pass ``next_cursor`` back for the next (None:
    the last page)."""

    items: list[Firing]
    next_cursor: str | None


def firing_page_from_json(doc: Mapping[str, Any]) -> FiringPage:
    return FiringPage(
        items=[firing_from_json(item) for item in doc["items"]], next_cursor=doc["next_cursor"]
    )


def firing_from_json(doc: Mapping[str, Any]) -> Firing:
    return Firing(
        id=FiringId(int(doc["id"])),
        job_id=JobId(int(doc["job_id"])),
        job_name=doc["job"],
        namespace=doc["namespace"],
        task=doc["task"],
        args=tuple(doc["args"]),
        kwargs=dict(doc["kwargs"]),
        scheduled_for=_req_instant(doc["scheduled_for"]),
        due_at=_req_instant(doc["due_at"]),
        state=FiringState(doc["state"]),
        attempt=int(doc["attempt"]),
        max_attempts=int(doc["max_attempts"]),
        priority=float(doc["priority"]),
        enqueued_at=_req_instant(doc["enqueued_at"]),
        enqueued_epoch=doc["enqueued_epoch"],
        worker_id=doc["worker_id"],
        claimed_at=_instant(doc.get("claimed_at")),
        started_at=_instant(doc["started_at"]),
        finished_at=_instant(doc["finished_at"]),
        error=doc["error"],
        note=doc["note"],
        cancel_requested_at=_instant(doc.get("cancel_requested_at")),
        reason=doc.get("reason"),
    )


def cancel_to_json(
    result: CancelResult, *, attempts: Sequence[Attempt] | None = None
) -> dict[str, Any]:
    """``attempts``: the firing's, for its first attempt's lateness (a retried one's)."""
    return {"result": result.outcome, "firing": firing_to_json(result.firing, attempts=attempts)}


def cancel_from_json(doc: Mapping[str, Any]) -> CancelResult:
    return CancelResult(outcome=doc["result"], firing=firing_from_json(doc["firing"]))


def skip_results_from_json(doc: Mapping[str, Any]) -> list[SkipResult]:
    """The per-occurrence results of ``POST /v1/jobs/{name}/skip``."""
    return [
        SkipResult(
            at=parse_instant(r["at"], "at"),
            outcome=r["outcome"],
            state=None if r["state"] is None else FiringState(r["state"]),
            firing_id=r["firing_id"],
        )
        for r in doc["results"]
    ]


# -- batches -----------------------------------------------------------------------------
def batch_to_json(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A batch's answer from its item documents, in order: each ``{"index", "status":
    201, "job"|"firing": ...}`` (200: a firing its idempotency key made before, neither
    created nor refused) or ``{"index", "status", "error": {code, message, field}}``."""
    created = sum(1 for doc in items if doc["status"] == 201)
    refused = sum(1 for doc in items if "error" in doc)
    return {"created": created, "refused": refused, "items": list(items)}


def batch_from_json(
    doc: Mapping[str, Any],
    key: str,
    made: Callable[[Mapping[str, Any]], T],
    refused: Callable[[int, Mapping[str, Any]], CronwheelError],
) -> BatchResult[T]:
    """A batch's answer as a BatchResult: ``made(item[key])`` for each created item,
    ``refused(status, item["error"])`` for each refused one."""
    results: list[T | CronwheelError] = []
    for item in sorted(doc["items"], key=lambda i: int(i["index"])):
        if item.get(key) is not None:
            results.append(made(item[key]))
        else:
            results.append(refused(int(item["status"]), item["error"]))
    return BatchResult(results)
