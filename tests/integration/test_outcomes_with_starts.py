"""The outcomes of finished handlers ride with the starts of the held firings that take
their slots (``complete_and_start``: one transaction), and are never lost or sent twice.

During a crowd at its instant, every freed slot starts a held firing. The outcome of the
handler that freed it used to be written by the flush loop, in a transaction of its
own that waited with the starts for SQLite's writer lock (worker/outcomes.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import FiringId
from cronwheel.errors import StoreUnavailableError
from cronwheel.store.protocol import Completion
from tests.integration.conftest import Rig
from tests.integration.test_policies import _crowd, _run_until

S = timedelta(seconds=1)
N = 12


class Writes:
    """The rig's store, counting the outcomes each call wrote; ``fail_carry`` makes the
    first start call that carries outcomes fail as an unavailable store does."""

    def __init__(self, store: Any, *, fail_carry: bool = False) -> None:
        self._store = store
        self.fail_carry = fail_carry
        self.refused = 0
        self.sent: dict[str, int] = {"start": 0, "claim": 0, "flush": 0}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def complete(self, completions: Sequence[Completion]) -> list[bool]:
        accepted: list[bool] = self._store.complete(completions)
        self.sent["flush"] += sum(accepted)
        return accepted

    def complete_and_claim(self, completions: Sequence[Completion], *a: Any, **k: Any) -> Any:
        accepted, claims = self._store.complete_and_claim(completions, *a, **k)
        self.sent["claim"] += sum(accepted)
        return accepted, claims

    def complete_and_start(
        self,
        completions: Sequence[Completion],
        worker_id: str,
        claims: Sequence[tuple[FiringId, str]],
        **at: Any,  # ready, not_before
    ) -> tuple[list[bool], set[FiringId]]:
        if completions and self.fail_carry:
            self.fail_carry = False
            self.refused += len(completions)
            raise StoreUnavailableError("injected: the store did not answer")
        accepted, started = self._store.complete_and_start(completions, worker_id, claims, **at)
        self.sent["start"] += sum(accepted)
        return accepted, started


def _crowd_runs(rig: Rig, writes: Writes) -> None:
    started: list[int] = []

    @rig.app.task
    def crowded(ctx: Any) -> None:
        started.append(ctx.firing_id)

    due = rig.clock.now() + 2 * S
    _crowd(rig, N, due)
    w = rig.worker(concurrency=4, prefetch=3 * S, early_claims=20)
    w.store = writes

    def succeeded() -> int:
        return len(rig.store.list_firings(states=[FiringState.SUCCEEDED], limit=100))

    def check() -> None:
        held = rig.store.list_firings(states=[FiringState.CLAIMED], limit=100)
        if len(held) == N and rig.clock.now() < due:
            rig.clock.advance(2 * S)  # the crowd's instant, once it is all held

    _run_until(rig, w, lambda: succeeded() == N, check)
    assert succeeded() == N
    assert sorted(started) == sorted(set(started)) and len(started) == N  # each ran once


def test_outcomes_ride_with_the_starts_of_the_firings_taking_their_slots(rig: Rig) -> None:
    writes = Writes(rig.store)
    _crowd_runs(rig, writes)
    # with 4 slots for 12 firings, the outcomes of at least the first handlers to finish
    # went with the starts of the firings that took their slots
    assert writes.sent["start"] >= 1
    assert sum(writes.sent.values()) == N  # every outcome written once


def test_outcomes_of_a_failed_start_are_given_back_and_written(rig: Rig) -> None:
    writes = Writes(rig.store, fail_carry=True)
    _crowd_runs(rig, writes)
    assert writes.refused >= 1 and not writes.fail_carry  # the failure happened
    assert sum(writes.sent.values()) == N  # nothing lost, nothing written twice
