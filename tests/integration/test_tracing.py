"""Tracing (observability/tracing.py, README "Tracing") with the OpenTelemetry SDK's
in-memory exporter, on every store: the enqueuer's trace continues in the run span,
the handler's spans nest under it (threads, the event loop, a child process), failures
mark it, a recurring job's firings start linked traces, and the API carries a
request's ``traceparent``."""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once

from cronwheel import App, every
from cronwheel.domain.models import JobSpec
from cronwheel.domain.schedules import NowSchedule
from cronwheel.observability.tracing import LINK_KEY, Tracing, produce
from cronwheel.server import create_app
from cronwheel.web.ids import ids_for
from cronwheel.worker.worker import Worker
from tests.contract.conftest import STORE_KINDS, Harness
from tests.contract.test_trace_context import _fire_once
from tests.integration import traced_tasks

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's TestClient asks for httpx2
    from starlette.testclient import TestClient

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def _provider() -> Iterator[None]:
    """The SDK provider with the exporter, as the global one for this module only (the
    API sets it once per process: the reset afterwards is what OpenTelemetry's own test
    utilities do, so that the rest of the suite runs untraced)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    saved = (trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE)
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, Once()
    trace.set_tracer_provider(provider)
    yield
    provider.shutdown()
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved


@pytest.fixture(params=sorted(STORE_KINDS))
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    """Each store: memory, SQLite, PostgreSQL (tests/contract/conftest.py)."""
    yield from STORE_KINDS[request.param](tmp_path)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    EXPORTER.clear()
    yield
    EXPORTER.clear()


class StoreClock:
    """The store's clock for the App and the worker (the harness moves it)."""

    def __init__(self, h: Harness) -> None:
        self.h = h

    def now(self) -> datetime:
        return self.h.now()

    def monotonic(self) -> float:
        return time.monotonic()


def spans(name: str) -> list[ReadableSpan]:
    return [s for s in EXPORTER.get_finished_spans() if s.name == name]


def one(name: str) -> ReadableSpan:
    (span,) = spans(name)
    return span


def traced_app(h: Harness, app: App | None = None) -> App:
    app = app or App("memory://", tracing=True, allow_unknown_task=True)
    app.clock = StoreClock(h)
    app.use_store(h.store)
    return app


def drain(h: Harness, app: App) -> int:
    worker = Worker(h.store, app.registry, StoreClock(h), hooks=Tracing())
    return asyncio.run(worker.drain_once())


@pytest.mark.parametrize("is_async", [False, True])
def test_an_enqueue_in_a_span_continues_in_the_run_span(harness: Harness, is_async: bool) -> None:
    app = traced_app(harness)
    seen: list[Any] = []

    def work() -> None:
        seen.append(trace.get_current_span().get_span_context())
        with trace.get_tracer("handler").start_as_current_span("handler-work"):
            pass

    if is_async:

        @app.task(name="job")
        async def ahandler(ctx: Any, n: int) -> None:
            await asyncio.sleep(0)
            work()
    else:

        @app.task(name="job")
        def handler(ctx: Any, n: int) -> None:
            work()

    with trace.get_tracer("test").start_as_current_span("request") as request:
        firing = app.enqueue("job", 7)
    assert drain(harness, app) == 1

    enqueue, run = one("cronwheel.enqueue"), one("cronwheel.run")
    assert enqueue.kind is SpanKind.PRODUCER and run.kind is SpanKind.CONSUMER
    assert enqueue.parent is not None
    assert enqueue.parent.span_id == request.get_span_context().span_id
    # the run continues the enqueuer's trace: its parent is the enqueue span
    assert run.context.trace_id == request.get_span_context().trace_id
    assert run.parent is not None and run.parent.span_id == enqueue.context.span_id
    # the handler's own span nests under the run span, which is current in the handler
    assert seen[0].span_id == run.context.span_id
    work_span = one("handler-work")
    assert work_span.parent is not None and work_span.parent.span_id == run.context.span_id
    ids = ids_for(harness.store)
    shown = ids.encode("firing", firing.id)
    attributes = dict(run.attributes or {})
    assert attributes["cronwheel.firing_id"] == shown
    assert attributes["cronwheel.job_id"] == ids.encode("job", firing.job_id)
    assert attributes["cronwheel.job"] == firing.job_name
    assert attributes["cronwheel.namespace"] == "default"
    assert attributes["cronwheel.task"] == "job"
    assert attributes["cronwheel.attempt"] == 1
    assert attributes["cronwheel.outcome"] == "succeeded"
    assert attributes["cronwheel.scheduled_for"] == firing.scheduled_for.isoformat().replace(
        "+00:00", "Z"
    )
    assert isinstance(attributes["cronwheel.lateness_ms"], float)
    assert (enqueue.attributes or {})["cronwheel.firing_id"] == shown
    assert run.status.status_code is StatusCode.UNSET
    # the claim: a span of its own, linked to the firing's carried context
    claim = one("cronwheel.claim")
    assert claim.parent is None and claim.context.trace_id != run.context.trace_id
    assert [link.context.span_id for link in claim.links] == [enqueue.context.span_id]
    assert (claim.attributes or {})["cronwheel.claimed"] == 1


