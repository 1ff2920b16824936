"""PostgreSQL: the worker's side — claims, completions, heartbeats.

Claims pick rows with ``FOR UPDATE SKIP LOCKED`` (cronwheel_claim_scan: a plan-pinned
ordered index walk). A claim whose candidates include a capped job (or an overlap
override, or a passed start deadline) is planned by store/claiming.py inside one
transaction, under row locks that serialize the claimers of each capped job (see
``_claim_planned``); otherwise it is one statement (claim_fast).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import suppress
from datetime import datetime
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from cronwheel.domain.models import ClaimedFiring, FiringId
from cronwheel.domain.quotas import UNLIMITED
from cronwheel.errors import StoreUnavailableError
from cronwheel.store import codec
from cronwheel.store.claiming import ClaimAsk, candidates_from_rows, capped, plan_claim
from cronwheel.store.codec import Row
from cronwheel.store.core import CoreStore
from cronwheel.store.core.work import Ready
from cronwheel.store.postgres.db import Database, PgTx
from cronwheel.store.postgres.params import claim_instants, complete_params, rounds
from cronwheel.store.protocol import Completion

# start's batch naming no firing (ids start at 1): the warm-up before a held start
_NO_FIRING = json.dumps([[0, ""]])


class PgClaims(CoreStore[Database]):
    one_writer = False  # writers run side by side, each on its connection (WorkerPort)
    waits_for_instant = True  # start_at (schema.sql migration_28)
    # task sets whose last claim needed a policy decision (a hint, see claim)
    _planned_tasks: set[frozenset[str]]

    def _claim(self, ask: ClaimAsk) -> list[ClaimedFiring]:
        """One statement (claim_fast) while no candidate needs a policy decision; else the
        planned claim in one transaction (``_claim_planned``). Which of the two a task set
        needed last time is remembered, so a worker of capped jobs does not try the
        one-statement path in vain on every call."""
        key = frozenset(ask.tasks)
        # the namespaces with a running quota (none by default): read first, so that a
        # claim with none to check stays one autocommitted statement (a quota set in the
        # meantime applies from the next claim)
        limited = self.db.read(self._running_limited)
        if key not in self._planned_tasks:
            params = _claim_params(ask)
            if limited:
                fast = self.db.write(
                    lambda tx: self._within_quota(tx, tx.all("claim_fast", params), limited)
                )
            else:
                fast = self.db.write(lambda tx: tx.all("claim_fast", params), atomic=False)
            if not fast or fast[0]["simple"]:
                return _claimed(fast)
            self._remember_planned(key, True)
        params = _claim_params(ask, planned=True)

        def planned_claim(tx: PgTx) -> tuple[Sequence[Row], bool]:
            rows, planned = self._claim_planned(tx, params)
            return self._within_quota(tx, rows, limited), planned

        rows, planned = self.db.write(planned_claim)
        self._remember_planned(key, planned)
        return _claimed(rows)

    def _within_quota(
        self, tx: PgTx, rows: Sequence[Row], limited: Mapping[str, int] | None = None
    ) -> Sequence[Row]:
        """The running quota, after the claim in its transaction: per namespace of the
        claimed rows that has a running quota (``limited``; read here when not given),
        in name order, the namespace lock, then its held firings counted; those over
        its quota are given back QUEUED (the last in claim order first). A claim that
        took nothing of such a namespace takes no lock."""
        if limited is None:
            limited = self._running_limited(tx)
        taken: dict[str, list[Row]] = {}
        for r in rows:
            if r["id"] is not None and r["namespace"] in limited:
                taken.setdefault(r["namespace"], []).append(r)
        if not taken:
            return rows
        room = self._running_room(tx, limited, extra=len(rows))
        back: list[int] = []
        for namespace in sorted(taken):
            tx.run("quota_lock_namespace", {"namespace": namespace})
            over = -room(namespace)  # the count includes this claim's own rows
            if over > 0:
                ordered = sorted(taken[namespace], key=lambda r: (r["vdeadline"], r["id"]))
                back += [r["id"] for r in ordered[-over:]]
        if not back:
            return rows
        worker_id = next(iter(taken.values()))[0]["worker_id"]
        tx.run("quota_unclaim", {"ids": back, "worker_id": worker_id})
        given = set(back)
        return [r for r in rows if r["id"] not in given]

    def _complete_and_claim(
        self, completions: Sequence[Completion], ask: ClaimAsk
    ) -> tuple[list[bool], list[ClaimedFiring]]:
        """complete_batch then claim_fast in one transaction: one commit (one WAL flush)
        where there were two. The one-statement claim never waits for a lock, so joining
        it to the completions adds no lock wait to a transaction holding their rows.
        A claim that needs policy decisions runs after the completions committed, in its
        own transaction as in ``claim`` (its job locks are not taken while completed
        rows are held); if that claim fails, the outcomes are returned with no claims."""
        if not completions:
            return [], self._claim(ask) if ask.wants else []
        key = frozenset(ask.tasks)
        if not ask.wants or key in self._planned_tasks:
            accepted = self.complete(completions)
            return accepted, self._claim_after(ask)
        params = _claim_params(ask)
        batches = _completion_rounds(completions)

        def body(tx: PgTx) -> tuple[list[bool], Sequence[Row]]:
            accepted = self._complete_in(tx, completions, batches)
            rows = tx.all("claim_fast", params)
            return accepted, self._within_quota(tx, rows, _limited(rows))

        accepted, fast = self.db.write(body)
        if not fast or fast[0]["simple"]:
            return accepted, _claimed(fast)
        self._remember_planned(key, True)
        return accepted, self._claim_after(ask)

    def _complete_and_start(
        self,
        completions: Sequence[Completion],
        params: dict[str, Any],
        ready: Ready,
        not_before: datetime | None,
    ) -> tuple[list[bool], set[FiringId]]:
        """The starts, then the outcomes, each in its own transaction as ``start`` and
        ``complete``: the rows of both are locked in id order statement by statement (as
        a heartbeat locks them), and one transaction holding the started rows while it
        locks the completed ones could deadlock with a heartbeat over both. A worker does
        not join them here (``one_writer`` is false): in ``cronwheel bench herd`` the
        last of 10,000 started 4.0 and 4.1 s after the instant with the two written on
        their own connections, 4.4 and 4.9 s when joined in one call, 5.3 and 5.8 s
        in one transaction."""
        started = self._started(params, ready, not_before)
        return self.complete(completions), started

    def _started(
        self, params: dict[str, Any], ready: Ready, not_before: datetime | None
    ) -> set[FiringId]:
        """The start, on one connection: with ``ready``, first ``start`` on no firing
        (in the first claim's partition), which runs the statement's path in this
        session and warms what it touches (the pool's checkout, the plan, the index
        pages): after 100 ms idle the start took 1.3-1.4 ms cold and 0.35 ms hot
        (docs/benchmarks.md, "A held firing's start on warm caches"). Then ``ready``
        (the worker's wait), then ``start_at``, whose server waits for ``not_before``."""
        if not_before is None and ready is None:
            return super()._started(params, None, None)

        def body(tx: PgTx) -> Sequence[Row]:
            if ready is not None:
                tx.all("start", {"batch": _NO_FIRING, "instants": params["instants"][:1]})
                ready()
            return tx.all("start_at", params | {"at": not_before})

        return {FiringId(r["id"]) for r in self.db.write(body, atomic=False)}

    def _claim_after(self, ask: ClaimAsk) -> list[ClaimedFiring]:
        if not ask.wants:
            return []
        try:
            return self._claim(ask)
        except StoreUnavailableError:
            return []  # the outcomes are recorded; the worker's next claim retries

    def _remember_planned(self, key: frozenset[str], planned: bool) -> None:
        if not planned:
            self._planned_tasks.discard(key)
        elif len(self._planned_tasks) < 1024:  # a hint only: bounded
            self._planned_tasks.add(key)

    def _claim_planned(self, tx: PgTx, params: dict[str, Any]) -> tuple[Sequence[Row], bool]:
        """The claim with the job policies, inside one READ COMMITTED transaction.

        Lock order, the same in every claimer: candidate firings (SKIP LOCKED, never
        waits) -> the capped jobs' rows in id order (waits: this serializes the claimers
        deciding for one job) -> those jobs' other due firings (SKIP LOCKED) -> their
        RUNNING firings, in id order, when the plan cancels or terminates them (may wait
        for a worker's heartbeat or completion, which take no job locks). No cycle.
        Returns the claimed rows, and whether any policy decision was needed.
        """
        found = tx.all("claim_candidates", params)
        candidates, early = candidates_from_rows(found, lambda r: bool(r["early"]))
        jobs = sorted({c.job_id for c in [*candidates, *early] if capped(c) or c.overlap_override})
        # each firing the plan may name, with its instant: its partition (_instants)
        at = {r["id"]: r["scheduled_for"] for r in found}
        running: dict[int, int] = {}
        due: dict[int, list[int]] = {}
        if jobs:
            tx.run("claim_lock_jobs", {"jobs": jobs})
            # a new statement: its snapshot sees what the claimers we waited for committed
            for r in tx.all("claim_facts", {"jobs": jobs}):
                running[r["job_id"]] = int(r["running"])
                due[r["job_id"]] = list(r["due"])
                at.update(zip(r["due"], r["due_at"], strict=True))
        planned = bool(jobs) or any(c.deadline_passed for c in candidates)
        plan = plan_claim(
            candidates, limit=params["limit"], running=running, due_by_job=due, early=early
        )
        fates = [(i, "skipped", why) for i, why in plan.skip]
        fates += [(i, "missed", why) for i, why in plan.missed]
        stop = plan.cancel_running | plan.terminate_running
        if plan.buffered:
            tx.run("mark_buffered", {"ids": plan.buffered, "at": _instants(at, plan.buffered)})
        if fates:
            ids = [f[0] for f in fates]
            tx.run(
                "claim_fates",
                {
                    "fate_ids": ids,
                    "fate_states": [f[1] for f in fates],
                    "fate_reasons": [f[2] for f in fates],
                    "fate_at": _instants(at, ids),
                },
            )
        if stop:
            tx.run(
                "claim_stop",
                {
                    "stop_jobs": sorted(stop),
                    "cancel_jobs": sorted(plan.cancel_running),
                    "cancel_reason": "cancelled by overlap policy cancel_other",
                    "terminate_jobs": sorted(plan.terminate_running),
                    "terminate_reason": "terminated by overlap policy terminate_other",
                },
            )
        if not plan.claim:
            return [], planned
        rows = tx.all(
            "claim_take",
            {
                "worker_id": params["worker_id"],
                "start": params["start"],
                "claim_ids": plan.claim,
                "claim_at": _instants(at, plan.claim),
            },
        )
        return rows, planned

    def prepare_claims(self, connections: int) -> None:
        """The pool's connections opened and planned (planning.py ClaimPlans); a server
        that does not answer within the pool's timeout is not waited for (WorkerPort)."""
        with suppress(psycopg.Error, PoolTimeout):
            self.db.claim_plans.prepare(self.db.pool, connections, self.db.timeout_s)

    def _start_params(self, claims: Sequence[tuple[FiringId, str]]) -> dict[str, Any]:
        """The core's, and the firings' partitions (claim_instants)."""
        return super()._start_params(claims) | {
            "instants": claim_instants([token for _, token in claims])
        }

    def heartbeat(self, worker_id: str, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        if not claims:
            return set()
        ordered = sorted(claims)  # rows locked in id order, as everywhere
        tokens = [c[1] for c in ordered]
        params = {
            "ids": [c[0] for c in ordered],
            "tokens": tokens,
            "instants": claim_instants(tokens),
        }
        rows = self.db.write(lambda tx: tx.all("heartbeat", params), atomic=False, durable=False)
        held = {r["id"] for r in rows}
        return {FiringId(fid) for fid, _ in claims if fid not in held}

    def complete(self, completions: Sequence[Completion]) -> list[bool]:
        if not completions:
            return []
        batches = _completion_rounds(completions)
        return self.db.write(
            lambda tx: self._complete_in(tx, completions, batches), atomic=len(batches) > 1
        )

    def _complete_in(
        self, tx: PgTx, completions: Sequence[Completion], batches: list[list[int]]
    ) -> list[bool]:
        accepted = [False] * len(completions)
        for batch in batches:
            params = complete_params([completions[i] for i in batch])
            done = {r["id"] for r in tx.all("complete_batch", params)}
            for i in batch:
                accepted[i] = completions[i].firing_id in done
        return accepted


def _claim_params(ask: ClaimAsk, *, planned: bool = False) -> dict[str, Any]:
    """Parameters of claim_fast, or (``planned``) of the planned claim's statements."""
    limit = ask.limit
    return {
        "worker_id": ask.worker_id,
        "tasks": list(ask.tasks),
        "limit": limit,
        "prefetch": ask.prefetch,
        "start": ask.starts,
        "unlimited": UNLIMITED,
        # Candidates scanned (and locked). The one-statement claim locks only the rows it
        # takes: a row lock is a heap write and a WAL record. The planned claim looks at a
        # few more than it may claim (some are skipped or held by a cap); each capped
        # candidate's job is locked and examined, so twice the limit made that work 2.5
        # times the claim.
        "scan": limit + 32 if planned else limit,
    }


def _instants(at: Mapping[int, datetime], ids: Sequence[int]) -> list[datetime]:
    """The instants of ``ids``, the partitions of a statement of the planned claim: the
    plan names only candidates and their jobs' due firings, whose instants ``at`` holds."""
    return [at[i] for i in ids]


def _limited(rows: Sequence[Row]) -> dict[str, int]:
    """claim_fast's ``limited``: the namespaces with a running quota (every row carries
    the same; the statement always returns one)."""
    return {str(k): int(v) for k, v in json.loads(rows[0]["limited"]).items()} if rows else {}


def _claimed(rows: Sequence[Row]) -> list[ClaimedFiring]:
    """Claimed rows (claim_fast's or claim_take's) as ClaimedFirings, in claim order
    (claim_fast's row without a claim, when it claimed nothing, is left out)."""
    return codec.claimed_from_rows(
        (r for r in rows if r["id"] is not None),
        lambda r: r["job_policies"],
        lambda r: r["job_trace"],
    )


def _completion_rounds(completions: Sequence[Completion]) -> list[list[int]]:
    """Indexes of ``completions`` in rounds: a firing reported twice in one batch is
    decided in order, one round each; within a round, rows in id order."""
    return [
        sorted(batch, key=lambda i: completions[i].firing_id)
        for batch in rounds(range(len(completions)), lambda i: completions[i].firing_id)
    ]
