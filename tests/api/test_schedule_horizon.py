"""A schedule that does not fire within 50 years in its zone under its DST policy is
refused where it is registered or previewed: API 422 naming ``schedule``, CLI exit 2.

The hostile case: ``30 2 * 3 0L`` is 02:30 on the last Sunday of March, which in
Berlin is always the spring-forward day, so 02:30 never exists; with
``dst_gap=skip`` it never fires (the expression itself is valid in UTC). Searched
second by second it used to run to year 9999.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cronwheel.app import App
from cronwheel.cli.main import main
from cronwheel.domain.schedules import cron
from cronwheel.errors import NoFiringInHorizonError
from tests.api.conftest import Api

HOSTILE: dict[str, Any] = {
    "kind": "cron",
    "cron": "30 2 * 3 0L",
    "tz": "Europe/Berlin",
    "dst_gap": "skip",
}


def _err(r: Any) -> dict[str, Any]:
    err: dict[str, Any] = r.json()["error"]
    return err


def _refused(r: Any) -> None:
    assert r.status_code == 422, r.text
    err = _err(r)
    assert (err["code"], err["field"]) == ("no_firing_in_horizon", "schedule")
    assert "does not fire within 50 years" in err["message"]
    assert "dst_gap=skip" in err["message"]


def test_preview_refuses_a_schedule_its_policy_silences(api: Api) -> None:
    body = {"cron": HOSTILE["cron"], "tz": "Europe/Berlin", "dst_gap": "skip", "count": 5}
    _refused(api.call("POST", "/v1/schedules/preview", "read", json=body))
    # the same expression fires under the other gap policies: at the change, or shifted
    for gap, first in [("next_valid", "01:00:00Z"), ("shift", "01:30:00Z")]:
        r = api.call("POST", "/v1/schedules/preview", "read", json=body | {"dst_gap": gap})
        assert r.status_code == 200, r.text
        assert r.json()["items"][0]["utc"].endswith(first)


def test_create_put_and_patch_refuse_it_and_store_nothing(api: Api) -> None:
    before = api.counts()
    _refused(api.call("POST", "/v1/jobs", json={"name": "j", "task": "t", "schedule": HOSTILE}))
    _refused(api.call("PUT", "/v1/jobs/j", json={"task": "t", "schedule": HOSTILE}))
    assert api.counts() == before
    api.cron_job()
    _refused(api.call("PATCH", "/v1/jobs/nightly", json={"schedule": HOSTILE}))
    assert api.call("GET", "/v1/jobs/nightly").json()["schedule"]["cron"] != HOSTILE["cron"]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("cronwheel: error: schedule: does not fire within 50 years")
    return lines[0]


def test_cli_next_refuses_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(
        ["next", "30 2 * 3 0L", "--tz", "Europe/Berlin", "--dst-gap", "skip"], capsys
    )
    assert (code, out) == (2, "")
    _one_line(err)


def test_cli_jobs_add_refuses_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = f"sqlite:///{tmp_path}/t.db"
    argv = ["jobs", "add", "j", "--task", "t", "--cron", "30 2 * 3 0L", "--tz", "Europe/Berlin"]
    code, _, err = _run([*argv, "--dst-gap", "skip", "--store", store], capsys)
    assert code == 2
    _one_line(err)
    code, out, _ = _run(["jobs", "list", "--json", "--store", store], capsys)
    assert (code, out.strip()) == (0, "[]")


def test_app_schedule_refuses_it(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path}/a.db")
    hostile = cron("30 2 * 3 0L", "Europe/Berlin", dst_gap="skip")
    with pytest.raises(NoFiringInHorizonError) as info:
        app.schedule("t", hostile, name="j")
    assert info.value.field == "schedule"
    assert app.store.list_jobs(namespace=app.namespace, limit=10) == []
    assert app.schedule("t", cron("30 2 * 3 0L", "Europe/Berlin"), name="j").name == "j"
