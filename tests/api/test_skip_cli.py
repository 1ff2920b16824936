"""``cronwheel jobs skip``: on a local store and, with ``--url``, through the API."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import JobSpec
from cronwheel.domain.schedules import cron
from cronwheel.store.sqlite import SqliteStore
from tests.api.conftest import Server
from tests.api.test_cli import run

JOB = JobSpec(name="nightly", task="report", schedule=cron("0 9 * * *", tz="Europe/Berlin"))


def _store(tmp_path: Path) -> tuple[str, SqliteStore]:
    url = f"sqlite:///{tmp_path}/s.db"
    store = SqliteStore(str(tmp_path / "s.db"))
    store.migrate()
    return url, store


def _occurrence(store: SqliteStore) -> datetime:
    t = JOB.schedule.next_after(store.now())
    assert t is not None
    return t


def test_skip_at_and_next_on_a_local_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, store = _store(tmp_path)
    store.create_job(JOB, first_fire_at=_occurrence(store))
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setenv("LOGNAME", "alice")
    first = _occurrence(store)
    at = first.strftime("%Y-%m-%dT%H:%M:%SZ")
    code, out, err = run(
        ["jobs", "skip", "nightly", "--at", at, "--reason", "holiday", "--store", url], capsys
    )
    assert code == 0, err
    assert out.startswith(f"{at}  skipped  firing ")
    (f,) = store.list_firings()
    assert f.state is FiringState.SKIPPED and f.reason == "skipped by alice: holiday"
    code, out, err = run(["jobs", "skip", "nightly", "--next", "2", "--store", url], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"{at}  already_skipped") and "  skipped  " in lines[1]
    code, out, _ = run(["jobs", "explain", "nightly", "--until", at, "--store", url], capsys)
    assert "skipped by alice: holiday" in out.splitlines()[-1]
    store.close()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["nope", "--next", "1"], "name"),
        (["nightly", "--next", "0"], "--next"),
        (["nightly", "--next", "101"], "--next"),
        (["nightly", "--at", "2026-03-02T09:00:00Z"], "--at"),
        (["nightly", "--at", "not-a-time"], "--at"),
        (["nightly"], "--at"),
        (["nightly", "--next", "1", "--at", "2026-03-02T08:00:00Z"], "--at"),
    ],
)
def test_bad_skips_exit_2_with_one_line_and_change_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    url, store = _store(tmp_path)
    store.create_job(JOB, first_fire_at=_occurrence(store))
    code, out, err = run(["jobs", "skip", *args, "--store", url], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err
    assert store.list_firings() == []
    store.close()


def test_a_running_occurrence_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, store = _store(tmp_path)
    past = datetime(2026, 3, 2, 8, tzinfo=UTC)
    store.create_job(JOB, first_fire_at=_occurrence(store))
    store.add_firings("default", "nightly", [past], note="backfill")
    (claim,) = store.claim("w", tasks=["report"], limit=1)
    code, _, err = run(
        ["jobs", "skip", "nightly", "--at", "2026-03-02T08:00:00Z", "--store", url], capsys
    )
    assert code == 2 and err.count("\n") == 1 and "running" in err
    assert store.get_firing(claim.firing.id).state is FiringState.RUNNING
    store.close()


def test_skip_through_the_api(
    server: Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server.store.create_job(
        JobSpec(name="nightly", task="report", schedule=JOB.schedule, namespace="team-a"),
        first_fire_at=_occurrence(server.store),
    )
    monkeypatch.setenv("CRONWHEEL_TOKEN", server.write)
    code, out, err = run(["jobs", "skip", "nightly", "--next", "1", "--url", server.url], capsys)
    assert code == 0 and "  skipped  firing " in out, err
    (f,) = server.store.list_firings()
    assert f.state is FiringState.SKIPPED and f.reason is not None
    assert f.reason.startswith("skipped by token ")  # the token has no label: its id
    monkeypatch.setenv("CRONWHEEL_TOKEN", server.read)
    code, _, err = run(["jobs", "skip", "nightly", "--next", "2", "--url", server.url], capsys)
    assert code == 2 and err.count("\n") == 1
    assert len(server.store.list_firings()) == 1


def test_a_partly_refused_skip_skips_the_rest_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, store = _store(tmp_path)
    past = datetime(2026, 3, 2, 8, tzinfo=UTC)
    store.create_job(JOB, first_fire_at=_occurrence(store))
    store.add_firings("default", "nightly", [past], note="backfill")
    (claim,) = store.claim("w", tasks=["report"], limit=1)
    ahead = _occurrence(store).strftime("%Y-%m-%dT%H:%M:%SZ")
    args = ["--at", "2026-03-02T08:00:00Z", "--at", ahead, "--store", url]
    code, out, err = run(["jobs", "skip", "nightly", *args], capsys)
    assert code == 1 and err.count("\n") == 1 and "1 occurrence(s) not skipped" in err
    assert out.splitlines()[0].startswith("2026-03-02T08:00:00Z  refused (running)")
    assert out.splitlines()[1].startswith(f"{ahead}  skipped")
    assert store.get_firing(claim.firing.id).state is FiringState.RUNNING
    assert sorted(f.state.value for f in store.list_firings()) == ["running", "skipped"]
    store.close()
