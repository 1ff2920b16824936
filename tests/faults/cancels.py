"""Helpers of the cancellation scenarios: the processes with an API, the store's view of
a set of jobs' firings, and the handler's own ledger by idempotency key."""

from __future__ import annotations

import socket
from collections import Counter
from dataclasses import dataclass
from typing import Any

from cronwheel import Client
from cronwheel.domain.firing import TERMINAL_STATES, idempotency_key
from cronwheel.domain.models import Firing
from tests.faults.harness import Cluster, Proc, wait_until

ENGINES = ["sqlite", "postgres"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Setup:
    scheduler: Proc
    workers: list[Proc]
    api: Client


def setup(cluster: Cluster, workers: int = 2, concurrency: int = 8) -> Setup:
    """A scheduler (leading), ``workers`` workers and an API process; the API client."""
    s = cluster.start_scheduler("s-1")
    ws = [cluster.start_worker(f"w{i + 1}", concurrency=concurrency) for i in range(workers)]
    port = free_port()
    api_proc = cluster.start_api(port)
    cluster.wait_started([s, *ws])
    wait_until(lambda: s.events("lease_acquired"), 15, message="the scheduler to lead")
    client = Client(f"http://127.0.0.1:{port}", timeout=10)
    wait_until(lambda: client.ready() or not api_proc.alive(), 20, 0.1, message="the API to serve")
    assert api_proc.alive(), "the API died at start:\n" + "\n".join(api_proc.lines()[-20:])
    return Setup(s, ws, client)


def firings_of(cluster: Cluster, job_ids: set[int]) -> dict[int, Firing]:
    """The firings of these jobs, by firing id (one store read)."""
    rows = cluster.client.store.list_firings(namespace=cluster.client.namespace, limit=100_000)
    return {int(f.id): f for f in rows if int(f.job_id) in job_ids}


def log_by_key(cluster: Cluster) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for e in cluster.executions_log():
        out.setdefault(e["key"], []).append(e)
    return out


def effects(cluster: Cluster) -> dict[str, int]:
    return {r["key"]: int(r["runs"]) for r in cluster.sql("SELECT key, runs FROM fault_effects")}


def key_of(f: Firing) -> str:
    return idempotency_key(int(f.job_id), f.scheduled_for)


def wait_terminal(cluster: Cluster, job_ids: set[int], count: int, timeout: float) -> None:
    def done() -> bool:
        fs = firings_of(cluster, job_ids)
        return len(fs) == count and all(f.state in TERMINAL_STATES for f in fs.values())

    def state() -> str:
        return str(Counter(f.state.value for f in firings_of(cluster, job_ids).values()))

    wait_until(done, timeout, 0.1, message=lambda: f"every firing to end: {state()}")
