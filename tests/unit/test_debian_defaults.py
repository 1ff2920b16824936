"""cronwheel's default DST policies are Debian cron's, checked against an emulation of its loop.

The emulation (``debian_cron.py``, written from the algorithm of Debian's cron.c)
runs each expression alone through both 2026 transition days of Berlin (1 h, at
01:00Z), New York (1 h, at 02:00 local) and Lord Howe Island (30 minutes), from 6
hours before each change to 6 hours after. cronwheel's defaults must give the same
UTC minutes: a job whose minute or hour field starts with ``*`` follows real time
(``skip`` + ``twice``), any other is adjusted (``next_valid`` + ``once``). Debian
runs a fixed job once per missed wall time during the catch-up after a gap (so
``0,30 1-3`` runs three times in the minute of the change); cronwheel fires once
per instant, so minutes are compared as sets.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.domain.schedules import cron
from cronwheel.domain.tzdb import load_zone
from tests.unit.debian_cron import DebianCron, Entry

# (zone, instant of the change, kind)
CHANGES = [
    ("Europe/Berlin", datetime(2026, 3, 29, 1, 0, tzinfo=UTC), "gap"),
    ("Europe/Berlin", datetime(2026, 10, 25, 1, 0, tzinfo=UTC), "overlap"),
    ("America/New_York", datetime(2026, 3, 8, 7, 0, tzinfo=UTC), "gap"),
    ("America/New_York", datetime(2026, 11, 1, 6, 0, tzinfo=UTC), "overlap"),
    ("Australia/Lord_Howe", datetime(2026, 10, 3, 15, 30, tzinfo=UTC), "gap"),
    ("Australia/Lord_Howe", datetime(2026, 4, 4, 15, 0, tzinfo=UTC), "overlap"),
]
EXPRESSIONS = [
    "*/10 2 * * *",
    "30 2 * * *",
    "0 * * * *",
    "*/15 * * * *",
    "5 1-3 * * *",
    "* 2 * * *",
    "15 2 * * *",
    "45 1 * * *",
    "0,30 1-3 * * *",
    "59 1 * * *",
    "0 2 * * *",
    "0 */2 * * *",
    "*/20 1-3 * * 0",
    "0-5 2 * * *",
]
WINDOW = timedelta(hours=6)


def debian(zone: str, expr: str, change: datetime) -> list[datetime]:
    start = change - WINDOW
    runs = DebianCron(load_zone(zone), [Entry.parse(expr)], start).run_until(change + WINDOW)
    # the daemon's first minute is its start-up, not a comparison point
    end = change + WINDOW
    return sorted({m for _, m in runs if start + timedelta(minutes=1) < m <= end})


def cronwheel(
    zone: str, expr: str, change: datetime, gap: str | None = None, overlap: str | None = None
) -> list[datetime]:
    schedule = cron(expr, zone, dst_gap=gap, dst_overlap=overlap)  # type: ignore[arg-type]
    start, end = change - WINDOW + timedelta(minutes=1), change + WINDOW
    out: list[datetime] = []
    t = schedule.next_after(start)
    while t is not None and t <= end:
        out.append(t)
        t = schedule.next_after(t)
    return out


@pytest.mark.parametrize("expr", EXPRESSIONS)
@pytest.mark.parametrize(
    ("zone", "change", "kind"), CHANGES, ids=[f"{z}-{c:%m-%d}" for z, c, _ in CHANGES]
)
def test_defaults_are_debians(zone: str, change: datetime, kind: str, expr: str) -> None:
    assert cronwheel(zone, expr, change) == debian(zone, expr, change)


def _hm(instants: list[datetime]) -> list[str]:
    return [f"{t:%H:%M}" for t in instants]


# Pinned vectors: the emulation's UTC minutes within 6 hours of each change,
# checked by hand against the zone's rules (see test_tz_dst.py for the offsets).
PINNED = {
    ("Europe/Berlin", "03-29"): {
        "*/10 2 * * *": [],  # real time: 02:xx does not exist
        "30 2 * * *": ["01:00"],  # adjusted: at the change
        "5 1-3 * * *": ["00:05", "01:00", "01:05"],
    },
    ("Europe/Berlin", "10-25"): {
        "*/10 2 * * *": [f"0{h}:{m}0" for h in (0, 1) for m in range(6)],  # both 02:xx hours
        "30 2 * * *": ["00:30"],  # the first 02:30 only
        "5 1-3 * * *": ["23:05", "00:05", "02:05"],
    },
    ("America/New_York", "03-08"): {
        "*/10 2 * * *": [],
        "30 2 * * *": ["07:00"],
        "5 1-3 * * *": ["06:05", "07:00", "07:05"],
    },
    ("America/New_York", "11-01"): {
        "*/10 2 * * *": ["07:00", "07:10", "07:20", "07:30", "07:40", "07:50"],
        "30 2 * * *": ["07:30"],
        "5 1-3 * * *": ["05:05", "07:05", "08:05"],  # 01:05 EDT, not 01:05 EST
    },
    ("Australia/Lord_Howe", "10-03"): {
        "*/10 2 * * *": ["15:30", "15:40", "15:50"],  # 02:00-02:29 do not exist
        "30 2 * * *": ["15:30"],
        "15 2 * * *": ["15:30"],
        "5 1-3 * * *": ["14:35", "15:30", "16:05"],
    },
    ("Australia/Lord_Howe", "04-04"): {
        "*/10 2 * * *": ["15:30", "15:40", "15:50", "16:00", "16:10", "16:20"],
        "30 2 * * *": ["16:00"],
        "45 1 * * *": ["14:45"],  # 01:45 happens twice: once
        "5 1-3 * * *": ["14:05", "15:35", "16:35"],
    },
}


@pytest.mark.parametrize(
    ("zone", "change", "kind"), CHANGES, ids=[f"{z}-{c:%m-%d}" for z, c, _ in CHANGES]
)
def test_pinned_vectors(zone: str, change: datetime, kind: str) -> None:
    for expr, expected in PINNED[(zone, f"{change:%m-%d}")].items():
        assert _hm(debian(zone, expr, change)) == expected, expr
        assert _hm(cronwheel(zone, expr, change)) == expected, expr


def test_the_hour_only_rule_was_not_debians() -> None:
    """The previous default looked at the hour field only: ``*/10 2`` was adjusted
    (next_valid + once), which Debian does not do on either transition day."""
    for zone, change, _ in CHANGES[:2]:
        old = cronwheel(zone, "*/10 2 * * *", change, gap="next_valid", overlap="once")
        assert old != debian(zone, "*/10 2 * * *", change)
    assert cron("*/10 2 * * *", "Europe/Berlin").gap == "skip"
    assert cron("*/10 2 * * *", "Europe/Berlin").overlap == "twice"
