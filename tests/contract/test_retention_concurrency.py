"""Pruning while workers claim, on every store: the pass deletes only old finished
history, every claim and completion made meanwhile stands, and (SQLite) a claim waits
behind a pruning batch's writer lock for a bounded time."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from cronwheel.domain.firing import FiringState
from cronwheel.domain.schedules import every
from cronwheel.store.memory import MemoryStore
from cronwheel.store.protocol import DISPATCHER_LEASE
from tests.contract.conftest import Harness, spec
from tests.contract.test_store_contract import _complete, _fire

DAY = timedelta(days=1)
OLD = 3000  # finished firings of the history to prune


def test_pruning_under_concurrent_claims(harness: Harness) -> None:
    store = harness.store
    old = store.create_job(spec("old", schedule=every("1s")), first_fire_at=harness.now())
    t0 = harness.now() - timedelta(seconds=OLD)
    instants = [t0 + timedelta(seconds=i) for i in range(OLD)]
    store.skip_occurrences("default", "old", instants, "history")
    harness.advance(8 * DAY)
    live = store.create_job(
        spec("live", task="live", schedule=every("1s"), max_concurrency=100),
        first_fire_at=harness.now(),
    )
    lease = store.acquire_lease(DISPATCHER_LEASE, "leader", timedelta(days=30))
    assert lease is not None
    worker = harness.open_another()
    done = threading.Event()
    latencies: list[float] = []
    errors: list[BaseException] = []
    rounds = 0

    def work() -> None:
        nonlocal rounds, live
        try:
            while not done.is_set() or rounds < 20:
                at = harness.now() - timedelta(hours=1) + timedelta(milliseconds=rounds)
                _fire(harness, live, at, lease=lease)
                live = store.get_job_by_id(live.id)
                start = time.perf_counter()
                (claim,) = worker.claim("w", tasks=["live"], limit=1)
                latencies.append(time.perf_counter() - start)
                _complete(harness, claim)
                rounds += 1
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    report = store.prune_history(batch=100)
    done.set()
    thread.join(timeout=120)
    assert not errors, errors
    assert report.firings == {"skipped": OLD - 1} and report.done  # the last one is kept
    live_firings = store.list_job_firings(live.id, limit=10_000)
    assert len(live_firings) == rounds
    assert all(f.state is FiringState.SUCCEEDED for f in live_firings)
    assert len(store.list_job_firings(old.id, limit=10)) == 1
    if isinstance(store, MemoryStore):
        return  # one in-process lock for tests' stores: its waits promise nothing (a
        # claim measured 0.81 s behind a batch once in CI, under a loaded machine)
    latencies.sort()
    # a claim waits at most behind one batch: bounded on a loaded 2-core machine too
    assert latencies[-1] < 0.5, latencies[-5:]
