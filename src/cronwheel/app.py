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

import asyncio
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from cronwheel import app_batch
from cronwheel.app_settings import NamespaceSettings
from cronwheel.domain.batch import BatchResult
from cronwheel.domain.clock import Clock, SystemClock
from cronwheel.domain.jobs import (
    bind_calendar,
    build_policies,
    require_served_task,
    spec_first_fire_at,
)
from cronwheel.domain.models import Firing, Job, JobPolicies, JobSpec
from cronwheel.domain.names import validate_task
from cronwheel.domain.schedules import NowSchedule, Schedule
from cronwheel.domain.tzdb import use_tz_database
from cronwheel.errors import ValidationError
from cronwheel.observability.tracing_switch import tracing_wanted
from cronwheel.store.calendar_port import calendar_rules_of
from cronwheel.store.protocol import Store
from cronwheel.store.url import DEFAULT_STORE_URL, open_store
from cronwheel.worker.context import Context
from cronwheel.worker.registry import TaskRegistry

if TYPE_CHECKING:
    from cronwheel.store.postgres.store import PostgresStore

P = ParamSpec("P")
R = TypeVar("R")
W = TypeVar("W", Job, Firing)


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


@dataclass(frozen=True, slots=True)
class _Bound:
    """A store already bound to a caller's connection (the ``*_async`` calls hand it
    over)."""

    store: Store


