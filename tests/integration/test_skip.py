"""Skipping one occurrence, end to end: dispatcher + worker + store on a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronwheel.domain.firing import FiringState
from cronwheel.domain.schedules import every
from cronwheel.domain.skips import occurrences_to_skip, skip_reason
from tests.integration.conftest import Rig

S = timedelta(seconds=1)


def test_the_skipped_occurrence_never_runs_and_the_next_one_does(rig: Rig) -> None:
    job = rig.app.schedule("record", every("10s"), name="tick")
    (skipped_at,) = occurrences_to_skip(job.spec, now=rig.clock.now(), next_n=1)
    assert skipped_at == datetime(2026, 3, 27, 23, 0, 10, tzinfo=UTC)
    (r,) = rig.store.skip_occurrences("default", "tick", [skipped_at], skip_reason("ops", "demo"))
    assert r.outcome == "skipped"
    d = rig.dispatcher(lead=timedelta(milliseconds=500))
    w = rig.worker()
    rig.run([d], w, until=25 * S, step=S / 2)
    assert [c["scheduled_for"] for c in rig.calls] == [skipped_at + 10 * S]
    firings = sorted(rig.store.list_firings(job_id=job.id), key=lambda f: f.scheduled_for)
    assert [(f.scheduled_for, f.state) for f in firings] == [
        (skipped_at, FiringState.SKIPPED),
        (skipped_at + 10 * S, FiringState.SUCCEEDED),
    ]
    assert firings[0].reason == "skipped by ops: demo" and firings[0].attempt == 0
    # the cursor went on past the skipped instant (the job was never paused)
    cursor = rig.store.get_job("default", "tick").next_fire_at
    assert cursor is not None and cursor > skipped_at + 10 * S


def test_a_queued_occurrence_skipped_before_a_worker_takes_it_never_runs(rig: Rig) -> None:
    job = rig.app.schedule("record", every("10s"), name="tick")
    d = rig.dispatcher(lead=timedelta(seconds=2))
    rig.run([d], None, until=9 * S, step=S / 2)  # 23:00:10 is enqueued ahead, not yet due
    (queued,) = rig.store.list_firings(job_id=job.id)
    assert queued.state is FiringState.QUEUED
    (r,) = rig.store.skip_occurrences("default", "tick", [queued.scheduled_for], "skipped by ops")
    assert (r.outcome, r.firing_id) == ("skipped", queued.id)
    rig.run([d], rig.worker(), until=12 * S, step=S / 2)
    assert [c["scheduled_for"] for c in rig.calls] == [queued.scheduled_for + 10 * S]
    assert rig.store.get_firing(queued.id).state is FiringState.SKIPPED
