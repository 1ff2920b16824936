"""The store-time clock: NTP-style offset estimation from round trips (domain/clock.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.domain.clock import (
    PHI,
    ClockBounds,
    ClockSample,
    FakeClock,
    StoreClock,
    sample_clock,
)
from cronwheel.errors import ValidationError

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Remote:
    """A store whose clock is ``skew`` ahead of ``local``; a read takes ``there`` seconds
    to reach it and ``back`` seconds to come back (the local FakeClock moves meanwhile)."""

    def __init__(self, local: FakeClock, skew: float) -> None:
        self.local, self.skew = local, skew
        self.there, self.back = 0.0, 0.0

    def now(self) -> datetime:
        self.local.advance(self.there)
        t = self.local.now() + timedelta(seconds=self.skew)
        self.local.advance(self.back)
        return t


def test_a_symmetric_round_trip_measures_the_offset_exactly() -> None:
    local = FakeClock(T0)
    remote = Remote(local, skew=-3.0)
    remote.there = remote.back = 0.010
    s = sample_clock(local, remote.now)
    assert s.offset == pytest.approx(-3.0)
    assert s.delay == pytest.approx(0.020)
    assert s.uncertainty == pytest.approx(0.010)


def test_an_asymmetric_round_trip_is_off_by_no_more_than_its_uncertainty() -> None:
    local = FakeClock(T0)
    remote = Remote(local, skew=2.0)
    remote.there, remote.back = 0.030, 0.0  # the whole delay on the way there
    s = sample_clock(local, remote.now)
    assert abs(s.offset - 2.0) <= s.uncertainty + 1e-9
    assert s.offset == pytest.approx(2.015)


def test_the_clock_reads_store_time_and_keeps_the_tightest_sample() -> None:
    local = FakeClock(T0)
    clock = StoreClock(local)
    remote = Remote(local, skew=3.0)
    for there, back in [(0.040, 0.0), (0.001, 0.001), (0.0, 0.040)]:
        remote.there, remote.back = there, back
        clock.add(sample_clock(local, remote.now))
    est = clock.estimate()
    assert est.offset == pytest.approx(3.0)  # the 2 ms round trip's
    assert est.uncertainty == pytest.approx(0.001, abs=1e-5)
    assert est.flag is None
    assert clock.now() == local.now() + timedelta(seconds=3.0)
    assert clock.monotonic() == local.monotonic()


def test_an_old_sample_loses_to_a_fresh_one_as_its_uncertainty_grows_with_age() -> None:
    local = FakeClock(T0)
    clock = StoreClock(local)
    clock.add(ClockSample(1.0000, 0.002, local.monotonic()))
    local.advance(1000)  # 1000 s later the 1 ms sample is worth 1 ms + 15 ms
    est = clock.estimate()
    assert est.uncertainty == pytest.approx(0.001 + 1000 * PHI)
    clock.add(ClockSample(1.0010, 0.010, local.monotonic()))  # 5 ms, fresh
    assert clock.estimate().offset == pytest.approx(1.0010)


def test_only_the_last_window_samples_count() -> None:
    local = FakeClock(T0)
    clock = StoreClock(local, window=3)
    clock.add(ClockSample(0.5, 0.001, local.monotonic()))
    for _ in range(3):
        local.advance(1)
        clock.add(ClockSample(0.502, 0.008, local.monotonic()))
    assert clock.estimate().offset == pytest.approx(0.502)  # the best one fell out


def test_a_stepped_local_clock_restarts_the_window() -> None:
    local = FakeClock(T0)
    clock = StoreClock(local)
    remote = Remote(local, skew=0.0)
    remote.there = remote.back = 0.0005
    clock.add(sample_clock(local, remote.now))
    # the host's clock is stepped 3 s back (a broken time service): the store's is not
    local.set(local.now() - timedelta(seconds=3))
    remote.skew = 3.0
    remote.there = remote.back = 0.005  # and this round trip is slower than the first
    est = clock.add(sample_clock(local, remote.now))
    assert est.offset == pytest.approx(3.0)  # not the older, tighter, now wrong sample
    assert clock.now() == local.now() + timedelta(seconds=3.0)


def test_no_sample_yet_reads_the_local_clock_and_is_flagged() -> None:
    local = FakeClock(T0)
    clock = StoreClock(local)
    assert clock.now() == T0
    est = clock.estimate()
    assert est.flag == "no round trip to the store's clock yet"


def test_bounds_flag_a_large_offset_or_uncertainty_and_clear_on_recovery() -> None:
    local = FakeClock(T0)
    bounds = ClockBounds(
        max_offset=timedelta(seconds=1), max_uncertainty=timedelta(milliseconds=20)
    )
    clock = StoreClock(local, bounds, window=1)
    est = clock.add(ClockSample(-3.0, 0.002, local.monotonic()))
    assert est.flag == "clock offset -3.000 s is beyond ±1 s"
    est = clock.add(ClockSample(0.2, 0.100, local.monotonic()))
    assert est.flag == "clock uncertainty 50.0 ms is beyond 20 ms"
    est = clock.add(ClockSample(0.2, 0.002, local.monotonic()))
    assert est.flag is None


@pytest.mark.parametrize("field", ["max_offset", "max_uncertainty"])
@pytest.mark.parametrize("value", [timedelta(0), timedelta(seconds=-1), 5])
def test_bounds_must_be_positive_durations(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as err:
        ClockBounds(**{field: value})  # type: ignore[arg-type]
    assert err.value.field == field


@pytest.mark.parametrize("value", [timedelta(0), timedelta(seconds=-1), 1])
def test_the_worker_clock_sample_interval_must_be_a_positive_duration(value: object) -> None:
    from cronwheel.worker.config import WorkerConfig

    with pytest.raises(ValidationError) as err:
        WorkerConfig(clock_sample_interval=value)  # type: ignore[arg-type]
    assert err.value.field == "clock_sample_interval"
