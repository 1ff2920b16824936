"""The tz database port: the cluster's tz database as its leader recorded it, and the
cursors re-resolved when a new version is adopted (dispatch/tzdata.py). Part of the
dispatcher's port; re-exported by ``store.protocol``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from cronwheel.domain.models import Job, JobId, Lease, NodeInfo
from cronwheel.store.records import CursorMove, TzRecord


class TzPort(Protocol):
    """What the leader needs to keep one tz database across the cluster."""

    def list_nodes(self, *, alive_within: timedelta | None = None) -> list[NodeInfo]:
        """The registered nodes (those that heartbeated within ``alive_within``), by kind
        and id: the leadership check compares their tz databases."""
        ...

    def tz_record(self) -> TzRecord | None:
        """The cluster's tz database as its leader recorded it (None: not yet)."""
        ...

    def tz_zone_files(self) -> dict[str, bytes]:
        """The compiled zone files of the recorded tz database, by zone name (empty: none
        recorded): the old rules when a leader adopts another version."""
        ...

    def tz_zone_jobs(
        self, zones: Sequence[str], *, after_id: int, limit: int
    ) -> list[tuple[Job, datetime | None]]:
        """A page, by id after ``after_id``, of the cron jobs with a cursor (paused or not)
        whose zone is one of ``zones``, each with the last instant a misfire policy dropped
        (its newest 'missed' event's ``last_at``; None: none)."""
        ...

    def move_cursors(self, lease: Lease, moves: Sequence[CursorMove]) -> list[JobId]:
        """In ONE transaction: check ``lease`` (or raise LeaseLostError and write nothing);
        for each move, compare-and-swap the job's cursor from ``old`` to ``new`` and, if it
        moved, record a 'tz_moved' job event (``first_at`` old, ``last_at`` new, the
        move's detail). Returns the jobs whose cursor moved."""
        ...

    def record_tz(self, lease: Lease, record: TzRecord, files: Mapping[str, bytes]) -> None:
        """In ONE transaction: check ``lease`` (or raise LeaseLostError and write nothing);
        store ``record`` as the cluster's tz database and ``files`` (its compiled zone
        files, by name)."""
        ...
