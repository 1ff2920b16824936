"""The settings a namespace's jobs share, as ``App`` methods: its calendars and its
history retention (the store keeps them; the CLI and the API set the same)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

from cronwheel.domain.calendars import CalendarRules
from cronwheel.domain.policy_table import parse_seconds_or_duration
from cronwheel.domain.retention import Retention
from cronwheel.store.protocol import CalendarChange, Store


class NamespaceSettings:
    """``App``'s namespace-wide settings; ``store`` and ``namespace`` are the App's."""

    namespace: str

    if TYPE_CHECKING:  # App's property

        @property
        def store(self) -> Store: ...

    def calendar(
        self,
        name: str,
        *,
        holidays: str | None = None,
        exclude: Sequence[date | str] = (),
        include: Sequence[date | str] = (),
        weekdays: str | None = None,
    ) -> CalendarChange:
        """Create or replace the namespace's calendar ``name`` (lower case), which cron
        schedules name with ``calendar=name``: it excludes ``holidays`` (a built-in
        calendar: ``"DE-BY"``), the ``exclude`` dates and the days not among ``weekdays``
        (``"mon-fri"``); an ``include`` date is never excluded. The jobs naming it are
        re-planned (``CalendarChange.replanned``)."""
        rules = CalendarRules.from_dict(
            {
                "holidays": holidays,
                "exclude": list(exclude),
                "include": list(include),
                "weekdays": weekdays,
            }
        )
        return self.store.set_calendar(self.namespace, name, rules)

    def retention(
        self, *, keep_for: timedelta | float | str | None = None, keep_last: int | None = None
    ) -> Retention:
        """The namespace's retention policy (domain/retention.py), changed first when
        ``keep_for`` (a timedelta, seconds or text such as ``"30d"``) and/or
        ``keep_last`` are given. Jobs override it with their keep_for/keep_last."""
        changes: dict[str, Any] = {}
        if keep_for is not None:
            changes["keep_for"] = (
                parse_seconds_or_duration(keep_for, "keep_for")
                if isinstance(keep_for, str)
                else keep_for
            )
        if keep_last is not None:
            changes["keep_last"] = keep_last
        if changes:
            return self.store.set_retention(self.namespace, changes)
        return self.store.get_retention(self.namespace)
