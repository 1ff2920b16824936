"""Time partitions of firings on PostgreSQL (schema.sql migration_16): one partition
per UTC day of ``scheduled_for``, and ``firings_legacy`` (the table as it was before
the migration) holding every instant before the boundary.

- Creation: the leader makes today's and tomorrow's partitions at the start of each
  retention pass (``maintain_partitions``); an insert whose day has none (a catch-up of
  an old instant, a far one-shot, a moved clock) creates it and is run again
  (db.py, ``missing_partition``). A partition is created as a table, then ATTACHed:
  SHARE UPDATE EXCLUSIVE on the parent, so reads and writes go on.
- Drop (``start_drops`` at the start of each retention pass, then ``drop_step``, one
  step per leader step, paced like the batches of the walk): a partition whose day
  is over goes as a whole when none of its firings must stay — none unfinished, each
  finished longer ago than its policy's keep_for, and each (job, outcome) group of a
  recurring job with at least keep_last newer firings of the same outcome in later
  partitions (the rules of domain/retention.py, decided per group on its newest
  firing, which the older ones follow). Deciding reads the partition once (an
  aggregate per job and outcome: a step). Its one-shot jobs (a job row each, as
  ``app.enqueue`` leaves them) then go as a whole, a chunk of the partition's firings
  per step, each chunk one DELETE of jobs (a prune of its own). The last step, one
  transaction: the recurring jobs' ``pruned`` events summed, attempts and idempotency
  keys deleted, DETACH (the parent's ACCESS EXCLUSIVE lock, waited for at most 200 ms),
  the partition checked again through two index probes — anything written to it since
  the decision (a re-drive, a late insert) is unfinished or finished recently — and
  DROP TABLE: no row deleted, no dead tuple, no vacuum; rolled back if the check fails
  or a chunk kept a one-shot job. A partition that cannot go whole is left to the
  batched pass (core/retention.py), like the rest of the history.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import psycopg

from cronwheel.domain.firing import FiringState
from cronwheel.domain.retention import (
    DEFAULT_RETENTION,
    ONE_SHOT_KINDS,
    Candidate,
    PrunedSummary,
    PruneReport,
    Retention,
    add_pruned,
    prunable,
)
from cronwheel.errors import StoreError, StoreUnavailableError
from cronwheel.store import codec
from cronwheel.store.codec import Row
from cronwheel.store.core.flows import CoreStore
from cronwheel.store.postgres.db import Database, PgTx, query

_NAME = re.compile(r"firings_(legacy|p(\d{4})(\d{2})(\d{2}))")
_PART = "/*part*/"
DAY = timedelta(days=1)


class _Abandoned(Exception):
    """The partition changed between the decision and the drop: rolled back."""


@dataclass(slots=True)
class _Drop:
    """A partition decided droppable (its groups, under these policies at ``now``), its
    one-shot jobs being deleted a chunk at a time (``after_id``: the last firing read),
    then its firings' attempts and keys (``dependents_after``)."""

    name: str
    groups: list[Row]
    policies: dict[str, Retention]
    now: datetime
    longest: timedelta
    after_id: int = 0
    one_shots_done: bool = False
    one_shots_deleted: int = 0
    dependents_after: int = 0
    dependents_done: bool = False

    def recurring(self) -> list[Row]:
        return [g for g in self.groups if g["kind"] not in ONE_SHOT_KINDS]

    def one_shots(self) -> int:
        """The partition's one-shot jobs (a firing each) at the decision."""
        return len({g["job_id"] for g in self.groups if g["kind"] in ONE_SHOT_KINDS})


def partition_range(name: str, legacy_to: datetime | None) -> tuple[datetime, datetime] | None:
    """The [lo, hi) instants of a partition of firings by its name (None: not ours)."""
    m = _NAME.fullmatch(name)
    if m is None:
        return None
    if m.group(1) == "legacy":
        if legacy_to is None:
            return None
        return datetime.min.replace(tzinfo=UTC), legacy_to
    lo = datetime(int(m.group(2)), int(m.group(3)), int(m.group(4)), tzinfo=UTC)
    return lo, lo + DAY


