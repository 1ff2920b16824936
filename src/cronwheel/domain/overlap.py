"""Overlap policy: what happens to a firing that becomes due while its job is at its
concurrency cap (``max_concurrency`` firings already RUNNING). Decided atomically at
claim time by the store, across all workers and hosts, with this pure function.

- ``skip`` (default, as Temporal): the new firing is recorded SKIPPED.
- ``buffer_one``: keep at most one pending firing (the first); later ones are SKIPPED.
  The buffered one starts when a slot frees.
- ``buffer_all``: keep every pending firing, FIFO, up to ``max_buffer``; the overflow
  is recorded SKIPPED with the reason "buffer full" (never silent).
- ``cancel_other``: request cooperative cancellation of the running firing(s); the
  newest pending firing starts once they end (older pending ones are SKIPPED as
  superseded).
- ``terminate_other``: revoke the running firing(s) at once (they become CANCELLED
  and their workers' late results are rejected); the newest pending firing starts
  now.
- ``allow``: no cap at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, TypeVar

K = TypeVar("K")


class OverlapPolicy(StrEnum):
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    BUFFER_ALL = "buffer_all"
    CANCEL_OTHER = "cancel_other"
    TERMINATE_OTHER = "terminate_other"
    ALLOW = "allow"


@dataclass(frozen=True, slots=True, kw_only=True)
class OverlapDecision(Generic[K]):
    claim: list[K] = field(default_factory=list)
    skip: list[tuple[K, str]] = field(default_factory=list)
    cancel_running: bool = False
    terminate_running: bool = False


def due_room(
    policy: OverlapPolicy, *, max_concurrency: int | None, max_buffer: int = 100
) -> int | None:
    """How many firings of a job falling due together its cap lets run or wait
    (``max_concurrency`` plus the buffer); None when none of them is displaced in
    favour of an older one (no cap, ``allow``, or a newest-wins policy)."""
    if max_concurrency is None or policy in (
        OverlapPolicy.ALLOW,
        OverlapPolicy.CANCEL_OTHER,
        OverlapPolicy.TERMINATE_OTHER,
    ):
        return None
    buffer = {OverlapPolicy.BUFFER_ONE: 1, OverlapPolicy.BUFFER_ALL: max_buffer}.get(policy, 0)
    return max_concurrency + buffer


def decide_overlap(
    policy: OverlapPolicy,
    *,
    max_concurrency: int | None,
    running: int,
    due: Sequence[K],
    room: int,
    max_buffer: int = 100,
) -> OverlapDecision[K]:
    """Decide for one job. ``due`` are its QUEUED firings that are due now, oldest
    first; ``room`` is how many more firings the claiming worker can take."""
    if policy is OverlapPolicy.ALLOW or max_concurrency is None:
        return OverlapDecision(claim=list(due[: max(room, 0)]))
    if not due:
        return OverlapDecision()
    if policy in (OverlapPolicy.CANCEL_OTHER, OverlapPolicy.TERMINATE_OTHER):
        newest, older = due[-1], due[:-1]
        skipped = [(k, "superseded by a newer firing (overlap: newest wins)") for k in older]
        if running >= max_concurrency:
            if policy is OverlapPolicy.TERMINATE_OTHER:
                claim = [newest] if room > 0 else []
                return OverlapDecision(claim=claim, skip=skipped, terminate_running=True)
            return OverlapDecision(skip=skipped, cancel_running=True)
        return OverlapDecision(claim=[newest] if room > 0 else [], skip=skipped)

    free = max_concurrency - running
    claim = list(due[: max(0, min(free, room))])
    rest = list(due[len(claim) :])
    if running + len(claim) < max_concurrency:
        return OverlapDecision(claim=claim)  # not at cap: the rest waits for a worker
    if policy is OverlapPolicy.SKIP:
        keep = 0
    elif policy is OverlapPolicy.BUFFER_ONE:
        keep = 1
    else:
        keep = max_buffer
    reason = (
        "job at its concurrency cap (overlap: skip)"
        if policy is OverlapPolicy.SKIP
        else f"buffer full (overlap: {policy.value})"
    )
    return OverlapDecision(claim=claim, skip=[(k, reason) for k in rest[keep:]])
