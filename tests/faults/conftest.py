"""Fixtures of the fault suite: a :class:`Cluster` per scenario and the run's figures.

PostgreSQL is required: without it the suite skips locally and FAILS in CI.
Measured figures (takeover and recovery times) are printed (``pytest -s``) and
written to ``last_run.json`` in a temporary directory whose path is printed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cronwheel import Client
from tests.conftest import require_service
from tests.faults.harness import ADMIN_URL, SIZES, Cluster, ensure_postgres_up

_FIGURES: dict[str, Any] = {}


@pytest.fixture(scope="session")
def figures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    yield _FIGURES
    if _FIGURES:
        path: Path = tmp_path_factory.mktemp("faults") / "last_run.json"
        payload = {"size": "full" if SIZES.full else "smoke", "scenarios": _FIGURES}
        path.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str))
        print(f"\n[faults] figures of this run: {path}")


@pytest.fixture
def cluster(
    tmp_path: Path, figures: dict[str, Any], request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    try:
        ensure_postgres_up(timeout=10)
        with psycopg.connect(ADMIN_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except (psycopg.Error, AssertionError, OSError) as exc:
        require_service("PostgreSQL", exc)
    # parametrize with indirect=True to choose the store: "postgres" (default) or "sqlite"
    c = Cluster(tmp_path, engine=getattr(request, "param", "postgres"))
    try:
        yield c
    finally:
        try:
            if c.figures:
                figures[request.node.name] = c.figures
                (tmp_path / "figures.json").write_text(json.dumps(c.figures, indent=2, default=str))
                print(f"\n[faults] {request.node.name}: {json.dumps(c.figures, default=str)}")
        finally:
            c.close()


@pytest.fixture
def closing() -> Iterator[list[Client]]:
    """API clients a scenario opened, closed at its end."""
    clients: list[Client] = []
    yield clients
    for c in clients:
        c.close()
