"""What creating a job writes on PostgreSQL besides the job, without a row that every
other creation waits for (schema.sql migration_20).

- **The jobs quota in shards.** A namespace's jobs counter is ``SHARDS`` rows of
  ``quota_jobs``, each with the jobs it counts (``used``) and its share of the room left
  under the limit (``room``). A creation takes its jobs from the room of a shard that
  no other transaction holds (``quota_jobs_take``, SKIP LOCKED): creations run side by
  side, each holding one shard until its COMMIT; when every shard with the room is
  held, it waits for one of them (``quota_jobs_take_waiting``). Only when no shard has
  the room does the slow path lock every shard of the namespace in order, count, and
  either refuse (the limit, exactly as one counter would) or take the jobs and share
  the room left out again. (Creations that found every shard held used to take the
  slow path, and under a steady load each then found them all held by the one before:
  8 API connections creating jobs in one namespace ran one at a time.) A deletion
  gives jobs back the same way. ``sum(used) + sum(room)`` is the limit after every
  slow path (``set_quota`` shares it out again too), and ``room`` is never negative,
  so the fast path cannot pass the limit.
- **The job set's version** is meta's ``jobs_version`` plus the rows of
  ``job_changes`` (one per changing transaction, an insert that waits for nobody);
  ``jobs_version()`` folds them into meta when more than ``FOLD_AT`` are pending.
- **A creation in one statement** (``create_job``, schema.sql migration_23). The
  common creation (a free shard with room, the schedule within ``min_interval``, a new
  name) is one autocommitted call of ``cronwheel_create_job`` (through
  ``cronwheel_put_job``, migration_24): one round trip where
  the transaction of CoreStore.create_job made six. Whatever needs a decision (no free
  shard with room, a schedule under the namespace's ``min_interval``, a task no worker
  serves when asked to check it) makes the function raise ``CW001`` with nothing
  written, and that transaction runs instead, with its own reads, waits and errors.
  The API awaits the same call on its event loop (store/postgres/aio.py), with a first
  instant made from its host's clock and checked against the store's in the statement
  (``valid_from``: domain/jobs.py first_fire_window), so a creation is one round trip.
- **An upsert in one statement** (``upsert_job``: ``App.schedule``'s default, the API's
  PUT, ``jobs add``; schema.sql migration_24). ``cronwheel_put_job`` returns a job
  stored with the same definition without writing, and creates a new name through
  ``cronwheel_create_job``, and updates a changed definition of the same schedule
  (a compare-and-swap on its ``spec_hash``). For a new schedule (its ``min_interval``
  and cursor) or a race it answers ``decide`` with nothing written, and the
  transaction of CoreStore.upsert_job compares and updates under the row's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg

from cronwheel.domain.models import Job, JobSpec
from cronwheel.domain.quotas import DEFAULT_QUOTA, Quota, min_gap
from cronwheel.store import codec
from cronwheel.store.codec import Row, duration_us
from cronwheel.store.core.bulk import job_exists
from cronwheel.store.core.dialect import Tx
from cronwheel.store.core.flows import CoreStore
from cronwheel.store.core.quotas import counts_job
from cronwheel.store.postgres.db import Database

SHARDS = 8  # creations of one namespace that can hold a shard at once
FOLD_AT = 1000  # job_changes rows a version read folds into meta
T = TypeVar("T")

DECIDE = "CW001"  # cronwheel_create_job's SQLSTATE: the full creation must decide


class PgJobsQuota(CoreStore[Database]):
    """The jobs quota's shards and the job set's version (module doc)."""

    def jobs_version(self) -> int:
        row = self._one("jobs_version")
        assert row is not None
        if int(row["pending"]) > FOLD_AT:
            self.db.write(lambda tx: tx.run("jobs_version_fold"))
        return int(row["value"])

    def create_job(self, spec: JobSpec, *, first_fire_at: datetime | None) -> Job:
        """In one statement when it needs no decision (module doc), else CoreStore's
        transaction."""
        rows = self._one_statement(spec, first_fire_at, upsert=False)
        if rows is not None:
            return created_job(spec, rows)
        return super().create_job(spec, first_fire_at=first_fire_at)

    def upsert_job(self, spec: JobSpec, *, first_fire_at: datetime | None) -> tuple[Job, bool]:
        """In one statement when it needs no decision (``put_job_one``): a name stored
        with this very definition is returned unwritten, one stored with another
        definition of the same schedule is updated, a new name is created as by
        ``create_job``. A new schedule, a definition changed meanwhile, a name created
        meanwhile and whatever a creation must decide go to CoreStore's transaction,
        which compares and updates under the row's lock."""
        rows = self._one_statement(spec, first_fire_at, upsert=True)
        if rows and rows[0]["outcome"] != "decide":
            return codec.job_from_row(rows[0]), rows[0]["outcome"] != "unchanged"
        return super().upsert_job(spec, first_fire_at=first_fire_at)

    def _one_statement(
        self, spec: JobSpec, first_fire_at: datetime | None, *, upsert: bool
    ) -> Sequence[Row] | None:
        """``put_job_one``'s rows, or None when it must be the transaction: CW001, or
        inside a caller's transaction (``Database.own_units`` false: the function's CW001
        would leave the caller's savepoint aborted)."""
        if not self.db.own_units:
            return None
        params = create_params(spec, first_fire_at, check_task=False, upsert=upsert)
        return self.db.write(
            lambda tx: unless_decided(lambda: tx.all("put_job_one", params)), atomic=False
        )

    def _take_jobs(self, tx: Tx, namespace: str, n: int, limit: Callable[[], int]) -> bool:
        key = {"namespace": namespace, "n": n}
        if _one_shard(tx, "quota_jobs_take", key):
            return True
        return self._share(tx, namespace, limit(), n)

    def _uncharge_job(self, tx: Tx, namespace: str, n: int = 1) -> None:
        if n <= 0 or _one_shard(tx, "quota_jobs_give", {"namespace": namespace, "n": n}):
            return
        self._share(tx, namespace, self._quota_in(tx, namespace).jobs, -n)

    def _quota_changed(self, tx: Tx, namespace: str, quota: Quota) -> None:
        self._share(tx, namespace, quota.jobs, 0)

    def _share(self, tx: Tx, namespace: str, limit: int, n: int) -> bool:
        """The slow path: every shard of the namespace locked; ``n`` jobs taken (given
        back when negative) unless that would pass ``limit`` (False, nothing written),
        then the room left shared out evenly (the remainder to the first shards)."""
        tx.run("quota_jobs_ensure", {"namespace": namespace, "shards": SHARDS})
        rows = tx.all("quota_jobs_lock", {"namespace": namespace})
        used = [int(r["used"]) for r in rows]
        total = sum(used) + n
        if n > 0 and total > limit:
            return False
        if n:
            _spread(used, n)
        room = max(0, limit - total)
        share, extra = divmod(room, len(used))
        params: Mapping[str, Any] = {
            "namespace": namespace,
            "shard": [int(r["shard"]) for r in rows],
            "used": used,
            "room": [share + (1 if i < extra else 0) for i in range(len(used))],
        }
        tx.run("quota_jobs_set", params)
        return True


