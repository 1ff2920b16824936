"""Tracing across real processes (README "Tracing"): ``cronwheel worker --tracing``
with an app that configures the OpenTelemetry SDK; firings enqueued by another process
inside a trace run in that trace, in the worker's threads and in a process-isolated
child (which exports its own spans)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from cronwheel import App
from tests.acceptance.conftest import Cluster, wait_until

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
PARENT_SPAN = 0x00F067AA0BA902B7


def _spans(path: Any) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_a_worker_with_tracing_continues_the_enqueuers_trace(cluster: Cluster) -> None:
    out = cluster.dir / "spans.jsonl"
    assert cluster.cli("migrate").returncode == 0
    worker = cluster.start("worker", "--tracing", app="traced_app:app", env={"SPANS_OUT": str(out)})
    # the enqueuer: a process whose current span came from upstream (a request's
    # traceparent); no SDK here, so the context passes through as it came
    app = App(cluster.store_url, tracing=True, allow_unknown_task=True)
    upstream = SpanContext(TRACE_ID, PARENT_SPAN, is_remote=True, trace_flags=TraceFlags(1))
    with trace.use_span(NonRecordingSpan(upstream)):
        app.enqueue("hello", "world")
        app.enqueue("isolated")
    app.close()

    def done() -> list[dict[str, Any]]:
        spans = _spans(out)
        names = [s["name"] for s in spans]
        ok = names.count("cronwheel.run") == 2 and {"hello-work", "isolated-work"} <= set(names)
        return spans if ok else []

    spans = wait_until(done, 60, message=lambda: f"spans: {_spans(out)}\n{worker.tail()}")
    runs = {s["attributes"]["cronwheel.task"]: s for s in spans if s["name"] == "cronwheel.run"}
    for run in runs.values():
        assert run["trace"] == f"{TRACE_ID:032x}"
        assert run["attributes"]["cronwheel.outcome"] == "succeeded"
        assert run["pid"] == worker.pid
    (hello,) = [s for s in spans if s["name"] == "hello-work"]
    assert hello["parent"] == runs["hello"]["span"] and hello["pid"] == worker.pid
    (isolated,) = [s for s in spans if s["name"] == "isolated-work"]
    assert isolated["parent"] == runs["isolated"]["span"]
    assert isolated["pid"] != worker.pid  # exported by the child before it exited
