"""Group commit: the API's writes asked for in one turn of the event loop share one
SQLite transaction (api/write_group.py, SqliteDb.grouped), and each answer is what the
write alone would have answered: its own error, nothing of a failed write kept, and
nothing answered before the commit (a failed commit fails them all, nothing written)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from cronwheel.api.calls import ServingMode
from cronwheel.api.write_group import MAX_CALLS, WriteGroup
from cronwheel.domain.clock import FakeClock
from cronwheel.errors import StoreUnavailableError
from cronwheel.server import create_app
from cronwheel.store.sqlite import SqliteStore
from cronwheel.web.tokens import issue_token
from tests.api.conftest import NS, T0, make_store

CRON = {"kind": "cron", "cron": "0 9 * * *", "tz": "Europe/Berlin"}


def _job(name: str) -> dict[str, Any]:
    return {"name": name, "task": "report", "schedule": CRON, "allow_unknown_task": True}


def _group_of(app: Any) -> WriteGroup:
    layer = app.middleware_stack
    while not isinstance(layer, ServingMode):
        layer = layer.app
    assert layer.group is not None
    return layer.group


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Any, SqliteStore, str]]:
    store = make_store(tmp_path, FakeClock(T0))
    token = issue_token(store, namespace=NS, role="write")[1]
    app = create_app(store, store_calls_on_loop=True, validate_responses=False)
    app.middleware_stack = app.build_middleware_stack()
    yield app, store, token
    store.close()


def _together(app: Any, token: str, calls: list[tuple[str, str, dict[str, Any]]]) -> list[Any]:
    """The requests sent at once, on one event loop (the app's lifespan around them)."""

    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await asyncio.gather(
                *(client.request(m, p, json=b, headers=headers) for m, p, b in calls)
            )

    return asyncio.run(main())


def test_writes_asked_together_share_a_transaction_and_each_gets_its_own_answer(
    served: tuple[Any, SqliteStore, str],
) -> None:
    app, store, token = served
    calls = [("POST", "/v1/jobs", _job(f"j{i}")) for i in range(6)]
    calls.insert(3, ("POST", "/v1/jobs", _job("j1")))  # a name taken inside the group
    calls.append(("PUT", "/v1/jobs/p", {"task": "report", "schedule": CRON}))
    answers = _together(app, token, calls)
    codes = [r.status_code for r in answers]
    assert codes == [201, 201, 201, 409, 201, 201, 201, 201], [r.text for r in answers]
    assert answers[3].json()["error"]["code"] == "job_exists"
    group = _group_of(app)
    assert group.calls == len(calls)
    assert group.flushes < len(calls)  # they were made together
    names = {r[0] for r in store.db.conn.execute("SELECT name FROM jobs").fetchall()}
    assert names == {f"j{i}" for i in range(6)} | {"p"}
    # each creation's answer is the row as committed
    for r in answers[:3]:
        assert store.get_job(NS, r.json()["name"]).id is not None


def test_a_commit_that_fails_fails_every_write_of_the_group_and_keeps_none(
    served: tuple[Any, SqliteStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    app, store, token = served

    @contextmanager
    def failing() -> Iterator[None]:
        with store.db.grouped():
            yield
            raise StoreUnavailableError("sqlite commit: disk I/O error")  # undoes the group

    monkeypatch.setattr(_group_of(app), "_open", failing)
    answers = _together(app, token, [("POST", "/v1/jobs", _job(f"k{i}")) for i in range(4)])
    assert [r.status_code for r in answers] == [503] * 4
    assert all(r.json()["error"]["code"] == "store_unavailable" for r in answers)
    assert store.db.conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


def test_a_turn_with_more_writes_than_a_group_takes_makes_several(
    served: tuple[Any, SqliteStore, str],
) -> None:
    app, store, token = served
    count = MAX_CALLS + 5
    answers = _together(app, token, [("POST", "/v1/jobs", _job(f"m{i}")) for i in range(count)])
    assert [r.status_code for r in answers] == [201] * count
    group = _group_of(app)
    assert group.calls == count and group.flushes >= 2
    assert store.db.conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == count


def test_a_grouped_write_that_raises_leaves_nothing_and_the_others_commit(
    tmp_path: Path,
) -> None:
    store = make_store(tmp_path, FakeClock(T0))
    db = store.db

    def half(tx: Any) -> None:
        tx.conn.execute("INSERT INTO meta (key, value) VALUES ('b', '1')")
        raise ZeroDivisionError

    with db.grouped():
        db.write(lambda tx: tx.conn.execute("INSERT INTO meta (key, value) VALUES ('a', '1')"))
        with pytest.raises(ZeroDivisionError):
            db.write(half)
        # a read inside the group sees its earlier write
        seen = db.read(lambda tx: tx.conn.execute("SELECT value FROM meta WHERE key = 'a'"))
        assert seen.fetchone() is not None
        db.write(lambda tx: tx.conn.execute("INSERT INTO meta (key, value) VALUES ('c', '1')"))
    keys = {r[0] for r in db.conn.execute("SELECT key FROM meta WHERE key IN ('a','b','c')")}
    assert keys == {"a", "c"}
    store.close()
