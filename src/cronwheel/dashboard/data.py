"""View models: what each dashboard view shows, read from the same store methods as
the HTTP API (namespace-scoped ones for jobs, firings and every count; the cluster
view of ``/v1/status`` — leader, nodes, every namespace's counts — for a viewer who
may see the cluster). Ids are the shown ones (``domain/ids.py``), as the API's.
Templates only lay it out."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from cronwheel.domain.attempts import lateness_of as firing_lateness
from cronwheel.domain.error_text import error_summary
from cronwheel.domain.fates import explain
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import Firing, Job, JobId
from cronwheel.domain.schedules import LISTING_STEPS, CronSchedule, upcoming_instants
from cronwheel.domain.transitions import StepBudget
from cronwheel.domain.tz import load_zone
from cronwheel.errors import InvalidScheduleError, NotFoundError
from cronwheel.observability.lateness import (
    SAMPLE,
    STARTED_STATES,
    first_attempt_lateness_s,
    job_lateness,
    lateness_of,
    objective_ms,
    percentile,
    runs_of,
)
from cronwheel.observability.tzdata import tz_status
from cronwheel.store.protocol import ApiStore, StoreStatus
from cronwheel.web.ids import ids_for
from cronwheel.wire import clock_text, job_state, node_clock_to_json

from .words import cron_words

FILTER_STATES = tuple(s.value for s in FiringState if s is not FiringState.SCHEDULED)
# not finished: a firing waiting for a claim, held by a worker, or running
_OPEN_STATES = ("queued", "claimed", "running")
JOBS_SHOWN = 100
FIRINGS_SHOWN = 50
CHART_SAMPLE = 300
NODE_STALE_S = 10.0


# -- formatting ------------------------------------------------------------------------
def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "—"
    if abs(ms) < 1:
        return f"{ms:.2f} ms"
    if abs(ms) < 1000:
        return f"{ms:.1f} ms"
    return fmt_s(ms / 1000)


def fmt_s(s: float) -> str:
    if abs(s) < 60:
        return f"{s:.1f} s" if abs(s) < 10 else f"{s:.0f} s"
    if abs(s) < 3600:
        return f"{int(s // 60)} m {int(s % 60)} s"
    if abs(s) < 86400:
        return f"{int(s // 3600)} h {int(s % 3600 // 60)} m"
    return f"{int(s // 86400)} d {int(s % 86400 // 3600)} h"


def fmt_utc(t: datetime | None) -> str:
    return "—" if t is None else t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def fmt_local(t: datetime, zone: ZoneInfo) -> str:
    return t.astimezone(zone).strftime("%a %d %b %H:%M:%S %Z")


def fmt_relative(t: datetime, now: datetime) -> str:
    delta = (t - now).total_seconds()
    return f"in {fmt_s(delta)}" if delta >= 0 else f"{fmt_s(-delta)} ago"


def zone_of(job: Job) -> str:
    schedule = job.spec.schedule
    return schedule.tz if isinstance(schedule, CronSchedule) else "UTC"


def written(job: Job) -> str:
    """The schedule as the user wrote it."""
    d = job.spec.schedule.to_dict()
    kind = d["kind"]
    if kind == "cron":
        return str(d["cron"])
    if kind == "every":
        return f"every {d['interval']}"
    if kind == "at":
        return f"at {d['at']}"
    return "now"


def in_words(job: Job, *, dst: bool = True) -> str:
    schedule = job.spec.schedule
    if isinstance(schedule, CronSchedule):
        words = cron_words(schedule.expr)
        if words is None:
            return schedule.describe()
        if schedule.calendar is not None:  # the days it excludes are not fired
            words = f"{words}, calendar {schedule.calendar}"
        policy = f"DST gap: {schedule.gap}, overlap: {schedule.overlap}"
        return f"{words} ({policy})" if dst else words
    return schedule.describe()


def dst_policy(job: Job) -> str | None:
    schedule = job.spec.schedule
    if isinstance(schedule, CronSchedule):
        return f"DST {schedule.gap}/{schedule.overlap}"
    return None


# -- upcoming firings with DST notes -----------------------------------------------------
@dataclass(frozen=True, slots=True)
class Upcoming:
    local: str
    utc: str
    relative: str
    note: str | None
    short: str  # local time without the date, for the jobs table


def upcoming(job: Job, now: datetime, count: int) -> list[Upcoming]:
    zone = load_zone(zone_of(job))
    schedule = job.spec.schedule
    out: list[Upcoming] = []
    if job.next_fire_at is None or job.paused:
        return out
    instants = upcoming_instants(schedule, job.next_fire_at, count, end_at=job.spec.end_at)
    budget = StepBudget(LISTING_STEPS)
    for t in instants:
        note = None
        if isinstance(schedule, CronSchedule):
            try:  # the DST note of an instant: the search that finds it, from just before
                found = schedule.next_after_with_note(t - timedelta(microseconds=1), budget=budget)
            except InvalidScheduleError:
                found = None
            note = found.note if found is not None and found.utc == t else None
        local = fmt_local(t, zone)
        wall = t.astimezone(zone)
        same_day = wall.date() == now.astimezone(zone).date()
        short = wall.strftime("%H:%M:%S %Z") if same_day else local
        out.append(Upcoming(local, fmt_utc(t), fmt_relative(t, now), note, short))
    return out


# -- overview ----------------------------------------------------------------------------
@dataclass(slots=True)
class NodeRow:
    id: str
    kind: str
    host: str
    pid: int
    age: str
    alive: bool
    leader: bool
    tz: str = "?"  # the tz database it reports: "2025b (bundled)"
    tz_mismatch: bool = False  # live, and not the cluster's tz database version
    clock: str = "not measured"  # its offset to the store's clock ± uncertainty
    clock_flag: str | None = None  # why its clock is flagged (a worker claims nothing)


@dataclass(slots=True)
class Overview:
    now: str
    leader: str | None
    epoch: int | None
    lease_left: str | None
    queued: int
    claimed: int
    running: int
    stuck: int
    oldest_queued: str | None
    jobs: int
    paused: int
    last_hour: dict[str, int]
    p50: str
    p99: str
    samples: int
    objective: str
    breached: bool
    nodes: list[NodeRow] = field(default_factory=list)
    unserved: dict[str, int] = field(default_factory=dict)  # queued per task nobody serves
    cluster: bool = False  # the cluster's view: leader, nodes, every namespace's counts
    tz: dict[str, Any] = field(default_factory=dict)  # observability.tzdata.tz_status
    retention: dict[str, Any] = field(default_factory=dict)  # keep_for (text), keep_last, custom


def overview(store: ApiStore, namespace: str | None, *, cluster: bool) -> Overview:
    """``namespace``'s overview (None: every namespace's). ``cluster``: counts of every
    namespace, with the leader and the nodes (a cluster token, or authentication off);
    otherwise every count is the namespace's and no leader or node is shown."""
    s: StoreStatus = store.status() if cluster else store.status(namespace=namespace)
    now = s.now
    lease = s.lease if cluster else None
    alive = lease is not None and lease.expires_at > now
    # a held (claimed) or running firing whose claim lease ran out and no reaper handled
    held = store.list_firings(
        namespace=None if cluster else namespace,
        states=[FiringState.CLAIMED, FiringState.RUNNING],
        limit=1000,
    )
    stuck = sum(1 for f in held if f.lease_until is not None and f.lease_until < now)
    oldest = None
    if s.oldest_queued_due_at is not None and s.oldest_queued_due_at < now:
        oldest = fmt_s((now - s.oldest_queued_due_at).total_seconds())
    recent = store.list_firings(namespace=namespace, states=STARTED_STATES, limit=CHART_SAMPLE)
    late = [x * 1000 for x in (first_attempt_lateness_s(f) for f in recent) if x is not None]
    goal = objective_ms()
    p99 = percentile(late, 99)
    tz = tz_status(s, alive_within=timedelta(seconds=NODE_STALE_S))
    nodes = [
        NodeRow(
            id=n.id,
            kind=n.kind,
            host=n.hostname,
            pid=n.pid,
            age=fmt_s(max(0.0, (now - n.heartbeat_at).total_seconds())),
            alive=(now - n.heartbeat_at).total_seconds() <= NODE_STALE_S,
            leader=alive and lease is not None and lease.holder == n.id,
            tz="?" if n.tz_version is None else f"{n.tz_version} ({n.tz_source})",
            tz_mismatch=any(m["id"] == n.id for m in tz["mismatched"]),
            clock=clock_text(node_clock_to_json(n.clock)),
            clock_flag=None if n.clock is None else n.clock.flag,
        )
        for n in (s.nodes if cluster else [])
    ]
    return Overview(
        now=fmt_utc(now),
        leader=lease.holder if alive and lease else None,
        epoch=lease.epoch if lease else None,
        lease_left=fmt_s((lease.expires_at - now).total_seconds()) if alive and lease else None,
        queued=s.counts.get("queued", 0),
        claimed=s.counts.get("claimed", 0),
        running=s.counts.get("running", 0),
        stuck=stuck,
        oldest_queued=oldest,
        jobs=s.jobs,
        paused=s.paused_jobs,
        last_hour={k: v for k, v in sorted(s.counts.items()) if k not in _OPEN_STATES},
        p50=fmt_ms(percentile(late, 50)),
        p99=fmt_ms(p99),
        samples=len(late),
        objective=fmt_ms(goal),
        breached=p99 is not None and p99 > goal,
        nodes=nodes,
        unserved=store.unserved_queued(
            alive_within=timedelta(seconds=NODE_STALE_S), namespace=namespace
        ),
        cluster=cluster,
        tz=tz,
        retention=_retention(store, namespace or "default"),
    )


