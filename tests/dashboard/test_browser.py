"""The dashboard in a real browser: the distribution's headless Chromium driven by
Playwright for Python, against a real ``cronwheel serve`` (scheduler, worker and
API + dashboard processes) on a temporary SQLite store.

Browser downloads are impossible here: Playwright is pointed at ``chromium`` from
the system packages (``apt-get install chromium``; ``.ci/run`` installs it). The
test skips without it locally and fails in CI. It saves the screenshots of the
docs (``docs/screenshots/*.png``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import require_service

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "docs" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
JOB = "nightly <b>report</b> <script>alert(1)</script>"
APP = '''
import time
from cronwheel import App

app = App()


@app.task
def slow(ctx) -> None:
    """Runs long enough to be seen RUNNING, then succeeds."""
    time.sleep(1.8)


@app.task
def quick(ctx) -> None:
    pass
'''

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Node:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    (tmp_path / "dashapp.py").write_text(APP)
    port = _free_port()
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONWHEEL_")}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cronwheel",
                "serve",
                "dashapp:app",
                "--store",
                f"sqlite:///{tmp_path / 'dash.db'}",
                "--port",
                str(port),
            ],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    n = Node(url=f"http://127.0.0.1:{port}", proc=proc, log=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"serve exited early\n{n.tail()}"
            try:
                if httpx.get(f"{n.url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"the API did not come up\n{n.tail()}"
            time.sleep(0.1)
        yield n
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def chromium() -> str:
    """The distribution's Chromium, and Playwright to drive it (skip locally, fail in CI)."""
    executable = shutil.which("chromium")
    if executable is None:
        require_service("chromium", FileNotFoundError("`chromium` is not on PATH"))
    try:
        import playwright  # noqa: F401
    except ImportError as exc:
        require_service("playwright", exc)
    assert executable is not None
    return executable


@pytest.fixture
def browser(chromium: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def _watch(page: Any, *, responses: bool = True) -> list[str]:
    """What a page must never show, collected as it happens: console errors and
    warnings, uncaught errors, dialogs, (``responses``) answers of 400 and above.
    The same for Playwright's sync and async pages (their ``on`` is the same)."""
    problems: list[str] = []
    page.on(
        "console",
        lambda m: (
            problems.append(f"console {m.type}: {m.text}")
            if m.type in ("error", "warning")
            else None
        ),
    )
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("dialog", lambda d: problems.append(f"a dialog opened: {d.message}"))
    if responses:
        page.on(
            "requestfinished",
            lambda r: (
                problems.append(f"{r.url} answered {r.response().status}")
                if r.response() is not None and r.response().status >= 400
                else None
            ),
        )
    return problems


def test_dashboard_shows_a_job_and_its_firings_live(node: Node, browser: Any) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    problems = _watch(page)

    page.goto(node.url + "/")
    page.locator("#jobs").get_by_text("no jobs yet").wait_for()
    page.evaluate("window.__sameDocument = 'yes'")  # gone if the page ever reloads

    # a job created through the API appears without a reload
    r = httpx.post(
        f"{node.url}/v1/jobs",
        json={"name": JOB, "task": "slow", "schedule": {"kind": "every", "interval": "3s"}},
    )
    assert r.status_code == 201, r.text
    quick = httpx.post(
        f"{node.url}/v1/jobs",
        json={
            "name": "berlin-digest",
            "task": "quick",
            "schedule": {"kind": "cron", "cron": "*/2 * * * * *", "tz": "Europe/Berlin"},
        },
    )
    assert quick.status_code == 201, quick.text
    row = page.locator("tr.job-row", has_text="nightly")
    row.wait_for(timeout=15_000)
    assert JOB in row.locator("td.name a").inner_text()  # shown as text, never as markup

    # a firing appears, is seen RUNNING, then SUCCEEDED — all by polling fragments
    running = page.locator('#firings tr.firing-row[data-state="running"]', has_text="nightly")
    running.first.wait_for(timeout=20_000)
    firing_id = running.first.locator("td").first.inner_text().strip()
    done = page.locator(
        f'#firings tr.firing-row[data-state="succeeded"]:has(a[href="/ui/firings/{firing_id}"])'
    )
    done.wait_for(timeout=20_000)
    page.locator("#overview .card.ok", has_text="leader").wait_for(timeout=10_000)
    page.locator("#nodes td", has_text="worker").first.wait_for()
    page.wait_for_timeout(3500)  # let the charts fill with a few more firings
    page.screenshot(path=str(SHOTS / "dashboard.png"))

    # filters: only the chosen state, still live
    page.locator('#firings nav a[data-state="succeeded"]').click()
    page.locator('#firings nav a.on[data-state="succeeded"]').wait_for()
    rows = page.locator("#firings tr.firing-row")
    rows.first.wait_for()
    assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.state)")) == {"succeeded"}
    page.wait_for_timeout(2500)  # one more poll keeps the filter
    assert page.locator('#firings nav a.on[data-state="succeeded"]').count() == 1
    assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.state)")) == {"succeeded"}
    page.locator('#firings nav a[data-state="dead"]').click()
    page.locator("#firings td.empty", has_text="no dead firings").wait_for()
    page.locator('#firings nav a[data-state="all"]').click()
    page.locator('#firings nav a.on[data-state="all"]').wait_for()
    assert page.evaluate("window.__sameDocument") == "yes"

    # one job: next firings with zones, fates; one firing: its timeline
    page.locator("tr.job-row", has_text="berlin-digest").locator("td.name a").click()
    page.locator("#fates").wait_for()
    page.get_by_text("local (Europe/Berlin)").wait_for()
    page.screenshot(path=str(SHOTS / "job.png"))
    page.goto(f"{node.url}/ui/firings/{firing_id}")
    page.locator("#firing-state", has_text="succeeded").wait_for()
    page.screenshot(path=str(SHOTS / "firing.png"))

    assert not problems, problems
    assert node.proc.poll() is None, node.tail()


