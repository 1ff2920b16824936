"""Cluster truths: ``/metrics`` of any ``cronwheel api`` process.

Computed from the store at scrape time by :class:`ClusterCollector`, so one scrape
of any API node tells the whole story, however many hosts run schedulers and
workers. Gauges (queue depth, backlog, leader, nodes, stuck claims) are read
fresh; the firing counters and the lateness histogram are cumulative in the
collector, which reads the firings that finished since its last scrape (see
:class:`FiringTally`). They count from the API process's start, as any Prometheus
counter does; ``rate()`` and ``increase()`` absorb restarts. The process-local
counters of schedulers and workers are in ``observability.process``.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import FiringId
from cronwheel.domain.numbers import parse_number
from cronwheel.errors import CronwheelError, FiringNotFoundError, ValidationError
from cronwheel.observability.lateness import (
    BUCKETS_S,
    first_attempt_lateness_s,
    objective_ms,
    recent_lateness,
)
from cronwheel.observability.quotas import quota_metrics
from cronwheel.observability.tzdata import tz_status

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from cronwheel.domain.models import Firing, Job
    from cronwheel.store.protocol import ApiStore, StoreStatus

MAX_JOBS_ENV = "CRONWHEEL_METRICS_MAX_JOBS"
MAX_SCAN_ENV = "CRONWHEEL_METRICS_MAX_SCAN"
NODE_STALE_ENV = "CRONWHEEL_METRICS_NODE_STALE_S"

# -- cluster truths ------------------------------------------------------------------------
FINAL_STATES = frozenset(
    {
        FiringState.SUCCEEDED,
        FiringState.DEAD,
        FiringState.CANCELLED,
        FiringState.SKIPPED,
        FiringState.MISSED,
    }
)
ACTIVE_STATES = (FiringState.QUEUED, FiringState.CLAIMED, FiringState.RUNNING)
HELD_STATES = frozenset({FiringState.CLAIMED, FiringState.RUNNING})  # a claim lease runs
_PAGE = 1000


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    try:  # ASCII digits only ('²'.isdigit() is true, and int() refuses it)
        return parse_number(text, name) if text else default
    except ValidationError:
        return default


class FiringTally:
    """Cumulative outcome counts and a lateness histogram, read incrementally.

    Firing ids grow with insertion, not with completion, so a high-water id alone
    would miss a firing inserted early and finished late. The tally keeps the
    highest id it has seen and the ids it saw unfinished (``pending``). Each
    ``update`` walks the firings newest first (``list_firings(before_id=...)``,
    a primary-key range) down to the lower of the two, and reads none below it
    (``after_id``: a scrape with nothing new reads no row); new finished firings and
    pending ones that have finished are counted once. The walk is bounded by
    ``max_scan`` rows; pending firings below it are re-checked one by one (at most
    ``max_recheck`` per update). Firings that finished before the first update are
    history and are not counted; a DEAD firing re-driven later is not counted twice.
    """

    def __init__(self, *, max_scan: int = 10_000, max_recheck: int = 200) -> None:
        self.max_scan = max_scan
        self.max_recheck = max_recheck
        self.high: int | None = None
        self.pending: set[int] = set()
        self.outcomes: dict[tuple[str, str], int] = defaultdict(int)
        self.failed_attempts: dict[str, int] = defaultdict(int)
        self.buckets: dict[str, list[int]] = {}  # namespace -> per-bucket (non-cumulative) + inf
        self.sums: dict[str, float] = defaultdict(float)
        self.untracked = 0  # firings skipped because more than max_scan arrived between updates

    def _count(self, f: Firing) -> None:
        self.outcomes[(f.namespace, f.state.value)] += 1
        if f.state is FiringState.DEAD:
            self.failed_attempts[f.namespace] += f.attempt
        elif f.attempt > 1:
            self.failed_attempts[f.namespace] += f.attempt - 1
        late = first_attempt_lateness_s(f)
        if late is None:
            return
        late = max(0.0, late)
        counts = self.buckets.setdefault(f.namespace, [0] * (len(BUCKETS_S) + 1))
        index = next((i for i, b in enumerate(BUCKETS_S) if late <= b), len(BUCKETS_S))
        counts[index] += 1
        self.sums[f.namespace] += late

    def _see(self, f: Firing, old_high: int | None) -> None:
        new = old_high is not None and f.id > old_high
        if f.state in FINAL_STATES:
            if f.id in self.pending:
                self.pending.discard(f.id)
                self._count(f)
            elif new:
                self._count(f)
        elif old_high is None or new or f.id in self.pending:
            self.pending.add(f.id)

    def update(self, store: ApiStore) -> None:
        old_high = self.high
        floor = -1 if old_high is None else old_high
        if self.pending:
            floor = min(floor, min(self.pending) - 1)
        scanned = 0
        before: int | None = None
        top: int | None = None
        lowest: int | None = None
        complete = False
        walked: set[int] = set()
        while scanned < self.max_scan:
            limit = min(_PAGE, self.max_scan - scanned)
            page = store.list_firings(
                before_id=before, after_id=None if floor < 0 else floor, limit=limit
            )
            for f in page:
                if top is None:
                    top = f.id
                if f.id <= floor:
                    complete = True
                    break
                lowest = f.id
                walked.add(f.id)
                self._see(f, old_high)
            scanned += len(page)
            if complete or len(page) < limit:
                complete = True
                break
            before = page[-1].id
        # pending ids inside the walked range that were not seen no longer exist (deleted)
        bottom = floor if complete else (lowest if lowest is not None else floor)
        self.pending = {p for p in self.pending if p <= bottom or p in walked}
        if not complete and old_high is not None:
            if lowest is not None and lowest > old_high + 1:
                self.untracked += lowest - old_high - 1
            rest = sorted((p for p in self.pending if lowest is None or p < lowest), reverse=True)
            for fid in rest[: self.max_recheck]:
                try:
                    f = store.get_firing(FiringId(fid))
                except FiringNotFoundError:
                    self.pending.discard(fid)
                    continue
                self._see(f, old_high)
        if top is not None:
            self.high = max(top, old_high or 0)
        elif self.high is None:
            self.high = 0


class ClusterCollector(Collector):
    """The cluster's metrics, read from the store at scrape time (thread-safe)."""

    def __init__(
        self,
        store: ApiStore,
        *,
        max_jobs: int | None = None,
        max_scan: int | None = None,
        node_stale_s: float | None = None,
    ) -> None:
        self.store = store
        self.max_jobs = _env_int(MAX_JOBS_ENV, 200) if max_jobs is None else max_jobs
        self.max_scan = _env_int(MAX_SCAN_ENV, 10_000) if max_scan is None else max_scan
        self.node_stale_s = (
            float(_env_int(NODE_STALE_ENV, 10)) if node_stale_s is None else node_stale_s
        )
        self.tally = FiringTally(max_scan=self.max_scan)
        self._backlog: dict[tuple[str, str], int] = {}  # per job, set by _active each scrape
        self._lock = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        return []  # never touch the store at registration

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            up = GaugeMetricFamily("cronwheel_store_up", "1 when the store answered this scrape.")
            try:
                families = list(self._gauges())
                self.tally.update(self.store)
            except CronwheelError:
                up.add_metric([], 0)
                return [up, *self._cumulative()]
            up.add_metric([], 1)
            return [up, *families, *self._cumulative()]

    def _gauges(self) -> Iterable[Metric]:
        store = self.store
        s = store.status()
        now = s.now
        lease = s.lease
        alive = lease is not None and lease.expires_at > now

        g = GaugeMetricFamily("cronwheel_queue_depth", "Firings by active state.", labels=["state"])
        for state in ACTIVE_STATES:
            g.add_metric([state.value], s.counts.get(state.value, 0))
        yield g
        yield _gauge("cronwheel_jobs", "Jobs registered (immediate one-shots not counted).", s.jobs)
        yield _gauge("cronwheel_jobs_paused", "Jobs paused.", s.paused_jobs)
        oldest = 0.0
        if s.oldest_queued_due_at is not None:
            oldest = max(0.0, (now - s.oldest_queued_due_at).total_seconds())
        yield _gauge(
            "cronwheel_oldest_queued_age_seconds",
            "How long the oldest due QUEUED firing has waited past its due time.",
            oldest,
        )
        yield _gauge("cronwheel_leader_up", "1 when a live leader holds the lease.", int(alive))
        yield _gauge(
            "cronwheel_leader_epoch",
            "Epoch (fencing token) of the lease.",
            lease.epoch if lease else 0,
        )
        yield _gauge(
            "cronwheel_lateness_objective_seconds",
            "The p99 lateness objective every job is held to.",
            objective_ms() / 1000,
        )
        nodes = GaugeMetricFamily(
            "cronwheel_nodes",
            "Nodes by kind and liveness (heartbeat age).",
            labels=["kind", "state"],
        )
        ages = GaugeMetricFamily(
            "cronwheel_node_heartbeat_age_seconds",
            "Seconds since each node's last heartbeat.",
            labels=["kind", "node"],
        )
        leader = GaugeMetricFamily(
            "cronwheel_node_is_leader", "1 for the scheduler holding a live lease.", labels=["node"]
        )
        offsets = GaugeMetricFamily(
            "cronwheel_node_clock_offset_seconds",
            "Each node's clock offset to the store's clock (the store's minus the node's,"
            " as the node last measured it; nodes that have not measured it are left out).",
            labels=["kind", "node"],
        )
        uncertainties = GaugeMetricFamily(
            "cronwheel_node_clock_uncertainty_seconds",
            "How far each node's clock offset estimate may be off (half its best round"
            " trip to the store, grown with its age).",
            labels=["kind", "node"],
        )
        flagged = GaugeMetricFamily(
            "cronwheel_node_clock_flagged",
            "1 for a node whose clock offset or its uncertainty is past its bounds (a"
            " flagged worker claims no firing until it recovers).",
            labels=["kind", "node"],
        )
        tally: dict[tuple[str, str], int] = defaultdict(int)
        for kind in ("scheduler", "worker"):
            tally[(kind, "alive")] = 0
            tally[(kind, "stale")] = 0
        for n in s.nodes:
            age = max(0.0, (now - n.heartbeat_at).total_seconds())
            tally[(n.kind, "alive" if age <= self.node_stale_s else "stale")] += 1
            ages.add_metric([n.kind, n.id], age)
            if n.clock is not None:
                offsets.add_metric([n.kind, n.id], n.clock.offset)
                uncertainties.add_metric([n.kind, n.id], n.clock.uncertainty)
                flagged.add_metric([n.kind, n.id], int(n.clock.flag is not None))
            if n.kind == "scheduler":
                leader.add_metric([n.id], int(alive and lease is not None and lease.holder == n.id))
        for (kind, liveness), count in sorted(tally.items()):
            nodes.add_metric([kind, liveness], count)
        yield from (nodes, ages, leader, offsets, uncertainties, flagged)
        yield from _tz_metrics(s, timedelta(seconds=self.node_stale_s))
        unserved = GaugeMetricFamily(
            "cronwheel_unserved_firings",
            "Queued firings whose task no live worker serves (heartbeat within the node"
            " staleness window), per task (at most 50 tasks).",
            labels=["task"],
        )
        alive_within = timedelta(seconds=self.node_stale_s)
        for task, count in store.unserved_queued(alive_within=alive_within).items():
            unserved.add_metric([task], count)
        yield unserved
        yield from self._active(now)
        yield from self._per_job()
        yield from quota_metrics(store)

    def _active(self, now: datetime) -> Iterable[Metric]:
        """Backlog per namespace (and per job, when bounded) and stuck claims, from one
        bounded pass over the QUEUED, CLAIMED and RUNNING firings."""
        per_ns: dict[tuple[str, str], int] = defaultdict(int)
        per_job: dict[tuple[str, str], int] = defaultdict(int)
        stuck = 0
        scanned = 0
        before: int | None = None
        truncated = False
        while True:
            limit = min(_PAGE, self.max_scan - scanned)
            if limit <= 0:
                truncated = True
                break
            page = self.store.list_firings(states=ACTIVE_STATES, before_id=before, limit=limit)
            for f in page:
                per_ns[(f.namespace, f.state.value)] += 1
                per_job[(f.namespace, f.job_name)] += 1
                if f.state in HELD_STATES and f.lease_until is not None and f.lease_until < now:
                    stuck += 1
            scanned += len(page)
            if len(page) < limit:
                break
            before = page[-1].id
        g = GaugeMetricFamily(
            "cronwheel_namespace_firings",
            "QUEUED, CLAIMED and RUNNING firings per namespace.",
            labels=["namespace", "state"],
        )
        for (ns, state), count in sorted(per_ns.items()):
            g.add_metric([ns, state], count)
        yield g
        yield _gauge(
            "cronwheel_stuck_claims",
            "CLAIMED (held) and RUNNING firings whose claim lease has expired and that no "
            "reaper has handled yet.",
            stuck,
        )
        yield _gauge(
            "cronwheel_metrics_scan_truncated",
            f"1 when more active firings exist than {MAX_SCAN_ENV} allows to read per scrape.",
            int(truncated),
        )
        self._backlog = per_job

    def _per_job(self) -> Iterable[Metric]:
        # the jobs listed (immediate one-shots too), at most one past the bound: a
        # bounded read whatever the store holds
        listed = self._all_jobs()
        jobs = listed if len(listed) <= self.max_jobs else None
        return per_job_series(
            self.store, jobs, lambda job: self._backlog.get((job.namespace, job.name), 0)
        )

    def _all_jobs(self) -> list[Job]:
        jobs: list[Job] = []
        after = 0
        while len(jobs) <= self.max_jobs:
            limit = min(_PAGE, self.max_jobs + 1 - len(jobs))  # one past the bound at most
            page = self.store.list_jobs(after_id=after, limit=limit)
            jobs.extend(page)
            if len(page) < limit:
                break
            after = page[-1].id
        return jobs[: self.max_jobs + 1]

    def _cumulative(self) -> list[Metric]:
        t = self.tally
        finished = CounterMetricFamily(
            "cronwheel_firings_finished",
            "Firings that reached a final state, by namespace and outcome.",
            labels=["namespace", "outcome"],
        )
        namespaces = sorted({ns for ns, _ in t.outcomes} | set(t.buckets))
        for ns in namespaces:
            for state in sorted(s.value for s in FINAL_STATES):
                finished.add_metric([ns, state], t.outcomes.get((ns, state), 0))
        failed = CounterMetricFamily(
            "cronwheel_firing_failed_attempts",
            "Failed or expired attempts of finished firings (a DEAD firing counts all of its).",
            labels=["namespace"],
        )
        for ns in namespaces:
            failed.add_metric([ns], t.failed_attempts.get(ns, 0))
        hist = HistogramMetricFamily(
            "cronwheel_firing_lateness_seconds",
            "First-attempt start lateness (started_at - scheduled_for) of finished firings.",
            labels=["namespace"],
        )
        for ns, counts in sorted(t.buckets.items()):
            running = 0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip([*map(str, BUCKETS_S), "+Inf"], counts, strict=True):
                running += count
                buckets.append((bound, running))
            hist.add_metric([ns], buckets, t.sums[ns])
        untracked = CounterMetricFamily(
            "cronwheel_metrics_untracked_firings",
            f"Firings not counted: more arrived between two scrapes than {MAX_SCAN_ENV}.",
        )
        untracked.add_metric([], t.untracked)
        return [finished, failed, hist, untracked]


