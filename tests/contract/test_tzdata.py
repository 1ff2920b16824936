"""One tz database across the cluster, on every store: two tz database versions built
with zic in the test (a zone whose DST start differs between them), a job's cursor
re-resolved with its move recorded, a mismatched node refused leadership."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cronwheel.dispatch import tzdata
from cronwheel.dispatch.dispatcher import Dispatcher, DispatcherConfig
from cronwheel.domain.clock import FakeClock
from cronwheel.domain.models import Job, JobId, JobPolicies, JobSpec, NodeInfo
from cronwheel.domain.schedules import cron
from cronwheel.domain.tzdb import (
    TzDatabase,
    open_tz_database,
    tz_database,
    use_tz_database,
    zone_digests,
    zone_files,
    zone_from_bytes,
)
from cronwheel.store.protocol import TzRecord
from tests.contract.conftest import Harness

ZIC = shutil.which("zic") or "/usr/sbin/zic"

# Test/Zone: CET/CEST; DST starts on the last Sunday of March in 2099a, on the second
# Sunday of March in 2099b (so 20 March is winter time in a, summer time in b).
# Test/Other: the same rules in both versions.
SOURCE = """# version {version}
Rule\tTestR\t2000\tmax\t-\tMar\t{start}\t2:00\t1:00\tS
Rule\tTestR\t2000\tmax\t-\tOct\tlastSun\t3:00\t0\t-
Rule\tOtherR\t2000\tmax\t-\tMar\tlastSun\t2:00\t1:00\tS
Rule\tOtherR\t2000\tmax\t-\tOct\tlastSun\t3:00\t0\t-
Zone\tTest/Zone\t1:00\tTestR\tCE%sT
Zone\tTest/Other\t1:00\tOtherR\tCE%sT
Zone\tEtc/UTC\t0\t-\tUTC
Link\tEtc/UTC\tUTC
"""


def build_tzdb(root: Path, version: str, dst_start: str) -> TzDatabase:
    """Compile a two-zone tz database of ``version`` into ``root`` (zic), with the
    tzdata.zi the loader reads the version from."""
    if not Path(ZIC).exists():
        pytest.fail(f"zic is needed to build test tz databases: {ZIC} not found")
    root.mkdir(parents=True)
    source = root / "tzdata.zi"
    source.write_text(SOURCE.format(version=version, start=dst_start), encoding="utf-8")
    subprocess.run([ZIC, "-d", str(root), str(source)], check=True, capture_output=True)
    return open_tz_database(str(root))


@pytest.fixture
def versions(tmp_path: Path) -> Iterator[tuple[TzDatabase, TzDatabase]]:
    before = tz_database()
    a = build_tzdb(tmp_path / "2099a", "2099a", "lastSun")
    b = build_tzdb(tmp_path / "2099b", "2099b", "Sun>=8")
    yield a, b
    use_tz_database(before.source)


def _node(node_id: str, db: TzDatabase, now: datetime) -> NodeInfo:
    return NodeInfo(
        id=node_id,
        kind="scheduler",
        hostname="host",
        pid=1,
        started_at=now,
        heartbeat_at=now,
        tz_source=db.source,
        tz_version=db.version,
    )


def _dispatcher(h: Harness, holder: str) -> tuple[Dispatcher, FakeClock]:
    clock = FakeClock(h.now())
    config = DispatcherConfig(lease_ttl=timedelta(seconds=3))
    return Dispatcher(h.store, clock, config=config, holder=holder), clock


def _advance(h: Harness, clocks: list[FakeClock], by: timedelta) -> None:
    h.advance(by)
    for clock in clocks:
        clock.advance(by)


def test_a_new_version_moves_cursors_and_a_mismatched_node_is_refused(
    harness: Harness, versions: tuple[TzDatabase, TzDatabase]
) -> None:
    a, b = versions
    store = harness.store
    use_tz_database(a.source)
    assert tz_database().version == "2099a"
    now = harness.now()
    # 20 March 09:30 local: 08:30Z under 2099a (CET), 07:30Z under 2099b (CEST)
    moving = cron("30 9 20 3 *", "Test/Zone")
    steady = cron("30 9 20 3 *", "Test/Other")
    cursor_a = moving.next_after(now)
    assert cursor_a is not None
    assert cursor_a.astimezone(UTC).hour == 8
    hourly = cron("0 * * * *", "Test/Zone")  # its zone changed, its instants did not
    for name, schedule in (
        ("moving", moving),
        ("steady", steady),
        ("paused", moving),
        ("hourly", hourly),
    ):
        job_spec = JobSpec(name=name, task="t", schedule=schedule, policies=JobPolicies())
        store.create_job(job_spec, first_fire_at=schedule.next_after(now))
    store.set_paused("default", "paused", True)

    # node A (2099a) leads and records its tz database
    store.register_node(_node("A", a, now))
    leader_a, clock_a = _dispatcher(harness, "A")
    leader_a.step()
    assert leader_a.is_leader
    record = store.tz_record()
    assert record is not None
    assert record.version == "2099a"
    assert record.zones["Test/Zone"] != ""
    assert store.status().tzdata == record

    # node B (2099b) joins: refused leadership while A (2099a) is live
    use_tz_database(b.source)
    store.register_node(_node("B", b, harness.now()))
    standby_b, clock_b = _dispatcher(harness, "B")
    _advance(harness, [clock_a, clock_b], timedelta(seconds=4))  # A's lease has expired
    standby_b.step()
    assert not standby_b.is_leader
    assert standby_b.tz_refusal is not None
    assert "2099b" in standby_b.tz_refusal
    assert "2099a" in standby_b.tz_refusal
    assert standby_b.stats.tz_refusals == 1
    assert store.get_job("default", "moving").next_fire_at == cursor_a  # nothing moved

    # A is gone (no heartbeat for longer than the liveness window): B may lead, adopts
    # 2099b and re-resolves the cursor of the zone whose rules changed
    _advance(harness, [clock_a, clock_b], timedelta(seconds=31))
    store.heartbeat_node("B")
    standby_b.step()
    assert standby_b.is_leader
    assert standby_b.tz_refusal is None
    record = store.tz_record()
    assert record is not None
    assert record.version == "2099b"
    moved = store.get_job("default", "moving")
    assert moved.next_fire_at == cursor_a - timedelta(hours=1)
    assert store.get_job("default", "steady").next_fire_at == steady.next_after(now)
    events = [e for e in store.job_events(moved.id) if e.kind == "tz_moved"]
    assert len(events) == 1
    assert events[0].first_at == cursor_a
    assert events[0].last_at == cursor_a - timedelta(hours=1)
    assert events[0].detail is not None
    assert "2099a -> 2099b" in events[0].detail
    assert "Test/Zone" in events[0].detail
    assert store.get_job("default", "paused").next_fire_at == cursor_a - timedelta(hours=1)
    assert standby_b.stats.tz_moved == 2  # "moving" and the paused one
    for name in ("steady", "hourly"):
        job = store.get_job("default", name)
        assert not [e for e in store.job_events(job.id) if e.kind == "tz_moved"]
    # the hourly job's cursor did not move with the zone; the hour may strike during the
    # test's ~35 s (from a start just before it), and then the leader fired it and moved on
    cursor, first = store.get_job("default", "hourly").next_fire_at, hourly.next_after(now)
    assert first is not None
    struck = first <= harness.now() + timedelta(seconds=5)
    assert cursor == first or (struck and cursor == hourly.next_after(first))

    # now node A (2099a) is the mismatched one while B (2099b) is live
    reason = tzdata.leadership_refusal(store, a, alive_within=timedelta(seconds=30))
    assert reason is not None
    assert "2099a" in reason
    # a second term of B adopts nothing again
    lease = standby_b.lease
    assert lease is not None
    assert tzdata.adopt(store, lease, b, keep_lease=lambda: None) is None
    # a leader that lost the lease after moving the cursors, before recording its
    # version: the next one re-resolves, and moves nothing twice
    store.record_tz(
        lease, TzRecord(source=a.source, version=a.version, zones=zone_digests(a)), zone_files(a)
    )
    again = tzdata.adopt(store, lease, b, keep_lease=lambda: None)
    assert again is not None
    assert again.zones == ["Test/Zone"]
    assert again.moved == []
    assert len([e for e in store.job_events(moved.id) if e.kind == "tz_moved"]) == 1


def test_the_first_leader_records_without_moving(
    harness: Harness, versions: tuple[TzDatabase, TzDatabase]
) -> None:
    a, _ = versions
    use_tz_database(a.source)
    store = harness.store
    schedule = cron("30 9 20 3 *", "Test/Zone")
    job_spec = JobSpec(name="j", task="t", schedule=schedule, policies=JobPolicies())
    job = store.create_job(job_spec, first_fire_at=schedule.next_after(harness.now()))
    leader, _clock = _dispatcher(harness, "A")
    leader.step()
    assert leader.is_leader
    record = store.tz_record()
    assert record is not None
    assert (record.source, record.version) == (a.source, "2099a")
    assert store.get_job("default", "j").next_fire_at == job.next_fire_at
    assert leader.stats.tz_moved == 0


def test_a_node_reports_its_tz_database(harness: Harness, versions: Any) -> None:
    a, _ = versions
    now = harness.now()
    harness.store.register_node(_node("n1", a, now))
    (node,) = harness.store.list_nodes()
    assert (node.tz_source, node.tz_version) == (a.source, "2099a")


def test_the_base_is_the_last_instant_the_cursor_passed(
    harness: Harness, versions: tuple[TzDatabase, TzDatabase]
) -> None:
    """A job whose last instants were missed (a misfire policy dropped them) is
    re-resolved from the last missed one, not from its last firing: no dropped instant
    comes back."""
    a, b = versions
    use_tz_database(b.source)
    now = harness.now()
    moving = cron("30 9 20 3 *", "Test/Zone")
    job_spec = JobSpec(name="j", task="t", schedule=moving, policies=JobPolicies())
    cursor_b = moving.next_after(now)
    assert cursor_b is not None
    # as if stored under 2099a: the cursor one hour later (08:30Z), after a missed
    # instant a year earlier and a firing two years earlier
    job = harness.store.create_job(job_spec, first_fire_at=cursor_b + timedelta(hours=1))
    missed_at = cursor_b.replace(year=cursor_b.year - 1)
    fired_at = cursor_b.replace(year=cursor_b.year - 2)
    move = tzdata.reresolve(
        replace(job, last_fired_at=fired_at, created_at=fired_at, updated_at=fired_at),
        missed_at,
        old_version=a.version,
        new=b,
    )
    assert move is not None
    assert (move.old, move.new) == (cursor_b + timedelta(hours=1), cursor_b)
    # from the firing alone, last year's (missed) instant would come back
    back = tzdata.reresolve(
        replace(job, last_fired_at=fired_at, created_at=fired_at, updated_at=fired_at),
        None,
        old_version=a.version,
        new=b,
    )
    assert back is not None
    assert back.new == missed_at
    # an end bound before the new instant ends the schedule
    bounded = replace(job, spec=replace(job.spec, end_at=cursor_b - timedelta(minutes=1)))
    ended = tzdata.reresolve(bounded, missed_at, old_version=a.version, new=b)
    assert ended is not None
    assert ended.new is None


def test_an_occurrence_that_fired_never_fires_again_under_new_rules(
    harness: Harness, versions: tuple[TzDatabase, TzDatabase]
) -> None:
    """The old rules (2099b: summer time from the second Sunday of March) fire 20 March
    09:30 at 07:30Z; the new ones (2099a: from the last Sunday) put that wall time at
    08:30Z, after the firing. Re-resolved by wall time (the old zone files stored by the
    old leader), the next firing is 21 March 09:30 (08:30Z), not 20 March again."""
    a, b = versions
    store = harness.store
    use_tz_database(b.source)
    daily = cron("30 9 * * *", "Test/Zone")
    start = harness.now()
    year = start.year + (1 if (start.month, start.day) >= (3, 10) else 0)
    day = datetime(year, 3, 20, 7, 30, tzinfo=UTC)  # 09:30 CEST under 2099b
    assert daily.next_after(day - timedelta(days=1)) == day
    job_spec = JobSpec(name="daily", task="t", schedule=daily, policies=JobPolicies())
    job = store.create_job(job_spec, first_fire_at=day)
    harness.advance(day - timedelta(milliseconds=200) - start)
    store.register_node(_node("B", b, harness.now()))
    old_leader, _clock_b = _dispatcher(harness, "B")
    old_leader.step()  # leads, records 2099b and its zone files, fires 20 March
    assert old_leader.is_leader
    assert [f.scheduled_for for f in store.list_firings(job_id=job.id)] == [day]
    fired = store.get_job("default", "daily")
    assert fired.last_fired_at == day
    assert fired.next_fire_at == day + timedelta(days=1)
    old_leader.release()
    store.remove_node("B")

    use_tz_database(a.source)
    new_leader, _clock_a = _dispatcher(harness, "A")
    new_leader.step()
    assert new_leader.is_leader
    moved = store.get_job("default", "daily")
    assert moved.next_fire_at == day + timedelta(days=1, hours=1)  # 21 March 09:30 CET
    (event,) = [e for e in store.job_events(job.id) if e.kind == "tz_moved"]
    assert (event.first_at, event.last_at) == (day + timedelta(days=1), moved.next_fire_at)
    assert [f.scheduled_for for f in store.list_firings(job_id=job.id)] == [day]


def test_an_occurrence_keeps_its_place_in_a_repeated_hour(
    versions: tuple[TzDatabase, TzDatabase],
) -> None:
    """Both versions repeat 02:00-03:00 on the last Sunday of October (only their March
    rule differs): a job firing 02:30 twice, whose first 02:30 fired, keeps the second
    as its cursor when re-resolved; one whose second fired keeps the next day's."""
    a, b = versions
    use_tz_database(b.source)
    old_zone = zone_from_bytes("Test/Zone", zone_files(a)["Test/Zone"])
    twice = cron("30 2 * * *", "Test/Zone", dst_overlap="twice")
    first = datetime(2030, 10, 27, 0, 30, tzinfo=UTC)  # 02:30 CEST
    second = datetime(2030, 10, 27, 1, 30, tzinfo=UTC)  # 02:30 CET
    assert twice.next_after(first) == second
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    job_spec = JobSpec(name="j", task="t", schedule=twice, policies=JobPolicies())
    job = Job(
        id=JobId(1),
        spec=job_spec,
        next_fire_at=second,
        last_fired_at=first,
        paused=False,
        missed_total=0,
        created_at=t0,
        updated_at=t0,
    )
    assert tzdata.reresolve(job, None, old_version="2099a", new=b, old_zone=old_zone) is None
    after_second = replace(job, last_fired_at=second, next_fire_at=twice.next_after(second))
    assert (
        tzdata.reresolve(after_second, None, old_version="2099a", new=b, old_zone=old_zone) is None
    )
