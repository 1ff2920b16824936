"""The API's firing read awaited on its event loop (store/postgres/aio.py, api/calls.py
``store_read``) on a real PostgreSQL: while the app is served (its lifespan), a
``GET /v1/firings/{id}`` is answered from the async pool with no store thread and the
same bytes as the thread path; it keeps Database.run's rules for a read (the primary's
timeline fenced, a lost connection retried, a stall cut short, a dead server
StoreUnavailableError as a 503); out of the lifespan, on another loop and on SQLite the
store's own call answers. A ``POST /v1/jobs`` is awaited there too (the store's clock,
then the job in one statement), and what needs a decision takes the thread path."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest

from cronwheel.api import calls
from cronwheel.api.app import create_api
from cronwheel.domain.clock import FakeClock
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import FiringId, Job, JobSpec
from cronwheel.domain.schedules import every
from cronwheel.domain.schedules import now as now_schedule
from cronwheel.errors import (
    ConflictError,
    FiringNotFoundError,
    JobNotFoundError,
    StoreUnavailableError,
)
from cronwheel.server import create_app
from cronwheel.store.postgres import PostgresStore
from cronwheel.store.postgres.aio import PgAsyncCalls
from cronwheel.store.protocol import Completion
from cronwheel.store.sqlite import SqliteStore
from cronwheel.web.ids import ids_for
from cronwheel.web.tokens import issue_token
from tests.conftest import PG_URL
from tests.contract.conftest import worker_node
from tests.contract.pg_harness import fresh_schema
from tests.contract.test_postgres_checkout import _terminate as terminate

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's TestClient asks for the httpx2 fork
    from starlette.testclient import TestClient

NS = "team-a"
_DAILY = {
    "task": "report",
    "schedule": {"kind": "cron", "cron": "0 9 * * *", "tz": "Europe/Berlin"},
}
T = TypeVar("T")


@dataclass
class Pg:
    store: PostgresStore
    schema: str
    firing: int  # the store's id
    shown: int  # the id the API shows
    headers: dict[str, str]


@pytest.fixture
def pg() -> Iterator[Pg]:
    with fresh_schema() as schema:
        yield from _pg(schema)


def _pg(schema: str) -> Iterator[Pg]:
    store = PostgresStore(PG_URL, schema=schema, pool_size=2)
    try:
        store.migrate()
        token = issue_token(store, namespace=NS, role="write")[1]
        firing = store.enqueue_now(
            JobSpec(name="one", task="report", schedule=now_schedule(), namespace=NS)
        )
        yield Pg(
            store=store,
            schema=schema,
            firing=firing.id,
            shown=ids_for(store).encode("firing", firing.id),
            headers={"Authorization": f"Bearer {token}"},
        )
    finally:
        store.close()


def _app(store: Any) -> Any:
    # as `cronwheel api` serves PostgreSQL: store calls in threads, answers unvalidated
    return create_app(store, auth_required=True, validate_responses=False)


class _Threads:
    """Records what runs on the API's store threads (api/calls.py ``store_call``), by
    the name of the function called there."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        pool = calls._STORE_THREADS.get()
        names = self.names

        class Recording:
            def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
                names.append(_name(fn))
                return pool.submit(fn, *args, **kwargs)

        monkeypatch.setattr(calls._STORE_THREADS, "get", Recording)


def _name(fn: Any) -> str:
    """The function a store call runs: through the partials and the context's run."""
    while True:
        if isinstance(fn, functools.partial):
            fn = fn.args[0] if getattr(fn.func, "__name__", "") == "run" else fn.func
        else:
            return str(getattr(fn, "__name__", repr(fn)))


