"""The memory store's firing work: enqueue, claim, complete, reap, cancel, redrive.

Each function runs under the data's lock with the store's ``now`` (µs) and makes the
same state changes, with the same compare-and-swap conditions, as the SQLite store's
queries (``store/sqlite/queries.sql``); claims are planned by ``store/claiming.py``
as in both SQL stores. A function checks everything that can refuse before it
changes anything, so a refused call leaves no partial write behind.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Sequence

from cronwheel.domain.policies import fair_deadline
from cronwheel.store.claiming import Candidate, capped, plan_claim, within_room
from cronwheel.store.codec import to_us
from cronwheel.store.memory.rows import (
    HELD,
    AttemptRow,
    EventRow,
    FiringRow,
    JobRow,
    MemoryData,
)
from cronwheel.store.protocol import Completion

SCAN_EXTRA = 32  # a claim scans a few more candidates than it may take (as SQLite)

LEASE_EXPIRED = "lease expired: worker {} stopped heartbeating"
WORKER_GONE = "cancel requested; the worker stopped heartbeating"
GRACE_EXPIRED = "cancel grace expired: lease revoked, a late result will be rejected"
START_DEADLINE = "start deadline passed before a worker could start it"
HANDLER_STOPPED = "cancelled: the handler stopped"
FAILED_AFTER_CANCEL = "cancel requested; the attempt failed and is not retried"


def fair_vdeadline(data: MemoryData, job: JobRow, due_us: int) -> int:
    """The claim order of a firing of ``job`` due at ``due_us``; moves its namespace's
    fair clock (domain.policies.fair_deadline)."""
    vdeadline, clock = fair_deadline(data.fair_clocks.get(job.namespace, 0), due_us, job.priority)
    data.fair_clocks[job.namespace] = max(data.fair_clocks.get(job.namespace, 0), clock)
    return vdeadline


def insert_firing(
    data: MemoryData,
    job: JobRow,
    *,
    scheduled_for: int,
    due_at: int,
    now: int,
    epoch: int | None,
    note: str | None,
    overlap: str | None = None,
    fair: bool = True,
) -> FiringRow | None:
    """A QUEUED firing of ``job``; None when ``(job, scheduled_for)`` has one already.
    The fair clock moves and an id is used either way, as in the SQL stores' inserts;
    ``fair=False`` (a firing born finished, never claimed) leaves the clock alone."""
    vdeadline = fair_vdeadline(data, job, due_at) if fair else due_at
    firing_id = data.next_id("firings")  # a duplicate uses an id up, as in SQL
    if (job.id, scheduled_for) in data.firing_keys:
        return None
    row = FiringRow(
        id=firing_id,
        job_id=job.id,
        namespace=job.namespace,
        job_name=job.name,
        task=job.task,
        payload=job.payload,
        scheduled_for=scheduled_for,
        due_at=due_at,
        vdeadline=vdeadline,
        state="queued",
        max_attempts=job.max_attempts,
        priority=job.priority,
        visibility_us=job.visibility_us,
        enqueued_at=now,
        enqueued_epoch=epoch,
        shard=job.shard,
        note=note,
        overlap_override=overlap,
    )
    data.firings[row.id] = row
    data.firing_keys[(job.id, scheduled_for)] = row.id
    data.maybe_active.add(row.id)
    return row


def add_event(
    data: MemoryData,
    job_id: int,
    *,
    now: int,
    kind: str,
    first_at: int | None = None,
    last_at: int | None = None,
    count: int = 0,
    exact: bool = True,
    detail: str | None = None,
) -> None:
    eid = data.next_id("job_events")
    data.events[eid] = EventRow(
        id=eid,
        job_id=job_id,
        at=now,
        kind=kind,
        first_at=first_at,
        last_at=last_at,
        count=count,
        exact=exact,
        detail=detail,
    )


# -- claims ------------------------------------------------------------------------------
def _deadline_passed(f: FiringRow, job: JobRow, now: int) -> bool:
    return job.start_deadline_us is not None and f.due_at + job.start_deadline_us < now


def claim(
    data: MemoryData,
    worker_id: str,
    tasks: Sequence[str],
    limit: int,
    now: int,
    until: int,
    start: int,
    room: Callable[[str], int],
) -> list[FiringRow]:
    """Plan with the overlap policies, apply the fates, claim the chosen firings (the
    first ``start`` of them, if due, started at once). ``room``: how many more firings
    a namespace may hold (its running quota): the others wait in the queue."""
    wanted = set(tasks)
    active = data.active()
    running: dict[int, int] = {}  # held (CLAIMED + RUNNING) firings per job, before this claim
    queued: dict[int, list[FiringRow]] = {}  # QUEUED firings per job
    for f in active:
        if f.state in HELD:
            running[f.job_id] = running.get(f.job_id, 0) + 1
        else:
            queued.setdefault(f.job_id, []).append(f)
    found: list[FiringRow] = []
    for f in active:
        if f.state != "queued" or f.due_at > until or f.task not in wanted:
            continue
        cap = data.jobs[f.job_id].max_concurrency
        if f.buffered_at is not None and cap is not None and running.get(f.job_id, 0) >= cap:
            continue  # kept waiting by its job's cap: passed over while the job is at it
        found.append(f)
    found.sort(key=lambda f: (f.vdeadline, f.id))
    found = within_room(found, room, lambda f: f.namespace)[: limit + SCAN_EXTRA]
    if all(_unpolicied(f, data.jobs[f.job_id], now) for f in found[:limit]):
        # the common case: nothing to decide before the claim is full (as SQLite)
        return _take(found[:limit], worker_id, now, start)
    candidates: list[Candidate[int, int]] = []
    early: list[Candidate[int, int]] = []
    for f in found:
        job = data.jobs[f.job_id]
        c = Candidate(
            id=f.id,
            job_id=f.job_id,
            max_concurrency=job.max_concurrency,
            overlap=job.overlap,
            max_buffer=job.max_buffer,
            overlap_override=f.overlap_override,
            deadline_passed=_deadline_passed(f, job, now),
        )
        # a capped job's not-yet-due firing is decided when it is due, not early
        (early if capped(c) and f.due_at > now else candidates).append(c)
    jobs = {c.job_id for c in [*candidates, *early] if capped(c) or c.overlap_override}
    due = {
        j: [
            f.id
            for f in sorted(queued.get(j, []), key=lambda f: f.scheduled_for)
            if f.due_at <= now
        ]
        for j in jobs
    }
    plan = plan_claim(
        candidates,
        limit=limit,
        running={j: running.get(j, 0) for j in jobs},
        due_by_job=due,
        early=early,
    )
    for state, items in (("skipped", plan.skip), ("missed", plan.missed)):
        for fid, reason in items:
            _finish_unrun(data.firings[fid], state, reason, now)
    for fid in plan.buffered:
        f = data.firings[fid]
        if f.state == "queued" and f.buffered_at is None:
            f.buffered_at = now
    for job_id in plan.cancel_running:
        for f in _running_of_job(data, job_id):
            reason = f.reason or "cancelled by overlap policy cancel_other"
            _request_cancel(f, now)
            if f.state == "claimed":  # held, never started: cancelled outright
                _revoke(f, now, reason)
            f.reason = reason
    for job_id in plan.terminate_running:
        for f in _running_of_job(data, job_id):
            _request_cancel(f, now)
            _revoke(f, now, "terminated by overlap policy terminate_other")
    return _take([data.firings[fid] for fid in plan.claim], worker_id, now, start)


def _unpolicied(f: FiringRow, job: JobRow, now: int) -> bool:
    """No overlap policy to apply (claiming.capped, and no override) and no missed start."""
    uncapped = job.max_concurrency is None or job.overlap == "allow"
    return f.overlap_override is None and uncapped and not _deadline_passed(f, job, now)


def _take(rows: list[FiringRow], worker_id: str, now: int, start: int) -> list[FiringRow]:
    """QUEUED -> CLAIMED: attempt + 1, a fresh claim token, the visibility lease; the
    first ``start`` of them, if due, go on to RUNNING in the same step."""
    claimed = []
    for i, f in enumerate(rows):
        if f.state != "queued":
            continue
        starts = i < start and f.due_at <= now
        f.state = "running" if starts else "claimed"
        f.attempt += 1
        f.claim_token = secrets.token_hex(16)
        f.worker_id = worker_id
        f.lease_until = now + f.visibility_us
        f.claimed_at = now
        f.started_at = now if starts else None
        f.finished_at = None
        f.buffered_at = None  # no longer waiting for a slot (nor when it is queued again)
        claimed.append(f)
    return claimed


def start(data: MemoryData, claims: Iterable[tuple[int, str]], now: int) -> set[int]:
    """CLAIMED -> RUNNING, each a compare-and-swap on the claim token."""
    started: set[int] = set()
    for firing_id, token in claims:
        f = data.firings.get(firing_id)
        if f is not None and f.state == "claimed" and f.claim_token == token:
            f.state = "running"
            f.started_at = now
            f.lease_until = now + f.visibility_us
            started.add(firing_id)
    return started


def _running_of_job(data: MemoryData, job_id: int) -> list[FiringRow]:
    """A job's held (claimed) and running firings."""
    return [f for f in data.active() if f.job_id == job_id and f.state in HELD]


