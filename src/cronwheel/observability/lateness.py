"""Lateness objectives: "is each job starting on time?"

A firing's *lateness* is ``started_at - scheduled_for`` of its **first** attempt
(a retry starts after its backoff by design, so it would only add noise). Every
job is held to one objective: its p99 lateness over its most recent
``SAMPLE`` finished first attempts must stay at or under the objective — the
global default 200 ms (DESIGN.md promise P1), or ``CRONWHEEL_LATENESS_OBJECTIVE_MS``.

The dashboard, ``cronwheel status`` and ``/metrics`` all compute it here, from
the store, so the three always agree. A job may declare its own objective with
the ``lateness_objective`` policy (e.g. ``lateness_objective=0.05`` for 50 ms).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cronwheel.domain.models import STARTED_STATES as STARTED_STATES  # noqa: PLC0414
from cronwheel.domain.models import Firing, Job, JobId, RecentRuns
from cronwheel.domain.numbers import parse_decimal
from cronwheel.errors import ValidationError
from cronwheel.store.history_port import HistoryPort

OBJECTIVE_ENV = "CRONWHEEL_LATENESS_OBJECTIVE_MS"
DEFAULT_OBJECTIVE_MS = 200.0
SAMPLE = 100  # recent first attempts per job that the p99 is computed over
# 1 ms to 60 s: fine enough to see a dispatcher's milliseconds and a stalled minute
BUCKETS_S: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


def objective_ms(environ: Mapping[str, str] | None = None) -> float:
    """The objective in milliseconds (env ``CRONWHEEL_LATENESS_OBJECTIVE_MS``, else 200)."""
    env = os.environ if environ is None else environ
    text = env.get(OBJECTIVE_ENV, "").strip()
    if not text:
        return DEFAULT_OBJECTIVE_MS
    try:  # ASCII digits (float() takes other scripts' digits, '1_0', 'inf')
        value = parse_decimal(text, OBJECTIVE_ENV, high=math.inf)
    except ValidationError:
        value = math.nan
    if not math.isfinite(value) or not 0 < value <= 3_600_000:
        raise ValidationError(
            "must be a number of milliseconds from 0 to 3600000", field=OBJECTIVE_ENV
        )
    return value


def first_attempt_lateness_s(firing: Firing) -> float | None:
    """Seconds between the firing's instant and its first attempt's start, if known."""
    if firing.started_at is None or firing.attempt != 1:
        return None
    return (firing.started_at - firing.scheduled_for).total_seconds()


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobLateness:
    job_id: int
    namespace: str
    name: str
    samples: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    objective_ms: float

    @property
    def breached(self) -> bool:
        return self.p99_ms is not None and self.p99_ms > self.objective_ms

    def to_dict(self) -> dict[str, object]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 3)

        return {
            "job": self.name,
            "namespace": self.namespace,
            "samples": self.samples,
            "p50_ms": r(self.p50_ms),
            "p99_ms": r(self.p99_ms),
            "max_ms": r(self.max_ms),
            "objective_ms": self.objective_ms,
            "breached": self.breached,
        }


def lateness_of(job: Job, samples: Iterable[float], objective: float) -> JobLateness:
    """The job's p50/p99/max over ``samples``, first-attempt lateness in seconds (a
    :class:`RecentRuns`' ``lateness_s``): the one place they are computed. ``objective``
    is the default; a job's own ``lateness_objective`` policy wins."""
    own = job.spec.policies.lateness_objective
    if own is not None:
        objective = own.total_seconds() * 1000
    values = [s * 1000 for s in samples]
    return JobLateness(
        job_id=job.id,
        namespace=job.namespace,
        name=job.name,
        samples=len(values),
        p50_ms=percentile(values, 50),
        p99_ms=percentile(values, 99),
        max_ms=max(values) if values else None,
        objective_ms=objective,
    )


def firing_samples(firings: Iterable[Firing]) -> list[float]:
    """The first-attempt lateness samples of these firings (those that have one)."""
    return [s for s in map(first_attempt_lateness_s, firings) if s is not None]


def recent_lateness(
    store: HistoryPort, jobs: Sequence[Job], *, objective: float | None = None, sample: int = SAMPLE
) -> list[JobLateness]:
    """Each job's p50/p99 over its last ``sample`` finished firings, against the
    objective, in the order of ``jobs``: one read for all of them (``recent_runs``)."""
    goal = objective_ms() if objective is None else objective
    runs = store.recent_runs([job.id for job in jobs], sample=sample)
    return [lateness_of(job, runs_of(runs, job).lateness_s, goal) for job in jobs]


def runs_of(runs: Mapping[JobId, RecentRuns], job: Job) -> RecentRuns:
    """The job's entry of a ``recent_runs`` answer (empty when the job has none)."""
    return runs.get(job.id) or RecentRuns(job_id=job.id)


def job_lateness(
    store: HistoryPort, job: Job, *, objective: float | None = None, sample: int = SAMPLE
) -> JobLateness:
    """The job's p50/p99 over its last ``sample`` finished firings, against the objective."""
    return recent_lateness(store, [job], objective=objective, sample=sample)[0]


def breaches(
    store: HistoryPort, jobs: Iterable[Job], *, objective: float | None = None
) -> list[JobLateness]:
    """The jobs whose p99 exceeds the objective, worst first."""
    found = [j for j in recent_lateness(store, list(jobs), objective=objective) if j.breached]
    return sorted(found, key=lambda j: -(j.p99_ms or 0.0))
