"""Tracing with OpenTelemetry (the ``otel`` extra; README "Tracing").

Imported only when tracing is on (``observability/tracing_switch.py``): this module
imports ``opentelemetry``. It uses the global tracer provider (the application's, or
``opentelemetry-instrument``'s) and the global propagator (W3C trace context and
baggage by default).

- **Producer** (:func:`produce`): ``App.enqueue`` / ``App.schedule`` and the API's
  ``POST /v1/firings`` / job writes open a span (``cronwheel.enqueue`` or
  ``cronwheel.schedule``, kind PRODUCER) under the current context (or, in the API,
  the request's ``traceparent`` when no server span is current) and store that span's
  context with the job (``JobSpec.trace_context``: traceparent, tracestate).
- **Batch** (:func:`traced_batch`): ``schedule_many``/``enqueue_many`` and the API's
  batch endpoints open ONE span (``cronwheel.schedule_many``/``cronwheel.enqueue_many``,
  kind PRODUCER) whose context every item of the batch carries.
- **Claim** (:meth:`Tracing.claimed`): one ``cronwheel.claim`` span (kind CLIENT) per
  claim that took firings, linked to each firing's carried context.
- **Run** (:meth:`Tracing.attempt_started`): one ``cronwheel.run`` span (kind CONSUMER)
  per attempt, current while the handler runs (threads, the event loop, a child
  process), ended with the outcome. Its parent is the carried context of a one-shot
  job (an enqueue: the enqueuer's trace continues). A recurring job's firing starts a
  trace of its own, linked to the registration's context: its firings run for months,
  and each is caused by the schedule, not by the request that registered the job (one
  trace per firing, instead of a months-long trace of thousands of runs that tracing
  backends truncate).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from cronwheel.domain.batch import BatchResult
from cronwheel.domain.ids import IdCodec
from cronwheel.domain.instants import format_instant
from cronwheel.domain.models import ClaimedFiring, Firing, Job, JobSpec
from cronwheel.errors import BatchError
from cronwheel.worker.context import Context
from cronwheel.worker.hooks import Outcome

TRACER_NAME = "cronwheel"
# in a stored trace context: the job recurs, so its firings link to it (new traces)
LINK_KEY = "cronwheel-link"
FLUSH_MS = 5000  # a child process flushes its spans before it exits, at most this long


def _tracer() -> trace.Tracer:
    # the global provider at each use: an application may set it after importing us
    return trace.get_tracer(TRACER_NAME)


def _carried(carrier: Mapping[str, str]) -> trace.SpanContext | None:
    """The span context a stored carrier describes (None if it describes none)."""
    span_context = trace.get_current_span(propagate.extract(carrier)).get_span_context()
    return span_context if span_context.is_valid else None


class Produced:
    """An open producer span: ``carrier`` goes with the job."""

    def __init__(self, span: Span, carrier: dict[str, str]) -> None:
        self.span = span
        self.carrier = carrier


W = TypeVar("W")
B = TypeVar("B")


def traced_write(
    spec: JobSpec,
    write: Callable[[JobSpec], W],
    *,
    name: str,
    ids: Callable[[], IdCodec],
    headers: Mapping[str, str] | None = None,
) -> W:
    """``write(spec)`` (a job, a firing, or either with a flag) inside a producer span
    (:func:`produce`), the span's context carried with the job; a span that records
    gets the ids users see of what was made (``ids``: their codec)."""
    with produce(spec, name=name, headers=headers) as produced:
        result = write(replace(spec, trace_context=produced.carrier or None))
        if produced.span.is_recording():  # the shown ids cost a keyed permutation each
            made = result[0] if isinstance(result, tuple) else result
            codec = ids()
            if isinstance(made, Firing):
                produced.span.set_attribute("cronwheel.job_id", codec.encode("job", made.job_id))
                produced.span.set_attribute("cronwheel.firing_id", codec.encode("firing", made.id))
            elif isinstance(made, Job):
                produced.span.set_attribute("cronwheel.job_id", codec.encode("job", made.id))
        return result


@contextlib.contextmanager
def produce(
    spec: JobSpec, *, name: str = "cronwheel.enqueue", headers: Mapping[str, str] | None = None
) -> Iterator[Produced]:
    """A producer span for registering ``spec``; ``headers``: an HTTP request's, whose
    ``traceparent`` is the parent when no span is current (no server instrumentation).
    An exception inside marks the span (recorded, status ERROR) and propagates."""
    parent = None
    if headers is not None and not trace.get_current_span().get_span_context().is_valid:
        parent = propagate.extract(headers)
    attributes: dict[str, Any] = {
        "cronwheel.job": spec.name,
        "cronwheel.namespace": spec.namespace,
        "cronwheel.task": spec.task,
        "cronwheel.schedule": spec.schedule.kind,
    }
    with _tracer().start_as_current_span(
        name, context=parent, kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        if spec.recurring and carrier:
            carrier[LINK_KEY] = "1"
        yield Produced(span, carrier)


def traced_batch(
    run: Callable[[Callable[[JobSpec], JobSpec]], BatchResult[B]],
    *,
    name: str,
    count: int,
    namespace: str,
    headers: Mapping[str, str] | None = None,
) -> BatchResult[B]:
    """A batch (``App.schedule_many``/``enqueue_many``, the API's batch endpoints) in ONE
    producer span: ``run(carry)`` writes it, ``carry(spec)`` giving each item's spec the
    span's context (as :func:`produce` does one spec's), so each run continues it (a
    recurring job's firings link to it). The span tells ``cronwheel.batch.items``,
    ``.accepted`` and ``.refused`` (an all-or-nothing batch refused: none accepted, the
    BatchError recorded)."""
    parent = None
    if headers is not None and not trace.get_current_span().get_span_context().is_valid:
        parent = propagate.extract(headers)
    attributes: dict[str, Any] = {"cronwheel.namespace": namespace, "cronwheel.batch.items": count}
    with _tracer().start_as_current_span(
        name, context=parent, kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        linked = dict(carrier, **{LINK_KEY: "1"}) if carrier else {}

        def carry(spec: JobSpec) -> JobSpec:
            if not carrier:
                return spec
            return replace(spec, trace_context=dict(linked if spec.recurring else carrier))

        try:
            result = run(carry)
        except BatchError as exc:
            span.set_attributes(
                {"cronwheel.batch.accepted": 0, "cronwheel.batch.refused": len(exc.errors)}
            )
            raise
        refused = len(result.errors)
        span.set_attributes(
            {"cronwheel.batch.accepted": len(result) - refused, "cronwheel.batch.refused": refused}
        )
        return result


class _RunScope:
    """One attempt's ``cronwheel.run`` span, current (attached) until :meth:`ended`."""

    def __init__(self, span: Span, parent: otel_context.Context) -> None:
        self.span = span
        self.context = trace.set_span_in_context(span, parent)
        self._token = otel_context.attach(self.context)

    def child_carrier(self) -> dict[str, str]:
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=self.context)
        return carrier

    def ended(
        self,
        outcome: Outcome,
        error: BaseException | None,
        error_text: str | None,
        retry_at: datetime | None,
    ) -> None:
        span = self.span
        span.set_attribute("cronwheel.outcome", outcome)
        if retry_at is not None:
            span.set_attribute("cronwheel.retry_at", format_instant(retry_at))
        if error is not None:
            span.record_exception(error)
        if outcome in ("failed", "retrying"):
            summary = (error_text or "").strip().splitlines()
            span.set_status(Status(StatusCode.ERROR, summary[-1] if summary else outcome))
        span.end()
        otel_context.detach(self._token)


