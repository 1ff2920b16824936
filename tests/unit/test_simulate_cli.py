"""``cronwheel simulate``: the jobs file, the store read (never written), the outputs,
and one-line errors naming the option."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cronwheel.app import App
from cronwheel.cli.main import cli, main
from cronwheel.domain.clock import FakeClock
from cronwheel.domain.schedules import cron, every
from cronwheel.store.sqlite import SqliteStore

JOBS = [
    {
        "name": "nightly",
        "task": "etl",
        "schedule": {"kind": "cron", "cron": "0 2 * * *", "tz": "Europe/Berlin"},
        "policies": {"misfire": "skip"},
    },
    {
        "name": "report",
        "task": "report",
        "schedule": {"kind": "every", "interval": "10m"},
        "policies": {"overlap": "buffer_one", "visibility_timeout": "1h"},
    },
]
PERIOD = ["--from", "2026-03-28T22:00:00Z", "--to", "2026-03-29T02:00:00Z"]


@pytest.fixture
def jobs_file(tmp_path: Path) -> str:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(JOBS))
    return str(path)


def run_json(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["simulate", *args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert isinstance(doc, dict)
    return doc


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {job["name"]: job for job in doc["jobs"]}


def test_a_jobs_file_over_the_berlin_dst_night(jobs_file: str) -> None:
    jobs = by_name(run_json("--file", jobs_file, *PERIOD))
    (nightly,) = jobs["nightly"]["occurrences"]
    assert nightly["fate"] == "fired (dst_moved)"
    assert nightly["instant"] == "2026-03-29T01:00:00Z"
    assert jobs["report"]["fates"] == {"fired": 25}


def test_events_outage_pause_and_slow(jobs_file: str) -> None:
    doc = run_json(
        "--file",
        jobs_file,
        *PERIOD,
        "--outage",
        "2026-03-29T00:55:00Z..2026-03-29T01:20:00Z",
        "--slow",
        "report=25m",
        "--pause",
        "report@2026-03-28T22:30:00Z..2026-03-28T23:00:00Z",
    )
    assert doc["outages"] == [["2026-03-29T00:55:00Z", "2026-03-29T01:20:00Z"]]
    assert doc["scheduler_down"] == doc["workers_down"] == []
    assert doc["pauses"] == {"report": [["2026-03-28T22:30:00Z", "2026-03-28T23:00:00Z"]]}
    assert doc["slow_s"] == {"report": 1500.0}
    jobs = by_name(doc)
    assert [o["fate"] for o in jobs["nightly"]["occurrences"]] == ["missed"]
    fates = jobs["report"]["fates"]
    # 22:30 was queued (half a second ahead) before the pause began; 22:50 is caught up
    # (misfire fire_once) when it ends: 22:40 alone is paused
    assert [o["instant"] for o in jobs["report"]["occurrences"] if o["fate"] == "paused"] == [
        "2026-03-28T22:40:00Z"
    ]
    assert fates["skipped"] > 0 and fates["missed"] > 0


def test_the_store_is_read_and_never_written(tmp_path: Path) -> None:
    path = tmp_path / "cw.db"
    clock = FakeClock(datetime(2026, 10, 31, 12, tzinfo=UTC))
    store = SqliteStore(str(path), clock=clock)
    store.migrate()
    app = App(f"sqlite:///{path}", clock=clock)
    app.use_store(store)
    app.schedule("t", cron("30 1 * * *", tz="America/New_York"), name="ny", allow_unknown_task=True)
    app.schedule("t", every("1h"), name="hourly", allow_unknown_task=True)
    app.schedule("t", every("1h"), name="asleep", paused=True, allow_unknown_task=True)
    app.schedule("t", every("1h"), name="limited", max_runs=2, allow_unknown_task=True)
    before = [(j.name, j.next_fire_at, j.updated_at) for j in store.list_jobs(namespace="default")]
    url = f"sqlite:///{path}"
    period = ["--from", "2026-11-01T04:00:00Z", "--to", "2026-11-01T08:00:00Z"]
    jobs = by_name(run_json("--store", url, *period, "--job", "ny"))
    assert list(jobs) == ["ny"]
    assert [o["fate"] for o in jobs["ny"]["occurrences"]] == ["fired (dst_once)"]
    jobs = by_name(run_json("--store", url, *period))
    assert jobs["asleep"]["fates"] == {"paused": 5}  # 04:00 to 08:00
    limited = jobs["limited"]["occurrences"]
    assert [o["fate"] for o in limited] == ["fired", "fired", "not_due", "not_due", "not_due"]
    assert "its max_runs were used" in limited[-1]["detail"]
    assert jobs["hourly"]["fates"] == {"fired": 5}
    after = [(j.name, j.next_fire_at, j.updated_at) for j in store.list_jobs(namespace="default")]
    assert after == before
    assert store.list_firings(limit=10) == []
    assert store.job_events(store.get_job("default", "ny").id) == []
    store.close()


def test_the_table_lists_what_did_not_simply_fire(jobs_file: str) -> None:
    result = CliRunner().invoke(
        cli,
        ["simulate", "--file", jobs_file, *PERIOD, "--slow", "report=25m"],
    )
    assert result.exit_code == 0, result.output
    assert "nightly: fired (dst_moved) 1" in result.output
    assert "buffer full (overlap: buffer_one)" in result.output
    assert "ran and succeeded" in result.output  # the DST-moved one is listed
    quiet = CliRunner().invoke(cli, ["simulate", "--file", jobs_file, *PERIOD])
    assert "report: fired 25" in quiet.output
    assert "T22:10:00Z" not in quiet.output  # plain firings only with --all
    every_row = CliRunner().invoke(cli, ["simulate", "--file", jobs_file, *PERIOD, "--all"])
    assert "2026-03-28T22:10:00Z" in every_row.output


def test_the_api_job_documents_are_a_jobs_file(tmp_path: Path) -> None:
    from cronwheel.domain.models import JobSpec
    from cronwheel.wire import job_to_json

    clock = FakeClock(datetime(2026, 6, 1, tzinfo=UTC))
    store = SqliteStore(str(tmp_path / "w.db"), clock=clock)
    store.migrate()
    job = store.create_job(
        JobSpec(name="w", task="t", schedule=every("15m")), first_fire_at=clock.now()
    )
    store.close()
    path = tmp_path / "api.json"
    path.write_text(json.dumps({"jobs": [job_to_json(job)]}))
    period = ["--from", "2026-06-01T00:00:00Z", "--to", "2026-06-01T01:00:00Z"]
    assert by_name(run_json("--file", str(path), *period))["w"]["fates"] == {"fired": 5}


ERRORS = [
    (["--to", "2026-03-28T21:00:00Z"], "to: must be after --from"),
    (["--to", "2026-09-28T00:00:00Z"], "to: the period must be at most 92 days"),
    (["--outage", "2026-03-29T01:00:00Z"], "outage: must be T1..T2"),
    (["--outage", "2026-03-29T01:00:00Z..2026-03-29T00:00:00Z"], "outage: the window's end"),
    (["--outage", "soon..later"], "outage"),
    (["--scheduler-down", "2026-03-29T01:00:00Z"], "scheduler-down: must be T1..T2"),
    (["--workers-down", "2026-03-29T01:00:00Z..2026-03-29T01:00:00Z"], "workers-down: the"),
    (["--pause", "nightly"], "pause: must be JOB@T1..T2"),
    (["--pause", "nope@2026-03-29T00:00:00Z..2026-03-29T01:00:00Z"], "pause: no job named 'nope'"),
    (["--slow", "report=fast"], "slow"),
    (["--slow", "report"], "slow: must be JOB=DURATION"),
    (["--slow", "nope=5m"], "slow: no job named 'nope'"),
    (["--job", "nope"], "job: no job named 'nope'"),
]


@pytest.mark.parametrize(("extra", "needle"), ERRORS)
def test_bad_options_are_one_line_exit_2(
    extra: list[str], needle: str, jobs_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", "--file", jobs_file, *PERIOD]
    if extra[0] == "--to":
        args = args[:-2]
    with pytest.raises(SystemExit) as info:
        main([*args, *extra])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("cronwheel: error: ")
    assert needle in lines[0], lines[0]


BAD_FILES: list[tuple[Any, str]] = [
    ("not json", "file: not JSON"),
    ({"jobs": 3}, "file: must be a list of jobs"),
    ([{"name": "x", "task": "t"}], "jobs[0].schedule: is required"),
    ([{**JOBS[0], "colour": "red"}], "jobs[0].colour: not a key of a job"),
    ([{**JOBS[0], "policies": {"overlap": "sometimes"}}], "jobs[0].policies.overlap"),
    ([{**JOBS[0], "schedule": {"kind": "cron", "cron": "61 * * * *"}}], "jobs[0].schedule"),
    (
        [{**JOBS[0], "schedule": {"kind": "cron", "expr": "0 2 * * *"}}],
        "error: jobs[0].schedule.expr: unknown key",  # named once, not schedule.schedule
    ),
    ([JOBS[0], JOBS[0]], "jobs[1].name: a second job named 'nightly'"),
]


@pytest.mark.parametrize(("content", "needle"), BAD_FILES)
def test_bad_jobs_files_are_one_line_exit_2(
    content: Any, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(SystemExit) as info:
        main(["simulate", "--file", str(path), *PERIOD])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and needle in err, err
    assert "Traceback" not in err


def test_the_readme_example_is_real_output(tmp_path: Path) -> None:
    """The README's example: its jobs file and command give the output it shows."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("### What-if: cronwheel simulate") :]
    jobs = section[section.index("```json\n") + 8 :]
    (tmp_path / "jobs.json").write_text(jobs[: jobs.index("```")])
    example = section[section.index("$ cronwheel simulate") :]
    example = example[: example.index("```")]
    command, _, shown = example.partition("\n    ")
    options, _, shown = shown.partition("\n")
    args = (command.removeprefix("$ cronwheel ").removesuffix(" \\") + " " + options).split()
    args[args.index("jobs.json")] = str(tmp_path / "jobs.json")
    assert "--outage" in args and "report: fired 7, skipped 6" in shown
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    printed = "\n".join(line.rstrip() for line in result.output.splitlines())
    assert printed.strip("\n") == shown.strip("\n")


