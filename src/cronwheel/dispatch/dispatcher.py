"""The dispatcher: the leader's loop that turns job cursors into queued firings.

One step (``step()``), driven by a thread in production and by tests under a
FakeClock:

1. Leadership: renew the dispatcher lease every ``lease_ttl / 3``; acquire it
   when it has expired (epoch + 1). Losing it clears all in-memory state.
2. Load: every ``scan_interval``, or at once when jobs changed, load the jobs
   due within ``lookahead`` (an index range scan) into the timing wheel, each
   keyed by job id with deadline ``next_fire_at - lead``.
3. Fire: expired wheel entries are planned (misfire policy, catch-up bounds;
   a catch-up that would fall due with an on-time firing beyond the job's cap is
   coalesced into it, so the on-time firing is never the one displaced) and
   enqueued in batched, fenced transactions that also advance each job's
   cursor by compare-and-swap. A fenced-out batch means another node leads:
   log ``lease_lost`` and stand by at once. A crowd (thousands of jobs due in
   the same moment) is started early: at the measured enqueue rate, the leader
   begins as soon as it must to have the whole crowd queued by its ``lead``
   (``TimingWheel.crowd_start``), instead of beginning at the lead and finishing
   seconds late — enqueueing 10,000 firings takes longer than the lead.
4. Reap: re-queue claims whose visibility timeout has expired.

One tz database (dispatch/tzdata.py): a standby whose tz database differs from the
one the cluster recorded does not take the lease while a live scheduler node uses
the recorded one; a leader whose tz database differs from it adopts its own (cursors
re-resolved, moved firings recorded) before it loads or fires anything.

The dispatcher never runs user code (see DESIGN.md: one handler holding the
GIL pushed dispatch p99 from 7 ms to 274 ms).
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from cronwheel import failpoints
from cronwheel.dispatch import tzdata
from cronwheel.dispatch.events import DispatchEvents, QuietDispatchEvents
from cronwheel.dispatch.guarded import ScheduleFailure, guarded
from cronwheel.dispatch.retention import RetentionPass
from cronwheel.dispatch.wheel import TimingWheel
from cronwheel.domain.clock import Clock
from cronwheel.domain.models import Job, JobId, Lease
from cronwheel.domain.overlap import due_room
from cronwheel.domain.policies import (
    SCHEDULE_ERROR,
    MissedRange,
    bounded,
    coalesce_catchups,
    jitter_offset,
    plan_firings,
)
from cronwheel.domain.tzdb import tz_database
from cronwheel.errors import LeaseLostError, StoreUnavailableError
from cronwheel.store.protocol import (
    DISPATCHER_LEASE,
    WORKER_ALIVE_WITHIN,
    DispatchPort,
    JobAdvance,
    PlannedFiring,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class DispatcherConfig:
    lease_ttl: timedelta = timedelta(seconds=5)
    tick: timedelta = timedelta(milliseconds=10)
    lookahead: timedelta = timedelta(seconds=5)
    lead: timedelta = timedelta(milliseconds=500)
    scan_interval: timedelta = timedelta(seconds=1)
    change_poll: timedelta = timedelta(milliseconds=50)
    reap_interval: timedelta = timedelta(seconds=1)
    upkeep_interval: timedelta = timedelta(seconds=1)  # the store's (DispatchPort.upkeep)
    retention_interval: timedelta = timedelta(minutes=5)
    retention_pause: timedelta = timedelta(milliseconds=50)
    batch_size: int = 1000
    # firings/s assumed until enqueues have been timed; the estimate is then halved
    # (others share the store) when deciding how early a crowd must start
    enqueue_rate: float = 2000.0
    scan_page: int = 5000
    full_scan_interval: timedelta = timedelta(seconds=5)
    # a scheduler node that heartbeated within this is live (the tz leadership check)
    node_alive_within: timedelta = WORKER_ALIVE_WITHIN

    @property
    def renew_interval(self) -> timedelta:
        return self.lease_ttl / 3


@dataclass(slots=True)
class DispatcherStats:
    enqueued: int = 0
    duplicates: int = 0
    stale: int = 0
    missed: int = 0
    lease_lost: int = 0
    fenced_writes: int = 0
    terms: int = 0
    reaped: int = 0
    pruned: int = 0  # finished firings the retention pass deleted
    store_errors: int = 0
    schedule_errors: int = 0  # jobs ended because their next instant could not be computed
    tz_refusals: int = 0  # lease attempts skipped: this node's tz database is not the cluster's
    tz_moved: int = 0  # cursors re-resolved when this node adopted its tz database
    batches: list[int] = field(default_factory=list)


def make_holder_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Dispatcher:
    def __init__(
        self,
        store: DispatchPort,
        clock: Clock,
        *,
        config: DispatcherConfig | None = None,
        holder: str | None = None,
        events: DispatchEvents | None = None,
    ) -> None:
        """``events`` receives what happens (metrics, logs); by default nothing does."""
        self.store = store
        self.events: DispatchEvents = events or QuietDispatchEvents()
        self.clock = clock
        self.config = c = config or DispatcherConfig()
        self.holder = holder or make_holder_id()
        self.lease: Lease | None = None
        self.stats = DispatcherStats()
        self._wheel: TimingWheel[JobId, Job] = TimingWheel(tick=self.config.tick, now=clock.now())
        self._next_renew = 0.0
        self._lease_deadline = 0.0  # monotonic: past it, the lease may have expired
        self._next_scan = 0.0
        self._next_full_scan = 0.0
        self._scan_after: tuple[datetime, JobId] | None = None
        self._next_change_poll = 0.0
        self._next_reap = 0.0
        self._next_upkeep = 0.0
        self._retention = RetentionPass(store, self.config.retention_interval, c.retention_pause)
        self._jobs_version = -1
        self._wake = threading.Event()
        self._enqueue_rate = self.config.enqueue_rate  # firings/s, a moving average
        self._tz_epoch = 0  # the term whose tz database check is done
        self.tz_refusal: str | None = None  # why this node may not lead now, if so

    @property
    def is_leader(self) -> bool:
        return self.lease is not None

    def wake(self) -> None:
        """Ask the loop to run a step now (e.g. a job changed)."""
        self._next_change_poll = 0.0
        self._wake.set()

    # -- one step ------------------------------------------------------------------
    def step(self) -> float:
        """Run one iteration; return how many seconds to sleep before the next."""
        mono = self.clock.monotonic()
        try:
            if self.lease is not None and mono >= self._lease_deadline:
                # Renewals failed for a whole TTL (store unreachable?): the lease may
                # have passed to another node. Stop acting as leader before it does.
                self._step_down("lease not renewed within its ttl")
            if mono >= self._next_renew:
                self._renew(mono)
            if self.lease is None:
                return max(0.05, self._next_renew - self.clock.monotonic())
            if self._tz_epoch != self.lease.epoch:
                self._adopt_tz()
            self._maybe_scan(mono)
            enqueued = self.stats.enqueued
            self._fire_expired()
            if mono >= self._next_reap:
                self._next_reap = mono + self.config.reap_interval.total_seconds()
                reaped = self.store.requeue_expired()
                if reaped:
                    self.stats.reaped += reaped
                    self.events.reaped(reaped)
            self.stats.pruned += self._retention.step(mono, self.clock.monotonic(), self.events)
            # the store's upkeep between firings' instants: in a step that enqueued (it
            # woke half a tick after a round instant), or when a whole interval more late
            upkeep_s = self.config.upkeep_interval.total_seconds()
            if mono >= self._next_upkeep and (
                self.stats.enqueued > enqueued or mono >= self._next_upkeep + upkeep_s
            ):
                self._next_upkeep = mono + upkeep_s
                self.store.upkeep()
        except LeaseLostError as exc:
            self._step_down(str(exc))
        except StoreUnavailableError as exc:
            # Expired wheel entries whose enqueue failed are gone from the wheel while
            # their cursors did not move: the next scan must be a full one to reload them.
            self._scan_after = None
            self._next_scan = 0.0
            self.stats.store_errors += 1
            self.events.store_unavailable(str(exc))
            return 0.5
        return self._sleep_for()

    def _sleep_for(self) -> float:
        mono = self.clock.monotonic()
        until = min(self._next_renew, self._next_scan, self._next_reap, self._next_change_poll)
        until = min(until, self._retention.due_at())
        expiry = self._wheel.next_expiry()
        if expiry is not None:
            # half a tick after it (within the lead): the wheel's ticks are round instants
            # (xx.000, xx.010, ...), as the instants firings are due at mostly are, where
            # a held firing's start is being written; on SQLite the start then waited for
            # the leader's enqueue (up to 9 ms in the peers' W3: docs/benchmarks.md)
            wake = expiry + min(self.config.tick, self.config.lead) / 2
            until = min(until, mono + (wake - self.clock.now()).total_seconds())
        return max(0.0, min(until - mono, 1.0))

    # -- leadership -------------------------------------------------------------------
    def _renew(self, mono: float) -> None:
        if self.lease is None and self._tz_refused():
            self._next_renew = mono + self.config.renew_interval.total_seconds()
            return
        lease = self.store.acquire_lease(DISPATCHER_LEASE, self.holder, self.config.lease_ttl)
        # measured from before the request: a conservative local view of the expiry
        self._lease_deadline = mono + self.config.lease_ttl.total_seconds()
        renew_s = self.config.renew_interval.total_seconds()
        if lease is None:
            if self.lease is not None:
                self._step_down("lease held by another node")
            self._next_renew = mono + renew_s
            return
        if self.lease is None or lease.epoch != self.lease.epoch:
            if self.lease is not None:
                self._step_down("lease expired before renewal")
            self.stats.terms += 1
            self.events.lease_acquired(self.holder, lease.epoch)
            self._wheel.clear()
            self._jobs_version = -1
            self._scan_after = None
            self._next_scan = 0.0
            self._next_reap = 0.0
        self.lease = lease
        self.events.lease_renewed(lease.epoch)
        self._next_renew = mono + renew_s

    def _tz_refused(self) -> bool:
        """Whether this standby must not take the lease: its tz database is not the
        cluster's while a live scheduler node uses the cluster's (reported on change)."""
        reason = tzdata.leadership_refusal(
            self.store, tz_database(), alive_within=self.config.node_alive_within
        )
        if reason is not None:
            self.stats.tz_refusals += 1
        if reason != self.tz_refusal:
            self.events.tz_leadership_refused(self.holder, reason)
        self.tz_refusal = reason
        return reason is not None

    def _adopt_tz(self) -> None:
        """A new term: make this node's tz database the cluster's, if it is not yet."""
        assert self.lease is not None
        done = tzdata.adopt(self.store, self.lease, tz_database(), keep_lease=self._keep_lease)
        self._tz_epoch = self.lease.epoch
        if done is not None:
            self.stats.tz_moved += len(done.moved)
            self.events.tz_adopted(done)

    def _step_down(self, reason: str) -> None:
        if self.lease is not None:
            self.stats.lease_lost += 1
            self.events.lease_lost(self.holder, self.lease.epoch, reason)
        self.lease = None
        self._wheel.clear()
        self._next_renew = self.clock.monotonic() + self.config.renew_interval.total_seconds()

    def release(self) -> None:
        """Clean shutdown: hand leadership over without waiting for the TTL."""
        if self.lease is not None:
            try:
                self.store.release_lease(self.lease)
                self.events.lease_released(self.holder, self.lease.epoch)
            except StoreUnavailableError:
                pass
            self.lease = None

    # -- loading ---------------------------------------------------------------------
    def _maybe_scan(self, mono: float) -> None:
        """Load due jobs into the wheel. Incremental: only jobs after the last one loaded
        (keyset on ``(next_fire_at, id)``), in pages; a full rescan when jobs changed, after
        a takeover or a stale write, and every ``full_scan_interval`` as a safety net. So a
        herd of 40,000 jobs due at the minute is read once, not once per scan."""
        changed = False
        if mono >= self._next_change_poll:
            self._next_change_poll = mono + self.config.change_poll.total_seconds()
            version = self.store.jobs_version()
            changed = version != self._jobs_version
            self._jobs_version = version
        full = changed or self._scan_after is None or mono >= self._next_full_scan
        if not full and mono < self._next_scan:
            return
        self._next_scan = mono + self.config.scan_interval.total_seconds()
        after = None if full else self._scan_after
        if full:
            self._next_full_scan = mono + self.config.full_scan_interval.total_seconds()
        if not len(self._wheel):
            # an idle wheel moves to now at once (O(1)); else the first expiry after a
            # long idle stretch would walk every tick of it (a simulation's clock jumps)
            self._wheel.advance(self.clock.now())
        horizon = self.clock.now() + self.config.lookahead
        seen: set[JobId] = set()
        while True:
            jobs = self.store.due_jobs(horizon, limit=self.config.scan_page, after=after)
            for job in jobs:
                seen.add(job.id)
                self._schedule(job)
            if jobs:
                last = jobs[-1]
                assert last.next_fire_at is not None
                after = (last.next_fire_at, last.id)
            if len(jobs) < self.config.scan_page:
                break
            self._keep_lease()  # a long scan must not outlast the lease
        self._scan_after = after
        if changed:
            # A job may have been paused, deleted or rescheduled: drop what the
            # store no longer says is due (the cursor CAS would refuse it anyway).
            for job_id in [k for k in self._wheel if k not in seen]:
                self._wheel.remove(job_id)

    def _keep_lease(self) -> None:
        """Renew the lease in the middle of a long step when it is due; stop if it is lost."""
        mono = self.clock.monotonic()
        if mono >= self._next_renew:
            self._renew(mono)
        if self.lease is None:
            raise LeaseLostError("lease lost during a long dispatch step")

    def _schedule(self, job: Job) -> None:
        assert job.next_fire_at is not None
        if self._wheel.deadline_of(job.id) is not None:
            current = self._wheel.remove(job.id)
            # the same cursor and no change since (a calendar's change rewrites the
            # schedule of the jobs naming it, and may leave their cursor where it was)
            if (
                current is not None
                and current.next_fire_at == job.next_fire_at
                and current.updated_at == job.updated_at
            ):
                self._wheel.insert(job.id, job.next_fire_at - self.config.lead, current)
                return
        self._wheel.insert(job.id, job.next_fire_at - self.config.lead, job)

    # -- firing ------------------------------------------------------------------------
    def _fire_expired(self) -> None:
        expired = self._wheel.advance(self.clock.now())
        self._enqueue_jobs([job for _, job in expired], early=False)
        # a crowd ahead: take it bucket by bucket for as long as it must already start
        # (bounded: a job put back in its bucket must not keep this step going)
        for _ in range(64):
            start = self._wheel.crowd_start(self._enqueue_rate / 2)
            if start is None or self.clock.now() < start:
                return
            self._enqueue_jobs([job for _, job in self._wheel.take_earliest()], early=True)

    def _enqueue_jobs(self, jobs: list[Job], *, early: bool) -> None:
        size = self.config.batch_size
        for start in range(0, len(jobs), size):
            if start:
                self._keep_lease()  # 40 batches of a herd must not outlast the lease
            self._enqueue_batch(jobs[start : start + size], early=early)

    def _enqueue_batch(self, jobs: list[Job], *, early: bool = False) -> None:
        """Plan and enqueue ``jobs``: each fires what is due by the lead; a job taken
        ``early`` (a crowd's) also fires its next instant, however far ahead it is."""
        assert self.lease is not None
        now = self.clock.now()
        began = self.clock.monotonic()  # the rate measured covers planning and the write
        lead_horizon = now + self.config.lead
        advances: list[JobAdvance] = []
        planned: dict[JobId, Job] = {}
        for job in jobs:
            assert job.next_fire_at is not None
            p = job.spec.policies
            horizon = max(lead_horizon, job.next_fire_at) if early else lead_horizon
            failure = ScheduleFailure()
            plan = plan_firings(
                guarded(bounded(job.spec.schedule.next_after, end_at=job.spec.end_at), failure),
                job.next_fire_at,
                now=now,
                horizon=horizon,
                policy=p.misfire,
                misfire_grace=p.misfire_grace,
                catchup_window=p.catchup_window,
                max_catchup=p.max_catchup,
            )
            plan = coalesce_catchups(
                plan,
                late_cutoff=now - p.misfire_grace,
                room=due_room(
                    p.overlap, max_concurrency=job.spec.max_concurrency, max_buffer=p.max_buffer
                ),
            )
            if not plan.fire and not plan.missed and plan.next_cursor == job.next_fire_at:
                self._schedule(job)  # woke early (tick rounding): wait for its instant
                continue
            fire, cursor, missed = plan.fire, plan.next_cursor, plan.missed
            if failure.after is not None:
                # recorded for `jobs explain` like a missed range (none missed: count 0)
                self.stats.schedule_errors += 1
                self.events.schedule_failed(job.name, failure.after, failure.message)
                missed = [
                    *missed,
                    MissedRange(
                        first=failure.after,
                        last=failure.after,
                        count=0,
                        reason=f"{SCHEDULE_ERROR}{failure.message}",
                    ),
                ]
            if job.remaining_runs is not None and len(fire) >= job.remaining_runs:
                fire, cursor = fire[: job.remaining_runs], None  # the run limit is reached
            advances.append(
                JobAdvance(
                    job_id=job.id,
                    expected_next_fire_at=job.next_fire_at,
                    new_next_fire_at=cursor,
                    firings=[
                        PlannedFiring(
                            scheduled_for=t,
                            due_at=t + jitter_offset(job.id, t, p.jitter),
                            note=plan.notes.get(t),
                        )
                        for t in fire
                    ],
                    missed=missed,
                )
            )
            planned[job.id] = replace(
                job,
                next_fire_at=cursor,
                remaining_runs=None
                if job.remaining_runs is None
                else job.remaining_runs - len(fire),
            )
            for m in plan.missed:
                self.stats.missed += m.count
                self.events.firings_missed(job.name, m, p.misfire.value)
        if not advances:
            return
        failpoints.hit("dispatch.before_enqueue")
        try:
            result = self.store.enqueue(self.lease, advances)
        except LeaseLostError:
            self.stats.fenced_writes += 1
            self.events.fenced_write()
            raise
        took = self.clock.monotonic() - began
        if len(advances) >= 100 and took > 0:  # small batches time the round trip, not rows
            self._enqueue_rate = 0.7 * self._enqueue_rate + 0.3 * len(advances) / took
        self.stats.enqueued += len(result.inserted)
        self.events.firings_enqueued(
            result, advances, now=self.clock.now(), lead=self.config.lead, epoch=self.lease.epoch
        )
        self.stats.duplicates += result.duplicates
        self.stats.stale += len(result.stale)
        self.stats.batches.append(len(result.inserted))
        stale = set(result.stale)
        if stale:
            self._scan_after = None  # reload the changed jobs: a full scan
            self._next_scan = 0.0
        horizon_load = now + self.config.lookahead
        for job_id, job in planned.items():
            if job_id in stale or job.next_fire_at is None:
                continue
            if job.next_fire_at <= horizon_load:
                self._schedule(job)

    # -- loop ------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Step until ``stop`` is set; then release the lease."""
        while not stop.is_set():
            delay = self.step()
            if delay > 0:
                self._wake.wait(delay)
                self._wake.clear()
        self.release()

    def next_fire_preview(self) -> datetime | None:
        expiry = self._wheel.next_expiry()
        return None if expiry is None else expiry + self.config.lead