def _request_cancel(f: FiringRow, now: int) -> None:
    if f.cancel_requested_at is None:
        f.cancel_requested_at = now


def _finish_unrun(f: FiringRow, state: str, reason: str, now: int) -> None:
    if f.state == "queued":
        f.state = state
        f.reason = reason
        f.finished_at = now
        f.claim_token = None
        f.lease_until = None


def _record_attempt(
    data: MemoryData, f: FiringRow, finished: int, outcome: str, error: str | None
) -> None:
    """The running attempt ``f`` holds, recorded before its row moves on (as the SQL
    stores' insert_attempt; a record of the same number is replaced)."""
    data.attempts[(f.id, f.attempt)] = AttemptRow(
        firing_id=f.id,
        attempt=f.attempt,
        worker_id=f.worker_id,
        claimed_at=f.claimed_at,
        started_at=f.started_at,
        finished_at=finished,
        outcome=outcome,
        error=error,
    )


def _revoke(f: FiringRow, now: int, reason: str) -> None:
    """RUNNING -> CANCELLED with the claim revoked: the worker's late result is rejected."""
    f.state = "cancelled"
    f.reason = reason
    f.finished_at = now
    f.claim_token = None
    f.lease_until = None


def next_due_at(data: MemoryData, now: int) -> int | None:
    return min(
        (
            f.due_at
            for f in data.active()
            if f.state == "queued" and f.buffered_at is None and f.due_at > now
        ),
        default=None,
    )


