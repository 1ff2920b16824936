"""App: the task registry and the entry point of the Python API. No I/O at construction.

    from cronwheel import App, cron

    app = App("sqlite:///cronwheel.db")

    @app.task(schedule=cron("0 7 * * mon-fri", tz="Europe/Paris"), retries=3)
    def send_digest(ctx) -> None: ...

Declared schedules become jobs (named after the task unless ``job_name`` is
given) when a scheduler starts (``App.sync_jobs``): an upsert, so redeploying
the same code changes nothing and a changed schedule moves the job's cursor.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from cronwheel.domain.calendars import CalendarRules
from cronwheel.domain.clock import Clock, SystemClock
from cronwheel.domain.jobs import (
    bind_calendar,
    build_policies,
    require_served_task,
    spec_first_fire_at,
)
from cronwheel.domain.models import Firing, Job, JobPolicies, JobSpec, validate_task
from cronwheel.domain.policy_table import parse_seconds_or_duration
from cronwheel.domain.retention import Retention
from cronwheel.domain.schedules import NowSchedule, Schedule
from cronwheel.domain.tzdb import use_tz_database
from cronwheel.store.calendar_port import calendar_rules_of
from cronwheel.store.protocol import CalendarChange, Store
from cronwheel.store.url import DEFAULT_STORE_URL, open_store
from cronwheel.worker.context import Context
from cronwheel.worker.registry import TaskRegistry

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(slots=True)
class Task(Generic[P, R]):
    """A registered task: call it directly, or ``.enqueue(...)`` it to run on a worker."""

    app: App
    name: str
    fn: Callable[Concatenate[Context, P], R]
    schedule: Schedule | None = None
    job_name: str | None = None
    policies: JobPolicies = field(default_factory=JobPolicies)
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self, ctx: Context, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(ctx, *args, **kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Firing:
        return self.app.enqueue(self.name, *args, **kwargs)

    def job_spec(self) -> JobSpec | None:
        if self.schedule is None:
            return None
        return JobSpec(
            name=self.job_name or self.name,
            task=self.name,
            schedule=self.schedule,
            args=self.args,
            kwargs=self.kwargs,
            namespace=self.app.namespace,
            policies=self.policies,
        )


class App:
    def __init__(
        self,
        store_url: str = DEFAULT_STORE_URL,
        *,
        namespace: str = "default",
        clock: Clock | None = None,
        allow_unknown_task: bool = False,
        tzdata: str | None = None,
    ) -> None:
        """``tzdata`` chooses this process's tz database ('bundled', 'system' or a
        directory; domain/tzdb.py); None keeps the current one (CRONWHEEL_TZDATA, else
        'bundled'). A bad value raises ValidationError naming ``tzdata``."""
        if tzdata is not None:
            use_tz_database(tzdata, field="tzdata")
        self.store_url = store_url
        self.namespace = namespace
        # refuse jobs (schedule, enqueue) whose task no worker has served (see README)
        self.allow_unknown_task = allow_unknown_task
        self._served: set[str] = set()  # tasks this App saw served (never unserved again)
        self.clock: Clock = clock or SystemClock()
        self.registry = TaskRegistry()
        self.tasks: dict[str, Task[Any, Any]] = {}
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        """The store, opened (and migrated) on first use."""
        if self._store is None:
            self._store = open_store(self.store_url, clock=self.clock)
        return self._store

    def use_store(self, store: Store) -> None:
        self._store = store
        self._served.clear()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- registration ----------------------------------------------------------------
    @overload
    def task(self, fn: Callable[Concatenate[Context, P], R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        schedule: Schedule | None = None,
        job_name: str | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        isolation: str | None = None,
        **policies: Any,
    ) -> Callable[[Callable[Concatenate[Context, P], R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[Concatenate[Context, P], R] | None = None,
        /,
        *,
        name: str | None = None,
        schedule: Schedule | None = None,
        job_name: str | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        isolation: str | None = None,
        **policies: Any,
    ) -> Task[P, R] | Callable[[Callable[Concatenate[Context, P], R]], Task[P, R]]:
        """Register a handler ``fn(ctx, *args, **kwargs)``; with ``schedule=`` it also
        declares a job. Policy keywords: retries / max_attempts, retry_backoff,
        visibility_timeout, timeout, misfire, misfire_grace, catchup_window,
        max_catchup, priority. ``isolation="process"`` runs each attempt in a child
        process the worker can kill (default: the worker's ``--isolation``; in-process,
        ``"thread"`` for a sync handler, ``"loop"`` for an async one)."""
        built = build_policies(**policies)

        def register(f: Callable[Concatenate[Context, P], R]) -> Task[P, R]:
            task_name = name or f.__name__
            self.registry.add(task_name, f, isolation=isolation)
            handle: Task[P, R] = Task(
                app=self,
                name=task_name,
                fn=f,
                schedule=schedule,
                job_name=job_name,
                policies=built,
                args=tuple(args),
                kwargs=dict(kwargs or {}),
            )
            handle.job_spec()  # validate the declared job now, at import time
            self.tasks[task_name] = handle
            return handle

        if fn is not None:
            return register(fn)
        return register

    # -- jobs --------------------------------------------------------------------------
    def declared_jobs(self) -> list[JobSpec]:
        return [spec for t in self.tasks.values() if (spec := t.job_spec()) is not None]

    def sync_jobs(self) -> list[tuple[Job, bool]]:
        """Upsert every job declared with ``@app.task(schedule=...)``."""
        now = self.clock.now()
        lookup = calendar_rules_of(self.store)
        specs = [bind_calendar(spec, lookup) for spec in self.declared_jobs()]
        return [
            self.store.upsert_job(spec, first_fire_at=spec_first_fire_at(spec, now))
            for spec in specs
        ]

    def calendar(
        self,
        name: str,
        *,
        holidays: str | None = None,
        exclude: Sequence[date | str] = (),
        include: Sequence[date | str] = (),
        weekdays: str | None = None,
    ) -> CalendarChange:
        """Create or replace the namespace's calendar ``name`` (lower case), which cron
        schedules name with ``calendar=name``: it excludes ``holidays`` (a built-in
        calendar: ``"DE-BY"``), the ``exclude`` dates and the days not among ``weekdays``
        (``"mon-fri"``); an ``include`` date is never excluded. The jobs naming it are
        re-planned (``CalendarChange.replanned``)."""
        rules = CalendarRules.from_dict(
            {
                "holidays": holidays,
                "exclude": list(exclude),
                "include": list(include),
                "weekdays": weekdays,
            }
        )
        return self.store.set_calendar(self.namespace, name, rules)

    def retention(
        self, *, keep_for: timedelta | float | str | None = None, keep_last: int | None = None
    ) -> Retention:
        """The namespace's retention policy (domain/retention.py), changed first when
        ``keep_for`` (a timedelta, seconds or text such as ``"30d"``) and/or
        ``keep_last`` are given. Jobs override it with their keep_for/keep_last."""
        changes: dict[str, Any] = {}
        if keep_for is not None:
            changes["keep_for"] = (
                parse_seconds_or_duration(keep_for, "keep_for")
                if isinstance(keep_for, str)
                else keep_for
            )
        if keep_last is not None:
            changes["keep_last"] = keep_last
        if changes:
            return self.store.set_retention(self.namespace, changes)
        return self.store.get_retention(self.namespace)

    def schedule(
        self,
        task: str | Task[Any, Any],
        schedule: Schedule,
        *,
        name: str | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        allow_past: bool = False,
        replace: bool = True,
        start_at: datetime | None = None,
        end_at: datetime | None = None,
        max_runs: int | None = None,
        paused: bool = False,
        allow_unknown_task: bool | None = None,
        **policies: Any,
    ) -> Job:
        """Create (or, with ``replace``, upsert) a job running ``task`` on ``schedule``.

        A task no worker has ever served is refused (ValidationError naming ``task``)
        once any worker registered with the store, unless ``allow_unknown_task`` (default:
        the App's)."""
        task_name = task.name if isinstance(task, Task) else task
        self._require_served(task_name, allow_unknown_task)
        spec = JobSpec(
            name=name or task_name,
            task=task_name,
            schedule=schedule,
            args=tuple(args),
            kwargs=dict(kwargs or {}),
            namespace=self.namespace,
            policies=build_policies(**policies),
            start_at=start_at,
            end_at=end_at,
            max_runs=max_runs,
            paused=paused,
        )
        spec = bind_calendar(spec, calendar_rules_of(self.store))
        first = spec_first_fire_at(spec, self.clock.now(), allow_past=allow_past)
        if replace:
            job, _ = self.store.upsert_job(spec, first_fire_at=first)
            return job
        return self.store.create_job(spec, first_fire_at=first)

    def enqueue(self, task: str | Task[Any, Any], /, *args: Any, **kwargs: Any) -> Firing:
        """Run ``task(ctx, *args, **kwargs)`` on a worker as soon as possible.

        A task no worker has ever served is refused as by ``schedule`` (unless the App
        was made with ``allow_unknown_task=True``)."""
        task_name = task.name if isinstance(task, Task) else task
        self._require_served(task_name, None)
        base = self.tasks.get(task_name)
        spec = JobSpec(
            name=f"{task_name}@{uuid.uuid4().hex[:12]}",
            task=task_name,
            schedule=NowSchedule(),
            args=args,
            kwargs=kwargs,
            namespace=self.namespace,
            policies=base.policies if base is not None else JobPolicies(),
        )
        return self.store.enqueue_now(spec)

    def _require_served(self, task: str, allow: bool | None) -> None:
        if (self.allow_unknown_task if allow is None else allow) or task in self._served:
            return
        validate_task(task)  # a malformed name is refused as such, not as unknown
        served = [t.task for t in self.store.served_tasks()]
        require_served_task(task, served)
        # a served task stays served (the table only grows): enqueue pays one read per task
        self._served.update(served)
