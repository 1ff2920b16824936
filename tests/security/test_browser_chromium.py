"""Issue 15, item 3 in a real browser: the distribution's headless Chromium (Playwright)
against real ``cronwheel api`` processes (see ``tests/dashboard/test_browser.py`` for
the set-up; the test skips without Chromium locally and fails in CI).

- The dashboard's own pages work with their CSRF token: log in, add a job with the
  form, "skip next" (htmx), log out.
- A hostile page cannot change anything on a no-auth server: neither from its own
  origin (fetches and a form, bodyless and not), nor by DNS rebinding (a name that
  resolves to 127.0.0.1, as Chromium's ``--host-resolver-rules`` makes it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from cronwheel.domain.clock import SystemClock
from cronwheel.store.sqlite import SqliteStore
from cronwheel.web.tokens import issue_token
from tests.dashboard.test_browser import (
    CHROMIUM_ARGS,
    _free_port,
    _watch,
    chromium,  # noqa: F401 (the fixture)
)

pytestmark = pytest.mark.slow

REBOUND = "rebind.test"


@contextmanager
def api_process(tmp_path: Path, *args: str) -> Iterator[str]:
    """``cronwheel api ARGS`` on a free loopback port; its URL once it is ready."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONWHEEL_")}
    log = tmp_path / f"api-{port}.log"
    store = f"sqlite:///{tmp_path / 'b.db'}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cronwheel",
                "api",
                "--store",
                store,
                "--port",
                f"{port}",
                *args,
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    store = SqliteStore(str(tmp_path / "b.db"), clock=SystemClock())
    store.migrate()
    store.close()
    return tmp_path / "b.db"


def test_the_dashboard_works_with_its_csrf_token(
    tmp_path: Path,
    store_path: Path,
    chromium: str,  # noqa: F811 (the imported fixture)
) -> None:
    from playwright.sync_api import sync_playwright

    store = SqliteStore(str(store_path), clock=SystemClock())
    token = issue_token(store, namespace="team-a", role="write", label="ops")[1]
    store.close()
    auth = {"Authorization": f"Bearer {token}"}
    with api_process(tmp_path, "--auth") as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            problems = _watch(page)
            page.goto(url + "/")
            page.locator("#token").fill(token)
            page.locator("#login-form button").click()
            page.locator(".ns", has_text="team-a").wait_for()

            page.goto(url + "/ui/jobs/new")
            form = page.locator("#new-job")
            form.locator("input[name=name]").fill("from-chromium")
            form.locator("input[name=task]").fill("report")
            form.locator("select[name=kind]").select_option("every")
            form.locator("input[name=schedule]").fill("1h")
            form.locator("input[name=allow_unknown_task]").check()
            form.locator("button[type=submit]").click()
            page.wait_for_url(re.compile(r".*/ui/jobs/[0-9]+$"))
            r = httpx.get(f"{url}/v1/jobs/from-chromium", headers=auth)
            assert r.status_code == 200, r.text

            page.once("dialog", lambda d: d.accept())  # hx-confirm asks first
            with page.expect_navigation():  # HX-Refresh reloads the page
                page.locator("button.skip-next").click()
            r = httpx.get(f"{url}/v1/jobs/from-chromium/firings?state=skipped", headers=auth)
            assert [f["reason"] for f in r.json()["items"]] == [
                "skipped by ops: from the dashboard"
            ]

            page.locator("button.logout").click()
            page.wait_for_url("**/ui/login")
            page.goto(url + "/")
            page.wait_for_url("**/ui/login")  # the session is over
            assert [p for p in problems if "a dialog opened" not in p] == [], problems
        finally:
            browser.close()


