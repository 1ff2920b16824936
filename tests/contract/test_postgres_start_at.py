"""PostgreSQL: a held firing's start waits for its instant on the server's clock
(claims.sql ``start_at``, schema.sql migration_28; WorkerPort.waits_for_instant): never
written before the instant, the wait capped at 5 ms, none on a pinned clock.

The server's real clock here (the harness's frozen time is lifted): the point is the
wait on it. Bounds are loose: they hold on a loaded 2-core machine.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from cronwheel.domain.models import ClaimedFiring, FiringState
from cronwheel.domain.schedules import now as now_schedule
from cronwheel.store.postgres import PostgresStore
from tests.contract.conftest import spec
from tests.contract.pg_harness import postgres_harness

MS = timedelta(milliseconds=1)


@pytest.fixture
def store(tmp_path: Any) -> Iterator[PostgresStore]:
    for h in postgres_harness(tmp_path):
        assert isinstance(h.store, PostgresStore)
        yield h.store


def _held(store: PostgresStore, name: str) -> ClaimedFiring:
    store.enqueue_now(spec(name, schedule=now_schedule(), task="t"))
    (claim,) = store.claim("w", tasks=["t"], limit=1, start=0)
    assert claim.firing.state is FiringState.CLAIMED
    return claim


def test_the_start_is_written_at_the_instant_not_before(store: PostgresStore) -> None:
    store.db.time.frozen_at = None  # the server's clock
    assert store.waits_for_instant
    for i in range(5):
        claim = _held(store, f"j{i}")
        at = store.now() + 3 * MS
        _, started = store.complete_and_start(
            [], "w", [(claim.firing.id, claim.claim_token)], not_before=at
        )
        assert started == {claim.firing.id}
        f = store.get_firing(claim.firing.id)
        assert f.state is FiringState.RUNNING and f.started_at is not None
        assert at <= f.started_at < at + timedelta(seconds=1)


def test_a_ready_wait_comes_before_the_server_wait(store: PostgresStore) -> None:
    """With ``ready`` the start's path runs first on no firing (it writes nothing), then
    ``ready``, then the start, which the server holds until the instant."""
    store.db.time.frozen_at = None
    claim = _held(store, "j")
    seen: list[FiringState] = []
    at = store.now() + 3 * MS  # within the server's cap of 5 ms after the call

    def ready() -> None:
        seen.append(store.get_firing(claim.firing.id).state)

    _, started = store.complete_and_start(
        [], "w", [(claim.firing.id, claim.claim_token)], ready=ready, not_before=at
    )
    assert seen == [FiringState.CLAIMED] and started == {claim.firing.id}
    f = store.get_firing(claim.firing.id)
    assert f.started_at is not None and f.started_at >= at


def test_the_servers_wait_is_capped(store: PostgresStore) -> None:
    """A worker whose estimate of the store's clock is far ahead does not hold the
    statement: at most 5 ms, then the start is written."""
    store.db.time.frozen_at = None
    claim = _held(store, "j")
    before = store.now()
    at = before + timedelta(seconds=30)
    began = time.monotonic()
    _, started = store.complete_and_start(
        [], "w", [(claim.firing.id, claim.claim_token)], not_before=at
    )
    assert time.monotonic() - began < 2.0  # far under 30 s
    assert started == {claim.firing.id}
    f = store.get_firing(claim.firing.id)
    assert f.started_at is not None and before + 5 * MS <= f.started_at < at


def test_no_wait_on_a_pinned_clock(store: PostgresStore) -> None:
    pinned = store.db.time.frozen_at
    assert pinned is not None  # the harness's frozen time
    claim = _held(store, "j")
    began = time.monotonic()
    _, started = store.complete_and_start(
        [], "w", [(claim.firing.id, claim.claim_token)], not_before=pinned + timedelta(hours=1)
    )
    assert time.monotonic() - began < 2.0 and started == {claim.firing.id}
    assert store.get_firing(claim.firing.id).started_at == pinned


def test_a_firing_cancelled_before_its_start_at_never_starts(store: PostgresStore) -> None:
    store.db.time.frozen_at = None
    claim = _held(store, "j")
    assert store.cancel_firing(claim.firing.id).outcome == "cancelled"
    _, started = store.complete_and_start(
        [], "w", [(claim.firing.id, claim.claim_token)], not_before=store.now() + MS
    )
    assert started == set()
    assert store.get_firing(claim.firing.id).state is FiringState.CANCELLED
