"""``/metrics`` as one namespace's ``admin`` token sees it: that namespace's series only.

A cluster token (or authentication off) reads :class:`~cronwheel.observability.cluster.
ClusterCollector` whole. A namespace's view (:class:`NamespaceView`) holds:

- the cumulative series of the cluster collector (``cronwheel_firings_finished``,
  ``cronwheel_firing_failed_attempts``, ``cronwheel_firing_lateness_seconds``) and its
  quota series (``cronwheel_quota_limit``, ``_used``, ``_skipped_firings``,
  ``_refusals``), with only the samples labelled with the namespace;
- the gauges of the cluster view, computed from the namespace's own rows with the same
  names: ``cronwheel_queue_depth``, ``cronwheel_namespace_firings``, ``cronwheel_jobs``,
  ``cronwheel_jobs_paused``, ``cronwheel_oldest_queued_age_seconds``,
  ``cronwheel_unserved_firings`` (its queued firings per task no live worker serves),
  and the per-job ``cronwheel_job_backlog`` and ``cronwheel_job_lateness_p99_seconds``
  with ``cronwheel_job_labels_enabled`` and ``cronwheel_lateness_objective_breaches``,
  bounded by the namespace's own job count (never the cluster's, whose size it would
  tell);
- two cluster-neutral series that say nothing about other tenants:
  ``cronwheel_store_up`` (the store answered) and
  ``cronwheel_lateness_objective_seconds`` (a configuration constant).

Every other series (leader, epoch, nodes, stuck claims, scan truncation, untracked
firings) describes the cluster and is left out; so is any series added later to the
cluster collector until it is listed here (the safe default).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from cronwheel.errors import CronwheelError
from cronwheel.observability.cluster import ACTIVE_STATES, ClusterCollector, per_job_series

if TYPE_CHECKING:
    from cronwheel.store.protocol import ApiStore

# the cluster collector's series whose samples are labelled by namespace
NAMESPACED = frozenset(
    {
        "cronwheel_firings_finished",
        "cronwheel_firing_failed_attempts",
        "cronwheel_firing_lateness_seconds",
        # the namespace's quotas, what it uses of them, its refusals and skips (quotas.py)
        "cronwheel_quota_limit",
        "cronwheel_quota_used",
        "cronwheel_quota_skipped_firings",
        "cronwheel_quota_refusals",
    }
)
# the cluster collector's series that tell nothing about any tenant
NEUTRAL = frozenset({"cronwheel_store_up", "cronwheel_lateness_objective_seconds"})


def _only(family: Metric, namespace: str) -> Metric:
    out = Metric(family.name, family.documentation, family.type, family.unit)
    out.samples = [s for s in family.samples if s.labels.get("namespace") == namespace]
    return out


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc)
    g.add_metric([], value)
    return g


class NamespaceView(Collector):
    """One namespace's series of ``collector`` (see the module docstring)."""

    def __init__(self, collector: ClusterCollector, namespace: str) -> None:
        self.collector = collector
        self.namespace = namespace

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        families = list(self.collector.collect())
        out = [f for f in families if f.name in NEUTRAL]
        out += [_only(f, self.namespace) for f in families if f.name in NAMESPACED]
        up = next(f for f in families if f.name == "cronwheel_store_up")
        if up.samples and up.samples[0].value == 1:
            with contextlib.suppress(CronwheelError):  # the store failed since: show the rest
                out += list(self._own(self.collector.store))
        return out

    def _own(self, store: ApiStore) -> Iterable[Metric]:
        ns = self.namespace
        s = store.status(namespace=ns)
        depth = GaugeMetricFamily(
            "cronwheel_queue_depth", "The namespace's firings by active state.", labels=["state"]
        )
        per_ns = GaugeMetricFamily(
            "cronwheel_namespace_firings",
            "QUEUED, CLAIMED and RUNNING firings of the namespace.",
            labels=["namespace", "state"],
        )
        for state in ACTIVE_STATES:
            depth.add_metric([state.value], s.counts.get(state.value, 0))
            per_ns.add_metric([ns, state.value], s.counts.get(state.value, 0))
        yield from (depth, per_ns)
        yield _gauge("cronwheel_jobs", "The namespace's jobs.", s.jobs)
        yield _gauge("cronwheel_jobs_paused", "The namespace's paused jobs.", s.paused_jobs)
        oldest = 0.0
        if s.oldest_queued_due_at is not None:
            oldest = max(0.0, (s.now - s.oldest_queued_due_at).total_seconds())
        yield _gauge(
            "cronwheel_oldest_queued_age_seconds",
            "How long the namespace's oldest due QUEUED firing has waited past its due time.",
            oldest,
        )
        unserved = GaugeMetricFamily(
            "cronwheel_unserved_firings",
            "The namespace's queued firings whose task no live worker serves, per task.",
            labels=["task"],
        )
        within = timedelta(seconds=self.collector.node_stale_s)
        for task, count in store.unserved_queued(alive_within=within, namespace=ns).items():
            unserved.add_metric([task], count)
        yield unserved
        yield from self._per_job(store)

    def _per_job(self, store: ApiStore) -> Iterable[Metric]:
        ns, bound = self.namespace, self.collector.max_jobs
        jobs = store.search_jobs(ns, limit=bound + 1)
        if len(jobs) > bound:  # judged on its own job count, never the cluster's
            return per_job_series(store, None, lambda _job: 0)
        open_per_job = store.job_backlog(ns, limit=bound)
        return per_job_series(store, jobs, lambda job: open_per_job.get(job.name, 0))
