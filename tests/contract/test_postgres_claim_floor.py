"""PostgreSQL: the claim's floor (schema.sql migration_29). Claims read only the day
partitions from ``firings_floor.at`` on; the rule that makes this safe is that every
unfinished firing (queued, claimed, running) is scheduled at or after the floor. Every
way a firing becomes unfinished below it (a catch-up of an old instant, an insert in a
caller's transaction, a re-drive) lowers the floor in its own transaction, and the
leader's raise never runs while one of them is in flight."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from cronwheel.bench.soak import succeeded
from cronwheel.domain.firing import FiringState
from tests.contract.conftest import Harness, spec
from tests.contract.pg_harness import PG_URL, postgres_harness
from tests.contract.test_postgres_partitions import _midnight, _sql
from tests.contract.test_store_contract import _fire

DAY = timedelta(days=1)
H = timedelta(hours=1)
UNFINISHED = ("queued", "claimed", "running")


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


def _oldest_unfinished(store: Any) -> datetime | None:
    (row,) = _sql(
        store,
        "SELECT min(scheduled_for) AS at FROM firings WHERE state = ANY (%s)",
        list(UNFINISHED),
    )
    return row["at"]


def _assert_rule(store: Any) -> None:
    oldest = _oldest_unfinished(store)
    floor = store.claim_floor()
    assert oldest is None or floor is None or floor <= oldest, (floor, oldest)


def _raised(store: Any) -> datetime | None:
    """The leader's raise (which must run), then the floor it left."""
    assert store.raise_floor()
    return store.claim_floor()


def _claim_all(h: Harness, task: str = "t") -> list[Any]:
    return h.store.claim("w-floor", tasks=[task], limit=100)


def _complete(
    h: Harness, claims: list[Any], failed: frozenset[int] | set[int] = frozenset()
) -> None:
    """Their outcomes: succeeded, but those whose firing ids are in ``failed``."""
    at = h.store.now()
    h.store.complete(
        [replace(succeeded(c, at), succeeded=c.firing.id not in failed) for c in claims]
    )


def _insert_sql(at: datetime) -> tuple[str, tuple[Any, ...]]:
    """An insert of one QUEUED firing at ``at`` (a copy of a firing of the same job), as
    a caller's own statement would write it."""
    return (
        "INSERT INTO firings (job_id, namespace, job_name, task, payload, scheduled_for, "
        "due_at, vdeadline, state, max_attempts, priority, visibility_us, enqueued_at, shard) "
        "SELECT job_id, namespace, job_name, task, payload, %s, %s, %s, 'queued', "
        "max_attempts, priority, visibility_us, enqueued_at, shard FROM firings "
        "ORDER BY id LIMIT 1 RETURNING id",
        (at, at, at),
    )


def test_a_new_store_starts_with_todays_floor_which_the_leaders_pass_keeps(h: Harness) -> None:
    store: Any = h.store
    assert store.claim_floor() == _midnight(h.now())  # the migration's
    store.maintain_partitions()
    assert store.claim_floor() == _midnight(h.now())


def test_a_catch_up_below_the_floor_lowers_it_and_is_claimed(h: Harness) -> None:
    store: Any = h.store
    store.maintain_partitions()
    job = store.create_job(spec("late"), first_fire_at=h.now() - 10 * DAY)
    old = _midnight(h.now()) - 10 * DAY + H
    (fid,) = _fire(h, job, old).inserted  # its day's partition made on the insert
    assert store.claim_floor() == old
    (claim,) = _claim_all(h)
    assert claim.firing.id == fid
    # claimed, it is still unfinished: the raise keeps its day
    assert _raised(store) == _midnight(old)
    _complete(h, [claim])
    assert _raised(store) == _midnight(h.now())
    _assert_rule(store)


def test_the_floor_rises_to_the_oldest_day_holding_an_unfinished_firing(h: Harness) -> None:
    store: Any = h.store
    job = store.create_job(spec("hourly"), first_fire_at=h.now() - 10 * DAY)
    start = _midnight(h.now()) - 10 * DAY
    store.load_history(first_job=job.id, jobs=1, start=start, step=H, count=3 * 24)
    (five,) = _fire(h, job, start + 5 * DAY + H).inserted
    other = store.create_job(spec("other"), first_fire_at=h.now() - 10 * DAY)
    (two,) = _fire(h, other, start + 8 * DAY + H).inserted  # a job of its own (its cap)
    # days 10..8 ago hold finished firings only: read by no claim
    assert _raised(store) == start + 5 * DAY
    claims = _claim_all(h)
    assert {c.firing.id for c in claims} == {five, two}
    _complete(h, [c for c in claims if c.firing.id == five])
    assert _raised(store) == start + 8 * DAY
    _complete(h, [c for c in claims if c.firing.id == two])
    assert _raised(store) == _midnight(h.now())


def test_a_redrive_below_the_floor_lowers_it_and_is_claimed(h: Harness) -> None:
    store: Any = h.store
    job = store.create_job(spec("hourly"), first_fire_at=h.now() - 4 * DAY)
    start = _midnight(h.now()) - 4 * DAY
    # 200 finished over 66 hours, from 4 days ago: one in a hundred DEAD
    store.load_history(first_job=job.id, jobs=1, start=start, step=H / 3, count=200)
    assert _raised(store) == _midnight(h.now())
    (dead,) = _sql(store, "SELECT id, scheduled_for FROM firings WHERE state = 'dead' LIMIT 1")
    store.redrive_firing(dead["id"])
    assert store.claim_floor() == dead["scheduled_for"]
    (claim,) = _claim_all(h)
    assert claim.firing.id == dead["id"]


