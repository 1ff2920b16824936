"""Many worker processes through PgBouncer in transaction mode over a server pool of
10: a drain with nothing lost or duplicated, and the server never sees more than the
pool's connections (sampled in ``pg_stat_activity`` every 50 ms by a direct session)."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from tests.faults.harness import FULL, JobHandle, wait_until
from tests.faults.ledger import Expectation
from tests.ha.cluster import POOL_SIZE
from tests.ha.scenario import HaScenario, load_average

pytestmark = pytest.mark.slow

WORKERS = 40
BATCH = 4000 if FULL else 200
DIRECT = ("fault-test", "fault-sampler", "ha-conns")  # the test's own direct sessions


class ConnSampler:
    def __init__(self, url: str) -> None:
        self.url = url
        self.max = 0
        self.samples = 0
        # the sessions counted when the maximum was seen (for a failure's message)
        self.at_max: list[tuple[Any, ...]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.is_set():
                rows = conn.execute(
                    "SELECT application_name, client_addr::text, client_port, state,"
                    " backend_start::text FROM pg_stat_activity"
                    " WHERE datname = current_database() AND backend_type = 'client backend'"
                    " AND coalesce(application_name, '') <> ALL(%s)",
                    (list(DIRECT),),
                ).fetchall()
                if len(rows) > self.max:
                    self.max, self.at_max = len(rows), rows
                self.samples += 1
                self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.mark.timeout(600)
def test_forty_workers_through_pgbouncer_drain(pooled_only: HaScenario) -> None:
    """Only the pooler: with ``listen_hosts`` each worker would add one direct LISTEN
    connection (README "Production deployment")."""
    s = pooled_only
    conns = ConnSampler(s.url("ha-conns"))
    try:
        scheds = [s.start_scheduler("s-1"), s.start_scheduler("s-2")]
        workers = [s.start_worker(f"w{i}", concurrency=4) for i in range(WORKERS)]
        s.wait_started(scheds + workers, timeout=180)
        s.wait_leader(30)
        s.ticker("tick-0", visibility_timeout=30)
        t0 = time.time()
        for _ in range(BATCH):
            f = s.client.enqueue("record")
            s.jobs.append(JobHandle(f.job_name, Expectation(f.job_id, f.job_name, f.scheduled_for)))
        enqueued_s = time.time() - t0
        wait_until(lambda: s.one_shots_done(s.jobs[1:]), 300, 0.2, message=f"{BATCH} firings done")
        drained_s = time.time() - t0
        # counted up to here: stopping 40 workers ends sessions in the middle of a
        # statement, whose server backends run it to its end after PgBouncer has
        # replaced them (PostgreSQL notices a vanished client only when it next
        # writes to it)
        conns.stop()
        s.finish(drain_timeout=60)
    finally:
        conns.stop()
    for p in s.procs:
        assert p.alive(), f"{p.name} died:\n" + "\n".join(p.lines()[-30:])
    report = s.check()
    figures: dict[str, Any] = {
        "workers": WORKERS,
        "server_pool": POOL_SIZE,
        "batch": BATCH,
        "enqueue_s": round(enqueued_s, 2),
        "drain_s": round(drained_s, 2),
        "max_server_connections": conns.max,
        "conn_samples": conns.samples,
        "loadavg_1m": load_average(),
    }
    s.figures.update(figures)
    assert report.clean, report.details()
    assert not report.duplicate_executions, report.details()
    assert conns.samples > 10
    # a unit past stall_timeout has its socket shut by the store's watchdog: the same
    # effect as a stopped worker, so the failure says whether any did
    stalled = [line for p in s.procs for line in p.lines() if "stalled past" in line]
    assert 0 < conns.max <= POOL_SIZE, (figures, conns.at_max, stalled[:5])
