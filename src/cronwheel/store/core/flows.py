"""CoreStore: every store flow whose logic does not depend on the engine, written once.

Jobs (create, upsert, read, list, pause, delete), the leader's lease, firings (read,
list, cancel, redrive), idempotent enqueue, tokens, nodes, status and migrations.
Each is a unit of work over named queries (see dialect.py). An engine subclasses it
with its :class:`~cronwheel.store.core.dialect.Dialect` and the hot paths whose SQL
really differs: enqueue, claims, completions, heartbeats, bulk inserts.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from cronwheel.domain.attempts import Attempt, attempts_of
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import (
    Firing,
    FiringId,
    Job,
    JobEvent,
    JobId,
    JobSpec,
    RecentRuns,
)
from cronwheel.domain.quotas import Quota
from cronwheel.errors import (
    ConflictError,
    FiringNotFoundError,
    InvalidTransitionError,
    JobNotFoundError,
)
from cronwheel.store import codec
from cronwheel.store.codec import Row
from cronwheel.store.core import filters
from cronwheel.store.core.bulk import BulkFlows, job_exists
from cronwheel.store.core.calendars import CalendarFlows
from cronwheel.store.core.dialect import Dialect, Tx
from cronwheel.store.core.retention import RetentionFlows
from cronwheel.store.core.skips import SkipFlows
from cronwheel.store.core.tasks import TaskFlows
from cronwheel.store.core.tzdata import TzFlows
from cronwheel.store.core.work import WorkFlows
from cronwheel.store.protocol import (
    AddedFirings,
    AsyncCalls,
    CancelResult,
)

D = TypeVar("D", bound=Dialect)

# before any cursor: the first page's lower bound of due_jobs
_BEGINNING = datetime(1, 1, 2, tzinfo=UTC)


class CoreStore(
    WorkFlows[D],
    BulkFlows[D],
    SkipFlows[D],
    TaskFlows[D],
    CalendarFlows[D],
    RetentionFlows[D],
    TzFlows[D],
):
    """The engine-independent flows of the Store and ApiStore protocols (the admin
    half, and the plumbing, in core/admin.py; skipping occurrences in core/skips.py;
    served tasks in core/tasks.py; quotas in core/quotas.py; bulk writes in
    core/bulk.py; the tz database in core/tzdata.py; the worker's side in core/work.py)."""

    # -- engine hooks -------------------------------------------------------------------
    @abstractmethod
    def _enqueue_now_in(self, tx: Tx, spec: JobSpec) -> Row:
        """Inside ``tx``: insert the one-shot job of ``spec`` (fired now) and its firing,
        due now, with its fair virtual deadline; charge it to the namespace's
        firings_per_minute (after the inserts, which lock the namespace's fair clock, as
        the leader's enqueue does: one lock order, no deadlock between the two; 429 over
        it); wake the workers. The firing's row."""

    @abstractmethod
    def _add_firings_in(
        self, tx: Tx, namespace: str, name: str, instants: list[datetime], extra: dict[str, Any]
    ) -> Sequence[Row]:
        """Inside ``tx``: the firings of job ``name`` at ``instants`` (due at the later of
        the instant and now, with fair virtual deadlines; ``extra`` holds their ``note``
        and ``overlap`` override); an instant the job has is passed over. The inserted
        rows; JobNotFoundError when there is no such job. Wakes the workers."""

    # -- jobs ---------------------------------------------------------------------------
    def create_job(self, spec: JobSpec, *, first_fire_at: datetime | None) -> Job:
        params = codec.job_params(spec) | {"next_fire_at": self._opt(first_fire_at)}

        def body(tx: Tx) -> Row:
            quotas: dict[str, Quota] = {}  # the namespace's quota, read once
            self._check_schedule(tx, spec, first_fire_at, quotas)
            row = tx.one("insert_job", params)
            if row is None:
                raise job_exists(spec, naming_namespace=True)
            self._charge_jobs(tx, [spec], quotas)
            tx.run("bump_jobs_version")
            return row

        return codec.job_from_row(self.db.write(body))

    def upsert_job(self, spec: JobSpec, *, first_fire_at: datetime | None) -> tuple[Job, bool]:
        """Create, or update when the spec changed; the cursor moves to ``first_fire_at``
        only when the schedule changed (decided in SQL, against the locked row)."""
        params = codec.job_params(spec) | {"next_fire_at": self._opt(first_fire_at)}
        key = {"namespace": spec.namespace, "name": spec.name}

        def body(tx: Tx) -> tuple[Row, bool]:
            row = tx.one("job_for_update", key)
            if row is None:
                quotas: dict[str, Quota] = {}
                self._check_schedule(tx, spec, first_fire_at, quotas)
                row = tx.one("insert_job", params)
                if row is not None:
                    self._charge_jobs(tx, [spec], quotas)
                    tx.run("bump_jobs_version")
                    return row, True
                row = tx.one("job_for_update", key)  # lost a race with a create
                assert row is not None
            if row["spec_hash"] == params["spec_hash"]:
                return row, False
            if codec.job_from_row(row).spec.schedule != spec.schedule:
                self._check_schedule(tx, spec, first_fire_at)
            updated = tx.one("update_job_spec", params | {"id": row["id"]})
            assert updated is not None
            tx.run("bump_jobs_version")
            return updated, True

        row, changed = self.db.write(body)
        return codec.job_from_row(row), changed

    def get_job(self, namespace: str, name: str) -> Job:
        rows = self.db.read(lambda tx: tx.all("get_job", {"namespace": namespace, "name": name}))
        return job_from_rows(rows, name)

    def get_job_by_id(self, job_id: JobId) -> Job:
        row = self._one("get_job_by_id", {"id": job_id})
        if row is None:
            raise JobNotFoundError(f"no job with id {job_id}", field="job_id")
        return codec.job_from_row(row)

    def _jobs(self, where: filters.Where, limit: int) -> list[Job]:
        clause, params = where
        rows = self.db.read_replica(
            lambda tx: tx.filtered("list_jobs", clause, params | {"limit": limit})
        )
        return [codec.job_from_row(r) for r in rows]

    def list_jobs(
        self,
        *,
        namespace: str | None = None,
        name_prefix: str | None = None,
        task: str | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[Job]:
        where = filters.jobs(
            self.db, namespace=namespace, task=task, name_prefix=name_prefix, after_id=after_id
        )
        return self._jobs(where, limit)

    def search_jobs(
        self,
        namespace: str,
        *,
        state: str | None = None,
        task: str | None = None,
        name_prefix: str | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[Job]:
        where = filters.jobs(
            self.db,
            namespace=namespace,
            task=task,
            name_prefix=name_prefix,
            after_id=after_id,
            state=state,
        )
        return self._jobs(where, limit)

    def set_paused(self, namespace: str, name: str, paused: bool) -> Job:
        """Pause or resume; every pause and resume is recorded as a job event (explain)."""

        def body(tx: Tx) -> Row:
            row = tx.one("set_paused", {"paused": paused, "namespace": namespace, "name": name})
            if row is None:
                raise JobNotFoundError(f"no job named {name!r}", field="name")
            kind = "paused" if paused else "resumed"
            tx.run("insert_pause_event", {"job_id": row["id"], "kind": kind})
            tx.run("bump_jobs_version")
            return row

        return codec.job_from_row(self.db.write(body))

    def delete_job(self, namespace: str, name: str) -> None:
        def body(tx: Tx) -> None:
            row = tx.one("delete_job", {"namespace": namespace, "name": name})
            if row is None:
                raise JobNotFoundError(f"no job named {name!r}", field="name")
            if row["kind"] != "now":
                self._uncharge_job(tx, namespace)
            tx.run("bump_jobs_version")

        self.db.write(body)

    def due_jobs(
        self, horizon: datetime, *, limit: int, after: tuple[datetime, int] | None = None
    ) -> list[Job]:
        after_at, after_id = (_BEGINNING, 0) if after is None else after
        params = {
            "horizon": self.db.instant(horizon),
            "limit": limit,
            "after_at": self.db.instant(after_at),
            "after_id": after_id,
        }
        return [codec.job_from_row(r) for r in self._all("due_jobs", params)]

    def jobs_version(self) -> int:
        row = self._one("jobs_version")
        return int(row["value"]) if row else 0

    def job_events(self, job_id: JobId, *, limit: int = 100) -> list[JobEvent]:
        rows = self._all("job_events", {"job_id": job_id, "limit": limit})
        return [codec.event_from_row(r) for r in rows]

    def job_backlog(self, namespace: str, *, limit: int = 50) -> dict[str, int]:
        rows = self._all("job_backlog", {"namespace": namespace, "limit": limit})
        return {r["job_name"]: int(r["n"]) for r in rows}

    # -- immediate work -----------------------------------------------------------------
    def enqueue_now(self, spec: JobSpec) -> Firing:
        """Within the namespace's firings_per_minute (429 QuotaExceededError)."""

        return codec.firing_from_row(self.db.write(lambda tx: self._enqueue_now_in(tx, spec)))

    def enqueue_now_once(
        self, spec: JobSpec, *, key_hash: str, request_hash: str
    ) -> tuple[Firing, bool]:
        """enqueue_now at most once per (namespace, key): requests carrying one key are
        serialized (the idempotency lock), a repeat returns the first firing, the same
        key with another request body is a conflict."""
        key = {"namespace": spec.namespace, "key_hash": key_hash}

        def body(tx: Tx) -> tuple[Row, bool]:
            tx.run("idempotency_lock", key)
            seen = tx.one("find_idempotency_key", key)
            if seen is not None:
                if seen["request_hash"] != request_hash:
                    raise ConflictError(
                        "this Idempotency-Key was used with a different request body",
                        field="Idempotency-Key",
                    )
                return seen, False
            row = self._enqueue_now_in(tx, spec)
            ref = key | {"request_hash": request_hash, "firing_id": row["id"]}
            tx.run("insert_idempotency_key", ref)
            return row, True

        row, created = self.db.write(body)
        return codec.firing_from_row(row), created

    def add_firings(
        self,
        namespace: str,
        name: str,
        scheduled_for: Sequence[datetime],
        *,
        note: str,
        overlap: str | None = None,
    ) -> AddedFirings:
        instants = list(scheduled_for)
        extra = {"note": note, "overlap": overlap}

        def body(tx: Tx) -> Sequence[Row]:
            rows = self._add_firings_in(tx, namespace, name, instants, extra)
            self._charge_backfill(tx, namespace, len(instants), len(rows))
            return rows

        rows = self.db.write(body)
        inserted = [codec.firing_from_row(r) for r in sorted(rows, key=lambda r: r["id"])]
        return AddedFirings(inserted=inserted, duplicates=len(instants) - len(inserted))

    # -- firings ------------------------------------------------------------------------
    def next_due_at(self) -> datetime | None:
        """When the earliest QUEUED firing not yet due becomes due (None: there is none)."""
        row = self._one("next_due_at")
        return None if row is None else codec.opt_instant(row["d"])

    def cancel_requested(self, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        if not claims:
            return set()
        rows = self._all("cancel_requested", {"ids": self.db.id_list([c[0] for c in claims])})
        return {FiringId(r["id"]) for r in rows}

    def get_firing(self, firing_id: FiringId) -> Firing:
        row = self._one("get_firing", {"id": firing_id})
        if row is None:
            raise FiringNotFoundError(f"no firing with id {firing_id}", field="firing_id")
        return codec.firing_from_row(row)

    def _firings(self, where: filters.Where, limit: int) -> list[Firing]:
        clause, params = where
        rows = self.db.read_replica(
            lambda tx: tx.filtered("list_firings", clause, params | {"limit": limit})
        )
        return [codec.firing_from_row(r) for r in rows]

    def list_firings(
        self,
        *,
        job_id: JobId | None = None,
        namespace: str | None = None,
        states: Sequence[FiringState] | None = None,
        before_id: int | None = None,
        limit: int = 100,
        job_name: str | None = None,
        scheduled_from: datetime | None = None,
        scheduled_to: datetime | None = None,
        after_id: int | None = None,
    ) -> list[Firing]:
        page: dict[str, Any] = {"after_id": after_id, "before_id": before_id, "limit": limit}
        if (job_id, job_name, scheduled_from, scheduled_to) == (None,) * 4:
            # one plan each (core.sql): every firing between two ids, or the live ones
            # from the claim's floor on
            if not states and namespace is None:
                return self._page("list_firings_page", page)
            if states and {s.value for s in states} <= filters.ACTIVE:
                listed = self.db.text_list([s.value for s in states])
                return self._page(
                    "list_active_page", page | {"states": listed, "namespace": namespace}
                )
        where = filters.firings(
            self.db,
            job_id=job_id,
            namespace=namespace,
            job_name=job_name,
            states=states,
            scheduled_from=scheduled_from,
            scheduled_to=scheduled_to,
            before_id=before_id,
            after_id=after_id,
        )
        return self._firings(where, limit)

    def _page(self, name: str, params: dict[str, Any]) -> list[Firing]:
        rows = self.db.read_replica(lambda tx: tx.all(name, params))
        return [codec.firing_from_row(r) for r in rows]

    def list_attempts(self, firing_id: FiringId) -> list[Attempt]:
        return self.firing_with_attempts(firing_id)[1]

    def firing_with_attempts(self, firing_id: FiringId) -> tuple[Firing, list[Attempt]]:
        rows = self.db.read(lambda tx: tx.all("firing_with_attempts", {"id": firing_id}))
        return firing_and_attempts(rows, firing_id)

    def async_calls(self) -> AsyncCalls | None:
        return None  # the engine's own, where it has them (PostgreSQL)

    def list_job_firings(
        self,
        job_id: JobId,
        *,
        states: Sequence[FiringState] | None = None,
        scheduled_from: datetime | None = None,
        scheduled_to: datetime | None = None,
        before_id: int | None = None,
        limit: int = 100,
    ) -> list[Firing]:
        where = filters.firings(
            self.db,
            job_id=job_id,
            states=states,
            scheduled_from=scheduled_from,
            scheduled_to=scheduled_to,
            before_id=before_id,
        )
        return self._firings(where, limit)

    def recent_runs(
        self, job_ids: Sequence[JobId], *, sample: int = 100
    ) -> dict[JobId, RecentRuns]:
        """One statement for every job (``recent_runs`` of the engine's core.sql): per job
        its first-attempt lateness samples in microseconds (an array on PostgreSQL, JSON
        text on SQLite) and its last outcome, the newest non-open firing of its newest
        ``sample``; each an index walk of at most ``sample`` entries of ``(job_id, id)``."""
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return {}
        params = {"ids": self.db.id_list(ids), "sample": max(sample, 0)}
        rows = self.db.read_replica(lambda tx: tx.all("recent_runs", params))
        out = {JobId(i): RecentRuns(job_id=JobId(i)) for i in ids}
        for r in rows:
            late = r["late_us"]
            if isinstance(late, str):
                late = json.loads(late)
            job_id = JobId(int(r["job_id"]))
            out[job_id] = RecentRuns(
                job_id=job_id,
                lateness_s=tuple(us / 1_000_000 for us in late or ()),
                last_id=None if r["last_id"] is None else FiringId(int(r["last_id"])),
                last_state=None if r["last_state"] is None else FiringState(r["last_state"]),
            )
        return out

    def cancel_firing(self, firing_id: FiringId) -> CancelResult:
        """A QUEUED firing is cancelled at once; a RUNNING one is asked to stop."""
        key = {"id": firing_id}

        def body(tx: Tx) -> tuple[str, Row | None]:
            row = tx.one("cancel_queued", key)
            if row is not None:
                return "cancelled", row
            row = tx.one("cancel_running", key)
            if row is not None:
                return "cancel_requested", row
            return "already_final", tx.one("get_firing", key)

        outcome, row = self.db.write(body)
        if row is None:
            raise FiringNotFoundError(f"no firing with id {firing_id}", field="firing_id")
        return CancelResult(outcome=outcome, firing=codec.firing_from_row(row))

    def redrive_firing(self, firing_id: FiringId) -> Firing:
        """A DEAD firing back to QUEUED, due now, with its job's attempts again."""

        def body(tx: Tx) -> Row:
            row = tx.one("redrive", {"id": firing_id})
            if row is None:
                current = tx.one("get_firing", {"id": firing_id})
                if current is None:
                    raise FiringNotFoundError(f"no firing with id {firing_id}", field="firing_id")
                raise InvalidTransitionError(
                    f"only a dead firing can be retried; this one is {current['state']}",
                    field="state",
                )
            tx.wake_workers()
            return row

        return codec.firing_from_row(self.db.write(body))


def firing_and_attempts(rows: Sequence[Row], firing_id: FiringId) -> tuple[Firing, list[Attempt]]:
    """``firing_with_attempts``' answer from its one statement's rows: the firing's row
    once per recorded attempt (a_* columns); FiringNotFoundError for none."""
    if not rows:
        raise FiringNotFoundError(f"no firing with id {firing_id}", field="firing_id")
    firing = codec.firing_from_row(rows[0])
    recorded = [codec.attempt_from_row(r, "a_") for r in rows if r["a_attempt"] is not None]
    return firing, attempts_of(firing, recorded)


def job_from_rows(rows: Sequence[Row], name: str) -> Job:
    """``get_job``'s answer from its statement's rows: JobNotFoundError for none."""
    if not rows:
        raise JobNotFoundError(f"no job named {name!r}", field="name")
    return codec.job_from_row(rows[0])
