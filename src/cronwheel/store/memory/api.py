"""The memory store's part of the ApiStore port: tokens, namespace-scoped searches,
trigger/backfill firings and idempotent immediate work."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import (
    OPEN_STATES,
    STARTED_STATES,
    Firing,
    FiringId,
    Job,
    JobId,
    JobSpec,
    RecentRuns,
)
from cronwheel.errors import ConflictError, NotFoundError, StoreUnavailableError, ValidationError
from cronwheel.store import codec
from cronwheel.store.codec import to_us
from cronwheel.store.memory import work
from cronwheel.store.memory.calendars import CalendarMethods
from cronwheel.store.memory.rows import FiringRow, IdempotencyRow
from cronwheel.store.protocol import TOKEN_ROLES, AddedFirings, ApiToken, AsyncCalls


class ApiMethods(CalendarMethods):
    def ping(self) -> None:
        with self.data.lock:
            if self._closed:  # the port's answer for a store that does not answer
                raise StoreUnavailableError("the memory store is closed", field="store")

    def id_key(self) -> bytes:
        with self._tx() as data:
            return data.id_key

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
        wanted = {s.value for s in states} if states else None
        lo, hi = (None if t is None else to_us(t) for t in (scheduled_from, scheduled_to))
        with self._tx() as data:
            out: list[Firing] = []
            for f in reversed(data.firings.values()):
                if len(out) >= limit:
                    break
                if (
                    (job_id is None or f.job_id == job_id)
                    and (namespace is None or f.namespace == namespace)
                    and (job_name is None or f.job_name == job_name)
                    and (wanted is None or f.state in wanted)
                    and (lo is None or f.scheduled_for >= lo)
                    and (hi is None or f.scheduled_for < hi)
                    and (before_id is None or f.id < before_id)
                    and (after_id is None or f.id > after_id)
                ):
                    out.append(codec.firing_from_row(f))
            return out

    # -- tokens ------------------------------------------------------------------------
    def create_token(
        self, *, namespace: str, role: str, label: str | None, secret_hash: str
    ) -> ApiToken:
        if role not in TOKEN_ROLES:
            raise ValidationError(f"must be one of {', '.join(TOKEN_ROLES)}", field="role")
        with self._tx() as data:
            token = ApiToken(
                id=data.next_id("api_tokens"),
                namespace=namespace,
                role=role,
                label=label,
                secret_hash=secret_hash,
                created_at=self.now(),
            )
            data.tokens[token.id] = token
            return token

    def get_token(self, token_id: int) -> ApiToken | None:
        with self._tx() as data:
            return data.tokens.get(token_id)

    def list_tokens(self, *, namespace: str | None = None) -> list[ApiToken]:
        with self._tx() as data:
            return [t for t in data.tokens.values() if namespace in (None, t.namespace)]

    def revoke_token(self, token_id: int) -> ApiToken:
        with self._tx() as data:
            token = data.tokens.get(token_id)
            if token is None:
                raise NotFoundError(f"no token with id {token_id}", field="token_id")
            if token.revoked_at is None:
                token = dataclasses.replace(token, revoked_at=self.now())
                data.tokens[token_id] = token
            return token

    # -- jobs and firings, namespace-scoped ------------------------------------------------
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
        def in_state(paused: int, next_fire_at: int | None) -> bool:
            if state == "active":
                return not paused and next_fire_at is not None
            if state == "paused":
                return bool(paused)
            if state == "done":
                return not paused and next_fire_at is None
            return True

        with self._tx() as data:
            rows = [
                j
                for j in data.jobs.values()
                if j.namespace == namespace
                and j.id > after_id
                and in_state(j.paused, j.next_fire_at)
                and (task is None or j.task == task)
                and (not name_prefix or j.name.startswith(name_prefix))
            ]
            return [codec.job_from_row(j) for j in rows[: max(limit, 0)]]

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
        wanted = {s.value for s in states} if states else None
        lo = None if scheduled_from is None else to_us(scheduled_from)
        hi = None if scheduled_to is None else to_us(scheduled_to)
        with self._tx() as data:
            rows = [
                f
                for f in reversed(data.firings_of(job_id))
                if (wanted is None or f.state in wanted)
                and (lo is None or f.scheduled_for >= lo)
                and (hi is None or f.scheduled_for < hi)
                and (before_id is None or f.id < before_id)
            ]
            return [codec.firing_from_row(f) for f in rows[: max(limit, 0)]]

    def recent_runs(
        self, job_ids: Sequence[JobId], *, sample: int = 100
    ) -> dict[JobId, RecentRuns]:
        started = {s.value for s in STARTED_STATES}
        open_ = {s.value for s in OPEN_STATES}
        n = max(sample, 0)
        out: dict[JobId, RecentRuns] = {}
        with self._tx() as data:
            wanted = set(job_ids)
            of: dict[int, list[FiringRow]] = {}
            for f in data.firings.values():  # one pass for every job
                if f.job_id in wanted:
                    of.setdefault(f.job_id, []).append(f)
            for job_id in job_ids:
                newest = sorted(of.get(job_id, []), key=lambda f: -f.scheduled_for)
                ran = [f for f in newest if f.state in started][:n]
                late = tuple(
                    (f.started_at - f.scheduled_for) / 1_000_000
                    for f in ran
                    if f.attempt == 1 and f.started_at is not None
                )
                last = next((f for f in newest[:n] if f.state not in open_), None)
                out[job_id] = RecentRuns(
                    job_id=job_id,
                    lateness_s=late,
                    last_id=None if last is None else FiringId(last.id),
                    last_state=None if last is None else FiringState(last.state),
                )
        return out

    def add_firings(
        self,
        namespace: str,
        name: str,
        scheduled_for: Sequence[datetime],
        *,
        note: str,
        overlap: str | None = None,
    ) -> AddedFirings:
        inserted: list[Firing] = []
        duplicates = 0
        with self._tx() as data:
            job = self._job(data, namespace, name)
            now = self._now_us()
            instants = {to_us(i) for i in scheduled_for}
            adds = sum(1 for at in instants if (job.id, at) not in data.firing_keys)
            self._backfill_room(data, namespace, len(scheduled_for), adds)
            for instant in scheduled_for:
                at = to_us(instant)
                row = work.insert_firing(
                    data,
                    job,
                    scheduled_for=at,
                    due_at=max(at, now),  # never due in the past
                    now=now,
                    epoch=None,
                    note=note,
                    overlap=overlap,
                )
                if row is None:
                    duplicates += 1
                else:
                    inserted.append(codec.firing_from_row(row))
            self._charge_backfill_in(data, namespace, len(inserted))
        if inserted:
            self._wake()
        return AddedFirings(inserted=inserted, duplicates=duplicates)

    def async_calls(self) -> AsyncCalls | None:
        return None  # a call under the store's lock: nothing to wait for

    def enqueue_now_once(
        self, spec: JobSpec, *, key_hash: str, request_hash: str
    ) -> tuple[Firing, bool]:
        key = (spec.namespace, key_hash)
        with self._tx() as data:
            seen = data.idempotency.get(key)
            if seen is not None:
                if seen.request_hash != request_hash:
                    raise ConflictError(
                        "this Idempotency-Key was used with a different request body",
                        field="Idempotency-Key",
                    )
                return codec.firing_from_row(data.firings[seen.firing_id]), False
            self._firings_room(data, spec.namespace, 1)
            row = self._enqueue_now_in(data, spec)
            self._add(data, spec.namespace, "firings_per_minute", 1)
            data.idempotency[key] = IdempotencyRow(request_hash=request_hash, firing_id=row.id)
            firing = codec.firing_from_row(row)
        self._wake()
        return firing, True

    def job_backlog(self, namespace: str, *, limit: int = 50) -> dict[str, int]:
        with self._tx() as data:
            counts: dict[str, int] = {}
            for f in data.active():
                if f.namespace == namespace:
                    counts[f.job_name] = counts.get(f.job_name, 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return dict(ranked[: max(limit, 0)])
