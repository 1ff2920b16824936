"""Every API operation, written once: the request it sends and how its answer is read
(a :class:`Call`). :class:`~cronwheel.client.Client` and
:class:`~cronwheel.client.AsyncClient` only send them (see the package doc)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from cronwheel.client.bodies import (
    batch_item,
    calendar_path,
    firing_filters,
    job_body,
    job_item,
    job_path,
    run_item,
    text,
)
from cronwheel.client.errors import error_of
from cronwheel.domain.attempts import Attempt
from cronwheel.domain.batch import BatchResult
from cronwheel.domain.models import Firing, Job
from cronwheel.domain.results import CancelResult
from cronwheel.domain.schedules import Schedule
from cronwheel.domain.skips import SkipResult
from cronwheel.errors import CronwheelError
from cronwheel.wire import (
    FiringPage,
    attempt_from_json,
    batch_from_json,
    cancel_from_json,
    firing_from_json,
    firing_page_from_json,
    job_from_json,
    schedule_to_json,
    skip_results_from_json,
)

if TYPE_CHECKING:
    from cronwheel.client import AsyncClient, Client

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call(Generic[R]):
    """One request and how its answer is read: ``parse`` of the JSON body (None for an
    empty one); ``on_error``, if given, turns a cronwheel error into the result."""

    method: str
    path: str
    parse: Callable[[Any], R]
    json: Any = None
    params: Mapping[str, Any] | None = None
    headers: Mapping[str, str] | None = None
    on_error: Callable[[CronwheelError], R] | None = None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    cursor: str | None


class _Op(Generic[P, R]):
    """An operation: on a Client a method returning R, on an AsyncClient a coroutine."""

    def __init__(self, build: Callable[Concatenate[Any, P], Call[R]]) -> None:
        self.build = build
        functools.update_wrapper(self, build)  # type: ignore[arg-type]

    @overload
    def __get__(self, obj: None, owner: type) -> _Op[P, R]: ...
    @overload
    def __get__(self, obj: AsyncClient, owner: type) -> Callable[P, Awaitable[R]]: ...
    @overload
    def __get__(self, obj: Client, owner: type) -> Callable[P, R]: ...
    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        build = self.build

        @functools.wraps(build)
        def method(*args: Any, **kwargs: Any) -> Any:
            return obj._send(build(obj, *args, **kwargs))

        return method


class _Pages(Generic[P, T]):
    """A listing: every item, page after page (``cursor`` passed back); on a Client an
    iterator, on an AsyncClient an async iterator."""

    def __init__(self, build: Callable[Concatenate[Any, P], Call[Page[T]]]) -> None:
        self.build = build
        functools.update_wrapper(self, build)  # type: ignore[arg-type]

    @overload
    def __get__(self, obj: None, owner: type) -> _Pages[P, T]: ...
    @overload
    def __get__(self, obj: AsyncClient, owner: type) -> Callable[P, AsyncIterator[T]]: ...
    @overload
    def __get__(self, obj: Client, owner: type) -> Callable[P, Iterator[T]]: ...
    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        build = self.build

        @functools.wraps(build)
        def method(*args: Any, **kwargs: Any) -> Any:
            return obj._pages(build(obj, *args, **kwargs))

        return method


def next_page(call: Call[Page[T]], cursor: str) -> Call[Page[T]]:
    return replace(call, params={**(call.params or {}), "cursor": cursor})


def _jobs_page(doc: Any) -> Page[Job]:
    return Page([job_from_json(i) for i in doc["items"]], doc["next_cursor"])


def _firings_page(doc: Any) -> Page[Firing]:
    return Page([firing_from_json(i) for i in doc["items"]], doc["next_cursor"])


def _job_changed(doc: Any) -> tuple[Job, bool]:
    return job_from_json(doc), bool(doc.get("changed"))


def _batch_of(key: str, made: Callable[[Any], T]) -> Callable[[Any], BatchResult[T]]:
    return lambda doc: batch_from_json(doc, key, made, error_of)


def _nothing(_doc: Any) -> None:
    return None


class Operations:
    """Every API operation, once: the Call it makes (see the module doc)."""

    url: str

    # -- jobs ---------------------------------------------------------------------
    @_Op
    def create_job(
        self,
        name: str,
        task: str,
        schedule: Schedule | Mapping[str, Any],
        *,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        policies: Mapping[str, Any] | None = None,
        paused: bool = False,
        allow_past: bool = False,
        bounds: Mapping[str, Any] | None = None,
        allow_unknown_task: bool = False,
    ) -> Call[Job]:
        """Create a job; ConflictError (code ``job_exists``) when the name is taken.
        ``policies`` keys: the names of domain/policy_table.py (retries, max_attempts,
        retry_backoff, misfire_grace, ...; durations in seconds or text like ``"5m"``).
        ``allow_unknown_task``: accept a task no worker has served yet."""
        body = job_body(
            task, schedule, args, kwargs, policies, paused, allow_past, bounds, allow_unknown_task
        )
        return Call("POST", "/v1/jobs", job_from_json, json=body | {"name": name})

    @_Op
    def create_jobs(
        self, items: Sequence[Mapping[str, Any]], *, all_or_nothing: bool = False
    ) -> Call[BatchResult[Job]]:
        """Create many jobs in one request and one transaction (``POST /v1/jobs/batch``, at
        most 1,000): each item a mapping of :meth:`create_job`'s arguments (``name``,
        ``task``, ``schedule``, ``args``, ...). A BatchResult: per item, the Job or its
        error (``field`` names the item: ``items[3].schedule``). ``all_or_nothing``: one
        refused item raises BatchError with every item's error, and nothing is written."""
        body = {
            "items": [batch_item(job_item, item) for item in items],
            "all_or_nothing": all_or_nothing,
        }
        return Call("POST", "/v1/jobs/batch", _batch_of("job", job_from_json), json=body)

    @_Op
    def put_job(
        self,
        name: str,
        task: str,
        schedule: Schedule | Mapping[str, Any],
        *,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        policies: Mapping[str, Any] | None = None,
        paused: bool | None = None,
        allow_past: bool = False,
        bounds: Mapping[str, Any] | None = None,
        allow_unknown_task: bool = False,
    ) -> Call[tuple[Job, bool]]:
        """Create or update by name; returns (job, changed). The same call twice is a no-op.
        ``bounds``: ``start_at``, ``end_at`` (instants) and ``max_runs``."""
        body = job_body(
            task, schedule, args, kwargs, policies, paused, allow_past, bounds, allow_unknown_task
        )
        return Call("PUT", job_path(name), _job_changed, json=body)

    @_Op
    def get_job(self, name: str) -> Call[Job]:
        return Call("GET", job_path(name), job_from_json)

    @_Op
    def next_fire_times(self, name: str, count: int = 5) -> Call[list[dict[str, str]]]:
        """The job's next instants as ``{"utc": ..., "local": ...}``."""
        return Call(
            "GET",
            job_path(name),
            lambda doc: list(doc.get("next_fire_times") or []),
            params={"upcoming": count},
        )

    @_Pages
    def list_jobs(
        self,
        *,
        state: str | None = None,
        task: str | None = None,
        name_prefix: str | None = None,
        page_size: int = 100,
    ) -> Call[Page[Job]]:
        """Every matching job, fetching pages of ``page_size`` as it goes."""
        params: dict[str, Any] = {"limit": page_size}
        for key, value in (("state", state), ("task", task), ("name_prefix", name_prefix)):
            if value is not None:
                params[key] = value
        return Call("GET", "/v1/jobs", _jobs_page, params=params)

    @_Op
    def update_job(self, name: str, /, **fields: Any) -> Call[Job]:
        """PATCH: task, schedule (a Schedule or mapping), args, kwargs, policies, paused."""
        if "schedule" in fields:
            fields["schedule"] = schedule_to_json(fields["schedule"])
        if "args" in fields:
            fields["args"] = list(fields["args"])
        return Call("PATCH", job_path(name), job_from_json, json=fields)

    @_Op
    def pause(self, name: str) -> Call[Job]:
        return Call("POST", job_path(name) + "/pause", job_from_json)

    @_Op
    def resume(self, name: str) -> Call[Job]:
        return Call("POST", job_path(name) + "/resume", job_from_json)

    @_Op
    def skip(
        self,
        name: str,
        *,
        at: Sequence[datetime | str] | None = None,
        next: int | None = None,
        reason: str | None = None,
    ) -> Call[list[SkipResult]]:
        """Skip occurrences without pausing the job: ``at`` (each one of the schedule's
        occurrences) or the ``next`` N (1..100) from now. One result per occurrence:
        ``skipped``, ``already_skipped``, or ``refused`` (running or finished: its state);
        InvalidTransitionError when every one is refused."""
        body: dict[str, Any] = {}
        if at is not None:
            body["at"] = [text(t) for t in at]
        if next is not None:
            body["next"] = next
        if reason is not None:
            body["reason"] = reason
        return Call("POST", job_path(name) + "/skip", skip_results_from_json, json=body)

    @_Op
    def trigger(self, name: str, *, overlap: str | None = None) -> Call[Firing]:
        """Fire the job now (its schedule is not moved); ``overlap`` overrides the job's
        overlap policy for this firing."""
        body = {} if overlap is None else {"overlap": overlap}
        return Call("POST", job_path(name) + "/trigger", firing_from_json, json=body)

    @_Op
    def backfill(
        self,
        name: str,
        start: datetime | str,
        end: datetime | str,
        *,
        overlap: str | None = None,
    ) -> Call[dict[str, Any]]:
        """One firing per schedule instant in [start, end] (past, at most 1000)."""
        body: dict[str, Any] = {"start": text(start), "end": text(end)}
        if overlap is not None:
            body["overlap"] = overlap
        return Call("POST", job_path(name) + "/backfill", dict, json=body)

    @_Op
    def delete_job(self, name: str) -> Call[None]:
        return Call("DELETE", job_path(name), _nothing)

    # -- firings ------------------------------------------------------------------
    @_Op
    def firings_page(
        self,
        *,
        job: str | None = None,
        states: list[str] | None = None,
        scheduled_from: datetime | str | None = None,
        scheduled_to: datetime | str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Call[FiringPage]:
        """One page of the namespace's firings (``GET /v1/firings``), newest first:
        ``job`` a job's exact name, ``states`` any of them, ``scheduled_from <=
        scheduled_for < scheduled_to``; ``limit`` 1-1000. Pass the page's
        ``next_cursor`` as ``cursor`` for the next one (None: it was the last)."""
        params = firing_filters(states, scheduled_from, scheduled_to) | {"limit": limit}
        if job is not None:
            params["job"] = job
        if cursor is not None:
            params["cursor"] = cursor
        return Call("GET", "/v1/firings", firing_page_from_json, params=params)

    @_Pages
    def list_firings(
        self,
        name: str | None = None,
        *,
        states: list[str] | None = None,
        scheduled_from: datetime | str | None = None,
        scheduled_to: datetime | str | None = None,
        page_size: int = 100,
    ) -> Call[Page[Firing]]:
        """Job ``name``'s firings (every job's of the namespace without one), newest
        first, fetching pages as it goes."""
        params = firing_filters(states, scheduled_from, scheduled_to) | {"limit": page_size}
        path = "/v1/firings" if name is None else job_path(name) + "/firings"
        return Call("GET", path, _firings_page, params=params)

    @_Op
    def get_firing(self, firing_id: int) -> Call[Firing]:
        return Call("GET", f"/v1/firings/{int(firing_id)}", firing_from_json)

    @_Op
    def list_attempts(self, firing_id: int) -> Call[list[Attempt]]:
        """The firing's attempts in order: worker, claimed/started/finished, outcome, error."""
        return Call(
            "GET",
            f"/v1/firings/{int(firing_id)}",
            lambda doc: [attempt_from_json(a) for a in doc.get("attempts") or []],
        )

    @_Op
    def cancel_firing(self, firing_id: int) -> Call[CancelResult]:
        """``outcome``: cancelled, cancel_requested or already_final."""
        return Call("POST", f"/v1/firings/{int(firing_id)}/cancel", cancel_from_json)

    @_Op
    def retry_firing(self, firing_id: int) -> Call[Firing]:
        """Re-drive a DEAD firing; InvalidTransitionError otherwise."""
        return Call("POST", f"/v1/firings/{int(firing_id)}/retry", firing_from_json)

    @_Op
    def enqueue(
        self, task: str, /, *args: Any, idempotency_key: str | None = None, **kwargs: Any
    ) -> Call[Firing]:
        """Run ``task(*args, **kwargs)`` on a worker now. With ``idempotency_key``, the same
        key and arguments give the same firing; other arguments raise ConflictError."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
        body = {"task": task, "args": list(args), "kwargs": kwargs}
        return Call("POST", "/v1/firings", firing_from_json, json=body, headers=headers)

    @_Op
    def enqueue_many(
        self, items: Sequence[Mapping[str, Any]], *, all_or_nothing: bool = False
    ) -> Call[BatchResult[Firing]]:
        """Run many tasks now, in one request and one transaction (``POST
        /v1/firings/batch``, at most 1,000): each item a mapping with ``task``, ``args``,
        ``kwargs`` and ``idempotency_key`` (as :meth:`enqueue`'s: the same key and item
        give the firing it made; another item, ConflictError). A BatchResult of Firings,
        or errors naming their item;
        ``all_or_nothing`` as for :meth:`create_jobs`."""
        body = {
            "items": [batch_item(run_item, item) for item in items],
            "all_or_nothing": all_or_nothing,
        }
        return Call("POST", "/v1/firings/batch", _batch_of("firing", firing_from_json), json=body)

    # -- calendars ----------------------------------------------------------------
    @_Op
    def put_calendar(self, name: str, rules: Mapping[str, Any]) -> Call[dict[str, Any]]:
        """Create or replace calendar ``name`` (an admin token); ``rules`` as the API's
        body (``{"holidays", "exclude", "include", "weekdays"}``). Names the jobs
        ``replanned``."""
        return Call("PUT", calendar_path(name), dict, json=dict(rules))

    @_Op
    def get_calendar(self, name: str) -> Call[dict[str, Any]]:
        return Call("GET", calendar_path(name), dict)

    @_Op
    def list_calendars(self) -> Call[list[dict[str, Any]]]:
        return Call("GET", "/v1/calendars", lambda doc: list(doc["items"]))

    @_Op
    def delete_calendar(self, name: str) -> Call[None]:
        """Refused (ConflictError naming them) while jobs name it."""
        return Call("DELETE", calendar_path(name), _nothing)

    # -- cluster ------------------------------------------------------------------
    @_Op
    def status(self) -> Call[dict[str, Any]]:
        return Call("GET", "/v1/status", dict)

    @_Op
    def preview(
        self,
        cron: str,
        tz: str = "UTC",
        *,
        after: datetime | str | None = None,
        count: int = 5,
        dst_gap: str | None = None,
        dst_overlap: str | None = None,
        calendar: str | None = None,
    ) -> Call[list[dict[str, Any]]]:
        """The next instants of a cron schedule: ``{"utc", "local", "abbrev", "note"}``;
        with ``calendar`` (``"DE-BY"``), none on the days it excludes."""
        body: dict[str, Any] = {"cron": cron, "tz": tz, "count": count}
        if after is not None:
            body["after"] = text(after)
        if dst_gap is not None:
            body["dst_gap"] = dst_gap
        if dst_overlap is not None:
            body["dst_overlap"] = dst_overlap
        if calendar is not None:
            body["calendar"] = calendar
        return Call("POST", "/v1/schedules/preview", lambda doc: list(doc["items"]), json=body)

    @_Op
    def ready(self) -> Call[bool]:
        """True when the API answers and its store is reachable."""
        return Call("GET", "/readyz", lambda _doc: True, on_error=lambda _exc: False)
