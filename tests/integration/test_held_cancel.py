"""A held firing cancelled before its instant: the worker lets it go as a cancel, never
as a lost claim (the zombie alarm: ``claim_lost``, ``cronwheel_worker_claims_lost``).

The fault suite's cancellation race logged 33 ``claim_lost`` warnings in a run with no
fault at all: each was a user's cancel of a firing its worker held.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cronwheel.domain.firing import FiringState
from cronwheel.web.ids import ids_for
from tests.integration.conftest import Rig
from tests.integration.test_events import Recorder
from tests.integration.test_policies import _crowd, _run_until

S = timedelta(seconds=1)


def test_a_held_firing_cancelled_is_not_a_lost_claim(rig: Rig) -> None:
    started: list[int] = []

    @rig.app.task
    def crowded(ctx: Any) -> None:
        started.append(ctx.firing_id)

    due = rig.clock.now() + timedelta(seconds=2)
    _crowd(rig, 3, due)
    sink = Recorder()
    # heartbeats every 20 ms of real time (the fake clock does not move by itself)
    w = rig.worker(
        events=sink, concurrency=4, prefetch=timedelta(seconds=3), heartbeat_interval=0.02 * S
    )
    cancelled: list[int] = []
    beats_after: list[int] = []

    def check() -> None:
        held = rig.store.list_firings(states=[FiringState.CLAIMED], limit=10)
        if not cancelled and len(held) == 3:
            result = rig.store.cancel_firing(held[0].id)
            assert result.outcome == "cancelled"
            cancelled.append(held[0].id)
            beats_after.append(len(sink.named("claims_renewed")))
        elif (
            cancelled
            and len(sink.named("claims_renewed")) >= beats_after[0] + 3
            and rig.clock.now() < due
        ):
            rig.clock.advance(timedelta(seconds=2))  # polled since the cancel: the instant

    _run_until(rig, w, lambda: len(started) == 2, check)
    shown = ids_for(rig.store)  # a handler sees the ids users see
    assert sorted(started) == sorted(
        shown.encode("firing", f.id)
        for f in rig.store.list_firings(limit=10)
        if f.id not in cancelled
    )
    assert rig.store.get_firing(cancelled[0]).state is FiringState.CANCELLED
    assert not sink.named("claim_lost") and w.stats.lost_claims == 0
    assert not sink.named("completion_rejected")
