"""SQLite: the worker's side — claims (planned with the overlap policies inside the
writer lock), completions, heartbeats. A claim and the completions that ride with it
are one transaction: one commit, one take of the writer lock; claimed rows are
decoded after the commit, outside the lock."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cronwheel.domain.models import ClaimedFiring, FiringId
from cronwheel.store import codec
from cronwheel.store.claiming import (
    ClaimAsk,
    candidates_from_rows,
    capped,
    plan_claim,
    within_room,
)
from cronwheel.store.codec import duration_us, opt_us, to_us
from cronwheel.store.core import CoreStore
from cronwheel.store.core.work import Ready
from cronwheel.store.protocol import Completion
from cronwheel.store.sqlite.db import SqliteDb, SqliteTx

# the claimed rows; per job id, its stored policies and trace context
_Claimed = tuple[Sequence[codec.Row], dict[int, tuple[str, str | None]]]


class SqliteClaims(CoreStore[SqliteDb]):
    one_writer = True  # the database's writer lock (WorkerPort)

    def _claim(self, ask: ClaimAsk) -> list[ClaimedFiring]:
        with self.db.transaction() as tx:
            rows, jobs = self._claim_in(tx, ask)
        return _claimed(rows, jobs)

    def _complete_and_claim(
        self, completions: Sequence[Completion], ask: ClaimAsk
    ) -> tuple[list[bool], list[ClaimedFiring]]:
        """Both in one write transaction: one commit, one take of the writer lock."""
        with self.db.transaction() as tx:
            accepted = self._complete_in(tx, completions)
            if not ask.wants:
                return accepted, []
            rows, jobs = self._claim_in(tx, ask)
        return accepted, _claimed(rows, jobs)

    def _complete_and_start(
        self,
        completions: Sequence[Completion],
        params: dict[str, Any],
        ready: Ready,
        not_before: datetime | None,
    ) -> tuple[list[bool], set[FiringId]]:
        """Both in one write transaction: one commit, one take of the writer lock (a
        crowd's starts and its outcomes no longer queue for it one after the other).
        With ``ready``, the start's rows are read first (``start_peek``: their pages in
        this connection's cache at the instant, not read after 100 ms idle), then
        ``ready`` waits for the instant before the writer lock is asked for: a cancel
        made meanwhile still wins."""
        if ready is not None:
            self.db.read(lambda tx: tx.all("start_peek", params))
            ready()
        with self.db.transaction() as tx:
            started = tx.all("start", params)
            accepted = self._complete_in(tx, completions)
        return accepted, {FiringId(r["id"]) for r in started}

    def _started(
        self, params: dict[str, Any], ready: Ready, not_before: datetime | None
    ) -> set[FiringId]:
        """The core's, with ``ready`` after the read above (``_complete_and_start``)."""
        if ready is None:
            return super()._started(params, None, not_before)
        return self._complete_and_start([], params, ready, not_before)[1]

    def _claim_in(self, tx: SqliteTx, ask: ClaimAsk) -> _Claimed:
        """The claimed rows and their jobs' stored policies, as read in the transaction;
        the caller decodes them after the commit, outside the writer lock."""
        until = tx.now_us + duration_us(ask.prefetch)
        rows = self._claim_rows(tx, ask, until)
        if not rows:
            return [], {}
        job_ids = json.dumps(sorted({r["job_id"] for r in rows}))
        policies = {r[0]: (r[1], r[2]) for r in tx.all("job_policies", {"ids": job_ids})}
        return rows, policies

    def _claim_rows(self, tx: SqliteTx, ask: ClaimAsk, until: int) -> Sequence[codec.Row]:
        """Inside the claim transaction (SQLite's writer lock makes it atomic): plan with
        the overlap policies, apply the fates, claim the chosen firings."""
        now = tx.now_us
        found = self._candidates(tx, ask, until)
        limit = ask.limit
        if all(r["unpolicied"] and not r["deadline_passed"] for r in found[:limit]):
            # the common case: nothing to decide before the claim is full
            return self._claim_ids(tx, [r["id"] for r in found[:limit]], ask)
        candidates, early = candidates_from_rows(found, lambda r: bool(r["due_at"] > now))
        jobs = {c.job_id for c in [*candidates, *early] if capped(c) or c.overlap_override}
        running: dict[int, int] = {}
        due: dict[int, list[int]] = {}
        for j in jobs:
            row = tx.one("running_count", {"job_id": j})
            running[j] = 0 if row is None else int(row["n"])
            due[j] = [r["id"] for r in tx.all("due_queued_of_job", {"job_id": j})]
        plan = plan_claim(candidates, limit=limit, running=running, due_by_job=due, early=early)
        for state, items in (("skipped", plan.skip), ("missed", plan.missed)):
            for firing_id, reason in items:
                tx.run("finish_unrun", {"id": firing_id, "state": state, "reason": reason})
        if plan.buffered:
            tx.run("mark_buffered", {"ids": json.dumps(plan.buffered)})
        for job_id in plan.cancel_running:
            tx.run(
                "cancel_running_of_job",
                {"job_id": job_id, "reason": "cancelled by overlap policy cancel_other"},
            )
        for job_id in plan.terminate_running:
            tx.run(
                "terminate_running_of_job",
                {"job_id": job_id, "reason": "terminated by overlap policy terminate_other"},
            )
        return self._claim_ids(tx, plan.claim, ask)

    def _candidates(self, tx: SqliteTx, ask: ClaimAsk, until: int) -> list[codec.Row]:
        """The claim's candidates within their namespaces' running quotas. A namespace
        found at its quota is left out of a new scan (at most a few), so that its queue
        does not fill the scan window of the others."""
        room = self._running_room(tx, self._running_limited(tx))
        full: list[str] = []
        held_over: list[codec.Row] = []  # kept from the namespaces left out of a rescan
        while True:
            found = tx.all(
                "claim_candidates",
                # a few more than the claim may take: some may be skipped or held by a cap
                {
                    "until": until,
                    "tasks": json.dumps(list(ask.tasks)),
                    "scan": ask.limit + 32,
                    "full": json.dumps(full),
                },
            )
            kept = within_room(found, room, lambda r: r["namespace"])
            seen: dict[str, int] = {}
            for r in found:
                seen[r["namespace"]] = seen.get(r["namespace"], 0) + 1
            exhausted = sorted(ns for ns, n in seen.items() if n > room(ns))
            if not exhausted or len(kept) + len(held_over) >= ask.limit or len(full) >= 8:
                rows = [*held_over, *kept]
                return sorted(rows, key=lambda r: (r["vdeadline"], r["id"]))
            held_over += [r for r in kept if r["namespace"] in exhausted]
            full.extend(exhausted)

    def _claim_ids(self, tx: SqliteTx, ids: list[int], ask: ClaimAsk) -> Sequence[codec.Row]:
        if not ids:
            return []
        params = {"ids": json.dumps(ids), "worker_id": ask.worker_id, "start": ask.starts}
        return tx.all("claim_ids", params)

    def heartbeat(self, worker_id: str, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        if not claims:
            return set()
        lost: set[FiringId] = set()
        with self.db.transaction() as tx:
            for firing_id, token in claims:
                if tx.run("heartbeat", {"id": firing_id, "token": token}) == 0:
                    lost.add(firing_id)
        return lost

    def complete(self, completions: Sequence[Completion]) -> list[bool]:
        if not completions:
            return []
        with self.db.transaction() as tx:
            return self._complete_in(tx, completions)

    def _complete_in(self, tx: SqliteTx, completions: Sequence[Completion]) -> list[bool]:
        # successes, the common case, in one statement; the others one by one
        successes = [
            [c.firing_id, c.claim_token, to_us(c.started_at), to_us(c.finished_at)]
            for c in completions
            if c.succeeded and not c.cancelled
        ]
        done: set[tuple[int, str]] = set()
        if successes:
            rows = tx.all("complete_successes", {"batch": json.dumps(successes)})
            done = {(r[0], r[1]) for r in rows}
        accepted: list[bool] = []
        for c in completions:
            if c.succeeded and not c.cancelled:
                accepted.append((c.firing_id, c.claim_token) in done)
                continue
            params = {
                "id": c.firing_id,
                "token": c.claim_token,
                "started_at": to_us(c.started_at),
                "finished_at": to_us(c.finished_at),
                "error": c.error,
            }
            if c.cancelled:
                row = tx.one("complete_cancelled", params)
            else:
                row = tx.one("complete_failure", params | {"retry_at": opt_us(c.retry_at)})
                if row is not None:
                    tx.run(
                        "insert_attempt",
                        {
                            "firing_id": c.firing_id,
                            "attempt": row["attempt"],
                            "worker_id": row["worker_id"],
                            "claimed_at": row["claimed_at"],
                            "started_at": params["started_at"],
                            "finished_at": params["finished_at"],
                            "outcome": "failed",
                            "error": c.error,
                        },
                    )
            accepted.append(row is not None)
        return accepted


def _claimed(
    rows: Sequence[codec.Row], jobs: dict[int, tuple[str, str | None]]
) -> list[ClaimedFiring]:
    return codec.claimed_from_rows(
        rows, lambda r: jobs[r["job_id"]][0], lambda r: jobs[r["job_id"]][1]
    )
