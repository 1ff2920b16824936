"""Calendars on every surface: the API's schedules and preview, the CLI's ``jobs add``,
``next`` and ``jobs explain``; bad names are one error naming the field."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from cronwheel.cli.main import main
from cronwheel.store.sqlite import SqliteStore
from tests.api.conftest import Api
from tests.api.test_cli import run

BAVARIA = {"kind": "cron", "cron": "0 9 * * *", "tz": "Europe/Berlin", "calendar": "DE-BY"}


def test_a_job_with_a_calendar_skips_its_holidays(api: Api) -> None:
    r = api.call(
        "POST",
        "/v1/jobs",
        json={"name": "epiphany", "task": "t", "schedule": BAVARIA, "allow_unknown_task": True},
    )
    assert r.status_code == 201, r.text
    assert r.json()["schedule"]["calendar"] == "DE-BY"
    got = api.call("GET", "/v1/jobs/epiphany", "read", params={"upcoming": 3}).json()
    # T0 is 2026-03-01: Good Friday (3 April) and Easter Monday are far; the first three
    # days are ordinary
    assert [t["utc"] for t in got["next_fire_times"]] == [
        "2026-03-02T08:00:00Z",
        "2026-03-03T08:00:00Z",
        "2026-03-04T08:00:00Z",
    ]
    assert "calendar DE-BY" in got["schedule_text"]


def test_preview_honours_the_calendar(api: Api) -> None:
    body = {
        "cron": "0 9 * * mon-fri",
        "tz": "America/New_York",
        "calendar": "US",
        "after": "2026-11-25T00:00:00Z",
        "count": 2,
    }
    r = api.call("POST", "/v1/schedules/preview", "read", json=body)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["calendar"] == "US"
    # Thanksgiving (Thursday 26 November) is skipped
    assert [i["utc"] for i in doc["items"]] == ["2026-11-25T14:00:00Z", "2026-11-27T14:00:00Z"]
    r = api.call("POST", "/v1/schedules/preview", "read", json=body | {"calendar": "XX"})
    assert r.status_code == 422
    assert r.json()["error"]["field"] == "calendar"


@pytest.mark.parametrize(
    ("schedule", "code", "field"),
    [
        (BAVARIA | {"calendar": "DE-ZZ"}, "invalid_schedule", "schedule.calendar"),
        (BAVARIA | {"calendar": "Atlantis"}, "invalid_schedule", "schedule.calendar"),
        (BAVARIA | {"calendar": "x" * 65}, "invalid_input", "schedule.calendar"),
        (BAVARIA | {"calendar": 5}, "invalid_input", "schedule.calendar"),
        (
            {"kind": "every", "interval": "1h", "calendar": "DE"},
            "invalid_input",
            "schedule.calendar",
        ),
        (
            {"kind": "cron", "cron": "0 9 1 1 *", "tz": "Europe/Berlin", "calendar": "DE"},
            "no_firing_in_horizon",
            "schedule.calendar",
        ),
    ],
)
def test_bad_calendars_are_422_naming_the_field(
    api: Api, schedule: dict[str, object], code: str, field: str
) -> None:
    before = api.counts()
    r = api.call("POST", "/v1/jobs", json={"name": "j", "task": "t", "schedule": schedule})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert (err["code"], err["field"]) == (code, field), err
    assert api.counts() == before


def test_cli_next_with_a_calendar(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        [
            "next",
            "0 9 * * *",
            "--tz",
            "Asia/Tokyo",
            "--calendar",
            "JP",
            "--after",
            "2026-12-31T12:00:00Z",
            "--count",
            "2",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    # 1-3 January are not public holidays in Japan except the 1st
    assert [r["local"][:10] for r in json.loads(out)] == ["2027-01-02", "2027-01-03"]
    code, out, err = run(
        ["next", "0 9 * * *", "--calendar", "DE", "--after", "2026-12-24T12:00:00Z"], capsys
    )
    assert code == 0 and "calendar: DE" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["next", "0 9 * * *", "--calendar", "XX"], "calendar: unknown calendar 'XX'"),
        (["next", "0 9 * * *", "--calendar", "De"], "calendar: 'De' is not a calendar name"),
        (
            ["jobs", "add", "j", "--task", "t", "--every", "5m", "--calendar", "DE"],
            "calendar: a calendar applies to a --cron schedule only",
        ),
        (
            ["jobs", "add", "j", "--task", "t", "--cron", "0 9 * * *", "--calendar", "DE-ZZ"],
            "calendar: unknown calendar 'DE-ZZ': DE has no subdivision 'ZZ'",
        ),
    ],
)
def test_cli_calendar_errors_are_one_line_exit_2(
    args: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/c.db"
    argv = [*args, "--store", url] if args[0] == "jobs" else args
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and needle in captured.err, captured.err


def test_cli_jobs_add_and_explain_show_the_excluded_day(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/c.db"
    store = SqliteStore(str(tmp_path / "c.db"))
    store.migrate()
    code, out, err = run(
        [
            "jobs",
            "add",
            "standup",
            "--task",
            "t",
            "--cron",
            "0 9 * * *",
            "--tz",
            "Europe/Berlin",
            "--calendar",
            "DE-BY",
            "--allow-unknown-task",
            "--store",
            url,
        ],
        capsys,
    )
    assert code == 0, err
    assert "calendar DE-BY" in out
    schedule = store.get_job("default", "standup").spec.schedule
    # the first holiday ahead (explain shows future occurrences too)
    start = store.now().replace(hour=8, minute=0, second=0, microsecond=0)
    day = next(
        start + timedelta(days=i)
        for i in range(1, 400)
        if schedule.excluded_by_calendar(start + timedelta(days=i))
    )
    since = (day - timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z")
    until = day.strftime("%Y-%m-%dT23:59:59Z")
    code, out, err = run(
        [
            "jobs",
            "explain",
            "standup",
            "--since",
            since,
            "--until",
            until,
            "--json",
            "--store",
            url,
        ],
        capsys,
    )
    assert code == 0, err
    rows = json.loads(out)
    excluded = [r for r in rows if r["fate"] == "excluded_by_calendar"]
    assert excluded and "(DE-BY)" in excluded[0]["detail"]
    store.close()


FORM = {"name": "j", "task": "t", "kind": "cron", "schedule": "0 9 * * *", "tz": "Europe/Berlin"}


def test_the_dashboard_form_takes_a_calendar(open_api: Api) -> None:
    r = open_api.client.post("/ui/jobs/new", json=FORM | {"calendar": "DE-BY"})
    assert r.status_code == 201, r.text
    assert open_api.store.get_job("default", "j").spec.schedule.calendar == "DE-BY"
    page = open_api.client.get(r.json()["url"])
    assert page.status_code == 200 and "calendar DE-BY" in page.text
    assert 'name="calendar"' in open_api.client.get("/ui/jobs/new").text


@pytest.mark.parametrize(
    "form",
    [
        FORM | {"calendar": "DE-ZZ"},
        FORM | {"calendar": "office"},  # no such calendar in the namespace
        FORM | {"kind": "every", "schedule": "5m", "calendar": "DE"},
    ],
)
def test_the_dashboard_form_refuses_a_bad_calendar(open_api: Api, form: dict[str, str]) -> None:
    before = open_api.counts()
    r = open_api.client.post("/ui/jobs/new", json=form)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == "calendar"
    assert open_api.counts() == before


def test_simulate_shows_the_excluded_days(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cron = {"kind": "cron", "cron": "0 9 * * *", "tz": "Europe/Berlin"}
    jobs = [
        {"name": "bavaria", "task": "t", "schedule": cron | {"calendar": "DE-BY"}},
        {
            "name": "office",
            "task": "t",
            "schedule": cron | {"calendar": "office", "calendar_def": {"exclude": ["2027-01-07"]}},
        },
    ]
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"jobs": jobs}), encoding="utf-8")
    window = ["--from", "2027-01-05T00:00:00Z", "--to", "2027-01-08T00:00:00Z"]
    code, out, err = run(["simulate", "--file", str(path), *window, "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    fates = {job["name"]: [o["fate"] for o in job["occurrences"]] for job in doc["jobs"]}
    assert fates == {
        "bavaria": ["fired", "excluded_by_calendar", "fired"],
        "office": ["fired", "fired", "excluded_by_calendar"],
    }
    # a calendar of a namespace without its rules: one error naming it
    del jobs[1]["schedule"]["calendar_def"]  # type: ignore[attr-defined]
    path.write_text(json.dumps({"jobs": jobs}), encoding="utf-8")
    code, out, err = run(["simulate", "--file", str(path), *window], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "jobs[1].schedule.calendar: 'office' is a calendar of a namespace" in err