def create_params(
    spec: JobSpec,
    first_fire_at: datetime | None,
    *,
    check_task: bool,
    valid_from: datetime | None = None,
    upsert: bool = False,
) -> dict[str, Any]:
    """``put_job_one``'s parameters; ``check_task``: leave it to the transaction
    (CW001) when a worker has served tasks but not this one (domain.jobs.
    require_served_task); ``valid_from``: likewise unless the store's clock is in
    ``[valid_from, first_fire_at)`` (domain.jobs.first_fire_window)."""
    gap = min_gap(spec.schedule, first_fire_at)
    return codec.job_params(spec) | {
        "next_fire_at": first_fire_at,
        "gap_us": None if gap is None else duration_us(gap),
        "min_interval_us": duration_us(DEFAULT_QUOTA.min_interval),
        "counts": counts_job(spec),
        "check_task": check_task,
        "valid_from": valid_from,
        "upsert": upsert,
    }


def unless_decided(statement: Callable[[], T]) -> T | None:
    """``statement()``'s answer, or None when its function left the work to the full
    transaction (CW001, nothing written: ``put_job_one``, ``enqueue_now_one``). Only on
    a connection of its own in autocommit: the error ends that statement alone."""
    try:
        return statement()
    except psycopg.Error as exc:
        if decides(exc):
            return None
        raise


def decides(exc: psycopg.Error) -> bool:
    """Whether ``exc`` is a one-statement function (cronwheel_create_job,
    cronwheel_charge_firings) leaving the work to the full transaction."""
    return exc.sqlstate == DECIDE


def created_job(spec: JobSpec, rows: Sequence[Row]) -> Job:
    """The job ``put_job_one`` created; no row: the namespace has the name (409)."""
    if not rows:
        raise job_exists(spec, naming_namespace=True)
    return codec.job_from_row(rows[0])


def _one_shard(tx: Tx, name: str, key: Mapping[str, Any]) -> bool:
    """``name`` on a free shard, else on a held one waited for (``name``_waiting);
    False when no shard can take it: the slow path decides."""
    return tx.one(name, key) is not None or tx.one(f"{name}_waiting", key) is not None


def _spread(used: list[int], n: int) -> None:
    """``n`` jobs added to the shards' counts (taken away when negative, from the
    fullest first; a counter already lower than the jobs deleted stops at zero)."""
    if n > 0:
        used[0] += n
        return
    left = -n
    for i in sorted(range(len(used)), key=lambda i: -used[i]):
        take = min(left, used[i])
        used[i] -= take
        left -= take
