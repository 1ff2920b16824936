"""The batch endpoints: ``POST /v1/jobs/batch`` and ``POST /v1/firings/batch``.

Per item: each valid item written, each refused one answered with the status and error
of its single request, its field naming the item; all or nothing: one refused item
refuses the batch and nothing is stored. Bounded: at most 1,000 items (422 naming
``items``) and the body guard's size limit (413)."""

from __future__ import annotations

from typing import Any

from cronwheel.domain.batch import BATCH_LIMIT
from tests.api.conftest import Api

AT = "2026-03-02T09:00:00Z"  # after T0


def _job(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "task": "report", "schedule": {"kind": "at", "at": AT}} | extra


def test_jobs_batch_creates_each_item_as_post_jobs_does(api: Api) -> None:
    items = [_job(f"r-{i}", args=[i]) for i in range(3)]
    items.append(
        {
            "name": "nightly",
            "task": "report",
            "schedule": {"kind": "cron", "cron": "0 9 * * *", "tz": "Europe/Berlin"},
            "policies": {"retries": 2},
        }
    )
    r = api.call("POST", "/v1/jobs/batch", json={"items": items})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert (doc["created"], doc["refused"]) == (4, 0)
    assert [(d["index"], d["status"]) for d in doc["items"]] == [(i, 201) for i in range(4)]
    for d in doc["items"]:  # the job as GET /v1/jobs/{name} shows it
        shown = api.call("GET", f"/v1/jobs/{d['job']['name']}").json()
        shown.pop("next_fire_times")
        assert {k: v for k, v in d["job"].items() if v is not None} == {
            k: v for k, v in shown.items() if v is not None
        }
    single = api.call("POST", "/v1/jobs", json=_job("single", args=[0])).json()
    one = doc["items"][0]["job"]
    for key in ("id", "name", "created_at", "updated_at", "next_fire_times"):
        single.pop(key, None), one.pop(key, None)
    assert one == single
    assert doc["items"][3]["job"]["policies"]["max_attempts"] == 3


def test_jobs_batch_reports_each_refused_item(api: Api) -> None:
    api.cron_job("taken")
    items = [
        _job("ok-1"),
        _job("taken"),
        {"name": "bad", "task": "report", "schedule": {"kind": "cron", "cron": "61 * * * *"}},
        "not an object",
        _job("ok-1"),  # an earlier item took it
        {"name": "x", "task": "report"},
        _job("past", schedule={"kind": "at", "at": "2020-01-01T00:00:00Z"}),
        _job("extra", colour="red"),
        _job("ok-2"),
    ]
    r = api.call("POST", "/v1/jobs/batch", json={"items": items})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert (doc["created"], doc["refused"]) == (2, 7)
    errors = [(d["status"], d.get("error") or {}) for d in doc["items"]]
    got = [(status, e.get("code"), e.get("field")) for status, e in errors]
    assert got == [
        (201, None, None),
        (409, "job_exists", "items[1].name"),
        (422, "invalid_cron", "items[2].schedule.cron"),
        (422, "invalid_input", "items[3]"),
        (409, "job_exists", "items[4].name"),
        (422, "invalid_input", "items[5].schedule"),
        (422, "invalid_input", "items[6].schedule.at"),
        (422, "invalid_input", "items[7].colour"),
        (201, None, None),
    ]
    names = [j["name"] for j in api.call("GET", "/v1/jobs").json()["items"]]
    assert names == ["taken", "ok-1", "ok-2"]


def test_jobs_batch_all_or_nothing_stores_nothing(api: Api) -> None:
    api.cron_job("taken")
    before = api.counts()
    items = [_job("fresh"), _job("taken"), _job("bad", schedule={"kind": "at", "at": "soon"})]
    r = api.call("POST", "/v1/jobs/batch", json={"items": items, "all_or_nothing": True})
    assert r.status_code == 422, r.text
    doc = r.json()
    assert doc["error"]["code"] == "invalid_batch"
    assert doc["error"]["field"] == "items[2].schedule.at"  # found before the store is asked
    assert [(d["index"], d["status"]) for d in doc["items"]] == [(2, 422)]
    assert api.counts() == before
    # every item valid: the store's refusals, all of them, and still nothing stored
    items = [_job("fresh"), _job("taken"), _job("fresh")]
    r = api.call("POST", "/v1/jobs/batch", json={"items": items, "all_or_nothing": True})
    assert r.status_code == 409, r.text
    doc = r.json()
    assert doc["error"]["code"] == "batch_conflict"
    assert [(d["index"], d["error"]["field"]) for d in doc["items"]] == [
        (1, "items[1].name"),
        (2, "items[2].name"),
    ]
    assert api.counts() == before
    r = api.call("POST", "/v1/jobs/batch", json={"items": [_job("fresh")], "all_or_nothing": True})
    assert r.status_code == 200 and r.json()["created"] == 1


