"""The history port: what the jobs page, ``/metrics`` and ``cronwheel status`` read of
many jobs' firings at once (backlogs, lateness samples, last outcomes), without
building each firing. Part of the API's jobs port; re-exported by ``store.protocol``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from cronwheel.domain.models import JobId, RecentRuns


class HistoryPort(Protocol):
    """Many jobs' backlogs and recent history, each in one read."""

    def job_backlog(self, namespace: str, *, limit: int = 50) -> dict[str, int]:
        """QUEUED + RUNNING firings per job name of one namespace, largest first."""
        ...

    def recent_runs(
        self, job_ids: Sequence[JobId], *, sample: int = 100
    ) -> dict[JobId, RecentRuns]:
        """Each job's :class:`~cronwheel.domain.models.RecentRuns` over its newest
        ``sample`` firings: its first-attempt lateness samples and its last outcome, for
        every id given (a job without firings, or unknown: empty). Only the columns that
        takes, never whole firings, in one read (on PostgreSQL one statement for all the
        jobs): the jobs page, ``/metrics`` and ``cronwheel status`` read their many jobs'
        lateness with it."""
        ...
