"""PostgreSQL: the finish counters' row trigger (schema.sql migration_26) fires for a
finish only. An enqueue's insert and a claim's update (which names finished_at, to set
it NULL) call no trigger function; a finish calls it once and counts once; rewriting a
finished firing's finished_at with the same value counts nothing. Each figure is read in
the transaction that made it (``pg_stat_get_xact_function_calls``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cronwheel.domain.schedules import now as now_schedule
from cronwheel.store.postgres import PostgresStore
from tests.contract.conftest import Harness, spec
from tests.contract.pg_harness import postgres_harness

# a copy of firing %(id)s as a new row, %(later)s seconds later, with its state and
# finished_at as given
_COPY = """
INSERT INTO firings
SELECT * FROM jsonb_populate_record(
    NULL::firings,
    (SELECT to_jsonb(f) || jsonb_build_object(
         'id', nextval('firings_id_seq'),
         'scheduled_for', f.scheduled_for + %(later)s * interval '1 second',
         'state', %(state)s::text, 'finished_at', %(finished)s::timestamptz)
     FROM firings f WHERE f.id = %(id)s))
"""


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


def _calls(tx: Any) -> int:
    row = tx.conn.execute(
        "SELECT coalesce(pg_stat_get_xact_function_calls("
        "'cronwheel_count_finished'::regproc), 0) AS n"
    ).fetchone()
    return int(row["n"])


def _counted(tx: Any) -> int:
    row = tx.conn.execute("SELECT coalesce(sum(n), 0) AS n FROM finished_counts").fetchone()
    return int(row["n"])


def test_only_a_finish_calls_the_counting_trigger(h: Harness) -> None:
    store = h.store
    assert isinstance(store, PostgresStore)
    firing = store.enqueue_now(spec("counted", schedule=now_schedule()))
    seen: dict[str, tuple[int, int]] = {}

    def body(tx: Any) -> None:
        tx.conn.execute("SET LOCAL track_functions = 'pl'")
        base = _counted(tx)
        ids = {"id": firing.id}
        # a claim's update: it names finished_at (to NULL) on a queued firing
        tx.conn.execute("UPDATE firings SET finished_at = NULL WHERE id = %(id)s", ids)
        seen["claim"] = (_calls(tx), _counted(tx) - base)
        # an enqueue's insert: not finished
        tx.conn.execute(_COPY, {**ids, "later": 1, "state": "queued", "finished": None})
        seen["insert queued"] = (_calls(tx), _counted(tx) - base)
        # a finish: counted once
        tx.conn.execute(
            "UPDATE firings SET state = 'succeeded', finished_at = now() WHERE id = %(id)s", ids
        )
        seen["finish"] = (_calls(tx), _counted(tx) - base)
        # the same finished_at written again: nothing more
        tx.conn.execute("UPDATE firings SET finished_at = finished_at WHERE id = %(id)s", ids)
        seen["same finish"] = (_calls(tx), _counted(tx) - base)
        # a row inserted finished (a skip's fate written at once): counted
        tx.conn.execute(
            _COPY, {**ids, "later": 2, "state": "skipped", "finished": "2026-01-01T00:00:00Z"}
        )
        seen["insert finished"] = (_calls(tx), _counted(tx) - base)

    store.db.write(body)  # one transaction: the calls are this transaction's
    assert seen == {
        "claim": (0, 0),
        "insert queued": (0, 0),
        "finish": (1, 1),
        "same finish": (1, 1),
        "insert finished": (2, 2),
    }
