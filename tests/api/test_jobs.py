"""Jobs endpoints: every happy path and every error code."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.api.conftest import NS, Api


def _err(r: object) -> dict[str, object]:
    body = r.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "field"}
    return body["error"]  # type: ignore[no-any-return]


def test_create_get_and_next_fire_times(api: Api) -> None:
    job = api.cron_job(args=[1, "x"], kwargs={"k": None}, policies={"max_attempts": 5})
    assert job["namespace"] == "team-a"
    assert job["state"] == "active"
    assert job["policies"]["max_attempts"] == 5
    assert job["next_fire_at"] == "2026-03-02T08:00:00Z"
    got = api.call("GET", "/v1/jobs/nightly", "read", params={"upcoming": 3}).json()
    assert got["next_fire_times"] == [
        {"utc": "2026-03-02T08:00:00Z", "local": "2026-03-02T09:00:00+01:00"},
        {"utc": "2026-03-03T08:00:00Z", "local": "2026-03-03T09:00:00+01:00"},
        {"utc": "2026-03-04T08:00:00Z", "local": "2026-03-04T09:00:00+01:00"},
    ]
    assert got["args"] == [1, "x"] and got["kwargs"] == {"k": None}


def test_create_existing_name_is_409_job_exists(api: Api) -> None:
    api.cron_job()
    r = api.call(
        "POST", "/v1/jobs", json={"name": "nightly", "task": "t", "schedule": {"kind": "now"}}
    )
    assert r.status_code == 409
    assert _err(r) == {
        "code": "job_exists",
        "message": "a job named 'nightly' already exists in namespace 'team-a'",
        "field": "name",
    }


@pytest.mark.parametrize(
    ("schedule", "code", "field"),
    [
        ({"kind": "cron", "cron": "61 * * * *"}, "invalid_cron", "schedule.cron"),
        ({"kind": "cron", "cron": "0 0 30 2 *"}, "invalid_cron", "schedule.cron"),
        (
            {"kind": "cron", "cron": "0 9 * * *", "tz": "Mars/Olympus"},
            "unknown_timezone",
            "schedule.tz",
        ),
        ({"kind": "cron", "cron": "0 9 * * *", "tz": "UTC+5"}, "unknown_timezone", "schedule.tz"),
        (
            {"kind": "cron", "cron": "0 9 * * *", "dst_gap": "later"},
            "invalid_input",
            "schedule.dst_gap",
        ),
        ({"kind": "every", "interval": 0}, "invalid_schedule", "schedule.interval"),
        ({"kind": "every", "interval": -5}, "invalid_schedule", "schedule.interval"),
        ({"kind": "every", "interval": "0s"}, "invalid_schedule", "schedule.interval"),
        (
            {"kind": "every", "interval": "1h", "cron": "* * * * *"},
            "invalid_input",
            "schedule.cron",
        ),
        ({"kind": "at", "at": "2026-03-01T09:00:00"}, "invalid_schedule", "schedule.at"),
        ({"kind": "at", "at": "2026-02-30T09:00:00Z"}, "invalid_schedule", "schedule.at"),
        ({"kind": "at", "at": "0000-01-01T00:00:00Z"}, "invalid_schedule", "schedule.at"),
        ({"kind": "at", "at": "10000-01-01T00:00:00Z"}, "invalid_schedule", "schedule.at"),
        ({"kind": "at", "at": "2027-01-01T00:00:00+24:00"}, "invalid_schedule", "schedule.at"),
        ({"kind": "at", "at": "2026-01-01T00:00:00Z"}, "invalid_input", "schedule.at"),  # past
        ({"kind": "yearly"}, "invalid_input", "schedule.kind"),
        ({"kind": "every", "interval": True}, "invalid_input", "schedule.interval"),
    ],
)
def test_bad_schedules_are_422_naming_the_field(
    api: Api, schedule: dict[str, object], code: str, field: str
) -> None:
    before = api.counts()
    r = api.call("POST", "/v1/jobs", json={"name": "j", "task": "t", "schedule": schedule})
    assert r.status_code == 422, r.text
    err = _err(r)
    assert (err["code"], err["field"]) == (code, field)
    assert api.counts() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": 1}, "name"),
        ({"name": ""}, "name"),
        ({"name": "a\nb"}, "name"),
        ({"name": "a\x00b"}, "name"),
        ({"name": "x" * 201}, "name"),
        ({"task": "rm -rf /"}, "task"),
        ({"args": {"a": 1}}, "args"),
        ({"kwargs": [1]}, "kwargs"),
        ({"policies": {"max_attempts": "1"}}, "policies.max_attempts"),
        ({"policies": {"max_attempts": 0}}, "policies.max_attempts"),
        ({"policies": {"misfire": "sometimes"}}, "policies.misfire"),
        ({"policies": {"priority": 1e9}}, "policies.priority"),
        ({"policies": {"visibility_timeout": "0s"}}, "policies.visibility_timeout"),
        ({"policies": {"visibility_timeout": -1}}, "policies.visibility_timeout"),
        ({"policies": {"retries": -1}}, "policies.retries"),
        ({"policies": {"retries": 1, "max_attempts": 2}}, "policies.retries"),
        ({"paused": "yes"}, "paused"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_bad_fields_are_422(api: Api, body: dict[str, object], field: str) -> None:
    base = {"name": "j", "task": "t", "schedule": {"kind": "every", "interval": 60}}
    before = api.counts()
    r = api.call("POST", "/v1/jobs", json=base | body)
    assert r.status_code == 422, r.text
    assert _err(r)["field"] == field
    assert api.counts() == before


def test_put_creates_then_is_a_noop_then_updates(api: Api) -> None:
    body = {"task": "t", "schedule": {"kind": "every", "interval": "1h30m"}, "args": [1]}
    r1 = api.call("PUT", "/v1/jobs/deploy", json=body)
    assert (r1.status_code, r1.json()["changed"]) == (201, True)
    r2 = api.call("PUT", "/v1/jobs/deploy", json=body)
    assert (r2.status_code, r2.json()["changed"]) == (200, False)
    assert r2.json()["updated_at"] == r1.json()["updated_at"]
    r3 = api.call("PUT", "/v1/jobs/deploy", json=body | {"args": [2]})
    assert (r3.status_code, r3.json()["changed"], r3.json()["args"]) == (200, True, [2])


def test_put_keeps_pause_unless_given_and_tolerates_a_past_at(api: Api) -> None:
    body = {"task": "t", "schedule": {"kind": "at", "at": "2026-03-01T13:00:00Z"}}
    assert api.call("PUT", "/v1/jobs/once", json=body).status_code == 201
    api.call("POST", "/v1/jobs/once/pause")
    api.clock.advance(timedelta(hours=2))  # the `at` is now in the past: same body, no error
    r = api.call("PUT", "/v1/jobs/once", json=body)
    assert (r.status_code, r.json()["changed"], r.json()["paused"]) == (200, False, True)
    r = api.call("PUT", "/v1/jobs/once", json=body | {"paused": False})
    assert (r.json()["changed"], r.json()["state"]) == (True, "active")


def test_patch_merges_fields_and_policies(api: Api) -> None:
    api.cron_job(policies={"max_attempts": 4, "timeout": "30s"})
    r = api.call("PATCH", "/v1/jobs/nightly", json={"policies": {"priority": 2}, "args": [9]})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["policies"]["max_attempts"] == 4 and doc["policies"]["timeout"] == 30.0
    assert (doc["policies"]["priority"], doc["args"], doc["changed"]) == (2.0, [9], True)
    r = api.call(
        "PATCH", "/v1/jobs/nightly", json={"schedule": {"kind": "every", "interval": 3600}}
    )
    assert r.json()["schedule"]["interval"] == "1h" and r.json()["next_fire_at"] == (
        "2026-03-01T13:00:00Z"
    )
    r = api.call("PATCH", "/v1/jobs/nightly", json={"paused": True})
    assert r.json()["state"] == "paused"
    assert api.call("PATCH", "/v1/jobs/missing", json={}).status_code == 404
    assert api.call("PATCH", "/v1/jobs/nightly", json={"name": "x"}).status_code == 422


def test_pause_resume_delete(api: Api) -> None:
    api.cron_job()
    assert api.call("POST", "/v1/jobs/nightly/pause").json()["state"] == "paused"
    assert api.call("POST", "/v1/jobs/nightly/resume").json()["state"] == "active"
    r = api.call("DELETE", "/v1/jobs/nightly")
    assert (r.status_code, r.content) == (204, b"")
    for method, path in [
        ("GET", "/v1/jobs/nightly"),
        ("DELETE", "/v1/jobs/nightly"),
        ("POST", "/v1/jobs/nightly/pause"),
        ("POST", "/v1/jobs/nightly/resume"),
    ]:
        r = api.call(method, path)
        assert r.status_code == 404
        assert _err(r) == {
            "code": "not_found",
            "message": "no job named 'nightly'",
            "field": "name",
        }


def test_list_filters_and_pages(api: Api) -> None:
    for i in range(5):
        api.cron_job(f"job-{i}")
    api.cron_job("50%_off", task="promo")
    api.call("POST", "/v1/jobs/job-1/pause")
    done = {"name": "gone", "task": "t", "schedule": {"kind": "at", "at": "2026-03-01T11:00:00Z"}}
    assert api.call("POST", "/v1/jobs", json=done | {"allow_past": True}).status_code == 201

    def names(**params: object) -> list[str]:
        r = api.call("GET", "/v1/jobs", "read", params=params)
        assert r.status_code == 200, r.text
        return [j["name"] for j in r.json()["items"]]

    assert names(state="paused") == ["job-1"]
    assert names(task="promo") == ["50%_off"]
    assert names(name_prefix="50%_") == ["50%_off"]
    assert names(name_prefix="%") == []
    assert names(name_prefix="_") == []
    assert "gone" in names(state="active")  # an at in the past fires once: still active
    seen, cursor = [], None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = api.call("GET", "/v1/jobs", "read", params=params).json()
        seen += [j["name"] for j in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == names(limit=500)
    assert len(seen) == 7


def test_done_state(api: Api) -> None:
    api.call(
        "POST",
        "/v1/jobs",
        json={"name": "n", "task": "t", "schedule": {"kind": "every", "interval": 60}},
    )
    api.store.db.conn.execute("UPDATE jobs SET next_fire_at = NULL WHERE name = 'n'")
    r = api.call("GET", "/v1/jobs", params={"state": "done"})
    assert [j["name"] for j in r.json()["items"]] == ["n"]


def test_trigger_fires_now_once_per_instant(api: Api) -> None:
    api.cron_job()
    r = api.call("POST", "/v1/jobs/nightly/trigger")
    assert r.status_code == 201
    firing = r.json()
    assert (firing["scheduled_for"], firing["state"], firing["note"]) == (
        "2026-03-01T12:00:00Z",
        "queued",
        "trigger",
    )
    r = api.call("POST", "/v1/jobs/nightly/trigger")  # same instant (the clock did not move)
    assert (r.status_code, _err(r)["code"]) == (409, "conflict")
    api.clock.advance(1)
    assert api.call("POST", "/v1/jobs/nightly/trigger").status_code == 201
    job = api.call("GET", "/v1/jobs/nightly").json()
    assert job["next_fire_at"] == "2026-03-02T08:00:00Z"  # the cursor did not move


def test_backfill(api: Api) -> None:
    api.cron_job()
    body = {"start": "2026-02-20T00:00:00Z", "end": "2026-02-25T08:00:00Z"}
    r = api.call("POST", "/v1/jobs/nightly/backfill", json=body)
    assert r.status_code == 200, r.text
    assert r.json() | {"firing_ids": []} == {
        "requested": 6,
        "inserted": 6,
        "duplicates": 0,
        "firing_ids": [],
    }
    again = api.call("POST", "/v1/jobs/nightly/backfill", json=body).json()
    assert (again["inserted"], again["duplicates"]) == (0, 6)
    firings = api.call("GET", "/v1/jobs/nightly/firings").json()["items"]
    assert firings[-1]["scheduled_for"] == "2026-02-20T08:00:00Z"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"start": "2026-02-01T00:00:00Z", "end": "2026-04-01T00:00:00Z"}, "end"),  # future
        ({"start": "2026-02-10T00:00:00Z", "end": "2026-02-01T00:00:00Z"}, "start"),
        ({"start": "2026-02-10T00:00:00", "end": "2026-02-11T00:00:00Z"}, "start"),
        ({"start": "2020-01-01T00:00:00Z", "end": "2026-02-01T00:00:00Z"}, "end"),  # > 1000
        ({"start": "0001-01-01T00:00:00Z", "end": "2026-02-01T00:00:00Z"}, "end"),
        ({"start": 1, "end": "2026-02-01T00:00:00Z"}, "start"),
    ],
)
def test_backfill_errors(api: Api, body: dict[str, object], field: str) -> None:
    api.cron_job()
    before = api.counts()
    r = api.call("POST", "/v1/jobs/nightly/backfill", json=body)
    assert (r.status_code, _err(r)["field"]) == (422, field), r.text
    assert api.counts() == before


def test_backfill_of_an_every_schedule_from_year_one_is_bounded(api: Api) -> None:
    api.store.set_quota(NS, {"min_interval": "1ms"})  # the default quota refuses 1 ms
    r = api.call(
        "POST",
        "/v1/jobs",
        json={"name": "tick", "task": "t", "schedule": {"kind": "every", "interval": 0.001}},
    )
    assert r.status_code == 201
    body = {"start": "0001-01-01T00:00:00Z", "end": "2026-03-01T11:59:59.999Z"}
    assert api.call("POST", "/v1/jobs/tick/backfill", json=body).status_code == 422


@pytest.mark.parametrize(
    "name", ["Ünïcødé ✓", "\u202eevil\u202c", "'; DROP TABLE jobs; --", "a%b_c", "日本語", "a/b"]
)
def test_names_are_stored_and_returned_byte_exactly(api: Api, name: str) -> None:
    from urllib.parse import quote

    r = api.call("POST", "/v1/jobs", json={"name": name, "task": "t", "schedule": {"kind": "now"}})
    assert r.status_code == 201, r.text
    assert r.json()["name"] == name
    got = api.call("GET", "/v1/jobs/" + quote(name, safe=""))
    assert got.status_code == 200 and got.json()["name"] == name
    listed = api.call("GET", "/v1/jobs", params={"name_prefix": name}).json()["items"]
    assert [j["name"] for j in listed] == [name]


def test_preview_matches_cronwheel_next(api: Api) -> None:
    body = {
        "cron": "30 2 * * *",
        "tz": "Europe/Berlin",
        "after": "2026-03-28T00:00:00Z",
        "count": 2,
    }
    r = api.call("POST", "/v1/schedules/preview", "read", json=body)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert (doc["dst_gap"], doc["dst_overlap"]) == ("next_valid", "once")
    assert [i["utc"] for i in doc["items"]] == ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z"]
    assert doc["items"][1]["note"].startswith("dst_gap:next_valid")
    far = api.call("POST", "/v1/schedules/preview", json=body | {"after": "9999-12-31T23:00:00Z"})
    assert far.status_code == 200 and len(far.json()["items"]) <= 1
    for bad, code, field in [
        ({"cron": "bad"}, "invalid_cron", "cron"),
        ({"tz": "Nowhere/City"}, "unknown_timezone", "tz"),
        ({"count": 0}, "invalid_input", "count"),
        ({"count": 1001}, "invalid_input", "count"),
        ({"after": "2026-03-28"}, "invalid_input", "after"),
        ({"dst_overlap": "thrice"}, "invalid_input", "dst_overlap"),
    ]:
        r = api.call("POST", "/v1/schedules/preview", json=body | bad)
        assert (r.status_code, _err(r)["code"], _err(r)["field"]) == (422, code, field), bad


def test_status_health_ready_docs_openapi(api: Api) -> None:
    api.cron_job()
    api.call("POST", "/v1/jobs/nightly/trigger")
    api.call("POST", "/v1/jobs/nightly/trigger", "other-write")  # 404 in team-b
    s = api.call("GET", "/v1/status", "read").json()
    assert s["namespace"] == "team-a" and s["queue_depth"] == 1
    assert s["backlog"] == {"nightly": 1} and s["leader"] is None
    assert api.client.get("/healthz").json() == {"status": "ok"}
    assert api.client.get("/readyz").json() == {"status": "ready"}
    docs = api.client.get("/docs")
    assert docs.status_code == 200 and "/openapi.json" in docs.text
    assert "<script" not in docs.text and "cdn" not in docs.text.lower()
    spec = api.client.get("/openapi.json").json()
    assert spec["openapi"].startswith("3.1")
    assert "/v1/jobs/{name}/backfill" in spec["paths"]
    assert "JobOut" in spec["components"]["schemas"]
    assert api.client.get("/redoc").status_code == 404


def test_readyz_is_503_when_the_store_is_gone(api: Api) -> None:
    api.store.db.conn.close()
    r = api.client.get("/readyz")
    assert (r.status_code, _err(r)["code"]) == (503, "store_unavailable")
    assert api.client.get("/healthz").status_code == 200


def test_store_unavailable_is_503_with_retry_after(api: Api, monkeypatch: object) -> None:
    from cronwheel.errors import StoreUnavailableError

    def down(*a: object, **k: object) -> None:
        raise StoreUnavailableError("sqlite: database is locked")

    monkeypatch.setattr(api.store, "search_jobs", down)  # type: ignore[attr-defined]
    r = api.call("GET", "/v1/jobs")
    assert (r.status_code, _err(r)["code"], r.headers["retry-after"]) == (
        503,
        "store_unavailable",
        "1",
    )


def test_an_unexpected_exception_is_a_logged_500_in_the_error_shape(
    api: Api, monkeypatch: object
) -> None:
    def boom(*a: object, **k: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(api.store, "search_jobs", boom)  # type: ignore[attr-defined]
    r = api.call("GET", "/v1/jobs")
    assert (r.status_code, _err(r)["code"]) == (500, "internal")


def test_unknown_route_and_method(api: Api) -> None:
    r = api.call("GET", "/v1/nothing")
    assert (r.status_code, _err(r)["code"]) == (404, "not_found")
    r = api.call("PUT", "/v1/jobs")
    assert (r.status_code, _err(r)["code"]) == (405, "method_not_allowed")


def test_without_auth_requests_act_in_default(open_api: Api) -> None:
    r = open_api.client.post(
        "/v1/jobs", json={"name": "n", "task": "t", "schedule": {"kind": "now"}}
    )
    assert r.status_code == 201 and r.json()["namespace"] == "default"
