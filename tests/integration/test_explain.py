"""`jobs explain`: every nominal occurrence gets a fate, including DST-moved ones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronwheel.domain.fates import explain
from cronwheel.domain.schedules import cron, every
from tests.integration.conftest import Rig

S = timedelta(seconds=1)


def _explain(rig: Rig, job_id: int, since: datetime, until: datetime):
    job = rig.store.get_job_by_id(job_id)  # type: ignore[arg-type]
    firings = rig.store.list_job_firings(job.id, limit=1000)
    return explain(
        job,
        since=since,
        until=until,
        now=rig.clock.now(),
        firings=firings,
        events=rig.store.job_events(job.id, limit=1000),
    )


def test_dst_fates_over_berlin_spring_forward(rig: Rig) -> None:
    moved = rig.app.schedule("record", cron("30 2 * * *", tz="Europe/Berlin"), name="moved")
    dropped = rig.app.schedule(
        "record", cron("30 2 * * *", tz="Europe/Berlin", dst_gap="skip"), name="dropped"
    )
    d = rig.dispatcher()
    w = rig.worker()
    for at in (
        datetime(2026, 3, 28, 1, 29, 50, tzinfo=UTC),
        datetime(2026, 3, 29, 0, 59, 50, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 29, 50, tzinfo=UTC),
    ):
        rig.clock.set(at)
        rig.run([d], w, until=20 * S, step=S)
    since, until = datetime(2026, 3, 28, tzinfo=UTC), datetime(2026, 3, 30, 12, tzinfo=UTC)
    fates = [(o.fate, o.instant) for o in _explain(rig, moved.id, since, until)]
    assert fates == [
        ("fired", datetime(2026, 3, 28, 1, 30, tzinfo=UTC)),
        ("fired (dst_moved)", datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),
        ("fired", datetime(2026, 3, 30, 0, 30, tzinfo=UTC)),
    ]
    fates = [(o.fate, o.instant) for o in _explain(rig, dropped.id, since, until)]
    assert fates == [
        ("fired", datetime(2026, 3, 28, 1, 30, tzinfo=UTC)),
        ("dst_skipped", None),
        ("fired", datetime(2026, 3, 30, 0, 30, tzinfo=UTC)),
    ]


def test_paused_missed_skipped_and_upcoming(rig: Rig) -> None:
    start = rig.clock.now()
    job = rig.app.schedule(
        "record", every("10s"), name="p", misfire_grace=1, misfire="skip", visibility_timeout=3600
    )
    d = rig.dispatcher()
    rig.run([d], rig.worker(), until=15 * S)  # 23:00:10 fired
    rig.store.set_paused("default", "p", True)
    rig.run([d], None, until=30 * S)  # :20 :30 :40 while paused
    rig.store.set_paused("default", "p", False)
    rig.run([d], None, until=5 * S)  # 23:00:50 enqueued...
    assert len(rig.store.claim("slow", tasks=["record"], limit=1)) == 1  # ...and held running
    rig.run([d], rig.worker(), until=20 * S)  # ...so 23:01:00 is skipped by overlap
    occurrences = _explain(rig, job.id, start + S, rig.clock.now() + 20 * S)
    fates = [o.fate for o in occurrences]
    assert fates[:3] == ["fired", "paused", "paused"]
    assert "skipped" in fates
    assert fates[-1] == "upcoming"
    assert all(o.detail for o in occurrences)
