"""``/v1/retention`` and the status' retention: a namespace's policy, read by any of its
tokens, changed or reset by an admin one; a bad value is a 422 naming the field and
changes nothing; another namespace's policy is untouched."""

from __future__ import annotations

from cronwheel.domain.retention import DEFAULT_RETENTION
from tests.api.conftest import NS, OTHER, Api


def test_read_change_reset_and_refusals(api: Api) -> None:
    r = api.call("GET", "/v1/retention", "read")
    assert r.status_code == 200
    assert r.json() == {"namespace": NS, "custom": False, "keep_for_s": 604800.0, "keep_last": 1}
    assert api.call("PUT", "/v1/retention", "write", json={"keep_last": 3}).status_code == 403
    r = api.call("PUT", "/v1/retention", "admin", json={"keep_for": "30d", "keep_last": 3})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "namespace": NS,
        "custom": True,
        "keep_for_s": 30 * 86400.0,
        "keep_last": 3,
    }
    assert api.call("PUT", "/v1/retention", "admin", json={"keep_for": 60}).json()["keep_last"] == 3
    for body, field in (
        ({"keep_for": "soon"}, "keep_for"),
        ({"keep_for": -5}, "keep_for"),
        ({"keep_last": 1001}, "keep_last"),
        ({"keep_last": "3"}, "keep_last"),
        ({"keep": 1}, "keep"),
    ):
        r = api.call("PUT", "/v1/retention", "admin", json=body)
        assert r.status_code == 422, (body, r.text)
        assert field in r.text
    assert api.store.get_retention(NS).keep_for.total_seconds() == 60  # unchanged
    assert api.store.get_retention(OTHER) == DEFAULT_RETENTION
    status = api.call("GET", "/v1/status", "read").json()
    assert status["retention"]["keep_for_s"] == 60 and status["retention"]["custom"]
    r = api.call("DELETE", "/v1/retention", "admin")
    assert r.status_code == 200 and r.json()["custom"] is False
    assert api.store.list_retention() == {}
