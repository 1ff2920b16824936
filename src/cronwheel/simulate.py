"""What-if: every occurrence's fate over a period, under hypothetical events, decided by
the real dispatcher and store on a fake clock — nothing runs, nothing is written to the
user's store.

The jobs (read from a store, or from a JSON file) are copied into a fresh
:class:`~cronwheel.store.memory.MemoryStore` driven by a :class:`FakeClock`. The real
:class:`~cronwheel.dispatch.dispatcher.Dispatcher` plans and enqueues the firings
(misfire and catch-up policies, DST rules, skips, run limits); a simulated worker
claims, starts, heartbeats and completes them through the store's ``WorkerPort``, so
the overlap and concurrency policies and start deadlines are decided by the store at
claim time, as in production. The clock moves from one interesting instant to the
next — a job's next instant, a queued firing's due time, a handler's end, a heartbeat,
an event's boundary — never tick by tick, so a month of a per-minute job takes
seconds. The fates are those ``jobs explain`` gives (domain/fates.py).

Events:

- an outage ``T1..T2``: no scheduler and no worker in ``[T1, T2)``; handlers running
  at ``T1`` die with their worker (their claims expire and the reaper decides);
  instants the outage covers follow the job's misfire policy when it ends;
- a pause ``JOB@T1..T2``: the job is paused at ``T1`` and resumed at ``T2`` (its
  misfire policy decides what the pause covered);
- a slow handler ``JOB=D``: each of the job's handlers runs for ``D`` (default 0).

Assumed: handlers succeed, workers have a free slot for every due firing, and run until
they finish (a cancelled handler stops at the heartbeat that learns of its cancel).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from cronwheel.dispatch.dispatcher import Dispatcher, DispatcherConfig
from cronwheel.domain.clock import FakeClock
from cronwheel.domain.fates import MAX_OCCURRENCES, Occurrence, explain
from cronwheel.domain.jobs import build_policies, first_fire_at
from cronwheel.domain.models import ClaimedFiring, FiringId, Job, JobSpec
from cronwheel.domain.schedules import AtSchedule, NowSchedule, parse_instant
from cronwheel.errors import CronwheelError, ValidationError
from cronwheel.store.memory import MemoryStore
from cronwheel.store.protocol import Completion
from cronwheel.wire import schedule_from_json

MAX_PERIOD = timedelta(days=92)
MAX_JOBS = 1000
MAX_STEPS = 500_000  # clock moves of one simulation: bounds its work whatever the jobs
_CLAIM_BATCH = 1000
_WORKER = "simulated-worker"
# the leader keeps its lease for the whole simulation: it is down only in an outage
_START_MARGIN = timedelta(seconds=1)  # jobs exist this long before --from
_REAP_STEP = timedelta(seconds=1)  # the reaper's pace (DispatcherConfig.reap_interval)


@dataclass(frozen=True, slots=True)
class Window:
    """``[start, end)``."""

    start: datetime
    end: datetime

    def covers(self, t: datetime) -> bool:
        return self.start <= t < self.end


@dataclass(frozen=True, slots=True)
class Scenario:
    """The period and the hypothetical events of one simulation."""

    since: datetime
    until: datetime
    outages: tuple[Window, ...] = ()
    pauses: Mapping[str, tuple[Window, ...]] = field(default_factory=dict)
    slow: Mapping[str, timedelta] = field(default_factory=dict)

    def check(self, names: Sequence[str]) -> None:
        if self.until <= self.since:
            raise ValidationError("must be after --from", field="to")
        if self.until - self.since > MAX_PERIOD:
            raise ValidationError(
                f"the period must be at most {MAX_PERIOD.days} days", field="to"
            )
        known = set(names)
        for option, keys in (("pause", self.pauses), ("slow", self.slow)):
            for name in keys:
                if name not in known:
                    raise ValidationError(f"no job named {name!r} is simulated", field=option)


@dataclass(frozen=True, slots=True)
class JobResult:
    namespace: str
    name: str
    occurrences: list[Occurrence]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.occurrences:
            out[o.fate] = out.get(o.fate, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "fates": self.counts(),
            "occurrences": [
                {k: v for k, v in o.to_dict().items() if k != "firing_id"}
                for o in self.occurrences
            ],
        }


@dataclass(slots=True)
class _Running:
    claim: ClaimedFiring
    started: datetime
    ends: datetime
    renewed: datetime


# -- parsing the options --------------------------------------------------------------
def parse_window(text: str, field: str) -> Window:
    """``T1..T2``, two RFC 3339 instants, T1 before T2."""
    start_text, sep, end_text = text.partition("..")
    if not sep:
        raise ValidationError("must be T1..T2 (two RFC 3339 instants)", field=field)
    start, end = parse_instant(start_text, field), parse_instant(end_text, field)
    if end <= start:
        raise ValidationError("the window's end must be after its start", field=field)
    return Window(start, end)


def parse_pause(text: str) -> tuple[str, Window]:
    """``JOB@T1..T2``."""
    name, sep, window = text.rpartition("@")
    if not sep or not name:
        raise ValidationError("must be JOB@T1..T2", field="pause")
    return name, parse_window(window, "pause")


def parse_slow(text: str) -> tuple[str, timedelta]:
    """``JOB=DURATION`` (seconds or text such as 90s, 5m, 1h30m)."""
    from cronwheel.domain.policy_table import parse_seconds_or_duration

    name, sep, duration = text.rpartition("=")
    if not sep or not name or not duration:
        raise ValidationError("must be JOB=DURATION (e.g. nightly=45m)", field="slow")
    return name, parse_seconds_or_duration(duration, "slow")


# -- the jobs file ----------------------------------------------------------------------
_FILE_KEYS = frozenset(
    {"name", "task", "schedule", "namespace", "args", "kwargs", "policies", "paused"}
    | {"start_at", "end_at", "max_runs"}
)
# what the API's job documents (GET /v1/jobs) carry besides: accepted and ignored
_WIRE_ONLY = frozenset(
    {"id", "schedule_text", "state", "next_fire_at", "last_fired_at", "missed_total"}
    | {"remaining_runs", "created_at", "updated_at"}
)


def jobs_from_json(doc: Any) -> list[JobSpec]:
    """Job specs from a jobs file: a list (or ``{"jobs": [...]}``) of objects with
    ``name``, ``task``, ``schedule`` (as the API takes it) and optional ``policies``
    (the policy names of ``jobs add``, durations in seconds or text), ``namespace``,
    ``args``, ``kwargs``, ``paused``, ``start_at``, ``end_at``, ``max_runs``. The API's
    job documents are accepted as they are. Errors name ``jobs[i].<key>``."""
    items = doc.get("jobs") if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise ValidationError("must be a list of jobs or {\"jobs\": [...]}", field="file")
    if len(items) > MAX_JOBS:
        raise ValidationError(f"at most {MAX_JOBS} jobs can be simulated", field="file")
    specs: list[JobSpec] = []
    for i, item in enumerate(items):
        where = f"jobs[{i}]"
        try:
            specs.append(_spec_from_json(item, where))
        except CronwheelError as exc:
            if not (exc.field or "").startswith(where):
                exc.field = f"{where}.{exc.field}" if exc.field else where
            raise
    names = [(s.namespace, s.name) for s in specs]
    for i, key in enumerate(names):
        if key in names[:i]:
            raise ValidationError(f"a second job named {key[1]!r}", field=f"jobs[{i}].name")
    return specs


def _spec_from_json(item: Any, where: str) -> JobSpec:
    if not isinstance(item, dict):
        raise ValidationError("must be an object", field=where)
    for key in sorted(item.keys() - _FILE_KEYS - _WIRE_ONLY):
        raise ValidationError("not a key of a job", field=f"{where}.{key}")
    for key in ("name", "task", "schedule"):
        if key not in item:
            raise ValidationError("is required", field=f"{where}.{key}")
    if not isinstance(item["schedule"], dict):
        raise ValidationError("must be an object", field=f"{where}.schedule")
    try:
        schedule = schedule_from_json(item["schedule"])
    except CronwheelError as exc:
        exc.field = f"{where}.schedule" + (f".{exc.field}" if exc.field else "")
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ValidationError(f"not a schedule ({exc})", field=f"{where}.schedule") from None
    policies = item.get("policies") or {}
    if not isinstance(policies, dict):
        raise ValidationError("must be an object", field=f"{where}.policies")
    try:
        built = build_policies(**policies)
    except CronwheelError as exc:
        exc.field = f"{where}.policies" + (f".{exc.field}" if exc.field else "")
        raise
    return JobSpec(
        name=str(item["name"]),
        task=str(item["task"]),
        schedule=schedule,
        args=tuple(item.get("args") or ()),
        kwargs=dict(item.get("kwargs") or {}),
        namespace=str(item.get("namespace") or "default"),
        policies=built,
        paused=bool(item.get("paused", False)),
        start_at=_opt_instant(item.get("start_at"), f"{where}.start_at"),
        end_at=_opt_instant(item.get("end_at"), f"{where}.end_at"),
        max_runs=item.get("max_runs"),
    )


def _opt_instant(value: Any, field: str) -> datetime | None:
    return None if value is None else parse_instant(str(value), field)


def load_jobs_file(path: str) -> list[JobSpec]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise ValidationError(f"cannot read it ({exc.strerror})", field="file") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationError(f"not JSON ({exc})", field="file") from None
    return jobs_from_json(doc)


def seeds_from_store(jobs: Sequence[Job]) -> list[tuple[JobSpec, bool]]:
    """What a simulation copies of the store's jobs: each spec with its remaining run
    limit, and whether the job is done (no next instant: it stays done). One-shot
    firings (``now`` jobs) are not schedules: left out."""
    out = []
    for job in jobs:
        if isinstance(job.spec.schedule, NowSchedule):
            continue
        spec = replace(job.spec, paused=job.paused)
        if job.remaining_runs is not None and job.remaining_runs > 0:
            spec = replace(spec, max_runs=job.remaining_runs)
        out.append((spec, job.next_fire_at is None and not job.paused))
    return out


# -- the simulation ---------------------------------------------------------------------
class Simulation:
    """One what-if run (see the module docstring)."""

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
        self._names: dict[tuple[str, str], str] = {}
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
            config=DispatcherConfig(lease_ttl=span, lookahead=timedelta(seconds=1)),
            holder=holder,
        )

    # -- driving ------------------------------------------------------------------------
    def run(self) -> list[JobResult]:
        until = self.scenario.until
        now = self.clock.now()
        while True:
            self._apply_events(now)
            if not self._down(now):
                self._step_dispatcher()
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

    def _down(self, t: datetime) -> bool:
        return any(w.covers(t) for w in self.scenario.outages)

    def _apply_events(self, t: datetime) -> None:
        for w in self.scenario.outages:
            if w.start == t:  # the workers die with their running handlers
                self._orphans.update(self._running)
                self._running.clear()
                # the scheduler dies too; a new one leads when the outage ends (its lease
                # long expired: a lease lives seconds, an outage worth simulating longer)
                self.dispatcher.release()
            if w.end == t and not self._down(t):
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
                self._cancels[fid] = now + grace + _REAP_STEP

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
        for w in self.scenario.outages:
            candidates += [w.start, w.end]
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
        candidates += self._cancels.values()
        later = [t for t in candidates if t > now]
        if due and not self._down(now) and due[0].next_fire_at is not None:
            if due[0].next_fire_at - lead <= now:  # woke early (tick rounding): next tick
                later.append(now + self.dispatcher.config.tick)
        return min(later, default=None)

    def _orphan_expiries(self) -> list[datetime]:
        """When the claims of dead workers expire (the reaper re-queues them just after)."""
        out = []
        for fid in list(self._orphans):
            firing = self.store.get_firing(fid)
            if firing.lease_until is None or firing.state.value not in ("claimed", "running"):
                self._orphans.discard(fid)
                continue
            out.append(firing.lease_until + timedelta(microseconds=1))
        return out

    # -- the answer ----------------------------------------------------------------------
    def _results(self) -> list[JobResult]:
        since, until = self.scenario.since, self.scenario.until
        now = self.clock.now()
        out = []
        for seeded in self._jobs:
            job = self.store.get_job_by_id(seeded.id)
            firings = self.store.list_job_firings(
                job.id,
                scheduled_from=since,
                scheduled_to=until + timedelta(microseconds=1),
                limit=MAX_OCCURRENCES * 2,
            )
            events = self.store.job_events(job.id, limit=MAX_OCCURRENCES * 2)
            occurrences = explain(
                job, since=since, until=until, now=now, firings=firings, events=events
            )
            out.append(JobResult(namespace=job.namespace, name=job.name, occurrences=occurrences))
        return out


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
