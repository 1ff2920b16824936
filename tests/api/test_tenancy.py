"""The tenancy matrix: role (read|write|admin) x operation x own/other namespace.

A token of team-a asking for team-b's resource gets exactly (status, headers and
bytes) the answer it gets once that resource does not exist at all: no existence
oracle in get, list, filters, cursors, cancel, trigger or firing lookups.
"""

from __future__ import annotations

from typing import Any

import pytest

from cronwheel.domain.models import FiringId
from cronwheel.web.ids import ids_for
from cronwheel.web.tokens import TOKEN_CACHE_S, issue_token
from tests.api.conftest import NS, OTHER, Api

BACKFILL = {"start": "2026-02-27T00:00:00Z", "end": "2026-02-28T12:00:00Z"}
JOB = {"task": "report", "schedule": {"kind": "cron", "cron": "0 9 * * *"}}

# name -> (method, path, json body, role needed, status for own resource with that role)
OPS: dict[str, tuple[str, str, Any, str, int]] = {
    "get_job": ("GET", "/v1/jobs/X", None, "read", 200),
    "list_by_prefix": ("GET", "/v1/jobs?name_prefix=X", None, "read", 200),
    "list_by_task": ("GET", "/v1/jobs?task=report", None, "read", 200),
    "job_firings": ("GET", "/v1/jobs/X/firings", None, "read", 200),
    "get_firing": ("GET", "/v1/firings/{fid}", None, "read", 200),
    "patch": ("PATCH", "/v1/jobs/X", {"args": [1]}, "write", 200),
    "pause": ("POST", "/v1/jobs/X/pause", None, "write", 200),
    "resume": ("POST", "/v1/jobs/X/resume", None, "write", 200),
    "trigger": ("POST", "/v1/jobs/X/trigger", None, "write", 201),
    "backfill": ("POST", "/v1/jobs/X/backfill", BACKFILL, "write", 200),
    "skip": ("POST", "/v1/jobs/X/skip", {"next": 1}, "write", 200),
    "cancel": ("POST", "/v1/firings/{fid}/cancel", None, "write", 200),
    "retry": ("POST", "/v1/firings/{fid}/retry", None, "write", 409),  # not dead: invalid
    "delete": ("DELETE", "/v1/jobs/X", None, "write", 204),
    "create_same_name": ("POST", "/v1/jobs", JOB | {"name": "X"}, "write", 409),
    "put_same_name": ("PUT", "/v1/jobs/X", JOB, "write", 200),
    "enqueue": ("POST", "/v1/firings", {"task": "t"}, "write", 201),
    "preview": ("POST", "/v1/schedules/preview", {"cron": "0 9 * * *"}, "read", 200),
    "status": ("GET", "/v1/status", None, "read", 200),
}
# For another namespace's resource: the status a permitted role gets (404 = not yours).
OTHER_STATUS = {
    "list_by_prefix": 200,
    "list_by_task": 200,
    "create_same_name": 201,  # names are per namespace: this creates team-a's own X
    "put_same_name": 201,
    "enqueue": 201,
    "preview": 200,
    "status": 200,
}
RANK = {"read": 0, "write": 1, "admin": 2}


def _setup(api: Api, owner: str) -> int:
    who = "write" if owner == NS else "other-write"
    assert api.call("PUT", "/v1/jobs/X", who, json=JOB).status_code == 201
    fid = int(api.call("POST", "/v1/jobs/X/trigger", who).json()["id"])
    api.clock.advance(1)  # a later trigger is another instant
    return fid


def _request(api: Api, op: str, role: str, fid: int) -> Any:
    method, path, body, _, _ = OPS[op]
    return api.call(method, path.format(fid=fid), role, json=body)


@pytest.mark.parametrize("whose", ["own", "other"])
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("role", ["read", "write", "admin"])
def test_matrix(api: Api, role: str, op: str, whose: str) -> None:
    fid = _setup(api, NS if whose == "own" else OTHER)
    _, _, _, needed, own_status = OPS[op]
    r = _request(api, op, role, fid)
    if RANK[role] < RANK[needed]:
        assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden")
        return
    if whose == "own":
        assert r.status_code == own_status, r.text
        return
    assert r.status_code == OTHER_STATUS.get(op, 404), r.text
    if op in ("list_by_prefix", "list_by_task"):
        assert r.json()["items"] == []
    if op in OTHER_STATUS:
        return
    # the same request once team-b's job (and its firing) no longer exist at all
    api.store.delete_job(OTHER, "X")
    ghost = _request(api, op, role, fid)
    assert (ghost.status_code, ghost.content) == (r.status_code, r.content)
    assert dict(ghost.headers) == dict(r.headers)


