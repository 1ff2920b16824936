"""Served tasks: what workers report serving, and queued firings nobody serves.

Every store records a worker node's ``info["tasks"]`` on registration and refreshes
``last_seen`` at most once a minute on heartbeat; ``unserved_queued`` counts queued
firings of tasks no live worker serves."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cronwheel.domain.models import NodeInfo
from cronwheel.domain.schedules import NowSchedule
from tests.contract.conftest import Harness, spec

S = timedelta(seconds=1)


def _node(harness: Harness, node_id: str, kind: str = "worker", **info: Any) -> None:
    now = harness.now()
    harness.store.register_node(
        NodeInfo(
            id=node_id, kind=kind, hostname="h", pid=1, started_at=now, heartbeat_at=now, info=info
        )
    )


def _queue(harness: Harness, task: str, n: int) -> None:
    for i in range(n):
        harness.store.enqueue_now(spec(f"{task}-{i}", task=task, schedule=NowSchedule()))


def test_nothing_served_before_a_worker_registers(harness: Harness) -> None:
    assert harness.store.served_tasks() == []
    _node(harness, "sched", kind="scheduler", tasks=["not-a-worker"])
    assert harness.store.served_tasks() == []


def test_registration_records_the_tasks_of_a_worker(harness: Harness) -> None:
    t0 = harness.now()
    _node(harness, "w1", tasks=["b", "a"], concurrency=4)
    harness.advance(5 * S)
    _node(harness, "w2", tasks=["a", "c"])
    served = harness.store.served_tasks()
    assert [t.task for t in served] == ["a", "b", "c"]
    by = {t.task: t for t in served}
    assert by["a"].first_seen == t0 and by["a"].last_seen == t0 + 5 * S
    assert by["c"].first_seen == t0 + 5 * S
    assert [t.task for t in harness.store.served_tasks(limit=2)] == ["a", "b"]


def test_heartbeat_refreshes_last_seen_at_most_once_a_minute(harness: Harness) -> None:
    t0 = harness.now()
    _node(harness, "w1", tasks=["a"])
    harness.advance(30 * S)
    harness.store.heartbeat_node("w1")
    (a,) = harness.store.served_tasks()
    assert a.last_seen == t0  # 30 s old: not refreshed yet
    harness.advance(31 * S)
    harness.store.heartbeat_node("w1")
    (a,) = harness.store.served_tasks()
    assert a.first_seen == t0 and a.last_seen == t0 + 61 * S
    harness.store.heartbeat_node("nobody")  # an unknown node records nothing
    assert [t.task for t in harness.store.served_tasks()] == ["a"]


def test_unserved_queued_counts_tasks_no_live_worker_serves(harness: Harness) -> None:
    _queue(harness, "a", 1)
    _queue(harness, "b", 3)
    _queue(harness, "c", 2)
    window = 10 * S
    # no worker at all: every queued task is unserved, most waiting first
    assert harness.store.unserved_queued(alive_within=window) == {"b": 3, "c": 2, "a": 1}
    _node(harness, "w1", tasks=["a", "b"])
    assert harness.store.unserved_queued(alive_within=window) == {"c": 2}
    assert harness.store.unserved_queued(alive_within=window, limit=0) == {}
    harness.advance(11 * S)  # w1's heartbeat is now outside the window
    assert harness.store.unserved_queued(alive_within=window) == {"b": 3, "c": 2, "a": 1}
    harness.store.heartbeat_node("w1")
    assert harness.store.unserved_queued(alive_within=window) == {"c": 2}
    (claimed,) = harness.store.claim("w", tasks=["c"], limit=1)
    assert claimed.firing.task == "c"
    assert harness.store.unserved_queued(alive_within=window) == {"c": 1}  # queued only


def test_a_scheduler_node_serves_nothing(harness: Harness) -> None:
    _queue(harness, "a", 1)
    _node(harness, "s1", kind="scheduler", tasks=["a"])
    assert harness.store.unserved_queued(alive_within=10 * S) == {"a": 1}


def test_unserved_queued_of_one_namespace(harness: Harness) -> None:
    _queue(harness, "a", 2)
    harness.store.enqueue_now(spec("other-a", task="a", schedule=NowSchedule(), namespace="o"))
    harness.store.enqueue_now(spec("other-z", task="z", schedule=NowSchedule(), namespace="o"))
    window = 10 * S
    assert harness.store.unserved_queued(alive_within=window) == {"a": 3, "z": 1}
    assert harness.store.unserved_queued(alive_within=window, namespace="default") == {"a": 2}
    assert harness.store.unserved_queued(alive_within=window, namespace="o") == {"a": 1, "z": 1}
    assert harness.store.unserved_queued(alive_within=window, namespace="none") == {}


def test_most_heartbeats_skip_the_served_tasks_statement(tmp_path: Any) -> None:
    """SQLite, traced: a worker's heartbeat runs the served-tasks upsert on at most one
    heartbeat a minute (by the store's clock) per handle; the others are one UPDATE."""
    from cronwheel.domain.clock import FakeClock
    from cronwheel.store.sqlite import SqliteStore
    from tests.contract.conftest import T0

    clock = FakeClock(T0)
    store = SqliteStore(str(tmp_path / "trace.db"), clock=clock)
    store.migrate()
    statements: list[str] = []
    store.db.conn.set_trace_callback(statements.append)
    try:
        store.register_node(
            NodeInfo(
                id="w1",
                kind="worker",
                hostname="h",
                pid=1,
                started_at=T0,
                heartbeat_at=T0,
                info={"tasks": ["a"]},
            )
        )

        def upserts() -> int:
            return sum(1 for s in statements if "INSERT INTO served_tasks" in s)

        assert upserts() == 1  # registration
        for _ in range(11):  # a heartbeat every 5 s for 55 s
            clock.advance(5 * S)
            store.heartbeat_node("w1")
        assert upserts() == 1
        clock.advance(5 * S)  # 60 s after the registration
        store.heartbeat_node("w1")
        assert upserts() == 2
        (a,) = store.served_tasks()
        assert a.last_seen == T0 + 60 * S
    finally:
        store.db.conn.set_trace_callback(None)
        store.close()
