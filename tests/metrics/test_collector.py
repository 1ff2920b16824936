"""The cluster collector: store state in, Prometheus exposition out (parsed back with
prometheus_client's own parser)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from cronwheel.domain.clock import ClockEstimate, FakeClock
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import ClaimedFiring, Firing, FiringId, NodeInfo
from cronwheel.errors import FiringNotFoundError, StoreUnavailableError
from cronwheel.observability.cluster import ClusterCollector, FiringTally
from cronwheel.observability.process import serve_metrics
from cronwheel.observability.sinks import DispatcherSink, WorkerSink
from cronwheel.server import create_app
from cronwheel.store.protocol import DISPATCHER_LEASE
from cronwheel.store.sqlite import SqliteStore
from cronwheel.web.tokens import issue_token

from .helpers import T0, claim_all, finish, make_store, queue, samples, value

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's TestClient packaging warning (httpx2)
    from starlette.testclient import TestClient


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[SqliteStore]:
    s = make_store(tmp_path, clock)
    yield s
    s.close()


def scrape(collector: ClusterCollector) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def test_gauges_tell_leader_queue_nodes_and_jobs(store: SqliteStore, clock: FakeClock) -> None:
    queue(store, "a")
    queue(store, "b")
    assert len(claim_all(store, limit=1)) == 1
    store.acquire_lease(DISPATCHER_LEASE, "sched-1", timedelta(seconds=10))
    for node_id, kind in (("sched-1", "scheduler"), ("w1", "worker"), ("w2", "worker")):
        store.register_node(
            NodeInfo(id=node_id, kind=kind, hostname="h", pid=1, started_at=T0, heartbeat_at=T0)
        )
    clock.advance(timedelta(seconds=3))
    store.heartbeat_node("sched-1")
    store.heartbeat_node("w1")
    clock.advance(timedelta(seconds=9))  # w2 last beat 12 s ago: stale (> 10 s)
    text = scrape(ClusterCollector(store))

    assert value(text, "cronwheel_store_up") == 1
    assert value(text, "cronwheel_leader_up") == 0  # a 10 s lease, 12 s ago
    assert value(text, "cronwheel_leader_epoch") == 1
    # registered jobs: immediate one-shots (`enqueue`) are firings, not counted here (the
    # count is the jobs quota's counter: no scan of a job table holding one per enqueue)
    assert value(text, "cronwheel_jobs") == 0
    assert value(text, "cronwheel_queue_depth", state="queued") == 1
    assert value(text, "cronwheel_queue_depth", state="running") == 1
    assert value(text, "cronwheel_nodes", kind="worker", state="alive") == 1
    assert value(text, "cronwheel_nodes", kind="worker", state="stale") == 1
    assert value(text, "cronwheel_nodes", kind="scheduler", state="alive") == 1
    assert value(text, "cronwheel_node_heartbeat_age_seconds", kind="worker", node="w2") == 12
    assert value(text, "cronwheel_node_is_leader", node="sched-1") == 0
    assert value(text, "cronwheel_oldest_queued_age_seconds") == 12
    assert value(text, "cronwheel_namespace_firings", namespace="default", state="queued") == 1
    assert value(text, "cronwheel_job_backlog", namespace="default", job="a") == 1
    assert value(text, "cronwheel_lateness_objective_seconds") == 0.2

    store.acquire_lease(DISPATCHER_LEASE, "sched-1", timedelta(seconds=10))  # epoch 2
    text = scrape(ClusterCollector(store))
    assert value(text, "cronwheel_leader_up") == 1
    assert value(text, "cronwheel_leader_epoch") == 2
    assert value(text, "cronwheel_node_is_leader", node="sched-1") == 1


def test_node_clocks_are_gauges_per_node(store: SqliteStore) -> None:
    """What each node last reported of its clock: offset, uncertainty, flag; a node
    that has not measured it has no series."""
    for node_id in ("w1", "w2", "w3"):
        store.register_node(
            NodeInfo(id=node_id, kind="worker", hostname="h", pid=1, started_at=T0, heartbeat_at=T0)
        )
    store.heartbeat_node("w1", ClockEstimate(-3.0, 0.0005))
    store.heartbeat_node("w2", ClockEstimate(12.0, 0.002, "clock offset +12.000 s is beyond ±10 s"))
    text = scrape(ClusterCollector(store))
    assert value(text, "cronwheel_node_clock_offset_seconds", kind="worker", node="w1") == -3.0
    assert value(text, "cronwheel_node_clock_uncertainty_seconds", kind="worker", node="w1") == (
        0.0005
    )
    assert value(text, "cronwheel_node_clock_flagged", kind="worker", node="w1") == 0
    assert value(text, "cronwheel_node_clock_flagged", kind="worker", node="w2") == 1
    assert value(text, "cronwheel_node_clock_offset_seconds", kind="worker", node="w2") == 12.0
    assert value(text, "cronwheel_node_clock_offset_seconds", kind="worker", node="w3") is None
    assert value(text, "cronwheel_node_clock_flagged", kind="worker", node="w3") is None


def test_stuck_claims_are_running_firings_past_their_lease(
    store: SqliteStore, clock: FakeClock
) -> None:
    queue(store, "slow")
    claim_all(store)
    collector = ClusterCollector(store)
    assert value(scrape(collector), "cronwheel_stuck_claims") == 0
    clock.advance(timedelta(seconds=31))  # default visibility timeout 30 s, no heartbeat
    assert value(scrape(collector), "cronwheel_stuck_claims") == 1


def test_a_held_claim_past_its_lease_is_stuck_too(store: SqliteStore, clock: FakeClock) -> None:
    """A held (CLAIMED) firing is counted in the queue depth, and when the worker that
    holds it died it is stuck once its lease has expired, as a running one is, until the
    reaper takes it back (the collector scanned QUEUED and RUNNING only)."""
    queue(store, "held")
    (held,) = store.claim("w1", tasks=["t"], limit=1, start=0)
    assert not held.started
    collector = ClusterCollector(store)
    assert value(scrape(collector), "cronwheel_stuck_claims") == 0
    assert value(scrape(collector), "cronwheel_queue_depth", state="claimed") == 1
    clock.advance(timedelta(seconds=31))  # default visibility timeout 30 s, no heartbeat
    assert value(scrape(collector), "cronwheel_stuck_claims") == 1


def test_outcome_counters_and_lateness_histogram_are_cumulative(
    store: SqliteStore, clock: FakeClock
) -> None:
    old = queue(store, "history")
    finish(store, claim_all(store)[0], late_ms=1)  # finished before the first scrape
    pending = queue(store, "pending")  # queued at the first scrape
    collector = ClusterCollector(store)
    text = scrape(collector)
    assert (
        value(text, "cronwheel_firings_finished_total", namespace="default", outcome="succeeded")
        is None
    )
    assert old.id < pending.id

    fresh = queue(store, "fresh")
    claims = {c.firing.id: c for c in claim_all(store)}
    finish(store, claims[pending.id], late_ms=3)  # 2.5 ms < 3 ms <= 5 ms
    finish(store, claims[fresh.id], late_ms=400, ok=False, retry=True)  # re-queued
    text = scrape(collector)
    assert (
        value(text, "cronwheel_firings_finished_total", namespace="default", outcome="succeeded")
        == 1
    )
    assert (
        value(text, "cronwheel_firing_lateness_seconds_bucket", namespace="default", le="0.0025")
        == 0
    )
    assert (
        value(text, "cronwheel_firing_lateness_seconds_bucket", namespace="default", le="0.005")
        == 1
    )
    assert value(text, "cronwheel_firing_lateness_seconds_count", namespace="default") == 1

    # the re-queued firing is still pending; it fails for good on its last attempt
    for _ in range(2):
        clock.advance(timedelta(seconds=1))
        finish(store, claim_all(store)[0], late_ms=2000, ok=False, retry=True)
    text = scrape(collector)
    assert value(text, "cronwheel_firings_finished_total", namespace="default", outcome="dead") == 1
    assert value(text, "cronwheel_firing_failed_attempts_total", namespace="default") == 3
    # a retry's lateness is not the scheduler's: only first attempts enter the histogram
    assert value(text, "cronwheel_firing_lateness_seconds_count", namespace="default") == 1
    assert value(
        text, "cronwheel_firing_lateness_seconds_sum", namespace="default"
    ) == pytest.approx(0.003)

    again = scrape(collector)  # nothing new: nothing counted twice
    assert samples(again) == samples(text)


def test_a_firing_inserted_early_and_finished_late_is_counted(store: SqliteStore) -> None:
    first = queue(store, "first")
    second = queue(store, "second")
    claims = {c.firing.id: c for c in claim_all(store)}
    collector = ClusterCollector(store)
    scrape(collector)
    finish(store, claims[second.id], late_ms=1)
    text = scrape(collector)
    assert (
        value(text, "cronwheel_firings_finished_total", namespace="default", outcome="succeeded")
        == 1
    )
    finish(store, claims[first.id], late_ms=1)  # an older id finishing after a newer one
    text = scrape(collector)
    assert (
        value(text, "cronwheel_firings_finished_total", namespace="default", outcome="succeeded")
        == 2
    )


def test_per_job_series_only_within_the_bound_namespaces_always(store: SqliteStore) -> None:
    queue(store, "a", namespace="team-a")
    queue(store, "b", namespace="team-b")
    text = scrape(ClusterCollector(store, max_jobs=1))
    assert value(text, "cronwheel_job_labels_enabled") == 0
    assert not [k for k in samples(text) if k[0] == "cronwheel_job_backlog"]
    assert value(text, "cronwheel_namespace_firings", namespace="team-a", state="queued") == 1
    assert value(text, "cronwheel_namespace_firings", namespace="team-b", state="queued") == 1
    text = scrape(ClusterCollector(store, max_jobs=2))
    assert value(text, "cronwheel_job_labels_enabled") == 1
    assert value(text, "cronwheel_job_backlog", namespace="team-b", job="b") == 1


def test_bound_comes_from_the_environment(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONWHEEL_METRICS_MAX_JOBS", "0")
    queue(store, "a")
    assert value(scrape(ClusterCollector(store)), "cronwheel_job_labels_enabled") == 0


def test_hostile_job_names_survive_as_label_values(store: SqliteStore) -> None:
    name = 'evil"} 1\\\n<script>alert(1)</script>\u202egnp.exe'.replace("\n", " ")
    queue(store, name)
    text = scrape(ClusterCollector(store))
    assert value(text, "cronwheel_job_backlog", namespace="default", job=name) == 1


def test_lateness_objective_breaches_per_job(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONWHEEL_LATENESS_OBJECTIVE_MS", "50")
    queue(store, "late")
    queue(store, "prompt")
    claims = {c.firing.job_name: c for c in claim_all(store)}
    finish(store, claims["late"], late_ms=120)
    finish(store, claims["prompt"], late_ms=2)
    text = scrape(ClusterCollector(store))
    assert value(text, "cronwheel_lateness_objective_seconds") == 0.05
    assert value(text, "cronwheel_lateness_objective_breaches") == 1
    assert value(
        text, "cronwheel_job_lateness_p99_seconds", namespace="default", job="late"
    ) == pytest.approx(0.12)


class _DownStore:
    def status(self) -> Any:
        raise StoreUnavailableError("database is locked")


def test_store_down_reports_store_up_zero_and_keeps_counters() -> None:
    text = scrape(ClusterCollector(_DownStore(), max_jobs=5))  # type: ignore[arg-type]
    assert value(text, "cronwheel_store_up") == 0
    assert value(text, "cronwheel_metrics_untracked_firings_total") == 0


# -- the tally's bounds, on a fake firing list ---------------------------------------------------
class _Firings:
    """list_firings/get_firing over a dict: enough for FiringTally."""

    def __init__(self) -> None:
        self.rows: dict[int, Firing] = {}
        self.reads = 0
        self.rows_read = 0

    def put(self, base: Firing, fid: int, state: FiringState) -> None:
        self.rows[fid] = replace(base, id=FiringId(fid), state=state, attempt=1)

    def list_firings(
        self,
        *,
        before_id: int | None = None,
        after_id: int | None = None,
        limit: int = 100,
        **_: Any,
    ) -> list[Firing]:
        self.reads += 1
        ids = sorted(
            (
                i
                for i in self.rows
                if (before_id is None or i < before_id) and (after_id is None or i > after_id)
            ),
            reverse=True,
        )
        page = [self.rows[i] for i in ids[:limit]]
        self.rows_read += len(page)
        return page

    def get_firing(self, firing_id: int) -> Firing:
        if firing_id not in self.rows:
            raise FiringNotFoundError("gone")
        return self.rows[firing_id]


def test_tally_walks_a_bounded_window_and_rechecks_old_pending_ids(store: SqliteStore) -> None:
    base = queue(store, "template")
    fake = _Firings()
    fake.put(base, 1, FiringState.QUEUED)  # long-pending (e.g. a backfill far ahead)
    fake.put(base, 2, FiringState.QUEUED)  # pending, will be deleted
    for i in range(3, 50):
        fake.put(base, i, FiringState.SUCCEEDED)
    tally = FiringTally(max_scan=10)
    tally.update(fake)  # type: ignore[arg-type]
    assert tally.pending == set()  # ids 1, 2 lie below the first window: history
    assert tally.high == 49

    fake.put(base, 50, FiringState.QUEUED)
    fake.put(base, 51, FiringState.QUEUED)
    tally.update(fake)  # type: ignore[arg-type]
    assert tally.pending == {50, 51}
    for i in range(52, 80):  # more than max_scan new rows: 50 and 51 fall below the window
        fake.put(base, i, FiringState.SUCCEEDED)
    fake.put(base, 50, FiringState.SUCCEEDED)
    del fake.rows[51]
    tally.update(fake)  # type: ignore[arg-type]
    assert tally.outcomes[("default", "succeeded")] == 10 + 1  # the window, plus 50 re-checked
    assert tally.untracked == 79 - 10 - 51  # ids 52..69 were never seen
    assert tally.pending == set()  # 51 no longer exists


def test_tally_reads_no_row_below_what_it_has_seen(store: SqliteStore) -> None:
    """A scrape with nothing new reads no firing; one after new firings reads those and
    the ones it saw unfinished, not the history below them."""
    base = queue(store, "template")
    fake = _Firings()
    for i in range(1, 500):
        fake.put(base, i, FiringState.SUCCEEDED)
    fake.put(base, 500, FiringState.RUNNING)
    tally = FiringTally()
    tally.update(fake)  # type: ignore[arg-type]
    assert tally.pending == {500}
    fake.rows_read = 0
    tally.update(fake)  # type: ignore[arg-type]
    assert fake.rows_read == 1  # the pending one (id 500) and nothing below it
    fake.put(base, 500, FiringState.SUCCEEDED)
    fake.put(base, 501, FiringState.SUCCEEDED)
    fake.rows_read = 0
    tally.update(fake)  # type: ignore[arg-type]
    assert fake.rows_read == 2
    assert tally.outcomes[("default", "succeeded")] == 2
    assert tally.pending == set()
    fake.rows_read = 0
    tally.update(fake)  # type: ignore[arg-type]
    assert fake.rows_read == 0


def test_tally_first_update_counts_nothing_but_remembers_unfinished(store: SqliteStore) -> None:
    base = queue(store, "template")
    fake = _Firings()
    fake.put(base, 1, FiringState.SUCCEEDED)
    fake.put(base, 2, FiringState.RUNNING)
    tally = FiringTally()
    tally.update(fake)  # type: ignore[arg-type]
    assert dict(tally.outcomes) == {}
    assert tally.pending == {2}
    fake.put(base, 2, FiringState.CANCELLED)
    tally.update(fake)  # type: ignore[arg-type]
    assert dict(tally.outcomes) == {("default", "cancelled"): 1}


# -- /metrics on the API -------------------------------------------------------------------------
def test_metrics_endpoint_needs_an_admin_token_when_auth_is_on(store: SqliteStore) -> None:
    admin = issue_token(store, namespace="ops", role="admin")[1]
    read = issue_token(store, namespace="ops", role="read")[1]
    with TestClient(create_app(store, auth_required=True)) as client:
        assert client.get("/metrics").status_code == 401
        assert (
            client.get("/metrics", headers={"Authorization": f"Bearer {read}"}).status_code == 403
        )
        r = client.get("/metrics", headers={"Authorization": f"Bearer {admin}"})
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain")
        assert value(r.text, "cronwheel_store_up") == 1
        assert "/metrics" not in client.get("/openapi.json").json()["paths"]


def test_metrics_endpoint_is_open_without_auth(store: SqliteStore) -> None:
    with TestClient(create_app(store, auth_required=False)) as client:
        assert value(client.get("/metrics").text, "cronwheel_store_up") == 1


# -- process-local metrics -----------------------------------------------------------------------
def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_worker_and_dispatcher_hooks_count(store: SqliteStore) -> None:
    queue(store, "x")
    claims: list[ClaimedFiring] = claim_all(store)
    before = {
        n: _sample(n)
        for n in (
            "cronwheel_worker_claims_total",
            "cronwheel_worker_redeliveries_total",
            "cronwheel_dispatcher_lease_lost_total",
        )
    }
    worker, dispatcher = WorkerSink(), DispatcherSink()
    worker.claimed(claims)
    worker.claimed([c for c in claims for _ in range(2)])
    redelivered = replace(claims[0], firing=replace(claims[0].firing, attempt=2))
    worker.claimed([redelivered])
    dispatcher.lease_renewed(7)
    dispatcher.lease_lost("me", 7, "test")
    assert _sample("cronwheel_worker_claims_total") - before["cronwheel_worker_claims_total"] == 4
    assert (
        _sample("cronwheel_worker_redeliveries_total")
        - before["cronwheel_worker_redeliveries_total"]
        == 1
    )
    assert (
        _sample("cronwheel_dispatcher_lease_lost_total")
        - before["cronwheel_dispatcher_lease_lost_total"]
        == 1
    )
    assert _sample("cronwheel_dispatcher_is_leader") == 0
    assert _sample("cronwheel_dispatcher_epoch") == 7
    late = _sample("cronwheel_worker_lateness_seconds_count")
    worker.firing_succeeded(claims[0].firing, 12.0, 1.0)
    assert _sample("cronwheel_worker_lateness_seconds_count") == late + 1
    assert _sample("cronwheel_worker_attempts_total", outcome="succeeded") >= 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_port_serves_process_metrics() -> None:
    port = _free_port()
    serve_metrics(port)
    WorkerSink().store_unavailable("test")
    deadline = time.monotonic() + 5
    while True:
        try:
            r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert r.status_code == 200
    assert (value(r.text, "cronwheel_store_errors_total") or 0) >= 1
    assert os.getpid()  # served from this very process


def test_process_metrics_are_registered_on_first_use_not_at_import() -> None:
    probe = (
        "from prometheus_client import REGISTRY\n"
        "import cronwheel.node, cronwheel.observability.sinks as sinks\n"
        "before = REGISTRY.get_sample_value('cronwheel_worker_claims_total')\n"
        "sinks.WorkerSink(); sinks.DispatcherSink()\n"
        "after = REGISTRY.get_sample_value('cronwheel_worker_claims_total')\n"
        "print(before, after)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.split() == ["None", "0.0"]
