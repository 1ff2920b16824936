"""The memory store's history retention: the same policies and the same decisions
(domain/retention.py) as the SQL engines' (store/core/retention.py), over its rows."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from cronwheel.domain.firing import TERMINAL_STATES, FiringState
from cronwheel.domain.retention import (
    DEFAULT_RETENTION,
    ONE_SHOT_KINDS,
    PRUNED_EVENT,
    Candidate,
    PrunedSummary,
    PruneReport,
    Retention,
    merge_pruned,
    prunable,
    pruned_counts,
    retention_with,
)
from cronwheel.store.codec import duration_us, from_us, opt_dt, to_us
from cronwheel.store.memory import work
from cronwheel.store.memory.quotas import QuotaMethods
from cronwheel.store.memory.rows import FiringRow, JobRow, MemoryData

_TERMINAL = frozenset(s.value for s in TERMINAL_STATES)


def _retention(value: tuple[int, int] | None) -> Retention:
    if value is None:
        return DEFAULT_RETENTION
    return Retention(keep_for=timedelta(microseconds=value[0]), keep_last=value[1])


class RetentionMethods(QuotaMethods):
    prune_batch = 500

    def get_retention(self, namespace: str) -> Retention:
        with self._tx() as data:
            return _retention(data.retention.get(namespace))

    def list_retention(self) -> dict[str, Retention]:
        with self._tx() as data:
            return {ns: _retention(v) for ns, v in sorted(data.retention.items())}

    def set_retention(self, namespace: str, changes: Mapping[str, Any]) -> Retention:
        with self._tx() as data:
            policy = retention_with(_retention(data.retention.get(namespace)), dict(changes))
            data.retention[namespace] = (duration_us(policy.keep_for), policy.keep_last)
            return policy

    def reset_retention(self, namespace: str) -> None:
        with self._tx() as data:
            data.retention.pop(namespace, None)

    def prune_history(
        self,
        *,
        dry_run: bool = False,
        namespace: str | None = None,
        batch: int | None = None,
        max_batches: int | None = None,
        cursor: tuple[datetime, int] | None = None,
    ) -> PruneReport:
        size = batch or self.prune_batch
        report = PruneReport(dry_run=dry_run)
        after = (-(2**62), 0) if cursor is None else (to_us(cursor[0]), cursor[1])
        batches = 0
        while True:
            with self._tx() as data:
                one = self._prune_batch_in(data, after, size, namespace, dry_run)
            batches += 1
            if one.cursor is not None:
                after = (to_us(one.cursor[0]), one.cursor[1])
            one.done = one.scanned < size
            if one.done:
                one.cursor = None
            report.add(one)
            if one.done or (max_batches is not None and batches >= max_batches):
                return report

    def _prune_batch_in(
        self,
        data: MemoryData,
        after: tuple[int, int],
        size: int,
        namespace: str | None,
        dry_run: bool,
    ) -> PruneReport:
        now = self.now()
        rows = sorted(
            (f.finished_at, f.id, f)
            for f in data.firings.values()
            if f.finished_at is not None
            and f.state in _TERMINAL
            and (f.finished_at, f.id) > after
            and (namespace is None or f.namespace == namespace)
        )[:size]
        out = PruneReport(dry_run=dry_run, scanned=len(rows))
        if rows:
            last = rows[-1]
            out.cursor = (from_us(last[0]), last[1])
        removed: dict[int, list[tuple[str, datetime]]] = defaultdict(list)
        gone: set[int] = set()
        for _, _, f in rows:
            job = data.jobs.get(f.job_id)
            if job is None:  # a one-shot job this batch removed
                continue
            policy = self._policy_of(data, job)
            one_shot = json.loads(job.schedule)["kind"] in ONE_SHOT_KINDS
            candidate = Candidate(
                state=FiringState(f.state),
                finished_at=opt_dt(f.finished_at),
                one_shot=one_shot,
                newer_same_outcome=_newer(data, f, policy.keep_last),
            )
            if not prunable(candidate, policy, now):
                continue
            if one_shot:
                cutoff = to_us(now - policy.keep_for)
                if not _all_finished(data, job.id, cutoff):
                    continue
                out.jobs += 1
                if not dry_run:
                    self._drop_one_shot(data, job)
            out.firings[f.state] = out.firings.get(f.state, 0) + 1
            if not one_shot and not dry_run:
                gone.add(f.id)
                removed[f.job_id].append((f.state, from_us(f.scheduled_for)))
        if gone:
            data.delete_firings(gone)
        for job_id, items in removed.items():
            _add_pruned(data, job_id, items, to_us(now))
        return out

    def _policy_of(self, data: MemoryData, job: JobRow) -> Retention:
        policies = json.loads(job.policies)
        keep_for = policies.get("keep_for_s")
        keep_last = policies.get("keep_last")
        return _retention(data.retention.get(job.namespace)).resolved(
            None if keep_for is None else timedelta(seconds=keep_for), keep_last
        )

    def _drop_one_shot(self, data: MemoryData, job: JobRow) -> None:
        """A finished one-shot job with its history."""
        data.delete_job(job)
        if json.loads(job.schedule)["kind"] != "now":
            self._add(data, job.namespace, "jobs", -1)


def _all_finished(data: MemoryData, job_id: int, cutoff: int) -> bool:
    """No firing of the job is unfinished or finished at/after ``cutoff``."""
    return all(
        g.state in _TERMINAL and g.finished_at is not None and g.finished_at < cutoff
        for g in data.firings_of(job_id)
    )


def _newer(data: MemoryData, f: FiringRow, cap: int) -> int:
    n = 0
    for g in data.firings_of(f.job_id):
        if g.state == f.state and g.finished_at is not None and g.scheduled_for > f.scheduled_for:
            n += 1
            if n >= cap:
                break
    return n


def _add_pruned(data: MemoryData, job_id: int, items: list[tuple[str, datetime]], now: int) -> None:
    event = next(
        (e for e in data.events.values() if e.job_id == job_id and e.kind == PRUNED_EVENT), None
    )
    old = None
    if event is not None and event.first_at is not None and event.last_at is not None:
        old = PrunedSummary(
            first_at=from_us(event.first_at),
            last_at=from_us(event.last_at),
            counts=pruned_counts(event.detail),
        )
    new = merge_pruned(old, items)
    if event is None:
        work.add_event(
            data,
            job_id,
            now=now,
            kind=PRUNED_EVENT,
            first_at=to_us(new.first_at),
            last_at=to_us(new.last_at),
            count=new.count,
            detail=new.detail,
        )
        return
    event.at = now
    event.first_at, event.last_at = to_us(new.first_at), to_us(new.last_at)
    event.count, event.detail = new.count, new.detail
