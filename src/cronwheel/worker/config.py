"""A worker's settings, its counters, its id and which claims a heartbeat renews."""

from __future__ import annotations

import os
import socket
import uuid
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from cronwheel.domain.clock import ClockBounds
from cronwheel.domain.models import ClaimedFiring, FiringId, NodeInfo
from cronwheel.domain.tzdb import tz_database
from cronwheel.errors import ValidationError

# a worker's default concurrency (WorkerConfig.concurrency), also the CLI's and serve()'s
DEFAULT_CONCURRENCY = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    # Handlers run at once. Each store call of a worker (a claim carrying outcomes, a
    # start of held firings) takes at most the slots its handlers free, so this also
    # sizes every batch, and the CPU a firing costs the worker and the database falls
    # as it grows (`cronwheel bench drain`, PostgreSQL, 2 workers: 351-365 µs a job at
    # 16, 272 at 32, 214-227 at 64, 206 at 128; docs/benchmarks.md). 64 is where that
    # curve flattens. Sync handlers get a thread each (~15 kB of RSS); a job's own
    # `max_concurrency` still bounds its firings; lower it for handlers that share a
    # small resource (a connection pool).
    concurrency: int = DEFAULT_CONCURRENCY
    prefetch: timedelta = timedelta(milliseconds=2000)
    poll_interval: timedelta = timedelta(seconds=1)
    heartbeat_interval: timedelta = timedelta(seconds=2)
    node_heartbeat: timedelta = timedelta(seconds=2)
    flush_interval: timedelta = timedelta(milliseconds=5)
    flush_batch: int = 500
    # claims held beyond `concurrency` for firings not yet due (a crowd before its
    # instant). They are leases like any other: renewed while held, and recovered by
    # the reaper after the visibility timeout if this worker dies.
    early_claims: int = 5000
    claim_ahead_window: timedelta = timedelta(milliseconds=50)
    # where handlers run unless their task says (``@app.task(isolation=...)``): "auto"
    # in-process (a sync handler in a thread, an async one on the loop), "process" in a
    # child process the worker can kill (worker/processes.py)
    isolation: Literal["auto", "process"] = "auto"
    # a child process that was sent SIGTERM (stopped: revoked, timed out, cancel grace
    # passed) and still runs after this long is sent SIGKILL
    kill_grace: timedelta = timedelta(seconds=5)
    # the worker acts on the store's clock (domain/clock.py StoreClock): it measures its
    # offset to it every `clock_sample_interval`, and claims nothing while that offset
    # or its uncertainty is past `clock_bounds` (it is flagged)
    clock_bounds: ClockBounds = field(default_factory=ClockBounds)
    clock_sample_interval: timedelta = timedelta(seconds=1)

    def __post_init__(self) -> None:
        if self.isolation not in ("auto", "process"):
            raise ValidationError("must be auto or process", field="isolation")
        if not isinstance(self.kill_grace, timedelta) or self.kill_grace < timedelta(0):
            raise ValidationError("must be a non-negative duration", field="kill_grace")
        interval = self.clock_sample_interval
        if not isinstance(interval, timedelta) or interval <= timedelta(0):
            raise ValidationError("must be a positive duration", field="clock_sample_interval")


@dataclass(slots=True)
class WorkerStats:
    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    rejected: int = 0  # completions refused: the claim was lost (zombie)
    lost_claims: int = 0
    # the most recent first attempts' lateness (bounded: a worker runs for months)
    lateness_ms: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))


def make_worker_id() -> str:
    return f"worker:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def finished_within(finished: deque[float], since: float) -> int:
    """How many of the finish instants (oldest first) are at or after ``since``."""
    n = 0
    for t in reversed(finished):
        if t < since:
            break
        n += 1
    return n


def worker_node(worker_id: str, tasks: list[str], config: WorkerConfig, now: datetime) -> NodeInfo:
    """The node registry's row of a worker starting now (its tasks: what it serves; the
    tz database it computes instants with)."""
    tzdb = tz_database()
    return NodeInfo(
        id=worker_id,
        kind="worker",
        hostname=socket.gethostname(),
        pid=os.getpid(),
        started_at=now,
        heartbeat_at=now,
        info={"tasks": tasks, "concurrency": config.concurrency},
        tz_source=tzdb.source,
        tz_version=tzdb.version,
    )


def renewal_at(claim: ClaimedFiring, renewed_at: float) -> float:
    """When a claim is renewed: a third of its visibility timeout after it was taken or
    last renewed (``renewed_at``, monotonic)."""
    return renewed_at + claim.policies.visibility_timeout.total_seconds() / 3


def renewals(
    active: Mapping[FiringId, tuple[ClaimedFiring, Any]],
    held: Collection[tuple[FiringId, str]],
    renewed: Mapping[FiringId, float],
    until: float,
) -> list[tuple[FiringId, str]]:
    """The claims a heartbeat renews: every started one (its renewal is also how the
    worker learns that a claim was revoked, and stops its handler), and each held one
    (CLAIMED: waiting for its instant or a slot) whose renewal (``renewal_at``) is due
    before ``until``, the next beat. A crowd held ahead of its instant is not rewritten
    at every beat: its thousands of rows, locked by the heartbeat, held up their own
    starts at the instant."""
    return [
        (fid, claim.claim_token)
        for fid, (claim, _) in active.items()
        if (fid, claim.claim_token) not in held
        or fid not in renewed
        or renewal_at(claim, renewed[fid]) <= until
    ]
