"""PostgreSQL: creating a job holds no row that every other creation waits for
(schema.sql migration_20, store/postgres/jobs_quota.py). The jobs quota is counted in
shards that a creation takes without waiting (SKIP LOCKED), waits for one of when all
are held, and only locks all of when no shard has room; the job set's version is a row
per change, folded into meta. What the counters promise stays: never past the limit
under concurrent creations, deletions give room back, the version grows with every
committed change and with nothing else."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from cronwheel.errors import QuotaExceededError
from cronwheel.store.postgres import jobs_quota
from tests.contract.conftest import Harness, spec
from tests.contract.pg_harness import PG_URL, await_a_lock_wait, postgres_harness

NS = "shards"
WAIT_S = 20.0  # a bound for what must happen, never a pause


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


def _session(h: Harness) -> psycopg.Connection[Any]:
    """A connection of its own to the store's schema (another process's transaction)."""
    store: Any = h.store
    conn = psycopg.connect(PG_URL)
    conn.execute(f'SET search_path TO "{store.schema}"')
    return conn


def _shards(h: Harness) -> list[tuple[int, int, int]]:
    store: Any = h.store
    rows = store.db.read(
        lambda tx: tx.conn.execute(
            "SELECT shard, used, room FROM quota_jobs WHERE namespace = %s ORDER BY shard",
            (NS,),
        ).fetchall()
    )
    return [(int(r["shard"]), int(r["used"]), int(r["room"])) for r in rows]


def _create_in_thread(h: Harness, name: str) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []
    store = h.open_another()

    def run() -> None:
        try:
            store.create_job(spec(name, namespace=NS), first_fire_at=h.now())
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def test_a_creation_takes_a_free_shard_and_waits_only_when_every_shard_is_held(
    h: Harness,
) -> None:
    h.store.create_job(spec("first", namespace=NS), first_fire_at=h.now())  # makes the shards
    shards = _shards(h)
    assert len(shards) == jobs_quota.SHARDS
    assert sum(u for _, u, _ in shards) == 1
    with _session(h) as holder:
        # another transaction holds every shard but the last (as concurrent creations do)
        holder.execute(
            "SELECT 1 FROM quota_jobs WHERE namespace = %s AND shard < %s FOR UPDATE",
            (NS, jobs_quota.SHARDS - 1),
        )
        thread, errors = _create_in_thread(h, "beside")
        thread.join(WAIT_S)
        assert not thread.is_alive() and not errors  # done while the others are held
        # now every shard is held: a creation waits for them (the slow path's lock)
        holder.execute("SELECT 1 FROM quota_jobs WHERE namespace = %s FOR UPDATE", (NS,))
        thread, errors = _create_in_thread(h, "after")
        await_a_lock_wait()
        assert thread.is_alive()
        holder.rollback()
    thread.join(WAIT_S)
    assert not thread.is_alive() and not errors
    assert sorted(j.name for j in h.store.list_jobs(namespace=NS)) == ["after", "beside", "first"]


def test_a_creation_that_finds_every_shard_held_waits_for_one_not_for_them_all(
    h: Harness,
) -> None:
    """Under a steady load every shard can be held at once; a creation then waits for
    one shard and takes its room there, as if it had been free. (Taking the slow path
    instead, it locked every shard, so the next creations found them all held too: they
    ran one at a time.)"""
    h.store.create_job(spec("first", namespace=NS), first_fire_at=h.now())
    with _session(h) as setup:  # shard 3 has counted ten jobs more than the others
        setup.execute(
            "UPDATE quota_jobs SET used = used + 10, room = room - 10"
            " WHERE namespace = %s AND shard = 3",
            (NS,),
        )
        setup.commit()
    before = _shards(h)
    with _session(h) as holder:
        holder.execute("SELECT 1 FROM quota_jobs WHERE namespace = %s FOR UPDATE", (NS,))
        thread, errors = _create_in_thread(h, "waited")
        await_a_lock_wait()
        holder.rollback()
    thread.join(WAIT_S)
    assert not thread.is_alive() and not errors
    after = _shards(h)
    changed = [(b, a) for b, a in zip(before, after, strict=True) if a != b]
    assert len(changed) == 1  # one shard took it; the room was not shared out again
    (shard, used, room), (_, used_after, room_after) = changed[0]
    assert (used_after, room_after) == (used + 1, room - 1), shard


def test_concurrent_creations_never_pass_the_limit(h: Harness) -> None:
    limit = 23
    h.store.set_quota(NS, {"jobs": limit})
    made: list[str] = []
    refused: list[str] = []
    lock = threading.Lock()

    def creator(k: int) -> None:
        store = h.open_another()
        for i in range(8):
            name = f"c{k}-{i}"
            try:
                store.create_job(spec(name, namespace=NS), first_fire_at=h.now())
                outcome = made
            except QuotaExceededError:
                outcome = refused
            with lock:
                outcome.append(name)

    threads = [threading.Thread(target=creator, args=(k,), daemon=True) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert len(made) == limit and len(refused) == 6 * 8 - limit
    assert sorted(j.name for j in h.store.list_jobs(namespace=NS, limit=100)) == sorted(made)
    shards = _shards(h)
    assert sum(u for _, u, _ in shards) == limit and all(r == 0 for _, _, r in shards)
    assert h.store.status(namespace=NS).jobs == limit


def test_deletions_and_a_new_limit_share_the_room_out_again(h: Harness) -> None:
    h.store.set_quota(NS, {"jobs": 10})
    h.store.create_jobs([(spec(f"j{i}", namespace=NS), h.now()) for i in range(10)])
    shards = _shards(h)
    assert sum(u for _, u, _ in shards) == 10 and sum(r for _, _, r in shards) == 0
    for i in range(4):
        h.store.delete_job(NS, f"j{i}")
    shards = _shards(h)
    assert sum(u for _, u, _ in shards) == 6 and sum(r for _, _, r in shards) == 4
    h.store.set_quota(NS, {"jobs": 7})  # lowered below what is free: one more fits
    shards = _shards(h)
    assert sum(r for _, _, r in shards) == 1
    assert all(r in (0, 1) for _, _, r in shards)  # shared out evenly
    h.store.create_job(spec("k0", namespace=NS), first_fire_at=h.now())
    with pytest.raises(QuotaExceededError):
        h.store.create_job(spec("k1", namespace=NS), first_fire_at=h.now())
    h.store.set_quota(NS, {"jobs": 5})  # below what is counted: nothing fits
    assert sum(r for _, _, r in _shards(h)) == 0
    with pytest.raises(QuotaExceededError):
        h.store.create_job(spec("k2", namespace=NS), first_fire_at=h.now())
    assert h.store.status(namespace=NS).jobs == 7


def test_the_version_grows_with_each_committed_change_and_folds_keep_it(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_quota, "FOLD_AT", 2)
    store: Any = h.store

    def pending() -> int:
        return int(store.db.read(lambda tx: tx.one("jobs_version"))["pending"])

    v0 = store.jobs_version()
    store.create_job(spec("a", namespace=NS), first_fire_at=h.now())
    assert store.jobs_version() == v0 + 1
    h.store.set_quota(NS, {"jobs": 1})
    with pytest.raises(QuotaExceededError):  # rolled back: not a change
        store.create_job(spec("b", namespace=NS), first_fire_at=h.now())
    assert store.jobs_version() == v0 + 1
    h.store.set_quota(NS, {"jobs": 10})
    for name in ("c", "d"):
        store.create_job(spec(name, namespace=NS), first_fire_at=h.now())
    assert pending() == 3
    assert store.jobs_version() == v0 + 3  # read, then folded into meta
    assert pending() == 0
    assert store.jobs_version() == v0 + 3
    store.set_paused(NS, "c", True)
    assert store.jobs_version() == v0 + 4