def _retention(store: ApiStore, namespace: str) -> dict[str, Any]:
    policy = store.get_retention(namespace)
    return {
        "keep_for": fmt_s(policy.keep_for.total_seconds()),
        "keep_last": policy.keep_last,
        "custom": namespace in store.list_retention(),
    }


# -- jobs ----------------------------------------------------------------------------------
@dataclass(slots=True)
class JobRow:
    id: int
    name: str
    task: str
    written: str
    words: str
    dst: str | None
    zone: str
    state: str
    next: list[Upcoming]
    last_outcome: str | None
    last_firing_id: int | None
    backlog: int
    p99: str
    breached: bool
    missed_total: int


def jobs(store: ApiStore, namespace: str) -> tuple[list[JobRow], bool]:
    now = store.now()
    ids = ids_for(store)
    found = store.search_jobs(namespace, limit=JOBS_SHOWN + 1)
    backlog = store.job_backlog(namespace, limit=10_000)
    goal = objective_ms()
    shown = found[:JOBS_SHOWN]
    # every shown job's lateness samples and last outcome in one read, never its firings
    runs = store.recent_runs([job.id for job in shown], sample=SAMPLE)
    rows: list[JobRow] = []
    for job in shown:
        run = runs_of(runs, job)
        lat = lateness_of(job, run.lateness_s, goal)
        rows.append(
            JobRow(
                id=ids.encode("job", job.id),
                name=job.name,
                task=job.spec.task,
                written=written(job),
                words=in_words(job, dst=False),
                dst=dst_policy(job),
                zone=zone_of(job),
                state=job_state(job),
                next=upcoming(job, now, 2),
                last_outcome=None if run.last_state is None else run.last_state.value,
                last_firing_id=None if run.last_id is None else ids.encode("firing", run.last_id),
                backlog=backlog.get(job.name, 0),
                p99=fmt_ms(lat.p99_ms),
                breached=lat.breached,
                missed_total=job.missed_total,
            )
        )
    return rows, len(found) > JOBS_SHOWN


