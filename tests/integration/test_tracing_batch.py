"""Producer spans for batches (observability/tracing.py ``traced_batch``, README
"Tracing"): ``App.schedule_many``/``enqueue_many`` and the API's batch endpoints open
ONE span for the batch, whose context every item carries into its run; on every store.
The provider setup is test_tracing.py's, with an exporter of this module's."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once

from cronwheel import at, every
from cronwheel.errors import BatchError
from cronwheel.server import create_app
from tests.contract.conftest import Harness
from tests.contract.test_trace_context import _fire_once
from tests.integration import test_tracing as base
from tests.integration.test_tracing import PARENT_SPAN, TRACE_ID, drain, traced_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

EXPORTER = InMemorySpanExporter()  # this module's (test_tracing.py shuts its own down)


@pytest.fixture(scope="module", autouse=True)
def _provider() -> Iterator[None]:
    """As test_tracing.py's: the SDK provider with this module's exporter, global for
    this module only."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    saved = (trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE)
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, Once()
    trace.set_tracer_provider(provider)
    yield
    provider.shutdown()
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    EXPORTER.clear()
    yield
    EXPORTER.clear()


def spans(name: str) -> list[ReadableSpan]:
    return [s for s in EXPORTER.get_finished_spans() if s.name == name]


def one(name: str) -> ReadableSpan:
    (span,) = spans(name)
    return span


harness = base.harness
pg_harness = base.pg_harness


def _attributes(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_enqueue_many_is_one_span_that_every_run_continues(harness: Harness) -> None:
    app = traced_app(harness)

    @app.task(name="job")
    def handler(ctx: Any, n: int) -> None:
        pass

    items: list[Any] = [{"task": "job", "args": [n]} for n in range(3)]
    items.insert(1, {"task": "job", "colour": "red"})  # refused: not an enqueue field
    with trace.get_tracer("test").start_as_current_span("request") as request:
        result = app.enqueue_many(items)
    assert len(result.created) == 3
    assert drain(harness, app) == 3

    batch = one("cronwheel.enqueue_many")
    assert batch.kind is SpanKind.PRODUCER
    assert batch.parent is not None
    assert batch.parent.span_id == request.get_span_context().span_id
    assert _attributes(batch) == {
        "cronwheel.namespace": "default",
        "cronwheel.batch.items": 4,
        "cronwheel.batch.accepted": 3,
        "cronwheel.batch.refused": 1,
    }
    assert spans("cronwheel.enqueue") == []  # one span for the batch, none per item
    runs = spans("cronwheel.run")
    assert len(runs) == 3
    for run in runs:  # each run continues the batch's span, in the request's trace
        assert run.parent is not None and run.parent.span_id == batch.context.span_id
        assert run.context.trace_id == request.get_span_context().trace_id
    (claim,) = spans("cronwheel.claim")
    assert {link.context.span_id for link in claim.links} == {batch.context.span_id}


def test_schedule_many_links_recurring_jobs_and_continues_one_shots(harness: Harness) -> None:
    app = traced_app(harness)

    @app.task
    def tick(ctx: Any) -> None:
        pass

    later = harness.now() + timedelta(seconds=30)
    with trace.get_tracer("test").start_as_current_span("deploy"):
        result = app.schedule_many(
            [
                {"task": "tick", "schedule": every("1m"), "name": "recurring"},
                {"task": "tick", "schedule": at(later), "name": "once"},
            ]
        )
    assert result.ok
    batch = one("cronwheel.schedule_many")
    assert _attributes(batch)["cronwheel.batch.accepted"] == 2
    _fire_once(harness, "recurring")
    _fire_once(harness, "once")
    harness.advance(timedelta(minutes=1))
    assert drain(harness, app) == 2
    by_job = {_attributes(r)["cronwheel.job"]: r for r in spans("cronwheel.run")}
    recurring, once = by_job["recurring"], by_job["once"]
    assert recurring.parent is None  # a trace of its own, linked to the registration
    assert [link.context.span_id for link in recurring.links] == [batch.context.span_id]
    assert once.parent is not None and once.parent.span_id == batch.context.span_id


def test_a_refused_all_or_nothing_batch_marks_its_span(harness: Harness) -> None:
    app = traced_app(harness)
    items: list[dict[str, Any]] = [{"task": "t"}, {"task": "t", "colour": "red"}]
    with pytest.raises(BatchError):
        app.enqueue_many(items, all_or_nothing=True)
    batch = one("cronwheel.enqueue_many")
    assert _attributes(batch)["cronwheel.batch.accepted"] == 0
    assert _attributes(batch)["cronwheel.batch.refused"] == 1
    assert batch.status.status_code is StatusCode.ERROR
    assert harness.store.list_firings(namespace="default") == []


def test_the_batch_endpoints_carry_a_requests_traceparent(harness: Harness) -> None:
    app = traced_app(harness)

    @app.task
    def remote(ctx: Any) -> None:
        pass

    header = {"traceparent": f"00-{TRACE_ID}-{PARENT_SPAN}-01"}
    with TestClient(create_app(harness.store, auth_required=False, tracing=True)) as client:
        body = {"items": [{"task": "remote", "args": [n]} for n in range(2)]}
        r = client.post("/v1/firings/batch", json=body, headers=header)
        assert r.status_code == 200 and r.json()["created"] == 2, r.text
        job = {"name": "n", "task": "remote", "schedule": {"kind": "every", "interval": 3600}}
        r = client.post("/v1/jobs/batch", json={"items": [job]}, headers=header)
        assert r.status_code == 200 and r.json()["created"] == 1, r.text
    assert drain(harness, app) == 2
    enqueued, scheduled = one("cronwheel.enqueue_many"), one("cronwheel.schedule_many")
    for span, n in ((enqueued, 2), (scheduled, 1)):
        assert f"{span.context.trace_id:032x}" == TRACE_ID
        assert _attributes(span)["cronwheel.batch.accepted"] == n
    runs = spans("cronwheel.run")
    assert {r.parent.span_id for r in runs if r.parent} == {enqueued.context.span_id}
    assert {f"{r.context.trace_id:032x}" for r in runs} == {TRACE_ID}


def test_a_transactional_batch_carries_the_trace_once_committed(
    pg_harness: Harness,
) -> None:
    import psycopg

    from tests.conftest import PG_URL

    app = traced_app(pg_harness)

    @app.task
    def ship(ctx: Any, n: int) -> None:
        pass

    with (
        psycopg.connect(PG_URL) as conn,
        trace.get_tracer("test").start_as_current_span("checkout") as checkout,
    ):
        app.enqueue_many([{"task": "ship", "args": [n]} for n in range(2)], connection=conn)
        assert drain(pg_harness, app) == 0  # not committed yet
        conn.commit()
    pg_harness.advance(timedelta(minutes=1))
    assert drain(pg_harness, app) == 2
    batch = one("cronwheel.enqueue_many")
    assert batch.parent is not None
    assert batch.parent.span_id == checkout.get_span_context().span_id
    assert {r.parent.span_id for r in spans("cronwheel.run") if r.parent} == {batch.context.span_id}
