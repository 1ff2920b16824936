"""Tasks of the tracing tests (tests/integration/test_tracing.py), importable by name so
that a process-isolated one runs in a child. Each writes the span context current in its
handler (and in a span it opens) to the file named by ``out``: one JSON object."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from opentelemetry import trace

from cronwheel import App, Context

app = App("memory://", allow_unknown_task=True, tracing=True)


def _current() -> dict[str, Any]:
    span_context = trace.get_current_span().get_span_context()
    return {"trace_id": span_context.trace_id, "span_id": span_context.span_id}


def _report(out: str) -> None:
    seen = {"handler": _current()}
    with trace.get_tracer("handler").start_as_current_span("handler-work"):
        seen["inner"] = _current()
    with open(out, "a") as f:
        f.write(json.dumps(seen) + "\n")


@app.task(isolation="process")
def in_child(ctx: Context, out: str) -> None:
    _report(out)


@app.task(isolation="process")
async def in_child_async(ctx: Context, out: str) -> None:
    await asyncio.sleep(0)
    _report(out)
