"""Process-local Prometheus metrics of schedulers and workers.

Claims, redeliveries, lease renewals, ``lease_lost``, fenced writes, store errors,
enqueue lag, attempts and start lateness: counted by the process that sees them
(through the event sinks of ``observability.sinks``) and served by
``--metrics-port`` (off by default). Names and meanings: README "Observability".

Nothing is registered at import: :func:`process_metrics` registers the collectors
with the default registry the first time it is called (once per process), and
:class:`ProcessMetrics` can be built on a registry of one's own.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from cronwheel.observability.lateness import BUCKETS_S


class ProcessMetrics:
    """The collectors of one process, registered with ``registry`` when built."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        r = registry
        # -- scheduler
        self.enqueued = Counter(
            "cronwheel_dispatcher_enqueued", "Firings this leader enqueued.", registry=r
        )
        self.duplicates = Counter(
            "cronwheel_dispatcher_duplicates",
            "Enqueues refused by the (job_id, scheduled_for) key.",
            registry=r,
        )
        self.missed_instants = Counter(
            "cronwheel_dispatcher_missed_instants",
            "Instants dropped by a misfire policy.",
            registry=r,
        )
        self.enqueue_lag = Histogram(
            "cronwheel_dispatcher_enqueue_lag_seconds",
            "How late a firing was enqueued after its planned enqueue time (scheduled_for - lead).",
            buckets=BUCKETS_S,
            registry=r,
        )
        self.lease_acquired = Counter(
            "cronwheel_dispatcher_lease_acquired", "Terms won (epoch + 1).", registry=r
        )
        self.lease_renewals = Counter(
            "cronwheel_dispatcher_lease_renewals", "Dispatcher lease renewals.", registry=r
        )
        self.lease_lost = Counter(
            "cronwheel_dispatcher_lease_lost",
            "Leaderships lost (lease_lost events).",
            registry=r,
        )
        self.fenced_writes = Counter(
            "cronwheel_dispatcher_fenced_writes",
            "Enqueue batches refused by the epoch fence.",
            registry=r,
        )
        self.is_leader = Gauge(
            "cronwheel_dispatcher_is_leader",
            "1 while this scheduler holds the lease.",
            registry=r,
        )
        self.epoch = Gauge(
            "cronwheel_dispatcher_epoch",
            "Epoch of the lease this scheduler last held.",
            registry=r,
        )
        self.tz_refused = Gauge(
            "cronwheel_dispatcher_tz_refused",
            "1 while this scheduler may not lead: its tz database is not the cluster's.",
            registry=r,
        )
        self.tz_moved = Counter(
            "cronwheel_dispatcher_tz_moved_firings",
            "Job cursors re-resolved (firings moved) when this leader adopted its tz database.",
            registry=r,
        )
        self.reaped = Counter(
            "cronwheel_dispatcher_reaped",
            "Firings the reaper changed (expired claims re-queued, ...).",
            registry=r,
        )
        self.pruned = Counter(
            "cronwheel_dispatcher_pruned_firings",
            "Finished firings the leader's retention pass deleted.",
            registry=r,
        )
        # -- worker
        self.claims = Counter("cronwheel_worker_claims", "Firings claimed.", registry=r)
        self.redeliveries = Counter(
            "cronwheel_worker_redeliveries",
            "Claims of a firing's second or later attempt.",
            registry=r,
        )
        self.attempts = Counter(
            "cronwheel_worker_attempts", "Attempts run, by outcome.", ["outcome"], registry=r
        )
        self.worker_lateness = Histogram(
            "cronwheel_worker_lateness_seconds",
            "Start lateness (start - scheduled_for) of first attempts run by this worker.",
            buckets=BUCKETS_S,
            registry=r,
        )
        self.claim_renewals = Counter(
            "cronwheel_worker_claim_renewals", "Claim leases renewed.", registry=r
        )
        self.claims_lost = Counter(
            "cronwheel_worker_claims_lost", "Claims lost while running.", registry=r
        )
        self.rejected = Counter(
            "cronwheel_worker_completions_rejected",
            "Results refused: the claim was no longer held.",
            registry=r,
        )
        # -- both
        self.store_errors = Counter(
            "cronwheel_store_errors",
            "Transient store errors (StoreUnavailableError).",
            registry=r,
        )
        # labels() is a lookup under a lock: once per outcome, not per firing
        self._attempt_children: dict[str, Any] = {}

    def attempt(self, outcome: str) -> Any:
        """The ``cronwheel_worker_attempts`` child of ``outcome``."""
        child = self._attempt_children.get(outcome)
        if child is None:
            child = self._attempt_children[outcome] = self.attempts.labels(outcome)
        return child


_lock = threading.Lock()
_process: ProcessMetrics | None = None


def process_metrics() -> ProcessMetrics:
    """This process's metrics in the default registry (registered on the first call)."""
    global _process  # noqa: PLW0603 - one set of collectors per process, made on demand
    with _lock:
        if _process is None:
            _process = ProcessMetrics()
        return _process


def serve_metrics(port: int, host: str = "127.0.0.1") -> None:
    """Expose this process's metrics on ``http://host:port/metrics`` (a daemon thread)."""
    process_metrics()
    start_http_server(port, addr=host)
