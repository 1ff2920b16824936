"""The event sinks of production processes: Prometheus counters and structlog lines.

``cronwheel scheduler`` gives its dispatcher a :class:`DispatcherSink`,
``cronwheel worker`` its worker a :class:`WorkerSink` (see ``node``). Each event
updates the process-local metrics (``observability.process``) and writes the log
line of the same name (stable event names: README "Observability").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import structlog

from cronwheel.dispatch.tzdata import Adoption
from cronwheel.domain.clock import ClockEstimate
from cronwheel.domain.models import ClaimedFiring, Firing, FiringId
from cronwheel.domain.policies import MissedRange
from cronwheel.domain.retention import PruneReport
from cronwheel.observability.process import ProcessMetrics, process_metrics
from cronwheel.store.protocol import EnqueueResult, JobAdvance

# tz_firing_moved lines logged per adoption (the summary line counts them all)
TZ_MOVES_LOGGED = 100


class DispatcherSink:
    """``dispatch.events.DispatchEvents`` to Prometheus and structlog."""

    def __init__(self, metrics: ProcessMetrics | None = None) -> None:
        self.m = metrics or process_metrics()
        self.log = structlog.get_logger("cronwheel.dispatcher")

    def lease_acquired(self, holder: str, epoch: int) -> None:
        self.m.lease_acquired.inc()
        self.m.epoch.set(epoch)
        self.log.info("lease_acquired", holder=holder, epoch=epoch)

    def lease_renewed(self, epoch: int) -> None:
        self.m.lease_renewals.inc()
        self.m.is_leader.set(1)
        self.m.epoch.set(epoch)

    def lease_lost(self, holder: str, epoch: int, reason: str) -> None:
        self.m.lease_lost.inc()
        self.m.is_leader.set(0)
        self.log.warning("lease_lost", holder=holder, epoch=epoch, reason=reason)

    def lease_released(self, holder: str, epoch: int) -> None:
        self.log.info("lease_released", holder=holder, epoch=epoch)

    def fenced_write(self) -> None:
        self.m.fenced_writes.inc()

    def firings_missed(self, job: str, missed: MissedRange, policy: str) -> None:
        self.m.missed_instants.inc(missed.count)
        self.log.warning(
            "firings_missed",
            job=job,
            first=missed.first.isoformat(),
            last=missed.last.isoformat(),
            count=missed.count,
            exact=missed.exact,
            policy=policy,
        )

    def schedule_failed(self, job: str, after: datetime, error: str) -> None:
        self.log.error("schedule_failed", job=job, after=after.isoformat(), error=error)

    def firings_enqueued(
        self,
        result: EnqueueResult,
        advances: Sequence[JobAdvance],
        *,
        now: datetime,
        lead: timedelta,
        epoch: int,
    ) -> None:
        self.m.enqueued.inc(len(result.inserted))
        self.m.duplicates.inc(result.duplicates)
        stale = set(result.stale)
        for advance in advances:
            if advance.job_id in stale:
                continue
            for planned in advance.firings:
                lag = (now - (planned.scheduled_for - lead)).total_seconds()
                self.m.enqueue_lag.observe(max(0.0, lag))
        if result.inserted:
            self.log.debug("firings_enqueued", count=len(result.inserted), epoch=epoch)
        if result.duplicates:
            self.log.warning("firings_deduplicated", count=result.duplicates)
        if result.over_quota:  # stored SKIPPED, reason "quota: firings_per_minute"
            self.log.warning("firings_over_quota", count=len(result.over_quota))

    def reaped(self, count: int) -> None:
        self.m.reaped.inc(count)
        self.log.info("claims_requeued", count=count)

    def pruned(self, report: PruneReport) -> None:
        self.m.pruned.inc(report.deleted)
        self.log.info("history_pruned", firings=report.firings, jobs=report.jobs)

    def store_unavailable(self, error: str) -> None:
        self.m.store_errors.inc()
        self.log.warning("store_unavailable", error=error)

    def tz_leadership_refused(self, holder: str, reason: str | None) -> None:
        self.m.tz_refused.set(0 if reason is None else 1)
        if reason is None:
            self.log.info("tz_leadership_allowed", holder=holder)
        else:
            self.log.warning("tz_leadership_refused", holder=holder, reason=reason)

    def tz_adopted(self, adoption: Adoption) -> None:
        moved = set(adoption.moved)
        self.m.tz_moved.inc(len(moved))
        self.log.warning(
            "tz_database_adopted",
            old=None if adoption.old is None else adoption.old.describe(),
            new=adoption.new.describe(),
            zones_changed=len(adoption.zones),
            moved=len(moved),
            failed=adoption.failed,
        )
        logged = [m for m in adoption.moves if m.job_id in moved]
        for move in logged[:TZ_MOVES_LOGGED]:  # every one is a job event in the store
            self.log.warning(
                "tz_firing_moved",
                namespace=move.namespace,
                job=move.job,
                old=move.old.isoformat(),
                new=None if move.new is None else move.new.isoformat(),
                detail=move.detail,
            )


class WorkerSink:
    """``worker.events.WorkerEvents`` to Prometheus and structlog."""

    def __init__(self, metrics: ProcessMetrics | None = None) -> None:
        self.m = metrics or process_metrics()
        self.log = structlog.get_logger("cronwheel.worker")

    def worker_started(self, worker_id: str, tasks: Sequence[str], concurrency: int) -> None:
        self.log.info(
            "worker_started", worker_id=worker_id, tasks=list(tasks), concurrency=concurrency
        )

    def worker_stopped(self, worker_id: str) -> None:
        self.log.info("worker_stopped", worker_id=worker_id)

    def claimed(self, claims: Sequence[ClaimedFiring]) -> None:
        self.m.claims.inc(len(claims))
        again = sum(1 for c in claims if c.firing.attempt > 1)
        if again:
            self.m.redeliveries.inc(again)

    def firing_started(self, firing: Firing, lateness_ms: float) -> None:
        self.log.info(
            "firing_started",
            job=firing.job_name,
            firing_id=firing.id,
            attempt=firing.attempt,
            lateness_ms=round(lateness_ms, 3),
        )

    def firing_succeeded(self, firing: Firing, lateness_ms: float, duration_ms: float) -> None:
        self.m.attempt("succeeded").inc()
        if firing.attempt == 1:  # a retry starts after its backoff: not lateness
            self.m.worker_lateness.observe(max(0.0, lateness_ms / 1000))
        self.log.info(
            "firing_succeeded",
            job=firing.job_name,
            firing_id=firing.id,
            lateness_ms=round(lateness_ms, 3),
            duration_ms=round(duration_ms, 3),
        )

    def firing_failed(self, firing: Firing, retry_at: datetime | None, error: str) -> None:
        self.m.attempt("failed").inc()
        self.log.warning(
            "firing_failed",
            job=firing.job_name,
            firing_id=firing.id,
            attempt=firing.attempt,
            max_attempts=firing.max_attempts,
            retry_at=None if retry_at is None else retry_at.isoformat(),
            error=error,
        )

    def firing_cancelled(self, firing: Firing) -> None:
        self.log.info("firing_cancelled", job=firing.job_name, firing_id=firing.id)
        self.m.attempt("cancelled").inc()

    def handler_stopped(self, firing: Firing, reason: str, signal: str, at: float) -> None:
        self.log.info(
            "handler_stopped",
            job=firing.job_name,
            firing_id=firing.id,
            attempt=firing.attempt,
            reason=reason,
            signal=signal,
            gone_at=at,
        )

    def claims_renewed(self, count: int) -> None:
        self.m.claim_renewals.inc(count)

    def claim_lost(self, firing_id: FiringId) -> None:
        self.m.claims_lost.inc()
        self.log.warning("claim_lost", firing_id=firing_id)

    def completion_rejected(self, firing_id: FiringId) -> None:
        self.m.rejected.inc()
        self.log.warning(
            "completion_rejected",
            firing_id=firing_id,
            reason="claim no longer held (lease expired or cancelled)",
        )

    def store_unavailable(self, error: str, retry_in_s: float | None = None) -> None:
        if retry_in_s is None:
            self.log.warning("store_unavailable", error=error)
        else:
            self.log.warning("store_unavailable", error=error, retry_in_s=retry_in_s)
        self.m.store_errors.inc()

    def clock_flagged(self, worker_id: str, clock: ClockEstimate) -> None:
        self.log.warning(
            "clock_flagged",
            worker_id=worker_id,
            reason=clock.flag,
            offset_s=round(clock.offset, 6),
            uncertainty_s=round(clock.uncertainty, 6),
        )

    def clock_recovered(self, worker_id: str, clock: ClockEstimate) -> None:
        self.log.info(
            "clock_recovered",
            worker_id=worker_id,
            offset_s=round(clock.offset, 6),
            uncertainty_s=round(clock.uncertainty, 6),
        )
