"""The leader's retention pass (domain/retention.py; DispatcherConfig's
``retention_interval``, 0 for none): started every ``interval``, one
batch of ``prune_history`` per dispatcher step, a ``pause`` between batches, so that
a pass over a day of history never holds up an enqueue or a claim for long."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from cronwheel.dispatch.events import DispatchEvents
from cronwheel.store.protocol import DispatchPort


class RetentionPass:
    def __init__(self, store: DispatchPort, interval: timedelta, pause: timedelta) -> None:
        self.store = store
        self.interval = interval.total_seconds()  # 0: never
        self.pause = pause.total_seconds()
        self.next_at = 0.0  # monotonic: the first pass starts with the first term
        self.cursor: tuple[datetime, int] | None = None

    def due_at(self) -> float:
        return self.next_at if self.interval else math.inf

    def step(self, mono: float, now_mono: float, events: DispatchEvents) -> int:
        """The next batch when one is due at ``mono`` (``now_mono``: the clock after the
        check), reported to ``events``; the firings it deleted."""
        if not self.interval or mono < self.next_at:
            return 0
        report = self.store.prune_history(max_batches=1, cursor=self.cursor)
        self.cursor = report.cursor
        self.next_at = now_mono + (self.interval if report.done else self.pause)
        if report.deleted or report.jobs:
            events.pruned(report)
        return report.deleted
