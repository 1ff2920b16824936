"""The API's calendar bodies (``/v1/calendars``): see domain/calendars.py."""

from __future__ import annotations

from pydantic import Field

from cronwheel.api.schema_base import InModel as _In
from cronwheel.api.schema_base import OutModel as _Out


class CalendarIn(_In):
    """A calendar's rules: what it excludes (holidays, explicit dates, days off its
    weekdays), and the dates it never excludes."""

    holidays: str | None = Field(
        None, max_length=64, examples=["DE-BY"], description="a built-in calendar's holidays"
    )
    exclude: list[str] = Field(
        default_factory=list, max_length=1000, examples=[["2026-12-24", "2026-12-31"]]
    )
    include: list[str] = Field(
        default_factory=list,
        max_length=1000,
        examples=[["2026-12-27"]],
        description="dates never excluded (over a holiday or a day off its weekdays)",
    )
    weekdays: str | None = Field(
        None, max_length=64, examples=["mon-fri"], description="cron's day-of-week syntax"
    )


class CalendarOut(_Out):
    namespace: str
    name: str
    holidays: str | None
    exclude: list[str]
    include: list[str]
    weekdays: str | None
    updated_at: str
    jobs: list[str] = Field(description="the namespace's jobs that name it")
    replanned: list[str] | None = Field(
        None, description="on a write: the jobs whose schedule and next instant moved with it"
    )


class CalendarList(_Out):
    items: list[CalendarOut]
