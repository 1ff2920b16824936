"""Per-namespace quotas (domain/quotas.py) in the store: the records, and the charges
each guarded write makes inside its own transaction.

A charge is one upsert of a counter row (``quota_usage``: namespace, quota, window)
that returns the count after it; over the limit, the flow raises and its whole
transaction rolls back, the charge with it. On PostgreSQL the upsert holds the row
lock until commit, so concurrent writers of one namespace are serialized on it and
never both pass; on SQLite the writer lock does the same. Cost per guarded write:
one primary-key read of ``quotas`` and one primary-key upsert of ``quota_usage``
(plus, for rates, a primary-key range delete of the previous windows).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Generic, TypeVar

from cronwheel.domain.models import JobSpec
from cronwheel.domain.quotas import (
    DAY,
    DEFAULT_QUOTA,
    MINUTE,
    SKIP_REASON,
    SKIPPED,
    UNLIMITED,
    Quota,
    QuotaUse,
    check_interval,
    min_gap,
    only_tightened,
    quota_with,
    refuse_count,
    refuse_rate,
)
from cronwheel.store.codec import Row
from cronwheel.store.core.dialect import Dialect, Tx

D = TypeVar("D", bound=Dialect)

_MINUTE_US = MINUTE // timedelta(microseconds=1)
_DAY_US = DAY // timedelta(microseconds=1)


def quota_from_row(row: Row | None) -> Quota:
    if row is None:
        return DEFAULT_QUOTA
    return Quota(
        jobs=int(row["jobs"]),
        firings_per_minute=int(row["firings_per_minute"]),
        min_interval=timedelta(microseconds=int(row["min_interval_us"])),
        running=int(row["running"]),
        backfill=int(row["backfill"]),
        backfill_per_day=int(row["backfill_per_day"]),
    )


def counts_job(spec: JobSpec) -> bool:
    """The jobs quota counts every job but the ``now`` one-shot of an immediate enqueue."""
    return spec.schedule.kind != "now"


def _window_us(quota: str) -> int:
    """A rate quota's window: a minute (firings_per_minute), else a day."""
    return _MINUTE_US if quota == "firings_per_minute" else _DAY_US


