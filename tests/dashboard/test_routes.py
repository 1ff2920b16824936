"""Dashboard routes in-process: what the HTML holds, escaping, filters, fragments, auth."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cronwheel.dashboard.words import cron_words
from cronwheel.domain.clock import FakeClock
from cronwheel.server import create_app
from cronwheel.store.sqlite import SqliteStore
from cronwheel.web.ids import ids_for
from cronwheel.web.tokens import issue_token
from tests.metrics.helpers import claim_all, finish, queue

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's TestClient packaging warning (httpx2)
    from starlette.testclient import TestClient

# the day before Berlin springs forward (2026-03-29 02:00 -> 03:00)
T0 = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
HOSTILE = "<script>alert('x')</script>\u202etxt.exe"


def _fid(store: Any, internal: int) -> int:
    """The id the dashboard shows for the store's firing ``internal``."""
    return ids_for(store).encode("firing", internal)


def _jid(store: Any, internal: int) -> int:
    """The id the dashboard shows for the store's job ``internal``."""
    return ids_for(store).encode("job", internal)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(str(tmp_path / "d.db"), clock=FakeClock(T0))
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def client(store: SqliteStore) -> Iterator[TestClient]:
    with TestClient(create_app(store, auth_required=False)) as c:
        yield c


def add_job(client: TestClient, name: str, schedule: dict[str, str], **extra: object) -> int:
    body = {"name": name, "task": "report", "schedule": schedule} | extra
    r = client.post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def test_index_lists_jobs_with_schedule_zone_and_dst_notes(client: TestClient) -> None:
    add_job(client, "nightly", {"kind": "cron", "cron": "30 2 * * *", "tz": "Europe/Berlin"})
    add_job(client, "tick", {"kind": "every", "interval": "10s"})
    r = client.get("/")
    assert r.status_code == 200
    html = r.text
    assert "nightly" in html and "tick" in html
    assert "<code>30 2 * * *</code>" in html
    assert "at 02:30 every day" in html  # in words
    assert "Europe/Berlin" in html
    assert "Sun 29 Mar 03:00:00 CEST" in html  # 02:30 does not exist that day: moved
    assert "DST gap" in html
    assert "01:00:00Z" in html


def test_hostile_names_are_escaped_and_isolated(client: TestClient, store: SqliteStore) -> None:
    job_id = add_job(client, HOSTILE, {"kind": "every", "interval": "1m"})
    queue(store, HOSTILE + "-oneshot")
    for path in ("/", "/ui/f/jobs", "/ui/f/firings", f"/ui/jobs/{job_id}"):
        html = client.get(path).text
        assert "<script>alert" not in html, path
        assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html, path
        assert "<bdi>&lt;script&gt;" in html, path  # RTL override cannot leak out of <bdi>
    assert len(re.findall(r"<script\b", client.get("/").text)) == 2  # htmx + dashboard.js only


def test_firings_filter_by_state(client: TestClient, store: SqliteStore) -> None:
    for name in ("a", "b", "c"):
        queue(store, name)
    claims = claim_all(store, limit=2)
    finish(store, claims[0], late_ms=3)
    states = {
        "": {"succeeded", "running", "queued"},
        "succeeded": {"succeeded"},
        "running": {"running"},
        "queued": {"queued"},
        "dead": set(),
    }
    for state, expected in states.items():
        r = client.get(f"/ui/f/firings?state={state}")
        assert r.status_code == 200
        assert set(re.findall(r'class="firing-row" data-state="(\w+)"', r.text)) == expected
        assert 'hx-trigger="every 2s"' in r.text
        if state:  # the polling URL keeps the filter
            assert f'hx-get="/ui/f/firings?state={state}"' in r.text
    page = client.get("/?state=running").text
    assert set(re.findall(r'class="firing-row" data-state="(\w+)"', page)) == {"running"}
    assert client.get("/ui/f/firings?state=bogus").status_code == 400
    assert client.get("/ui/f/firings?job=1'").status_code == 400


def test_held_firings_are_shown_claimed_not_finished(
    client: TestClient, store: SqliteStore
) -> None:
    """A firing a worker holds (CLAIMED) is filtered as ``claimed``, is not counted among
    the last hour's outcomes, and its page polls as a queued or running one does."""
    queue(store, "held")
    (held,) = store.claim("w1", tasks=["t"], limit=1, start=0)
    assert not held.started
    r = client.get("/ui/f/firings?state=claimed")
    assert r.status_code == 200
    assert set(re.findall(r'class="firing-row" data-state="(\w+)"', r.text)) == {"claimed"}
    page = client.get("/").text
    assert 'badge st-claimed">claimed 1' not in page  # not a last-hour outcome
    every = client.get("/ui/f/firings").text
    assert set(re.findall(r'class="firing-row" data-state="(\w+)"', every)) == {"claimed"}
    timeline = client.get(f"/ui/firings/{_fid(store, held.firing.id)}").text.split('id="timeline"')[
        1
    ]
    assert 'hx-trigger="every 2s"' in timeline.split(">")[0]  # not final: the page polls
    for label in ("claimed", "claim lease until"):  # when and by whom it is held
        assert f'<span class="label">{label}</span>' in timeline
    assert '<span class="label">started</span>' not in timeline


