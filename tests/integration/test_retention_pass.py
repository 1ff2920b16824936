"""The leader's retention pass, and `jobs explain` across the range it pruned."""

from __future__ import annotations

from datetime import timedelta

from cronwheel.domain.fates import explain
from cronwheel.domain.firing import FiringState
from cronwheel.domain.schedules import every
from tests.integration.conftest import Rig

H = timedelta(hours=1)
DAY = timedelta(days=1)


def test_the_leader_prunes_past_the_policy_and_explain_says_history_pruned(rig: Rig) -> None:
    start = rig.clock.now()
    job = rig.app.schedule("record", every("1h"), name="hourly")
    d = rig.dispatcher(retention_interval=H)
    w = rig.worker()
    rig.run([d], w, until=9 * DAY, step=timedelta(minutes=10))
    now = rig.clock.now()
    firings = rig.store.list_job_firings(job.id, limit=1000)
    assert firings and all(f.state is FiringState.SUCCEEDED for f in firings)
    oldest = min(f.finished_at for f in firings if f.finished_at)
    # nothing older than 7 days (and a pass an hour) is left; the last 7 days all are
    assert now - oldest <= 7 * DAY + H
    assert len(firings) >= 7 * 24 - 1
    assert d.stats.pruned >= 24
    events = rig.store.job_events(job.id)
    (pruned,) = [e for e in events if e.kind == "pruned"]
    assert pruned.count == d.stats.pruned

    def fates(since, until):
        return explain(
            rig.store.get_job_by_id(job.id),
            since=since,
            until=until,
            now=now,
            firings=rig.store.list_job_firings(
                job.id,
                scheduled_from=since,
                scheduled_to=until + timedelta(microseconds=1),
                limit=1000,
            ),
            events=events,
        )

    first_day = fates(start + H, start + DAY)
    assert {o.fate for o in first_day} == {"pruned"}
    assert "history pruned" in first_day[0].detail
    assert f"{pruned.count} succeeded" in first_day[0].detail
    assert {o.fate for o in fates(now - DAY, now - H)} == {"fired"}
