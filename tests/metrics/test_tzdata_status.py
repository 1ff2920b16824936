"""A tz database mismatch is flagged in ``cronwheel status`` (text and JSON),
``/v1/status``, the dashboard's overview and nodes, and the cluster's ``/metrics``."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from cronwheel.cli.main import cli
from cronwheel.domain.models import NodeInfo
from cronwheel.domain.tzdb import TzDatabase, tz_database, use_tz_database
from cronwheel.observability.cluster import ClusterCollector
from cronwheel.server import create_app
from cronwheel.store.protocol import TzRecord
from cronwheel.store.sqlite import SqliteStore
from tests.contract.test_tzdata import build_tzdb

from .helpers import value
from .test_collector import scrape


@pytest.fixture
def versions(tmp_path: Path) -> Iterator[tuple[TzDatabase, TzDatabase]]:
    before = tz_database()
    a = build_tzdb(tmp_path / "2099a", "2099a", "lastSun")
    b = build_tzdb(tmp_path / "2099b", "2099b", "Sun>=8")
    use_tz_database(a.source)
    yield a, b
    use_tz_database(before.source)


def _mismatched_store(tmp_path: Path, a: TzDatabase, b: TzDatabase) -> SqliteStore:
    """The cluster recorded 2099a; node 'old' reports 2099a, node 'new' 2099b (both live:
    the store's clock is the system's, as the CLI's is)."""
    store = SqliteStore(str(tmp_path / "tz.db"))
    store.migrate()
    now = datetime.now(UTC)
    for node_id, db in (("old", a), ("new", b)):
        store.register_node(
            NodeInfo(
                id=node_id,
                kind="scheduler",
                hostname="h",
                pid=1,
                started_at=now,
                heartbeat_at=now,
                tz_source=db.source,
                tz_version=db.version,
            )
        )
    lease = store.acquire_lease("dispatcher", "old", timedelta(seconds=30))
    assert lease is not None
    store.record_tz(lease, TzRecord(source=a.source, version=a.version), {})
    return store


def test_status_cli_flags_the_mismatched_node(
    tmp_path: Path, versions: tuple[TzDatabase, TzDatabase]
) -> None:
    a, b = versions
    _mismatched_store(tmp_path, a, b).close()
    url = f"sqlite:///{tmp_path / 'tz.db'}"
    result = CliRunner().invoke(cli, ["status", "--store", url, "--json"])
    assert result.exit_code == 0, result.output
    tz = json.loads(result.output)["tzdata"]
    assert tz["cluster"] == {"source": a.source, "version": "2099a"}
    assert tz["process"]["version"] == "2099a"
    assert [m["id"] for m in tz["mismatched"]] == ["new"]
    assert tz["mismatched"][0]["version"] == "2099b"
    assert tz["mismatch"] is True
    text = CliRunner().invoke(cli, ["status", "--store", url]).output
    # one line, however long the source's path (rich would wrap it at 80 columns)
    assert f"tz database  2099a ({a.source})   MISMATCH: new 2099b" in text.splitlines()


def test_api_dashboard_and_metrics_flag_the_mismatch(
    tmp_path: Path, versions: tuple[TzDatabase, TzDatabase]
) -> None:
    a, b = versions
    store = _mismatched_store(tmp_path, a, b)
    try:
        text = scrape(ClusterCollector(store))
        assert value(text, "cronwheel_tzdata_mismatch") == 1
        assert value(text, "cronwheel_tzdata_mismatched_nodes") == 1
        assert value(text, "cronwheel_tzdata_cluster", source=a.source, version="2099a") == 1
        labels = {"kind": "scheduler", "node": "new", "source": b.source, "version": "2099b"}
        assert value(text, "cronwheel_node_tzdata", **labels) == 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from starlette.testclient import TestClient
        with TestClient(create_app(store, auth_required=False)) as client:
            doc = client.get("/v1/status").json()
            assert doc["tzdata"]["mismatch"] is True
            assert [m["id"] for m in doc["tzdata"]["mismatched"]] == ["new"]
            assert {n["id"]: n["tz_version"] for n in doc["nodes"]} == {
                "new": "2099b",
                "old": "2099a",
            }
            overview = client.get("/ui/f/overview").text
            assert 'id="tzdata"' in overview
            assert "mismatch: <bdi>new</bdi> 2099b" in overview
            nodes = client.get("/ui/f/nodes").text
            assert "2099b" in nodes
            assert "mismatch" in nodes
        # the fleet agrees once the cluster's version is every live node's
        store.remove_node("new")
        text = scrape(ClusterCollector(store))
        assert value(text, "cronwheel_tzdata_mismatch") == 0
    finally:
        store.close()


def test_a_scheduler_counts_its_refusals_and_moved_firings() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from cronwheel.dispatch.tzdata import Adoption
    from cronwheel.domain.models import JobId
    from cronwheel.observability.process import ProcessMetrics
    from cronwheel.observability.sinks import DispatcherSink
    from cronwheel.store.protocol import CursorMove

    registry = CollectorRegistry()
    sink = DispatcherSink(ProcessMetrics(registry))

    def scrape() -> str:
        return generate_latest(registry).decode()

    sink.tz_leadership_refused("n1", "this node's tz database 2099b differs")
    assert value(scrape(), "cronwheel_dispatcher_tz_refused") == 1
    sink.tz_leadership_refused("n1", None)
    assert value(scrape(), "cronwheel_dispatcher_tz_refused") == 0
    at = datetime(2030, 3, 20, 8, 30, tzinfo=UTC)
    moves = [
        CursorMove(job_id=JobId(i), old=at, new=at - timedelta(hours=1), detail="d")
        for i in (1, 2, 3)
    ]
    sink.tz_adopted(
        Adoption(
            old=TzRecord(source="bundled", version="2099a"),
            new=TzRecord(source="bundled", version="2099b"),
            zones=["Test/Zone"],
            moves=moves,
            moved=[JobId(1), JobId(3)],  # job 2 changed meanwhile: not moved
        )
    )
    assert value(scrape(), "cronwheel_dispatcher_tz_moved_firings_total") == 2
