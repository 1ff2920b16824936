"""Skipping one occurrence of a job without pausing it.

A skip names occurrences of the job's schedule (computed with its zone and DST
policy, within its ``start_at``/``end_at`` bounds): ``at`` instants that must each be
an occurrence, or the ``next`` N from now. The store then records each as a SKIPPED
firing (``reason`` = "skipped by <who>: <why>"), ahead of the leader's enqueue, whose
later insert of that instant is a duplicate; a QUEUED or held (CLAIMED) firing of it
becomes SKIPPED at once; a RUNNING or finished one is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cronwheel.domain.firing import FiringState, format_instant
from cronwheel.domain.models import JobSpec
from cronwheel.domain.schedules import LISTING_STEPS, AtSchedule, NowSchedule, next_after_within
from cronwheel.domain.transitions import StepBudget
from cronwheel.errors import ValidationError

MAX_SKIP = 100  # occurrences one request may skip
MAX_REASON = 500  # characters of a skip's "why"
SKIP_OUTCOMES = ("skipped", "already_skipped", "refused")
OPERATOR_SKIP = "skipped by "  # how an operator's skip reason starts (explain shows it)


@dataclass(frozen=True, slots=True, kw_only=True)
class SkipResult:
    """What a skip did to one occurrence."""

    at: datetime
    outcome: str  # "skipped" | "already_skipped" | "refused"
    state: FiringState | None  # the firing's state after the call (refused: why)
    firing_id: int | None

    def to_dict(self) -> dict[str, object]:
        return {
            "at": format_instant(self.at),
            "outcome": self.outcome,
            "state": None if self.state is None else self.state.value,
            "firing_id": self.firing_id,
        }


def skip_reason(who: str, why: str | None) -> str:
    """The reason a skipped occurrence carries: who asked and why."""
    why = (why or "").strip()
    if len(why) > MAX_REASON:
        raise ValidationError(f"must be at most {MAX_REASON} characters", field="reason")
    return f"{OPERATOR_SKIP}{who}: {why}" if why else f"{OPERATOR_SKIP}{who}"


def is_occurrence(spec: JobSpec, t: datetime) -> bool:
    """Whether ``t`` is an instant the job's schedule fires at, within its bounds."""
    if spec.start_at is not None and t < spec.start_at:
        return False
    if spec.end_at is not None and t > spec.end_at:
        return False
    schedule = spec.schedule
    if isinstance(schedule, NowSchedule):
        return False  # fired at registration: nothing left to skip
    if isinstance(schedule, AtSchedule):
        return schedule.at == t
    try:
        return schedule.next_after(t - timedelta(microseconds=1)) == t
    except OverflowError:  # the first representable instant: no schedule fires there
        return False


def occurrences_to_skip(
    spec: JobSpec,
    *,
    now: datetime,
    at: Sequence[datetime] | None = None,
    next_n: int | None = None,
) -> list[datetime]:
    """The instants a skip request names, checked: exactly one of ``at`` (each an
    occurrence of the schedule; field ``at``) and ``next_n`` (1..MAX_SKIP; field
    ``next``). Sorted, without repeats."""
    if (at is None) == (next_n is None):
        raise ValidationError("give either at or next, not both", field="at")
    if at is not None:
        if not at:
            raise ValidationError("name at least one occurrence", field="at")
        if len(at) > MAX_SKIP:
            raise ValidationError(f"at most {MAX_SKIP} occurrences at once", field="at")
        for t in at:
            if t.tzinfo is None:
                raise ValidationError("instants need a UTC offset", field="at")
            if not is_occurrence(spec, t):
                raise ValidationError(
                    f"{format_instant(t)} is not an occurrence of this job's schedule",
                    field="at",
                )
        return sorted({t.astimezone(UTC) for t in at})
    assert next_n is not None
    if isinstance(next_n, bool) or not isinstance(next_n, int) or not 1 <= next_n <= MAX_SKIP:
        raise ValidationError(f"must be an integer from 1 to {MAX_SKIP}", field="next")
    out: list[datetime] = []
    cursor = now if spec.start_at is None else max(now, spec.start_at - timedelta(microseconds=1))
    schedule = spec.schedule
    next_after = next_after_within(schedule, StepBudget(LISTING_STEPS))  # one bound for all
    while len(out) < next_n:
        if isinstance(schedule, NowSchedule):
            break
        try:
            nxt = next_after(cursor)
        except OverflowError:  # past the last representable instant
            nxt = None
        if nxt is None or (spec.end_at is not None and nxt > spec.end_at):
            break
        out.append(nxt)
        cursor = nxt
    if not out:
        raise ValidationError("the job has no occurrence left to skip", field="next")
    return out
