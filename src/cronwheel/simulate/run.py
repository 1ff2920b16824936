"""The simulation's loop: the real dispatcher and store on a fake clock, a simulated
worker, the clock moved from one instant that matters to the next (see the package)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from cronwheel.dispatch.dispatcher import Dispatcher, DispatcherConfig
from cronwheel.domain.clock import FakeClock
from cronwheel.domain.fates import MAX_OCCURRENCES, Occurrence, explain
from cronwheel.domain.jobs import first_fire_at
from cronwheel.domain.models import ClaimedFiring, Firing, FiringId, Job, JobEvent, JobSpec
from cronwheel.domain.schedules import AtSchedule
from cronwheel.errors import ValidationError
from cronwheel.simulate.scenario import MAX_JOBS, JobResult, Scenario
from cronwheel.store.memory import MemoryStore
from cronwheel.store.protocol import Completion

MAX_STEPS = 200_000  # clock moves of one simulation: bounds its work whatever the jobs
MAX_OCCURRENCES_SHOWN = 200_000  # occurrences of all the jobs over the period
_ALL = 10**9  # the in-memory store's lists: everything
_CLAIM_BATCH = 1000
_WORKER = "simulated-worker"
_START_MARGIN = timedelta(seconds=1)  # jobs exist this long before --from
_REAP_STEP = DispatcherConfig().reap_interval  # the reaper's pace


@dataclass(slots=True)
class _Running:
    claim: ClaimedFiring
    started: datetime
    ends: datetime
    renewed: datetime


# -- the simulation ---------------------------------------------------------------------
class Simulation:
    """One what-if run (see the package's docstring)."""

    def __init__(self, seeds: Sequence[tuple[JobSpec, bool]], scenario: Scenario) -> None:
        names = [spec.name for spec, _ in seeds]
        scenario.check(names)
        if len(seeds) > MAX_JOBS:
            raise ValidationError(f"at most {MAX_JOBS} jobs can be simulated", field="job")
        self.scenario = scenario
        self.clock = FakeClock(scenario.since - _START_MARGIN)
        self.store = MemoryStore(clock=self.clock)
        self.steps = 0
        self._running: dict[FiringId, _Running] = {}
        self._orphans: set[FiringId] = set()  # held by workers an outage took down
        self._cancels: dict[FiringId, datetime] = {}  # running, cancel asked: its grace ends
        self._jobs: list[Job] = []
        first_from = scenario.since - timedelta(microseconds=1)
        for spec, done in seeds:
            first = None if done else _first(spec, first_from, scenario.since)
            job = self.store.create_job(replace(spec, paused=False), first_fire_at=first)
            if spec.paused:
                job = self.store.set_paused(spec.namespace, spec.name, True)
            self._jobs.append(job)
        self._tasks = sorted({spec.task for spec, _ in seeds})
        self._durations = {job.id: scenario.slow.get(job.name, timedelta(0)) for job in self._jobs}
        self.dispatcher = self._new_dispatcher("simulated-scheduler")
        self._pause_edges = sorted(
            (t, name, paused)
            for name, windows in scenario.pauses.items()
            for w in windows
            for t, paused in ((w.start, True), (w.end, False))
        )

    def _new_dispatcher(self, holder: str) -> Dispatcher:
        span = self.scenario.until - self.scenario.since + timedelta(days=1)
        return Dispatcher(
            self.store,
            self.clock,
            # the defaults but two: one lease for the whole period (a scheduler is down
            # only in an outage), so no renewals; and, as the clock jumps to each job's
            # instant, a short lookahead (a long one makes a jump walk the wheel's ticks)
            config=DispatcherConfig(
                lease_ttl=span,
                lookahead=timedelta(seconds=1),
                retention_interval=timedelta(0),  # the what-if keeps all it simulated
            ),
            holder=holder,
        )

    # -- driving ------------------------------------------------------------------------
    def run(self) -> list[JobResult]:
        until = self.scenario.until
        now = self.clock.now()
        while True:
            self._apply_events(now)
            if not self.scenario.leader_down(now):
                self._step_dispatcher()
            if not self.scenario.workers_gone(now):
                self._step_worker(now)
            if now >= until:
                break
            nxt = self._next_instant(now)
            nxt = until if nxt is None else min(nxt, until)
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise ValidationError(
                    f"the simulation needs more than {MAX_STEPS} steps: shorten the period "
                    "or simulate fewer jobs (--job)",
                    field="to",
                )
            self.clock.advance(nxt - now)
            now = nxt
        return self._results()

    def _apply_events(self, t: datetime) -> None:
        sc = self.scenario
        before = t - timedelta(microseconds=1)
        if sc.workers_gone(t) and not sc.workers_gone(before):
            # the workers die with their running handlers
            self._orphans.update(self._running)
            self._running.clear()
        if sc.leader_down(t) and not sc.leader_down(before):
            # the scheduler dies; a new one leads when it is back (the old lease long
            # expired: a lease lives seconds, an outage worth simulating longer)
            self.dispatcher.release()
        if not sc.leader_down(t) and sc.leader_down(before):
            self.dispatcher = self._new_dispatcher(f"simulated-scheduler-{t:%Y%m%dT%H%M%S}")
        while self._pause_edges and self._pause_edges[0][0] <= t:
            _, name, paused = self._pause_edges.pop(0)
            for job in self._jobs:
                if job.name == name:
                    self.store.set_paused(job.namespace, name, paused)
            self.dispatcher.wake()

    def _step_dispatcher(self) -> None:
        for _ in range(64):  # a step returns 0 while it has more to do now
            if self.dispatcher.step() > 0:
                return

    def _step_worker(self, now: datetime) -> None:
        done = [r for r in self._running.values() if r.ends <= now]
        if done:
            self.store.complete(
                [
                    Completion(
                        firing_id=r.claim.firing.id,
                        claim_token=r.claim.claim_token,
                        succeeded=True,
                        started_at=r.started,
                        finished_at=r.ends,
                    )
                    for r in done
                ]
            )
            for r in done:
                del self._running[r.claim.firing.id]
        self._heartbeat(now)
        while True:
            claims = self.store.claim(
                _WORKER, tasks=self._tasks, limit=_CLAIM_BATCH, start=_CLAIM_BATCH
            )
            finished = []
            for c in claims:
                ends = now + self._durations.get(c.firing.job_id, timedelta(0))
                run = _Running(claim=c, started=now, ends=ends, renewed=now)
                if ends <= now:
                    finished.append(run)
                else:
                    self._running[c.firing.id] = run
            if finished:
                self.store.complete(
                    [
                        Completion(
                            firing_id=r.claim.firing.id,
                            claim_token=r.claim.claim_token,
                            succeeded=True,
                            started_at=now,
                            finished_at=now,
                        )
                        for r in finished
                    ]
                )
            if not claims:
                break
        self._note_cancels(now)

    def _note_cancels(self, now: datetime) -> None:
        """Running handlers whose cancel was asked for (an overlap policy): each stops at
        its next heartbeat, or is revoked by the reaper when its grace ends first."""
        self._cancels = {f: t for f, t in self._cancels.items() if f in self._running}
        if not self._running:
            return
        claims = [(r.claim.firing.id, r.claim.claim_token) for r in self._running.values()]
        for fid in self.store.cancel_requested(claims):
            if fid not in self._cancels:
                grace = self._running[fid].claim.policies.cancel_grace
                self._cancels[fid] = now + grace + timedelta(microseconds=1)

    def _heartbeat(self, now: datetime) -> None:
        """Renew the claims due for it (a third of their visibility timeout after the
        last renewal, as the worker does); a handler whose claim was revoked or whose
        cancel was asked for stops."""
        due = [
            r
            for r in self._running.values()
            if r.renewed + r.claim.policies.visibility_timeout / 3 <= now
        ]
        if not due:
            return
        claims = [(r.claim.firing.id, r.claim.claim_token) for r in due]
        lost = self.store.heartbeat(_WORKER, claims)
        cancelled = self.store.cancel_requested(claims)
        for r in due:
            r.renewed = now
        for fid in lost:
            self._running.pop(fid, None)
        stop = [self._running.pop(fid) for fid in cancelled - lost if fid in self._running]
        if stop:
            self.store.complete(
                [
                    Completion(
                        firing_id=r.claim.firing.id,
                        claim_token=r.claim.claim_token,
                        succeeded=False,
                        cancelled=True,
                        started_at=r.started,
                        finished_at=now,
                    )
                    for r in stop
                ]
            )

    def _next_instant(self, now: datetime) -> datetime | None:
        """The earliest instant after ``now`` at which something may happen."""
        lead = self.dispatcher.config.lead
        candidates: list[datetime] = []
        candidates += self.scenario.edges()
        if self._pause_edges:
            candidates.append(self._pause_edges[0][0])
        horizon = self.scenario.until + lead
        due = self.store.due_jobs(horizon, limit=1)
        if due and due[0].next_fire_at is not None:
            candidates.append(due[0].next_fire_at - lead)
        queued = self.store.next_due_at()
        if queued is not None:
            candidates.append(queued)
        for r in self._running.values():
            candidates += [r.ends, r.renewed + r.claim.policies.visibility_timeout / 3]
        if self._orphans:
            candidates += self._orphan_expiries()
        for t in self._cancels.values():
            candidates += _reaped(t)
        later = [t for t in candidates if t > now]
        cursor = due[0].next_fire_at if due else None
        if cursor is not None and cursor - lead <= now and not self.scenario.leader_down(now):
            later.append(now + self.dispatcher.config.tick)  # woke early (tick rounding)
        return min(later, default=None)

    def _orphan_expiries(self) -> list[datetime]:
        """When the claims of dead workers expire (the reaper re-queues them just after)."""
        out = []
        for fid in list(self._orphans):
            firing = self.store.get_firing(fid)
            if firing.lease_until is None or firing.state.value not in ("claimed", "running"):
                self._orphans.discard(fid)
                continue
            out += _reaped(firing.lease_until + timedelta(microseconds=1))
        return out

    # -- the answer ----------------------------------------------------------------------
    def _results(self) -> list[JobResult]:
        since, until = self.scenario.since, self.scenario.until
        out = []
        total = 0
        for seeded in self._jobs:
            job = self.store.get_job_by_id(seeded.id)
            firings = self.store.list_job_firings(
                job.id,
                scheduled_from=since,
                scheduled_to=until + timedelta(microseconds=1),
                limit=_ALL,
            )
            events = self.store.job_events(job.id, limit=_ALL)
            occurrences = self._explain(job, firings, events)
            total += len(occurrences)
            if total > MAX_OCCURRENCES_SHOWN:
                raise ValidationError(
                    f"the period holds more than {MAX_OCCURRENCES_SHOWN} occurrences: "
                    "shorten it or simulate fewer jobs (--job)",
                    field="to",
                )
            out.append(JobResult(namespace=job.namespace, name=job.name, occurrences=occurrences))
        return out

    def _explain(
        self, job: Job, firings: Sequence[Firing], events: Sequence[JobEvent]
    ) -> list[Occurrence]:
        """``explain`` over the whole period, in parts of at most MAX_OCCURRENCES (its
        bound per call): each part starts after the last instant of the one before."""
        since, until, now = self.scenario.since, self.scenario.until, self.clock.now()
        out: list[Occurrence] = []
        while True:
            part = explain(job, since=since, until=until, now=now, firings=firings, events=events)
            if len(part) < MAX_OCCURRENCES:
                return out + part
            while part and part[-1].instant is None:  # listed again with the next part
                part.pop()
            last = part[-1].instant
            assert last is not None
            out += part
            since = last + timedelta(microseconds=1)
            if len(out) > MAX_OCCURRENCES_SHOWN:
                return out


def _reaped(t: datetime) -> list[datetime]:
    """When the reaper acts on what expires at ``t``: at the first step after it when its
    interval has passed since its last run, so at ``t`` or at most an interval later."""
    return [t, t + _REAP_STEP]


def _first(spec: JobSpec, after: datetime, since: datetime) -> datetime | None:
    """The job's first instant at or after ``since`` (it has been running before)."""
    first = first_fire_at(
        spec.schedule, after, allow_past=True, start_at=spec.start_at, end_at=spec.end_at
    )
    if isinstance(spec.schedule, AtSchedule) and first is not None and first < since:
        return None
    return first


def simulate(seeds: Sequence[tuple[JobSpec, bool]], scenario: Scenario) -> list[JobResult]:
    """The fate of every occurrence of the seeded jobs over the scenario's period."""
    return Simulation(seeds, scenario).run()