def test_a_failed_attempt_marks_its_run_span_and_a_retry_is_another_run(
    harness: Harness,
) -> None:
    app = traced_app(harness)

    @app.task(retries=1, retry_backoff=timedelta(seconds=1))
    def explodes(ctx: Any) -> None:
        raise ValueError("handler exploded")

    with trace.get_tracer("test").start_as_current_span("request"):
        app.enqueue("explodes")
    assert drain(harness, app) == 1
    harness.advance(timedelta(seconds=5))  # past the retry's backoff
    assert drain(harness, app) == 1

    enqueue = one("cronwheel.enqueue")
    first, second = sorted(spans("cronwheel.run"), key=lambda s: s.start_time or 0)
    for span, attempt, outcome in ((first, 1, "retrying"), (second, 2, "failed")):
        attributes = dict(span.attributes or {})
        assert (attributes["cronwheel.attempt"], attributes["cronwheel.outcome"]) == (
            attempt,
            outcome,
        )
        assert span.parent is not None and span.parent.span_id == enqueue.context.span_id
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "ValueError: handler exploded"
        (event,) = span.events
        assert event.name == "exception"
        assert (event.attributes or {})["exception.type"] == "ValueError"
    assert "cronwheel.retry_at" in (first.attributes or {})


@pytest.mark.parametrize("task", ["in_child", "in_child_async"])
def test_a_process_isolated_handler_continues_the_run_span(
    harness: Harness, tmp_path: Path, task: str
) -> None:
    app = traced_app(harness, traced_tasks.app)
    out = tmp_path / "seen.jsonl"
    with trace.get_tracer("test").start_as_current_span("request") as request:
        app.enqueue(task, out=str(out))
    assert drain(harness, app) == 1

    run = one("cronwheel.run")
    assert (run.attributes or {})["cronwheel.outcome"] == "succeeded"
    assert run.context.trace_id == request.get_span_context().trace_id
    (seen,) = [json.loads(line) for line in out.read_text().splitlines()]
    # in the child (no SDK there: the carried context is current as it came) the
    # current span is the parent's run span, and a span the handler opens is in its trace
    assert seen["handler"] == {"trace_id": run.context.trace_id, "span_id": run.context.span_id}
    assert seen["inner"]["trace_id"] == run.context.trace_id


def test_each_firing_of_a_recurring_job_is_a_trace_linked_to_its_registration(
    harness: Harness,
) -> None:
    app = traced_app(harness)

    @app.task
    def tick(ctx: Any) -> None:
        pass

    with trace.get_tracer("test").start_as_current_span("deploy") as deploy:
        app.schedule("tick", every("1m"))
    registered = one("cronwheel.schedule")
    assert registered.kind is SpanKind.PRODUCER
    assert registered.context.trace_id == deploy.get_span_context().trace_id
    for _ in range(2):
        _fire_once(harness, "tick")
        harness.advance(timedelta(minutes=1))
        assert drain(harness, app) == 1
    runs = spans("cronwheel.run")
    assert len(runs) == 2
    # a new trace per firing (a root span), linked to the registration's span
    assert len({r.context.trace_id for r in runs} | {registered.context.trace_id}) == 3
    for run in runs:
        assert run.parent is None
        assert [link.context.span_id for link in run.links] == [registered.context.span_id]
        assert (run.attributes or {})["cronwheel.outcome"] == "succeeded"


TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_SPAN = "b7ad6b7169203331"