# -- held claims ---------------------------------------------------------------------------
def _held(
    data: MemoryData, firing_id: int, token: str, states: tuple[str, ...] = ("running",)
) -> FiringRow | None:
    f = data.firings.get(firing_id)
    if f is None or f.state not in states or f.claim_token != token:
        return None
    return f


def heartbeat(data: MemoryData, claims: Iterable[tuple[int, str]], now: int) -> set[int]:
    lost: set[int] = set()
    for firing_id, token in claims:
        f = _held(data, firing_id, token, HELD)
        if f is None:
            lost.add(firing_id)
        else:
            f.lease_until = now + f.visibility_us
    return lost


def complete(data: MemoryData, completions: Sequence[Completion]) -> list[bool]:
    """Each outcome a compare-and-swap on (RUNNING, claim token). Successes are applied
    first, then the others in order (as SQLite's batch of successes, then the rest)."""
    done: set[tuple[int, str]] = set()
    for c in completions:
        if c.succeeded and not c.cancelled:
            f = _held(data, c.firing_id, c.claim_token)
            if f is not None:
                f.state = "succeeded"
                f.started_at = to_us(c.started_at)
                f.finished_at = to_us(c.finished_at)
                f.lease_until = None
                f.error = None  # the claim token stays: the attempt that succeeded
                done.add((c.firing_id, c.claim_token))
    accepted: list[bool] = []
    for c in completions:
        if c.succeeded and not c.cancelled:
            accepted.append((c.firing_id, c.claim_token) in done)
            continue
        f = _held(data, c.firing_id, c.claim_token)
        if f is None:
            accepted.append(False)
            continue
        f.started_at = to_us(c.started_at)
        f.claim_token = None
        f.lease_until = None
        f.error = c.error
        retry = c.retry_at is not None and f.attempt < f.max_attempts
        if c.cancelled or (retry and f.cancel_requested_at is not None):
            # stopped on the request, or failed after it: a cancelled firing is not retried
            if not c.cancelled:
                _record_attempt(data, f, to_us(c.finished_at), "failed", c.error)
            f.state = "cancelled"
            f.finished_at = to_us(c.finished_at)
            if f.reason is None:
                f.reason = HANDLER_STOPPED if c.cancelled else FAILED_AFTER_CANCEL
        elif retry:
            assert c.retry_at is not None
            _record_attempt(data, f, to_us(c.finished_at), "failed", c.error)
            retry_at = to_us(c.retry_at)
            f.state = "queued"
            f.vdeadline = retry_at + (f.vdeadline - f.due_at)
            f.due_at = retry_at
            f.finished_at = None
        else:
            _record_attempt(data, f, to_us(c.finished_at), "failed", c.error)
            f.state = "dead"
            f.finished_at = to_us(c.finished_at)
        accepted.append(True)
    return accepted


