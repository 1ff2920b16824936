"""PostgreSQL: a claim token carries its firing's scheduled instant, the partition key
(schema.sql migration_18, params.token_instant), and the statements that find held
firings by (id, token) — start, heartbeat, completions — are planned for the day
partitions those instants name instead of for every partition. A token that carries
no instant (a claim made before migration 18) still works, through every partition;
one whose instant is wrong is refused like a wrong token."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from cronwheel.bench.soak import succeeded
from cronwheel.domain.models import ClaimedFiring
from cronwheel.store.postgres.params import claim_instants, complete_params, token_instant
from cronwheel.store.protocol import Completion
from tests.contract.conftest import Harness, spec
from tests.contract.pg_harness import postgres_harness
from tests.contract.test_store_contract import _fire

DAY = timedelta(days=1)
DAYS_BACK = 9


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


def _with_days(h: Harness) -> int:
    """Day partitions for the DAYS_BACK days before today (empty): the partitions a
    statement by id alone is planned for. Their number."""
    store: Any = h.store
    now = h.now()

    def make(tx: Any) -> None:
        for i in range(DAYS_BACK + 1):
            tx.one("partition_ensure", {"at": now - i * DAY})

    store.db.write(make, atomic=False)
    return len([p for p in store.partitions() if p[0].startswith("firings_p")])


def _partitions_read(h: Harness, name: str, params: dict[str, Any]) -> set[str]:
    """The partitions of firings that statement ``name`` read (an index or a table
    scan), run with ``params`` and rolled back (its own session's scan counters,
    flushed)."""
    store: Any = h.store
    counts = (
        "SELECT relname, coalesce(idx_scan, 0) + seq_scan AS n FROM pg_stat_user_tables"
        " WHERE schemaname = current_schema() AND relname LIKE 'firings%%'"
    )

    def body(tx: Any) -> set[str]:
        conn = tx.conn
        conn.execute("SELECT pg_stat_force_next_flush()")
        before = {r["relname"]: r["n"] for r in conn.execute(counts).fetchall()}
        with conn.transaction(force_rollback=True):
            conn.execute(store.db.q[name], store.db.params(params)).fetchall()
        conn.execute("SELECT pg_stat_force_next_flush()")
        after = {r["relname"]: r["n"] for r in conn.execute(counts).fetchall()}
        return {rel for rel, n in after.items() if n != before.get(rel)}

    return store.db.write(body, atomic=False)


def test_a_claim_token_carries_its_firings_instant(h: Harness) -> None:
    # the one-statement claim (claim_fast) and the planned one (a capped job), a firing
    # due today and one of a day partition days ago
    plain = h.store.create_job(spec("plain", task="a", overlap="allow"), first_fire_at=h.now())
    capped = h.store.create_job(
        spec("capped", task="b", max_concurrency=1, overlap="skip"), first_fire_at=h.now()
    )
    old = h.now().replace(microsecond=123456) - 3 * DAY
    _fire(h, plain, old, h.now())
    _fire(h, capped, h.now() - DAY)
    claims = h.store.claim("w", tasks=["a"], limit=2)
    claims += h.store.claim("w", tasks=["b"], limit=1)
    assert len(claims) == 3
    for c in claims:
        assert token_instant(c.claim_token) == c.firing.scheduled_for
    assert {token_instant(c.claim_token) for c in claims} >= {old}
    # each claim its own token
    assert len({c.claim_token for c in claims}) == 3


def test_held_firings_are_looked_for_in_their_own_partition(h: Harness) -> None:
    days = _with_days(h)
    assert days >= DAYS_BACK + 1
    job = h.store.create_job(spec("j"), first_fire_at=h.now())
    _fire(h, job, h.now() - 2 * DAY)
    (c,) = h.store.claim("w", tasks=["t"], limit=1, start=0)
    done = succeeded(c, h.now())
    instants = claim_instants([c.claim_token])
    assert instants == [c.firing.scheduled_for]
    cases = {
        "start": {"batch": f'[[{c.firing.id}, "{c.claim_token}"]]', "instants": instants},
        "heartbeat": {"ids": [c.firing.id], "tokens": [c.claim_token], "instants": instants},
        "complete_batch": complete_params([done]),
    }
    for name, params in cases.items():
        # named: only the firing's own day is read
        assert _partitions_read(h, name, params) == {f"firings_p{c.firing.scheduled_for:%Y%m%d}"}, (
            name
        )
        # a token without an instant: every partition, as before migration 18
        every = _partitions_read(h, name, {**params, "instants": None})
        assert len(every) >= days, (name, every)
    # and the statements do find it there
    assert h.store.start("w", [(c.firing.id, c.claim_token)]) == {c.firing.id}
    assert h.store.heartbeat("w", [(c.firing.id, c.claim_token)]) == set()
    assert h.store.complete([done]) == [True]


def test_a_token_with_a_wrong_instant_is_refused_and_a_token_without_one_accepted(
    h: Harness,
) -> None:
    job = h.store.create_job(spec("j", overlap="allow"), first_fire_at=h.now())
    _fire(h, job, h.now() - DAY, h.now())
    first, second = h.store.claim("w", tasks=["t"], limit=2)
    at = h.now()

    def done(c: ClaimedFiring, token: str) -> Completion:
        return replace(succeeded(c, at), claim_token=token)

    # the right random part under another instant: not this firing's token
    head, _, tail = first.claim_token.partition(".")
    moved = f"{int(head, 16) + 1:x}.{tail}"
    assert h.store.heartbeat("w", [(first.firing.id, moved)]) == {first.firing.id}
    assert h.store.complete([done(first, moved)]) == [False]
    assert h.store.complete([done(first, first.claim_token)]) == [True]
    # a claim written as before migration 18 (no instant in its token) is found by id
    legacy = "0123456789abcdef0123456789abcdef"
    store: Any = h.store
    store.db.write(
        lambda tx: tx.conn.execute(
            "UPDATE firings SET claim_token = %s WHERE id = %s", (legacy, second.firing.id)
        )
    )
    assert token_instant(legacy) is None
    assert h.store.heartbeat("w", [(second.firing.id, legacy)]) == set()
    assert h.store.complete([done(second, legacy)]) == [True]
    assert h.store.get_firing(second.firing.id).state.value == "succeeded"
