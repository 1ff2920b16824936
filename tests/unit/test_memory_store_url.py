"""``memory://``: App("memory://") opens an in-process store; the commands that run in
processes of their own refuse it with one line and exit 2, before starting anything."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, NoReturn

import pytest

from cronwheel.cli.main import main
from cronwheel.domain.clock import FakeClock
from cronwheel.errors import ValidationError
from cronwheel.store.memory import MemoryStore
from cronwheel.store.url import open_store


def test_memory_url_opens_a_fresh_store_on_the_given_clock() -> None:
    clock = FakeClock(datetime(2026, 5, 1, tzinfo=UTC))
    a = open_store("memory://", clock=clock)
    b = open_store("memory://", clock=clock)
    assert isinstance(a, MemoryStore) and a.now() == clock.now()
    from tests.contract.conftest import spec

    a.create_job(spec("only-in-a"), first_fire_at=clock.now())
    assert [j.name for j in a.list_jobs()] == ["only-in-a"]
    assert b.list_jobs() == []  # each memory:// is its own store


def test_memory_url_takes_no_path() -> None:
    with pytest.raises(ValidationError, match="memory://"):
        open_store("memory://somewhere")


def test_serve_from_python_refuses_a_memory_store_before_starting_children(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import subprocess

    from cronwheel.node import serve

    def popen(*_: Any, **__: Any) -> NoReturn:
        raise AssertionError("a child process was started")

    monkeypatch.setattr(subprocess, "Popen", popen)
    with pytest.raises(ValidationError, match="memory://"):
        serve(None, "memory://", api_host=None)


COMMANDS = {
    "serve": ["serve", "--no-api"],
    "scheduler": ["scheduler"],
    "worker": ["worker"],
    "api": ["api"],
    "migrate": ["migrate"],
    "jobs-list": ["jobs", "list"],
    "bench": ["bench", "herd"],
}


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail loudly (instead of starting processes) if a command gets past its options."""

    def started(*_: Any, **__: Any) -> NoReturn:
        raise AssertionError("the command started with a memory:// store")

    import cronwheel.bench.runner
    import cronwheel.cli.common
    import cronwheel.cli.jobs_cmd
    import cronwheel.cli.run_cmds
    import cronwheel.node
    import cronwheel.store.url

    monkeypatch.setattr(cronwheel.node, "load_app", started)
    monkeypatch.setattr(cronwheel.store.url, "open_store", started)
    for module in (cronwheel.cli.common, cronwheel.cli.jobs_cmd, cronwheel.cli.run_cmds):
        monkeypatch.setattr(module, "open_cli_store", started)
    monkeypatch.setattr(cronwheel.bench.runner, "fresh_store", started)


# bench has no CRONWHEEL_STORE (its default store is a temporary SQLite file)
CASES = [(args, via_env) for args in COMMANDS.values() for via_env in (False, True)]
CASES.remove((COMMANDS["bench"], True))


@pytest.mark.usefixtures("nothing_starts")
@pytest.mark.parametrize(
    ("args", "via_env"),
    CASES,
    ids=[f"{a[0]}-{a[-1]}-{'env' if e else 'flag'}" for a, e in CASES],
)
def test_commands_refuse_a_memory_store_in_one_line(
    args: list[str], via_env: bool, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    if via_env:
        monkeypatch.setenv("CRONWHEEL_STORE", "memory://")
        argv = args
    else:
        argv = [*args, "--store", "memory://"]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1, err
    assert lines[0].startswith("cronwheel: error: store: memory:// lives inside one Python")
    assert f"`cronwheel {args[0]}" in lines[0]
