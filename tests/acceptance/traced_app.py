"""The app of tests/acceptance/test_tracing.py: the SDK configured at import (so the
worker, its forkserver and each process-isolated child have a provider), spans written
by each process to the file named by SPANS_OUT, one JSON object per line."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from cronwheel import App


class FileExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(os.environ["SPANS_OUT"], "a") as f:
            for s in spans:
                assert s.context is not None
                line = {
                    "name": s.name,
                    "trace": f"{s.context.trace_id:032x}",
                    "span": f"{s.context.span_id:016x}",
                    "parent": None if s.parent is None else f"{s.parent.span_id:016x}",
                    "pid": os.getpid(),
                    "attributes": dict(s.attributes or {}),
                }
                f.write(json.dumps(line) + "\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
trace.set_tracer_provider(provider)

app = App("memory://", allow_unknown_task=True)  # the worker's --store replaces the URL


@app.task
def hello(ctx: Any, who: str) -> None:
    with trace.get_tracer("acceptance").start_as_current_span("hello-work"):
        pass


@app.task(isolation="process")
def isolated(ctx: Any) -> None:
    with trace.get_tracer("acceptance").start_as_current_span("isolated-work"):
        pass
