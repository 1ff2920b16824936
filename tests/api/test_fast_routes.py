"""The fast routes (api/fast.py) answer byte for byte as FastAPI's routes do.

Two copies of one store (the same secret, tokens and rows), one clock: the app with
fast routes serves one copy, the same app without them the other, and every request
goes to both in the same order, so each store sees the same writes. Status, headers
and body bytes must be equal, for good requests and hostile ones (the catalog of
test_hostile.py among them), errors raised by the endpoint (conflicts, quotas) included."""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cronwheel.api.fast import FastRoutes
from cronwheel.domain.clock import FakeClock
from cronwheel.domain.models import JobSpec
from cronwheel.domain.schedules import now as now_schedule
from cronwheel.server import create_app
from cronwheel.store.sqlite import SqliteStore
from cronwheel.web.ids import ids_for
from cronwheel.web.tokens import CLUSTER, issue_token
from tests.api.test_hostile import CATALOG

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

JSON = {"content-type": "application/json"}
CRON = b'"schedule": {"kind": "cron", "cron": "*/5 * * * *", "tz": "Europe/Berlin"}'


@dataclass
class Pair:
    fast: TestClient
    slow: TestClient
    stores: tuple[SqliteStore, SqliteStore]
    tokens: dict[str, str]
    firings: dict[str, int]  # shown ids: "own", "other"
    fast_app: Any

    def both(self, method: str, path: str, body: bytes = b"", headers: Any = None) -> Any:
        answers = [
            client.request(method, path, content=body, headers=headers or {})
            for client in (self.fast, self.slow)
        ]
        fast, slow = answers
        shown = f"{method} {path} {body[:120]!r} {headers}"
        assert fast.status_code == slow.status_code, (shown, fast.text, slow.text)
        assert fast.headers.raw == slow.headers.raw, shown
        assert fast.content == slow.content, shown
        return fast


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    clock = FakeClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    first = SqliteStore(str(tmp_path / "a.db"), clock=clock)
    first.migrate()
    tokens = {
        role: issue_token(first, namespace="team-a", role=role, label=role)[1]
        for role in ("read", "write", "admin")
    }
    tokens["other"] = issue_token(first, namespace="team-b", role="write")[1]
    tokens["cluster"] = issue_token(first, namespace=CLUSTER, role="admin")[1]
    record, tokens["revoked"] = issue_token(first, namespace="team-a", role="write")
    first.revoke_token(record.id)
    spec = JobSpec(name="once", task="t", schedule=now_schedule(), namespace="team-a")
    own = first.enqueue_now(spec)
    other = first.enqueue_now(dataclasses.replace(spec, namespace="team-b"))
    ids = ids_for(first)
    firings = {"own": ids.encode("firing", own.id), "other": ids.encode("firing", other.id)}
    first.close()
    shutil.copy(tmp_path / "a.db", tmp_path / "b.db")
    stores = tuple(SqliteStore(str(tmp_path / n), clock=clock) for n in ("a.db", "b.db"))
    apps = [
        create_app(
            store,
            auth_required=True,
            max_body=64 * 1024,
            clock=clock,
            store_calls_on_loop=True,
            validate_responses=False,
            fast_routes=fast,
        )
        for store, fast in zip(stores, (True, False), strict=True)
    ]
    with TestClient(apps[0]) as fast, TestClient(apps[1]) as slow:
        yield Pair(fast, slow, stores, tokens, firings, apps[0])  # type: ignore[arg-type]
    for store in stores:
        store.close()


def _fast_routes(app: Any) -> FastRoutes:
    layer = app.middleware_stack
    while not isinstance(layer, FastRoutes):
        layer = layer.app
    return layer


def _auth(pair: Pair) -> list[dict[str, str]]:
    t = pair.tokens
    return [
        {"authorization": f"Bearer {t['write']}"},
        {"authorization": f"bearer  {t['admin']} "},
        {"authorization": f"Bearer {t['read']}"},
        {"authorization": f"Bearer {t['other']}"},
        {"authorization": f"Bearer {t['cluster']}"},
        {"authorization": f"Bearer {t['revoked']}"},
        {"authorization": f"Bearer {t['write'][:-1]}x"},
        {"authorization": f"Basic {t['write']}"},
        {"authorization": "Bearer"},
        {},
    ]


def test_the_fast_path_is_taken(pair: Pair) -> None:
    pair.both("GET", "/healthz")  # builds the middleware stack
    fast = _fast_routes(pair.fast_app)
    assert sorted((m, p.route.path) for m, ps in fast.plans().items() for p in ps) == [
        ("GET", "/v1/firings/{firing_id}"),
        ("POST", "/v1/jobs"),
        ("PUT", "/v1/jobs/{name}"),
    ]
    inner, fallbacks = fast.app, []

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        fallbacks.append(scope["path"])
        await inner(scope, receive, send)

    fast.app = counting
    auth = {"authorization": f"Bearer {pair.tokens['write']}"} | JSON
    pair.both("GET", f"/v1/firings/{pair.firings['own']}", headers=auth)
    pair.both("POST", "/v1/jobs", b'{"name": "a", "task": "t", ' + CRON + b"}", auth)
    pair.both("PUT", "/v1/jobs/b", b'{"task": "t", ' + CRON + b"}", auth)
    pair.both("POST", "/v1/jobs", b'{"name": "a", "task": "t", ' + CRON + b"}", auth)  # 409
    assert fallbacks == []
    pair.both("GET", f"/v1/firings/{pair.firings['own']}")  # no token: FastAPI answers
    assert fallbacks == [f"/v1/firings/{pair.firings['own']}"]


