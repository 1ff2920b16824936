"""CI runs the benchmarks at smoke size and asserts correctness, never timings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_bench_smoke_loses_and_duplicates_nothing() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cronwheel", "bench", "smoke", "--json"],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    docs = json.loads(proc.stdout)
    assert [d["workload"] for d in docs] == ["precision", "herd", "drain", "cron-mix", "limit"]
    for d in docs:
        assert d["expected"] > 0, d
        assert d["ran"] == d["expected"], d
        assert d["lost"] == 0 and d["duplicated"] == 0, d
        if d["workload"] != "limit":  # limit runs no handlers: rates only
            assert d["lateness_ms"]["p50"] is not None


@pytest.mark.slow
def test_bench_bulk_small_loses_and_duplicates_nothing() -> None:
    """``bench bulk`` at a small size: every job and run the bulk calls and the API
    batches reported created is stored, once."""
    proc = subprocess.run(
        [sys.executable, "-m", "cronwheel", "bench", "bulk", "--count", "300", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (doc,) = json.loads(proc.stdout)
    assert doc["workload"] == "bulk" and doc["expected"] == 2 * 300 + 2 * 1000
    assert doc["ran"] == doc["expected"] and doc["lost"] == doc["duplicated"] == 0
    assert doc["schedule_many_s"] > 0 and doc["api_jobs_batch_1000_ms_p50"] > 0
    for upsert in ("new", "unchanged", "changed"):  # App.schedule's default, per call
        assert doc[f"schedule_upsert_{upsert}_jobs_per_s"] > 0


@pytest.mark.slow
def test_bench_tz_steps_smoke() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cronwheel",
            "bench",
            "tz-steps",
            "--smoke",
            "--from",
            "2026-12-01T00:00:00Z",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["workload"] == "tz-steps"
    assert doc["from"] == "2026-12-01T00:00:00Z"
    # the six smoke zones all change offset twice a year in the bundled tz database
    # (Gaza around Ramadan; Casablanca no longer does after 2026 in tzdata 2026f)
    assert doc["zones"] == 6
    assert doc["transitions"] >= 24
    assert sorted(doc["expressions"]) == ["daily", "per-minute", "per-second"]
    for figures in doc["expressions"].values():
        # every start point took its step: 7 points per transition, at and away
        assert figures["steps_at"] == figures["steps_away"] == 7 * doc["transitions"]
        assert figures["at_us"] > 0 and figures["away_us"] > 0


@pytest.mark.slow
def test_bench_api_smoke() -> None:
    """wrk against `cronwheel api --auth --workers 2` on SQLite: every row answered 2xx."""
    if shutil.which("wrk") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("wrk is not installed (.ci/run installs it)")
        pytest.skip("wrk is not installed (Debian: apt-get install wrk)")
    proc = subprocess.run(
        [sys.executable, "-m", "cronwheel", "bench", "api", "--smoke", "--workers", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert (doc["workload"], doc["store"], doc["api_workers"]) == ("api", "sqlite", 2)
    assert list(doc["rows"]) == [
        "create",
        "upsert",
        "firing_get",
        "jobs_list",
        "status",
        "enqueue",
    ]
    for name, row in doc["rows"].items():
        assert row["requests"] > 0 and row["errors"] == 0, (name, row)
        assert 0 < row["p50_ms"] <= row["p99_ms"] <= row["max_ms"], (name, row)
