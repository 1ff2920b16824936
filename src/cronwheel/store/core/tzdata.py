"""The store core's tz database flows: the cluster's tz database (a meta row the leader
writes) and the cursors re-resolved when it changes, written once over a Dialect (the
queries are each engine's ``core_tzdata.sql``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TypeVar

from cronwheel.domain.models import Job, JobId, Lease
from cronwheel.errors import LeaseLostError
from cronwheel.store import codec
from cronwheel.store.core.admin import AdminFlows
from cronwheel.store.core.dialect import Dialect, Tx
from cronwheel.store.records import CursorMove, TzRecord

D = TypeVar("D", bound=Dialect)


class TzFlows(AdminFlows[D]):
    def tz_record(self) -> TzRecord | None:
        row = self._one("get_tzdata")
        return None if row is None else codec.tz_record_from_text(row["value"])

    def tz_zone_files(self) -> dict[str, bytes]:
        row = self._one("get_tzdata_files")
        return {} if row is None else codec.tz_files_from_text(row["value"])

    def tz_zone_jobs(
        self, zones: Sequence[str], *, after_id: int, limit: int
    ) -> list[tuple[Job, datetime | None]]:
        params = {"zones": self.db.text_list(list(zones)), "after_id": after_id, "limit": limit}
        rows = self._all("tz_zone_jobs", params)
        return [(codec.job_from_row(r), codec.opt_instant(r["last_missed_at"])) for r in rows]

    def move_cursors(self, lease: Lease, moves: Sequence[CursorMove]) -> list[JobId]:
        """In one fenced transaction: each move's cursor CAS and its 'tz_moved' event.
        Returns the jobs whose cursor moved (the others changed since)."""

        def body(tx: Tx) -> list[JobId]:
            self._fence(tx, lease)
            moved: list[JobId] = []
            for move in moves:
                params = {
                    "job_id": move.job_id,
                    "expected": self.db.instant(move.old),
                    "new_next": self._opt(move.new),
                }
                if tx.run("move_cursor", params):
                    tx.run(
                        "insert_tz_event",
                        {
                            "job_id": move.job_id,
                            "first_at": self.db.instant(move.old),
                            "last_at": self._opt(move.new),
                            "detail": move.detail,
                        },
                    )
                    moved.append(move.job_id)
            if moved:
                tx.run("bump_jobs_version")
            return moved

        return self.db.write(body) if moves else []

    def record_tz(self, lease: Lease, record: TzRecord, files: Mapping[str, bytes]) -> None:
        """In one fenced transaction: the record and its zone files."""
        text = codec.tz_record_text(record)
        files_text = codec.tz_files_text(files)

        def body(tx: Tx) -> None:
            self._fence(tx, lease)
            tx.run("set_tzdata", {"value": text})
            tx.run("set_tzdata_files", {"value": files_text})

        self.db.write(body)

    def _fence(self, tx: Tx, lease: Lease) -> None:
        fence = {"name": lease.name, "holder": lease.holder, "epoch": lease.epoch}
        if tx.one("fence_check", fence) is None:
            raise LeaseLostError(
                f"lease {lease.name!r} epoch {lease.epoch} is no longer held by {lease.holder}"
            )
