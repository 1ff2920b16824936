"""``GET /v1/firings``: the namespace's firings with filters and a cursor; a firing's
attempts and lateness (``GET /v1/firings/{id}``); CLAIMED in the API's answers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cronwheel.domain.models import FiringId
from cronwheel.store.protocol import Completion
from cronwheel.web.ids import ids_for
from tests.api.conftest import Api


def _job(api: Api, name: str, who: str = "write") -> None:
    body = {"name": name, "task": "report", "schedule": {"kind": "every", "interval": 3600}}
    assert api.call("POST", "/v1/jobs", who, json=body).status_code == 201


def _trigger(api: Api, name: str, n: int, who: str = "write") -> list[int]:
    ids = []
    for _ in range(n):
        r = api.call("POST", f"/v1/jobs/{name}/trigger", who)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
        api.clock.advance(60)
    return ids


def _list(api: Api, who: str = "read", **params: Any) -> dict[str, Any]:
    r = api.call("GET", "/v1/firings", who, params=params)
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return doc


def _ids(doc: dict[str, Any]) -> list[int]:
    return [f["id"] for f in doc["items"]]


def test_lists_the_namespaces_firings_newest_first_over_pages(api: Api) -> None:
    _job(api, "a")
    _job(api, "b")
    ids = _trigger(api, "a", 3) + _trigger(api, "b", 2)
    seen: list[int] = []
    doc = _list(api, limit=2)
    pages = 1
    while True:
        assert len(doc["items"]) <= 2
        seen += _ids(doc)
        if doc["next_cursor"] is None:
            break
        doc = _list(api, limit=2, cursor=doc["next_cursor"])
        pages += 1
    assert (seen, pages) == (ids[::-1], 3)  # newest first (ids shown are not ordered)
    assert _list(api)["next_cursor"] is None  # default limit 100: one page


def test_filters_by_state_job_and_scheduled_range(api: Api) -> None:
    _job(api, "a")
    _job(api, "b")
    a1, a2, a3 = _trigger(api, "a", 3)
    (b1,) = _trigger(api, "b", 1)
    api.call("POST", f"/v1/firings/{a1}/cancel")
    # a claim holds a2 (claimed, not started)
    (held,) = api.store.claim("w1", tasks=["report"], limit=1, start=0)
    assert ids_for(api.store).encode("firing", held.firing.id) == a2
    assert _ids(_list(api, job="a")) == [a3, a2, a1]
    assert _ids(_list(api, state="claimed")) == [a2]
    assert _ids(_list(api, state=["cancelled", "claimed"])) == [a2, a1]
    assert _ids(_list(api, state="queued", job="b")) == [b1]
    doc = _list(api, state="claimed")["items"][0]
    assert doc["state"] == "claimed" and doc["claimed_at"] == "2026-03-01T12:04:00Z"
    assert doc["started_at"] is None and doc["worker_id"] == "w1"
    # scheduled_from <= scheduled_for < scheduled_to (trigger: scheduled at its call)
    ranged = _list(
        api, scheduled_from="2026-03-01T12:01:00Z", scheduled_to="2026-03-01T13:03:00+01:00"
    )
    assert _ids(ranged) == [a3, a2]
    assert _list(api, job="nope")["items"] == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "1_000"}, "limit"),
        ({"limit": "+5"}, "limit"),
        ({"limit": " 5"}, "limit"),
        ({"limit": "5.0"}, "limit"),
        ({"limit": "٥"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"state": "held"}, "state.0"),
        ({"scheduled_from": "yesterday"}, "scheduled_from"),
        ({"scheduled_to": "2026-03-01 12:00"}, "scheduled_to"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"job": ""}, "job"),
    ],
)
def test_bad_input_names_the_field_and_changes_nothing(
    api: Api, params: dict[str, str], field: str
) -> None:
    _job(api, "a")
    _trigger(api, "a", 2)
    before = api.counts()
    r = api.call("GET", "/v1/firings", params=params)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == field
    assert api.counts() == before


def test_a_cursor_of_another_listing_or_namespace_is_refused(api: Api) -> None:
    _job(api, "a")
    _trigger(api, "a", 3)
    job_cursor = api.call("GET", "/v1/jobs/a/firings", params={"limit": 1}).json()["next_cursor"]
    r = api.call("GET", "/v1/firings", params={"cursor": job_cursor})
    assert (r.status_code, r.json()["error"]["field"]) == (400, "cursor")
    mine = _list(api, limit=1)["next_cursor"]
    r = api.call("GET", "/v1/firings", "other-read", params={"cursor": mine})
    assert (r.status_code, r.json()["error"]["code"]) == (400, "invalid_cursor")


def test_a_token_sees_only_its_namespaces_firings(api: Api) -> None:
    _job(api, "a")
    mine = _trigger(api, "a", 2)
    _job(api, "a", who="other-write")
    theirs = _trigger(api, "a", 3, who="other-write")
    assert _ids(_list(api)) == mine[::-1]
    assert _ids(_list(api, "other-read", job="a")) == theirs[::-1]
    assert api.call("GET", f"/v1/firings/{theirs[0]}", "read").status_code == 404


def test_the_list_needs_a_token(api: Api) -> None:
    r = api.client.get("/v1/firings")
    assert r.status_code == 401


def _run(api: Api, worker: str, *, ok: bool, late: timedelta) -> None:
    api.clock.advance(late.total_seconds())
    (claim,) = api.store.claim(worker, tasks=["report"], limit=1)
    now = api.store.now()
    done = Completion(
        firing_id=FiringId(claim.firing.id),
        claim_token=claim.claim_token,
        succeeded=ok,
        started_at=now,
        finished_at=now + timedelta(seconds=1),
        error=None if ok else "boom",
        retry_at=None if ok else now,
    )
    assert api.store.complete([done]) == [True]


def test_a_firing_lists_its_attempts_and_is_as_late_as_its_first(api: Api) -> None:
    _job(api, "a")
    (fid,) = _trigger(api, "a", 1)  # scheduled 12:00, the clock now 12:01
    doc = api.call("GET", f"/v1/firings/{fid}", "read").json()
    assert doc["attempts"] == [] and doc["lateness_ms"] is None
    _run(api, "w1", ok=False, late=timedelta(seconds=2))
    _run(api, "w2", ok=False, late=timedelta(seconds=5))
    _run(api, "w3", ok=True, late=timedelta(seconds=5))
    doc = api.call("GET", f"/v1/firings/{fid}", "read").json()
    assert [(a["attempt"], a["worker_id"], a["outcome"]) for a in doc["attempts"]] == [
        (1, "w1", "failed"),
        (2, "w2", "failed"),
        (3, "w3", "succeeded"),
    ]
    first = doc["attempts"][0]
    assert (first["claimed_at"], first["started_at"]) == ("2026-03-01T12:01:02Z",) * 2
    assert first["finished_at"] == "2026-03-01T12:01:03Z" and first["error"] == "boom"
    assert doc["lateness_ms"] == 62_000.0  # 12:01:02 - 12:00:00, not the last start
    (item,) = _list(api)["items"]
    assert item["lateness_ms"] == 62_000.0 and item["attempts"] is None
    (item,) = api.call("GET", "/v1/jobs/a/firings").json()["items"]
    assert item["lateness_ms"] == 62_000.0


def test_status_counts_claimed_firings_apart(api: Api) -> None:
    for name in "abcd":
        _job(api, name)
        _trigger(api, name, 1)
    api.store.claim("w1", tasks=["report"], limit=3, start=1)
    doc = api.call("GET", "/v1/status", "read").json()
    assert (doc["queue_depth"], doc["claimed"], doc["running"]) == (1, 2, 1)
    assert doc["backlog"] == {"a": 1, "b": 1, "c": 1, "d": 1}


def test_retry_and_cancel_answers_tell_the_first_attempts_lateness(api: Api) -> None:
    _job(api, "a")
    (fid,) = _trigger(api, "a", 1)  # scheduled 12:00, the clock now 12:01
    for worker in ("w1", "w2", "w3"):  # the default 3 attempts, all failed: dead
        _run(api, worker, ok=False, late=timedelta(seconds=10))
    assert api.call("GET", f"/v1/firings/{fid}").json()["state"] == "dead"
    r = api.call("POST", f"/v1/firings/{fid}/retry")
    assert (r.json()["state"], r.json()["lateness_ms"]) == ("queued", 70_000.0)
    r = api.call("POST", f"/v1/firings/{fid}/cancel")
    assert r.json()["result"] == "cancelled"
    assert r.json()["firing"]["lateness_ms"] == 70_000.0
    doc = api.call("GET", f"/v1/firings/{fid}").json()
    assert [a["outcome"] for a in doc["attempts"]] == ["failed"] * 3
