"""What the dispatcher reports: a sink it is given, not a module it imports.

The node wiring passes ``observability.sinks.DispatcherSink`` (Prometheus counters
and structlog lines); tests pass a recorder. The dispatcher keeps its own
``DispatcherStats`` either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol

from cronwheel.dispatch.tzdata import Adoption
from cronwheel.domain.policies import MissedRange
from cronwheel.domain.retention import PruneReport
from cronwheel.store.protocol import EnqueueResult, JobAdvance


class DispatchEvents(Protocol):
    def lease_acquired(self, holder: str, epoch: int) -> None:
        """A new term: this holder won the lease with ``epoch``."""
        ...

    def lease_renewed(self, epoch: int) -> None: ...

    def lease_lost(self, holder: str, epoch: int, reason: str) -> None: ...

    def lease_released(self, holder: str, epoch: int) -> None: ...

    def fenced_write(self) -> None:
        """An enqueue batch was refused by the epoch fence."""
        ...

    def firings_missed(self, job: str, missed: MissedRange, policy: str) -> None:
        """Instants a misfire policy dropped (``missed.count`` of them)."""
        ...

    def firings_enqueued(
        self,
        result: EnqueueResult,
        advances: Sequence[JobAdvance],
        *,
        now: datetime,
        lead: timedelta,
        epoch: int,
    ) -> None:
        """One enqueue batch was written; the lag of each firing is
        ``now - (scheduled_for - lead)`` (firings of stale jobs were not written)."""
        ...

    def schedule_failed(self, job: str, after: datetime, error: str) -> None:
        """``job``'s instant after ``after`` could not be computed (``error``): it ended."""
        ...

    def reaped(self, count: int) -> None:
        """The reaper changed ``count`` firings (expired claims re-queued, ...)."""
        ...

    def pruned(self, report: PruneReport) -> None:
        """A batch of the retention pass deleted finished history (``report``)."""
        ...

    def store_unavailable(self, error: str) -> None: ...

    def tz_leadership_refused(self, holder: str, reason: str | None) -> None:
        """This standby may not lead because of ``reason`` (its tz database is not the
        cluster's), or (None) it no longer is refused. Reported on change."""
        ...

    def tz_adopted(self, adoption: Adoption) -> None:
        """This leader made its tz database the cluster's; ``adoption.moves`` are the
        cursors re-resolved (``moved``: those written)."""
        ...


class QuietDispatchEvents:
    """Reports nothing: for a dispatcher built without a sink."""

    def lease_acquired(self, holder: str, epoch: int) -> None:
        pass

    def lease_renewed(self, epoch: int) -> None:
        pass

    def lease_lost(self, holder: str, epoch: int, reason: str) -> None:
        pass

    def lease_released(self, holder: str, epoch: int) -> None:
        pass

    def fenced_write(self) -> None:
        pass

    def firings_missed(self, job: str, missed: MissedRange, policy: str) -> None:
        pass

    def firings_enqueued(
        self,
        result: EnqueueResult,
        advances: Sequence[JobAdvance],
        *,
        now: datetime,
        lead: timedelta,
        epoch: int,
    ) -> None:
        pass

    def schedule_failed(self, job: str, after: datetime, error: str) -> None:
        pass

    def reaped(self, count: int) -> None:
        pass

    def pruned(self, report: PruneReport) -> None:
        pass

    def store_unavailable(self, error: str) -> None:
        pass

    def tz_leadership_refused(self, holder: str, reason: str | None) -> None:
        pass

    def tz_adopted(self, adoption: Adoption) -> None:
        pass