def test_batch_size_is_bounded(api: Api) -> None:
    before = api.counts()
    r = api.call("POST", "/v1/jobs/batch", json={"items": [{}] * (BATCH_LIMIT + 1)})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == "items"
    assert "1000" in r.json()["error"]["message"]
    r = api.call("POST", "/v1/firings/batch", json={"items": [{"task": "t"}] * (BATCH_LIMIT + 1)})
    assert r.status_code == 422 and r.json()["error"]["field"] == "items"
    assert api.counts() == before


def test_batch_body_size_is_guarded(api: Api) -> None:
    before = api.counts()
    big = "x" * 4000
    items = [{"task": "t", "args": [big]} for _ in range(100)]  # over the body limit
    r = api.call("POST", "/v1/firings/batch", json={"items": items})
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
    assert api.counts() == before


def test_batch_needs_a_write_token_and_stays_in_its_namespace(api: Api) -> None:
    r = api.call("POST", "/v1/jobs/batch", "read", json={"items": [_job("a")]})
    assert r.status_code == 403
    r = api.call("POST", "/v1/jobs/batch", "other-write", json={"items": [_job("a")]})
    assert r.status_code == 200 and r.json()["items"][0]["job"]["namespace"] == "team-b"
    assert api.call("GET", "/v1/jobs/a").status_code == 404  # not team-a's


def test_firings_batch_queues_each_run(api: Api) -> None:
    items = [{"task": "resize", "args": [i], "kwargs": {"w": 640}} for i in range(5)]
    items.insert(2, {"task": "bad name!"})
    items.insert(4, {"task": "resize", "args": "not a list"})
    r = api.call("POST", "/v1/firings/batch", json={"items": items})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert (doc["created"], doc["refused"]) == (5, 2)
    assert [d["status"] for d in doc["items"]] == [201, 201, 422, 201, 422, 201, 201]
    assert doc["items"][2]["error"]["field"] == "items[2].task"
    assert doc["items"][4]["error"]["field"] == "items[4].args"
    firings = [d["firing"] for d in doc["items"] if d["status"] == 201]
    assert [f["args"] for f in firings] == [[i] for i in range(5)]
    assert {f["state"] for f in firings} == {"queued"}
    for f in firings:  # each is the firing GET shows
        shown = api.call("GET", f"/v1/firings/{f['id']}").json()
        assert shown["state"] == "queued" and shown["job"] == f["job"]
    r = api.call("POST", "/v1/firings/batch", json={"items": items, "all_or_nothing": True})
    assert r.status_code == 422
    assert [d["index"] for d in r.json()["items"]] == [2, 4]
    assert api.counts()[1] == 5


def test_firings_batch_is_within_the_firings_quota(api: Api) -> None:
    r = api.call("PUT", "/v1/quota", "admin", json={"firings_per_minute": 3})
    assert r.status_code == 200, r.text
    before = api.counts()
    r = api.call("POST", "/v1/firings/batch", json={"items": [{"task": "t"}] * 4})
    assert r.status_code == 429 and r.headers["retry-after"]
    assert r.json()["error"]["code"] == "quota_exceeded"
    assert api.counts() == before
    r = api.call("POST", "/v1/firings/batch", json={"items": [{"task": "t"}] * 3})
    assert r.status_code == 200 and r.json()["created"] == 3


def test_unserved_tasks_are_refused_per_item(api: Api) -> None:
    from tests.api.test_unknown_tasks import register_worker

    register_worker(api.store, "report")
    items = [_job("a"), _job("b", task="nobody"), _job("c", task="nobody", allow_unknown_task=True)]
    doc = api.call("POST", "/v1/jobs/batch", json={"items": items}).json()
    assert [d["status"] for d in doc["items"]] == [201, 422, 201]
    assert doc["items"][1]["error"]["field"] == "items[1].task"


def test_batch_jobs_naming_a_stored_calendar_are_bound_to_it(api: Api) -> None:
    """As POST /v1/jobs: a job naming a stored calendar keeps its rules; one naming a
    calendar the namespace does not have is that item's 422 (schedule.calendar)."""
    office = {"holidays": "DE-BY", "exclude": ["2026-03-03"], "weekdays": "mon-fri"}
    assert api.call("PUT", "/v1/calendars/office", "admin", json=office).status_code == 201
    cron = {"kind": "cron", "cron": "0 9 * * *", "tz": "Europe/Berlin"}
    items = [
        {"name": f"standup-{i}", "task": "t", "schedule": cron | {"calendar": "office"}}
        for i in range(3)
    ]
    items.insert(1, {"name": "nope", "task": "t", "schedule": cron | {"calendar": "nope"}})
    doc = api.call("POST", "/v1/jobs/batch", json={"items": items}).json()
    assert [d["status"] for d in doc["items"]] == [201, 422, 201, 201]
    assert doc["items"][1]["error"]["field"] == "items[1].schedule.calendar"
    for d in doc["items"][::2]:
        assert d["job"]["schedule"]["calendar_def"]["exclude"] == ["2026-03-03"]
    single = api.call("GET", "/v1/jobs/standup-0", params={"upcoming": 2}).json()
    # Monday 2, (Tuesday 3 excluded), Wednesday 4
    assert [t["utc"][:10] for t in single["next_fire_times"]] == ["2026-03-02", "2026-03-04"]


