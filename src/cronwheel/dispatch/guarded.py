"""A job's schedule that ends where it cannot be computed, noting the first failure:
one job's schedule never stops the dispatcher (dispatcher.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cronwheel.domain.policies import NextAfter
from cronwheel.errors import InvalidScheduleError


@dataclass(slots=True)
class ScheduleFailure:
    """The first instant after which a job's schedule could not be computed, and why."""

    after: datetime | None = None
    message: str = ""


def guarded(next_after: NextAfter, failure: ScheduleFailure) -> NextAfter:
    """``next_after`` that ends the schedule (None) where it cannot be computed (its work
    budget exhausted, no instant within the horizon), noting the first such failure: one
    job's schedule never stops the dispatcher."""

    def inner(t: datetime) -> datetime | None:
        try:
            return next_after(t)
        except InvalidScheduleError as exc:
            if failure.after is None:
                failure.after, failure.message = t, exc.message
            return None

    return inner
