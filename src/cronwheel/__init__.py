"""cronwheel — a distributed task scheduler that keeps its promises."""

from cronwheel.app import App, Task
from cronwheel.client import Client
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

__all__ = [
    "App",
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