def test_the_clock_jumps_from_instant_to_instant() -> None:
    """Not tick by tick: a day of a per-minute job is two steps per occurrence (the
    dispatcher's, half a second ahead, and the worker's), give or take a few."""
    from cronwheel.simulate import Scenario, Simulation, jobs_from_json

    (spec,) = jobs_from_json(
        [{"name": "m", "task": "t", "schedule": {"kind": "every", "interval": "1m"}}]
    )
    scenario = Scenario(
        since=datetime(2026, 6, 1, tzinfo=UTC), until=datetime(2026, 6, 2, tzinfo=UTC)
    )
    sim = Simulation([(spec, False)], scenario)
    (result,) = sim.run()
    assert result.counts() == {"fired": 24 * 60 + 1}
    assert sim.steps <= 2 * (24 * 60 + 1) + 5


def test_bounds_and_run_limits_are_explained(tmp_path: Path) -> None:
    path = tmp_path / "bounded.json"
    hourly = {"kind": "every", "interval": "1h"}
    path.write_text(
        json.dumps(
            [
                {"name": "ends", "task": "t", "schedule": hourly, "end_at": "2026-06-01T01:30:00Z"},
                {
                    "name": "starts",
                    "task": "t",
                    "schedule": hourly,
                    "start_at": "2026-06-01T02:00:00Z",
                },
                {"name": "twice", "task": "t", "schedule": hourly, "max_runs": 2},
            ]
        )
    )
    doc = run_json(
        "--file", str(path), "--from", "2026-06-01T00:00:00Z", "--to", "2026-06-01T03:00:00Z"
    )
    jobs = {j["name"]: [(o["fate"], o["detail"]) for o in j["occurrences"]] for j in doc["jobs"]}
    assert [f for f, _ in jobs["ends"]] == ["fired", "fired", "not_due", "not_due"]
    assert jobs["ends"][-1][1] == "after the job's end_at bound"
    assert [f for f, _ in jobs["starts"]] == ["not_due", "not_due", "fired", "fired"]
    assert [f for f, _ in jobs["twice"]] == ["fired", "fired", "not_due", "not_due"]


def test_the_workers_down_queue_what_falls_due(jobs_file: str) -> None:
    doc = run_json(
        "--file",
        jobs_file,
        *PERIOD,
        "--job",
        "report",
        "--workers-down",
        "2026-03-28T22:05:00Z..2026-03-28T22:45:00Z",
    )
    fates = [o["fate"] for o in by_name(doc)["report"]["occurrences"][:6]]
    # 22:10 waits in the queue and runs at 22:45; 22:20 is buffered behind it (buffer_one)
    # and 22:30 and 22:40 find the buffer full
    assert fates == ["fired", "fired", "fired", "skipped", "skipped", "fired"]
