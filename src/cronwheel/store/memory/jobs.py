"""The memory store's jobs: registration, upserts, pause, delete, the due-jobs scan."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from cronwheel.domain.batch import settle
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import Firing, Job, JobEvent, JobId, JobSpec
from cronwheel.domain.skips import SkipResult
from cronwheel.errors import ConflictError, CronwheelError, JobNotFoundError, QuotaExceededError
from cronwheel.store import codec
from cronwheel.store.bulk_port import KeyRef
from cronwheel.store.codec import opt_us, to_us
from cronwheel.store.core.bulk import first_refused, job_exists, key_reused
from cronwheel.store.memory import work
from cronwheel.store.memory.quotas import QuotaMethods
from cronwheel.store.memory.rows import IdempotencyRow

SPEC_COLUMNS = (
    "task",
    "schedule",
    "payload",
    "policies",
    "spec_hash",
    "priority",
    "max_attempts",
    "visibility_us",
    "max_concurrency",
    "overlap",
    "max_buffer",
    "cancel_grace_us",
    "start_deadline_us",
    "bounds",
)


class JobMethods(QuotaMethods):
    def create_job(self, spec: JobSpec, *, first_fire_at: datetime | None) -> Job:
        with self._tx() as data:
            charge: dict[str, int] = {}
            if (spec.namespace, spec.name) not in data.job_names:  # else: job_exists
                self._check_schedules(data, [(spec, first_fire_at)])
                charge = self._jobs_room(data, [spec])
            row = self._new_job(data, spec, first_fire_at, self._now_us())
            self._charge_jobs_in(data, charge)
            data.jobs_version += 1
            return codec.job_from_row(row)

    def create_jobs(self, items: Sequence[tuple[JobSpec, datetime | None]]) -> int:
        with self._tx() as data:
            names = [(spec.namespace, spec.name) for spec, _ in items]
            taken = [n for n in names if n in data.job_names]
            if taken or len(set(names)) != len(names):
                clash = taken[0] if taken else next(n for n in names if names.count(n) > 1)
                raise ConflictError(
                    f"a job in the batch already exists ({clash[0]}/{clash[1]})",
                    field="name",
                    code="job_exists",
                )
            self._check_schedules(data, items)
            charge = self._jobs_room(data, [spec for spec, _ in items])
            now = self._now_us()
            for spec, first in items:
                self._new_job(data, spec, first, now)
            self._charge_jobs_in(data, charge)
            data.jobs_version += 1
        return len(items)

    def create_jobs_batch(
        self, items: Sequence[tuple[JobSpec, datetime | None]], *, all_or_nothing: bool = False
    ) -> list[Job | CronwheelError]:
        """As the SQL stores: each item's schedule checked, then its name; the created
        ones charged to the jobs quota (over it: the batch refused, nothing written)."""
        with self._tx() as data:
            out: list[Job | CronwheelError | None] = []
            taken: set[tuple[str, str]] = set()
            todo: list[int] = []
            for i, (spec, first) in enumerate(items):
                key = (spec.namespace, spec.name)
                try:
                    self._check_schedules(data, [(spec, first)])
                except QuotaExceededError as exc:
                    out.append(exc)
                    continue
                if key in data.job_names or key in taken:
                    out.append(job_exists(spec))
                    continue
                taken.add(key)
                todo.append(i)
                out.append(None)
            if any(isinstance(r, CronwheelError) for r in out) and all_or_nothing:
                settle(out, all_or_nothing)  # raises BatchError
            charge = self._jobs_room(data, [items[i][0] for i in todo])
            now = self._now_us()
            for i in todo:
                row = self._new_job(data, *items[i], now)
                out[i] = codec.new_job({"id": row.id, "created_at": now}, *items[i])
            self._charge_jobs_in(data, charge)
            if todo:
                data.jobs_version += 1
            return [r for r in out if r is not None]

    def enqueue_now_batch(
        self, specs: Sequence[JobSpec], *, all_or_nothing: bool = False
    ) -> list[Firing | CronwheelError]:
        done = self.enqueue_now_batch_once(
            [(s, None) for s in specs], all_or_nothing=all_or_nothing
        )
        return [r if isinstance(r, CronwheelError) else r[0] for r in done]

    def enqueue_now_batch_once(
        self, items: Sequence[tuple[JobSpec, KeyRef | None]], *, all_or_nothing: bool = False
    ) -> list[tuple[Firing, bool] | CronwheelError]:
        """As the SQL stores: each keyed item's key looked up, then its name checked."""
        with self._tx() as data:
            out: list[tuple[Firing, bool] | CronwheelError | None] = [None] * len(items)
            taken: set[tuple[str, str]] = set()
            first: dict[tuple[str, str], int] = {}
            repeats: list[tuple[int, int]] = []
            todo: list[int] = []
            for i, (spec, ref) in enumerate(items):
                if ref is not None:
                    k = (spec.namespace, ref[0])
                    if (seen := data.idempotency.get(k)) is not None:
                        firing = codec.firing_from_row(data.firings[seen.firing_id])
                        same = seen.request_hash == ref[1]
                        out[i] = (firing, False) if same else key_reused()
                        continue
                    if k in first:
                        if items[first[k]][1] == ref:
                            repeats.append((i, first[k]))
                        else:
                            out[i] = key_reused()
                        continue
                    first[k] = i
                name = (spec.namespace, spec.name)
                if name in data.job_names or name in taken:
                    out[i] = job_exists(spec)
                    continue
                taken.add(name)
                todo.append(i)
            for i, earlier in repeats:
                if isinstance(out[earlier], CronwheelError):
                    out[i] = first_refused()
            if any(isinstance(r, CronwheelError) for r in out) and all_or_nothing:
                settle(out, all_or_nothing)  # raises BatchError
            per_namespace: dict[str, int] = {}
            for i in todo:
                namespace = items[i][0].namespace
                per_namespace[namespace] = per_namespace.get(namespace, 0) + 1
            for namespace, n in sorted(per_namespace.items()):
                self._firings_room(data, namespace, n)
            for i in todo:
                out[i] = (codec.firing_from_row(self._enqueue_now_in(data, items[i][0])), True)
            for i, earlier in repeats:
                if out[i] is None:
                    made = out[earlier]
                    assert isinstance(made, tuple)
                    out[i] = (made[0], False)
            for namespace, n in per_namespace.items():
                self._add(data, namespace, "firings_per_minute", n)
            for k, i in first.items():
                made, ref = out[i], items[i][1]
                if isinstance(made, tuple) and ref is not None:
                    row = IdempotencyRow(request_hash=ref[1], firing_id=made[0].id)
                    data.idempotency[k] = row
            done = settle(out, all_or_nothing)
        if per_namespace:
            self._wake()
        return done

    def upsert_job(self, spec: JobSpec, *, first_fire_at: datetime | None) -> tuple[Job, bool]:
        params = codec.job_params(spec)
        with self._tx() as data:
            now = self._now_us()
            job_id = data.job_names.get((spec.namespace, spec.name))
            if job_id is None:
                self._check_schedules(data, [(spec, first_fire_at)])
                charge = self._jobs_room(data, [spec])
                row = self._new_job(data, spec, first_fire_at, now)
                self._charge_jobs_in(data, charge)
            else:
                row = data.jobs[job_id]
                if row.spec_hash == params["spec_hash"]:
                    return codec.job_from_row(row), False
                if row.schedule != params["schedule"]:
                    self._check_schedules(data, [(spec, first_fire_at)])
                    row.next_fire_at = opt_us(first_fire_at)
                if row.bounds != params["bounds"]:
                    row.remaining_runs = params["remaining_runs"]
                for key in SPEC_COLUMNS:  # `paused` is the operator's, kept
                    setattr(row, key, params[key])
                if params["trace_context"] is not None:  # else the one it has is kept
                    row.trace_context = params["trace_context"]
                row.updated_at = now
            data.jobs_version += 1
            return codec.job_from_row(row), True

    def get_job(self, namespace: str, name: str) -> Job:
        with self._tx() as data:
            return codec.job_from_row(self._job(data, namespace, name))

    def get_job_by_id(self, job_id: JobId) -> Job:
        with self._tx() as data:
            row = data.jobs.get(job_id)
            if row is None:
                raise JobNotFoundError(f"no job with id {job_id}", field="job_id")
            return codec.job_from_row(row)

    def list_jobs(
        self,
        *,
        namespace: str | None = None,
        name_prefix: str | None = None,
        task: str | None = None,
        after_id: int = 0,
        limit: int = 100,
    ) -> list[Job]:
        with self._tx() as data:
            rows = [
                j
                for j in data.jobs.values()
                if j.id > after_id
                and (namespace is None or j.namespace == namespace)
                and (task is None or j.task == task)
                and (not name_prefix or j.name.startswith(name_prefix))
            ]
            return [codec.job_from_row(j) for j in rows[: max(limit, 0)]]

    def set_paused(self, namespace: str, name: str, paused: bool) -> Job:
        with self._tx() as data:
            row = self._job(data, namespace, name)
            now = self._now_us()
            row.paused = int(paused)
            row.updated_at = now
            work.add_event(data, row.id, now=now, kind="paused" if paused else "resumed")
            data.jobs_version += 1
            return codec.job_from_row(row)

    def delete_job(self, namespace: str, name: str) -> None:
        with self._tx() as data:
            job = self._job(data, namespace, name)
            data.delete_job(job)
            if codec.job_from_row(job).spec.schedule.kind != "now":
                self._add(data, namespace, "jobs", -1)
            data.jobs_version += 1

    def due_jobs(
        self, horizon: datetime, *, limit: int, after: tuple[datetime, int] | None = None
    ) -> list[Job]:
        after_key = (-(2**62), 0) if after is None else (to_us(after[0]), after[1])
        until = to_us(horizon)
        with self._tx() as data:
            due = sorted(
                (j.next_fire_at, j.id, j)
                for j in data.jobs.values()
                if not j.paused
                and j.next_fire_at is not None
                and j.next_fire_at <= until
                and (j.next_fire_at, j.id) > after_key
            )
            return [codec.job_from_row(j) for _, _, j in due[: max(limit, 0)]]

    def jobs_version(self) -> int:
        with self._tx() as data:
            return data.jobs_version

    def skip_occurrences(
        self, namespace: str, name: str, instants: Sequence[datetime], reason: str
    ) -> list[SkipResult]:
        with self._tx() as data:
            job = self._job(data, namespace, name)
            now = self._now_us()
            out = []
            for at in instants:
                key = (job.id, to_us(at))
                fid = data.firing_keys.get(key)
                if fid is None:
                    row = work.insert_firing(
                        data,
                        job,
                        scheduled_for=key[1],
                        due_at=key[1],
                        now=now,
                        epoch=None,
                        note=None,
                        fair=False,
                    )
                    assert row is not None
                    outcome = work.skip(row, reason, now)
                else:
                    row = data.firings[fid]
                    outcome = work.skip(row, reason, now)
                out.append(
                    SkipResult(
                        at=at, outcome=outcome, state=FiringState(row.state), firing_id=row.id
                    )
                )
            return out

    def job_events(self, job_id: JobId, *, limit: int = 100) -> list[JobEvent]:
        with self._tx() as data:
            rows = [e for e in reversed(data.events.values()) if e.job_id == job_id]
            return [codec.event_from_row(e) for e in rows[: max(limit, 0)]]