def per_job_series(
    store: ApiStore, jobs: Sequence[Job] | None, backlog_of: Callable[[Job], int]
) -> list[Metric]:
    """Each job's backlog and recent p99 first-attempt lateness, whether per-job series
    are exported (``jobs`` None: more jobs than the bound, none are), and how many jobs
    breach the lateness objective: the cluster's view and a namespace's alike."""
    backlog = GaugeMetricFamily(
        "cronwheel_job_backlog",
        f"QUEUED + CLAIMED + RUNNING firings per job (only while jobs <= {MAX_JOBS_ENV}).",
        labels=["namespace", "job"],
    )
    p99 = GaugeMetricFamily(
        "cronwheel_job_lateness_p99_seconds",
        "p99 first-attempt lateness of each job's recent firings (jobs <= the bound).",
        labels=["namespace", "job"],
    )
    breaches = 0
    listed = list(jobs or ())
    for job in listed:
        backlog.add_metric([job.namespace, job.name], backlog_of(job))
    # every job's recent lateness in one read (observability/lateness.py), as status
    # and the dashboard compute it
    for job, lat in zip(
        listed, recent_lateness(store, listed, objective=objective_ms()), strict=True
    ):
        if lat.p99_ms is not None:
            p99.add_metric([job.namespace, job.name], lat.p99_ms / 1000)
        breaches += int(lat.breached)
    return [
        backlog,
        p99,
        _gauge(
            "cronwheel_job_labels_enabled",
            "1 when per-job series are exported (job count within the bound).",
            int(jobs is not None),
        ),
        _gauge(
            "cronwheel_lateness_objective_breaches",
            "Jobs whose recent p99 lateness exceeds the objective (jobs <= the bound).",
            breaches,
        ),
    ]


