"""The dashboard shows CLAIMED: a state filter, the overview's count, a held claim that
expired among the stuck ones, a firing's timeline (claimed -> started -> finished,
polled while claimed) and its attempts."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cronwheel.domain.clock import FakeClock
from cronwheel.server import create_app
from cronwheel.store.sqlite import SqliteStore
from cronwheel.web.ids import ids_for
from tests.metrics.helpers import T0, finish, queue

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's TestClient packaging warning (httpx2)
    from starlette.testclient import TestClient


def _fid(store: Any, internal: int) -> int:
    """The id the dashboard shows for the store's firing ``internal``."""
    return ids_for(store).encode("firing", internal)


def _jid(store: Any, internal: int) -> int:
    """The id the dashboard shows for the store's job ``internal``."""
    return ids_for(store).encode("job", internal)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[SqliteStore]:
    s = SqliteStore(str(tmp_path / "d.db"), clock=clock)
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def client(store: SqliteStore) -> Iterator[TestClient]:
    with TestClient(create_app(store, auth_required=False)) as c:
        yield c


def _text(html: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}">([^<]*)<', html)
    assert match, element_id
    return match.group(1)


def _timeline(html: str) -> str:
    return html.split('id="timeline"', 1)[1]


def test_claimed_filter_and_overview_counts(client: TestClient, store: SqliteStore) -> None:
    for name in ("a", "b", "c", "d"):
        queue(store, name)
    store.claim("w1", tasks=["t"], limit=3, start=1)
    html = client.get("/ui/f/firings", params={"state": "claimed"}).text
    assert html.count('class="badge st-claimed"') == 2
    assert 'class="badge st-running"' not in html and 'class="badge st-queued"' not in html
    assert 'data-state="claimed">claimed</a>' in client.get("/").text
    overview = client.get("/ui/f/overview").text
    assert (_text(overview, "queued"), _text(overview, "claimed"), _text(overview, "running")) == (
        "1",
        "2",
        "1",
    )


def test_an_expired_held_claim_is_stuck(
    client: TestClient, store: SqliteStore, clock: FakeClock
) -> None:
    queue(store, "held")
    store.claim("w1", tasks=["t"], limit=1, start=0)
    stuck = re.compile(r'stuck claims</div>\s*<div class="v">(\d+)</div>')
    assert stuck.findall(client.get("/ui/f/overview").text) == ["0"]
    clock.advance(timedelta(seconds=31))
    assert stuck.findall(client.get("/ui/f/overview").text) == ["1"]


def test_a_firings_timeline_goes_claimed_started_finished(
    client: TestClient, store: SqliteStore, clock: FakeClock
) -> None:
    f = queue(store, "job")
    (held,) = store.claim("w-7", tasks=["t"], limit=1, start=0)
    html = _timeline(client.get(f"/ui/firings/{_fid(store, f.id)}").text)
    head = html.split(">", 1)[0]
    assert 'hx-trigger="every 2s"' in head  # polled while claimed
    labels = re.findall(r'<span class="label">([^<]+)</span>', html)
    assert labels[:3] == ["scheduled", "enqueued", "claimed"] and "started" not in labels
    assert "by w-7" in html and 'st-claimed">claimed</span>' in html
    clock.advance(timedelta(seconds=1))
    assert store.start("w-7", [(f.id, held.claim_token)]) == {f.id}
    clock.advance(timedelta(seconds=1))
    finish(store, held, late_ms=1000)
    html = _timeline(client.get(f"/ui/f/firings/{_fid(store, f.id)}").text)
    labels = re.findall(r'<span class="label">([^<]+)</span>', html)
    order = [labels.index(x) for x in ("claimed", "started", "finished")]
    assert order == sorted(order)
    assert "hx-trigger" not in html.split(">", 1)[0]  # final: no polling
    rows = re.findall(r"<tr><td>(\d+)</td>.*?st-(\w+)\">", html)
    assert rows == [("1", "succeeded")]