class PgPartitions(CoreStore[Database]):
    """Creating and dropping the day partitions of firings (module doc)."""

    partitions_ahead = 1  # days after today with a partition made in advance

    def prepare_partitioning(self) -> datetime | None:
        """On a database at migration 15, what migration_16 needs done first, each step
        without blocking writers (a session of its own, autocommit): the boundary B (two
        UTC midnights ahead, or the day after the latest instant held), the CHECK
        (scheduled_for < B) added NOT VALID then VALIDATEd (a scan under SHARE UPDATE
        EXCLUSIVE), the unique index on (id, scheduled_for) built CONCURRENTLY (an
        invalid one left by an interrupted build dropped first). Idempotent; B, or None
        when the database is not at version 15."""
        if not self.db.read(lambda tx: tx.one("prep_has_meta"))["ok"]:  # type: ignore[index]
            return None
        state = self.db.read(lambda tx: tx.one("prep_state"))
        if state is None or state["version"] != "15":
            return None  # every process of a migrated deployment returns here, lock-free
        if self.db.pooled:  # a session lock and CONCURRENTLY need a session of their own
            raise StoreError(
                "migration 16 from version 15 needs a direct connection, not one through "
                "a transaction pooler: run `cronwheel migrate` with the primary's own URL",
                field="store",
            )
        q = dict(self.db.q)
        with psycopg.connect(self.db.conninfo, autocommit=True) as conn:
            conn.execute(query(q["prep_lock"]))
            try:
                return _prepare(conn, q)
            finally:
                conn.execute(query(q["prep_unlock"]))

    # the longest keep_for in use, as the last retention_bounds found it
    _longest_keep_for: timedelta | None = None
    _uniform_keep_for = False

    def _prune_until(self, until: datetime) -> datetime:
        """With one keep_for in use (the default case), the batched walk stops at the UTC
        midnight before ``until``: what it would reach beyond is in days that go whole
        (see _leave_to_drop), and reading them on every pass to leave them would cost a
        day's rows each time."""
        longest = self._longest_keep_for
        if not self._uniform_keep_for or longest is None or longest < DAY:
            return until
        return until.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)

    def _leave_to_drop(self, row: Row, policy: Retention, now: datetime) -> bool:
        """A firing kept by the longest keep_for in use is left to the drop of its day
        until that day has had its chance (its end + that keep_for): the pass would
        otherwise delete each day's firings one by one as they age, in the day before
        the whole day can go. So such a firing is kept up to a day longer than its
        keep_for; a shorter policy's firings, and any under a keep_for shorter than a
        day (a day more would be more than the policy), are pruned row by row, on
        time (their days still go whole when they can)."""
        longest = self._longest_keep_for
        if longest is None or longest < DAY or policy.keep_for != longest:
            return False
        day = codec.req_instant(row["scheduled_for"]).astimezone(UTC)
        day_end = day.replace(hour=0, minute=0, second=0, microsecond=0) + DAY
        return now < day_end + longest

    def maintain_partitions(self) -> list[str]:
        """Today's partition and the next ``partitions_ahead`` days' (store clock), then
        the claim's floor raised (``raise_floor``)."""
        now = self.db.now()
        days = [now + i * DAY for i in range(self.partitions_ahead + 1)]

        def body(tx: PgTx) -> list[str]:
            return [str(tx.one("partition_ensure", {"at": d})["name"]) for d in days]  # type: ignore[index]

        made = self.db.write(body, atomic=False)
        self.raise_floor()
        return made

    def raise_floor(self) -> bool:
        """The claim's floor moved up to the oldest partition holding an unfinished
        firing (at most today's start), so that claims read no older partition (schema.sql
        migration_29); False, unchanged, while an insert or a re-drive is in flight."""
        row = self.db.write(lambda tx: tx.one("floor_raise"))
        return bool(row and row["raised"])

    def claim_floor(self) -> datetime | None:
        """The claim's floor: no unfinished firing is scheduled before it (None: no
        floor, every partition is read)."""
        row = self.db.read(lambda tx: tx.one("floor_read"))
        return None if row is None or row["at"] is None else codec.req_instant(row["at"])

    def partitions(self) -> list[tuple[str, datetime, datetime]]:
        """The partitions of firings: (name, lo, hi), oldest first."""
        rows = self.db.read(lambda tx: tx.all("partitions_list"))
        out = []
        for r in rows:
            rng = partition_range(str(r["name"]), r["legacy_to"])
            if rng is not None:
                out.append((str(r["name"]), *rng))
        return sorted(out, key=lambda p: p[1])

    def retention_bounds(self, policies: dict[str, Retention]) -> tuple[timedelta, int]:
        """The longest keep_for in use (the policies of the namespaces that have jobs,
        the jobs' overrides) and the longest keep_last (any policy's: a bound of the
        count), the first remembered for the batched walk of this pass (_leave_to_drop)."""
        row = self.db.read(lambda tx: tx.one("retention_longest_keep_for"))
        assert row is not None
        # the policies of the namespaces that have jobs (the default for one without its
        # own): a namespace's policy set for a namespace with no job holds nothing
        used = [policies.get(ns, DEFAULT_RETENTION).keep_for for ns in self.namespaces_in_use()]
        used = used or [DEFAULT_RETENTION.keep_for]
        longest = max(used)
        if row["keep_for_s"] is not None:
            longest = max(longest, timedelta(seconds=float(row["keep_for_s"])))
        bounds = self.db.read(lambda tx: tx.one("retention_job_bounds"))
        shortest = min(used)
        if bounds is not None and bounds["keep_for_s"] is not None:
            shortest = min(shortest, timedelta(seconds=float(bounds["keep_for_s"])))
        self._longest_keep_for = longest
        self._uniform_keep_for = shortest == longest
        keep_cap = max([p.keep_last for p in policies.values()] + [DEFAULT_RETENTION.keep_last, 1])
        if bounds is not None and bounds["keep_last"] is not None:
            keep_cap = max(keep_cap, int(bounds["keep_last"]))
        return longest, keep_cap

    # the drop work of the pass under way (a pass is started by start_drops): the
    # partitions still to look at, and the one being dropped
    _drop_queue: list[tuple[str, datetime]] | None = None
    _dropping: _Drop | None = None
    # firings a chunk of a drop reads (its one-shot jobs deleted; then, its attempts and keys)
    one_shot_scan = 5_000

    def start_drops(self) -> None:
        """A pass's drop work: every partition whose day is over, oldest first."""
        now = self.db.now()
        self._drop_queue = [(name, hi) for name, _lo, hi in self.partitions() if hi <= now]
        self._dropping = None

    def drops_pending(self) -> bool:
        return bool(self._drop_queue) or self._dropping is not None

    def drop_step(self) -> PruneReport | None:
        """The next piece of the pass's drop work, a short transaction or read of its own
        (None: there is none left): deciding the next partition, a chunk of the one-shot
        jobs of the one decided, or its drop. The leader runs one per step, paced like a
        batch of the walk (dispatch/retention.py), so that a day of a million firings
        (a hundred thousand one-shot jobs, each a job row to delete) never holds the
        dispatcher, a claim or the writer for more than a chunk."""
        report = PruneReport(dry_run=False)
        try:
            if self._dropping is None:
                self._dropping = self._decide_next(report)
                if self._dropping is None and not self._drop_queue:
                    self._drop_queue = None
                    return None
            elif not self._dropping.one_shots_done:
                self._one_shots_chunk(self._dropping, report)
            elif not self._dropping.dependents_done:
                self._dependents_chunk(self._dropping, report)
            else:
                drop, self._dropping = self._dropping, None
                if drop.one_shots_deleted != drop.one_shots():
                    raise _Abandoned(drop.name)  # one kept: changed since the decision
                self._drop_partition(
                    drop.name, drop.recurring(), drop.policies, drop.now, drop.longest
                )
                for g in drop.recurring():
                    report.firings[g["state"]] = report.firings.get(g["state"], 0) + int(g["n"])
                report.partitions = 1
        except (_Abandoned, StoreUnavailableError, psycopg.errors.UndefinedTable):
            self._dropping = None  # the next pass decides again
        return report

    def _decide_next(self, report: PruneReport) -> _Drop | None:
        """The next partition of the queue whose firings may all go (its facts, then its
        groups: one aggregate read of it), or None when this step found none."""
        now = self.db.now()
        policies = self.list_retention()
        longest, keep_cap = self.retention_bounds(policies)
        while self._drop_queue:
            name, hi = self._drop_queue.pop(0)
            facts = self._read_part("partition_facts", name)[0]
            last = facts["last_finished"]
            if facts["active"] or (last is not None and now - last < longest):
                continue
            params = {"hi": self.db.instant(hi), "keep_cap": keep_cap}
            groups = self._read_part("partition_groups", name, params)
            report.scanned += sum(int(g["n"]) for g in groups)
            if all(_group_prunable(g, policies, now) for g in groups):
                drop = _Drop(name, groups, policies, now, longest)
                drop.one_shots_done = drop.one_shots() == 0
                return drop
            return None  # one read of a partition per step
        return None

    def _one_shots_chunk(self, drop: _Drop, report: PruneReport) -> None:
        params = {
            "after_id": drop.after_id,
            "scan": self.one_shot_scan,
            "decided_at": self.db.instant(drop.now),
        }

        def body(tx: PgTx) -> list[Row]:
            rows = _all(tx, "partition_one_shots_chunk", drop.name, params)
            uncharge: dict[str, int] = {}
            for r in rows:
                if r["kind"] is not None and r["kind"] != "now":
                    uncharge[r["namespace"]] = uncharge.get(r["namespace"], 0) + int(r["n"])
            for namespace, n in sorted(uncharge.items()):
                self._uncharge_job(tx, namespace, n)
            return rows

        rows = self.db.write(body)
        scanned = int(rows[0]["scanned"]) if rows else 0
        report.scanned += scanned
        for r in rows:
            if r["state"] is not None:
                report.firings[r["state"]] = report.firings.get(r["state"], 0) + int(r["n"])
                report.jobs += int(r["n"])
                drop.one_shots_deleted += int(r["n"])
        if rows and rows[0]["last_id"] is not None:
            drop.after_id = int(rows[0]["last_id"])
        if scanned < self.one_shot_scan or drop.one_shots_deleted >= drop.one_shots():
            drop.one_shots_done = True

    def _dependents_chunk(self, drop: _Drop, report: PruneReport) -> None:
        """The next chunk of the partition's firings: their attempts and keys deleted
        (partitions.sql partition_dependents_chunk)."""
        params = {
            "after_id": drop.dependents_after,
            "scan": self.one_shot_scan,
            "decided_at": self.db.instant(drop.now),
        }
        row = self.db.write(lambda tx: _one(tx, "partition_dependents_chunk", drop.name, params))
        scanned = int(row["scanned"])
        report.scanned += scanned
        if row["last_id"] is not None:
            drop.dependents_after = int(row["last_id"])
        drop.dependents_done = scanned < self.one_shot_scan

    def _read_part(self, name: str, part: str, params: dict[str, Any] | None = None) -> list[Row]:
        return self.db.read(lambda tx: _all(tx, name, part, params))

    def _drop_partition(
        self,
        name: str,
        groups: list[Row],
        policies: dict[str, Retention],
        now: datetime,
        longest: timedelta,
    ) -> None:
        """The drop of a partition whose one-shot jobs are gone (drop_step's chunks):
        the recurring jobs' ``pruned`` events summed, the firings' attempts and keys
        deleted, DETACH, the facts checked again, DROP; abandoned (rolled back) when a
        one-shot job or a change is found."""

        def body(tx: PgTx) -> None:
            per_job: dict[int, list[Row]] = {}
            for g in groups:
                if g["kind"] in ONE_SHOT_KINDS:
                    continue
                per_job.setdefault(int(g["job_id"]), []).append(g)
            merges = {job: partial(add_pruned, add=_summary(rows)) for job, rows in per_job.items()}
            self._merge_pruned_events(tx, merges)
            tx.execute(_sql(self.db, "partition_drop_dependents", name))
            tx.run("partition_lock_timeout")
            tx.execute(_sql(self.db, "partition_detach", name))
            facts = _one(tx, "partition_facts", name)
            last = facts["last_finished"]
            if facts["active"] or (last is not None and now - last < longest):
                raise _Abandoned(name)
            tx.execute(_sql(self.db, "partition_drop", name))

        self.db.write(body)