class Tracing:
    """The worker's hooks (``worker/hooks.py``): claim and run spans."""

    def __init__(self) -> None:
        self.child_entry: Callable[[dict[str, str], Callable[[], None]], None] | None = (
            run_in_carried
        )

    def claimed(self, worker_id: str, claims: Sequence[ClaimedFiring], started_ns: int) -> None:
        links = []
        for claim in claims:
            span_context = None if not claim.trace_context else _carried(claim.trace_context)
            if span_context is not None:
                links.append(Link(span_context))
        span = _tracer().start_span(
            "cronwheel.claim",
            context=otel_context.Context(),  # its own trace: one claim serves many
            kind=SpanKind.CLIENT,
            attributes={"cronwheel.worker_id": worker_id, "cronwheel.claimed": len(claims)},
            links=links,
            start_time=started_ns,
        )
        span.end()

    def attempt_started(self, claim: ClaimedFiring, ctx: Context, lateness_ms: float) -> _RunScope:
        firing = claim.firing
        carrier = claim.trace_context
        parent = otel_context.Context()  # a new trace, unless the job carries one
        links: list[Link] = []
        if carrier:
            if LINK_KEY in carrier:
                span_context = _carried(carrier)
                links = [] if span_context is None else [Link(span_context)]
            else:
                parent = propagate.extract(carrier, context=otel_context.Context())
        span = _tracer().start_span(
            "cronwheel.run",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                "cronwheel.job": firing.job_name,
                "cronwheel.namespace": firing.namespace,
                "cronwheel.task": firing.task,
                "cronwheel.scheduled_for": format_instant(firing.scheduled_for),
                "cronwheel.attempt": firing.attempt,
                "cronwheel.lateness_ms": lateness_ms,
                "cronwheel.worker_id": ctx.worker_id,
            },
        )
        if span.is_recording():  # the ids users see cost a keyed permutation each
            shown = ctx.visible
            span.set_attributes({"cronwheel.job_id": shown.job_id, "cronwheel.firing_id": shown.id})
        return _RunScope(span, parent)


def run_in_carried(carrier: dict[str, str], call: Callable[[], None]) -> None:
    """In a process-isolated attempt's child: run ``call`` with the parent's
    ``cronwheel.run`` span as the current context, then flush this process's spans (a
    child exits without running atexit handlers)."""
    token = otel_context.attach(propagate.extract(carrier))
    try:
        call()
    finally:
        otel_context.detach(token)
        flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if flush is not None:
            flush(FLUSH_MS)
