"""The error tree of cronwheel.

Every error a user can see derives from :class:`CronwheelError` and carries a
stable machine-readable ``code`` and, where one input is to blame, the ``field``
that names it (``schedule.cron``, ``tz``, ``args`` ...)::

    CronwheelError
    ├── ValidationError                    bad input: names the field and the reason
    │   ├── InvalidScheduleError           a cron expression, interval or instant that is wrong
    │   │   ├── UnknownTimezoneError       not an IANA zone name of the tz database
    │   │   ├── NoFiringInHorizonError     no firing within the search horizon (50 years)
    │   │   └── ScheduleBudgetError        a schedule computation exceeded its step budget
    ├── NotFoundError
    │   ├── JobNotFoundError
    │   ├── FiringNotFoundError
    │   └── TaskNotFoundError
    ├── ConflictError                      a unique name or idempotency key is taken
    ├── QuotaExceededError                 a namespace quota refuses the write (422 or 429)
    ├── PermissionDeniedError              the caller may not do this (403)
    ├── InvalidTransitionError             a firing state change the state machine forbids
    ├── BatchError                         an all-or-nothing batch refused: every item's error
    ├── StoreError                         the store failed in a way that is not transient
    │   └── StoreUnavailableError          transient: retry later (locked, connection lost)
    └── LeaseLostError                     a leader write was fenced out: step down now
"""

from __future__ import annotations


class CronwheelError(Exception):
    """Root of every cronwheel error."""

    code: str = "error"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        if self.field:
            return f"{self.field}: {self.message}"
        return self.message


class ValidationError(CronwheelError):
    code = "invalid_input"


class InvalidScheduleError(ValidationError):
    code = "invalid_schedule"


class UnknownTimezoneError(InvalidScheduleError):
    code = "unknown_timezone"


class NoFiringInHorizonError(InvalidScheduleError):
    """The schedule does not fire within the search horizon in its zone under its DST policy."""

    code = "no_firing_in_horizon"


class ScheduleBudgetError(InvalidScheduleError):
    """A schedule computation exceeded its hard bound on work (never reported as "no firing")."""

    code = "schedule_budget_exceeded"


class NotFoundError(CronwheelError):
    code = "not_found"


class JobNotFoundError(NotFoundError):
    code = "job_not_found"


class FiringNotFoundError(NotFoundError):
    code = "firing_not_found"


class TaskNotFoundError(NotFoundError):
    code = "task_not_found"


class ConflictError(CronwheelError):
    code = "conflict"


class QuotaExceededError(CronwheelError):
    """A write its namespace's quota refuses; nothing was written.

    ``quota`` names the quota (``jobs``, ``firings_per_minute``, ``min_interval``,
    ``backfill``, ``backfill_per_day``); ``retry_after`` is the number of seconds until
    the quota's window frees up (a rate), or None when waiting will not help (a
    count or a per-request bound: 422 rather than 429 over HTTP)."""

    code = "quota_exceeded"

    def __init__(
        self,
        message: str,
        *,
        quota: str,
        namespace: str | None = None,
        field: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message, field=field or f"quota.{quota}")
        self.quota = quota
        self.namespace = namespace
        self.retry_after = retry_after


class PermissionDeniedError(CronwheelError):
    """The caller's role does not allow this (a namespace raising its own quota)."""

    code = "forbidden"


class InvalidTransitionError(CronwheelError):
    code = "invalid_transition"


class BatchError(CronwheelError):
    """An all-or-nothing batch (``App.schedule_many``, ``POST /v1/jobs/batch`` ...) that
    was refused whole because some of its items were: nothing was written. ``errors``
    holds every refused item's ``(index, error)``, in order; each error's ``field`` is
    prefixed with its item (``items[3].schedule``), and so is this error's (the first's)."""

    code = "invalid_batch"

    def __init__(self, errors: list[tuple[int, CronwheelError]], total: int) -> None:
        assert errors, "a batch is refused for its items' errors"
        conflicts = all(isinstance(e, ConflictError) for _, e in errors)
        first = errors[0][1]
        super().__init__(
            f"{len(errors)} of {total} items refused, nothing was written (the first: {first})",
            field=first.field,
            code="batch_conflict" if conflicts else "invalid_batch",
        )
        self.errors = errors
        self.total = total
        self.conflicts = conflicts


class StoreError(CronwheelError):
    code = "store_error"


class StoreUnavailableError(StoreError):
    code = "store_unavailable"


class LeaseLostError(CronwheelError):
    code = "lease_lost"
