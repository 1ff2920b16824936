"""Registered tasks: named code a worker can run. The API refers to tasks only by name.

A task's ``isolation`` says where its handler runs: ``"thread"`` (a sync handler, in the
worker's handler threads), ``"loop"`` (an async handler, on the worker's event loop) or
``"process"`` (a child process that can be killed: see ``worker/processes.py``). None
leaves it to the worker (``WorkerConfig.isolation``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

from cronwheel.domain.names import validate_task
from cronwheel.errors import ConflictError, TaskNotFoundError, ValidationError
from cronwheel.worker.redact import Redactor

Isolation = Literal["thread", "loop", "process"]
ISOLATIONS: tuple[Isolation, ...] = ("thread", "loop", "process")


def check_isolation(value: object, is_async: bool, field: str = "isolation") -> Isolation:
    """``value`` as an isolation mode fit for a sync (``thread``/``process``) or an async
    (``loop``/``process``) handler; ValidationError naming ``field`` otherwise."""
    allowed = ("loop", "process") if is_async else ("thread", "process")
    if value not in allowed:
        kind = "an async" if is_async else "a sync"
        raise ValidationError(
            f"must be one of {', '.join(allowed)} for {kind} handler (got {value!r})", field=field
        )
    return cast(Isolation, value)


@dataclass(frozen=True, slots=True)
class TaskDef:
    name: str
    fn: Callable[..., Any]
    is_async: bool
    isolation: Isolation | None = None  # None: the worker's default


class TaskRegistry:
    def __init__(self) -> None:
        self._tasks: dict[str, TaskDef] = {}
        # the module of the app whose registry this is, when known (``cronwheel worker
        # MODULE:APP`` sets it): where a process-isolated child looks for a task that its
        # own module does not register
        self.app_module: str | None = None
        # secrets redacted from every error its worker records (tasks files add theirs)
        self.redact = Redactor()

    def add(self, name: str, fn: Callable[..., Any], *, isolation: str | None = None) -> TaskDef:
        validate_task(name)
        is_async = inspect.iscoroutinefunction(fn)
        mode = None if isolation is None else check_isolation(isolation, is_async)
        existing = self._tasks.get(name)
        if existing is not None and existing.fn is not fn:
            raise ConflictError(f"task {name!r} is registered twice", field="task")
        task = TaskDef(name=name, fn=fn, is_async=is_async, isolation=mode)
        self._tasks[name] = task
        return task

    def get(self, name: str) -> TaskDef:
        try:
            return self._tasks[name]
        except KeyError:
            raise TaskNotFoundError(f"no task named {name!r} is registered", field="task") from None

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __len__(self) -> int:
        return len(self._tasks)
