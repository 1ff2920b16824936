"""The list filters assembled at run time, written once from a dialect's fragments.

Each returns the WHERE clause (placeholders in the dialect's style, column names
fixed here, values only as parameters) and its parameters; the query it goes into
is a named block whose ``/*where*/`` marks the spot.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cronwheel.domain.firing import FiringState
from cronwheel.store.core.dialect import Dialect

Where = tuple[str, dict[str, Any]]

# the job states of search_jobs, as SQL both engines read alike (paused is 0/1 in SQLite)
_JOB_STATES = {
    "active": "NOT paused AND next_fire_at IS NOT NULL",
    "paused": "paused",
    "done": "NOT paused AND next_fire_at IS NULL",
}


# the predicate of the partial index firings_active, written as it is there so that
# either engine's planner sees the index apply (a bound list parameter does not show it)
ACTIVE = frozenset({"queued", "claimed", "running"})
_ACTIVE_SQL = "state IN ('queued', 'claimed', 'running')"


class _Clause:
    def __init__(self, d: Dialect) -> None:
        self.d = d
        self.parts: list[str] = []
        self.params: dict[str, Any] = {}

    def eq(self, column: str, name: str, value: Any) -> None:
        self.add(f"{column} = {self.d.param(name)}", name, value)

    def add(self, sql: str, name: str | None = None, value: Any = None) -> None:
        self.parts.append(sql)
        if name is not None:
            self.params[name] = value

    def done(self) -> Where:
        return (" AND ".join(self.parts) or "TRUE"), self.params


def jobs(
    d: Dialect,
    *,
    namespace: str | None,
    task: str | None,
    name_prefix: str | None,
    after_id: int,
    state: str | None = None,
) -> Where:
    """Jobs after ``after_id`` (keyset paging by id) matching every given filter."""
    c = _Clause(d)
    c.add(f"id > {d.param('after_id')}", "after_id", after_id)
    if namespace is not None:
        c.eq("namespace", "namespace", namespace)
    if state is not None and state in _JOB_STATES:
        c.add(_JOB_STATES[state])
    if task is not None:
        c.eq("task", "task", task)
    if name_prefix:
        c.add(d.starts_with("name", "prefix"), "prefix", name_prefix)
    return c.done()


def firings(
    d: Dialect,
    *,
    job_id: int | None = None,
    namespace: str | None = None,
    job_name: str | None = None,
    states: Sequence[FiringState] | None = None,
    scheduled_from: datetime | None = None,
    scheduled_to: datetime | None = None,
    before_id: int | None = None,
    after_id: int | None = None,
) -> Where:
    """Firings between ``after_id`` and ``before_id`` (keyset paging, newest first)
    matching every filter."""
    c = _Clause(d)
    if job_id is not None:
        c.eq("job_id", "job_id", job_id)
    if namespace is not None:
        c.eq("namespace", "namespace", namespace)
    if job_name is not None:
        c.eq("job_name", "job_name", job_name)
    if states:
        c.add(d.in_list("state", "states"), "states", d.text_list([s.value for s in states]))
        if {s.value for s in states} <= ACTIVE:  # the walk of firings_active, not of history
            c.add(_ACTIVE_SQL)
    if scheduled_from is not None:
        c.add(f"scheduled_for >= {d.param('from')}", "from", d.instant(scheduled_from))
    if scheduled_to is not None:
        c.add(f"scheduled_for < {d.param('to')}", "to", d.instant(scheduled_to))
    if before_id is not None:
        c.add(f"id < {d.param('before_id')}", "before_id", before_id)
    if after_id is not None:
        c.add(f"id > {d.param('after_id')}", "after_id", after_id)
    return c.done()
