"""The memory store's tz database methods (store/core/tzdata.py in the SQL stores):
the cluster's tz database, and the cursors re-resolved when it changes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime

from cronwheel.domain.models import Job, JobId, Lease
from cronwheel.errors import LeaseLostError
from cronwheel.store import codec
from cronwheel.store.codec import from_us, opt_us, to_us
from cronwheel.store.memory import work
from cronwheel.store.memory.base import MemoryBase
from cronwheel.store.memory.rows import MemoryData
from cronwheel.store.protocol import CursorMove, TzRecord


class TzMethods(MemoryBase):
    def tz_record(self) -> TzRecord | None:
        with self._tx() as data:
            return codec.tz_record_from_text(data.tzdata)

    def tz_zone_files(self) -> dict[str, bytes]:
        with self._tx() as data:
            return codec.tz_files_from_text(data.tzdata_files)

    def tz_zone_jobs(
        self, zones: Sequence[str], *, after_id: int, limit: int
    ) -> list[tuple[Job, datetime | None]]:
        wanted = set(zones)
        out: list[tuple[Job, datetime | None]] = []
        with self._tx() as data:
            for job_id in sorted(data.jobs):
                if job_id <= after_id or len(out) >= limit:
                    continue
                row = data.jobs[job_id]
                schedule = json.loads(row.schedule)
                if (
                    row.next_fire_at is None
                    or schedule.get("kind") != "cron"
                    or schedule.get("tz") not in wanted
                ):
                    continue
                missed = [
                    e.last_at
                    for e in data.events.values()
                    if e.job_id == job_id and e.kind == "missed" and e.last_at is not None
                ]
                out.append((codec.job_from_row(row), from_us(max(missed)) if missed else None))
        return out

    def move_cursors(self, lease: Lease, moves: Sequence[CursorMove]) -> list[JobId]:
        with self._tx() as data:
            now = self._fenced(data, lease)
            moved: list[JobId] = []
            for move in moves:
                job = data.jobs.get(move.job_id)
                if job is None or job.next_fire_at != to_us(move.old):
                    continue
                job.next_fire_at = opt_us(move.new)
                work.add_event(
                    data,
                    move.job_id,
                    now=now,
                    kind="tz_moved",
                    first_at=to_us(move.old),
                    last_at=opt_us(move.new),
                    count=1,
                    detail=move.detail,
                )
                moved.append(move.job_id)
            if moved:
                data.jobs_version += 1
            return moved

    def record_tz(self, lease: Lease, record: TzRecord, files: Mapping[str, bytes]) -> None:
        with self._tx() as data:
            self._fenced(data, lease)
            data.tzdata = codec.tz_record_text(record)
            data.tzdata_files = codec.tz_files_text(files)

    def _fenced(self, data: MemoryData, lease: Lease) -> int:
        """The store's clock reading, if ``lease`` is held (else LeaseLostError)."""
        now = self._now_us()
        held = data.leases.get(lease.name)
        if (
            held is None
            or (held.holder, held.epoch) != (lease.holder, lease.epoch)
            or held.expires_at <= now
        ):
            raise LeaseLostError(
                f"lease {lease.name!r} epoch {lease.epoch} is no longer held by {lease.holder}"
            )
        return now
