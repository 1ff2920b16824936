"""A PUT of a job as it is stored is answered from a read (api/routes_jobs.py
``put_job``): no write transaction, the same document as the write path gives
(``changed`` false). A body that differs, flips ``paused``, names a stored calendar, or
comes with tracing on takes the write path."""

from __future__ import annotations

from typing import Any

import pytest

from cronwheel.server import create_app
from tests.api.conftest import Api, TestClient

BODY = {"task": "t", "schedule": {"kind": "cron", "cron": "0 9 * * *", "tz": "Europe/Berlin"}}
OFFICE = {"holidays": "DE-BY", "weekdays": "mon-fri"}


def _writes(api: Api, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the jobs the store's upsert_job was asked to write."""
    names: list[str] = []
    original = api.store.upsert_job

    def upsert(spec: Any, **kw: Any) -> Any:
        names.append(spec.name)
        return original(spec, **kw)

    monkeypatch.setattr(api.store, "upsert_job", upsert)
    return names


def _put(api: Api, name: str, body: dict[str, Any]) -> Any:
    return api.call("PUT", f"/v1/jobs/{name}", json=body | {"allow_unknown_task": True})


def test_an_unchanged_put_writes_nothing_and_answers_as_the_write_path(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = _put(api, "deploy", BODY)
    assert created.status_code == 201
    writes = _writes(api, monkeypatch)
    again = _put(api, "deploy", BODY)
    assert (again.status_code, again.json()["changed"]) == (200, False)
    assert writes == []
    monkeypatch.undo()
    # the write path's answer to the same PUT (as before the read answered it)
    monkeypatch.setattr("cronwheel.api.routes_jobs._unchanged", lambda *a: False)
    written = _put(api, "deploy", BODY)
    assert written.status_code == 200
    assert written.content == again.content


@pytest.mark.parametrize(
    "change",
    [
        {"args": [2]},
        {"paused": True},
        {"schedule": {"kind": "cron", "cron": "0 10 * * *", "tz": "Europe/Berlin"}},
    ],
)
def test_a_put_that_changes_the_job_writes_it(
    api: Api, monkeypatch: pytest.MonkeyPatch, change: dict[str, Any]
) -> None:
    assert _put(api, "deploy", BODY).status_code == 201
    writes = _writes(api, monkeypatch)
    r = _put(api, "deploy", BODY | change)
    assert (r.status_code, r.json()["changed"]) == (200, True)
    assert writes == ["deploy"] or "paused" in change  # a pause is written by set_paused
    for key, value in change.items():
        shown = r.json()[key]
        assert (shown if key != "schedule" else {k: shown[k] for k in value}) == value


def test_a_put_of_a_paused_job_as_stored_keeps_it_paused_without_a_write(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _put(api, "deploy", BODY | {"paused": True}).status_code == 201
    writes = _writes(api, monkeypatch)
    for body in (BODY, BODY | {"paused": True}):  # paused omitted keeps it; or the same
        r = _put(api, "deploy", body)
        assert (r.json()["changed"], r.json()["paused"]) == (False, True)
    assert writes == []


def test_a_put_naming_a_stored_calendar_reads_its_rules_on_the_write_path(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert api.call("PUT", "/v1/calendars/office", "admin", json=OFFICE).status_code == 201
    body = {"task": "t", "schedule": BODY["schedule"] | {"calendar": "office"}}
    assert _put(api, "standup", body).status_code == 201
    writes = _writes(api, monkeypatch)
    r = _put(api, "standup", body)
    assert (r.status_code, r.json()["changed"]) == (200, False)
    assert writes == ["standup"]  # the calendar's rules are the store's: not decided early


def test_with_tracing_on_an_unchanged_put_takes_the_write_path(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(api.store, auth_required=True, tracing=True, validate_responses=False)
    with TestClient(app) as client:
        headers = api.h() | {"Content-Type": "application/json"}
        body = BODY | {"allow_unknown_task": True}
        assert client.put("/v1/jobs/traced", json=body, headers=headers).status_code == 201
        writes = _writes(api, monkeypatch)
        r = client.put("/v1/jobs/traced", json=body, headers=headers)
    assert (r.status_code, r.json()["changed"]) == (200, False)
    assert writes == ["traced"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schedule": {"kind": "cron", "cron": "0 9 * * *", "tz": "Mars/Olympus"}}, "tz"),
        ({"schedule": {"kind": "cron", "cron": "0 99 * * *", "tz": "UTC"}}, "cron"),
    ],
)
def test_a_bad_body_for_a_stored_job_is_refused_and_changes_nothing(
    api: Api, monkeypatch: pytest.MonkeyPatch, change: dict[str, Any], field: str
) -> None:
    stored = _put(api, "deploy", BODY)
    assert stored.status_code == 201
    writes = _writes(api, monkeypatch)
    r = _put(api, "deploy", BODY | change)
    assert r.status_code == 422, r.text
    assert field in r.json()["error"]["field"]
    assert writes == []
    again = api.call("GET", "/v1/jobs/deploy").json()
    assert (
        again["schedule"]["tz"] == "Europe/Berlin"
        and again["updated_at"] == stored.json()["updated_at"]
    )
