"""The store core's history retention (domain/retention.py), written once over a
Dialect: the namespaces' policies, and pruning in batches.

A pass walks the finished firings in ``(finished_at, id)`` order (``firings_finished``)
up to ``now - the shortest keep_for in use``, a batch at a time: the batch's
candidates are read in a read transaction (no writer lock on SQLite), decided by
:func:`~cronwheel.domain.retention.prunable`, and deleted in one short write
transaction that re-checks that each is still finished (a firing re-driven since is
left alone) and adds the removed ones to their job's ``pruned`` event. A one-shot
job goes as a whole (its row, by cascade its firings). Firings a longer keep_for
keeps are looked at once per pass. The caller keeps the cursor between calls (the
leader runs one batch per step).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from cronwheel.domain.firing import FiringState
from cronwheel.domain.retention import (
    DEFAULT_RETENTION,
    ONE_SHOT_KINDS,
    PRUNED_EVENT,
    Candidate,
    PrunedSummary,
    PruneReport,
    Retention,
    merge_pruned,
    pass_bounds,
    prunable,
    pruned_counts,
    retention_with,
)
from cronwheel.store import codec
from cronwheel.store.codec import Row
from cronwheel.store.core.dialect import Dialect, Tx
from cronwheel.store.core.quotas import QuotaFlows

D = TypeVar("D", bound=Dialect)

_BEGINNING = datetime(1, 1, 2, tzinfo=UTC)
WALK_START = (_BEGINNING, 0)  # the cursor of a walk from the oldest finished firing
# quota counters of windows and finish counters of minutes older than this are deleted
# by a pass (a quota's day is the longest window read)
QUOTA_WINDOWS_KEPT = timedelta(days=2)


def retention_from_row(row: Row | None) -> Retention:
    if row is None:
        return DEFAULT_RETENTION
    return Retention(
        keep_for=timedelta(microseconds=int(row["keep_for_us"])), keep_last=int(row["keep_last"])
    )


class RetentionFlows(QuotaFlows[D]):
    """Retention policies and pruning (see the module doc)."""

    prune_batch = 500  # firings a batch looks at (SQLite: fewer, see SqliteDispatch)

    # -- policies -----------------------------------------------------------------------
    def get_retention(self, namespace: str) -> Retention:
        """The namespace's own policy, else DEFAULT_RETENTION."""
        return retention_from_row(
            self.db.read(lambda tx: tx.one("retention_get", {"namespace": namespace}))
        )

    def list_retention(self) -> dict[str, Retention]:
        """Every namespace that has its own policy."""
        rows = self.db.read(lambda tx: tx.all("retention_list"))
        return {r["namespace"]: retention_from_row(r) for r in rows}

    def set_retention(self, namespace: str, changes: Mapping[str, Any]) -> Retention:
        """Change a namespace's policy (``keep_for``, ``keep_last``; the other half kept);
        ValidationError names a bad one and changes nothing."""

        def body(tx: Tx) -> Retention:
            base = retention_from_row(tx.one("retention_get", {"namespace": namespace}))
            policy = retention_with(base, dict(changes))
            params = {
                "namespace": namespace,
                "keep_for_us": policy.keep_for // timedelta(microseconds=1),
                "keep_last": policy.keep_last,
            }
            return retention_from_row(tx.one("retention_set", params))

        return self.db.write(body)

    def reset_retention(self, namespace: str) -> None:
        """The namespace back on the default policy."""
        self.db.write(lambda tx: tx.run("retention_reset", {"namespace": namespace}))

    # -- the soak benchmark's history --------------------------------------------------
    def load_history(
        self,
        *,
        first_job: int,
        jobs: int,
        start: datetime,
        step: timedelta,
        count: int,
        one_shots: bool = False,
    ) -> int:
        """Generate ``count`` finished firings in the engine (bench/soak.py): the i-th of
        job ``first_job + i % jobs`` (consecutive ids) at ``start + i * step``; with
        ``one_shots``, each moved to a `now` one-shot job of its own, a copy of
        ``first_job`` (as ``app.enqueue`` leaves them). One transaction."""
        params = {
            "first_job": first_job,
            "jobs": jobs,
            "start": self.db.instant(start),
            "step_us": step // timedelta(microseconds=1),
            "count": count,
        }

        def body(tx: Tx) -> int:
            top = tx.one("max_firing_id")
            assert top is not None
            first = int(top["id"]) + 1
            n = tx.run("load_history", params)
            if one_shots:
                moved = {"first_firing": first, "template": first_job}
                tx.run("load_history_one_shots", moved)
                tx.run("move_to_one_shots", moved)
            return n

        return self.db.write(body)

    def database_size(self) -> int:
        """The store's size on disk in bytes (the soak benchmark's steady-state check)."""
        row = self.db.read(lambda tx: tx.one("database_size"))
        assert row is not None
        return int(row["bytes"])

    def count_finished_before(self, before: datetime) -> int:
        """Finished firings that finished before ``before`` (an index range count)."""
        params = {"before": self.db.instant(before)}
        row = self.db.read(lambda tx: tx.one("count_finished_before", params))
        assert row is not None
        return int(row["n"])

    def count_job_rows(self) -> int:
        """Every job row (a count of the jobs table)."""
        row = self.db.read(lambda tx: tx.one("count_job_rows", {}))
        assert row is not None
        return int(row["n"])

    def namespaces_in_use(self) -> list[str]:
        """The namespaces that have jobs (every firing has its job): those whose policy,
        their own or the default, applies to some firing. [one index probe each]"""
        rows = self.db.read(lambda tx: tx.all("retention_namespaces"))
        return [str(r["namespace"]) for r in rows]

    # -- pruning ------------------------------------------------------------------------
    def prune_history(
        self,
        *,
        dry_run: bool = False,
        namespace: str | None = None,
        batch: int | None = None,
        max_batches: int | None = None,
        cursor: tuple[datetime, int] | None = None,
    ) -> PruneReport:
        """One pass (or, ``max_batches``, its next batches from ``cursor``) of pruning:
        what it deleted, or with ``dry_run`` what it would delete (nothing is)."""
        size = batch or self.prune_batch
        now = self.db.now()
        policies = self.list_retention()
        bounds = self.db.read(lambda tx: tx.one("retention_job_bounds"))
        assert bounds is not None
        job_keep_for = (
            None if bounds["keep_for_s"] is None else timedelta(seconds=float(bounds["keep_for_s"]))
        )
        job_keep_last = None if bounds["keep_last"] is None else int(bounds["keep_last"])
        in_use = self.namespaces_in_use() if namespace is None else [namespace]
        shortest, keep_cap = pass_bounds(
            [policies.get(ns, DEFAULT_RETENTION) for ns in in_use], job_keep_for, job_keep_last
        )
        report = PruneReport(dry_run=dry_run)
        if cursor is None and not dry_run:
            self._prune_counters(now)
        after_at, after_id = cursor or WALK_START
        batches = 0
        while True:
            params = {
                "until": self.db.instant(self._prune_until(now - shortest)),
                "after_at": self.db.instant(after_at),
                "after_id": after_id,
                "namespace": namespace,
                "keep_cap": keep_cap,
                "limit": size,
            }
            rows = self._prune_candidates(params)
            chosen = [
                r
                for r in rows
                if prunable(*_candidate(r, policies, now))
                and not self._leave_to_drop(r, _policy(r, policies), now)
            ]
            one = PruneReport(dry_run=dry_run, scanned=len(rows))
            if dry_run:
                for r in chosen:
                    one.firings[r["state"]] = one.firings.get(r["state"], 0) + 1
                one.jobs = len({r["job_id"] for r in chosen if r["kind"] in ONE_SHOT_KINDS})
            elif chosen:
                self._prune_batch(chosen, policies, now, one)
            if rows:
                after_at, after_id = codec.req_instant(rows[-1]["finished_at"]), int(rows[-1]["id"])
            batches += 1
            one.done = len(rows) < size
            one.cursor = None if one.done else (after_at, after_id)
            report.add(one)
            if one.done or (max_batches is not None and batches >= max_batches):
                return report

    def _prune_counters(self, now: datetime) -> None:
        """The quota windows and finish counters a pass deletes at its start."""
        before = codec.to_us(now - QUOTA_WINDOWS_KEPT)

        def counters(tx: Tx) -> None:
            tx.run("prune_quota_windows", {"before_us": before})
            tx.run("prune_finished_counts", {"before_minute": before // 60_000_000})

        self.db.write(counters)

    def _prune_until(self, until: datetime) -> datetime:
        """Where the batched walk stops (the engine may stop earlier: PostgreSQL leaves
        a day not yet over to a whole-day drop)."""
        return until

    def _leave_to_drop(self, row: Row, policy: Retention, now: datetime) -> bool:
        """Whether the batched walk leaves a prunable firing to a drop of its whole day
        (PostgreSQL: store/postgres/partitions.py)."""
        return False

    def _prune_candidates(self, params: dict[str, Any]) -> list[Row]:
        return list(self.db.read(lambda tx: tx.all("prune_candidates", params)))

    def _prune_batch(
        self, chosen: list[Row], policies: dict[str, Retention], now: datetime, out: PruneReport
    ) -> None:
        recurring = [r for r in chosen if r["kind"] not in ONE_SHOT_KINDS]
        one_shots = {int(r["job_id"]): r for r in chosen if r["kind"] in ONE_SHOT_KINDS}
        finished = max(codec.req_instant(r["finished_at"]) for r in chosen)

        def body(tx: Tx) -> None:
            removed: dict[int, list[tuple[str, datetime]]] = defaultdict(list)
            if recurring:
                params = {
                    "ids": self.db.id_list([int(r["id"]) for r in recurring]),
                    "finished_before": self.db.instant(finished),
                }
                for row in tx.all("prune_firings", params):
                    at = codec.req_instant(row["scheduled_for"])
                    removed[int(row["job_id"])].append((row["state"], at))
                    out.firings[row["state"]] = out.firings.get(row["state"], 0) + 1
            by_cutoff: dict[datetime, list[int]] = defaultdict(list)
            for job_id, r in one_shots.items():
                by_cutoff[now - _policy(r, policies).keep_for].append(job_id)
            uncharge: dict[str, int] = defaultdict(int)
            for cutoff, ids in sorted(by_cutoff.items()):
                params = {"ids": self.db.id_list(ids), "cutoff": self.db.instant(cutoff)}
                for gone in tx.all("prune_one_shot_jobs", params):
                    state = one_shots[int(gone["id"])]["state"]
                    out.jobs += 1
                    out.firings[state] = out.firings.get(state, 0) + 1
                    if gone["kind"] != "now":
                        uncharge[gone["namespace"]] += 1
            for namespace, n in sorted(uncharge.items()):
                self._uncharge_job(tx, namespace, n)
            merges = {job: partial(merge_pruned, removed=items) for job, items in removed.items()}
            self._merge_pruned_events(tx, merges)

        self.db.write(body)
        self._after_prune_batch()

    def _after_prune_batch(self) -> None:
        """What the engine does after a batch (SQLite: returns the freed pages)."""

    def _merge_pruned_events(
        self, tx: Tx, merges: Mapping[int, Callable[[PrunedSummary | None], PrunedSummary]]
    ) -> None:
        """Each job's one ``pruned`` event, written as its ``merge`` of what it said
        (None: no event yet): a batch's firings here, a whole day's in
        postgres/partitions.py. Three statements however many jobs (a day's drop of 2,000
        jobs' firings took 636 ms as two statements a job)."""
        if not merges:
            return
        ids = self.db.id_list(sorted(merges))
        rows = {int(r["job_id"]): r for r in tx.all("pruned_events_get", {"job_ids": ids})}
        events = []
        for job_id, merge in sorted(merges.items()):
            row = rows.get(job_id)
            old = None
            if row is not None:
                old = PrunedSummary(
                    first_at=codec.req_instant(row["first_at"]),
                    last_at=codec.req_instant(row["last_at"]),
                    counts=pruned_counts(row["detail"]),
                )
            new = merge(old)
            event_id = None if row is None else int(row["id"])
            first, last = codec.to_us(new.first_at), codec.to_us(new.last_at)
            events.append([event_id, job_id, first, last, new.count, new.detail])
        params = {"events": json.dumps(events)}
        tx.run("pruned_events_update", params)
        tx.run("pruned_events_insert", params)


assert PRUNED_EVENT == "pruned"  # the kind the SQL writes


def _policy(row: Row, policies: dict[str, Retention]) -> Retention:
    keep_for = None if row["keep_for_s"] is None else timedelta(seconds=float(row["keep_for_s"]))
    keep_last = None if row["keep_last"] is None else int(row["keep_last"])
    return policies.get(row["namespace"], DEFAULT_RETENTION).resolved(keep_for, keep_last)


def _candidate(
    row: Row, policies: dict[str, Retention], now: datetime
) -> tuple[Candidate, Retention, datetime]:
    candidate = Candidate(
        state=FiringState(row["state"]),
        finished_at=codec.opt_instant(row["finished_at"]),
        one_shot=row["kind"] in ONE_SHOT_KINDS,
        newer_same_outcome=int(row["newer"]),
    )
    return candidate, _policy(row, policies), now
