"""The memory store's per-namespace quotas: the records and counters, and the checks
its flows make under the store's lock before they change anything (the SQL stores
charge, then roll back a refusal; here a refusal is raised before the first change)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from cronwheel.domain.models import JobSpec
from cronwheel.domain.quotas import (
    DAY,
    DEFAULT_QUOTA,
    MINUTE,
    SKIP_REASON,
    SKIPPED,
    Quota,
    QuotaUse,
    check_interval,
    min_gap,
    only_tightened,
    quota_with,
    refuse_count,
    refuse_rate,
)
from cronwheel.store.memory.base import MemoryBase
from cronwheel.store.memory.rows import HELD, FiringRow, MemoryData

_MINUTE_US = MINUTE // timedelta(microseconds=1)
_DAY_US = DAY // timedelta(microseconds=1)
_WINDOWS = {"firings_per_minute": _MINUTE_US, "backfill_per_day": _DAY_US}


def _window(quota: str, now: int) -> int:
    size = _WINDOWS.get(quota, 0)
    return (now // size) * size if size else 0


class QuotaMethods(MemoryBase):
    # -- records ------------------------------------------------------------------------
    def get_quota(self, namespace: str) -> Quota:
        with self._tx() as data:
            return data.quotas.get(namespace, DEFAULT_QUOTA)

    def set_quota(
        self, namespace: str, changes: Mapping[str, Any], *, only_lower: bool = False
    ) -> Quota:
        with self._tx() as data:
            base = data.quotas.get(namespace, DEFAULT_QUOTA)
            quota = quota_with(base, dict(changes))
            if only_lower:
                only_tightened(base, quota)
            data.quotas[namespace] = quota
            return quota

    def quota_usage(self, namespace: str | None = None) -> list[QuotaUse]:
        with self._tx() as data:
            now = self._now_us()
            used: dict[str, dict[str, int]] = {}
            for (ns, quota, window), n in data.quota_usage.items():
                if window == _window(quota, now) and namespace in (None, ns):
                    used.setdefault(ns, {})[quota] = n
            for f in data.active():
                if f.state in HELD and namespace in (None, f.namespace):
                    held = used.setdefault(f.namespace, {})
                    held["running"] = held.get("running", 0) + 1
            names = set(used) | {ns for ns in data.quotas if namespace in (None, ns)}
            if namespace is not None:
                names.add(namespace)
            return [
                QuotaUse(
                    namespace=ns,
                    quota=data.quotas.get(ns, DEFAULT_QUOTA),
                    used=used.get(ns, {}),
                    custom=ns in data.quotas,
                )
                for ns in sorted(names)
            ]

    # -- checks and charges, under the lock -------------------------------------------
    def _used(self, data: MemoryData, namespace: str, quota: str) -> int:
        return data.quota_usage.get((namespace, quota, _window(quota, self._now_us())), 0)

    def _add(self, data: MemoryData, namespace: str, quota: str, n: int) -> None:
        now = self._now_us()
        key = (namespace, quota, _window(quota, now))
        if key not in data.quota_usage and _WINDOWS.get(quota):
            for old in [k for k in data.quota_usage if k[:2] == key[:2]]:
                del data.quota_usage[old]  # a new window: forget the old ones
        data.quota_usage[key] = data.quota_usage.get(key, 0) + n

    def _check_schedules(
        self, data: MemoryData, items: Iterable[tuple[JobSpec, datetime | None]]
    ) -> None:
        for spec, first in items:
            gap = min_gap(spec.schedule, first)
            if gap is not None:
                quota = data.quotas.get(spec.namespace, DEFAULT_QUOTA)
                check_interval(quota, spec.namespace, gap)

    def _jobs_room(self, data: MemoryData, specs: Sequence[JobSpec]) -> dict[str, int]:
        """The jobs quota: refuse (422) unless every namespace has room for its new
        jobs; the counts to charge once they are in."""
        per_namespace: dict[str, int] = {}
        for spec in specs:
            if spec.schedule.kind != "now":
                per_namespace[spec.namespace] = per_namespace.get(spec.namespace, 0) + 1
        for ns, n in sorted(per_namespace.items()):
            limit = data.quotas.get(ns, DEFAULT_QUOTA).jobs
            if self._used(data, ns, "jobs") + n > limit:
                what = "this job" if n == 1 else f"these {n} jobs"
                raise refuse_count("jobs", limit, namespace=ns, what=what)
        return per_namespace

    def _charge_jobs_in(self, data: MemoryData, per_namespace: Mapping[str, int]) -> None:
        for ns, n in per_namespace.items():
            self._add(data, ns, "jobs", n)

    def _rate_room(self, data: MemoryData, namespace: str, quota: str, n: int) -> None:
        """429 unless ``n`` more fit in the rate quota's current window."""
        limit = getattr(data.quotas.get(namespace, DEFAULT_QUOTA), quota)
        if n > 0 and self._used(data, namespace, quota) + n > limit:
            now = self._now_us()
            size = _WINDOWS[quota]
            left = _window(quota, now) + size - now
            retry_after = -(-left // 1_000_000)
            raise refuse_rate(quota, limit, namespace=namespace, retry_after=retry_after)

    def _firings_room(self, data: MemoryData, namespace: str, n: int) -> None:
        self._rate_room(data, namespace, "firings_per_minute", n)

    def _backfill_room(self, data: MemoryData, namespace: str, requested: int, adds: int) -> None:
        quota = data.quotas.get(namespace, DEFAULT_QUOTA)
        if requested > quota.backfill:
            what = f"a call of {requested} instants"
            raise refuse_count("backfill", quota.backfill, namespace=namespace, what=what)
        self._rate_room(data, namespace, "backfill_per_day", adds)
        self._rate_room(data, namespace, "firings_per_minute", adds)

    def _charge_backfill_in(self, data: MemoryData, namespace: str, added: int) -> None:
        if added:
            self._add(data, namespace, "backfill_per_day", added)
            self._add(data, namespace, "firings_per_minute", added)

    def _skip_over_rate(self, data: MemoryData, inserted: Sequence[FiringRow]) -> set[int]:
        """The leader's enqueue: inserted firings over their namespace's
        firings_per_minute become SKIPPED (reason quota); the others are charged."""
        over: set[int] = set()
        room: dict[str, int] = {}
        now = self._now_us()
        for f in inserted:
            if f.namespace not in room:
                limit = data.quotas.get(f.namespace, DEFAULT_QUOTA).firings_per_minute
                room[f.namespace] = max(
                    0, limit - self._used(data, f.namespace, "firings_per_minute")
                )
            if room[f.namespace] > 0:
                room[f.namespace] -= 1
                self._add(data, f.namespace, "firings_per_minute", 1)
            else:
                f.state, f.reason, f.finished_at = "skipped", SKIP_REASON, now
                self._add(data, f.namespace, SKIPPED, 1)
                over.add(f.id)
        return over

    def _running_room(self, data: MemoryData) -> Callable[[str], int]:
        """How many more firings a namespace may hold (its running quota less its
        CLAIMED and RUNNING firings)."""
        held: dict[str, int] = {}
        for f in data.active():
            if f.state in HELD:
                held[f.namespace] = held.get(f.namespace, 0) + 1

        def room(namespace: str) -> int:
            quota = data.quotas.get(namespace, DEFAULT_QUOTA)
            return quota.running - held.get(namespace, 0)

        return room
