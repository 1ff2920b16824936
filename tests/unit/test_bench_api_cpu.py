"""`cronwheel bench api`'s share of the machine: the CPU of the server and of the load
generator per request beside the API's, and the rate the cores bound."""

from __future__ import annotations

import os

import pytest

from cronwheel.bench.api import _machine_share
from cronwheel.bench.cpu import cpu_delta as _cpu_delta
from cronwheel.bench.cpu import on_this_host as _on_this_host


def test_a_backend_started_in_the_row_counts_whole_and_one_gone_is_left_out() -> None:
    before = {10: 1.0, 11: 2.0, 12: 0.5}
    after = {10: 1.25, 11: 2.0, 13: 0.5}  # 12 ended, 13 started during the row
    assert _cpu_delta(before, after) == pytest.approx(0.75)


def test_the_cores_bound_the_rate_by_the_sum_of_every_process_per_request() -> None:
    share = _machine_share(200, 75.4, 24.6)
    assert share == {
        "server_cpu_us_per_request": 75,
        "wrk_cpu_us_per_request": 25,
        "machine_cpu_us_per_request": 300,
        "cores_bound_rps": round((os.cpu_count() or 1) * 1e6 / 300),
    }


def test_without_the_api_figure_only_the_parts_are_reported() -> None:
    assert _machine_share(None, 10.0, 5.0) == {
        "server_cpu_us_per_request": 10,
        "wrk_cpu_us_per_request": 5,
    }


def test_a_remote_server_is_not_read_from_this_hosts_processes() -> None:
    assert not _on_this_host("postgresql://u@db.example.com:5432/x")
    assert not _on_this_host("postgresql://u@10.1.2.3/x")


def test_a_drain_charges_each_side_its_cpu_per_job_and_sums_them() -> None:
    from cronwheel.bench.cpu import SideMeter

    before = {"workers": {1: 1.0, 2: 1.0}, "server": {9: 4.0}}
    # worker 2 ended (its CPU is lost), a backend 10 started during the drain
    after = {"workers": {1: 1.3}, "server": {9: 4.1, 10: 0.2}}
    assert SideMeter.per_item(before, after, 1000) == {
        "workers": 300,
        "server": 300,
        "machine": 600,
    }
    assert SideMeter.per_item(before, after, 0) == {}


def test_the_meter_reads_each_side_from_its_pids_at_each_reading() -> None:
    from cronwheel.bench.cpu import SideMeter

    seen: list[int] = []
    meter = SideMeter({"me": lambda: seen or [os.getpid()], "none": list})
    reading = meter.read()
    assert set(reading["me"]) == {os.getpid()} and reading["me"][os.getpid()] > 0
    assert reading["none"] == {}