class App(NamespaceSettings):
    def __init__(
        self,
        store_url: str = DEFAULT_STORE_URL,
        *,
        namespace: str = "default",
        clock: Clock | None = None,
        allow_unknown_task: bool = False,
        tzdata: str | None = None,
        tracing: bool | None = None,
    ) -> None:
        """``tzdata`` chooses this process's tz database ('bundled', 'system' or a
        directory; domain/tzdb.py); None keeps the current one (CRONWHEEL_TZDATA, else
        'bundled'). A bad value raises ValidationError naming ``tzdata``.
        ``tracing``: OpenTelemetry spans for enqueue, claim and run, the enqueuer's trace
        continued in the handler (README "Tracing"; the ``otel`` extra); None: as
        ``CRONWHEEL_TRACING`` says (off when unset)."""
        if tzdata is not None:
            use_tz_database(tzdata, field="tzdata")
        self.tracing = tracing_wanted(tracing)
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
        connection: Any = None,
        **policies: Any,
    ) -> Job:
        """Create (or, with ``replace``, upsert) a job running ``task`` on ``schedule``.

        A task no worker has ever served is refused (ValidationError naming ``task``)
        once any worker registered with the store, unless ``allow_unknown_task`` (default:
        the App's). ``connection``: write in the caller's open transaction on PostgreSQL
        (README "Transactional enqueue")."""
        store = self._store_on(connection)
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

        def write(spec: JobSpec) -> Job:
            if replace:
                return store.upsert_job(spec, first_fire_at=first)[0]
            return store.create_job(spec, first_fire_at=first)

        return self._traced(spec, write, "cronwheel.schedule") if self.tracing else write(spec)

    def enqueue(
        self, task: str | Task[Any, Any], /, *args: Any, connection: Any = None, **kwargs: Any
    ) -> Firing:
        """Run ``task(ctx, *args, **kwargs)`` on a worker as soon as possible.

        A task no worker has ever served is refused as by ``schedule`` (unless the App
        was made with ``allow_unknown_task=True``). ``connection`` (a keyword reserved
        here, never passed to the task): write in the caller's open transaction on
        PostgreSQL, a psycopg ``Connection``, a SQLAlchemy ``Session`` or Django's
        ``connection`` (README "Transactional enqueue")."""
        return self._enqueue_in(self._store_on(connection), task, args, kwargs)

    async def enqueue_async(
        self, task: str | Task[Any, Any], /, *args: Any, connection: Any = None, **kwargs: Any
    ) -> Firing:
        """``enqueue`` from a coroutine, without blocking its event loop: ``connection``
        may also be a psycopg ``AsyncConnection`` or a SQLAlchemy ``AsyncSession``."""
        store = await self._store_on_async(connection)
        return await asyncio.to_thread(self._enqueue_in, store, task, args, kwargs)

    async def schedule_async(
        self,
        task: str | Task[Any, Any],
        schedule: Schedule,
        *,
        connection: Any = None,
        **options: Any,
    ) -> Job:
        """``schedule`` from a coroutine (its keywords), as ``enqueue_async``."""
        bound = _Bound(await self._store_on_async(connection))
        return await asyncio.to_thread(self.schedule, task, schedule, connection=bound, **options)

    def _pg_store(self) -> PostgresStore:
        """The App's store for a write on a caller's connection: PostgreSQL only."""
        from cronwheel.store.postgres.store import PostgresStore

        store = self.store
        if not isinstance(store, PostgresStore):
            raise ValidationError(
                "a caller's connection is accepted only by an App on PostgreSQL "
                f"(this App's store is {type(store).__name__}): call without connection=",
                field="connection",
            )
        return store

    def _store_on(self, connection: Any) -> Store:
        """The store, writing in ``connection``'s transaction when one is given."""
        if connection is None:
            return self.store
        if isinstance(connection, _Bound):  # bound on the event loop (schedule_async)
            return connection.store
        from cronwheel.store.postgres.caller import SyncLink, sync_connection

        store = self._pg_store()
        return store.on_link(SyncLink(sync_connection(connection)))

    async def _store_on_async(self, connection: Any) -> Store:
        # the first use opens (and migrates) the store: off the event loop
        store = await asyncio.to_thread(lambda: self.store)
        if connection is None:
            return store
        from cronwheel.store.postgres.caller import async_link

        store = self._pg_store()
        return store.on_link(await async_link(connection))

    def _enqueue_in(
        self,
        store: Store,
        task: str | Task[Any, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Firing:
        task_name = task.name if isinstance(task, Task) else task
        self._require_served(task_name, None)
        spec = self._now_spec(task_name, args, kwargs)
        if self.tracing:
            return self._traced(spec, store.enqueue_now, "cronwheel.enqueue")
        return store.enqueue_now(spec)

    def schedule_many(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        all_or_nothing: bool = False,
        allow_unknown_task: bool | None = None,
        connection: Any = None,
    ) -> BatchResult[Job]:
        """Create many jobs in one transaction (the store's bulk path; README "Many jobs
        at once"): each item a mapping of :meth:`schedule`'s arguments (``task`` and
        ``schedule`` required), created, never replaced (a taken name is that item's
        ConflictError). Per item, the Job or its error (``field``: ``items[3].schedule``);
        ``all_or_nothing``: any item's error raises BatchError and nothing is written.
        ``connection``: in the caller's open transaction, as :meth:`schedule`."""
        return app_batch.schedule_many(
            self,
            self._store_on(connection),
            items,
            all_or_nothing=all_or_nothing,
            allow_unknown_task=allow_unknown_task,
        )

    def enqueue_many(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        all_or_nothing: bool = False,
        connection: Any = None,
    ) -> BatchResult[Firing]:
        """Run many tasks now, in one transaction with one wake-up for the workers: each
        item a mapping with ``task`` (required), ``args`` and ``kwargs``; per item, the
        Firing or its error; ``all_or_nothing`` and ``connection`` as in
        :meth:`schedule_many`."""
        store = self._store_on(connection)
        return app_batch.enqueue_many(self, store, items, all_or_nothing=all_or_nothing)

    async def schedule_many_async(
        self, items: Iterable[Mapping[str, Any]], *, connection: Any = None, **options: Any
    ) -> BatchResult[Job]:
        """``schedule_many`` from a coroutine (its keywords), as ``enqueue_async``."""
        bound = _Bound(await self._store_on_async(connection))
        return await asyncio.to_thread(self.schedule_many, items, connection=bound, **options)

    async def enqueue_many_async(
        self, items: Iterable[Mapping[str, Any]], *, connection: Any = None, **options: Any
    ) -> BatchResult[Firing]:
        """``enqueue_many`` from a coroutine (its keywords), as ``enqueue_async``."""
        bound = _Bound(await self._store_on_async(connection))
        return await asyncio.to_thread(self.enqueue_many, items, connection=bound, **options)

    def _now_spec(self, task_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> JobSpec:
        """The one-shot job of an immediate run: a unique name, the task's policies."""
        base = self.tasks.get(task_name)
        return JobSpec(
            name=f"{task_name}@{uuid.uuid4().hex[:12]}",
            task=task_name,
            schedule=NowSchedule(),
            args=args,
            kwargs=kwargs,
            namespace=self.namespace,
            policies=base.policies if base is not None else JobPolicies(),
        )

    def _served_check(self, allow: bool | None) -> Callable[[str], None]:
        """The served-task check of one or many tasks: a task no worker has served is
        refused (ValidationError naming ``task``) unless ``allow`` (default: the App's);
        the store's served tasks are read at most once per check."""
        allowed = self.allow_unknown_task if allow is None else allow
        served: list[str] | None = None

        def check(task: str) -> None:
            nonlocal served
            if allowed or task in self._served:
                return
            validate_task(task)  # a malformed name is refused as such, not as unknown
            if served is None:
                served = [t.task for t in self.store.served_tasks()]
                # a served task stays served (the table only grows)
                self._served.update(served)
            require_served_task(task, served)

        return check

    def _traced(self, spec: JobSpec, write: Callable[[JobSpec], W], name: str) -> W:
        """``write(spec)`` in a producer span, its context carried with the job
        (observability/tracing.py)."""
        from cronwheel.observability.tracing import traced_write
        from cronwheel.web.ids import ids_for

        return traced_write(spec, write, name=name, ids=lambda: ids_for(self.store))

    def _require_served(self, task: str, allow: bool | None) -> None:
        self._served_check(allow)(task)
