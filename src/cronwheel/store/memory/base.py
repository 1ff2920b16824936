"""The memory store's plumbing: one lock, the store's clock, in-process wake-ups, and
the row look-ups and inserts its methods share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import structlog

from cronwheel.domain.clock import Clock, SystemClock
from cronwheel.domain.models import FiringId, JobSpec
from cronwheel.errors import ConflictError, FiringNotFoundError, JobNotFoundError, StoreError
from cronwheel.store import codec
from cronwheel.store.codec import opt_us, to_us
from cronwheel.store.memory import work
from cronwheel.store.memory.rows import FiringRow, JobRow, MemoryData

log = structlog.get_logger("cronwheel.store.memory")


class MemoryBase:
    """What every part of MemoryStore shares; see store.py."""

    def __init__(self, *, clock: Clock | None = None, data: MemoryData | None = None) -> None:
        self.data = data if data is not None else MemoryData()
        self._clock = clock or SystemClock()
        self._closed = False

    # -- plumbing ---------------------------------------------------------------------
    @contextmanager
    def _tx(self) -> Iterator[MemoryData]:
        with self.data.lock:
            if self._closed:
                raise StoreError("the memory store is closed", field="store")
            yield self.data

    def _now_us(self) -> int:
        return to_us(self._clock.now())

    def now(self) -> datetime:
        return self._clock.now()

    def _wake(self) -> None:
        """Tell in-process listeners that work was queued (after the change is made). A
        hint is only a latency saver: a listener that raises loses it, the work stands."""
        with self.data.lock:
            callbacks = list(self.data.wakeups)
        for callback in callbacks:
            try:
                callback()
            except Exception as exc:  # e.g. a stopped worker's closed event loop
                log.warning("wakeup_failed", error=repr(exc))

    def _new_job(self, data: MemoryData, spec: JobSpec, first: datetime | None, now: int) -> JobRow:
        if (spec.namespace, spec.name) in data.job_names:
            raise ConflictError(
                f"a job named {spec.name!r} already exists in namespace {spec.namespace!r}",
                field="name",
                code="job_exists",
            )
        row = JobRow(
            id=data.next_id("jobs"),
            next_fire_at=opt_us(first),
            created_at=now,
            updated_at=now,
            **codec.job_params(spec),
        )
        data.jobs[row.id] = row
        data.job_names[(row.namespace, row.name)] = row.id
        return row

    def _job(self, data: MemoryData, namespace: str, name: str) -> JobRow:
        job_id = data.job_names.get((namespace, name))
        if job_id is None:
            raise JobNotFoundError(f"no job named {name!r}", field="name")
        return data.jobs[job_id]

    def _firing(self, data: MemoryData, firing_id: FiringId) -> FiringRow:
        row = data.firings.get(firing_id)
        if row is None:
            raise FiringNotFoundError(f"no firing with id {firing_id}", field="firing_id")
        return row

    def _enqueue_now_in(self, data: MemoryData, spec: JobSpec) -> FiringRow:
        now = self._now_us()
        if (spec.namespace, spec.name) in data.job_names:
            raise ConflictError(
                f"a job named {spec.name!r} already exists", field="name", code="job_exists"
            )
        job = self._new_job(data, spec, None, now)
        job.last_fired_at = now
        row = work.insert_firing(
            data, job, scheduled_for=now, due_at=now, now=now, epoch=None, note=None
        )
        assert row is not None  # a new job has no firings
        return row
