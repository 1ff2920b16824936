"""Time partitions of firings on PostgreSQL (schema.sql migration_16): one partition
per UTC day of ``scheduled_for``, and ``firings_legacy`` (the table as it was before
the migration) holding every instant before the boundary.

- Creation: the leader makes today's and tomorrow's partitions at the start of each
  retention pass (``maintain_partitions``); an insert whose day has none (a catch-up of
  an old instant, a far one-shot, a moved clock) creates it and is run again
  (db.py, ``missing_partition``). A partition is created as a table, then ATTACHed:
  SHARE UPDATE EXCLUSIVE on the parent, so reads and writes go on.
- Drop (``start_drops`` at the start of each retention pass, then ``drop_step``, one
  step per leader step, paced like the batches of the walk, each a bounded chunk): a
  partition whose day is over goes as a whole when none of its firings must stay —
  none unfinished, each finished longer ago than its policy's keep_for, and each (job,
  outcome) group of a recurring job with at least keep_last newer firings of the same
  outcome in later partitions (the rules of domain/retention.py, decided per group on
  its newest firing, which the older ones follow). The steps: the partition read a
  chunk at a time into its groups; the recurring groups' newer firings counted; its
  one-shot jobs deleted (with their history, as ``app.enqueue`` leaves a job per call);
  its firings' attempts and keys deleted; then one transaction: the recurring jobs'
  ``pruned`` events summed, DETACH (the parent's ACCESS EXCLUSIVE lock, waited for at
  most 200 ms), the partition checked again through two index probes — anything
  written to it since the decision (a re-drive, a late insert) is unfinished or
  finished recently — rolled back if the check fails or a chunk kept a one-shot job;
  then, in the next step, DROP TABLE (its commit unlinks the files, off the parent's
  lock; a table detached and not dropped is dropped by the next pass): no row
  deleted, no dead tuple, no vacuum. A partition that cannot go whole is left to the
  batched pass (core/retention.py), like the rest of the history.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
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
from cronwheel.errors import StoreUnavailableError
from cronwheel.store import codec
from cronwheel.store.codec import Row
from cronwheel.store.core.flows import CoreStore
from cronwheel.store.postgres.db import Database, PgTx
from cronwheel.store.postgres.partition_prep import prepare_partitioning

_NAME = re.compile(r"firings_(legacy|p(\d{4})(\d{2})(\d{2}))")
_PART = "/*part*/"
DAY = timedelta(days=1)
_GROUP = ("job_id", "state", "n", "first_at", "last_at", "last_finished", "namespace",
          "keep_for_s", "keep_last", "kind")  # fmt: skip


class _Abandoned(Exception):
    """The partition changed between the decision and the drop: rolled back."""


@dataclass(slots=True)
class _Drop:
    """A partition being decided, then dropped, a step at a time (``phase``): its firings
    read a chunk per step into their groups (``groups``: a recurring job's per
    (job, outcome), the one-shot jobs' per (namespace, overrides, kind, outcome)), the
    recurring groups' newer firings counted (``newer``), then, decided droppable under
    ``policies`` at ``now``, its one-shot jobs deleted and its firings' attempts and keys,
    a chunk per step, its detach and its table's drop. ``after_id``: the last firing the
    phase's walk read."""

    name: str
    hi: datetime
    policies: dict[str, Retention]
    now: datetime
    longest: timedelta
    keep_cap: int
    phase: str = "groups"  # groups, newer, one_shots, dependents, drop, release
    after_id: int = 0
    groups: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    newer_at: int = 0  # the recurring groups counted so far (phase newer)
    one_shots_seen: int = 0  # one-shot firings the one_shots phase read
    one_shots_left: int = 0  # one-shot firings the dependents phase found

    def recurring(self) -> list[dict[str, Any]]:
        return [g for g in self.groups.values() if g["job_id"] is not None]

    def one_shots(self) -> int:
        """The partition's one-shot firings (their jobs go whole) at the decision."""
        return sum(int(g["n"]) for g in self.groups.values() if g["job_id"] is None)

    def add(self, row: Row) -> None:
        """A chunk's group, merged into the partition's."""
        key = (row["job_id"], row["state"], row["namespace"], row["keep_for_s"],
               row["keep_last"], row["kind"])  # fmt: skip
        got = self.groups.get(key)
        if got is None:
            self.groups[key] = {c: row[c] for c in _GROUP} | {"newer": 0}
            return
        got["n"] = int(got["n"]) + int(row["n"])
        got["first_at"] = min(got["first_at"], row["first_at"])
        got["last_at"] = max(got["last_at"], row["last_at"])
        if row["last_finished"] is not None:
            last = got["last_finished"]
            got["last_finished"] = row["last_finished"] if last is None else max(
                last, row["last_finished"]
            )  # fmt: skip

    def next_phase(self, phase: str) -> None:
        self.phase, self.after_id = phase, 0


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
        """On a database at migration 15, what migration_16 needs done first, online
        (partition_prep.py); the boundary, or None when not at version 15."""
        return prepare_partitioning(self.db)

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
    # partitions still to look at, and the one being decided or dropped
    _drop_queue: list[tuple[str, datetime]] | None = None
    _dropping: _Drop | None = None
    # a step's bounds: firings a chunk of the decision reads; firings a chunk of the
    # drop reads (its one-shot jobs deleted, then its attempts and keys); one-shot jobs a
    # chunk deletes; recurring groups whose newer firings a step counts
    decide_scan = 10_000
    one_shot_scan = 5_000
    one_shot_jobs = 100
    newer_batch = 2_000

    _orphans: list[str] | None = None  # tables detached and not dropped (partitions.sql)

    def start_drops(self) -> None:
        """A pass's drop work: every partition whose day is over, oldest first, after
        the tables an earlier pass detached and did not drop."""
        now = self.db.now()
        self._drop_queue = [(name, hi) for name, _lo, hi in self.partitions() if hi <= now]
        self._orphans = [str(r["name"]) for r in self.db.read(lambda t: t.all("partition_orphans"))]
        self._dropping = None

    def drops_pending(self) -> bool:
        return bool(self._drop_queue) or bool(self._orphans) or self._dropping is not None

    def drop_phase(self) -> str | None:
        """What the next drop step does to the partition under way (``_Drop.phase``;
        None: none is, the next step starts one, drops an orphan or walks)."""
        return None if self._dropping is None else self._dropping.phase

    def drop_step(self) -> PruneReport | None:
        """The next piece of the pass's drop work, a short transaction or read of its own
        (None: there is none left): a chunk of the decision of a partition, a chunk of
        the deletion of its one-shot jobs or of its attempts and keys, or its drop. The
        leader runs one per step, paced like a batch of the walk (dispatch/retention.py),
        so that a day of a million firings (a hundred thousand one-shot jobs, each a job
        row to delete) never holds the dispatcher, a claim or the writer for more than a
        chunk (tens of milliseconds)."""
        report = PruneReport(dry_run=False)
        drop = self._dropping
        try:
            if drop is None and self._orphans:
                self._release(self._orphans.pop(0))
            elif drop is None:
                self._dropping = self._start_next(report)
                if self._dropping is None and not self._drop_queue:
                    self._drop_queue = None
                    return None
            elif drop.phase == "groups":
                self._groups_chunk(drop, report)
            elif drop.phase == "newer":
                self._newer_chunk(drop)
            elif drop.phase == "one_shots":
                self._one_shots_chunk(drop, report)
            elif drop.phase == "dependents":
                self._dependents_chunk(drop, report)
            elif drop.phase == "drop":
                if drop.one_shots_left:
                    raise _Abandoned(drop.name)  # one kept: changed since the decision
                self._detach(drop)
                drop.phase = "release"
                for g in drop.recurring():
                    report.firings[g["state"]] = report.firings.get(g["state"], 0) + int(g["n"])
                report.partitions = 1
            else:
                self._dropping = None
                self._release(drop.name)
        except (_Abandoned, StoreUnavailableError, psycopg.errors.UndefinedTable):
            self._dropping = None  # the next pass decides again
        return report

    def _start_next(self, report: PruneReport) -> _Drop | None:
        """The next partition of the queue whose facts allow its drop (none unfinished,
        the last finish older than the longest keep_for), its decision started with its
        first chunk; None when this step found none."""
        now = self.db.now()
        policies = self.list_retention()
        longest, keep_cap = self.retention_bounds(policies)
        while self._drop_queue:
            name, hi = self._drop_queue.pop(0)
            facts = self._read_part("partition_facts", name)[0]
            last = facts["last_finished"]
            if facts["active"] or (last is not None and now - last < longest):
                continue
            drop = _Drop(name, hi, policies, now, longest, keep_cap)
            return drop if self._groups_chunk(drop, report) else None
        return None

    def _groups_chunk(self, drop: _Drop, report: PruneReport) -> bool:
        """The next chunk of the decision's read of the partition, merged into its
        groups; False (the partition stays, the next pass decides again) as soon as a
        group cannot go whatever its newer firings."""
        params = {"after_id": drop.after_id, "scan": self.decide_scan}
        rows = self._read_part("partition_groups_chunk", drop.name, params)
        scanned = int(rows[0]["scanned"])
        report.scanned += scanned
        for r in rows:
            if r["state"] is None:
                continue
            if not _group_prunable(r, drop.policies, drop.now, newer=drop.keep_cap):
                self._dropping = None
                return False
            drop.add(r)
        if rows[0]["last_id"] is not None:
            drop.after_id = int(rows[0]["last_id"])
        if scanned < self.decide_scan:
            drop.next_phase("newer")
        return True

    def _newer_chunk(self, drop: _Drop) -> None:
        """The newer firings of the next ``newer_batch`` recurring groups, counted; after
        the last, the decision: the drop goes on, or the partition stays."""
        recurring = drop.recurring()
        batch = recurring[drop.newer_at : drop.newer_at + self.newer_batch]
        if batch:
            params = {
                "job_ids": [int(g["job_id"]) for g in batch],
                "states": [str(g["state"]) for g in batch],
                "hi": self.db.instant(drop.hi),
                "keep_cap": drop.keep_cap,
            }
            rows = self.db.read(lambda tx: tx.all("partition_newer", params))
            newer = {(int(r["job_id"]), str(r["state"])): int(r["newer"]) for r in rows}
            for g in batch:
                g["newer"] = newer[(int(g["job_id"]), str(g["state"]))]
        drop.newer_at += len(batch)
        if drop.newer_at < len(recurring):
            return
        if not all(_group_prunable(g, drop.policies, drop.now) for g in recurring):
            self._dropping = None
        else:
            drop.next_phase("one_shots" if drop.one_shots() else "dependents")

    def _one_shots_chunk(self, drop: _Drop, report: PruneReport) -> None:
        params = {
            "after_id": drop.after_id,
            "scan": self.one_shot_scan,
            "jobs": self.one_shot_jobs,
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
        first = rows[0]
        scanned, seen = int(first["scanned"]), int(first["one_shots"])
        report.scanned += scanned
        for r in rows:
            if r["state"] is not None:
                report.firings[r["state"]] = report.firings.get(r["state"], 0) + int(r["n"])
                report.jobs += int(r["n"])
        if first["last_id"] is not None:
            drop.after_id = int(first["last_id"])
        drop.one_shots_seen += seen
        walked = scanned < self.one_shot_scan and seen < self.one_shot_jobs
        if walked or drop.one_shots_seen >= drop.one_shots():
            drop.next_phase("dependents")

    def _dependents_chunk(self, drop: _Drop, report: PruneReport) -> None:
        """The next chunk of the partition's firings: their attempts and keys deleted
        (partitions.sql partition_dependents_chunk), and any one-shot job's firing
        counted (the drop is then abandoned)."""
        params = {
            "after_id": drop.after_id,
            "scan": self.one_shot_scan,
            "decided_at": self.db.instant(drop.now),
        }
        row = self.db.write(lambda tx: _one(tx, "partition_dependents_chunk", drop.name, params))
        scanned = int(row["scanned"])
        report.scanned += scanned
        drop.one_shots_left += int(row["one_shots"])
        if row["last_id"] is not None:
            drop.after_id = int(row["last_id"])
        if scanned < self.one_shot_scan:
            drop.phase = "drop"  # after_id kept: where the drop's own deletion starts

    def _read_part(self, name: str, part: str, params: dict[str, Any] | None = None) -> list[Row]:
        return self.db.read(lambda tx: _all(tx, name, part, params))

    def _detach(self, drop: _Drop) -> None:
        """A partition whose one-shot jobs, attempts and keys are gone (the chunks
        before) out of firings: the recurring jobs' ``pruned`` events summed, what was
        written after the chunks deleted, DETACH, the facts checked again; abandoned
        (rolled back) when a change is found. Its table is dropped in the next step
        (``_release``)."""
        name = drop.name

        def body(tx: PgTx) -> None:
            per_job: dict[int, list[dict[str, Any]]] = {}
            for g in drop.recurring():
                per_job.setdefault(int(g["job_id"]), []).append(g)
            merges = {job: partial(add_pruned, add=_summary(rows)) for job, rows in per_job.items()}
            self._merge_pruned_events(tx, merges)
            after = {"after_id": drop.after_id}
            tx.execute(_sql(self.db, "partition_drop_dependents", name), after)
            tx.run("partition_lock_timeout")
            tx.execute(_sql(self.db, "partition_detach", name))
            facts = _one(tx, "partition_facts", name)
            last = facts["last_finished"]
            if facts["active"] or (last is not None and drop.now - last < drop.longest):
                raise _Abandoned(name)

        self.db.write(body)

    def _release(self, name: str) -> None:
        """A detached partition's table dropped, a transaction of its own."""
        self.db.write(lambda tx: tx.execute(_sql(self.db, "partition_drop", name)))


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


def _group_prunable(
    g: Row, policies: dict[str, Retention], now: datetime, newer: int | None = None
) -> bool:
    """The group's newest firing may go (its older ones then may too: they finished no
    later and have more newer firings of the same outcome); ``newer``: its count of
    newer firings, when not yet counted (an upper bound: whether it may go at all)."""
    candidate = Candidate(
        state=FiringState(g["state"]),
        finished_at=codec.opt_instant(g["last_finished"]),
        one_shot=g["kind"] in ONE_SHOT_KINDS,
        newer_same_outcome=int(g["newer"]) if newer is None else newer,
    )
    return prunable(candidate, _policy(g, policies), now)


def _summary(rows: list[dict[str, Any]]) -> PrunedSummary:
    return PrunedSummary(
        first_at=min(codec.req_instant(r["first_at"]) for r in rows),
        last_at=max(codec.req_instant(r["last_at"]) for r in rows),
        counts={str(r["state"]): int(r["n"]) for r in rows},
    )
