"""cronwheel — a distributed task scheduler that keeps its promises.

The names below are loaded on first use (PEP 562), so importing one part of the
package (``cronwheel.domain.cron``, say) loads that part only: not the store
drivers, the web framework, the CLI or the logging and metrics libraries.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cronwheel.app import App, Task
    from cronwheel.client import AsyncClient, Client
    from cronwheel.domain.clock import Clock, FakeClock, SystemClock
    from cronwheel.domain.firing import FiringState, idempotency_key
    from cronwheel.domain.models import Firing, Job, JobPolicies, JobSpec
    from cronwheel.domain.policies import MisfirePolicy
    from cronwheel.domain.schedules import at, cron, every, now
    from cronwheel.errors import (
        ConflictError,
        CronwheelError,
        FiringNotFoundError,
        InvalidScheduleError,
        InvalidTransitionError,
        JobNotFoundError,
        LeaseLostError,
        NotFoundError,
        StoreError,
        StoreUnavailableError,
        TaskNotFoundError,
        UnknownTimezoneError,
        ValidationError,
    )
    from cronwheel.signals import Cancel, Retry
    from cronwheel.worker.context import Context

_WHERE = {
    "App": "cronwheel.app",
    "Task": "cronwheel.app",
    "Client": "cronwheel.client",
    "AsyncClient": "cronwheel.client",
    "Clock": "cronwheel.domain.clock",
    "FakeClock": "cronwheel.domain.clock",
    "SystemClock": "cronwheel.domain.clock",
    "FiringState": "cronwheel.domain.firing",
    "idempotency_key": "cronwheel.domain.firing",
    "Firing": "cronwheel.domain.models",
    "Job": "cronwheel.domain.models",
    "JobPolicies": "cronwheel.domain.models",
    "JobSpec": "cronwheel.domain.models",
    "MisfirePolicy": "cronwheel.domain.policies",
    "at": "cronwheel.domain.schedules",
    "cron": "cronwheel.domain.schedules",
    "every": "cronwheel.domain.schedules",
    "now": "cronwheel.domain.schedules",
    "ConflictError": "cronwheel.errors",
    "CronwheelError": "cronwheel.errors",
    "FiringNotFoundError": "cronwheel.errors",
    "InvalidScheduleError": "cronwheel.errors",
    "InvalidTransitionError": "cronwheel.errors",
    "JobNotFoundError": "cronwheel.errors",
    "LeaseLostError": "cronwheel.errors",
    "NotFoundError": "cronwheel.errors",
    "StoreError": "cronwheel.errors",
    "StoreUnavailableError": "cronwheel.errors",
    "TaskNotFoundError": "cronwheel.errors",
    "UnknownTimezoneError": "cronwheel.errors",
    "ValidationError": "cronwheel.errors",
    "Cancel": "cronwheel.signals",
    "Retry": "cronwheel.signals",
    "Context": "cronwheel.worker.context",
}

__all__ = [
    "App",
    "AsyncClient",
    "Cancel",
    "Client",
    "Clock",
    "ConflictError",
    "Context",
    "CronwheelError",
    "FakeClock",
    "Firing",
    "FiringNotFoundError",
    "FiringState",
    "InvalidScheduleError",
    "InvalidTransitionError",
    "Job",
    "JobNotFoundError",
    "JobPolicies",
    "JobSpec",
    "LeaseLostError",
    "MisfirePolicy",
    "NotFoundError",
    "Retry",
    "StoreError",
    "StoreUnavailableError",
    "SystemClock",
    "Task",
    "TaskNotFoundError",
    "UnknownTimezoneError",
    "ValidationError",
    "at",
    "cron",
    "every",
    "idempotency_key",
    "now",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'cronwheel' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
