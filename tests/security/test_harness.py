"""The harness itself: a refused request leaves the fingerprint equal, an accepted one
does not (so "nothing changed" assertions in this suite can fail)."""

from __future__ import annotations

from tests.security.conftest import Sec


def test_fingerprint_sees_a_write_and_not_a_refusal(sec: Sec) -> None:
    before = sec.fingerprint()
    r = sec.call("POST", "/v1/jobs", "read", json={"name": "x"})
    assert r.status_code in {403, 422}, r.text
    assert sec.fingerprint() == before
    sec.cron_job("nightly")
    assert sec.fingerprint() != before


def test_tokens_are_scoped_to_their_namespace(sec: Sec) -> None:
    sec.cron_job("mine")
    assert sec.call("GET", "/v1/jobs/mine", "other-admin").status_code == 404
    assert sec.call("GET", "/v1/jobs/mine", "read").status_code == 200
