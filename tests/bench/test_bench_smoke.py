"""CI runs the benchmarks at smoke size and asserts correctness, never timings."""

from __future__ import annotations

import json
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
