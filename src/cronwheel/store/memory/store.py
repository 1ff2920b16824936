"""MemoryStore: the whole Store (and ApiStore) port in plain Python, for tests.

A user unit-tests their tasks and schedules with ``App("memory://")`` and a
FakeClock: no files, no server. It passes the same contract suite as the SQLite
and PostgreSQL stores (``tests/contract``) and follows the SQLite store's
semantics: leases and claims are judged by the Clock it is given, every state
change is a compare-and-swap, a leader's writes are fenced by its lease. Where
the suite found the SQL stores wrong (its xfail marks), it does what the Store
port documents: the reaper cancels a cancel-requested firing whose lease ran out,
a cancel-requested firing that fails is cancelled rather than retried, a redrive
clears an old cancellation request, and a claim clears the mark of a firing that
waited for a slot (so its retry is in the wake-up hint). The SQL stores' attempt log
(``firing_attempts``: failed, lease-expired attempts) is kept for ``list_attempts``.

One lock serializes every method (each is one atomic step, as a transaction).
Its data lives in this process only: handles made with ``MemoryStore(data=...)``
share it (threads of one test), other processes never see it, so the cronwheel
commands that run in processes of their own refuse a ``memory://`` store.
Wake-ups are in-process: ``open_wakeup`` callbacks are called after new work is
queued, from the thread that queued it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from cronwheel.domain.attempts import Attempt, attempts_of
from cronwheel.domain.clock import ClockEstimate
from cronwheel.domain.models import (
    ClaimedFiring,
    Epoch,
    Firing,
    FiringId,
    JobSpec,
    Lease,
    NodeInfo,
)
from cronwheel.errors import (
    InvalidTransitionError,
    LeaseLostError,
)
from cronwheel.store import codec
from cronwheel.store.claiming import ClaimAsk
from cronwheel.store.codec import duration_us, from_us, opt_us, to_us
from cronwheel.store.memory import work
from cronwheel.store.memory.api import ApiMethods
from cronwheel.store.memory.retention import RetentionMethods
from cronwheel.store.memory.rows import FiringRow, LeaseRow, MemoryData, NodeRow
from cronwheel.store.memory.tzdata import TzMethods
from cronwheel.store.protocol import (
    DISPATCHER_LEASE,
    SERVED_TASKS_REFRESH,
    UNSERVED_SCAN,
    CancelResult,
    Completion,
    EnqueueResult,
    JobAdvance,
    ServedTask,
    StoreStatus,
)
from cronwheel.wakeup import Wakeup

SCHEMA_VERSION = 1  # no schema to migrate: the version a fresh store reports
_STATUS_WINDOW_US = 3_600_000_000


class MemoryStore(ApiMethods, RetentionMethods, TzMethods):
    """The Store in this process's memory (see the module docstring)."""

    one_writer = True  # one lock serializes every method (WorkerPort)
    waits_for_instant = False  # the start is written when ready returns (WorkerPort)

    # -- lifecycle ----------------------------------------------------------------------
    def migrate(self) -> int:
        with self._tx():
            return SCHEMA_VERSION

    def close(self) -> None:
        """This handle is closed; the data lives on while other handles use it."""
        with self.data.lock:
            self._closed = True

    def open_wakeup(self, callback: Callable[[], None]) -> Wakeup:
        return _InProcessWakeup(self.data, callback)

    # -- leadership -----------------------------------------------------------------------
    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> Lease | None:
        with self._tx() as data:
            now = self._now_us()
            expires = now + duration_us(ttl)
            row = data.leases.get(name)
            if row is None:
                row = LeaseRow(
                    name=name, holder=holder, epoch=1, expires_at=expires, acquired_at=now
                )
                data.leases[name] = row
                return _lease(row)
            renew = row.holder == holder and row.expires_at > now
            if not renew and row.expires_at > now:
                return None  # another holder has it
            if not renew:
                row.epoch += 1
                row.acquired_at = now
            row.holder = holder
            row.expires_at = expires
            return _lease(row)

    def release_lease(self, lease: Lease) -> None:
        with self._tx() as data:
            row = data.leases.get(lease.name)
            if row is not None and (row.holder, row.epoch) == (lease.holder, lease.epoch):
                row.expires_at = self._now_us()

    def get_lease(self, name: str) -> Lease | None:
        with self._tx() as data:
            row = data.leases.get(name)
            return None if row is None else _lease(row)

    # -- dispatch ---------------------------------------------------------------------------
    def enqueue(self, lease: Lease, advances: Sequence[JobAdvance]) -> EnqueueResult:
        result = EnqueueResult()
        rows: list[FiringRow] = []
        with self._tx() as data:
            now = self._now_us()
            held = data.leases.get(lease.name)
            if (
                held is None
                or (held.holder, held.epoch) != (lease.holder, lease.epoch)
                or (held.expires_at <= now)
            ):
                raise LeaseLostError(
                    f"lease {lease.name!r} epoch {lease.epoch} is no longer held by {lease.holder}"
                )
            for adv in advances:
                job = data.jobs.get(adv.job_id)
                expected = to_us(adv.expected_next_fire_at)
                if job is None or job.paused or job.next_fire_at != expected:
                    result.stale.append(adv.job_id)
                    continue
                runs = len(adv.firings)
                if job.remaining_runs is not None and job.remaining_runs - runs <= 0:
                    job.next_fire_at = None
                else:
                    job.next_fire_at = opt_us(adv.new_next_fire_at)
                if job.remaining_runs is not None:
                    job.remaining_runs = max(job.remaining_runs - runs, 0)
                if adv.firings:
                    job.last_fired_at = max(to_us(f.scheduled_for) for f in adv.firings)
                job.missed_total += sum(m.count for m in adv.missed)
                for planned in adv.firings:
                    at = to_us(planned.scheduled_for)
                    row = work.insert_firing(
                        data,
                        job,
                        scheduled_for=at,
                        due_at=at if planned.due_at is None else to_us(planned.due_at),
                        now=now,
                        epoch=lease.epoch,
                        note=planned.note,
                    )
                    if row is None:
                        result.duplicates += 1
                    else:
                        rows.append(row)
                for m in adv.missed:
                    work.add_event(
                        data,
                        job.id,
                        now=now,
                        kind="missed",
                        first_at=to_us(m.first),
                        last_at=to_us(m.last),
                        count=m.count,
                        exact=m.exact,
                        detail=m.reason,
                    )
            over = self._skip_over_rate(data, rows)
            result.inserted.extend(FiringId(r.id) for r in rows if r.id not in over)
            result.over_quota.extend(FiringId(r.id) for r in rows if r.id in over)
        if result.inserted:
            self._wake()
        return result

    def upkeep(self) -> None:
        """Nothing to keep up: no file (DispatchPort)."""

    def requeue_expired(self, *, limit: int = 1000) -> int:
        with self._tx() as data:
            return work.requeue_expired(data, self._now_us(), limit)

    def enqueue_now(self, spec: JobSpec) -> Firing:
        with self._tx() as data:
            self._firings_room(data, spec.namespace, 1)
            row = self._enqueue_now_in(data, spec)
            self._add(data, spec.namespace, "firings_per_minute", 1)
            firing = codec.firing_from_row(row)
        self._wake()
        return firing

    # -- workers ----------------------------------------------------------------------------
    def claim(
        self,
        worker_id: str,
        *,
        tasks: Sequence[str],
        limit: int,
        prefetch: timedelta = timedelta(0),
        start: int | None = None,
    ) -> list[ClaimedFiring]:
        ask = ClaimAsk(worker_id, tuple(tasks), limit, prefetch, start)
        if not ask.wants:
            return []
        with self._tx() as data:
            return self._claim_in(data, ask)

    def _claim_in(self, data: MemoryData, ask: ClaimAsk) -> list[ClaimedFiring]:
        now = self._now_us()
        until = now + duration_us(ask.prefetch)
        room = self._running_room(data)
        rows = work.claim(data, ask.worker_id, ask.tasks, ask.limit, now, until, ask.starts, room)
        return codec.claimed_from_rows(
            rows,
            lambda r: data.jobs[r["job_id"]].policies,
            lambda r: data.jobs[r["job_id"]].trace_context,
        )

    def complete_and_claim(
        self,
        completions: Sequence[Completion],
        worker_id: str,
        *,
        tasks: Sequence[str],
        limit: int,
        prefetch: timedelta = timedelta(0),
        start: int | None = None,
    ) -> tuple[list[bool], list[ClaimedFiring]]:
        ask = ClaimAsk(worker_id, tuple(tasks), limit, prefetch, start)
        with self._tx() as data:
            accepted = work.complete(data, completions)
            if not ask.wants:
                return accepted, []
            return accepted, self._claim_in(data, ask)

    def prepare_claims(self, connections: int) -> None:
        """Nothing to open: no connection (WorkerPort)."""

    def start(self, worker_id: str, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        with self._tx() as data:
            return {FiringId(i) for i in work.start(data, claims, self._now_us())}

    def complete_and_start(
        self,
        completions: Sequence[Completion],
        worker_id: str,
        claims: Sequence[tuple[FiringId, str]],
        ready: Callable[[], None] | None = None,
        not_before: datetime | None = None,
    ) -> tuple[list[bool], set[FiringId]]:
        if ready is not None:
            ready()  # the start is written when it returns (waits_for_instant is false)
        with self._tx() as data:
            accepted = work.complete(data, completions)
            return accepted, {FiringId(i) for i in work.start(data, claims, self._now_us())}

    def next_due_at(self) -> datetime | None:
        with self._tx() as data:
            due = work.next_due_at(data, self._now_us())
        return None if due is None else from_us(due)

    def heartbeat(self, worker_id: str, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        with self._tx() as data:
            return {FiringId(i) for i in work.heartbeat(data, claims, self._now_us())}

    def cancel_requested(self, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        with self._tx() as data:
            return {
                fid
                for fid, _ in claims
                if (f := data.firings.get(fid)) is not None and f.cancel_requested_at is not None
            }

    def complete(self, completions: Sequence[Completion]) -> list[bool]:
        with self._tx() as data:
            return work.complete(data, completions)

    # -- firings ----------------------------------------------------------------------------
    def get_firing(self, firing_id: FiringId) -> Firing:
        with self._tx() as data:
            return codec.firing_from_row(self._firing(data, firing_id))

    def list_attempts(self, firing_id: FiringId) -> list[Attempt]:
        return self.firing_with_attempts(firing_id)[1]

    def firing_with_attempts(self, firing_id: FiringId) -> tuple[Firing, list[Attempt]]:
        with self._tx() as data:
            row = self._firing(data, firing_id)
            recorded = [a for (fid, _), a in sorted(data.attempts.items()) if fid == firing_id]
            firing = codec.firing_from_row(row)
            return firing, attempts_of(firing, [codec.attempt_from_row(a) for a in recorded])

    def cancel_firing(self, firing_id: FiringId) -> CancelResult:
        with self._tx() as data:
            row = self._firing(data, firing_id)
            outcome = work.cancel(row, self._now_us())
            return CancelResult(outcome=outcome, firing=codec.firing_from_row(row))

    def redrive_firing(self, firing_id: FiringId) -> Firing:
        with self._tx() as data:
            row = self._firing(data, firing_id)
            if not work.redrive(data, row, self._now_us()):
                raise InvalidTransitionError(
                    f"only a dead firing can be retried; this one is {row.state}", field="state"
                )
            firing = codec.firing_from_row(row)
        self._wake()
        return firing

    # -- nodes ------------------------------------------------------------------------------
    def register_node(self, node: NodeInfo) -> None:
        with self._tx() as data:
            now = self._now_us()
            info = json.dumps(node.info)
            row = data.nodes.get(node.id)
            if row is None:
                data.nodes[node.id] = NodeRow(
                    id=node.id,
                    kind=node.kind,
                    hostname=node.hostname,
                    pid=node.pid,
                    started_at=to_us(node.started_at),
                    heartbeat_at=now,
                    wake_addr=node.wake_addr,
                    info=info,
                    tz_source=node.tz_source,
                    tz_version=node.tz_version,
                )
            else:
                row.heartbeat_at, row.wake_addr, row.info = now, node.wake_addr, info
                row.tz_source, row.tz_version = node.tz_source, node.tz_version
            _set_clock(data.nodes[node.id], node.clock)
            _record_served(data, data.nodes[node.id], now, refresh_us=0)

    def heartbeat_node(self, node_id: str, clock: ClockEstimate | None = None) -> None:
        with self._tx() as data:
            row = data.nodes.get(node_id)
            if row is not None:
                row.heartbeat_at = self._now_us()
                _set_clock(row, clock)
                refresh = duration_us(SERVED_TASKS_REFRESH)
                _record_served(data, row, row.heartbeat_at, refresh_us=refresh)

    def remove_node(self, node_id: str) -> None:
        with self._tx() as data:
            data.nodes.pop(node_id, None)

    def list_nodes(self, *, alive_within: timedelta | None = None) -> list[NodeInfo]:
        with self._tx() as data:
            since = None if alive_within is None else self._now_us() - duration_us(alive_within)
            rows = sorted(
                (n for n in data.nodes.values() if since is None or n.heartbeat_at >= since),
                key=lambda n: (n.kind, n.id),
            )
            return [codec.node_from_row(n) for n in rows]

    def served_tasks(self, *, limit: int = 1000) -> list[ServedTask]:
        with self._tx() as data:
            return [
                ServedTask(task=task, first_seen=from_us(first), last_seen=from_us(last))
                for task, (first, last) in sorted(data.served_tasks.items())[:limit]
            ]

    def unserved_queued(
        self, *, alive_within: timedelta, namespace: str | None = None, limit: int = 50
    ) -> dict[str, int]:
        with self._tx() as data:
            since = self._now_us() - duration_us(alive_within)
            live: set[str] = set()
            for n in data.nodes.values():
                if n.kind == "worker" and n.heartbeat_at >= since:
                    live.update(_node_tasks(n))
            waiting: dict[str, int] = {}
            scanned = 0
            for f in data.firings.values():
                if f.state != "queued" or namespace not in (None, f.namespace):
                    continue
                if scanned < UNSERVED_SCAN:
                    scanned += 1
                    waiting[f.task] = waiting.get(f.task, 0) + 1
            ranked = sorted(
                ((t, n) for t, n in waiting.items() if t not in live), key=lambda x: (-x[1], x[0])
            )
            return dict(ranked[:limit])

    def status(self, *, namespace: str | None = None) -> StoreStatus:
        with self._tx() as data:
            now = self._now_us()
            since = now - _STATUS_WINDOW_US
            firings = [f for f in data.firings.values() if namespace in (None, f.namespace)]
            jobs = [j for j in data.jobs.values() if namespace in (None, j.namespace)]
            counts = {
                "queued": sum(1 for f in firings if f.state == "queued"),
                "claimed": sum(1 for f in firings if f.state == "claimed"),
                "running": sum(1 for f in firings if f.state == "running"),
            }
            for f in firings:
                if f.finished_at is not None and f.finished_at >= since:
                    counts[f.state] = counts.get(f.state, 0) + 1
            recent = sorted(
                (
                    f
                    for f in firings
                    if f.state == "succeeded"
                    and f.finished_at is not None
                    and f.finished_at >= since
                    and f.started_at is not None
                    and f.attempt == 1  # a retried row holds its last start
                ),
                key=lambda f: -(f.finished_at or 0),
            )[:1000]
            oldest = min((f.due_at for f in firings if f.state == "queued"), default=None)
            lease = data.leases.get(DISPATCHER_LEASE)
            return StoreStatus(
                now=from_us(now),
                lease=None if lease is None else _lease(lease),
                counts=counts,
                jobs=len(jobs),
                paused_jobs=sum(1 for j in jobs if j.paused),
                oldest_queued_due_at=None if oldest is None else from_us(oldest),
                nodes=self.list_nodes(),
                lateness_ms=[((f.started_at or 0) - f.scheduled_for) / 1000 for f in recent],
                tzdata=codec.tz_record_from_text(data.tzdata),
            )


class _InProcessWakeup:
    """A wake-up listener of a memory store: called back in this process."""

    def __init__(self, data: MemoryData, callback: Callable[[], None]) -> None:
        self._data = data
        self._callback = callback
        with data.lock:
            data.wakeups.append(callback)

    @property
    def address(self) -> str | None:
        return None

    def close(self) -> None:
        with self._data.lock:
            if self._callback in self._data.wakeups:
                self._data.wakeups.remove(self._callback)


def _node_tasks(node: NodeRow) -> list[str]:
    """The task names a worker node's info lists (none for other kinds)."""
    if node.kind != "worker":
        return []
    tasks = json.loads(node.info).get("tasks")
    return [t for t in tasks if isinstance(t, str)] if isinstance(tasks, list) else []


def _record_served(data: MemoryData, node: NodeRow, now: int, *, refresh_us: int) -> None:
    """record_served_tasks (core_tasks.sql): insert new tasks; move a known one's
    last_seen only when it is at least ``refresh_us`` old."""
    for task in _node_tasks(node):
        seen = data.served_tasks.get(task)
        if seen is None:
            data.served_tasks[task] = (now, now)
        elif seen[1] <= now - refresh_us:
            data.served_tasks[task] = (seen[0], now)


def _lease(row: LeaseRow) -> Lease:
    return Lease(
        name=row.name,
        holder=row.holder,
        epoch=Epoch(row.epoch),
        expires_at=from_us(row.expires_at),
        acquired_at=from_us(row.acquired_at),
    )


def _set_clock(row: NodeRow, clock: ClockEstimate | None) -> None:
    """A node's reported clock (codec.clock_params: the SQL stores' three columns)."""
    for name, value in codec.clock_params(clock).items():
        setattr(row, name, value)
