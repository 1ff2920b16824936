"""The leader's retention pass (domain/retention.py; DispatcherConfig's
``retention_interval``, 0 for none): started every ``interval``, one
batch of ``prune_history`` per dispatcher step, a pause between batches of at least
``pause`` and at least nine times the batch's own duration, so that a pass over a day
of history never holds up an enqueue or a claim for long and takes at most a tenth of
the store's time."""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta

from cronwheel.dispatch.events import DispatchEvents
from cronwheel.store.protocol import DispatchPort

DUTY = 9  # pause / batch time


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
        started = time.monotonic()
        report = self.store.prune_history(max_batches=1, cursor=self.cursor)
        took = time.monotonic() - started
        self.cursor = report.cursor
        # between batches, at least DUTY times the batch's own time: the pass takes at
        # most a tenth of the store's writer time, whatever a batch costs on this store
        pause = max(self.pause, took * DUTY)
        self.next_at = now_mono + took + (self.interval if report.done else pause)
        if report.deleted or report.jobs:
            events.pruned(report)
        return report.deleted