EVIL_PAGE = """<!doctype html><html><body>
<form id="f" method="post" action="{target}/v1/jobs" enctype="text/plain" target="sink">
<input name='{{"name": "evil", "task": "x", "y": "' value='"}}'>
</form><iframe name="sink"></iframe>
<script>
var calls = [
  fetch("{target}/v1/jobs/nightly/trigger", {{method: "POST", mode: "no-cors"}}),
  fetch("{target}/v1/jobs/nightly/pause", {{method: "POST", mode: "no-cors"}}),
  fetch("{target}/v1/jobs", {{method: "POST", mode: "no-cors",
    headers: {{"Content-Type": "text/plain"}},
    body: JSON.stringify({{name: "evil2", task: "x", schedule: {{kind: "every"}}}})}})
];
document.getElementById("f").submit();
Promise.all(calls.map(function (p) {{ return p.then(function () {{}}, function () {{}}); }}))
  .then(function () {{ document.title = "done"; }});
</script></body></html>"""

REBOUND_SCRIPT = """async () => {
  const out = [];
  const job = {name: "rebound", task: "x", schedule: {kind: "every", interval: "1m"}};
  for (const [method, path, body] of [
    ["POST", "/v1/jobs", JSON.stringify(job)],
    ["POST", "/v1/jobs/nightly/pause", null],
    ["DELETE", "/v1/jobs/nightly", null],
    ["GET", "/v1/jobs", null],
  ]) {
    const headers = body ? {"Content-Type": "application/json"} : {};
    const r = await fetch(path, {method, headers, body});
    out.push([method, path, r.status, await r.text()]);
  }
  return out;
}"""


@contextmanager
def evil_site(html: str) -> Iterator[str]:
    """Another web server on this machine (another port of 127.0.0.1: the same site,
    another origin), serving ``html`` at ``/``."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_hostile_page_changes_nothing_on_a_no_auth_server(
    tmp_path: Path,
    chromium: str,  # noqa: F811 (the imported fixture)
) -> None:
    from playwright.sync_api import sync_playwright

    with api_process(tmp_path) as url, sync_playwright() as pw:
        job = {"name": "nightly", "task": "x", "schedule": {"kind": "every", "interval": "1h"}}
        r = httpx.post(f"{url}/v1/jobs", json=job | {"allow_unknown_task": True})
        assert r.status_code == 201, r.text
        port = url.rsplit(":", 1)[1]

        def state() -> Any:
            jobs = httpx.get(f"{url}/v1/jobs").json()["items"]
            firings = httpx.get(f"{url}/v1/firings").json()["items"]
            return [(j["name"], j["paused"]) for j in jobs], len(firings)

        before = state()
        assert before == ([("nightly", False)], 0)
        rules = f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"
        browser = pw.chromium.launch(executable_path=chromium, args=[*CHROMIUM_ARGS, rules])
        try:
            page = browser.new_page()
            seen: list[tuple[str, str, int]] = []
            page.on(
                "response",
                lambda r: (
                    seen.append((r.request.method, r.url.removeprefix(url), r.status))
                    if r.url.startswith(url)
                    else None
                ),
            )
            with evil_site(EVIL_PAGE.format(target=url)) as evil:
                page.goto(evil + "/")
                page.wait_for_function("document.title === 'done'")
                deadline = time.monotonic() + 15
                while len(seen) < 4:  # the three fetches and the form's navigation
                    assert time.monotonic() < deadline, seen
                    page.wait_for_timeout(50)
            assert sorted(seen) == [
                ("POST", "/v1/jobs", 403),
                ("POST", "/v1/jobs", 403),
                ("POST", "/v1/jobs/nightly/pause", 403),
                ("POST", "/v1/jobs/nightly/trigger", 403),
            ]
            assert state() == before

            rebound = browser.new_page()
            answer = rebound.goto(f"http://{REBOUND}:{port}/")
            assert answer is not None and answer.status == 421
            results = rebound.evaluate(REBOUND_SCRIPT)
            assert [(m, p, s) for m, p, s, _ in results] == [
                ("POST", "/v1/jobs", 421),
                ("POST", "/v1/jobs/nightly/pause", 421),
                ("DELETE", "/v1/jobs/nightly", 421),
                ("GET", "/v1/jobs", 421),
            ]
            assert all(json.loads(text)["error"]["field"] == "Host" for *_, text in results)
            assert state() == before
        finally:
            browser.close()