def test_a_served_app_reads_a_firing_on_the_loop_with_the_thread_paths_answer(
    pg: Pg, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = f"/v1/firings/{pg.shown}"
    threaded = TestClient(_app(pg.store)).get(path, headers=pg.headers)  # no lifespan
    assert threaded.status_code == 200, threaded.text
    threads = _Threads(monkeypatch)
    read_by: list[str] = []
    original = pg.store.firing_with_attempts

    def sync_read(firing_id: FiringId) -> Any:
        read_by.append(threading.current_thread().name)
        return original(firing_id)

    monkeypatch.setattr(pg.store, "firing_with_attempts", sync_read)
    app = _app(pg.store)
    with TestClient(app) as client:
        assert isinstance(app.state.async_calls, PgAsyncCalls)
        for _ in range(3):
            served = client.get(path, headers=pg.headers)
            assert served.status_code == 200, served.text
            assert served.content == threaded.content
        missing = client.get(f"/v1/firings/{pg.shown + 1}", headers=pg.headers)
    assert missing.status_code == 404
    assert missing.json()["error"]["field"] == "firing_id"
    assert read_by == []  # never the store's own call
    assert "firing_with_attempts" not in threads.names
    assert app.state.async_calls is None  # closed with the lifespan


def test_another_namespaces_firing_is_a_404_as_on_the_thread_path(pg: Pg) -> None:
    other = issue_token(pg.store, namespace="team-b", role="read")[1]
    path = f"/v1/firings/{pg.shown}"
    with TestClient(_app(pg.store)) as client:
        served = client.get(path, headers={"Authorization": f"Bearer {other}"})
    threaded = TestClient(_app(pg.store)).get(path, headers={"Authorization": f"Bearer {other}"})
    assert served.status_code == threaded.status_code == 404
    assert served.content == threaded.content


def test_a_timeline_below_the_highest_seen_is_refused_as_a_503(pg: Pg) -> None:
    with TestClient(_app(pg.store)) as client:
        assert client.get(f"/v1/firings/{pg.shown}", headers=pg.headers).status_code == 200
        pg.store.db.timeline = 10**9  # as after a failover this server did not follow
        refused = client.get(f"/v1/firings/{pg.shown}", headers=pg.headers)
    assert refused.status_code == 503
    assert "timeline" in refused.json()["error"]["message"]


def test_a_connection_lost_between_reads_is_replaced_and_the_read_answers(pg: Pg) -> None:
    one = PostgresStore(PG_URL, schema=pg.schema, pool_size=1)  # one connection to lose

    async def main() -> None:
        reads = PgAsyncCalls(one.db)
        await reads.open()
        try:
            first = await reads.firing_with_attempts(FiringId(pg.firing))
            async with reads._checkout() as conn:  # its connection, trusted: it just answered
                pid = conn.info.backend_pid
            terminate(pid)  # and gone
            again = await reads.firing_with_attempts(FiringId(pg.firing))
            assert again == first
            async with reads._checkout() as conn:
                assert conn.info.backend_pid != pid
        finally:
            await reads.close()

    try:
        asyncio.run(main())
    finally:
        one.close()


def _on_reads(store: PostgresStore, body: Callable[[PgAsyncCalls], Awaitable[T]]) -> T:
    """``body`` on the store's AsyncCalls, opened on a loop of its own; the store closed."""

    async def main() -> T:
        reads = store.async_calls()
        await reads.open()
        try:
            return await body(reads)
        finally:
            await reads.close()

    try:
        return asyncio.run(main())
    finally:
        store.close()


async def _unavailable(reads: PgAsyncCalls, firing: int) -> tuple[float, StoreUnavailableError]:
    """How long the firing's read took to fail, and its error (it must)."""
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        await reads.firing_with_attempts(FiringId(firing))
    return time.monotonic() - started, caught.value


def test_a_dead_server_is_store_unavailable_within_the_stores_timeout() -> None:
    store = PostgresStore("postgresql://postgres@127.0.0.1:1/test", pool_size=1, timeout_s=0.5)
    took, error = _on_reads(store, lambda reads: _unavailable(reads, 1))
    assert took < 5
    assert error.field == "store"


def test_a_stalled_read_is_cut_short_by_the_watchdog(
    pg: Pg, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(f"{PG_URL}?stall_timeout=0.3", schema=pg.schema, pool_size=1)
    # the firings' statement behind a sleep the server would hold for 20 s
    monkeypatch.setitem(
        store.db.q,
        "firings_with_attempts",
        "SELECT pg_sleep(20), unnest(%(ids)s::bigint[]) AS id",
    )
    took, _ = _on_reads(store, lambda reads: _unavailable(reads, pg.firing))
    # three attempts (the first and _READ_RETRIES), each shut a tick after 0.3 s
    assert 0.9 <= took < 10


def test_reads_opened_on_another_loop_leave_the_read_to_the_stores_own_call(pg: Pg) -> None:
    reads = pg.store.async_calls()
    opened = threading.Event()
    stop = threading.Event()

    async def serve() -> None:  # the serving loop, on a thread of its own
        await reads.open()
        opened.set()
        while not stop.is_set():
            await asyncio.sleep(0.01)
        await reads.close()

    server = threading.Thread(target=asyncio.run, args=(serve(),))
    server.start()
    try:
        assert opened.wait(10)
        request = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(async_calls=reads)))

        async def elsewhere() -> tuple[bool, str]:
            async def on_the_pool(_: Any) -> str:
                return "async reads"

            got = await calls.store_read(request, lambda: "the store's call", on_the_pool)  # type: ignore[arg-type]
            return reads.ready(), got

        assert asyncio.run(elsewhere()) == (False, "the store's call")
    finally:
        stop.set()
        server.join(10)
    assert not server.is_alive()


