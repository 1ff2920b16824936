"""The checker must see what it is for: a checker that never fails proves nothing.
Synthetic histories, no database, no processes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cronwheel import every
from cronwheel.domain.firing import idempotency_key
from tests.faults.ledger import AcquiredEvent, Expectation, LeaseSample, check, check_epochs

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = timedelta(seconds=1)


class FakeConn:
    """Answers the checker's three queries from lists."""

    def __init__(self, firings: list[dict[str, Any]], effects: list[dict[str, Any]]) -> None:
        self.firings, self.effects = firings, effects

    def execute(self, sql: str) -> FakeConn:
        self._rows = (
            self.firings
            if "FROM firings" in sql
            else self.effects
            if "fault_effects" in sql
            else [{"id": 1, "next_fire_at": T0 + 10 * S}]
        )
        return self

    def fetchall(self) -> list[dict[str, Any]]:
        return self._rows

    def __iter__(self) -> Any:
        return iter(self._rows)


def firing(fid: int, t: datetime, state: str = "succeeded", epoch: int = 1) -> dict[str, Any]:
    return {
        "id": fid,
        "job_id": 1,
        "job_name": "tick",
        "scheduled_for": t,
        "state": state,
        "attempt": 1,
        "enqueued_epoch": epoch,
        "enqueued_at": t - S / 2,
        "worker_id": "w",
        "lease_until": None,
    }


def effect(t: datetime, pids: list[int]) -> dict[str, Any]:
    return {
        "key": idempotency_key(1, t),
        "runs": len(pids),
        "pids": pids,
        "attempts": list(range(1, len(pids) + 1)),
    }


def write_log(path: Path, ts: list[datetime]) -> Path:
    lines = [json.dumps({"phase": "done", "key": idempotency_key(1, t)}) for t in ts]
    path.write_text("".join(line + "\n" for line in lines))
    return path


EXP = Expectation(1, "tick", T0 + S, every("1s"), T0 + 3 * S)


def test_clean_history_is_clean(tmp_path: Path) -> None:
    ts = [T0 + k * S for k in (1, 2, 3, 4)]
    conn = FakeConn([firing(i, t) for i, t in enumerate(ts)], [effect(t, [10]) for t in ts])
    report = check(conn, write_log(tmp_path / "log", ts), [EXP])
    report.assert_clean()
    assert report.expected == 3


def test_lost_phantom_and_unexplained_duplicate_are_found(tmp_path: Path) -> None:
    ts = [T0 + S, T0 + 3 * S]  # T0+2s lost
    rows = [firing(1, ts[0]), firing(2, ts[1]), firing(3, T0 + 2.5 * S)]  # off-grid phantom
    effects = [effect(ts[0], [10, 11]), effect(ts[1], [10]), effect(T0 + 2.5 * S, [10])]
    report = check(FakeConn(rows, effects), write_log(tmp_path / "log", ts), [EXP])
    assert len(report.lost) == 1 and "never enqueued" in report.lost[0]
    assert len(report.phantom) == 1 and "off schedule" in report.phantom[0]
    assert len(report.bad_duplicates) == 1
    # the same duplicate is allowed once a run is on a worker the test disrupted
    report = check(FakeConn(rows, effects), tmp_path / "log", [EXP], disrupted_pids={11: "frozen"})
    assert report.bad_duplicates == [] and len(report.duplicate_executions) == 1


def test_duplicate_enqueue_is_found(tmp_path: Path) -> None:
    t = T0 + S
    conn = FakeConn([firing(1, t), firing(2, t)], [effect(t, [10])])
    report = check(conn, write_log(tmp_path / "log", [t]), [Expectation(1, "one", t)])
    assert len(report.duplicate_enqueues) == 1


def sample(epoch: int, holder: str, acquired: float, expires: float) -> LeaseSample:
    return LeaseSample(T0 + acquired * S, holder, epoch, T0 + acquired * S, T0 + expires * S)


def test_epoch_violations_are_found() -> None:
    samples = [sample(1, "a", 0, 2), sample(1, "a", 0, 3), sample(2, "b", 2.5, 4.5)]
    assert check_epochs([firing(1, T0 + 2 * S, epoch=1)], samples, []) != []  # overlap
    ok = [sample(1, "a", 0, 2), sample(2, "b", 2.5, 4.5)]
    assert check_epochs([firing(1, T0 + S, epoch=1)], ok, []) == []
    # a firing of epoch 1 enqueued after epoch 2 began (fencing failed)
    assert check_epochs([firing(1, T0 + 3.5 * S, epoch=1)], ok, [])
    # an acquisition nobody wrote to the lease row
    ghost = AcquiredEvent(T0 + 3 * S, "c", 2, "s-c")
    assert check_epochs([], ok, [ghost])
    # epochs going back in acquisition order
    events = [AcquiredEvent(T0, "a", 2, "s-a"), AcquiredEvent(T0 + S, "b", 1, "s-b")]
    assert check_epochs([], [], events)


def test_one_holder_renewing_into_a_new_timeline_term_is_not_two_leaders() -> None:
    """After a failover the leader renews into a term of the new PostgreSQL timeline
    while its old term is still valid: one holder, not two leaders. Two holders with
    overlapping terms stay a violation."""
    tl1, tl2 = (1 << 32) + 5, (2 << 32) + 1
    renewed = [sample(tl1, "a", 0, 3), sample(tl2, "a", 2, 5)]
    assert check_epochs([], renewed, []) == []
    taken = [sample(tl1, "a", 0, 3), sample(tl2, "b", 2, 5)]
    assert check_epochs([], taken, []) != []
