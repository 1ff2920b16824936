"""``cron-mix``: many cron jobs across many IANA zones, run for a while, checked instant by
instant.

N cron jobs are spread over ~35 real zones (whole-hour, half-hour and 45-minute offsets,
both hemispheres' DST rules); a third fire every minute, the rest at assorted
minute/hour patterns. They are registered through the bulk path (``create_jobs`` in
chunks) with their cursor at ``next_after(window start)``; the processes run until the
window has ended and every firing due in it has finished. Then each job's expected
instants in the window are computed from its stored cursor with the schedule's own
``next_after``, and compared with its firings: an expected instant without a succeeded
firing is lost; a second firing of an instant, or a firing at an instant that was not
expected, is duplicated.

Overlap and misfire policies are the defaults (a recurring job runs at most one firing
at a time, overlap ``skip``): the no-op handler ends long before the job's next instant,
so a skip would be a real fault, not an artefact of the check.

A run shorter than two minutes (``bench smoke``) uses the same mix at seconds
resolution (six-field expressions: a third every 5 s, the rest every 10/15/20/30 s and
so on), so that a 20-second window still sees every job class fire.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from cronwheel.bench.registry import all_jobs
from cronwheel.bench.runner import (
    ACTIVE,
    TASK,
    BenchResult,
    Cluster,
    all_firings,
    fresh_store,
    percentile,
    rounded,
    store_kind,
    wait_until,
)
from cronwheel.domain.clock import SystemClock
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import JobPolicies, JobSpec
from cronwheel.domain.overlap import OverlapPolicy
from cronwheel.domain.schedules import CronSchedule, cron
from cronwheel.store.protocol import Store

# ~35 real zones: whole-hour, half-hour (Kolkata, Tehran, Kabul, Yangon, Darwin, Adelaide,
# St Johns, Marquesas) and 45-minute offsets (Kathmandu, Eucla, Chatham), both hemispheres.
ZONES = [
    "UTC",
    "Europe/London",
    "Europe/Paris",
    "Europe/Berlin",
    "Europe/Helsinki",
    "Europe/Moscow",
    "Africa/Cairo",
    "Africa/Johannesburg",
    "Atlantic/Azores",
    "Asia/Dubai",
    "Asia/Tehran",
    "Asia/Kabul",
    "Asia/Karachi",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Asia/Dhaka",
    "Asia/Yangon",
    "Asia/Bangkok",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Australia/Eucla",
    "Australia/Darwin",
    "Australia/Adelaide",
    "Australia/Sydney",
    "Pacific/Chatham",
    "Pacific/Auckland",
    "Pacific/Honolulu",
    "Pacific/Marquesas",
    "America/Anchorage",
    "America/Los_Angeles",
    "America/Denver",
    "America/Chicago",
    "America/New_York",
    "America/Caracas",
    "America/Sao_Paulo",
    "America/St_Johns",
]

EVERY_MINUTE = "* * * * *"
OTHER_PATTERNS = [
    "*/2 * * * *",
    "*/3 * * * *",
    "*/5 * * * *",
    "*/10 * * * *",
    "*/15 * * * *",
    "0,30 * * * *",
    "1-59/2 * * * *",
    "0-29 * * * *",
    "7 * * * *",
    "0 * * * *",
    "30 */2 * * *",
    "*/5 9-17 * * MON-FRI",
    "45 9 * * *",
    "0 0 * * *",
    "0 12 * * SUN",
    "0 0 1 * *",
]
# Seconds resolution for runs shorter than two minutes (six fields, leading seconds).
SHORT_EVERY = "*/5 * * * * *"
SHORT_OTHERS = [
    "*/10 * * * * *",
    "*/15 * * * * *",
    "*/20 * * * * *",
    "0,30 * * * * *",
    "3-59/6 * * * * *",
    "7 * * * * *",
    "0 * * * * *",
    "0 */2 * * * *",
]
CHUNK = 5000


_POLICIES = JobPolicies(overlap=OverlapPolicy.BUFFER_ALL, max_buffer=10_000)


def mix(count: int, *, short: bool) -> list[CronSchedule]:
    """The schedule of each of ``count`` jobs: every third one fires every minute (every
    5 s when ``short``); zones and the other patterns rotate independently."""
    every, others = (SHORT_EVERY, SHORT_OTHERS) if short else (EVERY_MINUTE, OTHER_PATTERNS)
    cache: dict[tuple[str, str], CronSchedule] = {}
    out: list[CronSchedule] = []
    for i in range(count):
        expr = every if i % 3 == 0 else others[(i // 3) % len(others)]
        zone = ZONES[(i * 7) % len(ZONES)]
        key = (expr, zone)
        sched = cache.get(key)
        if sched is None:
            sched = cache[key] = cron(expr, zone)
        out.append(sched)
    return out


def expected_instants(sched: CronSchedule, cursor: datetime, end: datetime) -> list[datetime]:
    out: list[datetime] = []
    t: datetime | None = cursor
    while t is not None and t <= end:
        out.append(t)
        t = sched.next_after(t)
    return out


def run_cron_mix(
    store_url: str | None,
    *,
    count: int,
    duration_s: float,
    workers: int,
    concurrency: int,
    progress: Callable[[int, int], None],
) -> BenchResult:
    short = duration_s < 120
    with tempfile.TemporaryDirectory() as tmp, fresh_store(store_url, Path(tmp)) as (url, store):
        result = BenchResult(workload="cron-mix", store=store_kind(url), expected=0)
        schedules = mix(count, short=short)
        clock = SystemClock()
        # The window starts once registration (~4,000 jobs/s at worst) and process start
        # are done; a long run starts 1 s before a minute boundary so it holds whole minutes.
        start = clock.now() + timedelta(seconds=count / 4000 + (4 if short else 6))
        if not short:
            start = start.replace(second=0, microsecond=0) + timedelta(minutes=1, seconds=-1)
        end = start + timedelta(seconds=duration_s)
        with Cluster(url, workers, concurrency, Path(tmp)):
            t_reg = time.monotonic()
            for lo in range(0, count, CHUNK):
                # buffer_all: every firing runs even when a job's previous firing is still
                # in flight under the herd's backlog (with the default `skip`, such a firing
                # is recorded SKIPPED — a fate, not a loss, but this workload counts runs)
                items = [
                    (
                        JobSpec(name=f"cron-{i}", task=TASK, schedule=s, policies=_POLICIES),
                        s.next_after(start),
                    )
                    for i, s in enumerate(schedules[lo : lo + CHUNK], start=lo)
                ]
                store.create_jobs(items)
                progress(0, max(count, 1))
            register_s = time.monotonic() - t_reg
            result.figures["register_s"] = round(register_s, 3)
            result.figures["register_jobs_per_s"] = round(count / max(register_s, 1e-3))
            # expected instants from each job's stored cursor (one computation per
            # distinct (schedule, cursor): jobs share them)
            jobs = [j for j in all_jobs(store) if j.spec.name.startswith("cron-")]
            cache: dict[tuple[str, str, datetime | None], list[datetime]] = {}
            expected: dict[int, set[datetime]] = {}
            for job in jobs:
                sched = job.spec.schedule
                assert isinstance(sched, CronSchedule)
                key = (sched.expr, sched.tz, job.next_fire_at)
                if key not in cache:
                    cache[key] = (
                        []
                        if job.next_fire_at is None
                        else expected_instants(sched, job.next_fire_at, end)
                    )
                expected[job.id] = set(cache[key])
            total = sum(len(v) for v in expected.values())
            result.expected = total
            late_start = (clock.now() - start).total_seconds()
            if late_start > 0:
                result.figures["registration_overran_s"] = round(late_start, 3)
            wait_until(
                lambda: _window_done(store, end, total, progress),
                (end - clock.now()).total_seconds() + 180,
                interval_s=1.0,
            )
        _collect(store, result, expected, end)
        result.figures["zones"] = len(ZONES)
        result.figures["jobs"] = count
        result.figures["window_s"] = duration_s
        result.figures["firings_per_s"] = round(result.ran / duration_s, 1)
        return result


def _window_done(
    store: Store, end: datetime, total: int, progress: Callable[[int, int], None]
) -> bool:
    st = store.status()
    done = sum(v for k, v in st.counts.items() if k not in ACTIVE)
    progress(min(done, total), total)
    if SystemClock().now() < end:
        return False
    if store.due_jobs(end, limit=1):
        return False  # some job's cursor has not moved past the window yet
    active = store.list_firings(
        states=[FiringState.QUEUED, FiringState.CLAIMED, FiringState.RUNNING], limit=20_000
    )
    if len(active) >= 20_000:
        return False
    return all(f.scheduled_for > end for f in active)


def _collect(
    store: Store, result: BenchResult, expected: dict[int, set[datetime]], end: datetime
) -> None:
    seen: dict[tuple[int, datetime], int] = {}
    states: dict[tuple[int, datetime], str] = {}
    lateness: list[float] = []
    per_instant: dict[datetime, list[float]] = {}
    unexpected = 0
    for f in all_firings(store):
        want = expected.get(f.job_id)
        if want is None or f.scheduled_for > end:
            continue
        key = (f.job_id, f.scheduled_for)
        seen[key] = seen.get(key, 0) + 1
        if f.scheduled_for not in want:
            unexpected += 1
            continue
        states[key] = f.state.value
        if f.state is FiringState.SUCCEEDED and f.started_at is not None:
            result.ran += 1
            ms = (f.started_at - f.scheduled_for).total_seconds() * 1000
            lateness.append(ms)
            per_instant.setdefault(f.scheduled_for, []).append(ms)
    result.duplicated = unexpected + sum(c - 1 for c in seen.values() if c > 1)
    result.lost = result.expected - result.ran
    if result.lost:
        # what became of the lost instants: a firing's final state, or no firing at all
        fates: dict[str, int] = {}
        for job_id, want in expected.items():
            for t in want:
                state = states.get((job_id, t), "no_firing")
                if state != FiringState.SUCCEEDED.value:
                    fates[state] = fates.get(state, 0) + 1
        result.figures["lost_as"] = ", ".join(f"{k} {v}" for k, v in sorted(fates.items()))
    result.lateness_ms = {
        "p50": rounded(percentile(lateness, 50)),
        "p99": rounded(percentile(lateness, 99)),
        "max": rounded(max(lateness) if lateness else None),
    }
    if per_instant:
        burst_at = max(per_instant, key=lambda t: len(per_instant[t]))
        burst = per_instant[burst_at]
        result.figures["burst_firings"] = len(burst)
        result.figures["burst_last_started_after_s"] = rounded(max(burst) / 1000)