def test_the_api_carries_a_requests_traceparent(harness: Harness) -> None:
    app = traced_app(harness)

    @app.task
    def remote(ctx: Any) -> None:
        pass

    header = {"traceparent": f"00-{TRACE_ID}-{PARENT_SPAN}-01"}
    with TestClient(create_app(harness.store, auth_required=False, tracing=True)) as client:
        r = client.post("/v1/firings", json={"task": "remote"}, headers=header)
        assert r.status_code == 201, r.text
        shown = r.json()["id"]
        job = {"name": "nightly", "task": "remote", "schedule": {"kind": "every", "interval": 3600}}
        r = client.post("/v1/jobs", json=job, headers=header)
        assert r.status_code == 201, r.text
        # without the header: a trace of its own
        r = client.post("/v1/firings", json={"task": "remote"})
        assert r.status_code == 201, r.text
    assert drain(harness, app) == 2

    finished = {s.context.span_id: s for s in EXPORTER.get_finished_spans()}

    def ancestors(span: ReadableSpan) -> list[str]:
        """The span ids above ``span``, nearest first (FastAPI's own server spans, when
        it has them, lie between the request's parent and ours)."""
        up: list[str] = []
        while span.parent is not None:
            up.append(f"{span.parent.span_id:016x}")
            if span.parent.span_id not in finished:
                break
            span = finished[span.parent.span_id]
        return up

    enqueued = sorted(spans("cronwheel.enqueue"), key=lambda s: s.start_time or 0)
    scheduled = one("cronwheel.schedule")
    for span in (enqueued[0], scheduled):
        assert f"{span.context.trace_id:032x}" == TRACE_ID
        assert ancestors(span)[-1] == PARENT_SPAN
    assert (enqueued[0].attributes or {})["cronwheel.firing_id"] == shown
    assert "cronwheel.job_id" in (scheduled.attributes or {})
    assert f"{enqueued[1].context.trace_id:032x}" != TRACE_ID
    assert PARENT_SPAN not in ancestors(enqueued[1])
    runs = {s.parent.span_id: s for s in spans("cronwheel.run") if s.parent is not None}
    assert set(runs) == {enqueued[0].context.span_id, enqueued[1].context.span_id}
    assert f"{runs[enqueued[0].context.span_id].context.trace_id:032x}" == TRACE_ID


def test_without_tracing_nothing_is_carried(harness: Harness) -> None:
    app = App("memory://", tracing=False, allow_unknown_task=True)
    app.clock = StoreClock(harness)
    app.use_store(harness.store)

    @app.task
    def plain(ctx: Any) -> None:
        pass

    with trace.get_tracer("test").start_as_current_span("request"):
        app.enqueue("plain")
    (claim,) = harness.store.claim("w", tasks=["plain"], limit=1)
    assert claim.trace_context is None
    assert [s.name for s in EXPORTER.get_finished_spans()] == ["request"]


def test_a_producer_without_a_current_span_takes_the_headers_traceparent() -> None:
    """An API without server spans (FastAPI's telemetry off): the request's header."""
    spec = JobSpec(name="j", task="t", schedule=NowSchedule())
    header = {"traceparent": f"00-{TRACE_ID}-{PARENT_SPAN}-01"}
    with produce(spec, headers=header) as produced:
        pass
    span = one("cronwheel.enqueue")
    assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT_SPAN
    assert produced.carrier["traceparent"] == f"00-{TRACE_ID}-{span.context.span_id:016x}-01"
    assert LINK_KEY not in produced.carrier
    # inside a current span, that span is the parent (the header is a server's business)
    EXPORTER.clear()
    with (
        trace.get_tracer("test").start_as_current_span("server") as server,
        produce(spec, headers=header),
    ):
        pass
    span = one("cronwheel.enqueue")
    assert span.parent is not None and span.parent.span_id == server.get_span_context().span_id


@pytest.fixture
def pg_harness(tmp_path: Path) -> Iterator[Harness]:
    from tests.contract.pg_harness import postgres_harness

    yield from postgres_harness(tmp_path)


def test_a_transactional_enqueue_carries_the_trace_once_committed(pg_harness: Harness) -> None:
    """``App.enqueue(connection=...)`` (README "Transactional enqueue", PostgreSQL): the
    context is written in the caller's transaction with the firing, and continues in
    the run."""
    import psycopg

    from tests.conftest import PG_URL

    harness = pg_harness
    app = traced_app(harness)

    @app.task
    def ship(ctx: Any) -> None:
        pass

    with (
        psycopg.connect(PG_URL) as conn,
        trace.get_tracer("test").start_as_current_span("checkout") as checkout,
    ):
        app.enqueue("ship", connection=conn)
        assert drain(harness, app) == 0  # not committed yet: nothing to claim
        conn.commit()
    harness.advance(timedelta(minutes=1))  # the caller's clock is the server's own
    assert drain(harness, app) == 1
    enqueue, run = one("cronwheel.enqueue"), one("cronwheel.run")
    assert enqueue.parent is not None
    assert enqueue.parent.span_id == checkout.get_span_context().span_id
    assert run.parent is not None and run.parent.span_id == enqueue.context.span_id