def test_fragments_answer_and_poll(client: TestClient, store: SqliteStore) -> None:
    queue(store, "x")
    finish(store, claim_all(store)[0], late_ms=250)
    for path, element in (
        ("/ui/f/overview", 'id="overview"'),
        ("/ui/f/jobs", 'id="jobs"'),
        ("/ui/f/firings", 'id="firings"'),
        ("/ui/f/lateness", 'id="lateness"'),
        ("/ui/f/nodes", 'id="nodes"'),
    ):
        r = client.get(path, headers={"HX-Request": "true"})
        assert r.status_code == 200, path
        assert element in r.text and "hx-trigger" in r.text, path
        assert "default-src 'self'" in r.headers["content-security-policy"]
    lateness = client.get("/ui/f/lateness").text
    assert "<title>≤ 500: 1</title>" in lateness  # 250 ms falls in the (200, 500] bucket
    assert 'class="pt over"' in lateness  # over the 200 ms objective


def test_job_page_shows_fates_next_firings_and_lateness(
    client: TestClient, store: SqliteStore
) -> None:
    job_id = add_job(
        client, "nightly", {"kind": "cron", "cron": "30 2 * * *", "tz": "Europe/Berlin"}
    )
    html = client.get(f"/ui/jobs/{job_id}?hours=24").text
    assert "Next firings" in html and "dst_gap:next_valid" in html
    assert "Fates" in html and "upcoming" not in html.split("Fates")[0]
    assert "p99 —" in html and "objective 200.0 ms" in html
    assert client.get("/ui/jobs/999").status_code == 404
    assert client.get("/ui/jobs/1?hours=5").status_code == 404


def test_firing_page_shows_the_timeline(client: TestClient, store: SqliteStore) -> None:
    f = queue(store, "x")
    finish(store, claim_all(store)[0], late_ms=7, ok=False)
    html = client.get(f"/ui/firings/{_fid(store, f.id)}").text
    for label in ("scheduled", "enqueued", "started", "finished"):
        assert f'<span class="label">{label}</span>' in html
    assert "+7.0 ms" in html and "boom" in html and "dead" in html
    assert "hx-trigger" not in html.split('id="timeline"')[1].split(">")[0]  # final: no polling
    assert client.get("/ui/firings/12345").status_code == 404


def test_objective_comes_from_the_environment(
    client: TestClient, store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONWHEEL_LATENESS_OBJECTIVE_MS", "5")
    queue(store, "x")
    finish(store, claim_all(store)[0], late_ms=7)
    html = client.get("/ui/f/jobs").text
    assert 'class="num bad-text" title="over the objective">7.0 ms' in html
    assert "goal ≤ 5.0 ms" in client.get("/ui/f/overview").text


def test_static_files_are_served_locally_with_the_htmx_license(client: TestClient) -> None:
    r = client.get("/ui/static/htmx.min.js")
    assert r.status_code == 200
    assert r.text.startswith("/*! htmx 2.")
    assert "Zero-Clause BSD" in r.text.splitlines()[0]
    assert client.get("/ui/static/dashboard.css").status_code == 200
    page = client.get("/").text
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing from elsewhere


def test_dashboard_is_not_part_of_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p == "/" or p.startswith("/ui")]


# -- with tokens ---------------------------------------------------------------------------
@pytest.fixture
def secured(store: SqliteStore) -> Iterator[TestClient]:
    with TestClient(create_app(store, auth_required=True)) as c:
        yield c