def test_the_raise_passes_its_turn_while_an_insert_is_in_flight(h: Harness) -> None:
    store: Any = h.store
    job = store.create_job(spec("hourly"), first_fire_at=h.now() - 3 * DAY)
    old = _midnight(h.now()) - 3 * DAY
    store.load_history(first_job=job.id, jobs=1, start=old, step=H, count=2)
    assert _raised(store) == _midnight(h.now())
    with psycopg.connect(PG_URL, autocommit=True) as other:
        other.execute(f'SET search_path TO "{store.schema}"')
        with other.transaction():
            text, args = _insert_sql(old + 30 * timedelta(minutes=1))
            (fid,) = other.execute(text, args).fetchone()  # type: ignore[misc]
            # the caller's transaction is open: its firing is not seen yet, and the
            # raise, which would not see it, does not run
            assert not store.raise_floor()
            assert store.claim_floor() == _midnight(h.now())
        # committed: the floor it lowered with it is seen with it
        assert store.claim_floor() == old + 30 * timedelta(minutes=1)
    (claim,) = _claim_all(h)
    assert claim.firing.id == fid
    assert _raised(store) == old


def test_a_raise_waits_for_no_writer_and_an_insert_after_it_reads_its_floor(h: Harness) -> None:
    """The raise's lock held by a transaction (as the raise holds it): an insert below
    the floor waits for it, then lowers the floor it committed."""
    store: Any = h.store
    job = store.create_job(spec("hourly"), first_fire_at=h.now() - 3 * DAY)
    old = _midnight(h.now()) - 3 * DAY
    store.load_history(first_job=job.id, jobs=1, start=old, step=H, count=2)
    with psycopg.connect(PG_URL, autocommit=True) as leader:
        leader.execute(f'SET search_path TO "{store.schema}"')
        with leader.transaction():
            (at,) = leader.execute("SELECT cronwheel_raise_floor(now())").fetchone()  # type: ignore[misc]
            assert at == _midnight(datetime.now(UTC))
            with psycopg.connect(PG_URL, autocommit=True) as writer:
                writer.execute(f'SET search_path TO "{store.schema}"')
                writer.execute("SET lock_timeout = '200ms'")
                text, args = _insert_sql(old + H / 2)
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    writer.execute(text, args)  # waits for the raise's commit
        # the raise committed: the insert goes through and lowers its floor
        with psycopg.connect(PG_URL, autocommit=True) as writer:
            writer.execute(f'SET search_path TO "{store.schema}"')
            text, args = _insert_sql(old + H / 2)
            writer.execute(text, args)
    assert store.claim_floor() == old + H / 2


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_histories_keep_every_unfinished_firing_at_or_above_the_floor(
    h: Harness, seed: int
) -> None:
    """Inserts at instants from 6 days ago to tomorrow, claims, completions, failures,
    re-drives and raises in a random order: after each, every unfinished firing is at or
    above the floor, and every queued firing that is due is claimable."""
    rng = random.Random(seed)
    store: Any = h.store
    job = store.create_job(spec("any", max_attempts=1), first_fire_at=h.now() - 7 * DAY)
    today = _midnight(h.now())
    store.load_history(first_job=job.id, jobs=1, start=today - 7 * DAY, step=H, count=4)
    used: set[datetime] = set()
    held: list[Any] = []
    for _ in range(40):
        op = rng.choice(["insert", "insert", "claim", "finish", "redrive", "raise", "raise"])
        if op == "insert":
            at = today + rng.randint(-6 * 24, 24) * H + timedelta(seconds=rng.randint(1, 3599))
            if at in used:
                continue
            used.add(at)
            _sql(store, "SELECT cronwheel_firings_partition(%s)", at)
            text, args = _insert_sql(at)
            store.db.write(lambda tx, t=text, a=args: tx.conn.execute(t, a).fetchall())
        elif op == "claim":
            held += _claim_all(h)
        elif op == "finish" and held:
            k = rng.randint(1, len(held))
            done, held = held[:k], held[k:]
            _complete(h, done, {c.firing.id for c in done if rng.random() < 0.5})
        elif op == "redrive":
            dead = _sql(store, "SELECT id FROM firings WHERE state = 'dead'")
            if dead:
                store.redrive_firing(rng.choice(dead)["id"])
        else:
            store.raise_floor()
        _assert_rule(store)
    # whatever is queued and due is claimed, one at a time (one job: its cap), none
    # hidden below the floor
    _complete(h, held)
    due = {
        r["id"]
        for r in _sql(
            store, "SELECT id FROM firings WHERE state = 'queued' AND due_at <= %s", store.now()
        )
    }
    claimed: set[int] = set()
    for _ in range(len(due) + 1):
        claims = _claim_all(h)
        claimed |= {c.firing.id for c in claims}
        _complete(h, claims)
    assert due <= claimed
    assert all(store.get_firing(i).state is FiringState.SUCCEEDED for i in due)
