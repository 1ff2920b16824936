"""``cronwheel bench partitions`` (PostgreSQL) at smoke size: a row per partition count,
the counts held as asked, figures present; on SQLite a one-line usage error, exit 2.
Timings are asserted nowhere here (README "Partitions by day" has the figures)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import PG_URL, require_postgres


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronwheel", "bench", "partitions", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.timeout(300)
def test_partitions_bench_reports_each_count() -> None:
    require_postgres()
    proc = _bench("--store", PG_URL, "--count", "3", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    held = [row["partitions"] for row in doc["rows"]]
    assert held == sorted(held) and held[0] >= 2 and held[-1] >= 41
    for row in doc["rows"]:
        assert row["enqueue_ms"] > 0 and row["claim_ms"] > 0 and row["held_ms"] > 0
        assert row["status_ms"] > 0 and row["next_due_ms"] > 0
    assert doc["rows"][0]["claim_ratio"] == 1.0


def test_partitions_bench_on_sqlite_is_a_usage_error() -> None:
    proc = _bench()
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "PostgreSQL" in lines[0]
