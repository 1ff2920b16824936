"""The overlap decision table (pure); the stores apply it at claim time."""

from __future__ import annotations

import pytest

from cronwheel.domain.overlap import OverlapPolicy, decide_overlap

P = OverlapPolicy


def d(
    policy: P,
    running: int,
    due: list[str],
    *,
    cap: int | None = 1,
    room: int = 10,
    max_buffer: int = 100,
):
    return decide_overlap(
        policy, max_concurrency=cap, running=running, due=due, room=room, max_buffer=max_buffer
    )


def test_free_slot_claims_oldest_first() -> None:
    r = d(P.SKIP, 0, ["a", "b"], cap=2)
    assert r.claim == ["a", "b"] and r.skip == []


@pytest.mark.parametrize(
    ("policy", "claim", "skipped"),
    [
        (P.SKIP, [], ["a", "b", "c"]),
        (P.BUFFER_ONE, [], ["b", "c"]),
        (P.BUFFER_ALL, [], []),
        (P.ALLOW, ["a", "b", "c"], []),
    ],
)
def test_at_cap(policy: P, claim: list[str], skipped: list[str]) -> None:
    r = d(policy, 1, ["a", "b", "c"])
    assert r.claim == claim
    assert [k for k, _ in r.skip] == skipped
    assert not r.cancel_running and not r.terminate_running


def test_buffer_all_overflow_is_recorded_with_a_reason() -> None:
    r = d(P.BUFFER_ALL, 1, ["a", "b", "c", "d"], max_buffer=2)
    assert [k for k, _ in r.skip] == ["c", "d"]
    assert all("buffer full" in reason for _, reason in r.skip)


def test_starting_one_fills_the_cap_and_the_policy_applies_to_the_rest() -> None:
    assert [k for k, _ in d(P.SKIP, 0, ["a", "b"]).skip] == ["b"]
    assert d(P.SKIP, 0, ["a", "b"]).claim == ["a"]
    assert d(P.BUFFER_ONE, 0, ["a", "b", "c"]).claim == ["a"]
    assert [k for k, _ in d(P.BUFFER_ONE, 0, ["a", "b", "c"]).skip] == ["c"]


def test_no_room_in_the_worker_skips_nothing_while_below_cap() -> None:
    r = d(P.SKIP, 0, ["a", "b"], cap=3, room=0)
    assert r.claim == [] and r.skip == []


def test_cancel_other_requests_cancel_and_keeps_the_newest() -> None:
    r = d(P.CANCEL_OTHER, 1, ["a", "b"])
    assert r.cancel_running and not r.terminate_running
    assert r.claim == [] and [k for k, _ in r.skip] == ["a"]


def test_terminate_other_revokes_and_starts_the_newest_now() -> None:
    r = d(P.TERMINATE_OTHER, 1, ["a", "b"])
    assert r.terminate_running and r.claim == ["b"] and [k for k, _ in r.skip] == ["a"]


def test_unlimited_cap_behaves_as_allow() -> None:
    assert d(P.SKIP, 50, ["a"], cap=None).claim == ["a"]


def _cand(i: int, job: int, *, cap: int | None = 1, overlap: str = "buffer_all"):
    from cronwheel.store.claiming import Candidate

    return Candidate(id=i, job_id=job, max_concurrency=cap, overlap=overlap, max_buffer=100)


def test_plan_marks_buffered_only_what_a_cap_holds_back() -> None:
    from cronwheel.store.claiming import plan_claim

    # job 1 has 2 due (cap 1: one runs, one waits for the cap); jobs 2-4 have one due
    # each but the claim has room for 2 in all: 3 and 4 wait for a worker, not a cap
    cands = [_cand(10, 1), _cand(20, 2), _cand(30, 3), _cand(40, 4)]
    plan = plan_claim(
        cands,
        limit=2,
        running={},
        due_by_job={1: [10, 11], 2: [20], 3: [30], 4: [40]},
    )
    assert plan.claim == [10, 20]
    assert plan.buffered == [11]
    assert plan.skip == []


def test_plan_marks_a_capped_jobs_due_firings_buffered_when_it_is_at_its_cap() -> None:
    from cronwheel.store.claiming import plan_claim

    plan = plan_claim([_cand(10, 1)], limit=5, running={1: 1}, due_by_job={1: [10, 11]})
    assert plan.claim == []
    assert plan.buffered == [10, 11]
