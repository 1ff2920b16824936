"""``App.schedule_many`` / ``App.enqueue_many``: a batch's items prepared as the single
calls prepare one (domain/batch.py's modes and item errors), written by the store's
bulk path on ``store`` (the App's, or one bound to a caller's connection: README
"Transactional enqueue"); with tracing on, in one producer span whose context every
item carries (observability/tracing.py ``traced_batch``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from cronwheel.domain.batch import BatchResult, item_fields, run_batch
from cronwheel.domain.jobs import bind_calendar, build_policies, spec_first_fire_at
from cronwheel.domain.models import Firing, Job, JobPolicies, JobSpec
from cronwheel.errors import ValidationError
from cronwheel.store.calendar_port import calendar_rules_of
from cronwheel.store.protocol import Store

if TYPE_CHECKING:
    from cronwheel.app import App

T = TypeVar("T")
Carry = Callable[[JobSpec], JobSpec]


def _traced(
    app: App, name: str, count: int, run: Callable[[Carry], BatchResult[T]]
) -> BatchResult[T]:
    if not app.tracing:
        return run(lambda spec: spec)
    from cronwheel.observability.tracing import traced_batch

    return traced_batch(run, name=name, count=count, namespace=app.namespace)


def _task_name(task: Any) -> Any:
    from cronwheel.app import Task

    return task.name if isinstance(task, Task) else task


def schedule_many(
    app: App,
    store: Store,
    items: Iterable[Mapping[str, Any]],
    *,
    all_or_nothing: bool,
    allow_unknown_task: bool | None,
) -> BatchResult[Job]:
    """See :meth:`App.schedule_many`."""
    listed = list(items)
    now = app.clock.now()
    served = app._served_check(allow_unknown_task)
    calendars = functools.cache(calendar_rules_of(app.store))  # each read once
    policies: dict[Any, JobPolicies] = {}  # many items share their policy keywords

    def policies_of(fields: dict[str, Any]) -> JobPolicies:
        try:
            key: Any = tuple(sorted(fields.items()))
            hash(key)
        except TypeError:
            return build_policies(**fields)
        if key not in policies:
            policies[key] = build_policies(**fields)
        return policies[key]

    def run(carry: Carry) -> BatchResult[Job]:
        def prepare(item: Mapping[str, Any]) -> tuple[JobSpec, datetime | None]:
            fields = item_fields(item, ("task", "schedule"))
            task_name = _task_name(fields.pop("task"))
            schedule = fields.pop("schedule")
            if not callable(getattr(schedule, "next_after", None)):
                raise ValidationError(
                    "must be a schedule (cron(), every(), at() or now())", field="schedule"
                )
            served(task_name)
            allow_past = bool(fields.pop("allow_past", False))
            spec = JobSpec(
                name=fields.pop("name", None) or task_name,
                task=task_name,
                schedule=schedule,
                args=tuple(fields.pop("args", ())),
                kwargs=dict(fields.pop("kwargs", None) or {}),
                namespace=app.namespace,
                start_at=fields.pop("start_at", None),
                end_at=fields.pop("end_at", None),
                max_runs=fields.pop("max_runs", None),
                paused=bool(fields.pop("paused", False)),
                policies=policies_of(fields),
            )
            spec = carry(bind_calendar(spec, calendars))
            return spec, spec_first_fire_at(spec, now, allow_past=allow_past)

        return run_batch(
            listed,
            prepare,
            lambda specs, atomic: store.create_jobs_batch(specs, all_or_nothing=atomic),
            all_or_nothing=all_or_nothing,
        )

    return _traced(app, "cronwheel.schedule_many", len(listed), run)


def enqueue_many(
    app: App, store: Store, items: Iterable[Mapping[str, Any]], *, all_or_nothing: bool
) -> BatchResult[Firing]:
    """See :meth:`App.enqueue_many`."""
    listed = list(items)
    served = app._served_check(None)

    def run(carry: Carry) -> BatchResult[Firing]:
        def prepare(item: Mapping[str, Any]) -> JobSpec:
            fields = item_fields(item, ("task",))
            task_name = _task_name(fields.pop("task"))
            served(task_name)
            args, kwargs = fields.pop("args", ()), fields.pop("kwargs", None) or {}
            if fields:
                raise ValidationError(
                    "is not an enqueue field (task, args, kwargs)", field=next(iter(fields))
                )
            return carry(app._now_spec(task_name, tuple(args), dict(kwargs)))

        return run_batch(
            listed,
            prepare,
            lambda specs, atomic: store.enqueue_now_batch(specs, all_or_nothing=atomic),
            all_or_nothing=all_or_nothing,
        )

    return _traced(app, "cronwheel.enqueue_many", len(listed), run)
