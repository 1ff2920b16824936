"""Two scheduler processes with different tz databases on one store: the one whose
version is not the cluster's is refused leadership while the other runs, the mismatch
shows in ``cronwheel status``, and it leads (adopting its version) once the other
stopped."""

from __future__ import annotations

import signal

from tests.acceptance.conftest import Cluster, wait_until
from tests.contract.test_tzdata import build_tzdb

LEASE_TTL = "2"


def test_a_mismatched_scheduler_waits_for_the_fleet_to_move(cluster: Cluster) -> None:
    a = build_tzdb(cluster.dir / "tz-a", "2099a", "lastSun")
    b = build_tzdb(cluster.dir / "tz-b", "2099b", "Sun>=8")
    env = {"LEDGER_JOBS": "fast"}
    old = cluster.start(
        "scheduler", "--lease-ttl", LEASE_TTL, "--tzdata", a.source, env=env, name="old"
    )
    wait_until(
        lambda: old.events("lease_acquired"),
        30,
        message=lambda: f"the first scheduler leads; {cluster.diagnostics()}",
    )
    new = cluster.start(
        "scheduler", "--lease-ttl", LEASE_TTL, "--tzdata", b.source, env=env, name="new"
    )
    wait_until(
        lambda: new.events("tz_leadership_refused"),
        30,
        message=lambda: f"the 2099b scheduler is refused; {cluster.diagnostics()}",
    )
    (refused,) = new.events("tz_leadership_refused")
    assert "2099b" in refused["reason"]
    assert "2099a" in refused["reason"]
    status = cluster.cli_json("status")
    new_id = new.events("scheduler_started")[0]["holder"]
    assert status["tzdata"]["cluster"]["version"] == "2099a"
    assert new_id in [m["id"] for m in status["tzdata"]["mismatched"]]
    assert status["tzdata"]["mismatch"] is True
    assert not new.events("lease_acquired")

    # a clean stop removes the old node: no live scheduler has 2099a any more
    old.kill_group(signal.SIGTERM)
    assert old.wait(timeout=30) == 0
    wait_until(
        lambda: new.events("tz_database_adopted"),
        30,
        message=lambda: f"the 2099b scheduler leads; {cluster.diagnostics()}",
    )
    (adopted,) = new.events("tz_database_adopted")
    assert adopted["old"].startswith("2099a")
    assert adopted["new"].startswith("2099b")
    status = cluster.cli_json("status")
    assert status["leader"] == new_id
    assert status["tzdata"]["cluster"]["version"] == "2099b"
    assert status["tzdata"]["mismatched"] == []