# -- firings ---------------------------------------------------------------------------------
@dataclass(slots=True)
class FiringRow:
    id: int
    job: str
    job_id: int
    state: str
    scheduled: str
    attempt: str
    lateness: str
    late_breach: bool
    worker: str
    error: str | None


def firing_row(f: Firing, goal_ms: float, late: timedelta | None = None) -> FiringRow:
    """``late``: the firing's lateness where its row cannot tell (a retried one's)."""
    late = f.lateness if late is None else late
    ms = None if late is None else late.total_seconds() * 1000
    error = error_summary(f.error)
    error = error[:160] if error else None
    return FiringRow(
        id=f.id,
        job=f.job_name,
        job_id=f.job_id,
        state=f.state.value,
        scheduled=fmt_utc(f.scheduled_for),
        attempt=f"{f.attempt}/{f.max_attempts}",
        lateness=fmt_ms(ms),
        late_breach=ms is not None and ms > goal_ms,
        worker=f.worker_id or "—",
        error=error,
    )


def firings(
    store: ApiStore, namespace: str, *, state: str | None, job_id: int | None
) -> list[FiringRow]:
    """The namespace's firings (of the job with the store's id ``job_id`` if given)."""
    states = [FiringState(state)] if state else None
    goal = objective_ms()
    ids = ids_for(store)
    if job_id is not None:
        found = store.list_job_firings(JobId(job_id), states=states, limit=FIRINGS_SHOWN)
    else:
        found = store.list_firings(namespace=namespace, states=states, limit=FIRINGS_SHOWN)
    return [firing_row(ids.firing(f), goal, firing_lateness(f, store.list_attempts)) for f in found]