def refuse_over_rate(
    quota: str, limit: int, namespace: str, used: int, window_start_us: int, now_us: int
) -> None:
    """A rate quota's counter after a charge (``used`` in the window starting at
    ``window_start_us``, read at ``now_us``): over ``limit``, 429 with the seconds left
    in the window."""
    if int(used) > limit:
        left_us = int(window_start_us) + _window_us(quota) - int(now_us)
        retry_after = -(-left_us // 1_000_000)
        raise refuse_rate(quota, limit, namespace=namespace, retry_after=retry_after)


class QuotaFlows(Generic[D]):
    """The quota records and the charges of the guarded flows (see the module doc)."""

    db: D

    # -- records ------------------------------------------------------------------------
    def get_quota(self, namespace: str) -> Quota:
        """The namespace's quota: its own record, else the defaults."""
        return quota_from_row(
            self.db.read(lambda tx: tx.one("quota_get", {"namespace": namespace}))
        )

    def set_quota(
        self, namespace: str, changes: Mapping[str, Any], *, only_lower: bool = False
    ) -> Quota:
        """Change some of a namespace's limits (the others keep their current values,
        the defaults if it had no record). ValidationError names a bad one;
        ``only_lower``: PermissionDeniedError names one that would be raised."""

        def body(tx: Tx) -> Row:
            base = quota_from_row(tx.one("quota_get", {"namespace": namespace}))
            quota = quota_with(base, dict(changes))
            if only_lower:
                only_tightened(base, quota)
            params = quota.to_dict() | {
                "namespace": namespace,
                "min_interval_us": quota.min_interval // timedelta(microseconds=1),
            }
            row = tx.one("quota_set", params)
            assert row is not None
            self._quota_changed(tx, namespace, quota)
            return row

        return quota_from_row(self.db.write(body))

    def quota_usage(self, namespace: str | None = None) -> list[QuotaUse]:
        """Each namespace's quota and use (one namespace, or every one that has jobs,
        counters, held firings or a record), by name."""
        windows = {"namespace": namespace, "minute_us": _MINUTE_US, "day_us": _DAY_US}

        def body(tx: Tx) -> list[QuotaUse]:
            used: dict[str, dict[str, int]] = {}
            for r in tx.all("quota_usage", windows):
                used.setdefault(r["namespace"], {})[r["quota"]] = int(r["used"])
            for r in tx.all("quota_held", {"namespace": namespace}):
                used.setdefault(r["namespace"], {})["running"] = int(r["n"])
            if namespace is None:
                own = {r["namespace"]: r for r in tx.all("quota_list")}
            else:
                row = tx.one("quota_get", {"namespace": namespace})
                own = {} if row is None else {namespace: row}
                used.setdefault(namespace, {})
            names = sorted(set(used) | set(own))
            return [
                QuotaUse(
                    namespace=n,
                    quota=quota_from_row(own.get(n)),
                    used=used.get(n, {}),
                    custom=n in own,
                )
                for n in names
            ]

        return self.db.read(body)

    def _quota_changed(self, tx: Tx, namespace: str, quota: Quota) -> None:
        """After a namespace's quota record changed, in its transaction (PostgreSQL
        shares the jobs counter's room out again: store/postgres/jobs_quota.py)."""

    # -- charges, inside a flow's transaction -------------------------------------------
    def _quota_in(self, tx: Tx, namespace: str) -> Quota:
        return quota_from_row(tx.one("quota_get", {"namespace": namespace}))

    def _charge(self, tx: Tx, namespace: str, quota: str, window_us: int, n: int) -> Row:
        params = {"namespace": namespace, "quota": quota, "window_us": window_us, "n": n}
        row = tx.one("quota_charge", params)
        assert row is not None
        if window_us and int(row["used"]) == n:  # a new window: forget the old ones
            tx.run("quota_prune", params)
        return row

    def _charge_jobs(
        self, tx: Tx, specs: Sequence[JobSpec], quotas: dict[str, Quota] | None = None
    ) -> None:
        """Count new jobs against their namespaces' ``jobs`` quota (422 when over);
        ``quotas``: the quotas the transaction read so far (``_check_schedule``)."""
        per_namespace: dict[str, int] = {}
        for spec in specs:
            if counts_job(spec):
                per_namespace[spec.namespace] = per_namespace.get(spec.namespace, 0) + 1
        for namespace, n in sorted(per_namespace.items()):
            known = None if quotas is None else quotas.get(namespace)

            def limit(namespace: str = namespace, known: Quota | None = known) -> int:
                return (self._quota_in(tx, namespace) if known is None else known).jobs

            if not self._take_jobs(tx, namespace, n, limit):
                what = "this job" if n == 1 else f"these {n} jobs"
                raise refuse_count("jobs", limit(), namespace=namespace, what=what)

    def _take_jobs(self, tx: Tx, namespace: str, n: int, limit: Callable[[], int]) -> bool:
        """``n`` jobs charged to the namespace's counter unless that passes ``limit()``
        (False; the caller's transaction is refused, so the charge is rolled back).
        PostgreSQL charges a shard of the counter instead (store/postgres/jobs_quota.py)."""
        cap = limit()
        return int(self._charge(tx, namespace, "jobs", 0, n)["used"]) <= cap

    def _uncharge_job(self, tx: Tx, namespace: str, n: int = 1) -> None:
        self._charge(tx, namespace, "jobs", 0, -n)

    def _check_schedule(
        self, tx: Tx, spec: JobSpec, first: Any, quotas: dict[str, Quota] | None = None
    ) -> None:
        """The schedule's shortest gap against the namespace's ``min_interval`` (422);
        ``quotas``: the quotas a batch read so far (one read per namespace)."""
        gap = min_gap(spec.schedule, first)
        if gap is None:
            return
        quotas = {} if quotas is None else quotas
        if spec.namespace not in quotas:
            quotas[spec.namespace] = self._quota_in(tx, spec.namespace)
        check_interval(quotas[spec.namespace], spec.namespace, gap)

    def _charge_rate(self, tx: Tx, namespace: str, quota: str, limit: int, n: int) -> None:
        """Count ``n`` firings against a rate quota (``firings_per_minute``,
        ``backfill_per_day``); over it, 429 with the seconds left in the window."""
        row = self._charge(tx, namespace, quota, _window_us(quota), n)
        refuse_over_rate(quota, limit, namespace, row["used"], row["window_start"], row["now_us"])

    def _charge_firings(self, tx: Tx, namespace: str, n: int) -> None:
        """Firings a caller creates (an immediate enqueue, a trigger, a backfill)."""
        if n > 0:
            limit = self._quota_in(tx, namespace).firings_per_minute
            self._charge_rate(tx, namespace, "firings_per_minute", limit, n)

    def _charge_backfill(self, tx: Tx, namespace: str, requested: int, added: int) -> None:
        """A trigger or backfill: at most ``backfill`` instants per call (422), at most
        ``backfill_per_day`` firings added per day (429), within firings_per_minute."""
        quota = self._quota_in(tx, namespace)
        if requested > quota.backfill:
            what = f"a call of {requested} instants"
            raise refuse_count("backfill", quota.backfill, namespace=namespace, what=what)
        if added > 0:
            self._charge_rate(tx, namespace, "backfill_per_day", quota.backfill_per_day, added)
            self._charge_rate(tx, namespace, "firings_per_minute", quota.firings_per_minute, added)

    def _over_rate(self, tx: Tx, inserted: Mapping[str, Sequence[int]]) -> list[int]:
        """The leader's enqueue: of the firings inserted per namespace (in order), those
        over the namespace's firings_per_minute; the others are charged. The caller
        stores the ones returned SKIPPED (``quota_skip``)."""
        over: list[int] = []
        for namespace, ids in sorted(inserted.items()):
            if not ids:
                continue
            limit = self._quota_in(tx, namespace).firings_per_minute
            used = int(self._charge(tx, namespace, "firings_per_minute", _MINUTE_US, 0)["used"])
            allowed = max(0, min(len(ids), limit - used))
            if allowed:
                self._charge(tx, namespace, "firings_per_minute", _MINUTE_US, allowed)
            if allowed < len(ids):
                self._charge(tx, namespace, SKIPPED, 0, len(ids) - allowed)
            over.extend(ids[allowed:])
        return over

    def _running_limited(self, tx: Tx) -> dict[str, int]:
        """The namespaces whose running quota is limited (by their own record: the
        default is UNLIMITED), with it: the only ones a claim counts and locks for."""
        rows = tx.all("quota_running_limited", {"unlimited": UNLIMITED})
        return {str(r["namespace"]): int(r["running"]) for r in rows}

    def _running_room(
        self, tx: Tx, limited: Mapping[str, int], *, extra: int = 0
    ) -> Callable[[str], int]:
        """For a claim: how many more firings a namespace may hold (its running quota
        less its CLAIMED and RUNNING firings, counted up to the quota plus ``extra``),
        read once per namespace per claim; UNLIMITED, uncounted, for a namespace not in
        ``limited`` (``_running_limited``)."""
        rooms: dict[str, int] = {}

        def room(namespace: str) -> int:
            if namespace not in limited:
                return UNLIMITED
            if namespace not in rooms:
                cap = self._quota_in(tx, namespace).running
                params = {"namespace": namespace, "cap": cap + extra}
                row = tx.one("quota_held_of", params)
                rooms[namespace] = cap - (0 if row is None else int(row["n"]))
            return rooms[namespace]

        return room

    def _skip_over_rate(self, tx: Tx, inserted: Mapping[str, Sequence[int]]) -> set[int]:
        """``_over_rate`` applied: the over-quota firings stored SKIPPED; their ids."""
        over = self._over_rate(tx, inserted)
        if over:
            tx.run("quota_skip", {"ids": self.db.id_list(over), "reason": SKIP_REASON})
        return set(over)
