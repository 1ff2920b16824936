"""API test harness: the app in-process on a temp SQLite store with a FakeClock."""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from cronwheel.domain.clock import FakeClock, SystemClock
from cronwheel.server import create_app
from cronwheel.store.sqlite import SqliteStore
from cronwheel.web.tokens import issue_token

with warnings.catch_warnings():
    # starlette 1.x asks for the `httpx2` fork for its TestClient and warns when it
    # runs on `httpx`; the warning is about packaging, not about our code.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NS, OTHER = "team-a", "team-b"


@dataclass
class Api:
    client: TestClient
    store: SqliteStore
    clock: FakeClock
    tokens: dict[str, str]  # "read" | "write" | "admin" | "other-write" -> token text

    def h(self, who: str = "write") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def call(self, method: str, path: str, who: str = "write", **kw: Any) -> Any:
        headers = self.h(who) | kw.pop("headers", {})
        return self.client.request(method, path, headers=headers, **kw)

    def counts(self) -> tuple[int, int, int]:
        """(jobs, firings, idempotency keys) in the whole store: 'nothing stored' checks."""
        rows = self.store.db.conn.execute(
            "SELECT (SELECT count(*) FROM jobs) AS j, (SELECT count(*) FROM firings) AS f, "
            "(SELECT count(*) FROM idempotency_keys) AS k"
        ).fetchall()
        return int(rows[0]["j"]), int(rows[0]["f"]), int(rows[0]["k"])

    def cron_job(self, name: str = "nightly", who: str = "write", **extra: Any) -> Any:
        body = {
            "name": name,
            "task": "report",
            "schedule": {"kind": "cron", "cron": "0 9 * * *", "tz": "Europe/Berlin"},
        } | extra
        r = self.call("POST", "/v1/jobs", who, json=body)
        assert r.status_code == 201, r.text
        return r.json()


def make_store(tmp_path: Path, clock: FakeClock) -> SqliteStore:
    store = SqliteStore(str(tmp_path / "api.db"), clock=clock)
    store.migrate()
    return store


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    clock = FakeClock(T0)
    store = make_store(tmp_path, clock)
    tokens = {
        role: issue_token(store, namespace=NS, role=role, label=role)[1]
        for role in ("read", "write", "admin")
    }
    tokens["other-write"] = issue_token(store, namespace=OTHER, role="write")[1]
    tokens["other-read"] = issue_token(store, namespace=OTHER, role="read")[1]
    # as `cronwheel api` serves SQLite: store calls on the event loop, answers written
    # unvalidated (open_api: in threads, validated)
    app = create_app(
        store,
        auth_required=True,
        max_body=64 * 1024,
        clock=clock,
        store_calls_on_loop=True,
        validate_responses=False,
    )
    with TestClient(app) as client:
        yield Api(client=client, store=store, clock=clock, tokens=tokens)
    store.close()


@pytest.fixture
def open_api(tmp_path: Path) -> Iterator[Api]:
    """Authentication off (loopback mode): namespace `default`."""
    clock = FakeClock(T0)
    store = make_store(tmp_path, clock)
    with TestClient(create_app(store, auth_required=False)) as client:
        yield Api(client=client, store=store, clock=clock, tokens={"write": "ignored"})
    store.close()


@dataclass
class Server:
    url: str
    store: SqliteStore
    write: str
    read: str


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    store = SqliteStore(str(tmp_path / "srv.db"), clock=SystemClock())
    store.migrate()
    write = issue_token(store, namespace="team-a", role="write")[1]
    read = issue_token(store, namespace="team-a", role="read")[1]
    config = uvicorn.Config(
        create_app(store, auth_required=True),
        host="127.0.0.1",
        port=0,
        access_log=False,
        log_level="warning",
        lifespan="off",
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        assert thread.is_alive(), "uvicorn died"
        time.sleep(0.01)
    port = srv.servers[0].sockets[0].getsockname()[1]
    yield Server(url=f"http://127.0.0.1:{port}", store=store, write=write, read=read)
    srv.should_exit = True
    thread.join(timeout=10)
    assert not thread.is_alive()
    store.close()
