"""A catch-up never displaces an on-time firing (dispatcher + worker on a fake clock).

A job capped at one (overlap ``skip``) every 10 s; its leader dies after 23:00:10 and
another takes over at 23:00:49.7, when 23:00:20/30/40 are past the misfire grace (1 s)
and 23:00:50 is within the new leader's lead. The misfire policy's catch-up and the
on-time firing would fall due together: under the cap the older one would run and the
on-time one end SKIPPED. Instead the catch-ups that do not fit beside it are coalesced
into it, recorded in the job's events (``jobs explain``: ``coalesced``) and in its note.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.domain.fates import explain
from cronwheel.domain.firing import FiringState
from cronwheel.domain.schedules import every
from tests.integration.conftest import Rig

S = timedelta(seconds=1)
MS = timedelta(milliseconds=1)


def at(second: int) -> datetime:
    return datetime(2026, 3, 27, 23, 0, second, tzinfo=UTC)


def _outage_then_takeover(rig: Rig, misfire: str, **policies: Any) -> Any:
    job = rig.app.schedule(
        "record", every("10s"), name=f"c-{misfire}", misfire=misfire, misfire_grace=1, **policies
    )
    first = rig.dispatcher("node-a", lead=500 * MS)
    rig.run([first], rig.worker(), until=12 * S, step=100 * MS)  # 23:00:10 runs
    assert [c["scheduled_for"] for c in rig.calls] == [at(10)]
    rig.clock.set(at(49) + 700 * MS)  # node-a died; its lease is long expired
    second = rig.dispatcher("node-b", lead=500 * MS)
    second.step()  # takeover: the catch-up and 23:00:50 are planned in one step
    rig.clock.set(at(50) + 200 * MS)  # the workers come back after both are due
    rig.run([second], rig.worker(), until=1 * S, step=100 * MS)
    return job


def _by_instant(rig: Rig, job: Any) -> dict[datetime, Any]:
    return {f.scheduled_for: f for f in rig.store.list_firings(job_id=job.id)}


@pytest.mark.parametrize("misfire", ["fire_once", "fire_all", "skip"])
def test_the_on_time_firing_runs_after_a_takeover(rig: Rig, misfire: str) -> None:
    job = _outage_then_takeover(rig, misfire)
    firings = _by_instant(rig, job)
    assert firings[at(50)].state is FiringState.SUCCEEDED
    assert [c["scheduled_for"] for c in rig.calls] == [at(10), at(50)]
    assert not [f for f in firings.values() if f.state is FiringState.SKIPPED]


@pytest.mark.parametrize(
    ("misfire", "coalesced", "missed"),
    [
        ("fire_once", [at(40)], [at(20), at(30)]),
        ("fire_all", [at(20), at(30), at(40)], []),
    ],
)
def test_explain_shows_which_catch_up_was_coalesced(
    rig: Rig, misfire: str, coalesced: list[datetime], missed: list[datetime]
) -> None:
    job = _outage_then_takeover(rig, misfire)
    on_time = _by_instant(rig, job)[at(50)]
    assert on_time.note is not None and "coalesced" in on_time.note
    job = rig.store.get_job_by_id(job.id)
    fates = {
        o.instant: o
        for o in explain(
            job,
            since=at(15),
            until=at(50),
            now=rig.clock.now(),
            firings=rig.store.list_firings(job_id=job.id),
            events=rig.store.job_events(job.id),
        )
    }
    assert sorted(t for t, o in fates.items() if o.fate == "coalesced") == coalesced
    assert sorted(t for t, o in fates.items() if o.fate == "missed") == missed
    for t in coalesced:
        assert "23:00:50" in fates[t].detail
    assert fates[at(50)].fate == "fired" and "coalesced" in fates[at(50)].detail


def test_a_catch_up_that_fits_beside_the_on_time_firing_still_runs(rig: Rig) -> None:
    """With room for both (buffer_one: one may wait), nothing is coalesced."""
    job = _outage_then_takeover(rig, "fire_once", overlap="buffer_one")
    firings = _by_instant(rig, job)
    assert firings[at(40)].state is FiringState.SUCCEEDED
    assert firings[at(50)].state is FiringState.SUCCEEDED
    assert sorted(c["scheduled_for"] for c in rig.calls) == [at(10), at(40), at(50)]
