"""Hooks around a worker's claims and attempts: the seam tracing plugs into.

The worker imports no tracing library. A worker given ``hooks`` (an
:class:`AttemptHooks`, such as ``observability.tracing.Tracing``) reports each claim
that took firings and brackets each attempt: :meth:`AttemptHooks.attempt_started` is
called on the event loop just before the handler is called and returns an
:class:`AttemptScope`, which is ended exactly once with the attempt's outcome. While
the scope is open, the context variables it set are the handler's:

- an async handler's task is created inside it (a task copies the current context);
- a sync handler runs on a handler thread inside a copy of it
  (``contextvars.copy_context().run``, only when hooks are given: without them a
  handler thread's context stays its own, at no cost);
- a process-isolated handler's child gets :meth:`AttemptScope.child_carrier` (a small
  dict of strings) and calls ``AttemptHooks.child_entry(carrier, call)`` around the
  handler (``child_entry`` is pickled by reference: a module-level function).

Without hooks (the default) none of this runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Literal, Protocol

from cronwheel.domain.models import ClaimedFiring
from cronwheel.worker.context import Context

# how an attempt ended: succeeded; failed (no retry left: dead) or retrying (another
# attempt follows); cancelled; interrupted (the worker itself stopped during it)
Outcome = Literal["succeeded", "failed", "retrying", "cancelled", "interrupted"]

# called in a process-isolated attempt's child: run ``call`` in the context ``carrier``
# describes (as AttemptScope.child_carrier gave it)
ChildEntry = Callable[[dict[str, str], Callable[[], None]], None]


class AttemptScope(Protocol):
    def child_carrier(self) -> dict[str, str]:
        """What a child process needs to continue this attempt's context."""
        ...

    def ended(
        self,
        outcome: Outcome,
        error: BaseException | None,
        error_text: str | None,
        retry_at: datetime | None,
    ) -> None:
        """The attempt is over (called once, on the loop, in the task that started it):
        ``error`` the exception that ended it (a child's is a ``HandlerError`` holding its
        traceback), ``error_text`` what is recorded for it."""
        ...


class AttemptHooks(Protocol):
    child_entry: ChildEntry | None

    def claimed(self, worker_id: str, claims: Sequence[ClaimedFiring], started_ns: int) -> None:
        """One claim that took ``claims`` (never empty), asked for at ``started_ns``
        (``time.time_ns()``) and returned now."""
        ...

    def attempt_started(
        self, claim: ClaimedFiring, ctx: Context, lateness_ms: float
    ) -> AttemptScope: ...
