"""Store state for metrics and dashboard tests: firings driven through the real
SQLite store (enqueue, claim, complete) under a FakeClock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from cronwheel.domain.clock import FakeClock
from cronwheel.domain.models import ClaimedFiring, Firing, JobSpec
from cronwheel.domain.schedules import now as now_schedule
from cronwheel.store.protocol import Completion
from cronwheel.store.sqlite import SqliteStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def make_store(tmp_path: Path, clock: FakeClock | None = None) -> SqliteStore:
    store = SqliteStore(str(tmp_path / "m.db"), clock=clock or FakeClock(T0))
    store.migrate()
    return store


def queue(store: SqliteStore, name: str, *, namespace: str = "default", task: str = "t") -> Firing:
    """A one-shot job with a QUEUED firing due now."""
    spec = JobSpec(name=name, task=task, schedule=now_schedule(), namespace=namespace)
    return store.enqueue_now(spec)


def claim_all(
    store: SqliteStore, task: str = "t", worker: str = "w1", limit: int = 100
) -> list[ClaimedFiring]:
    return store.claim(worker, tasks=[task], limit=limit)


def finish(
    store: SqliteStore,
    claim: ClaimedFiring,
    *,
    late_ms: float,
    ok: bool = True,
    retry: bool = False,
) -> None:
    f = claim.firing
    started = f.scheduled_for + timedelta(milliseconds=late_ms)
    store.complete(
        [
            Completion(
                firing_id=f.id,
                claim_token=claim.claim_token,
                succeeded=ok,
                started_at=started,
                finished_at=started + timedelta(milliseconds=5),
                error=None if ok else "boom",
                retry_at=started if retry else None,
            )
        ]
    )


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Exposition text -> {(sample name, sorted labels): value}, via the official parser."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, tuple(sorted(labels.items()))))