def test_other_namespace_changes_nothing(api: Api) -> None:
    fid = _setup(api, OTHER)
    stored = FiringId(ids_for(api.store).decode("firing", fid) or 0)  # the API shows another id
    before = (api.counts(), api.store.get_job(OTHER, "X"), api.store.get_firing(stored))
    for op in ("patch", "pause", "trigger", "backfill", "cancel", "retry", "delete"):
        _request(api, op, "admin", fid)
    after = (api.counts(), api.store.get_job(OTHER, "X"), api.store.get_firing(stored))
    assert after == before


def test_cursors_do_not_cross_namespaces(api: Api) -> None:
    for i in range(3):
        api.call("PUT", f"/v1/jobs/a{i}", "write", json=JOB)
        api.call("PUT", f"/v1/jobs/b{i}", "other-write", json=JOB)
    cursor = api.call("GET", "/v1/jobs?limit=1", "read").json()["next_cursor"]
    theirs = api.call("GET", "/v1/jobs", "other-read", params={"cursor": cursor})
    garbage = api.call("GET", "/v1/jobs", "other-read", params={"cursor": "garbage"})
    assert theirs.status_code == 400
    assert theirs.content == garbage.content
    mine = api.call("GET", "/v1/jobs", "read", params={"cursor": cursor})
    assert [j["name"] for j in mine.json()["items"]] == ["a1", "a2"]


def test_missing_malformed_revoked_credentials_are_401(api: Api) -> None:
    for headers in [
        {},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer nope"},
        {"Authorization": "Bearer cw_1_" + "A" * 43},
        {"Authorization": "Bearer " + api.tokens["read"] + "x"},
        {"Authorization": "Bearer cw_999_" + api.tokens["read"].split("_", 2)[2]},
    ]:
        r = api.client.get("/v1/jobs", headers=headers)
        assert r.status_code == 401, headers
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert r.json()["error"]["code"] == "unauthorized"
        assert api.tokens["read"] not in r.text
    assert api.client.get("/v1/jobs", headers=api.h("read")).status_code == 200
    api.store.revoke_token(1)
    # the server believes a token record it read for TOKEN_CACHE_S: the revocation bound
    api.clock.advance(TOKEN_CACHE_S)
    assert api.client.get("/v1/jobs", headers=api.h("read")).status_code == 401


def test_a_revoked_token_stops_working_within_the_cache_time(api: Api) -> None:
    assert api.client.get("/v1/jobs", headers=api.h("write")).status_code == 200
    api.store.revoke_token(2)  # the write token, read and cached by the request above
    api.clock.advance(TOKEN_CACHE_S * 0.9)
    assert api.client.get("/v1/jobs", headers=api.h("write")).status_code == 200
    api.clock.advance(TOKEN_CACHE_S * 0.1)
    r = api.client.get("/v1/jobs", headers=api.h("write"))
    assert (r.status_code, r.json()["error"]["code"]) == (401, "unauthorized")
    # a token created after a request with its id: not cached, works at once
    fresh = issue_token(api.store, namespace=NS, role="read")[1]
    assert api.client.get("/v1/jobs", headers=bearer(fresh)).status_code == 200
    # a wrong secret with a cached id is refused (the secret is checked every time)
    forged = "_".join(fresh.split("_", 2)[:2]) + "_" + "B" * 43
    assert forged != fresh
    assert api.client.get("/v1/jobs", headers=bearer(forged)).status_code == 401


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("param", ["token", "access_token", "ACCESS_TOKEN"])
def test_tokens_in_the_query_string_are_refused(api: Api, param: str) -> None:
    r = api.client.get(f"/v1/jobs?{param}={api.tokens['read']}")
    assert (r.status_code, r.json()["error"]["code"]) == (400, "credentials_in_query")
    r = api.client.get(f"/v1/jobs?{param}=x", headers=api.h("read"))
    assert r.status_code == 400


def test_health_needs_no_token(api: Api) -> None:
    assert api.client.get("/healthz").status_code == 200
    assert api.client.get("/readyz").status_code == 200
    assert api.client.get("/openapi.json").status_code == 200