def _tz_metrics(s: StoreStatus, alive_within: timedelta) -> Iterable[Metric]:
    """The cluster's tz database, each node's, and whether they differ (README "Time
    zone database")."""
    tz = tz_status(s, alive_within=alive_within)
    cluster = GaugeMetricFamily(
        "cronwheel_tzdata_cluster",
        "1, labelled with the tz database the leader recorded for the cluster.",
        labels=["source", "version"],
    )
    if tz["cluster"] is not None:
        cluster.add_metric([tz["cluster"]["source"], tz["cluster"]["version"]], 1)
    per_node = GaugeMetricFamily(
        "cronwheel_node_tzdata",
        "1 per node, labelled with the tz database it reports ('' when it reports none).",
        labels=["kind", "node", "source", "version"],
    )
    for n in s.nodes:
        per_node.add_metric([n.kind, n.id, n.tz_source or "", n.tz_version or ""], 1)
    yield from (cluster, per_node)
    yield _gauge(
        "cronwheel_tzdata_mismatched_nodes",
        "Live nodes whose tz database version is not the cluster's.",
        len(tz["mismatched"]),
    )
    yield _gauge(
        "cronwheel_tzdata_mismatch",
        "1 when a live node, or this process, uses another tz database than the cluster's.",
        int(tz["mismatch"]),
    )


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc)
    g.add_metric([], value)
    return g
