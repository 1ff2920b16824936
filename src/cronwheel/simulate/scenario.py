"""What a simulation is given and what it answers: the period, the events, the jobs
(from a store or a JSON file), and each job's occurrences with their fates."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from cronwheel.domain.fates import Occurrence
from cronwheel.domain.jobs import build_policies
from cronwheel.domain.models import Job, JobSpec
from cronwheel.domain.schedules import CronSchedule, NowSchedule, format_instant, parse_instant
from cronwheel.errors import CronwheelError, ValidationError
from cronwheel.wire import schedule_from_json

MAX_PERIOD = timedelta(days=92)
MAX_JOBS = 1000


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
    outages: tuple[Window, ...] = ()  # no scheduler and no worker
    scheduler_down: tuple[Window, ...] = ()  # no scheduler: nothing new is queued
    workers_down: tuple[Window, ...] = ()  # no worker: queued firings wait
    pauses: Mapping[str, tuple[Window, ...]] = field(default_factory=dict)
    slow: Mapping[str, timedelta] = field(default_factory=dict)

    def leader_down(self, t: datetime) -> bool:
        return any(w.covers(t) for w in (*self.outages, *self.scheduler_down))

    def workers_gone(self, t: datetime) -> bool:
        return any(w.covers(t) for w in (*self.outages, *self.workers_down))

    def edges(self) -> list[datetime]:
        """The instants an outage begins or ends."""
        windows = (*self.outages, *self.scheduler_down, *self.workers_down)
        return sorted({t for w in windows for t in (w.start, w.end)})

    def to_dict(self) -> dict[str, Any]:
        def window(w: Window) -> list[str]:
            return [format_instant(w.start), format_instant(w.end)]

        return {
            "from": format_instant(self.since),
            "to": format_instant(self.until),
            "outages": [window(w) for w in self.outages],
            "scheduler_down": [window(w) for w in self.scheduler_down],
            "workers_down": [window(w) for w in self.workers_down],
            "pauses": {name: [window(w) for w in ws] for name, ws in self.pauses.items()},
            "slow_s": {name: d.total_seconds() for name, d in self.slow.items()},
        }

    def check(self, names: Sequence[str]) -> None:
        if self.until <= self.since:
            raise ValidationError("must be after --from", field="to")
        if self.until - self.since > MAX_PERIOD:
            raise ValidationError(f"the period must be at most {MAX_PERIOD.days} days", field="to")
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
                {k: v for k, v in o.to_dict().items() if k != "firing_id"} for o in self.occurrences
            ],
        }


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
        raise ValidationError('must be a list of jobs or {"jobs": [...]}', field="file")
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
        inner = exc.field or "schedule"  # the codec names its fields from "schedule"
        exc.field = f"{where}." + (inner if inner.startswith("schedule") else f"schedule.{inner}")
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ValidationError(f"not a schedule ({exc})", field=f"{where}.schedule") from None
    if (
        isinstance(schedule, CronSchedule)
        and schedule.stored_calendar
        and not schedule.calendar_def
    ):
        raise ValidationError(
            f"{schedule.calendar!r} is a calendar of a namespace: give its rules in the file "
            '("calendar_def": {"holidays", "exclude", "include", "weekdays"}) or simulate the '
            "store's jobs",
            field=f"{where}.schedule.calendar",
        )
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
