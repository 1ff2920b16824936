"""Registered tasks: named code a worker can run. The API refers to tasks only by name."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cronwheel.domain.models import validate_task
from cronwheel.errors import ConflictError, TaskNotFoundError


@dataclass(frozen=True, slots=True)
class TaskDef:
    name: str
    fn: Callable[..., Any]
    is_async: bool


class TaskRegistry:
    def __init__(self) -> None:
        self._tasks: dict[str, TaskDef] = {}

    def add(self, name: str, fn: Callable[..., Any]) -> TaskDef:
        validate_task(name)
        existing = self._tasks.get(name)
        if existing is not None and existing.fn is not fn:
            raise ConflictError(f"task {name!r} is registered twice", field="task")
        task = TaskDef(name=name, fn=fn, is_async=inspect.iscoroutinefunction(fn))
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