@pytest.mark.parametrize("on_loop", [True, False])
def test_a_sqlite_app_opens_no_async_calls(tmp_path: Any, on_loop: bool) -> None:
    store = SqliteStore(str(tmp_path / "a.db"))
    store.migrate()
    try:
        app = create_app(store, auth_required=False, store_calls_on_loop=on_loop)
        with TestClient(app) as client:
            assert client.get("/healthz").status_code == 200
            assert app.state.async_calls is None
    finally:
        store.close()


def test_an_app_on_the_loop_opens_no_async_calls_on_postgresql(pg: Pg) -> None:
    app = create_app(pg.store, auth_required=False, store_calls_on_loop=True)
    with TestClient(app):
        assert app.state.async_calls is None


def test_an_unchanged_put_is_answered_from_the_async_pool(
    pg: Pg, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = _DAILY | {"allow_unknown_task": True}
    headers = pg.headers | {"Content-Type": "application/json"}
    threaded = TestClient(_app(pg.store))  # no lifespan: the thread path
    assert threaded.put("/v1/jobs/deploy", json=body, headers=headers).status_code == 201
    before = threaded.put("/v1/jobs/deploy", json=body, headers=headers)
    assert (before.status_code, before.json()["changed"]) == (200, False)
    threads = _Threads(monkeypatch)
    app = _app(pg.store)
    with TestClient(app) as client:
        served = client.put("/v1/jobs/deploy", json=body, headers=headers)
        changed = client.put("/v1/jobs/deploy", json=body | {"args": [1]}, headers=headers)
    assert served.status_code == 200
    assert served.content == before.content
    # the token's first look-up in this app, then only the PUT that changes the job
    assert threads.names == ["principal_for", "_put"]
    assert (changed.status_code, changed.json()["changed"]) == (200, True)


def test_a_create_is_awaited_on_the_loop_and_what_needs_a_decision_takes_the_thread(
    pg: Pg, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = _DAILY
    headers = pg.headers | {"Content-Type": "application/json"}
    threaded = TestClient(_app(pg.store))  # no lifespan: the thread path
    first = threaded.post("/v1/jobs", json=body | {"name": "first"}, headers=headers)
    assert first.status_code == 201, first.text  # the namespace's shards are made here
    threads = _Threads(monkeypatch)
    app = _app(pg.store)
    with TestClient(app) as client:
        served = client.post("/v1/jobs", json=body | {"name": "loop"}, headers=headers)
        taken = client.post("/v1/jobs", json=body | {"name": "loop"}, headers=headers)
        on_loop = list(threads.names)
        pg.store.register_node(worker_node("w1", pg.store.now(), tasks=["report"]))
        unserved = client.post(
            "/v1/jobs", json=body | {"name": "typo", "task": "reprot"}, headers=headers
        )
        allowed = client.post(
            "/v1/jobs",
            json=body | {"name": "new", "task": "later", "allow_unknown_task": True},
            headers=headers,
        )
        in_lifespan = list(threads.names)
    assert served.status_code == 201, served.text
    shown = threaded.get("/v1/jobs/loop", headers=headers)
    assert served.json() == shown.json()  # the thread path's document of the same job
    assert (taken.status_code, taken.json()["error"]["code"]) == (409, "job_exists")
    assert on_loop == ["principal_for"]  # the token's first look-up; no store thread after
    # a task no worker serves: the statement leaves it to the thread path, which refuses
    assert unserved.status_code == 422
    assert unserved.json()["error"]["field"] == "task"
    assert in_lifespan[len(on_loop) :] == ["_create"]
    assert allowed.status_code == 201, allowed.text  # allowed: on the loop again
    names = sorted(j.spec.name for j in pg.store.list_jobs(namespace=NS))
    assert names == ["first", "loop", "new", "one"]  # "one": the fixture's enqueued job


def _hourly(name: str) -> JobSpec:
    return JobSpec(name=name, task="report", schedule=every(timedelta(hours=1)), namespace=NS)


def test_a_connection_lost_under_a_create_is_a_503_and_the_next_create_a_fresh_one(
    pg: Pg,
) -> None:
    # an autocommitted write on a lost connection may have been written: never sent again
    # (Database.run's rule for a write of one statement), StoreUnavailableError instead
    first = datetime(2030, 1, 1, 9, tzinfo=UTC)
    pg.store.create_job(_hourly("seed"), first_fire_at=first)  # the namespace's shards
    one = PostgresStore(PG_URL, schema=pg.schema, pool_size=1)  # one connection to lose
    since = first - timedelta(days=3650)  # any clock of the store's up to `first`

    async def main() -> Job | None:
        calls = PgAsyncCalls(one.db)
        await calls.open()
        try:
            await calls.firing_with_attempts(FiringId(pg.firing))
            async with calls._checkout() as conn:  # trusted: it just answered
                pid = conn.info.backend_pid
            terminate(pid)
            with pytest.raises(StoreUnavailableError):
                await calls.create_job(
                    _hourly("lost"), first_fire_at=first, valid_from=since, check_task=False
                )
            job = await calls.create_job(
                _hourly("after"), first_fire_at=first, valid_from=since, check_task=False
            )
            async with calls._checkout() as conn:
                assert conn.info.backend_pid != pid
            return job
        finally:
            await calls.close()

    try:
        job = asyncio.run(main())
    finally:
        one.close()
    assert job is not None
    assert pg.store.get_job(NS, "after") == job
    names = sorted(j.spec.name for j in pg.store.list_jobs(namespace=NS))
    assert names == ["after", "one", "seed"]  # "lost" never reached the server


@pytest.mark.parametrize("off", [timedelta(hours=1), -timedelta(hours=1)])
def test_an_app_clock_off_the_stores_leaves_the_create_to_the_thread_path(
    pg: Pg, monkeypatch: pytest.MonkeyPatch, off: timedelta
) -> None:
    body = {"task": "report", "schedule": {"kind": "every", "interval": "7m"}}
    headers = pg.headers | {"Content-Type": "application/json"}
    TestClient(_app(pg.store)).post(  # the namespace's shards, by the thread path
        "/v1/jobs", json=body | {"name": "seed"}, headers=headers
    )
    threads = _Threads(monkeypatch)
    app = create_app(
        pg.store,
        auth_required=True,
        validate_responses=False,
        clock=FakeClock(datetime.now(UTC) + off),
    )
    with TestClient(app) as client:
        before = pg.store.now()
        made = client.post("/v1/jobs", json=body | {"name": "off"}, headers=headers)
        after = pg.store.now()
    assert made.status_code == 201, made.text
    assert threads.names == ["principal_for", "_create"]  # the statement refused the guess
    job = pg.store.get_job(NS, "off")
    assert job.next_fire_at is not None
    # the store's clock made it: the next 7-minute step after a reading in [before, after]
    assert before < job.next_fire_at <= after + timedelta(minutes=7)


def test_the_api_alone_creates_on_the_loop_with_this_hosts_clock(
    pg: Pg, monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = pg.headers | {"Content-Type": "application/json"}
    TestClient(_app(pg.store)).post("/v1/jobs", json=_DAILY | {"name": "seed"}, headers=headers)
    threads = _Threads(monkeypatch)
    api = create_api(pg.store, auth_required=True, validate_responses=False)  # no dashboard
    with TestClient(api) as client:
        made = client.post("/v1/jobs", json=_DAILY | {"name": "api"}, headers=headers)
    assert made.status_code == 201, made.text
    assert threads.names == ["principal_for"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schedule": {"kind": "cron", "cron": "0 9 * * *", "tz": "Mars/Olympus"}}, "schedule.tz"),
        ({"schedule": {"kind": "cron", "cron": "0 25 * * *", "tz": "UTC"}}, "schedule.cron"),
        ({"name": "-flag"}, "name"),
        ({"schedule": {"kind": "at", "at": "2001-01-01T00:00:00Z"}}, "schedule.at"),
    ],
)
def test_a_bad_create_body_in_the_lifespan_is_the_thread_paths_422_and_writes_nothing(
    pg: Pg, change: dict[str, Any], field: str
) -> None:
    headers = pg.headers | {"Content-Type": "application/json"}
    body = _DAILY | {"name": "bad"} | change
    with TestClient(_app(pg.store)) as client:
        served = client.post("/v1/jobs", json=body, headers=headers)
    threaded = TestClient(_app(pg.store)).post("/v1/jobs", json=body, headers=headers)
    assert served.status_code == threaded.status_code == 422, served.text
    assert served.json()["error"]["field"] == field
    assert served.content == threaded.content
    assert [j.spec.name for j in pg.store.list_jobs(namespace=NS)] == ["one"]


def test_concurrent_reads_of_firings_answer_each_its_own_firing_as_the_stores_call(
    pg: Pg,
) -> None:
    """Many reads at once go as one statement (store/coalesced.py): each answers its
    own firing and attempts, as the store's own call does; an id with no firing is that
    read's FiringNotFoundError only; a read asked after a cancel committed sees it."""
    store = pg.store
    ids = [FiringId(pg.firing)]
    for n in range(5):
        ids.append(
            store.enqueue_now(
                JobSpec(name=f"many-{n}", task="report", schedule=now_schedule(), namespace=NS)
            ).id
        )
    # the first firing failed once and is queued again: an attempt to read
    (claim,) = store.claim("w1", tasks=["report"], limit=1)
    assert claim.firing.id == ids[0]
    at = datetime.now(UTC)
    failed = Completion(
        firing_id=claim.firing.id,
        claim_token=claim.claim_token,
        succeeded=False,
        started_at=at,
        finished_at=at,
        error="boom",
        retry_at=at,
    )
    assert store.complete([failed]) == [True]
    missing = FiringId(max(ids) + 1000)
    expected = [store.firing_with_attempts(i) for i in ids]

    async def body(reads: PgAsyncCalls) -> tuple[list[Any], Any]:
        answers = await asyncio.gather(
            *(reads.firing_with_attempts(i) for i in [*ids, missing, ids[0]]),
            return_exceptions=True,
        )
        store.cancel_firing(ids[3])  # committed before the next read is asked
        return answers, await reads.firing_with_attempts(ids[3])

    answers, after_cancel = _on_reads(PostgresStore(PG_URL, schema=pg.schema, pool_size=2), body)
    assert answers[: len(ids)] == expected
    assert [a.error for a in expected[0][1]] == ["boom"]  # its failed attempt
    assert isinstance(answers[len(ids)], FiringNotFoundError)
    assert answers[-1] == expected[0]
    assert after_cancel[0].state is FiringState.CANCELLED


def test_concurrent_reads_of_jobs_by_name_answer_each_its_own_job(pg: Pg) -> None:
    """Reads of jobs by name at once go as one statement: each answers the job of its own
    namespace and name, as the store's call; a name with no job (or only in another
    namespace) is that read's JobNotFoundError."""
    store = pg.store
    now = datetime.now(UTC)
    spec = JobSpec(name="x", task="report", schedule=every("1h"), namespace=NS)
    names = ["a", "b", "c"]
    for name in names:
        store.create_job(replace(spec, name=name), first_fire_at=now + timedelta(hours=1))
    store.create_job(
        replace(spec, name="other-only", namespace="team-b"), first_fire_at=now + timedelta(hours=1)
    )
    keys = [(NS, "c"), (NS, "a"), (NS, "missing"), (NS, "other-only"), ("team-b", "other-only")]
    keys.append((NS, "b"))

    async def body(reads: PgAsyncCalls) -> list[Any]:
        return await asyncio.gather(
            *(reads.get_job(ns, name) for ns, name in keys), return_exceptions=True
        )

    answers = _on_reads(PostgresStore(PG_URL, schema=pg.schema, pool_size=2), body)
    for (ns, name), answer in zip(keys, answers, strict=True):
        if name == "missing" or (ns, name) == (NS, "other-only"):
            assert isinstance(answer, JobNotFoundError), (ns, name, answer)
        else:
            assert answer == store.get_job(ns, name)


def test_an_enqueue_is_awaited_on_the_loop_and_what_needs_a_decision_takes_the_thread(
    pg: Pg, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POST /v1/firings`` of a served task is one statement awaited on the loop, with
    the thread path's document; an unserved task, an Idempotency-Key and the namespace's
    rate reached go to the thread path, which answers as before (422, 201 then 200, 429
    with its retry-after, nothing written)."""
    headers = pg.headers | {"Content-Type": "application/json"}
    pg.store.register_node(worker_node("w1", pg.store.now(), tasks=["report"]))
    threaded = TestClient(_app(pg.store))  # no lifespan: the thread path
    threads = _Threads(monkeypatch)
    with TestClient(_app(pg.store)) as client:
        # the first of a task learns on a store thread that a worker serves it
        first = client.post("/v1/firings", json={"task": "report"}, headers=headers)
        learned = list(threads.names)
        made = client.post("/v1/firings", json={"task": "report", "args": [7]}, headers=headers)
        on_loop = list(threads.names)[len(learned) :]
        unserved = client.post("/v1/firings", json={"task": "reprot"}, headers=headers)
        keyed = [
            client.post(
                "/v1/firings", json={"task": "report"}, headers=headers | {"Idempotency-Key": "k-1"}
            )
            for _ in range(2)
        ]
        before_rate = list(threads.names)
        pg.store.set_quota(NS, {"firings_per_minute": 1})
        # two more: one at least finds this minute's one firing taken (the first may be a
        # new minute's)
        limited = [
            client.post("/v1/firings", json={"task": "report"}, headers=headers) for _ in range(2)
        ]
        after_rate = list(threads.names)
    assert first.status_code == 201, first.text
    assert learned == ["principal_for", "_enqueue"]
    assert made.status_code == 201, made.text
    shown = threaded.get(f"/v1/firings/{made.json()['id']}", headers=headers)
    assert shown.status_code == 200
    assert {k: v for k, v in made.json().items() if k != "attempts"} == {
        k: v for k, v in shown.json().items() if k != "attempts"
    }
    assert made.json()["args"] == [7] and made.json()["state"] == "queued"
    assert on_loop == []  # on the loop: no store thread
    assert (unserved.status_code, unserved.json()["error"]["field"]) == (422, "task")
    assert [r.status_code for r in keyed] == [201, 200]
    assert keyed[0].json()["id"] == keyed[1].json()["id"]
    assert before_rate[len(learned) :].count("_enqueue") == 3  # unserved, keyed twice
    statuses = [r.status_code for r in limited]
    assert 429 in statuses
    refused = limited[statuses.index(429)]
    assert refused.json()["error"]["field"] == "quota.firings_per_minute"
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert after_rate[len(before_rate) :].count("_enqueue") >= 1  # the refusal's
    queued = pg.store.list_firings(namespace=NS, limit=100)
    # the fixture's, first, made, keyed once, and each 201 of the limited pair
    assert len(queued) == 4 + statuses.count(201)


def test_an_awaited_enqueue_of_a_name_taken_is_a_conflict_and_writes_nothing(pg: Pg) -> None:
    spec = JobSpec(name="one", task="report", schedule=now_schedule(), namespace=NS)  # taken

    async def body(reads: PgAsyncCalls) -> Any:
        return await reads.enqueue_now(spec)

    with pytest.raises(ConflictError) as caught:
        _on_reads(PostgresStore(PG_URL, schema=pg.schema, pool_size=1), body)
    assert caught.value.code == "job_exists"
    assert len(pg.store.list_firings(namespace=NS, limit=10)) == 1  # the fixture's alone
