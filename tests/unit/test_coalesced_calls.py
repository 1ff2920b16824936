"""Concurrent reads sent as one statement (store/coalesced.py): each read is sent after it
was asked and answered with its own key; at most ``flights`` statements in flight; a
failure is each of its reads' failure; a caller that went away does not stall the
others. Driven on a real event loop by a fetch the test controls (no timing)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from cronwheel.store.coalesced import Coalesced


class Db:
    """A table the test changes, and every statement sent to it: its keys, and whether
    it answered already. A statement waits for ``gate`` when one is set."""

    def __init__(self, rows: dict[int, str]) -> None:
        self.rows = rows
        self.sent: list[list[int]] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.gate: asyncio.Event | None = None
        self.fail: Exception | None = None

    async def fetch(self, keys: Sequence[int]) -> Mapping[int, str]:
        self.sent.append(list(keys))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            answer = {k: self.rows[k] for k in keys if k in self.rows}  # read when sent
            if self.gate is not None:
                await self.gate.wait()
            if self.fail is not None:
                raise self.fail
            return answer
        finally:
            self.in_flight -= 1


def run(body: Any) -> Any:
    return asyncio.run(asyncio.wait_for(body(), 10))


def test_reads_asked_together_go_as_one_statement_each_with_its_own_answer() -> None:
    db = Db({1: "a", 2: "b", 3: "c"})

    async def body() -> list[str | None]:
        reads = Coalesced(db.fetch)
        return await asyncio.gather(*(reads.get(k) for k in (3, 1, 9, 1, 2)))

    assert run(body) == ["c", "a", None, "a", "b"]
    assert db.sent == [[3, 1, 9, 2]]  # one statement, each key once


def test_a_read_asked_while_a_statement_is_in_flight_is_sent_after_it_was_asked() -> None:
    db = Db({1: "old"})

    async def body() -> tuple[str | None, str | None]:
        db.gate = asyncio.Event()
        reads = Coalesced(db.fetch, flights=1)
        first = asyncio.create_task(reads.get(1))
        while not db.sent:  # the first statement has read the row and waits
            await asyncio.sleep(0)
        db.rows[1] = "new"  # a write that committed after the first statement was sent
        second = asyncio.create_task(reads.get(1))
        await asyncio.sleep(0)
        db.gate.set()
        return await first, await second

    assert run(body) == ("old", "new")  # the later read did not take the earlier answer
    assert db.sent == [[1], [1]]


def test_at_most_flights_statements_in_flight_and_the_waiting_reads_go_together() -> None:
    db = Db({k: str(k) for k in range(100)})

    async def body() -> list[str | None]:
        db.gate = asyncio.Event()
        reads = Coalesced(db.fetch, flights=2)
        tasks = []
        for k in range(10):  # one a turn: the first two go alone, the rest wait
            tasks.append(asyncio.create_task(reads.get(k)))
            for _ in range(3):
                await asyncio.sleep(0)
        db.gate.set()
        return await asyncio.gather(*tasks)

    assert run(body) == [str(k) for k in range(10)]
    assert db.most_in_flight == 2
    assert db.sent[:2] == [[0], [1]]
    assert sorted(k for keys in db.sent[2:] for k in keys) == list(range(2, 10))
    assert len(db.sent) <= 4  # the eight that waited went as at most two statements


def test_a_statement_carries_at_most_limit_keys() -> None:
    db = Db({k: str(k) for k in range(7)})

    async def body() -> list[str | None]:
        reads = Coalesced(db.fetch, flights=1, limit=3)
        return await asyncio.gather(*(reads.get(k) for k in range(7)))

    assert run(body) == [str(k) for k in range(7)]
    assert [len(keys) for keys in db.sent] == [3, 3, 1]


def test_a_failed_statement_fails_each_of_its_reads_and_the_next_one_answers() -> None:
    db = Db({1: "a", 2: "b"})

    async def body() -> tuple[list[Any], str | None]:
        reads = Coalesced(db.fetch)
        db.fail = RuntimeError("connection lost")
        failed = await asyncio.gather(reads.get(1), reads.get(2), return_exceptions=True)
        db.fail = None
        return failed, await reads.get(2)

    failed, after = run(body)
    assert [type(e) for e in failed] == [RuntimeError, RuntimeError]
    assert after == "b"


def test_a_caller_that_went_away_does_not_stall_the_others() -> None:
    db = Db({1: "a", 2: "b"})

    async def body() -> tuple[bool, str | None]:
        db.gate = asyncio.Event()
        reads = Coalesced(db.fetch, flights=1)
        gone = asyncio.create_task(reads.get(1))
        stays = asyncio.create_task(reads.get(2))
        await asyncio.sleep(0)
        gone.cancel()
        db.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await gone
        return gone.cancelled(), await stays

    assert run(body) == (True, "b")


def test_one_read_after_another_never_waits_for_a_flight_that_ended() -> None:
    """Each read asked as the previous one's answer arrives: the flight that answered has
    ended by then (a stale count of flights would leave the read with none to carry it)."""
    db = Db({1: "a"})

    async def body() -> int:
        reads = Coalesced(db.fetch, flights=1)
        for _ in range(200):
            assert await reads.get(1) == "a"
        return len(db.sent)

    assert run(body) == 200


def test_close_cancels_the_reads_in_flight_and_waiting() -> None:
    db = Db({1: "a", 2: "b"})

    async def body() -> list[bool]:
        db.gate = asyncio.Event()
        reads = Coalesced(db.fetch, flights=1)
        flying = asyncio.create_task(reads.get(1))
        while not db.sent:
            await asyncio.sleep(0)
        waiting = asyncio.create_task(reads.get(2))
        await asyncio.sleep(0)
        await reads.close()
        await asyncio.gather(flying, waiting, return_exceptions=True)
        return [flying.cancelled(), waiting.cancelled()]

    assert run(body) == [True, True]


def test_flights_and_limit_must_be_positive() -> None:
    async def fetch(keys: Sequence[int]) -> Mapping[int, str]:
        return {}

    with pytest.raises(ValueError, match="at least 1"):
        Coalesced(fetch, flights=0)
    with pytest.raises(ValueError, match="at least 1"):
        Coalesced(fetch, limit=0)