def requeue_expired(data: MemoryData, now: int, limit: int) -> int:
    """The reaper's three passes, each bounded by ``limit`` (see Store.requeue_expired)."""
    expired = sorted(
        (
            f
            for f in data.active()
            if f.state in HELD and f.lease_until is not None and f.lease_until < now
        ),
        key=lambda f: (f.lease_until or 0, f.id),
    )[:limit]
    for f in expired:
        if f.state == "claimed":
            # held, never started: back to the queue as it was, its attempt given back
            f.state = "queued"
            f.attempt -= 1
            f.claim_token = None
            f.lease_until = None
            f.claimed_at = None
            continue
        _record_attempt(data, f, now, "lease_expired", "lease expired")
        # asked to stop and its worker gone before the handler did: the cancel is
        # honoured (CANCELLED, never run again); else queued again, or dead when its
        # attempts are used up
        cancelled = f.cancel_requested_at is not None
        final = cancelled or f.attempt >= f.max_attempts
        f.state = "cancelled" if cancelled else "dead" if final else "queued"
        f.finished_at = now if final else None
        f.vdeadline = now + (f.vdeadline - f.due_at)
        f.due_at = f.due_at if final else now
        f.claim_token = None
        f.lease_until = None
        f.claimed_at = None
        f.error = LEASE_EXPIRED.format(f.worker_id or "?")
        if cancelled and f.reason is None:
            f.reason = WORKER_GONE
    n = len(expired)
    graced = [
        f
        for f in data.active()
        if f.state == "running"
        and f.cancel_requested_at is not None
        and f.cancel_requested_at + data.jobs[f.job_id].cancel_grace_us < now
    ][:limit]
    for f in graced:
        _revoke(f, now, GRACE_EXPIRED)
    n += len(graced)
    late = [
        f
        for f in data.active()
        if f.state == "queued"
        and (deadline := data.jobs[f.job_id].start_deadline_us) is not None
        and f.due_at < now - deadline
    ][:limit]
    for f in late:
        f.state = "missed"
        f.finished_at = now
        f.reason = START_DEADLINE
    return n + len(late)


# -- operators -------------------------------------------------------------------------------
def cancel(f: FiringRow, now: int) -> str:
    """QUEUED or CLAIMED: CANCELLED at once (a held one's worker learns it from its
    cancel_requested poll, and its start fails); RUNNING: a cooperative request; final:
    left alone."""
    if f.state in ("scheduled", "queued", "claimed"):
        if f.state == "claimed":
            f.cancel_requested_at = now
        f.state = "cancelled"
        f.finished_at = now
        f.claim_token = None
        f.lease_until = None
        return "cancelled"
    if f.state == "running":
        _request_cancel(f, now)
        return "cancel_requested"
    return "already_final"


def skip(f: FiringRow, reason: str, now: int) -> str:
    """An operator's skip: QUEUED or CLAIMED -> SKIPPED at once (as cancel: a held one's
    start fails, its worker lets it go on its cancel poll); SKIPPED already:
    "already_skipped"; anything else is refused and left alone."""
    if f.state == "skipped":
        return "already_skipped"
    if f.state not in ("queued", "claimed"):
        return "refused"
    f.cancel_requested_at = now if f.state == "claimed" else None
    f.state = "skipped"
    f.reason = reason
    f.finished_at = now
    f.claim_token = None
    f.lease_until = None
    return "skipped"


def redrive(data: MemoryData, f: FiringRow, now: int) -> bool:
    """DEAD -> QUEUED due now with a fresh attempt budget; False for any other state."""
    if f.state != "dead":
        return False
    f.state = "queued"
    f.vdeadline = now + (f.vdeadline - f.due_at)
    f.due_at = now
    f.max_attempts = f.attempt + data.jobs[f.job_id].max_attempts
    f.cancel_requested_at = None  # a fresh start: an old attempt's cancel request is spent
    data.maybe_active.add(f.id)
    f.finished_at = None
    f.claimed_at = None
    f.claim_token = None
    f.lease_until = None
    return True
