"""``cronwheel status``: held (CLAIMED) firings are counted as waiting, not as outcomes."""

from __future__ import annotations

from datetime import UTC, datetime

from cronwheel.cli.render import status_dict
from cronwheel.store.protocol import StoreStatus

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_claimed_firings_are_counted_now_not_in_the_last_hour() -> None:
    counts = {"queued": 3, "claimed": 40, "running": 2, "succeeded": 7, "cancelled": 1}
    status = StoreStatus(
        now=T0,
        lease=None,
        counts=counts,
        jobs=5,
        paused_jobs=0,
        oldest_queued_due_at=None,
        nodes=[],
        lateness_ms=[],
    )
    doc = status_dict(status)
    assert (doc["queue_depth"], doc["claimed"], doc["running"]) == (3, 40, 2)
    assert doc["last_hour"] == {"succeeded": 7, "cancelled": 1}