def test_firing_gets_answer_alike(pair: Pair) -> None:
    own, other = pair.firings["own"], pair.firings["other"]
    ids = [
        str(own), str(other), "1", "0", "-1", f"0{own}", "+5", " 5", "5 ", "1_0", "1e3",
        str(2**63 - 1), str(2**63), str(2**64), "9" * 25, "abc", "١٢", "%31", "5%2F6", "",
    ]  # fmt: skip
    for shown, auth in itertools.product(ids, _auth(pair)):
        pair.both("GET", f"/v1/firings/{shown}", headers=auth)
    auth = {"authorization": f"Bearer {pair.tokens['write']}"}
    for path in [f"/v1/firings/{own}?x=1", f"/v1/firings/{own}/", f"/v1/firings/{own}?token=a"]:
        pair.both("GET", path, headers=auth)
    pair.both("GET", f"/v1/firings/{own}", b'{"a": 1}', auth | JSON)
    pair.both("GET", f"/v1/firings/{own}", b"[1]", auth | JSON)
    pair.both("HEAD", f"/v1/firings/{own}", headers=auth)
    pair.both("POST", f"/v1/firings/{own}", headers=auth)


def _bodies(n: int) -> list[bytes]:
    name = f'"n{n}"'.encode()
    return [
        b'{"name": ' + name + b', "task": "t", ' + CRON + b"}",
        b'{"name": ' + name + b', "task": "t", ' + CRON + b', "args": [1e300, -0.0, 1]}',
        b'{"name": ' + name + b', "task": "t", ' + CRON + b', "args": [' + b"9" * 40 + b"]}",
        b'{"name": ' + name + b', "task": "t", ' + CRON + b', "kwargs": {"\\u00e9": null}}',
        b'{"name": ' + name + b', "task": "t", ' + CRON + b', "paused": true}',
        b'{"name": ' + name + b', "task": "t", ' + CRON + b', "paused": "yes"}',
        b'{"name": ' + name + b', "task": "t", ' + CRON + b', "max_runs": 0}',
        b'{"name": ' + name + b', "task": "t", ' + CRON + b', "unknown": 1}',
        b'{"name": ' + name + b', "task": "", ' + CRON + b"}",
        b'{"name": ' + name + b', "task": "t", "schedule": {"kind": "cron", "cron": "bad"}}',
        b'{"name": ' + name + b', "task": "t", "schedule": {"kind": "at", "at": "2020-01-01"}}',
        b'{"name": ' + name + b', "task": "t", "schedule": {"kind": "every", "interval": 0}}',
        b'{"name": "' + b"x" * 201 + b'", "task": "t", ' + CRON + b"}",
        b'{"name": "a/b\\u0000", "task": "t", ' + CRON + b"}",
        b'{"name": ' + name + b', "task": "t"}',
        b'{"name": ' + name + b", " + CRON + b"}",
        b'{"name": ' + name + b', "task": 5, ' + CRON + b"}",
        b'{"name": ' + name + b', "task": "t", ' + CRON + b', "name": "dup"}',
        b"{}",
        b"[]",
        b"",
        b"null",
        b'{"name": ' + name + b', "task": "t", ' + CRON,
        b'\xef\xbb\xbf{"name": ' + name + b', "task": "t", ' + CRON + b"}",
    ]


def test_job_creates_and_upserts_answer_alike(pair: Pair) -> None:
    types = [JSON, {"content-type": "application/json; charset=utf-8"}]
    types += [{"content-type": "application/JSON"}, {"content-type": "text/plain"}, {}]
    n = itertools.count()
    for i, (auth, kind) in enumerate(itertools.product(_auth(pair), types)):
        bodies = _bodies(next(n))
        for body in bodies if i < len(types) or kind is JSON else bodies[:1]:
            pair.both("POST", "/v1/jobs", body, auth | kind)
            pair.both("POST", "/v1/jobs", body, auth | kind)  # the second: 409 or alike
            put = body.replace(b'"name"', b'"label"', 1)
            for name in ["p", "p", "a%2Fb", "%E2%82%AC", "x" * 201, "batch", "p%2F"]:
                pair.both("PUT", f"/v1/jobs/{name}", put, auth | kind)
            pair.both("PUT", "/v1/jobs/p?x=1", put, auth | kind)


def test_endpoint_refusals_answer_alike(pair: Pair) -> None:
    auth = {"authorization": f"Bearer {pair.tokens['write']}"} | JSON
    for store in pair.stores:
        store.set_quota("team-a", {"jobs": 2})
    for i in range(4):  # the third and fourth: the jobs quota (422), from the endpoint
        pair.both("POST", "/v1/jobs", b'{"name": "q%d", "task": "t", %s}' % (i, CRON), auth)
        pair.both("PUT", f"/v1/jobs/u{i}", b'{"task": "t", ' + CRON + b"}", auth)
    past = b'"schedule": {"kind": "at", "at": "2020-01-01T00:00:00Z"}'
    body = b'{"name": "late", "task": "t", ' + past + b"}"
    pair.both("POST", "/v1/jobs", body, auth)  # an instant in the past: 422 from the domain


def test_the_hostile_catalog_answers_alike(pair: Pair) -> None:
    auth = {"authorization": f"Bearer {pair.tokens['admin']}"}
    pair.both("POST", "/v1/jobs", b'{"name": "existing", "task": "t", ' + CRON + b"}", auth | JSON)
    for _, method, path, body, headers, *_ in CATALOG:
        pair.both(method, path, body, auth | headers)
