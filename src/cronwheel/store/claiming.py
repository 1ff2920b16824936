"""Claim planning shared by both stores: which queued firings a worker takes now,
and what the overlap policy does with the rest. Pure: the store gathers the facts
inside its claim transaction (candidates in virtual-deadline order, each capped
job's RUNNING count and its due QUEUED firings oldest first, all under the locks
that make the decision atomic) and applies the plan in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Generic, TypeVar

from cronwheel.domain.overlap import OverlapPolicy, decide_overlap
from cronwheel.store.codec import Row

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
J = TypeVar("J", bound=Hashable)


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate(Generic[K, J]):
    id: K
    job_id: J
    max_concurrency: int | None  # None: no cap
    overlap: str
    max_buffer: int
    overlap_override: str | None = None
    deadline_passed: bool = False  # its start deadline is behind us


@dataclass(slots=True)
class ClaimPlan(Generic[K, J]):
    claim: list[K] = field(default_factory=list)
    skip: list[tuple[K, str]] = field(default_factory=list)
    missed: list[tuple[K, str]] = field(default_factory=list)
    # due firings kept waiting by their job's cap: marked so the next scans pass over
    # them while their job stays at its cap (otherwise a deep buffer fills the scan window and
    # starves every other job's due work)
    buffered: list[K] = field(default_factory=list)
    cancel_running: set[J] = field(default_factory=set)
    terminate_running: set[J] = field(default_factory=set)


def candidates_from_rows(
    rows: Iterable[Row], is_early: Callable[[Row], bool]
) -> tuple[list[Candidate[int, int]], list[Candidate[int, int]]]:
    """Claim candidates from a SQL store's candidate rows, and apart the capped jobs'
    firings not yet due (``is_early``): those are decided at their instant, not early."""
    candidates: list[Candidate[int, int]] = []
    early: list[Candidate[int, int]] = []
    for r in rows:
        c: Candidate[int, int] = Candidate(
            id=r["id"],
            job_id=r["job_id"],
            max_concurrency=r["max_concurrency"],
            overlap=r["overlap"],
            max_buffer=r["max_buffer"],
            overlap_override=r["overlap_override"],
            deadline_passed=bool(r["deadline_passed"]),
        )
        (early if capped(c) and is_early(r) else candidates).append(c)
    return candidates, early


def capped(c: Candidate[K, J]) -> bool:
    policy = c.overlap_override or c.overlap
    return c.max_concurrency is not None and policy != OverlapPolicy.ALLOW.value


def plan_claim(
    candidates: Sequence[Candidate[K, J]],
    *,
    limit: int,
    running: Mapping[J, int],
    due_by_job: Mapping[J, Sequence[K]],
    early: Sequence[Candidate[K, J]] = (),
) -> ClaimPlan[K, J]:
    """``candidates`` (due now) in claim order (virtual deadline). ``due_by_job``: for
    each capped job among them, its due QUEUED firings oldest first (those this
    claimer holds). ``early``: capped firings not yet due (prefetch window), oldest
    first: one is taken only while its job is below its cap and has nothing due —
    otherwise its fate is decided at its instant."""
    plan: ClaimPlan[K, J] = ClaimPlan()
    room = limit
    decided: set[J] = set()
    handled: set[K] = set()
    started: dict[J, int] = {}  # claimed in this plan, per job: they count as running
    for c in candidates:
        if c.id in handled:
            continue
        if c.deadline_passed:
            plan.missed.append((c.id, "start deadline passed before a worker could start it"))
            handled.add(c.id)
            continue
        if c.overlap_override is not None:
            # a manual trigger/backfill with its own overlap policy: decided on its own
            d = decide_overlap(
                OverlapPolicy(c.overlap_override),
                max_concurrency=c.max_concurrency,
                running=running.get(c.job_id, 0) + started.get(c.job_id, 0),
                due=[c.id],
                room=room,
                max_buffer=c.max_buffer,
            )
        elif not capped(c):
            if room > 0:
                plan.claim.append(c.id)
                room -= 1
            handled.add(c.id)
            continue
        else:
            if c.job_id in decided:
                continue
            decided.add(c.job_id)
            due = [k for k in due_by_job.get(c.job_id, [c.id]) if k not in handled]
            d = decide_overlap(
                OverlapPolicy(c.overlap),
                max_concurrency=c.max_concurrency,
                running=running.get(c.job_id, 0) + started.get(c.job_id, 0),
                due=due,
                room=room,
                max_buffer=c.max_buffer,
            )
        plan.claim.extend(d.claim)
        room -= len(d.claim)
        started[c.job_id] = started.get(c.job_id, 0) + len(d.claim)
        plan.skip.extend(d.skip)
        handled.update(d.claim)
        handled.update(k for k, _ in d.skip)
        considered = due if c.overlap_override is None else [c.id]
        decided_ids = set(d.claim) | {k for k, _ in d.skip}
        cap = c.max_concurrency
        if cap is not None and running.get(c.job_id, 0) + started[c.job_id] >= cap:
            # kept waiting by the cap; a firing left only because this claim is full
            # is not marked (marking it was a write per firing beyond the claim's room)
            plan.buffered.extend(k for k in considered if k not in decided_ids)
        handled.update(considered)
        if d.cancel_running:
            plan.cancel_running.add(c.job_id)
        if d.terminate_running:
            plan.terminate_running.add(c.job_id)
    for c in early:
        if room <= 0:
            break
        if c.job_id in decided or due_by_job.get(c.job_id):
            continue
        cap = c.max_concurrency or 0
        if running.get(c.job_id, 0) + started.get(c.job_id, 0) < cap:
            plan.claim.append(c.id)
            room -= 1
            started[c.job_id] = started.get(c.job_id, 0) + 1
    return plan


@dataclass(frozen=True, slots=True)
class ClaimAsk:
    """What a worker asks of a claim: up to ``limit`` queued firings of ``tasks`` due
    within ``prefetch``, for ``worker_id``; the first ``start`` of them (None: all)
    that are due start at once (RUNNING), the rest are held (CLAIMED)."""

    worker_id: str
    tasks: tuple[str, ...]
    limit: int
    prefetch: timedelta
    start: int | None = None

    @property
    def starts(self) -> int:
        """How many of the claim's first firings may start at once."""
        return self.limit if self.start is None else min(self.start, self.limit)

    @property
    def wants(self) -> bool:
        return self.limit > 0 and bool(self.tasks)


def within_room(
    found: Sequence[T], room: Callable[[str], int], namespace_of: Callable[[T], str]
) -> list[T]:
    """The running quota: of the candidates ``found`` (in claim order), those their
    namespace has room for (``room(namespace)``: its running quota less the firings it
    holds); the others are left QUEUED, to be claimed when the namespace's held
    firings finish."""
    left: dict[str, int] = {}
    kept: list[T] = []
    for item in found:
        namespace = namespace_of(item)
        if namespace not in left:
            left[namespace] = room(namespace)
        if left[namespace] > 0:
            left[namespace] -= 1
            kept.append(item)
    return kept
