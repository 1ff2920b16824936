"""Quota refusals answered by this process (the HTTP API's 422/429 ``quota_exceeded``),
counted per namespace and quota for ``/metrics``. A refusal changes nothing in the
store, so this count is the process's own, as any Prometheus counter (``rate()``
absorbs restarts); the quotas' limits and use, and the scheduled firings the leader
stored SKIPPED over a quota, are read from the store at scrape time (cluster.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING

from cronwheel.domain.quotas import COUNT_QUOTAS, QUOTA_NAMES, SKIPPED

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from cronwheel.store.protocol import ApiStore

_lock = threading.Lock()
_refusals: dict[tuple[str, str], int] = {}


def record_refusal(namespace: str, quota: str) -> None:
    with _lock:
        _refusals[(namespace, quota)] = _refusals.get((namespace, quota), 0) + 1


def refusals() -> dict[tuple[str, str], int]:
    """(namespace, quota) -> refusals so far, a copy."""
    with _lock:
        return dict(_refusals)


def quota_metrics(store: ApiStore) -> Iterable[Metric]:
    """Each namespace's quota limits and use (namespaces with jobs, counters, held
    firings or a quota record), the refusals of this process, and the scheduled
    firings stored SKIPPED over a quota (cluster-wide, from the store)."""
    # here, not at import: the API imports this module for record_refusal alone
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    limit = GaugeMetricFamily(
        "cronwheel_quota_limit",
        "A namespace's quota (min_interval in seconds; the others are counts).",
        labels=["namespace", "quota"],
    )
    used = GaugeMetricFamily(
        "cronwheel_quota_used",
        "What a namespace uses of each count quota now (firings_per_minute: this minute's;"
        " backfill_per_day: today's; running: claimed and running firings).",
        labels=["namespace", "quota"],
    )
    skipped = CounterMetricFamily(
        "cronwheel_quota_skipped_firings",
        "Scheduled firings the leader stored SKIPPED over the namespace's firings_per_minute.",
        labels=["namespace"],
    )
    for use in store.quota_usage():
        for name in QUOTA_NAMES:
            value = getattr(use.quota, name)
            if isinstance(value, timedelta):
                value = value.total_seconds()
            limit.add_metric([use.namespace, name], value)
        for name in COUNT_QUOTAS:
            used.add_metric([use.namespace, name], use.used.get(name, 0))
        skipped.add_metric([use.namespace], use.used.get(SKIPPED, 0))
    refused = CounterMetricFamily(
        "cronwheel_quota_refusals",
        "Writes this API process refused with quota_exceeded (422/429), by namespace and quota.",
        labels=["namespace", "quota"],
    )
    for (namespace, quota), count in sorted(refusals().items()):
        refused.add_metric([namespace, quota], count)
    return [limit, used, skipped, refused]
