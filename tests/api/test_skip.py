"""POST /v1/jobs/{name}/skip: skip occurrences without pausing the job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.domain.fates import explain
from cronwheel.domain.firing import FiringState
from cronwheel.web.ids import ids_for
from tests.api.conftest import Api, Server

# "0 9 * * *" in Europe/Berlin from T0 (2026-03-01 12:00Z): 09:00 CET is 08:00Z
MON = "2026-03-02T08:00:00Z"
TUE = "2026-03-03T08:00:00Z"


def _skip(api: Api, body: object, who: str = "write", name: str = "nightly") -> object:
    return api.call("POST", f"/v1/jobs/{name}/skip", who, json=body)


def test_skip_one_occurrence_names_who_and_why_and_explain_shows_it(api: Api) -> None:
    api.cron_job()
    r = _skip(api, {"at": [MON], "reason": "bank holiday"})
    assert r.status_code == 200, r.text
    reason = "skipped by write: bank holiday"  # the token's label
    (res,) = r.json()["results"]
    assert r.json()["reason"] == reason
    assert (res["at"], res["outcome"], res["state"]) == (MON, "skipped", "skipped")
    f = api.store.get_firing(ids_for(api.store).decode("firing", res["firing_id"]))  # the id shown
    assert f.state is FiringState.SKIPPED and f.reason == reason
    job = api.store.get_job("team-a", "nightly")
    assert job.paused is False  # the job itself goes on
    at = datetime(2026, 3, 2, 8, tzinfo=UTC)
    (occ,) = explain(
        job,
        since=at,
        until=at,
        now=at + timedelta(hours=1),
        firings=api.store.list_firings(job_id=job.id),
        events=[],
    )
    assert (occ.fate, occ.detail, occ.firing_id) == ("skipped", reason, f.id)
    again = _skip(api, {"at": [MON]}).json()["results"]
    assert [x["outcome"] for x in again] == ["already_skipped"]


def test_skip_next_n_from_now(api: Api) -> None:
    api.cron_job()
    r = _skip(api, {"next": 2})
    assert r.status_code == 200, r.text
    assert [x["at"] for x in r.json()["results"]] == [MON, TUE]
    assert r.json()["reason"] == "skipped by write"


def test_a_running_occurrence_is_refused_with_its_state(api: Api) -> None:
    api.cron_job()
    api.store.add_firings("team-a", "nightly", [datetime(2026, 3, 1, 8, tzinfo=UTC)], note="x")
    (claim,) = api.store.claim("w", tasks=["report"], limit=1)
    before = api.counts()
    r = _skip(api, {"at": ["2026-03-01T08:00:00Z"]})
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["field"] == "at" and "running" in err["message"]
    assert api.store.get_firing(claim.firing.id).state is FiringState.RUNNING
    assert api.counts() == before


@pytest.mark.parametrize(
    ("who", "name", "body", "status", "field"),
    [
        ("write", "nope", {"at": [MON]}, 404, "name"),
        ("write", "nightly", {"at": ["2026-03-02T09:00:00Z"]}, 422, "at"),  # not 09:00 Berlin
        ("write", "nightly", {"at": ["yesterday"]}, 422, "at[0]"),
        ("write", "nightly", {"at": ["0001-01-01T00:00:00Z"]}, 422, "at"),
        ("write", "nightly", {"at": ["9999-12-31T23:59:59.999999Z"]}, 422, "at"),
        ("write", "nightly", {"at": []}, 422, "at"),
        ("write", "nightly", {"next": 0}, 422, "next"),
        ("write", "nightly", {"next": 101}, 422, "next"),
        ("write", "nightly", {"next": "2"}, 422, "next"),
        ("write", "nightly", {"at": [MON], "next": 1}, 422, "at"),
        ("write", "nightly", {}, 422, "at"),
        ("write", "nightly", {"next": 1, "reason": "x" * 501}, 422, "reason"),
        ("write", "nightly", {"next": 1, "who": "mallory"}, 422, "who"),
        ("read", "nightly", {"next": 1}, 403, None),
        ("other-write", "nightly", {"next": 1}, 404, "name"),
    ],
)
def test_bad_skips_change_nothing(
    api: Api, who: str, name: str, body: object, status: int, field: str | None
) -> None:
    api.cron_job()
    before = api.counts()
    r = _skip(api, body, who=who, name=name)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    if field is not None:
        assert err["field"] == field, err
    assert api.counts() == before


def test_without_authentication_the_skip_is_signed_anonymous(open_api: Api) -> None:
    open_api.cron_job()
    r = _skip(open_api, {"next": 1, "reason": "maintenance"})
    assert r.status_code == 200, r.text
    assert r.json()["reason"] == "skipped by anonymous: maintenance"


def test_client_skip_round_trip(server: Server) -> None:
    from cronwheel import Client, InvalidTransitionError, ValidationError, cron
    from cronwheel.client import ForbiddenError

    with Client(server.url, token=server.write, timeout=5) as api:
        api.create_job("nightly", "report", cron("0 9 * * *", tz="Europe/Berlin"))
        (first,) = api.skip("nightly", next=1, reason="audit")
        assert (first.outcome, first.state) == ("skipped", FiringState.SKIPPED)
        (again,) = api.skip("nightly", at=[first.at])
        assert (again.outcome, again.firing_id) == ("already_skipped", first.firing_id)
        with pytest.raises(ValidationError) as err:
            api.skip("nightly", next=500)
        assert err.value.field == "next"
        past = cron("0 9 * * *", tz="Europe/Berlin").next_after(first.at - timedelta(days=2))
        assert past is not None
        server.store.add_firings("team-a", "nightly", [past], note="backfill")
        (running,) = server.store.claim("w", tasks=["report"], limit=1)
        with pytest.raises(InvalidTransitionError) as refused:
            api.skip("nightly", at=[past])
        assert refused.value.field == "at" and "running" in refused.value.message
        assert server.store.get_firing(running.firing.id).state is FiringState.RUNNING
    with Client(server.url, token=server.read, timeout=5) as api, pytest.raises(ForbiddenError):
        api.skip("nightly", next=1)
    assert len(server.store.list_firings()) == 2
