"""Control-flow signals a task handler may raise (imperatives, not errors).

- ``raise Retry(after=30)``: this attempt failed on purpose; try again after 30 s
  (counts as an attempt; after the last one the firing is DEAD).
- ``raise Cancel("why")``: stop now and record the firing CANCELLED — the way a
  handler honours ``ctx.cancel_requested``. (Async handlers are also cancelled
  with ``asyncio.CancelledError`` when a cancellation is requested.)
"""

from __future__ import annotations

from datetime import timedelta


class Retry(Exception):  # an imperative signal, not an error
    def __init__(self, after: timedelta | float | None = None, reason: str = "retry requested"):
        super().__init__(reason)
        self.after = timedelta(seconds=after) if isinstance(after, int | float) else after
        self.reason = reason


class Cancel(Exception):  # an imperative signal, not an error
    def __init__(self, reason: str = "cancelled by the handler") -> None:
        super().__init__(reason)
        self.reason = reason
