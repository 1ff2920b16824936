"""The store contract harness: one suite, every Store implementation.

Each test gets a fresh store and a way to move the store's clock forward
(``harness.advance``): a FakeClock for SQLite and the memory store; for PostgreSQL,
whose clock is the server's ``now()``, a test-only offset added to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwheel.domain.clock import FakeClock
from cronwheel.domain.models import JobPolicies, JobSpec, NodeInfo
from cronwheel.domain.schedules import Schedule, every
from cronwheel.store.protocol import Store

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@dataclass
class Harness:
    store: Store
    advance: Callable[[timedelta], None]
    open_another: Callable[[], Store]  # a second connection/process view of the same store

    def now(self) -> datetime:
        return self.store.now()


def _sqlite(tmp_path: Any) -> Iterator[Harness]:
    from cronwheel.store.sqlite import SqliteStore

    clock = FakeClock(T0)
    path = str(tmp_path / "contract.db")
    store = SqliteStore(path, clock=clock)
    store.migrate()
    others: list[SqliteStore] = []

    def another() -> Store:
        s = SqliteStore(path, clock=clock)
        others.append(s)
        return s

    yield Harness(store=store, advance=clock.advance, open_another=another)
    for s in others:
        s.close()
    store.close()


def _memory(tmp_path: Any) -> Iterator[Harness]:
    from cronwheel.store.memory import MemoryStore

    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    store.migrate()

    def another() -> Store:
        # another handle on the same data (as another connection to the same file)
        return MemoryStore(clock=clock, data=store.data)

    yield Harness(store=store, advance=clock.advance, open_another=another)
    store.close()


STORE_KINDS: dict[str, Callable[[Any], Iterator[Harness]]] = {
    "memory": _memory,
    "sqlite": _sqlite,
}

try:  # the PostgreSQL harness lives beside the PostgreSQL store's tests
    from tests.contract.pg_harness import postgres_harness

    STORE_KINDS["postgres"] = postgres_harness
except ImportError:  # pragma: no cover - until the PostgreSQL store exists
    pass


@pytest.fixture(params=sorted(STORE_KINDS))
def harness(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Harness]:
    yield from STORE_KINDS[request.param](tmp_path)


def spec(
    name: str = "job",
    *,
    task: str = "t",
    schedule: Schedule | None = None,
    namespace: str = "default",
    **policies: Any,
) -> JobSpec:
    return JobSpec(
        name=name,
        task=task,
        schedule=schedule or every("1m"),
        namespace=namespace,
        policies=JobPolicies(**policies),
    )


def worker_node(node_id: str, at: datetime, **info: Any) -> NodeInfo:
    """A worker's registration at ``at`` (``info``: its ``tasks``, ``concurrency``...)."""
    return NodeInfo(
        id=node_id, kind="worker", hostname="h", pid=1, started_at=at, heartbeat_at=at, info=info
    )