def test_auth_on_redirects_to_login_and_accepts_a_bearer_header(
    secured: TestClient, store: SqliteStore
) -> None:
    token = issue_token(store, namespace="team-a", role="read")[1]
    r = secured.get("/", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    r = secured.get("/ui/f/jobs", headers={"HX-Request": "true"})
    assert r.headers["hx-redirect"] == "/ui/login" and "jobs" not in r.text
    assert secured.get("/ui/login").status_code == 200
    r = secured.get("/", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and "team-a" in r.text


def test_login_sets_a_strict_http_only_cookie_scoped_to_the_namespace(
    secured: TestClient, store: SqliteStore
) -> None:
    token = issue_token(store, namespace="team-a", role="read")[1]
    issue_token(store, namespace="team-b", role="write")
    other = queue(store, "theirs", namespace="team-b")
    mine = queue(store, "mine", namespace="team-a")
    assert secured.post("/ui/login", json={"token": "cw_1_nope"}).status_code == 401
    assert secured.post("/ui/login", json={}).status_code == 422
    r = secured.post("/ui/login", json={"token": token})
    assert r.status_code == 200
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    html = secured.get("/").text  # the cookie jar now carries it
    assert "mine" in html and "theirs" not in html
    assert secured.get(f"/ui/firings/{_fid(store, mine.id)}").status_code == 200
    assert secured.get(f"/ui/firings/{_fid(store, other.id)}").status_code == 404
    assert secured.get(f"/ui/jobs/{_jid(store, other.job_id)}").status_code == 404
    assert "theirs" not in secured.get(f"/ui/f/firings?job={_jid(store, other.job_id)}").text
    assert secured.post("/ui/logout").status_code == 403  # without the page's CSRF token
    csrf = re.search(r'"X-CSRF-Token": "([0-9a-f]{64})"', html)
    assert csrf is not None
    r = secured.post("/ui/logout", headers={"X-CSRF-Token": csrf.group(1)})
    assert r.status_code == 204 and r.headers["hx-redirect"] == "/ui/login"


def test_login_form_is_refused_when_auth_is_off(client: TestClient) -> None:
    r = client.get("/ui/login", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"


# -- schedules in words --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expr", "words"),
    [
        ("*/15 * * * * *", "every 15 seconds"),
        ("* * * * *", "every minute"),
        ("*/5 * * * *", "every 5 minutes"),
        ("7 * * * *", "every hour at minute 7"),
        ("0 9 * * mon-fri", "at 09:00 on Mon–Fri"),
        ("30 2 * * *", "at 02:30 every day"),
        ("0 9,17 * * *", "at 09:00 and 17:00 every day"),
        ("0 0 1 * *", "at 00:00 on day 1 of the month"),
        ("0 0 L * *", "at 00:00 on the last day of the month"),
        ("0 12 * jan,jul *", "at 12:00 every day in Jan, Jul"),
        ("@daily", "every day at 00:00"),
        ("0 0 13 * fri", None),  # the day-field OR rule: left to describe()
        ("0 0 15W * *", None),
    ],
)
def test_cron_words(expr: str, words: str | None) -> None:
    assert cron_words(expr) == words


def test_skip_next_button_skips_the_next_occurrence_from_the_page_only(
    secured: TestClient, store: SqliteStore
) -> None:
    write = issue_token(store, namespace="team-a", role="write", label="ops")[1]
    read = issue_token(store, namespace="team-a", role="read")[1]
    other = issue_token(store, namespace="team-b", role="write")[1]
    r = secured.post(
        "/v1/jobs",
        json={"name": "tick", "task": "t", "schedule": {"kind": "every", "interval": "1m"}},
        headers={"Authorization": f"Bearer {write}"},
    )
    job_id = r.json()["id"]
    path = f"/ui/jobs/{job_id}/skip-next"
    page = secured.get(f"/ui/jobs/{job_id}", headers={"Authorization": f"Bearer {write}"})
    assert f'hx-post="{path}"' in page.text
    page = secured.get(f"/ui/jobs/{job_id}", headers={"Authorization": f"Bearer {read}"})
    assert "skip-next" not in page.text  # no button for a read token
    htmx = {"HX-Request": "true"}
    refused = [
        ({"Authorization": f"Bearer {write}"}, 403),  # not from the page (no HX-Request)
        (htmx | {"Authorization": f"Bearer {write}", "Origin": "https://evil.example"}, 403),
        (htmx | {"Authorization": f"Bearer {read}"}, 403),
        (htmx | {"Authorization": f"Bearer {other}"}, 404),
    ]
    for headers, status in refused:
        assert secured.post(path, headers=headers).status_code == status, headers
    assert store.list_firings() == []
    r = secured.post(path, headers=htmx | {"Authorization": f"Bearer {write}"})
    assert r.status_code == 204 and r.headers["hx-refresh"] == "true"
    (f,) = store.list_firings()
    assert f.state.value == "skipped" and f.reason == "skipped by ops: from the dashboard"
    assert f.scheduled_for == datetime(2026, 3, 28, 12, 1, tzinfo=UTC)


def test_overview_shows_the_retention_policy(client: TestClient, store: SqliteStore) -> None:
    text = client.get("/ui/f/overview").text
    assert 'id="retention"' in text and "7 d 0 h · last 1" in text and "the default" in text
    store.set_retention("default", {"keep_for": 3 * 86400, "keep_last": 5})
    text = client.get("/ui/f/overview").text
    assert "3 d 0 h · last 5" in text and "this namespace's own" in text
