"""What the worker reports: a sink it is given, not a module it imports.

The node wiring passes ``observability.sinks.WorkerSink`` (Prometheus counters and
structlog lines); tests pass a recorder. The worker keeps its own ``WorkerStats``
either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from cronwheel.domain.clock import ClockEstimate
from cronwheel.domain.models import ClaimedFiring, Firing, FiringId


class WorkerEvents(Protocol):
    def worker_started(self, worker_id: str, tasks: Sequence[str], concurrency: int) -> None: ...

    def worker_stopped(self, worker_id: str) -> None: ...

    def claimed(self, claims: Sequence[ClaimedFiring]) -> None:
        """One claim's firings (its size; a firing of attempt > 1 is a redelivery)."""
        ...

    def firing_started(self, firing: Firing, lateness_ms: float) -> None:
        """``lateness_ms``: the start minus the firing's instant."""
        ...

    def firing_succeeded(self, firing: Firing, lateness_ms: float, duration_ms: float) -> None: ...

    def firing_failed(self, firing: Firing, retry_at: datetime | None, error: str) -> None:
        """``error``: the last line of the failure; ``retry_at`` None: no retry left."""
        ...

    def firing_cancelled(self, firing: Firing) -> None: ...

    def handler_stopped(self, firing: Firing, reason: str, signal: str, at: float) -> None:
        """A process-isolated handler was stopped (``reason``: timeout, cancel grace
        passed, revoked) by ``signal`` (SIGTERM, or SIGKILL after the kill grace); ``at``
        (Unix seconds): when its process was found gone."""
        ...

    def claims_renewed(self, count: int) -> None: ...

    def claim_lost(self, firing_id: FiringId) -> None: ...

    def completion_rejected(self, firing_id: FiringId) -> None:
        """A result was refused: the claim was no longer held."""
        ...

    def store_unavailable(self, error: str, retry_in_s: float | None = None) -> None: ...

    def clock_flagged(self, worker_id: str, clock: ClockEstimate) -> None:
        """The worker's clock passed its bounds (``clock.flag`` says how): it claims
        nothing until :meth:`clock_recovered`."""
        ...

    def clock_recovered(self, worker_id: str, clock: ClockEstimate) -> None: ...


class QuietWorkerEvents:
    """Reports nothing: for a worker built without a sink."""

    def worker_started(self, worker_id: str, tasks: Sequence[str], concurrency: int) -> None:
        pass

    def worker_stopped(self, worker_id: str) -> None:
        pass

    def claimed(self, claims: Sequence[ClaimedFiring]) -> None:
        pass

    def firing_started(self, firing: Firing, lateness_ms: float) -> None:
        pass

    def firing_succeeded(self, firing: Firing, lateness_ms: float, duration_ms: float) -> None:
        pass

    def firing_failed(self, firing: Firing, retry_at: datetime | None, error: str) -> None:
        pass

    def firing_cancelled(self, firing: Firing) -> None:
        pass

    def handler_stopped(self, firing: Firing, reason: str, signal: str, at: float) -> None:
        pass

    def claims_renewed(self, count: int) -> None:
        pass

    def claim_lost(self, firing_id: FiringId) -> None:
        pass

    def completion_rejected(self, firing_id: FiringId) -> None:
        pass

    def store_unavailable(self, error: str, retry_in_s: float | None = None) -> None:
        pass

    def clock_flagged(self, worker_id: str, clock: ClockEstimate) -> None:
        pass

    def clock_recovered(self, worker_id: str, clock: ClockEstimate) -> None:
        pass
