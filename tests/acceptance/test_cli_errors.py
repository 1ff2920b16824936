"""Bad input on the command line: exit code 2, ONE line on stderr naming the field, no
traceback, and the store is left exactly as it was (DESIGN.md, Interfaces)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.acceptance.conftest import Cluster


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    fields: tuple[str, ...]  # the error line must name one of these (the field or its flag)
    store: str | None = "default"  # "default": the test store; None: no --store; else a URL


ADD = ("jobs", "add", "x", "--task", "record")
CASES: dict[str, Case] = {
    "next-never-fires": Case(("next", "0 0 30 2 *"), ("cron",), store=None),
    "next-unknown-tz": Case(("next", "* * * * *", "--tz", "Mars/Olympus"), ("tz",), store=None),
    "add-cron-out-of-range": Case((*ADD, "--cron", "61 * * * *"), ("cron",)),
    "add-cron-unknown-tz": Case((*ADD, "--cron", "* * * * *", "--tz", "Mars/Olympus"), ("tz",)),
    "add-every-zero": Case((*ADD, "--every", "0s"), ("every", "interval")),
    "add-at-in-the-past": Case((*ADD, "--at", "2020-01-01T00:00:00Z"), ("at",)),
    "add-at-naive": Case((*ADD, "--at", "2027-01-01T00:00:00"), ("at",)),
    "add-two-schedules": Case((*ADD, "--every", "5s", "--cron", "* * * * *"), ("schedule",)),
    "add-no-schedule": Case(ADD, ("schedule",)),
    "add-duplicate-name": Case(
        ("jobs", "add", "seed", "--task", "record", "--every", "1h"), ("name",)
    ),
    "add-args-not-array": Case((*ADD, "--every", "5s", "--args", '{"a": 1}'), ("args",)),
    "add-bad-timeout": Case((*ADD, "--every", "5s", "--timeout", "abc"), ("timeout",)),
    "add-fractional-visibility-timeout": Case(
        (*ADD, "--every", "5s", "--visibility-timeout", "0.5s"), ("visibility",)
    ),
    "add-retries-negative": Case((*ADD, "--every", "5s", "--retries", "-1"), ("retries",)),
    "jobs-show-missing": Case(("jobs", "show", "nosuchjob"), ("name",)),
    "firings-show-missing": Case(("firings", "show", "999999"), ("firing_id", "firing")),
    "firings-list-unknown-job": Case(
        ("firings", "list", "--job", "nosuchjob", "--json"), ("name", "job")
    ),
    "store-dir-missing": Case(
        ("jobs", "list", "--json"), ("store",), store="sqlite:///{tmp}/no/such/dir/cronwheel.db"
    ),
    "store-unsupported-scheme": Case(
        ("jobs", "list", "--json"), ("store",), store="mysql://nobody@127.0.0.1/db"
    ),
    "store-postgres-unreachable": Case(
        ("jobs", "list", "--json"), ("store",), store="postgresql://nobody@127.0.0.1:1/nodb"
    ),
    "worker-bad-app": Case(("worker", "nosuchmodule:app"), ("APP",)),
    "worker-early-claims-negative": Case(("worker", "--early-claims", "-1"), ("early-claims",)),
    "serve-bad-app": Case(("serve", "nosuchmodule:app"), ("APP",)),
    "scheduler-app-not-an-app": Case(("scheduler", "ledger_app:append_line"), ("APP",)),
}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A store holding one job, shared by the cases (none of them may change it)."""
    cluster = Cluster(tmp_path_factory.mktemp("cli"))
    added = cluster.cli("jobs", "add", "seed", "--task", "record", "--every", "1h")
    assert added.returncode == 0, added.stderr
    try:
        yield cluster
    finally:
        cluster.stop_all()


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_bad_input_is_one_line_exit_2_and_changes_nothing(seeded: Cluster, case: Case) -> None:
    before = seeded.dump()
    args = list(case.args)
    if case.store == "default":
        args += ["--store", seeded.store_url]
    elif case.store is not None:
        args += ["--store", case.store.format(tmp=seeded.dir)]
    result = seeded.cli(*args, store=False, timeout=30)

    lines = [line for line in result.stderr.splitlines() if line.strip()]
    shown = f"cronwheel {' '.join(args)}\nexit {result.returncode}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr, shown
    assert result.returncode == 2, shown
    assert len(lines) == 1, shown
    assert lines[0].startswith("cronwheel: error: "), shown
    message = lines[0].removeprefix("cronwheel: error: ")
    assert any(field in message for field in case.fields), (
        f"the error names none of {case.fields}: {shown}"
    )
    assert result.stdout == "", shown
    # Nothing changed: every row of every table is as before.
    assert seeded.dump() == before
    jobs = seeded.cli_json("jobs", "list")
    assert [job["name"] for job in jobs] == ["seed"], jobs
    assert not Path(seeded.dir, "no").exists()
