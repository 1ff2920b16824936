"""The ledger checker: what was expected vs what happened (a Jepsen-style history check).

Sources, all independent of the process that could lie about them:

- the **firing rows** of the scenario's database (``firings``: one row per enqueue);
- the **effect table** ``fault_effects`` written by the handler itself (runs per
  idempotency key, with the pid and attempt of every run);
- the **append-only execution log** written by the handler (``done`` lines);
- the **lease history**: samples of the lease row taken every few ms by the
  harness, and the ``lease_acquired`` events of every scheduler's log.

Findings:

- **lost**: an expected firing (a schedule instant inside the required window,
  or a one-shot job's instant) with no firing row, or whose row did not end
  ``succeeded``, or that succeeded without any execution;
- **phantom**: a firing row off its job's schedule (or past its cursor), or an
  execution (effect / log line) of a key no firing row carries;
- **duplicate enqueues**: more than one firing row per (job, instant) — must be zero;
- **duplicate executions**: more than one run of one key. Allowed only when one of
  the runs was on a worker the test killed or froze; reported with that reason.
  Any other duplicate is a failure;
- **epoch violations**: a firing enqueued under an epoch that was not the lease's
  epoch at that database instant; epochs not strictly increasing; two epochs
  whose lease intervals overlap by database time; a ``lease_acquired`` event whose
  lease write never showed up in the lease row.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from cronwheel.domain.firing import idempotency_key
from tests.jsonlog import read_json_lines

# -- inputs --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Expectation:
    """What one job owes: every instant of ``schedule`` from ``first`` up to
    ``required_until`` must run (``schedule`` None: a one-shot job owing ``first`` only)."""

    job_id: int
    name: str
    first: datetime
    schedule: Any = None  # an object with next_after(t), or None for one-shot
    required_until: datetime | None = None

    def required(self) -> list[datetime]:
        if self.schedule is None:
            return [self.first]
        assert self.required_until is not None
        out: list[datetime] = []
        t: datetime | None = self.first
        while t is not None and t <= self.required_until:
            out.append(t)
            t = self.schedule.next_after(t)
        return out

    def on_schedule(self, t: datetime, cursor: datetime | None) -> bool:
        """May a firing at ``t`` exist at all (on the grid, not before first, before cursor)?"""
        if self.schedule is None:
            return t == self.first
        if t < self.first or (cursor is not None and t >= cursor):
            return False
        prev = self.schedule.next_after(t - timedelta(microseconds=1))
        return prev == t


@dataclass(frozen=True, slots=True)
class LeaseSample:
    """The lease row as the sampler saw it, at database time ``db_now``."""

    db_now: datetime
    holder: str
    epoch: int
    acquired_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class AcquiredEvent:
    """A ``lease_acquired`` log event of one scheduler process."""

    ts: datetime
    holder: str
    epoch: int
    process: str


# -- outputs ---------------------------------------------------------------------------


@dataclass(slots=True)
class Report:
    expected: int = 0
    firings: int = 0
    executions: int = 0
    lost: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    duplicate_enqueues: list[str] = field(default_factory=list)
    duplicate_executions: list[str] = field(default_factory=list)  # allowed, with reason
    bad_duplicates: list[str] = field(default_factory=list)
    epoch_violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (
            self.lost
            or self.phantom
            or self.duplicate_enqueues
            or self.bad_duplicates
            or self.epoch_violations
        )

    def summary(self) -> str:
        parts = [
            f"expected={self.expected} firings={self.firings} executions={self.executions}",
            f"lost={len(self.lost)} phantom={len(self.phantom)}",
            f"duplicate_enqueues={len(self.duplicate_enqueues)}",
            f"duplicate_executions={len(self.duplicate_executions)} (allowed)"
            f" unexplained={len(self.bad_duplicates)}",
            f"epoch_violations={len(self.epoch_violations)}",
        ]
        return ", ".join(parts)

    def details(self, limit: int = 15) -> str:
        lines = [self.summary()]
        for title, items in (
            ("LOST", self.lost),
            ("PHANTOM", self.phantom),
            ("DUPLICATE ENQUEUE", self.duplicate_enqueues),
            ("UNEXPLAINED DUPLICATE EXECUTION", self.bad_duplicates),
            ("EPOCH", self.epoch_violations),
            ("allowed duplicate execution", self.duplicate_executions),
            ("note", self.notes),
        ):
            lines += [f"  {title}: {item}" for item in items[:limit]]
            if len(items) > limit:
                lines.append(f"  {title}: ... {len(items) - limit} more")
        return "\n".join(lines)

    def assert_clean(self) -> None:
        assert self.clean, "ledger not clean:\n" + self.details()


# -- reading ---------------------------------------------------------------------------


def read_log(path: Path) -> list[dict[str, Any]]:
    """Every whole line of the execution log (a torn one fails: tests/jsonlog.py)."""
    return read_json_lines(path, what="execution-log")


def fetch_firings(conn: Any) -> list[dict[str, Any]]:
    return conn.execute(
        "SELECT id, job_id, job_name, scheduled_for, state, attempt, enqueued_epoch,"
        " enqueued_at, worker_id, lease_until FROM firings ORDER BY id"
    ).fetchall()


def fetch_effects(conn: Any) -> dict[str, dict[str, Any]]:
    rows = conn.execute("SELECT key, runs, pids, attempts FROM fault_effects").fetchall()
    return {r["key"]: r for r in rows}


def fetch_cursors(conn: Any) -> dict[int, datetime | None]:
    return {r["id"]: r["next_fire_at"] for r in conn.execute("SELECT id, next_fire_at FROM jobs")}


# -- checking --------------------------------------------------------------------------


def check(
    conn: Any,
    log_path: Path,
    expectations: list[Expectation],
    *,
    disrupted_pids: dict[int, str] | None = None,
    lease_samples: list[LeaseSample] | None = None,
    acquired: list[AcquiredEvent] | None = None,
    effects_conn: Any = None,
) -> Report:
    """Compare ``expectations`` with the database and the execution log of a scenario.

    ``conn``: a psycopg connection (dict rows) on the scenario's database.
    ``disrupted_pids``: worker pids the test killed or froze, with why; a duplicate
    execution with a run on one of them is allowed (and reported).
    ``effects_conn``: where the effect table is, when not on ``conn``'s database (the
    HA suite keeps it off the cluster whose failovers it tests).
    """
    disrupted = disrupted_pids or {}
    report = Report()
    firings = fetch_firings(conn)
    effects = fetch_effects(effects_conn if effects_conn is not None else conn)
    cursors = fetch_cursors(conn)
    log = read_log(log_path)
    done = Counter(e["key"] for e in log if e["phase"] == "done")
    report.firings = len(firings)
    report.executions = sum(int(e["runs"]) for e in effects.values())

    # duplicate enqueues: the unique key makes this impossible by construction; the
    # checker asks anyway (the constraint could be dropped by a migration)
    per_instant = Counter((f["job_id"], f["scheduled_for"]) for f in firings)
    report.duplicate_enqueues = [
        f"job {j} at {t.isoformat()}: {n} rows" for (j, t), n in per_instant.items() if n > 1
    ]

    by_job: dict[int, dict[datetime, dict[str, Any]]] = defaultdict(dict)
    for f in firings:
        by_job[f["job_id"]][f["scheduled_for"]] = f
    known = {e.job_id: e for e in expectations}
    keys_of_rows = {idempotency_key(f["job_id"], f["scheduled_for"]): f for f in firings}

    required = {e.job_id: set(e.required()) for e in expectations}
    # lost
    for exp in expectations:
        rows = by_job.get(exp.job_id, {})
        for t in sorted(required[exp.job_id]):
            report.expected += 1
            key = idempotency_key(exp.job_id, t)
            row = rows.get(t)
            if row is None:
                report.lost.append(f"{exp.name} {key}: never enqueued")
            elif row["state"] != "succeeded":
                report.lost.append(
                    f"{exp.name} {key}: ended {row['state']} (attempt {row['attempt']})"
                )
            elif key not in effects:
                report.lost.append(f"{exp.name} {key}: succeeded without any execution")
    # every row that exists must also have finished well (not only the required ones)
    for f in firings:
        exp = known.get(f["job_id"])
        if exp is None:
            report.phantom.append(f"firing {f['id']} of unknown job {f['job_name']}")
            continue
        if not exp.on_schedule(f["scheduled_for"], cursors.get(f["job_id"])):
            report.phantom.append(
                f"firing {f['id']} {exp.name} at {f['scheduled_for'].isoformat()}: off schedule"
            )
        elif f["state"] != "succeeded" and f["scheduled_for"] not in required[exp.job_id]:
            report.lost.append(
                f"{exp.name} firing {f['id']}: ended {f['state']} (attempt {f['attempt']})"
            )

    # phantom executions and duplicates
    for key, eff in effects.items():
        if key not in keys_of_rows:
            report.phantom.append(f"execution of {key}: no firing carries this key")
            continue
        runs = int(eff["runs"])
        if done[key] > runs:
            report.phantom.append(f"{key}: {done[key]} done lines but {runs} effect runs")
        if runs > 1:
            reasons = sorted({disrupted[p] for p in eff["pids"] if p in disrupted})
            text = f"{key}: {runs} runs, pids {list(eff['pids'])} attempts {list(eff['attempts'])}"
            if reasons:
                report.duplicate_executions.append(f"{text} — " + "; ".join(reasons))
            else:
                report.bad_duplicates.append(text)
        if done[key] < runs:
            report.notes.append(f"{key}: {runs} effect runs but {done[key]} done lines")
    for key in done:
        if key not in effects:
            report.phantom.append(f"{key}: done line without an effect row")

    if lease_samples is not None or acquired is not None:
        report.epoch_violations = check_epochs(firings, lease_samples or [], acquired or [])
    return report


def lease_terms(samples: list[LeaseSample]) -> dict[int, dict[str, Any]]:
    """Per sampled epoch: holder(s), acquired_at, the latest expires_at seen."""
    terms: dict[int, dict[str, Any]] = {}
    for s in samples:
        t = terms.setdefault(
            s.epoch,
            {"holders": set(), "acquired_at": set(), "expires_at": s.expires_at},
        )
        t["holders"].add(s.holder)
        t["acquired_at"].add(s.acquired_at)
        t["expires_at"] = max(t["expires_at"], s.expires_at)
    return terms


def check_epochs(
    firings: list[dict[str, Any]],
    samples: list[LeaseSample],
    acquired: list[AcquiredEvent],
) -> list[str]:
    out: list[str] = []
    # 1. epochs strictly increase: in sampling order, and across every acquisition event
    last = 0
    for s in samples:
        if s.epoch < last:
            out.append(f"lease epoch went back from {last} to {s.epoch} at {s.db_now}")
        last = max(last, s.epoch)
    events = sorted(acquired, key=lambda e: e.ts)
    seen: dict[int, AcquiredEvent] = {}
    prev: AcquiredEvent | None = None
    for e in events:
        if e.epoch in seen and seen[e.epoch].holder != e.holder:
            out.append(
                f"epoch {e.epoch} acquired by two holders: {seen[e.epoch].holder}, {e.holder}"
            )
        seen.setdefault(e.epoch, e)
        if prev is not None and e.epoch < prev.epoch:
            out.append(
                f"lease_acquired epochs not increasing: {prev.process} got {prev.epoch} at"
                f" {prev.ts.isoformat()}, then {e.process} got {e.epoch} at {e.ts.isoformat()}"
            )
        prev = e
    terms = lease_terms(samples)
    # 2. one holder per epoch, one acquisition instant per epoch
    for epoch, t in terms.items():
        if len(t["holders"]) > 1:
            out.append(f"epoch {epoch} held by several holders: {sorted(t['holders'])}")
        if len(t["acquired_at"]) > 1:
            out.append(f"epoch {epoch} has several acquired_at: {sorted(t['acquired_at'])}")
    # 3. never two leaders at once by database time: term e+1 starts after e expired
    #    (unless one holder holds both: a leader renewing into a new term on a new
    #    PostgreSQL timeline after a failover, see store/postgres core.sql acquire_lease)
    ordered = sorted(terms)
    for a, b in itertools.pairwise(ordered):
        start_b = min(terms[b]["acquired_at"])
        if terms[a]["holders"] == terms[b]["holders"] and len(terms[a]["holders"]) == 1:
            continue
        if start_b < terms[a]["expires_at"]:
            out.append(
                f"epoch {b} acquired at {start_b.isoformat()} while epoch {a} was valid until"
                f" {terms[a]['expires_at'].isoformat()} (two leaders at once)"
            )
    # 4. leadership only with a successful lease write: every acquisition a process
    #    logged shows in the lease row with the same holder (when that epoch was sampled)
    for e in events:
        t = terms.get(e.epoch)
        if t is not None and e.holder not in t["holders"]:
            out.append(
                f"{e.process} logged lease_acquired epoch {e.epoch} but the lease row had"
                f" {sorted(t['holders'])}"
            )
    # 5. every firing carries the epoch that held the lease at its enqueue instant
    known = set(terms) | set(seen)
    starts = {ep: min(t["acquired_at"]) for ep, t in terms.items()}
    for f in firings:
        ep = f["enqueued_epoch"]
        if ep is None:
            continue
        if ep not in known:
            out.append(f"firing {f['id']} enqueued under epoch {ep}, which nobody acquired")
            continue
        at = f["enqueued_at"]
        if ep in starts and at < starts[ep]:
            out.append(
                f"firing {f['id']} enqueued at {at.isoformat()} under epoch {ep},"
                f" before that epoch began ({starts[ep].isoformat()})"
            )
        later = [starts[x] for x in starts if x > ep]
        if later and at >= min(later):
            out.append(
                f"firing {f['id']} enqueued at {at.isoformat()} under epoch {ep},"
                f" after a later epoch began ({min(later).isoformat()})"
            )
    return out
