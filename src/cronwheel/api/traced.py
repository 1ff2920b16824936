"""The API's producer spans (README "Tracing"): with tracing on (``create_api(...,
tracing=True)``, ``cronwheel api --tracing`` or ``CRONWHEEL_TRACING=1``), a write that
registers a job or enqueues a firing stores the trace context of a ``cronwheel.enqueue``
or ``cronwheel.schedule`` span, whose parent is the request's (its server span, else its
``traceparent`` header). Off, nothing of OpenTelemetry is imported."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from fastapi import Request

from cronwheel.api.convert import ids_of
from cronwheel.domain.batch import BatchResult
from cronwheel.domain.models import JobSpec

T = TypeVar("T")


def tracing_on(request: Request) -> bool:
    """Whether the app carries trace contexts with what it writes."""
    return bool(getattr(request.app.state, "tracing", False))


def traced(request: Request, spec: JobSpec, write: Callable[[JobSpec], T], *, name: str) -> T:
    """``write(spec)``, with the request's trace context carried when tracing is on."""
    if not tracing_on(request):
        return write(spec)
    from cronwheel.observability.tracing import traced_write

    return traced_write(
        spec, write, name=name, ids=lambda: ids_of(request), headers=request.headers
    )


def traced_batch(
    request: Request,
    run: Callable[[Callable[[JobSpec], JobSpec]], BatchResult[T]],
    *,
    name: str,
    count: int,
    namespace: str,
) -> BatchResult[T]:
    """``run(carry)`` (a batch endpoint's write), in one producer span for the batch when
    tracing is on (each item's spec passed through ``carry``)."""
    if not tracing_on(request):
        return run(lambda spec: spec)
    from cronwheel.observability.tracing import traced_batch as produce_batch

    return produce_batch(run, name=name, count=count, namespace=namespace, headers=request.headers)
