"""Row and parameter shaping for PostgresStore: domain values to array parameters of
the batched statements, rows back to domain values."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from cronwheel.store import codec
from cronwheel.store.core.fair import FairClocks
from cronwheel.store.protocol import Completion, JobAdvance

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


def utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


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


def fair_deadline_at(fair: FairClocks, namespace: str, priority: float, due: datetime) -> datetime:
    """A firing's virtual deadline from its namespace's clock in ``fair`` (seen first)."""
    return codec.from_us(fair.deadline(namespace, priority, codec.to_us(due)))


def clock_params(fair: FairClocks) -> dict[str, Any]:
    """The clocks written back with the inserts (the SQL keeps the greater value)."""
    return {"c_ns": list(fair.clocks), "c_clock": list(fair.clocks.values())}


def advance_params(batch: Sequence[JobAdvance]) -> dict[str, Any]:
    """enqueue_advance: every job's cursor compare-and-swap, as one JSON text for
    json_to_recordset (psycopg dumps parameter arrays element by element in Python: the
    leader of a minute's burst of cron jobs spent a fifth of its time doing that)."""
    return {
        "adv": json.dumps(
            [
                {
                    "job_id": a.job_id,
                    "expected": _iso(a.expected_next_fire_at),
                    "new_next": _iso(a.new_next_fire_at),
                    "last_fired": _iso(max((f.scheduled_for for f in a.firings), default=None)),
                    "missed": sum(m.count for m in a.missed),
                    "runs": len(a.firings),
                }
                for a in batch
            ]
        )
    }


def insert_params(
    batch: Sequence[JobAdvance],
    moved: Mapping[int, tuple[str, float]],
    fair: FairClocks,
    epoch: int,
) -> dict[str, Any]:
    """enqueue_insert: the firings and missed ranges of the jobs in ``moved`` (job id ->
    namespace, priority), in batch order, each firing's virtual deadline from ``fair``;
    each list one JSON text, as in ``advance_params``."""
    firings: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for adv in batch:
        if adv.job_id not in moved:
            continue
        namespace, priority = moved[adv.job_id]
        for f in adv.firings:
            due = f.due_at or f.scheduled_for
            firings.append(
                {
                    "job_id": adv.job_id,
                    "at": _iso(f.scheduled_for),
                    "due": _iso(due),
                    "vd": _iso(fair_deadline_at(fair, namespace, priority, due)),
                    "note": None if f.note is None else _text(f.note),
                    "ord": len(firings),
                }
            )
        for m in adv.missed:
            events.append(
                {
                    "job_id": adv.job_id,
                    "first_at": _iso(m.first),
                    "last_at": _iso(m.last),
                    "count": m.count,
                    "exact": bool(m.exact),
                    "detail": None if m.reason is None else _text(m.reason),
                    "ord": len(events),
                }
            )
    return {
        "firings": json.dumps(firings, ensure_ascii=False),
        "events": json.dumps(events, ensure_ascii=False),
        **clock_params(fair),
        "epoch": epoch,
    }


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HEX = re.compile(r"[0-9a-f]{1,15}")  # to_hex of a positive bigint below 2**60


def token_instant(token: str) -> datetime | None:
    """The scheduled instant a claim token carries, or None. A claim (claims.sql
    claim_take, schema.sql migration_18) writes the token as the firing's
    ``scheduled_for`` in hexadecimal epoch microseconds, ``.``, then 32 random hex
    digits: the statements that find held firings by (id, token) read only the day
    partitions of their instants instead of probing every partition's primary key. A
    token written before migration 18, or not written by a claim, carries none; one
    past datetime's range carries none either."""
    head, dot, _ = token.partition(".")
    if not dot or _HEX.fullmatch(head) is None:
        return None
    try:
        return _EPOCH + timedelta(microseconds=int(head, 16))
    except OverflowError:
        return None


def claim_instants(tokens: Sequence[str]) -> list[datetime] | None:
    """The instants of ``tokens`` (token_instant), which confine start, heartbeat and
    completion to their partitions (schema.sql migration_18); None when one carries
    none (the instants are then read by id, in every partition). A wrong instant only
    misses the row, as a wrong token does: the CAS fails."""
    out = []
    for token in tokens:
        at = token_instant(token)
        if at is None:
            return None
        out.append(at)
    return out


def complete_params(batch: Sequence[Completion]) -> dict[str, Any]:
    """The batch as one JSON text for complete_batch's json_to_recordset, and the
    claims' instants (claim_instants)."""
    return {
        "instants": claim_instants([c.claim_token for c in batch]),
        "batch": json.dumps(
            [
                {
                    "id": c.firing_id,
                    "token": c.claim_token,
                    "ok": c.succeeded,
                    "cancelled": c.cancelled,
                    "started_at": _iso(c.started_at),
                    "finished_at": _iso(c.finished_at),
                    "error": None if c.error is None else _text(c.error),
                    "retry_at": _iso(c.retry_at),
                }
                for c in batch
            ],
            ensure_ascii=False,
        ),
    }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _text(value: str) -> str:
    """A handler's error text as a PostgreSQL text column takes it: NUL (e.g. in
    subprocess output) and lone surrogates, which it refuses, are replaced, so that
    neither can make the outcome unrecordable."""
    value = value.replace("\x00", "\ufffd")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value
