"""cronwheel.Client against a real uvicorn server on 127.0.0.1 (random port, a thread)."""

from __future__ import annotations

import pytest

from cronwheel import (
    Client,
    ConflictError,
    FiringNotFoundError,
    InvalidScheduleError,
    InvalidTransitionError,
    JobNotFoundError,
    StoreUnavailableError,
    UnknownTimezoneError,
    ValidationError,
    cron,
    every,
)
from cronwheel.client import ForbiddenError, UnauthorizedError
from tests.api.conftest import Server


def test_client_round_trip(server: Server) -> None:
    with Client(server.url, token=server.write, timeout=5) as api:
        assert server.write not in repr(api)
        job = api.create_job(
            "digest",
            "send_digest",
            cron("0 7 * * mon-fri", tz="Europe/Paris"),
            args=[1],
            kwargs={"to": "ops"},
            policies={"max_attempts": 4, "timeout": "30s"},
        )
        assert job.spec.schedule == cron("0 7 * * mon-fri", tz="Europe/Paris")
        assert job.spec.policies.max_attempts == 4 and job.spec.args == (1,)
        assert api.get_job("digest") == job
        assert len(api.next_fire_times("digest", 3)) == 3
        same, changed = api.put_job(
            "digest",
            "send_digest",
            cron("0 7 * * mon-fri", tz="Europe/Paris"),
            args=[1],
            kwargs={"to": "ops"},
            policies={"max_attempts": 4, "timeout": "30s"},
        )
        assert (changed, same.id) == (False, job.id)
        _, changed = api.put_job("digest", "send_digest", every("1h"))
        assert changed
        assert api.update_job("digest", args=[2]).spec.args == (2,)
        for i in range(7):
            api.put_job(f"j{i}", "t", every(60))
        assert len(list(api.list_jobs(page_size=2))) == 8
        assert [j.name for j in api.list_jobs(name_prefix="j1")] == ["j1"]
        assert api.pause("j1").paused and not api.resume("j1").paused
        firing = api.trigger("digest")
        assert api.get_firing(firing.id).state.value == "queued"
        assert [f.id for f in api.list_firings("digest")] == [firing.id]
        result = api.cancel_firing(firing.id)
        assert result.outcome == "cancelled"
        with pytest.raises(InvalidTransitionError):
            api.retry_firing(firing.id)
        filled = api.backfill("j2", "2026-01-01T00:00:00Z", "2026-01-01T00:10:00Z")
        assert filled["inserted"] == 11
        one = api.enqueue("resize", "a.png", idempotency_key="k-1", width=640)
        assert api.enqueue("resize", "a.png", idempotency_key="k-1", width=640).id == one.id
        assert one.args == ("a.png",) and one.kwargs == {"width": 640}
        with pytest.raises(ConflictError):
            api.enqueue("resize", "b.png", idempotency_key="k-1")
        assert api.status()["namespace"] == "team-a"
        rows = api.preview("30 2 * * *", "Europe/Berlin", after="2026-03-28T00:00:00Z", count=2)
        assert rows[1]["note"].startswith("dst_gap")
        assert api.ready()
        api.delete_job("j0")
        with pytest.raises(JobNotFoundError):
            api.get_job("j0")


def test_client_raises_cronwheel_errors(server: Server) -> None:
    with Client(server.url, token=server.write) as api:
        api.create_job("x", "t", every(60))
        with pytest.raises(ConflictError) as conflict:
            api.create_job("x", "t", every(60))
        assert conflict.value.code == "job_exists"
        with pytest.raises(InvalidScheduleError) as bad:
            api.create_job("y", "t", {"kind": "cron", "cron": "61 * * * *"})
        assert (bad.value.code, bad.value.field) == ("invalid_cron", "schedule.cron")
        with pytest.raises(UnknownTimezoneError):
            api.create_job("y", "t", {"kind": "cron", "cron": "* * * * *", "tz": "Nope/Zone"})
        with pytest.raises(ValidationError) as invalid:
            api.create_job("y", "t", every(60), policies={"max_attempts": "3"})
        assert invalid.value.field == "policies.max_attempts"
        with pytest.raises(FiringNotFoundError):
            api.get_firing(12345)
    with Client(server.url, token=server.read) as reader:
        with pytest.raises(ForbiddenError):
            reader.pause("x")
        assert reader.get_job("x").name == "x"
    with Client(server.url) as anonymous, pytest.raises(UnauthorizedError):
        anonymous.get_job("x")
    with Client(server.url, token="cw_1_" + "A" * 43) as forged, pytest.raises(UnauthorizedError):
        forged.get_job("x")


def test_unreachable_api_is_store_unavailable() -> None:
    with Client("http://127.0.0.1:9", timeout=1) as api, pytest.raises(StoreUnavailableError):
        api.status()
