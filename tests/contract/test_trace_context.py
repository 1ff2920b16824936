"""The trace context a job carries (JobSpec.trace_context, observability/tracing.py):
stored with the job, handed back with every claim of its firings, on every store."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from cronwheel.domain.models import JobSpec
from cronwheel.domain.schedules import NowSchedule
from cronwheel.store.protocol import DISPATCHER_LEASE, Completion, JobAdvance, PlannedFiring
from tests.contract.conftest import Harness, spec

PARENT = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
OTHER = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}


def _fire_once(h: Harness, name: str) -> None:
    job = h.store.get_job("default", name)
    lease = h.store.acquire_lease(DISPATCHER_LEASE, "leader", timedelta(seconds=10))
    assert lease is not None and job.next_fire_at is not None
    h.store.enqueue(
        lease,
        [
            JobAdvance(
                job_id=job.id,
                expected_next_fire_at=job.next_fire_at,
                new_next_fire_at=job.next_fire_at + timedelta(minutes=1),
                firings=[PlannedFiring(scheduled_for=job.next_fire_at)],
            )
        ],
    )


def test_an_enqueued_firing_is_claimed_with_its_trace_context(harness: Harness) -> None:
    carried = {**PARENT, "tracestate": "vendor=1"}
    harness.store.enqueue_now(
        JobSpec(name="now-1", task="t", schedule=NowSchedule(), trace_context=carried)
    )
    harness.store.enqueue_now(JobSpec(name="now-2", task="t", schedule=NowSchedule()))
    claims = harness.store.claim("w", tasks=["t"], limit=5)
    by_job = {c.firing.job_name: c.trace_context for c in claims}
    assert by_job == {"now-1": carried, "now-2": None}


def test_a_job_keeps_its_trace_context_across_upserts(harness: Harness) -> None:
    now = harness.now()
    traced = replace(spec("r"), trace_context=PARENT)
    harness.store.create_job(traced, first_fire_at=now)
    # a changed spec without a context keeps the one stored; a context replaces it
    harness.store.upsert_job(spec("r", max_attempts=4), first_fire_at=now)
    _fire_once(harness, "r")
    (c,) = harness.store.claim("w", tasks=["t"], limit=5)
    assert c.trace_context == PARENT
    assert c.policies.max_attempts == 4
    at = harness.now()
    done = Completion(
        firing_id=c.firing.id,
        claim_token=c.claim_token,
        succeeded=True,
        started_at=at,
        finished_at=at,
    )
    assert harness.store.complete([done]) == [True]
    harness.store.upsert_job(
        replace(spec("r", max_attempts=5), trace_context=OTHER), first_fire_at=now
    )
    # the same spec with another context: nothing changes (the context is not the spec)
    _, changed = harness.store.upsert_job(
        replace(spec("r", max_attempts=5), trace_context=PARENT), first_fire_at=now
    )
    assert not changed
    harness.advance(timedelta(minutes=1))
    _fire_once(harness, "r")
    (c,) = harness.store.claim("w", tasks=["t"], limit=5)
    assert c.trace_context == OTHER
