"""Calendars stored in a namespace: ``/v1/calendars`` (roles, errors, namespaces), jobs
that name one, a change re-planning them, ``cronwheel calendars``, ``cronwheel next``
and ``jobs add`` with one."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path

import pytest

from cronwheel.domain.calendars import CalendarRules
from cronwheel.store.sqlite import SqliteStore
from tests.api.conftest import Api, Server
from tests.api.test_cli import run

# T0 is Sunday 2026-03-01 12:00Z; Monday the 2nd is the first working day
OFFICE = {"holidays": "DE-BY", "exclude": ["2026-03-03"], "weekdays": "mon-fri"}
CRON = {"kind": "cron", "cron": "0 9 * * *", "tz": "Europe/Berlin", "calendar": "office"}


def _job(api: Api, name: str = "standup") -> dict[str, object]:
    body = {"name": name, "task": "t", "schedule": CRON, "allow_unknown_task": True}
    r = api.call("POST", "/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def test_calendar_crud_and_roles(api: Api) -> None:
    r = api.call("PUT", "/v1/calendars/office", "write", json=OFFICE)
    assert r.status_code == 403 and "admin" in r.json()["error"]["message"]
    r = api.call("PUT", "/v1/calendars/office", "admin", json=OFFICE)
    assert r.status_code == 201, r.text
    doc = r.json()
    assert doc["name"] == "office" and doc["namespace"] == "team-a"
    assert (doc["holidays"], doc["weekdays"], doc["exclude"]) == (
        "DE-BY",
        "mon-fri",
        ["2026-03-03"],
    )
    assert doc["jobs"] == [] and doc["replanned"] == []
    assert api.call("PUT", "/v1/calendars/office", "admin", json=OFFICE).status_code == 200
    got = api.call("GET", "/v1/calendars/office", "read").json()
    assert got["include"] == [] and got["replanned"] is None
    assert [c["name"] for c in api.call("GET", "/v1/calendars", "read").json()["items"]] == [
        "office"
    ]
    # another namespace sees nothing of it
    assert api.call("GET", "/v1/calendars", "other-read").json()["items"] == []
    assert api.call("GET", "/v1/calendars/office", "other-read").status_code == 404
    assert api.call("DELETE", "/v1/calendars/office", "write").status_code == 403
    assert api.call("DELETE", "/v1/calendars/office", "admin").status_code == 204
    assert api.call("GET", "/v1/calendars/office", "read").status_code == 404


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("Office", OFFICE, "name"),
        ("DE-BY", OFFICE, "name"),
        ("office", OFFICE | {"exclude": ["2026-02-30"]}, "exclude[0]"),
        ("office", OFFICE | {"exclude": ["tomorrow"]}, "exclude[0]"),
        ("office", OFFICE | {"include": ["2026-03-03"]}, "include"),
        ("office", OFFICE | {"weekdays": "weekends"}, "weekdays"),
        ("office", OFFICE | {"holidays": "DE-ZZ"}, "holidays"),
        ("office", OFFICE | {"color": "red"}, "color"),
        ("office", OFFICE | {"exclude": "2026-03-03"}, "exclude"),
    ],
)
def test_bad_calendars_are_422_naming_the_field(
    api: Api, name: str, body: dict[str, object], field: str
) -> None:
    r = api.call("PUT", f"/v1/calendars/{name}", "admin", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field, r.json()
    assert api.call("GET", "/v1/calendars", "read").json()["items"] == []


def test_a_job_naming_a_calendar_and_its_changes(api: Api) -> None:
    r = api.call(
        "POST",
        "/v1/jobs",
        json={"name": "standup", "task": "t", "schedule": CRON} | {"allow_unknown_task": True},
    )
    assert r.status_code == 422
    assert r.json()["error"]["field"] == "schedule.calendar"
    assert "no calendar named 'office'" in r.json()["error"]["message"]
    api.call("PUT", "/v1/calendars/office", "admin", json=OFFICE)
    job = _job(api)
    assert job["schedule"]["calendar"] == "office"
    assert job["schedule"]["calendar_def"]["exclude"] == ["2026-03-03"]
    got = api.call("GET", "/v1/jobs/standup", "read", params={"upcoming": 3}).json()
    # Monday 2, (Tuesday 3 excluded), Wednesday 4, Thursday 5
    assert [t["utc"][:10] for t in got["next_fire_times"]] == [
        "2026-03-02",
        "2026-03-04",
        "2026-03-05",
    ]
    # the same body again (as a deploy script PUTs it): unchanged
    put = api.call(
        "PUT", "/v1/jobs/standup", json={"task": "t", "schedule": CRON, "allow_unknown_task": True}
    )
    assert put.status_code == 200 and put.json()["changed"] is False
    # exclude Monday: the job's cursor moves to Wednesday
    r = api.call(
        "PUT",
        "/v1/calendars/office",
        "admin",
        json=OFFICE | {"exclude": ["2026-03-02", "2026-03-03"]},
    )
    assert r.json()["replanned"] == ["standup"] and r.json()["jobs"] == ["standup"]
    assert api.call("GET", "/v1/jobs/standup", "read").json()["next_fire_at"] == (
        "2026-03-04T08:00:00Z"
    )
    r = api.call("DELETE", "/v1/calendars/office", "admin")
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "calendar_in_use"
    assert "'standup'" in r.json()["error"]["message"]
    # the preview of the token's namespace's calendar
    body = {"cron": "0 9 * * *", "tz": "Europe/Berlin", "calendar": "office", "count": 2}
    r = api.call(
        "POST", "/v1/schedules/preview", "read", json=body | {"after": "2026-03-01T12:00:00Z"}
    )
    assert [i["utc"][:10] for i in r.json()["items"]] == ["2026-03-04", "2026-03-05"]
    r = api.call("POST", "/v1/schedules/preview", "other-read", json=body)
    assert r.status_code == 422 and r.json()["error"]["field"] == "calendar"


def test_cli_calendars_and_jobs_on_a_local_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/c.db"
    store = SqliteStore(str(tmp_path / "c.db"))
    store.migrate()
    code, out, err = run(
        [
            "calendars",
            "set",
            "office",
            "--holidays",
            "DE-BY",
            "--weekdays",
            "mon-fri",
            "--exclude",
            "2030-12-24",
            "--include",
            "2030-12-26",
            "--store",
            url,
        ],
        capsys,
    )
    assert code == 0, err
    assert "holidays  DE-BY" in out and "include   2030-12-26" in out
    code, out, err = run(
        [
            "next",
            "0 9 * * *",
            "--tz",
            "Europe/Berlin",
            "--calendar",
            "office",
            "--after",
            "2030-12-23T12:00:00Z",
            "--count",
            "3",
            "--json",
            "--store",
            url,
        ],
        capsys,
    )
    assert code == 0, err
    # 24th excluded, 25th a holiday, 26th a holiday but included, 27th a Friday
    assert [r["local"][:10] for r in json.loads(out)] == ["2030-12-26", "2030-12-27", "2030-12-30"]
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
            "office",
            "--allow-unknown-task",
            "--store",
            url,
        ],
        capsys,
    )
    assert code == 0, err
    assert store.get_job("default", "standup").spec.schedule.calendar_def is not None
    code, out, _ = run(["calendars", "list", "--store", url], capsys)
    assert (
        out.strip() == "office  holidays DE-BY, weekdays mon-fri, 1 excluded, 1 included  (1 jobs)"
    )
    code, out, _ = run(["calendars", "show", "office", "--json", "--store", url], capsys)
    assert json.loads(out)["jobs"] == ["standup"]
    code, out, err = run(["calendars", "delete", "office", "--store", url], capsys)
    assert code == 2 and err.count("\n") == 1 and "'standup'" in err
    run(["jobs", "delete", "standup", "--store", url], capsys)
    code, out, err = run(["calendars", "delete", "office", "--store", url], capsys)
    assert code == 0 and "deleted calendar office" in out, err
    store.close()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["calendars", "set", "Office"], "NAME: 'Office' is not a calendar name"),
        (["calendars", "set", "office", "--exclude", "2030-02-30"], "--exclude[0]: '2030-02-30'"),
        (["calendars", "set", "office", "--weekdays", "sometimes"], "--weekdays: "),
        (["calendars", "set", "office", "--holidays", "XX"], "--holidays: unknown calendar 'XX'"),
        (["calendars", "show", "nope"], "no calendar named 'nope'"),
        (["calendars", "delete", "nope"], "no calendar named 'nope'"),
        (
            ["jobs", "add", "j", "--task", "t", "--cron", "0 9 * * *", "--calendar", "nope"],
            "schedule.calendar: no calendar named 'nope' in namespace 'default'",
        ),
        (["next", "0 9 * * *", "--calendar", "nope"], "calendar: no calendar named 'nope'"),
    ],
)
def test_cli_calendar_errors_exit_2_with_one_line(
    args: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/c.db"
    store = SqliteStore(str(tmp_path / "c.db"))
    store.migrate()
    store.close()
    code, out, err = run([*args, "--store", url], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    assert needle in err, err


def test_remote_calendars_and_jobs(
    server: Server, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONWHEEL_URL", server.url)
    monkeypatch.setenv("CRONWHEEL_TOKEN", server.write)
    code, _, err = run(["calendars", "set", "office", "--weekdays", "mon-fri"], capsys)
    assert code == 2 and "admin role" in err and err.count("\n") == 1
    server.store.set_calendar("team-a", "office", CalendarRules(weekdays="mon-fri"))
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
            "office",
            "--allow-unknown-task",
        ],
        capsys,
    )
    assert code == 0, err
    job = server.store.get_job("team-a", "standup")
    assert job.next_fire_at is not None and job.next_fire_at.astimezone(UTC).weekday() < 5
    code, out, err = run(["calendars", "show", "office", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["jobs"] == ["standup"]
    code, out, _ = run(["calendars", "list"], capsys)
    assert out.strip() == "office  weekdays mon-fri  (1 jobs)"
    code, _, err = run(["calendars", "delete", "office"], capsys)
    assert code == 2 and "admin role" in err
    code, _, err = run(
        ["jobs", "add", "j", "--task", "t", "--cron", "0 9 * * *", "--calendar", "nope"], capsys
    )
    assert code == 2 and "no calendar named 'nope' in namespace 'team-a'" in err


def test_patch_a_job_onto_a_calendar(api: Api) -> None:
    api.cron_job("report", allow_unknown_task=True)
    api.call("PUT", "/v1/calendars/office", "admin", json=OFFICE)
    r = api.call("PATCH", "/v1/jobs/report", json={"schedule": CRON})
    assert r.status_code == 200, r.text
    assert r.json()["schedule"]["calendar_def"]["weekdays"] == "mon-fri"
    got = api.call("GET", "/v1/jobs/report", "read", params={"upcoming": 2}).json()
    assert [t["utc"][:10] for t in got["next_fire_times"]] == ["2026-03-02", "2026-03-04"]
    r = api.call("PATCH", "/v1/jobs/report", json={"schedule": CRON | {"calendar": "nope"}})
    assert r.status_code == 422 and r.json()["error"]["field"] == "schedule.calendar"


def test_the_client_previews_and_manages_calendars(server: Server) -> None:
    from cronwheel.client import Client, ForbiddenError

    server.store.set_calendar("team-a", "office", CalendarRules(exclude=("2026-11-27",)))
    with Client(server.url, token=server.read) as api:
        rows = api.preview(
            "0 9 * * mon-fri",
            "America/New_York",
            after="2026-11-25T00:00:00Z",
            count=2,
            calendar="US",
        )
        assert [r["utc"][:10] for r in rows] == ["2026-11-25", "2026-11-27"]
        rows = api.preview(
            "0 9 * * mon-fri",
            "America/New_York",
            after="2026-11-25T00:00:00Z",
            count=2,
            calendar="office",
        )
        assert [r["utc"][:10] for r in rows] == ["2026-11-25", "2026-11-26"]
        assert [c["name"] for c in api.list_calendars()] == ["office"]
        assert api.get_calendar("office")["exclude"] == ["2026-11-27"]
    with Client(server.url, token=server.write) as api:
        job, _ = api.put_job(
            "standup",
            "t",
            {"kind": "cron", "cron": "0 9 * * *", "calendar": "office"},
            allow_unknown_task=True,
        )
        assert job.spec.schedule.calendar_def == CalendarRules(exclude=("2026-11-27",))
        with pytest.raises(ForbiddenError, match="admin role"):
            api.put_calendar("office", {"weekdays": "mon-fri"})
