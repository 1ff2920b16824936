"""The calendar port: calendars stored by name in a namespace (``domain/calendars.py``).
Re-exported by ``store.protocol``.

A cron job that names a stored calendar carries a copy of its rules in its schedule
(``calendar_def``), so every reader of the job computes its instants without another
lookup; changing the calendar rewrites that copy in every job of the namespace that
names it, and moves each one's cursor, in the same transaction (and bumps the jobs
version, so the leader re-reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cronwheel.domain.calendars import CalendarRecord, CalendarRules
from cronwheel.errors import ConflictError, NotFoundError


@dataclass(frozen=True, slots=True)
class CalendarChange:
    """A calendar written, and the jobs whose schedule and cursor moved with it."""

    calendar: CalendarRecord
    replanned: tuple[str, ...]


class CalendarPort(Protocol):
    """Named calendars per namespace."""

    def get_calendar(self, namespace: str, name: str) -> CalendarRecord | None:
        """The namespace's calendar of that name, if any."""
        ...

    def list_calendars(self, namespace: str) -> list[CalendarRecord]:
        """The namespace's calendars, by name."""
        ...

    def set_calendar(self, namespace: str, name: str, rules: CalendarRules) -> CalendarChange:
        """Create or replace a calendar; every job of the namespace naming it gets the
        new rules and its cursor searched again (``domain.jobs.rebind_job``), in the same
        transaction. A job the new rules leave without a firing refuses the change
        (InvalidScheduleError naming it): nothing is written."""
        ...

    def delete_calendar(self, namespace: str, name: str) -> None:
        """Delete a calendar no job names: NotFoundError (field ``name``) when there is
        none, ConflictError naming the jobs that name it (nothing deleted)."""
        ...

    def calendar_jobs(self, namespace: str, name: str) -> list[str]:
        """The names of the namespace's jobs that name the calendar, by name."""
        ...


def refuse_in_use(name: str, jobs: list[str]) -> ConflictError:
    shown = ", ".join(repr(j) for j in jobs[:10]) + (" ..." if len(jobs) > 10 else "")
    return ConflictError(
        f"calendar {name!r} is named by {len(jobs)} job(s): {shown}; change or delete them first",
        field="name",
        code="calendar_in_use",
    )


def no_calendar(namespace: str, name: str) -> NotFoundError:
    return NotFoundError(
        f"no calendar named {name!r} in namespace {namespace!r}",
        field="name",
        code="calendar_not_found",
    )


def calendar_rules_of(store: CalendarPort) -> Lookup:
    """``lookup(namespace, name)`` for ``domain.jobs.bind_schedule``: the rules stored."""

    def lookup(namespace: str, name: str) -> CalendarRules | None:
        record = store.get_calendar(namespace, name)
        return None if record is None else record.rules

    return lookup


class Lookup(Protocol):
    def __call__(self, namespace: str, name: str) -> CalendarRules | None: ...
