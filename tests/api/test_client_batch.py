"""``Client.create_jobs``/``enqueue_many`` and ``AsyncClient`` (the same operations as
coroutines) against a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel import (
    AsyncClient,
    Client,
    ConflictError,
    JobNotFoundError,
    StoreUnavailableError,
    ValidationError,
    at,
    cron,
)
from cronwheel.client import ForbiddenError
from cronwheel.errors import BatchError, InvalidScheduleError
from tests.api.conftest import Server


def _later(minutes: int) -> datetime:
    return datetime.now(UTC) + timedelta(minutes=minutes)


def test_client_batches_give_a_result_per_item(server: Server) -> None:
    with Client(server.url, token=server.write, timeout=10) as api:
        api.create_job("taken", "report", cron("0 9 * * *"))
        result = api.create_jobs(
            [
                {"name": "a", "task": "report", "schedule": at(_later(5)), "args": [1]},
                {"name": "taken", "task": "report", "schedule": cron("0 9 * * *")},
                {"name": "b", "task": "report", "schedule": {"kind": "cron", "cron": "61 * * * *"}},
                {"name": "c", "task": "report", "schedule": cron("0 9 * * *"), "paused": True},
            ]
        )
        assert [type(r).__name__ for r in result.items] == [
            "Job",
            "ConflictError",
            "InvalidScheduleError",
            "Job",
        ]
        assert [(i, e.field) for i, e in result.errors] == [
            (1, "items[1].name"),
            (2, "items[2].schedule.cron"),
        ]
        a, c = result.created
        assert api.get_job("a") == a and a.spec.args == (1,)
        assert c.paused and api.get_job("c") == c
        with pytest.raises(BatchError) as info:
            api.create_jobs(
                [
                    {"name": "d", "task": "report", "schedule": cron("0 9 * * *")},
                    {"name": "taken", "task": "report", "schedule": cron("0 9 * * *")},
                ],
                all_or_nothing=True,
            )
        assert info.value.conflicts and info.value.total == 2
        ((index, error),) = info.value.errors
        assert (index, type(error), error.field) == (1, ConflictError, "items[1].name")
        with pytest.raises(JobNotFoundError):
            api.get_job("d")
        runs = api.enqueue_many(
            [{"task": "report", "args": [i], "kwargs": {"n": i}} for i in range(3)]
            + [{"task": "no such task!"}]
        )
        assert [f.args for f in runs.created] == [(0,), (1,), (2,)]
        assert all(api.get_firing(f.id).state.value == "queued" for f in runs.created)
        ((index, error),) = runs.errors
        assert (index, type(error), error.field) == (3, ValidationError, "items[3].task")
        with pytest.raises(ValidationError) as bad:  # not one item's arguments: nothing sent
            api.enqueue_many([{"task": "report", "colour": "red"}])
        assert bad.value.field == "items"
    with Client(server.url, token=server.read) as reader, pytest.raises(ForbiddenError):
        reader.enqueue_many([{"task": "report"}])


def test_client_batch_items_carry_idempotency_keys(server: Server) -> None:
    with Client(server.url, token=server.write, timeout=10) as api:
        items = [{"task": "report", "args": [1], "idempotency_key": "c-1"}] * 2
        first = api.enqueue_many(items)
        assert first.ok and first.items[0] == first.items[1]  # the second: a repeat
        assert api.enqueue("report", 1, idempotency_key="c-1") == first.items[0]
        second = api.enqueue_many([{"task": "report", "args": [2], "idempotency_key": "c-1"}])
        assert [(type(e).__name__, e.field) for _, e in second.errors] == [
            ("ConflictError", "items[0].idempotency_key")
        ]


def test_async_client_has_the_clients_operations(server: Server) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.url, token=server.write, timeout=10) as api:
            assert server.write not in repr(api)
            assert await api.ready()
            job = await api.create_job("digest", "report", cron("0 7 * * *"), args=[1])
            assert await api.get_job("digest") == job
            with pytest.raises(ConflictError):
                await api.create_job("digest", "report", cron("0 7 * * *"))
            with pytest.raises(InvalidScheduleError):
                await api.create_job("bad", "report", {"kind": "cron", "cron": "nope"})
            made = await api.create_jobs(
                [
                    {"name": f"j{i}", "task": "report", "schedule": at(_later(i + 1))}
                    for i in range(5)
                ]
            )
            assert made.ok and len(made.created) == 5
            names = [j.name async for j in api.list_jobs(page_size=2)]
            assert names == ["digest", "j0", "j1", "j2", "j3", "j4"]
            firing = await api.enqueue("report", 7, idempotency_key="k-1", size=2)
            again = await api.enqueue("report", 7, idempotency_key="k-1", size=2)
            assert again.id == firing.id and firing.kwargs == {"size": 2}
            runs = await api.enqueue_many([{"task": "report", "args": [i]} for i in range(3)])
            assert len(runs.created) == 3
            listed = [f.id async for f in api.list_firings(page_size=2)]
            assert set(listed) == {firing.id, *(f.id for f in runs.created)}
            assert (await api.cancel_firing(firing.id)).outcome == "cancelled"
            assert (await api.get_firing(firing.id)).state.value == "cancelled"
            assert (await api.status())["queue_depth"] == 3
            await api.delete_job("digest")
            with pytest.raises(JobNotFoundError):
                await api.get_job("digest")

    asyncio.run(scenario())


def test_async_client_unreachable() -> None:
    async def scenario() -> None:
        async with AsyncClient("http://127.0.0.1:9", timeout=2) as api:
            assert not await api.ready()
            with pytest.raises(StoreUnavailableError):
                await api.get_job("x")

    asyncio.run(scenario())
