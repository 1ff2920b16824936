"""The leader's retention pass timed a step at a time (``bench soak``'s
``pass_steps``)."""

from __future__ import annotations

import statistics
import time
from typing import Any

from cronwheel.store.protocol import Store


def pass_steps(store: Store, keep_days: float) -> dict[str, dict[str, float]]:
    """The leader's retention steps, timed one by one in this process, while the pass
    drops the next oldest day (``keep_for`` set to ``keep_days``: the pruning runs'
    last, less a day, or a quarter of the history): per kind of step (PostgreSQL's drop phases,
    ``drop_phase``; ``start``: a partition's facts and first chunk, or the walk's
    bounds; ``walk``: a batch of the batched pass), how many, the median and the
    longest in ms. No step may hold the leader near its lead (500 ms): the leader
    enqueues nothing during one."""
    pg: Any = store
    store.set_retention("default", {"keep_for": keep_days * 86400, "keep_last": 1})
    times: dict[str, list[float]] = {}
    cursor = None
    for _ in range(1_000_000):
        phase = pg.drop_phase() if hasattr(pg, "drop_phase") else None
        if phase is None:
            pending = cursor is None or (hasattr(pg, "drops_pending") and pg.drops_pending())
            phase = "start" if pending else "walk"
        started = time.perf_counter()
        report = store.prune_history(max_batches=1, cursor=cursor)
        times.setdefault(phase, []).append((time.perf_counter() - started) * 1000)
        cursor = report.cursor
        if report.done:
            break
    return {
        phase: {
            "steps": len(ms),
            "p50_ms": round(statistics.median(ms), 1),
            "max_ms": round(max(ms), 1),
        }
        for phase, ms in times.items()
    }