def _prepare(conn: psycopg.Connection[Any], q: dict[str, str]) -> datetime | None:
    def one(name: str, text: str | None = None) -> Any:
        cur = conn.execute(query(text or q[name]))
        return cur.fetchone() if cur.description is not None else None

    state = one("prep_state")
    version, boundary, check_valid, index_valid = state
    if version != "15":
        return None
    if boundary is None:
        (boundary,) = one("prep_boundary")
    if check_valid is None:
        text = q["prep_check_add"].replace("/*boundary*/", boundary.isoformat())
        one("prep_check_add", text)
    if not check_valid:
        one("prep_check_validate")
    if index_valid is False:
        one("prep_index_drop")
    if not index_valid:
        one("prep_index_build")
    return boundary if isinstance(boundary, datetime) else None


def _sql(db: Database, name: str, part: str) -> str:
    if _NAME.fullmatch(part) is None:  # never user text, but it is spliced into SQL
        raise ValueError(f"not a partition of firings: {part!r}")
    return db.q[name].replace(_PART, part)


def _one(tx: PgTx, name: str, part: str, params: dict[str, Any] | None = None) -> Row:
    rows = _all(tx, name, part, params)
    assert rows
    return rows[0]


def _all(tx: PgTx, name: str, part: str, params: dict[str, Any] | None = None) -> list[Row]:
    return list(tx.execute(_sql(tx.db, name, part), params).fetchall())


def _policy(row: Row, policies: dict[str, Retention]) -> Retention:
    keep_for = None if row["keep_for_s"] is None else timedelta(seconds=float(row["keep_for_s"]))
    keep_last = None if row["keep_last"] is None else int(row["keep_last"])
    return policies.get(row["namespace"], DEFAULT_RETENTION).resolved(keep_for, keep_last)


def _group_prunable(g: Row, policies: dict[str, Retention], now: datetime) -> bool:
    """The group's newest firing may go (its older ones then may too: they finished no
    later and have more newer firings of the same outcome)."""
    candidate = Candidate(
        state=FiringState(g["state"]),
        finished_at=codec.opt_instant(g["last_finished"]),
        one_shot=g["kind"] in ONE_SHOT_KINDS,
        newer_same_outcome=int(g["newer"]),
    )
    return prunable(candidate, _policy(g, policies), now)


def _summary(rows: list[Row]) -> PrunedSummary:
    return PrunedSummary(
        first_at=min(codec.req_instant(r["first_at"]) for r in rows),
        last_at=max(codec.req_instant(r["last_at"]) for r in rows),
        counts={str(r["state"]): int(r["n"]) for r in rows},
    )
