"""The held firings' starter (worker/starts.py): batching and the lead of a start."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from cronwheel.domain.clock import FakeClock
from cronwheel.domain.models import FiringId
from cronwheel.worker.starts import FIRST_LEAD_S, MAX_LEAD_S, Starter


class _Store:
    """A start call that takes ``round_trip`` seconds of the fake clock."""

    def __init__(self, clock: FakeClock, round_trip: float, refused: set[int]) -> None:
        self.clock, self.round_trip, self.refused = clock, round_trip, refused
        self.calls: list[list[int]] = []

    async def __call__(self, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        self.calls.append([fid for fid, _ in claims])
        self.clock.advance(timedelta(seconds=self.round_trip))
        return {fid for fid, _ in claims if fid not in self.refused}


def _claim(fid: int):  # type: ignore[no-untyped-def]
    class _F:
        id = FiringId(fid)

    class _C:
        firing = _F()
        claim_token = f"tok-{fid}"

    return _C()


def test_the_lead_covers_recent_round_trips_and_is_capped() -> None:
    clock = FakeClock(datetime(2026, 3, 1, tzinfo=UTC))
    store = _Store(clock, round_trip=0.004, refused={3})
    starter = Starter(store, clock.monotonic)
    assert starter.lead_s == FIRST_LEAD_S  # nothing measured yet: a commit's usual time

    async def go() -> list[bool]:
        return list(
            await asyncio.gather(*(starter.start(_claim(i)) for i in (1, 2, 3)))  # type: ignore[arg-type]
        )

    assert asyncio.run(go()) == [True, True, False]  # 3 was cancelled: never started
    assert store.calls == [[1, 2, 3]]  # requested in one turn: one call
    assert abs(starter.lead_s - 0.006) < 1e-9  # the slowest recent round trip, x 1.5
    store.round_trip = 1.0  # a stalled store does not make starts run far ahead
    asyncio.run(go())
    assert starter.lead_s == MAX_LEAD_S
