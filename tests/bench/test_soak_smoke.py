"""``cronwheel bench soak`` at smoke size (CI): both sides run, nothing is lost or
duplicated, history is loaded and the retention pass has deleted some of it by the end of
the last drain. Timings are asserted nowhere here: README "Soak" has the measured figures
(full size: ``cronwheel bench soak`` with its defaults, or CRONWHEEL_SOAK_DAYS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import PG_URL, require_postgres

DAYS = os.environ.get("CRONWHEEL_SOAK_DAYS", "0.25")


def _soak(*store: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "cronwheel", "bench", "soak", "--days", DAYS,
         "--rate", "100000", "--count", "100", "--json", *store],
        capture_output=True,
        text=True,
        timeout=850,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _check(doc: dict) -> None:
    empty, loaded = doc["baseline"], doc["loaded"]
    assert 0 < empty["history_firings"] < loaded["history_firings"]
    for side in (empty, loaded):
        assert side["lost"] == 0 and side["duplicated"] == 0, side
        assert side["drain_jobs_per_s"] and side["herd_firings_per_s"]
    # the leader's pass deleted history by the drain's end (the drain's workers wait for
    # that leader's term); how much of it during the drain depends on its pacing
    assert loaded["pruned_before_drain"] + loaded["pruned_during_drain"] > 0, loaded
    # the one-shot jobs' rows it deleted, net of the drain's own jobs (none at this size)
    assert loaded["jobs_pruned_before_drain"] >= 0, loaded
    assert loaded["jobs_pruned_during_drain"] >= 0, loaded
    assert loaded["bytes_per_firing"] > 0
    assert set(doc["ratios"]) >= {"claim_ms", "enqueue_ms", "scrape_ms", "status_ms"}
    # the last pass, timed a step at a time: it started, then walked or dropped in steps
    steps = loaded["pass_steps"]
    assert steps["start"]["steps"] >= 1 and sum(f["steps"] for f in steps.values()) >= 2, steps
    assert all(0 < f["p50_ms"] <= f["max_ms"] for f in steps.values()), steps


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_soak_smoke_on_sqlite() -> None:
    _check(_soak())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_soak_smoke_on_postgres() -> None:
    require_postgres()
    _check(_soak("--store", PG_URL))
