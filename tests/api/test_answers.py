"""The answers `cronwheel api` writes unvalidated (orjson, api/calls.py) are the answers
FastAPI's response validation writes: the same documents, every optional key present."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from cronwheel.server import create_app
from tests.api.conftest import Api

_CRON = {"kind": "cron", "cron": "*/5 * * * *", "tz": "Europe/Berlin"}


def _same(api: Api, validated: TestClient, method: str, path: str, **kw: Any) -> Any:
    fast = api.call(method, path, "write", **kw)
    slow = validated.request(method, path, headers=api.h("write"), **kw)
    assert (fast.status_code, fast.json()) == (slow.status_code, slow.json()), path
    assert fast.headers["content-type"] == "application/json"
    return fast.json()


def test_unvalidated_answers_equal_validated_ones(api: Api) -> None:
    big = 10**30  # beyond orjson's 64-bit integers: the standard encoder writes it
    body = {"name": "a", "task": "t", "schedule": _CRON, "args": [big], "kwargs": {"é": 1.5}}
    created = api.call("POST", "/v1/jobs", json=body)
    assert created.status_code == 201 and created.json()["args"] == [big]
    assert created.json()["changed"] is None and created.json()["schedule"]["at"] is None
    api.call(
        "POST", "/v1/jobs", json=body | {"name": "b", "schedule": {"kind": "every", "interval": 90}}
    )
    trigger = api.call("POST", "/v1/jobs/a/trigger")
    assert trigger.status_code == 201 and trigger.json()["attempts"] is None
    fid = trigger.json()["id"]
    put = {"task": "t", "schedule": _CRON}
    assert api.call("PUT", "/v1/jobs/a", json=put).json()["changed"] is True
    with TestClient(create_app(api.store, auth_required=True, clock=api.clock)) as validated:
        assert _same(api, validated, "PUT", "/v1/jobs/a", json=put)["changed"] is False
        _same(api, validated, "GET", "/v1/jobs")
        _same(api, validated, "GET", "/v1/jobs/a")
        _same(api, validated, "GET", "/v1/jobs/b")
        _same(api, validated, "GET", f"/v1/firings/{fid}")
        _same(api, validated, "GET", "/v1/firings")
        _same(api, validated, "GET", "/v1/jobs/a/firings")
        _same(api, validated, "GET", "/v1/status")
        _same(api, validated, "GET", "/v1/jobs/nope")  # errors: the same shape either way
