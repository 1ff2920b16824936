"""Firings endpoints, immediate work and Idempotency-Key semantics."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronwheel.domain.firing import FiringState
from cronwheel.store.protocol import Completion
from cronwheel.web.ids import ids_for
from tests.api.conftest import Api


def _queued(api: Api, n: int = 1) -> list[int]:
    api.cron_job()
    ids = []
    for _ in range(n):
        ids.append(api.call("POST", "/v1/jobs/nightly/trigger").json()["id"])
        api.clock.advance(1)
    return ids


def _dead(api: Api) -> int:
    r = api.call("POST", "/v1/firings", json={"task": "fragile", "args": []})
    firing_id = r.json()["id"]
    for _ in range(3):  # default max_attempts 3
        (claimed,) = api.store.claim("w1", tasks=["fragile"], limit=1)
        now = api.store.now()
        api.store.complete(
            [
                Completion(
                    firing_id=claimed.firing.id,  # the store's id (the API shows another)
                    claim_token=claimed.claim_token,
                    succeeded=False,
                    started_at=now,
                    finished_at=now,
                    error="boom",
                    retry_at=now,
                )
            ]
        )
    assert api.call("GET", f"/v1/firings/{firing_id}").json()["state"] == "dead"
    return firing_id


def test_get_firing_has_the_tracking_fields(api: Api) -> None:
    (fid,) = _queued(api)
    doc = api.call("GET", f"/v1/firings/{fid}", "read").json()
    for key in (
        "state",
        "attempt",
        "worker_id",
        "scheduled_for",
        "enqueued_at",
        "started_at",
        "finished_at",
        "lateness_ms",
        "error",
        "idempotency_key",
    ):
        assert key in doc
    assert doc["idempotency_key"] == f"{doc['job_id']}:2026-03-01T12:00:00Z"
    r = api.call("GET", "/v1/firings/999")
    assert r.status_code == 404
    assert r.json()["error"] == {
        "code": "not_found",
        "message": "no firing with id 999",
        "field": "firing_id",
    }


def test_list_job_firings_filters_and_pages(api: Api) -> None:
    ids = _queued(api, 5)
    api.call("POST", f"/v1/firings/{ids[0]}/cancel")
    page = api.call("GET", "/v1/jobs/nightly/firings", "read", params={"limit": 2}).json()
    assert [f["id"] for f in page["items"]] == [ids[4], ids[3]]
    rest = api.call(
        "GET", "/v1/jobs/nightly/firings", params={"limit": 10, "cursor": page["next_cursor"]}
    ).json()
    assert [f["id"] for f in rest["items"]] == [ids[2], ids[1], ids[0]]
    assert rest["next_cursor"] is None
    cancelled = api.call("GET", "/v1/jobs/nightly/firings", params={"state": "cancelled"})
    assert [f["id"] for f in cancelled.json()["items"]] == [ids[0]]
    both = api.call(
        "GET", "/v1/jobs/nightly/firings", params=[("state", "cancelled"), ("state", "queued")]
    )
    assert len(both.json()["items"]) == 5
    window = api.call(
        "GET",
        "/v1/jobs/nightly/firings",
        params={"scheduled_from": "2026-03-01T12:00:01Z", "scheduled_to": "2026-03-01T12:00:03Z"},
    )
    assert [f["id"] for f in window.json()["items"]] == [ids[2], ids[1]]
    bad = api.call("GET", "/v1/jobs/nightly/firings", params={"scheduled_from": "yesterday"})
    assert (bad.status_code, bad.json()["error"]["field"]) == (400, "scheduled_from")
    bad = api.call("GET", "/v1/jobs/nightly/firings", params={"state": "exploded"})
    assert (bad.status_code, bad.json()["error"]["field"]) == (400, "state.0")
    assert api.call("GET", "/v1/jobs/missing/firings").status_code == 404


def test_cancel_outcomes(api: Api) -> None:
    first = api.call("POST", "/v1/firings", json={"task": "report"}).json()["id"]
    api.clock.advance(1)
    second = api.call("POST", "/v1/firings", json={"task": "report"}).json()["id"]
    (claimed,) = api.store.claim("w1", tasks=["report"], limit=1)
    running = ids_for(api.store).encode("firing", claimed.firing.id)
    queued = second if running == first else first
    r = api.call("POST", f"/v1/firings/{queued}/cancel")
    assert (r.json()["result"], r.json()["firing"]["state"]) == ("cancelled", "cancelled")
    r = api.call("POST", f"/v1/firings/{running}/cancel")
    assert r.json()["result"] == "cancel_requested"
    assert r.json()["firing"]["cancel_requested"] is True
    assert api.call("POST", f"/v1/firings/{queued}/cancel").json()["result"] == "already_final"
    assert api.call("POST", "/v1/firings/4242/cancel").status_code == 404


def test_a_held_firing_is_shown_claimed_and_cancelled_at_once(api: Api) -> None:
    """A firing a worker holds (claimed, not started) reads as ``claimed`` with no start
    time, the state filter takes ``claimed``, and a cancel answers ``cancelled``
    (the API answered 500 on such a firing: its response model lacked the state)."""
    held = api.call("POST", "/v1/firings", json={"task": "report"}).json()["id"]
    (claimed,) = api.store.claim("w1", tasks=["report"], limit=1, start=0)
    assert ids_for(api.store).encode("firing", claimed.firing.id) == held and not claimed.started
    r = api.call("GET", f"/v1/firings/{held}")
    assert (r.status_code, r.json()["state"], r.json()["started_at"]) == (200, "claimed", None)
    job = r.json()["job"]
    listed = api.call("GET", f"/v1/jobs/{job}/firings", params={"state": ["claimed"]})
    assert [f["id"] for f in listed.json()["items"]] == [held]
    status = api.call("GET", "/v1/status").json()
    assert (status["queue_depth"], status["claimed"], status["running"]) == (0, 1, 0)
    every = [s.value for s in FiringState]
    assert api.call("GET", f"/v1/jobs/{job}/firings", params={"state": every}).status_code == 200
    r = api.call("POST", f"/v1/firings/{held}/cancel")
    assert (r.json()["result"], r.json()["firing"]["state"]) == ("cancelled", "cancelled")
    assert api.store.start("w1", [(claimed.firing.id, claimed.claim_token)]) == set()


def test_retry_only_dead_firings(api: Api) -> None:
    dead = _dead(api)
    r = api.call("POST", f"/v1/firings/{dead}/retry")
    assert (r.status_code, r.json()["state"]) == (200, "queued")
    r = api.call("POST", f"/v1/firings/{dead}/retry")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "invalid_transition")
    assert api.call("POST", "/v1/firings/4242/retry").status_code == 404


def test_enqueue_without_key_creates_each_time(api: Api) -> None:
    body = {"task": "resize", "args": ["a.png"], "kwargs": {"w": 640}}
    a = api.call("POST", "/v1/firings", json=body)
    b = api.call("POST", "/v1/firings", json=body)
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]
    assert a.json()["args"] == ["a.png"] and a.json()["kwargs"] == {"w": 640}


def test_idempotency_key(api: Api) -> None:
    body = {"task": "resize", "args": ["a.png"], "kwargs": {"w": 640, "h": 480}}
    key = {"Idempotency-Key": "upload-42"}
    first = api.call("POST", "/v1/firings", json=body, headers=key)
    assert first.status_code == 201
    counts = api.counts()
    # same key, same body (keys in another order): the same firing, 200, nothing new
    reordered = {"kwargs": {"h": 480, "w": 640}, "args": ["a.png"], "task": "resize"}
    again = api.call("POST", "/v1/firings", json=reordered, headers=key)
    assert (again.status_code, again.json()["id"]) == (200, first.json()["id"])
    assert api.counts() == counts
    # same key, other body: 409, nothing new
    other = api.call("POST", "/v1/firings", json=body | {"args": ["b.png"]}, headers=key)
    assert (other.status_code, other.json()["error"]) == (
        409,
        {
            "code": "conflict",
            "message": "this Idempotency-Key was used with a different request body",
            "field": "Idempotency-Key",
        },
    )
    assert api.counts() == counts
    # keys are per namespace: another team's same key is its own
    theirs = api.call("POST", "/v1/firings", "other-write", json=body, headers=key)
    assert theirs.status_code == 201 and theirs.json()["id"] != first.json()["id"]
    # a later retry a day later still answers the same firing
    api.clock.advance(timedelta(days=1))
    late = api.call("POST", "/v1/firings", json=body, headers=key)
    assert (late.status_code, late.json()["id"]) == (200, first.json()["id"])


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9", "a b"])
def test_malformed_idempotency_keys_are_400(api: Api, key: str) -> None:
    before = api.counts()
    r = api.client.post(
        "/v1/firings",
        json={"task": "t"},
        headers=api.h() | {"Idempotency-Key": key.encode("utf-8")},  # type: ignore[dict-item]
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] in ("Idempotency-Key", "idempotency-key")
    assert api.counts() == before


def test_enqueue_validation(api: Api) -> None:
    before = api.counts()
    for body, field in [
        ({"task": "bad task"}, "task"),
        ({"task": "t", "args": "x"}, "args"),
        ({"task": "t", "kwargs": []}, "kwargs"),
        ({"args": []}, "task"),
        ({"task": "t", "priority": 3}, "priority"),
    ]:
        r = api.call("POST", "/v1/firings", json=body)
        assert (r.status_code, r.json()["error"]["field"]) == (422, field), body
    assert api.counts() == before
