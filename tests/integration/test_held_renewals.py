"""A crowd held ahead of its instant is renewed when each claim's renewal is due (a third
of its visibility timeout after it was taken), not at every heartbeat.

At every beat the heartbeat used to rewrite every claim the worker held. A herd of 10,000
one-shots held ahead of its instant by two workers was 5,000 rows a worker, locked and
rewritten every 2 s, and at the instant the starts of those same rows waited for those
locks (`Lock:transactionid` on PostgreSQL): the last start came 5.9-10.9 s after the
instant, 3.7 s with this rule (docs/benchmarks.md).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import JobPolicies
from tests.integration.conftest import Rig
from tests.integration.test_events import Recorder
from tests.integration.test_policies import _crowd, _run_until

S = timedelta(seconds=1)


def _held(rig: Rig) -> dict[int, datetime | None]:
    return {
        f.id: f.lease_until for f in rig.store.list_firings(states=[FiringState.CLAIMED], limit=10)
    }


def test_a_held_crowd_is_renewed_when_due_not_at_every_beat(rig: Rig) -> None:
    started: list[int] = []

    @rig.app.task
    def crowded(ctx: Any) -> None:
        started.append(ctx.firing_id)

    # visibility timeout 3 s: each held claim's renewal is due 1 s after it was taken
    _crowd(rig, 3, rig.clock.now() + 2.5 * S, JobPolicies(visibility_timeout=3 * S))
    sink = Recorder()
    # heartbeats every 20 ms of real time (the fake clock moves only when told)
    w = rig.worker(
        events=sink, concurrency=4, prefetch=3 * S, heartbeat_interval=0.02 * S, early_claims=10
    )
    seen: dict[str, Any] = {}

    def renewals() -> list[int]:
        return [args[0] for args, _ in sink.named("claims_renewed")]

    def check() -> None:
        held, beats = _held(rig), renewals()
        if "taken" not in seen:
            if len(held) == 3:
                seen["taken"], seen["from"] = held, len(beats)
        elif "idle" not in seen:
            if len(beats) >= seen["from"] + 5:
                # five beats while the crowd waits, no renewal due: no row rewritten
                seen["idle"] = (held, beats[seen["from"] :])
                rig.clock.advance(1.2 * S)  # past each renewal point, before the instant
                seen["from"] = len(beats)
        elif "renewed" not in seen and len(beats) >= seen["from"] + 3:
            seen["renewed"] = (held, beats[seen["from"] :])
            rig.clock.advance(2 * S)  # the instant
        # (then the crowd starts and runs)

    _run_until(rig, w, lambda: len(started) == 3, check)
    taken = seen["taken"]
    idle_leases, idle_counts = seen["idle"]
    assert idle_leases == taken
    assert set(idle_counts) == {0}
    renewed_leases, renewed_counts = seen["renewed"]
    assert set(renewed_leases) == set(taken)
    assert all(renewed_leases[i] > taken[i] for i in taken)  # type: ignore[operator]
    assert 3 in renewed_counts  # all three in one beat, the first past their renewal point
    assert not sink.named("claim_lost") and w.stats.lost_claims == 0
