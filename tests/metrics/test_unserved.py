"""Queued firings whose task no live worker serves are flagged by `cronwheel status`,
`/v1/status`, the dashboard's overview and `/metrics`."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from cronwheel.cli.main import main
from cronwheel.domain.clock import FakeClock
from cronwheel.domain.models import NodeInfo
from cronwheel.observability.cluster import ClusterCollector
from cronwheel.server import create_app
from cronwheel.store.sqlite import SqliteStore

from .helpers import T0, make_store, queue, value

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's TestClient packaging warning (httpx2)
    from starlette.testclient import TestClient


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[SqliteStore]:
    s = make_store(tmp_path, clock)
    queue(s, "a1", task="resize")
    queue(s, "b1", task="backup")
    queue(s, "b2", task="backup")
    queue(s, "o1", task="backup", namespace="other")
    s.register_node(
        NodeInfo(
            id="w1",
            kind="worker",
            hostname="h",
            pid=1,
            started_at=T0,
            heartbeat_at=T0,
            info={"tasks": ["resize"]},
        )
    )
    yield s
    s.close()


def test_metrics_count_unserved_firings_per_task(store: SqliteStore, clock: FakeClock) -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(store))
    text = generate_latest(registry).decode()
    assert value(text, "cronwheel_unserved_firings", task="backup") == 3  # every namespace
    assert "resize" not in [
        line for line in text.splitlines() if line.startswith("cronwheel_unserved_firings{")
    ]
    clock.advance(timedelta(seconds=11))  # w1 goes stale (10 s): resize is unserved too
    text = generate_latest(registry).decode()
    assert value(text, "cronwheel_unserved_firings", task="resize") == 1


def test_api_status_flags_the_namespace_unserved_tasks(store: SqliteStore) -> None:
    with TestClient(create_app(store, auth_required=False)) as client:
        doc = client.get("/v1/status").json()
    assert doc["unserved"] == {"backup": 2}  # namespace `default` only


def test_dashboard_overview_flags_unserved_tasks(store: SqliteStore) -> None:
    with TestClient(create_app(store, auth_required=False)) as client:
        html = client.get("/ui/f/overview").text
    assert 'id="unserved"' in html and "<bdi>backup</bdi> 2" in html and "resize" not in html
    store.register_node(
        NodeInfo(
            id="w2",
            kind="worker",
            hostname="h",
            pid=2,
            started_at=T0,
            heartbeat_at=T0,
            info={"tasks": ["backup"]},
        )
    )
    with TestClient(create_app(store, auth_required=False)) as client:
        html = client.get("/ui/f/overview").text
    assert 'id="unserved"' not in html


def test_cli_status_flags_unserved_tasks(
    store: SqliteStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/m.db"
    # the CLI opens the store with the system clock: beat now so w1 is alive
    store.db.conn.execute("UPDATE nodes SET heartbeat_at = ?", (store.db.instant(_now()),))
    main(["status", "--json", "--store", url])
    doc = json.loads(capsys.readouterr().out)
    assert doc["unserved"] == {"backup": 3}
    main(["status", "--store", url])
    out = capsys.readouterr().out
    assert "no live worker serves" in out and "backup 3" in out


def _now() -> datetime:
    from cronwheel.domain.clock import SystemClock

    return SystemClock().now()
