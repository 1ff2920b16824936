"""worker/executing.py: a handler of a job waits for this worker's revoked handlers of
that job to stop executing (the local half of the job's cap)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import ClaimedFiring, Firing, FiringId, JobPolicies
from cronwheel.worker.executing import Executing

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def claim(firing_id: int, job_id: int = 1) -> ClaimedFiring:
    firing = Firing(
        id=FiringId(firing_id),
        job_id=job_id,  # type: ignore[arg-type]
        job_name=f"job{job_id}",
        namespace="default",
        task="t",
        args=(),
        kwargs={},
        scheduled_for=T0,
        due_at=T0,
        state=FiringState.RUNNING,
        attempt=1,
        max_attempts=3,
        priority=1.0,
        enqueued_at=T0,
        enqueued_epoch=None,
    )
    return ClaimedFiring(
        firing=firing,
        claim_token=f"tok{firing_id}",
        lease_until=T0 + timedelta(30),
        policies=JobPolicies(),
    )


class Store:
    """The heartbeat's answer: the claims in ``revoked`` are lost."""

    def __init__(self, revoked: set[int]) -> None:
        self.revoked = revoked
        self.asked: list[list[tuple[FiringId, str]]] = []

    async def __call__(self, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        self.asked.append(list(claims))
        return {fid for fid, _ in claims if fid in self.revoked}


def test_a_revoked_handler_is_stopped_and_waited_for() -> None:
    async def scenario() -> None:
        store = Store(revoked={1})
        ex = Executing(store)
        stopped: list[str] = []
        with ex.executing(claim(1), stopped.append) as old:
            turn = asyncio.ensure_future(ex.wait_turn(claim(2)))
            await asyncio.sleep(0.05)
            assert store.asked == [[(1, "tok1")]]
            assert stopped == ["revoked: a newer firing of its job took its place"]
            assert not turn.done()  # the old handler still executes
            ex.ended(old)
            await asyncio.wait_for(turn, 1)
        assert ex.count(1) == 0

    asyncio.run(scenario())


def test_a_live_handler_of_the_job_or_another_job_does_not_hold_a_firing_back() -> None:
    async def scenario() -> None:
        store = Store(revoked=set())
        ex = Executing(store)
        stopped: list[str] = []
        with (
            ex.executing(claim(1), stopped.append),
            ex.executing(claim(5, job_id=2), stopped.append),
        ):
            await asyncio.wait_for(ex.wait_turn(claim(2)), 1)  # the store still counts 1
            assert store.asked == [[(1, "tok1")]]  # only the job's own handlers are asked about
            assert stopped == []

    asyncio.run(scenario())


def test_a_handler_given_up_while_its_code_runs_is_a_zombie_until_it_returns() -> None:
    """A thread past its timeout: the attempt ended, the code did not."""

    async def scenario() -> None:
        ex = Executing(Store(revoked=set()))
        with ex.executing(claim(1), lambda _: None) as given_up:
            pass
        assert given_up.zombie and ex.count(1) == 1
        turn = asyncio.ensure_future(ex.wait_turn(claim(2)))
        await asyncio.sleep(0.05)
        assert not turn.done()
        ex.ended(given_up)
        await asyncio.wait_for(turn, 1)
        # revoke() from the heartbeat loop stops a handler by firing id
        stops: list[str] = []
        with ex.executing(claim(3), stops.append) as h:
            ex.revoke(FiringId(3), None, "lost")
            assert h.zombie and stops == ["lost"]
            ex.ended(h)

    asyncio.run(scenario())


def test_a_cancel_ends_the_wait() -> None:
    """A firing cancelled while it waits for a zombie of its job: its handler is not
    called (the worker records it CANCELLED), so it need not wait any longer."""
    from cronwheel.worker.context import make_context

    async def scenario() -> None:
        ex = Executing(Store(revoked=set()))
        with ex.executing(claim(1), lambda _: None) as stuck:
            pass  # given up; its code runs on
        waiting = claim(2)
        ctx = make_context(waiting.firing, waiting.claim_token, "w")
        turn = asyncio.ensure_future(ex.wait_turn(waiting, ctx))
        await asyncio.sleep(0.05)
        assert not turn.done()
        ctx.request_cancel()
        await asyncio.wait_for(turn, 1)
        assert not stuck.ended.is_set()

    asyncio.run(scenario())
