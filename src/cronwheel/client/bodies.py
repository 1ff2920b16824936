"""The request bodies and paths the client's operations send (client/calls.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote

from cronwheel.domain.firing import format_instant
from cronwheel.domain.schedules import Schedule
from cronwheel.errors import ValidationError
from cronwheel.wire import schedule_to_json


def text(value: datetime | str) -> str:
    return format_instant(value) if isinstance(value, datetime) else value


def job_path(name: str) -> str:
    return "/v1/jobs/" + quote(name, safe="")


def calendar_path(name: str) -> str:
    return "/v1/calendars/" + quote(name, safe="")


def job_body(
    task: str,
    schedule: Schedule | Mapping[str, Any],
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    policies: Mapping[str, Any] | None = None,
    paused: bool | None = None,
    allow_past: bool = False,
    bounds: Mapping[str, Any] | None = None,
    allow_unknown_task: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task": task,
        "schedule": schedule_to_json(schedule),
        "args": list(args),
        "kwargs": dict(kwargs or {}),
    }
    if policies:
        body["policies"] = dict(policies)
    if paused is not None:
        body["paused"] = paused
    if allow_past:
        body["allow_past"] = True
    body |= {k: text(v) if isinstance(v, datetime) else v for k, v in (bounds or {}).items()}
    if allow_unknown_task:  # a task no worker has served yet (see README)
        body["allow_unknown_task"] = True
    return body


def batch_item(build: Callable[..., dict[str, Any]], item: Mapping[str, Any]) -> dict[str, Any]:
    """One item of a batch request from its keyword arguments (as the single method's)."""
    try:
        return build(**item)
    except TypeError as exc:
        raise ValidationError(f"not the arguments of one item: {exc}", field="items") from None


def job_item(
    name: str, task: str, schedule: Schedule | Mapping[str, Any], **kw: Any
) -> dict[str, Any]:
    return job_body(task, schedule, **kw) | {"name": name}


def run_item(
    task: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    body = {"task": task, "args": list(args), "kwargs": dict(kwargs or {})}
    return body if idempotency_key is None else body | {"idempotency_key": idempotency_key}


def firing_filters(
    states: list[str] | None,
    scheduled_from: datetime | str | None,
    scheduled_to: datetime | str | None,
) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if states:
        params["state"] = list(states)
    if scheduled_from is not None:
        params["scheduled_from"] = text(scheduled_from)
    if scheduled_to is not None:
        params["scheduled_to"] = text(scheduled_to)
    return params
