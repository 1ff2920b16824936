"""The hostile-tenant harness: the whole server (API, dashboard, ``/metrics``) in-process
over each real store, two namespaces with a token in every role, and a fingerprint of
everything stored so that a refused request can be checked to have changed nothing.

``sec`` runs each test on SQLite and on PostgreSQL (a fresh schema per test; in CI a
missing server fails the test, see ``tests/conftest.py``). The store's clock is frozen
and moved only by ``sec.advance``, as in the store contract suite.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from cronwheel.server import create_app
from cronwheel.web.tokens import issue_token
from tests.contract.conftest import STORE_KINDS, Harness

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's TestClient asks for httpx2
    from starlette.testclient import TestClient

NS, OTHER = "team-a", "team-b"
ROLES = ("read", "write", "admin")
SECURITY_STORES = ("sqlite", "postgres")


def page_csrf(html: str) -> str:
    """The CSRF token a dashboard page carries (its htmx headers)."""
    found = re.search(r'"X-CSRF-Token": "([0-9a-f]{64})"', html)
    assert found is not None, "the page carries no CSRF token"
    return found.group(1)


def _pg_rows(store: Any, sql: str) -> list[Any]:
    return list(store.db.run(lambda conn: conn.execute(sql).fetchall(), write=False))


def _tables(store: Any) -> list[str]:
    if hasattr(store, "schema"):  # PostgreSQL
        # tables, not their partitions: a partition's rows are read through its table.
        # An insert whose day has no partition makes it first, in a transaction of its
        # own (store/postgres/db.py), so a request refused afterwards (a backfill over
        # its quota at 01:00 UTC, whose hours are yesterday's) can leave an empty day
        # partition behind: storage, as the leader makes them ahead, not data.
        rows = _pg_rows(
            store,
            "SELECT c.relname AS tablename FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')"
            " AND NOT c.relispartition ORDER BY c.relname",
        )
        return [r["tablename"] if isinstance(r, dict) else r[0] for r in rows]
    rows = store.db.conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        " ORDER BY name"
    ).fetchall()
    return [r[0] for r in rows]


def fingerprint(store: Any) -> dict[str, list[str]]:
    """Every row of every table, as sorted text: equal before and after means unchanged.

    Node heartbeats and the like are not written by API requests, so a request that
    changed nothing leaves this equal."""
    out: dict[str, list[str]] = {}
    for table in _tables(store):
        sql = f"SELECT * FROM {table}"  # table names come from the catalog
        if hasattr(store, "schema"):
            rows = _pg_rows(store, sql)
        else:
            rows = store.db.conn.execute(sql).fetchall()
        out[table] = sorted(
            repr(sorted(r.items()) if isinstance(r, dict) else tuple(r)) for r in rows
        )
    return out


@dataclass
class Sec:
    kind: str  # "sqlite" | "postgres"
    harness: Harness
    client: TestClient
    tokens: dict[str, str] = field(default_factory=dict)  # "write", "other-read", ...

    @property
    def store(self) -> Any:
        return self.harness.store

    def advance(self, delta: timedelta) -> None:
        self.harness.advance(delta)

    def h(self, who: str = "write") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def call(self, method: str, path: str, who: str | None = "write", **kw: Any) -> Any:
        headers = (self.h(who) if who else {}) | kw.pop("headers", {})
        return self.client.request(method, path, headers=headers, **kw)

    def fingerprint(self) -> dict[str, list[str]]:
        return fingerprint(self.store)

    def login(self, who: str = "write") -> dict[str, str]:
        """A dashboard session of ``who``'s token (the cookie stays in the client); the
        header that carries its CSRF token, as the dashboard's pages send it."""
        r = self.call("POST", "/ui/login", None, json={"token": self.tokens[who]})
        assert r.status_code == 200, r.text
        csrf = page_csrf(self.call("GET", "/", None).text)
        return {"X-CSRF-Token": csrf}

    def cron_job(self, name: str = "nightly", who: str = "write", **extra: Any) -> Any:
        body = {
            "name": name,
            "task": "report",
            "schedule": {"kind": "cron", "cron": "0 9 * * *", "tz": "Europe/Berlin"},
            "allow_unknown_task": True,
        } | extra
        r = self.call("POST", "/v1/jobs", who, json=body)
        assert r.status_code == 201, r.text
        return r.json()


@pytest.fixture(params=SECURITY_STORES)
def sec(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Sec]:
    """The server with auth on, over a fresh store of each kind."""
    for harness in STORE_KINDS[request.param](tmp_path):
        store: Any = harness.store
        tokens = {}
        for role in ROLES:
            tokens[role] = issue_token(store, namespace=NS, role=role, label=role)[1]
            tokens[f"other-{role}"] = issue_token(store, namespace=OTHER, role=role)[1]
        app = create_app(store, auth_required=True, max_body=64 * 1024)
        with TestClient(app) as client:
            yield Sec(kind=request.param, harness=harness, client=client, tokens=tokens)


# -- the server as a browser reaches it (tests/security/test_browser.py) ----------------------
BOUND = "http://127.0.0.1:8080"  # the address the browser-facing servers are "bound" to
PROXIES = ("10.0.0.0/8",)  # their trusted reverse proxies


def _bound_sec(kind: str, tmp_path: Any, *, auth: bool) -> Iterator[Sec]:
    """The server as ``cronwheel api --host 127.0.0.1 --trusted-proxy 10.0.0.0/8`` builds
    it (Host names derived from the bind address), reached at ``BOUND``."""
    from cronwheel.web.browser import allowed_hosts_for

    for harness in STORE_KINDS[kind](tmp_path):
        store: Any = harness.store
        tokens = {}
        for role in ROLES:
            tokens[role] = issue_token(store, namespace=NS, role=role, label=role)[1]
            tokens[f"other-{role}"] = issue_token(store, namespace=OTHER, role=role)[1]
        app = create_app(
            store,
            auth_required=auth,
            allowed_hosts=allowed_hosts_for("127.0.0.1"),
            trusted_proxies=PROXIES,
        )
        with TestClient(app, base_url=BOUND) as client:
            yield Sec(kind=kind, harness=harness, client=client, tokens=tokens)


@pytest.fixture(params=SECURITY_STORES)
def bound_sec(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Sec]:
    """Auth on, Host names of a loopback bind, a trusted proxy network."""
    yield from _bound_sec(request.param, tmp_path, auth=True)


@pytest.fixture(params=SECURITY_STORES)
def open_sec(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Sec]:
    """Auth off (``cronwheel api`` on loopback): every request is namespace ``default``."""
    yield from _bound_sec(request.param, tmp_path, auth=False)