# -- one job, one firing ---------------------------------------------------------------------------
def job_detail(store: ApiStore, job: Job, *, hours: int) -> dict[str, Any]:
    now = store.now()
    since = now - timedelta(hours=hours)
    history = store.list_job_firings(
        job.id, scheduled_from=since, scheduled_to=now + timedelta(microseconds=1), limit=5000
    )
    events = store.job_events(job.id, limit=5000)
    fates_error = None
    try:
        occurrences = explain(job, since=since, until=now, now=now, firings=history, events=events)
    except InvalidScheduleError as exc:  # its work budget: say so instead of listing
        occurrences, fates_error = [], exc.message
    summary: dict[str, int] = {}
    for o in occurrences:
        summary[o.fate] = summary.get(o.fate, 0) + 1
    zone = load_zone(zone_of(job))
    ids = ids_for(store)
    before = [o for o in occurrences if o.fate == "not_due" and "existed" in o.detail]
    shown = [o for o in occurrences if not (o.fate == "not_due" and "existed" in o.detail)]
    fates = [
        {
            "nominal": o.nominal,
            "utc": fmt_utc(o.instant) if o.instant else "—",
            "local": fmt_local(o.instant, zone) if o.instant else "—",
            "fate": o.fate,
            "kind": o.fate.split(" ")[0],
            "detail": o.detail,
            "firing_id": None if o.firing_id is None else ids.encode("firing", o.firing_id),
        }
        for o in reversed(shown[-200:])
    ]
    lat = job_lateness(store, job)
    p = job.spec.policies
    return {
        "job": ids.job(job),
        "written": written(job),
        "words": in_words(job),
        "zone": zone_of(job),
        "state": job_state(job),
        "upcoming": upcoming(job, now, 10),
        "fates": fates,
        "fate_summary": sorted(summary.items()),
        "fates_total": len(occurrences),
        "fates_hidden": len(before),
        "fates_error": fates_error,
        "hours": hours,
        "lateness": lat,
        "p50": fmt_ms(lat.p50_ms),
        "p99": fmt_ms(lat.p99_ms),
        "objective": fmt_ms(lat.objective_ms),
        "policies": [
            ("max attempts", str(p.max_attempts)),
            ("misfire", p.misfire.value),
            ("overlap", p.overlap.value),
            ("max concurrency", str(job.spec.max_concurrency or "unlimited")),
            ("visibility timeout", fmt_s(p.visibility_timeout.total_seconds())),
            ("timeout", "none" if p.timeout is None else fmt_s(p.timeout.total_seconds())),
            ("priority", f"{p.priority:g}"),
            ("missed total", str(job.missed_total)),
        ],
    }


def timeline(f: Firing) -> list[dict[str, str]]:
    """The firing's moments, each with its offset from the scheduled instant: scheduled,
    enqueued, claimed, started, finished (the current attempt's; earlier ones are in
    its attempts)."""

    def step(label: str, t: datetime | None, extra: str = "") -> dict[str, str] | None:
        if t is None:
            return None
        offset = (t - f.scheduled_for).total_seconds() * 1000
        sign = "+" if offset >= 0 else "−"
        return {
            "label": label,
            "at": fmt_utc(t),
            "offset": f"{sign}{fmt_ms(abs(offset))}",
            "extra": extra,
        }

    epoch = "" if f.enqueued_epoch is None else f"by leader epoch {f.enqueued_epoch}"
    steps = [
        step("scheduled", f.scheduled_for),
        step("enqueued", f.enqueued_at, epoch),
        step("due (jitter)", f.due_at) if f.due_at != f.scheduled_for else None,
        step("claimed", f.claimed_at, f"by {f.worker_id}" if f.worker_id else ""),
        step("started", f.started_at, f"attempt {f.attempt}" if f.started_at else ""),
        step("cancel requested", f.cancel_requested_at),
        step("finished", f.finished_at, f.state.value if f.finished_at else ""),
    ]
    if f.state in (FiringState.CLAIMED, FiringState.RUNNING) and f.lease_until is not None:
        steps.append(step("claim lease until", f.lease_until, f.worker_id or ""))
    return [s for s in steps if s is not None]


def attempts(store: ApiStore, f: Firing, *, full: bool) -> list[dict[str, Any]]:
    """The firing's attempts in order (worker, claimed/started/finished in UTC, outcome,
    error) for its timeline; none when it was deleted since it was read. Errors are
    summaries unless ``full`` (a write or admin viewer: domain/error_text.py)."""
    try:
        found = store.list_attempts(f.id)
    except NotFoundError:
        return []
    return [
        {
            "attempt": a.attempt,
            "worker_id": a.worker_id,
            "claimed_at": None if a.claimed_at is None else fmt_utc(a.claimed_at),
            "started_at": None if a.started_at is None else fmt_utc(a.started_at),
            "finished_at": None if a.finished_at is None else fmt_utc(a.finished_at),
            "outcome": a.outcome.value,
            "error": a.error if full else error_summary(a.error),
        }
        for a in found
    ]
