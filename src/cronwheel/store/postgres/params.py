"""Row and parameter shaping for PostgresStore: domain values to array parameters of
the batched statements, rows back to domain values."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from psycopg.rows import DictRow

from cronwheel.domain.models import Epoch, JobSpec, Lease
from cronwheel.domain.policies import BASE_LATENCY
from cronwheel.store import codec
from cronwheel.store.protocol import Completion, JobAdvance

BASE_LATENCY_US = int(BASE_LATENCY.total_seconds() * 1_000_000)
_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


def utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def job_params(spec: JobSpec) -> dict[str, Any]:
    params = codec.job_params(spec)
    params["paused"] = bool(params["paused"])
    return params


def lease_from_row(row: DictRow) -> Lease:
    return Lease(
        name=row["name"],
        holder=row["holder"],
        epoch=Epoch(row["epoch"]),
        expires_at=utc(row["expires_at"]),
        acquired_at=utc(row["acquired_at"]),
    )


def rounds(items: Sequence[_V], key: Callable[[_V], _K]) -> list[list[_V]]:
    """Split ``items`` into consecutive-order rounds in which no key repeats.

    One statement over a batch cannot apply two changes to one row in order; rounds
    can (the n-th occurrence of a key goes to round n). Almost always one round.
    """
    rounds: list[list[_V]] = []
    seen: dict[_K, int] = {}
    for item in items:
        k = key(item)
        n = seen.get(k, 0)
        seen[k] = n + 1
        if n == len(rounds):
            rounds.append([])
        rounds[n].append(item)
    return rounds


def enqueue_params(batch: Sequence[JobAdvance], epoch: int) -> dict[str, Any]:
    p: dict[str, list[Any]] = {
        k: []
        for k in (
            "a_job", "a_expected", "a_new", "a_last", "a_missed",
            "f_job", "f_at", "f_note",
            "e_job", "e_first", "e_last", "e_count", "e_exact", "e_detail",
        )
    }  # fmt: skip
    for adv in batch:
        p["a_job"].append(adv.job_id)
        p["a_expected"].append(adv.expected_next_fire_at)
        p["a_new"].append(adv.new_next_fire_at)
        p["a_last"].append(max((f.scheduled_for for f in adv.firings), default=None))
        p["a_missed"].append(sum(m.count for m in adv.missed))
        for f in adv.firings:
            p["f_job"].append(adv.job_id)
            p["f_at"].append(f.scheduled_for)
            p["f_note"].append(f.note)
        for m in adv.missed:
            p["e_job"].append(adv.job_id)
            p["e_first"].append(m.first)
            p["e_last"].append(m.last)
            p["e_count"].append(m.count)
            p["e_exact"].append(bool(m.exact))
            p["e_detail"].append(m.reason)
    return {**p, "epoch": epoch, "base_latency_us": BASE_LATENCY_US}


def complete_params(batch: Sequence[Completion]) -> dict[str, Any]:
    return {
        "ids": [c.firing_id for c in batch],
        "tokens": [c.claim_token for c in batch],
        "ok": [c.succeeded for c in batch],
        "started": [c.started_at for c in batch],
        "finished": [c.finished_at for c in batch],
        # a handler's error text may carry NUL (e.g. subprocess output), which a
        # PostgreSQL text column refuses: it must not make the outcome unrecordable
        "errors": [None if c.error is None else c.error.replace("\x00", "\ufffd") for c in batch],
        "retry_at": [c.retry_at for c in batch],
    }