def test_a_filter_click_during_a_poll_shows_the_filter_and_logs_no_error(
    node: Node, chromium: str
) -> None:
    """A click on a state filter while the panel's poll is in flight: the poll's
    late answer must not replace the filtered panel (the click would be lost),
    and nothing may be aborted (htmx logs every aborted request as an error).
    The network is slowed by the browser's router: the poll answers 1 s late,
    the filter's request 2.5 s late, so the stale poll answers in between."""
    import asyncio

    from playwright.async_api import Route, async_playwright

    async def scenario() -> tuple[list[str], int, int]:
        async with async_playwright() as pw:
            b = await pw.chromium.launch(
                executable_path=chromium, args=CHROMIUM_ARGS, headless=True
            )
            try:
                page = await b.new_page()
                # (an async page's response() is a coroutine: answers not watched)
                problems = _watch(page, responses=False)
                await page.goto(node.url + "/")
                await page.locator("#firings td.empty").wait_for()
                poll_started = asyncio.Event()

                async def slow(route: Route) -> None:
                    filtered = "state=" in route.request.url
                    if not filtered:
                        poll_started.set()
                    await asyncio.sleep(2.5 if filtered else 1.0)
                    await route.continue_()

                await page.route("**/ui/f/firings*", slow)
                await asyncio.wait_for(poll_started.wait(), timeout=10)
                await page.locator('#firings nav a[data-state="succeeded"]').click()
                on = page.locator('#firings nav a.on[data-state="succeeded"]')
                await on.wait_for(timeout=15_000)
                await page.wait_for_timeout(2500)  # the next poll keeps the filter
                kept = await on.count()
                await page.unroute("**/ui/f/firings*")
                return problems, kept, await page.locator("#firings nav a.on").count()
            finally:
                await b.close()

    problems, kept, shown = asyncio.run(scenario())
    assert kept == 1 and shown == 1
    assert not problems, problems