def test_a_batch_reads_the_served_tasks_once(api: Api) -> None:
    """With no worker ever registered every task is accepted, and a batch asks the store
    for the served tasks once per task, not once per item."""
    reads: list[int] = []
    served = api.store.served_tasks

    def counting(**kw):  # type: ignore[no-untyped-def]
        reads.append(1)
        return served(**kw)

    api.store.served_tasks = counting  # type: ignore[method-assign]
    items = [_job(f"j{i}", task="report" if i % 2 else "other") for i in range(20)]
    assert api.call("POST", "/v1/jobs/batch", json={"items": items}).json()["created"] == 20
    assert len(reads) <= 2
    reads.clear()
    runs = {"items": [{"task": "resize"}] * 20}
    assert api.call("POST", "/v1/firings/batch", json=runs).json()["created"] == 20
    assert len(reads) <= 1


def test_firings_batch_items_carry_idempotency_keys(api: Api) -> None:
    """An item's ``idempotency_key`` is the ``Idempotency-Key`` of ``POST /v1/firings``
    (one key space): the same key and item answer the firing it made (200), another item
    is a conflict (409 naming the item's key); two items of one batch likewise."""
    single = api.call(
        "POST",
        "/v1/firings",
        json={"task": "resize", "args": [1]},
        headers=api.h() | {"Idempotency-Key": "upload-1"},
    )
    assert single.status_code == 201, single.text
    items = [
        {"task": "resize", "args": [1], "idempotency_key": "upload-1"},  # the single's
        {"task": "resize", "args": [2], "idempotency_key": "upload-1"},  # other args
        {"task": "resize", "args": [3], "idempotency_key": "upload-3"},
        {"task": "resize", "args": [3], "idempotency_key": "upload-3"},  # repeats item 2
        {"task": "resize", "args": [4], "idempotency_key": "upload-3"},
        {"task": "resize", "args": [5]},
        {"task": "resize", "args": [6], "idempotency_key": "has space"},
        {"task": "resize", "args": [7], "idempotency_key": 7},
        {"task": "resize", "args": [8], "idempotency_key": "k" * 256},
    ]
    before = api.counts()[1]
    r = api.call("POST", "/v1/firings/batch", json={"items": items})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert [d["status"] for d in doc["items"]] == [200, 409, 201, 200, 409, 201, 422, 422, 422]
    assert (doc["created"], doc["refused"]) == (2, 5)
    assert doc["items"][0]["firing"] == single.json()
    assert doc["items"][3]["firing"] == doc["items"][2]["firing"]
    for i in (1, 4, 6, 7, 8):
        assert doc["items"][i]["error"]["field"] == f"items[{i}].idempotency_key"
    assert doc["items"][1]["error"]["code"] == "conflict"
    assert doc["items"][6]["error"]["message"] == "must be 1-255 printable ASCII characters"
    assert api.counts()[1] == before + 2
    # a later batch, or the single endpoint, finds the batch's key
    again = api.call("POST", "/v1/firings/batch", json={"items": [items[2]]}).json()
    assert again["items"][0]["status"] == 200
    assert again["items"][0]["firing"] == doc["items"][2]["firing"]
    headers = api.h() | {"Idempotency-Key": "upload-3"}
    r = api.call("POST", "/v1/firings", json={"task": "resize", "args": [3]}, headers=headers)
    assert r.status_code == 200 and r.json() == doc["items"][2]["firing"]
    r = api.call("POST", "/v1/firings", json={"task": "resize", "args": [9]}, headers=headers)
    assert r.status_code == 409
    assert api.counts()[1] == before + 2


def test_a_conflicting_key_refuses_an_all_or_nothing_batch(api: Api) -> None:
    first = [{"task": "t", "idempotency_key": "k"}]
    assert api.call("POST", "/v1/firings/batch", json={"items": first}).status_code == 200
    before = api.counts()
    items = [{"task": "t", "idempotency_key": "new"}, {"task": "u", "idempotency_key": "k"}]
    r = api.call("POST", "/v1/firings/batch", json={"items": items, "all_or_nothing": True})
    assert r.status_code == 409, r.text
    assert [(d["index"], d["error"]["field"]) for d in r.json()["items"]] == [
        (1, "items[1].idempotency_key")
    ]
    assert api.counts() == before
    # a repeat is no error: all or nothing, the batch goes through
    items = [{"task": "t", "idempotency_key": "k"}, {"task": "t", "idempotency_key": "new"}]
    r = api.call("POST", "/v1/firings/batch", json={"items": items, "all_or_nothing": True})
    assert [d["status"] for d in r.json()["items"]] == [200, 201]
