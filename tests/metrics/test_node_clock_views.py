"""Node clocks where users look: ``cronwheel status`` (text and JSON), ``GET /v1/status``
and the dashboard's nodes panel show each node's offset to the store's clock and its
flag (the Prometheus gauges: test_collector.py)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from cronwheel.cli.main import cli
from cronwheel.domain.clock import ClockEstimate
from cronwheel.domain.models import NodeInfo
from cronwheel.server import create_app
from cronwheel.store.sqlite import SqliteStore

from .helpers import T0, make_store

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's TestClient packaging warning (httpx2)
    from starlette.testclient import TestClient

FLAG = "clock offset +12.000 s is beyond ±10 s"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = make_store(tmp_path)
    for node_id in ("w-ok", "w-flagged", "w-new"):
        s.register_node(
            NodeInfo(id=node_id, kind="worker", hostname="h", pid=7, started_at=T0, heartbeat_at=T0)
        )
    s.heartbeat_node("w-ok", ClockEstimate(-3.0, 0.0004))
    s.heartbeat_node("w-flagged", ClockEstimate(12.0, 0.0021, FLAG))
    yield s
    s.close()


def _by_id(nodes: list[dict[str, object]]) -> dict[object, object]:
    return {n["id"]: n["clock"] for n in nodes}


EXPECTED = {
    "w-ok": {"offset_ms": -3000.0, "uncertainty_ms": 0.4, "flagged": False, "flag": None},
    "w-flagged": {"offset_ms": 12000.0, "uncertainty_ms": 2.1, "flagged": True, "flag": FLAG},
    "w-new": None,
}


def test_status_cli_shows_each_nodes_clock(store: SqliteStore, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    doc = json.loads(CliRunner().invoke(cli, ["status", "--store", url, "--json"]).output)
    assert _by_id(doc["nodes"]) == EXPECTED
    text = CliRunner().invoke(cli, ["status", "--store", url], env={"COLUMNS": "200"}).output
    assert "-3000.0 ms ± 0.4" in text
    assert f"+12000.0 ms ± 2.1  flagged: {FLAG}" in text
    assert "not measured" in text


def test_api_status_and_dashboard_show_each_nodes_clock(store: SqliteStore) -> None:
    with TestClient(create_app(store, auth_required=False)) as client:
        doc = client.get("/v1/status").json()
        assert _by_id(doc["nodes"]) == EXPECTED
        html = client.get("/ui/f/nodes", headers={"HX-Request": "true"}).text
    assert "-3000.0 ms ± 0.4" in html
    assert f'title="{FLAG}"' in html and "flagged</span>" in html
    assert "not measured" in html


def test_a_node_that_stops_reporting_its_clock_shows_none(store: SqliteStore) -> None:
    store.heartbeat_node("w-ok")
    (node,) = [n for n in store.list_nodes(alive_within=timedelta(hours=1)) if n.id == "w-ok"]
    assert node.clock is None
