"""Issue 15, item 2: a 500 is cheap, and every number in a request is ASCII digits.

- An unexpected error is answered 500 ``{"error": {"code": "internal", ...}}`` with
  nothing of the error in it, and logged as one short line (no local variables, no
  rich rendering) by a thread, not on the event loop: a real server keeps answering
  ``/healthz`` promptly while 20 such errors are served at once.
- Every integer parameter of the OpenAPI schema (path, query, header) refuses what
  Python's ``int`` and pydantic's lax parsing take beyond ASCII digits (other
  scripts' digits, superscripts, signs, blanks, underscores, fractions, exponents,
  huge lengths) with a 4xx naming the parameter, changing nothing, never a 500 and
  never another object. The dashboard's ids and the body guard's Content-Length too.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import uvicorn

from cronwheel.api.guard import BodyGuard
from cronwheel.observability.errorlog import MAX_FRAMES, MAX_LINE, ErrorLog
from tests.security.conftest import Sec

# What int() or pydantic's lax int parsing take (or str.isdigit() says is a digit).
NOT_ASCII_DIGITS = [
    "١٢",  # Arabic-Indic digits: int() gives 12
    "１",  # fullwidth digit one: int() gives 1
    "²",  # superscript two: isdigit() is true, int() raises
    "߁",  # NKo digit one
    "+1",
    "-1",
    " 1",
    "1 ",
    "1_000",
    "1.0",
    "1e3",
    "0x10",
    "9" * 40,
    "1" * 5000,
]
SECRET = "do-not-show-this-secret"


def _err(r: Any) -> dict[str, Any]:
    body = r.json()
    assert set(body) == {"error"}, body
    err: dict[str, Any] = body["error"]
    return err


# --- the 500 ---------------------------------------------------------------------------


def _fail_listing(sec: Sec, monkeypatch: pytest.MonkeyPatch, gate: Any = None) -> None:
    def boom(*_a: Any, **_k: Any) -> Any:
        local_secret = SECRET  # a local variable a rich traceback would print
        if gate is not None:
            gate()
        raise RuntimeError(f"store exploded near {local_secret}")

    monkeypatch.setattr(sec.store, "search_jobs", boom)


def _error_log(sec: Sec) -> tuple[ErrorLog, io.StringIO]:
    out = io.StringIO()
    log = ErrorLog(out, json_lines=True, role="api")
    sec.client.app.state.error_log = log  # type: ignore[attr-defined]
    return log, out


def test_an_unexpected_error_is_a_bare_500_and_one_short_line(
    sec: Sec, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, out = _error_log(sec)
    _fail_listing(sec, monkeypatch)
    before = sec.fingerprint()
    for _ in range(20):
        r = sec.call("GET", "/v1/jobs?limit=5", "read")
        assert r.status_code == 500
        assert _err(r) == {"code": "internal", "message": "internal error", "field": None}
        assert "exploded" not in r.text and SECRET not in r.text and "Traceback" not in r.text
    log.flush()
    log.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 20  # one line per error
    for line in lines:
        assert len(line) <= MAX_LINE
        doc = json.loads(line)
        assert doc["event"] == "unhandled_error"
        assert (doc["method"], doc["path"], doc["role"]) == ("GET", "/v1/jobs", "api")
        assert doc["error"].startswith("RuntimeError: store exploded near")
        frames = doc["traceback"].split(" > ")
        assert 1 <= len(frames) <= MAX_FRAMES and frames[-1].endswith(" boom")
        assert "limit=5" not in line  # no query string (it may carry anything)
        assert "local_secret" not in line  # no local variables
    assert log.dropped == 0
    assert sec.fingerprint() == before


def test_a_full_error_queue_drops_lines_instead_of_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.StringIO()
    log = ErrorLog(out, maxsize=5)
    monkeypatch.setattr(log.listener, "start", lambda: None)  # a writer that never drains
    for _ in range(12):
        log.report(RuntimeError("x"), path="/p")
    assert log.dropped == 7
    assert out.getvalue() == ""


@contextmanager
def _serving(sec: Sec) -> Iterator[str]:
    """The sec app (API, dashboard, /metrics) on a real uvicorn server on loopback."""
    config = uvicorn.Config(
        sec.client.app,
        host="127.0.0.1",
        port=0,
        access_log=False,
        log_level="warning",
        lifespan="off",
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    started = threading.Event()
    for _ in range(1000):  # wait for the socket: a bounded number of short waits
        if srv.started:
            started.set()
            break
        assert thread.is_alive(), "uvicorn died"
        time.sleep(0.01)
    assert started.is_set(), "uvicorn did not start"
    port = srv.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
        assert not thread.is_alive()


def test_healthz_answers_promptly_while_20_errors_are_served(
    sec: Sec, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, out = _error_log(sec)
    arrived = threading.Semaphore(0)
    go = threading.Event()

    def gate() -> None:  # in the server's thread pool: hold every request until all came
        arrived.release()
        assert go.wait(timeout=30)

    _fail_listing(sec, monkeypatch, gate)
    with _serving(sec) as url, httpx.Client(base_url=url, timeout=30) as client:
        headers = sec.h("read")
        assert client.get("/healthz").status_code == 200
        with ThreadPoolExecutor(max_workers=20) as pool:
            failing = [pool.submit(client.get, "/v1/jobs", headers=headers) for _ in range(20)]
            for _ in range(20):
                assert arrived.acquire(timeout=30), "the 20 requests did not all arrive"
            go.set()  # the 20 errors now reach the event loop together
            waits = []
            for _ in range(20):
                began = time.perf_counter()
                r = client.get("/healthz")
                waits.append(time.perf_counter() - began)
                assert r.status_code == 200
            answers = [f.result() for f in failing]
    assert [r.status_code for r in answers] == [500] * 20
    assert all(_err(r)["code"] == "internal" for r in answers)
    assert max(waits) < 0.5, waits
    log.flush()
    log.close()
    assert len(out.getvalue().splitlines()) == 20


# --- numbers: ASCII digits only -----------------------------------------------------------


def _integer_parameters(sec: Sec) -> list[tuple[str, str, str, str]]:
    """(method, path template, parameter, where) of every integer parameter."""
    schema = sec.client.app.openapi()  # type: ignore[attr-defined]
    found = []
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            for p in op.get("parameters", []):
                s = p.get("schema", {})
                types = [s.get("type")] + [x.get("type") for x in s.get("anyOf", [])]
                if "integer" in types:
                    found.append((method.upper(), path, p["name"], p["in"]))
    return found


def _url(path: str, name: str, where: str, value: str) -> tuple[str, dict[str, str]]:
    url = path.replace("{name}", "nightly")
    headers: dict[str, str] = {}
    if where == "path":
        url = url.replace("{" + name + "}", quote(value, safe=""))
    elif where == "query":
        url = f"{url}?{name}={quote(value, safe='')}"
    else:
        headers[name] = value
    return url, headers


def test_the_schema_has_the_integer_parameters_we_know(sec: Sec) -> None:
    names = {(path, name) for _, path, name, _ in _integer_parameters(sec)}
    assert {
        ("/v1/jobs", "limit"),
        ("/v1/jobs/{name}", "upcoming"),
        ("/v1/firings", "limit"),
        ("/v1/jobs/{name}/firings", "limit"),
        ("/v1/firings/{firing_id}", "firing_id"),
        ("/v1/firings/{firing_id}/cancel", "firing_id"),
        ("/v1/firings/{firing_id}/retry", "firing_id"),
    } <= names


def test_every_integer_parameter_takes_ascii_digits_only(sec: Sec) -> None:
    sec.cron_job("nightly")
    r = sec.call("POST", "/v1/jobs/nightly/trigger")
    assert r.status_code == 201, r.text
    firing_id = r.json()["id"]
    before = sec.fingerprint()
    for method, path, name, where in _integer_parameters(sec):
        for value in NOT_ASCII_DIGITS:
            if where == "header" and value.strip() != value:
                continue  # a header's blanks are the server's to strip
            url, headers = _url(path, name, where, value)
            url = url.replace("{firing_id}", str(firing_id))
            r = sec.call(method, url, "admin", headers=headers)
            assert 400 <= r.status_code < 500, (method, url, r.status_code, r.text)
            err = _err(r)
            assert err["field"] == name, (method, url, err)
            assert "Traceback" not in r.text
    # plain ASCII digits still work; no other digits reach a firing by another road
    assert sec.call("GET", f"/v1/firings/{firing_id}", "read").status_code == 200
    assert sec.call("GET", "/v1/jobs?limit=007", "read").status_code == 200
    assert sec.fingerprint() == before


@pytest.mark.parametrize("value", ["١", "１", "²", "+1", " 1", "1_0", "9" * 40])
def test_dashboard_ids_take_ascii_digits_only(sec: Sec, value: str) -> None:
    job = sec.cron_job("nightly")
    # the store's id of the job is 1 (int() makes it of ARABIC-INDIC DIGIT ONE), and its
    # shown id written in Arabic-Indic digits is what int() would turn into the shown id:
    # neither may name it
    arabic = str(job["id"]).translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    r = sec.call("POST", "/ui/login", None, json={"token": sec.tokens["read"]})
    assert r.status_code == 200, r.text
    assert sec.call("GET", f"/ui/jobs/{job['id']}", None).status_code == 200
    before = sec.fingerprint()
    for text in (value, arabic):
        encoded = quote(text, safe="")
        for path in (f"/ui/jobs/{encoded}", f"/ui/firings/{encoded}"):
            r = sec.call("GET", path, None)
            assert r.status_code == 404, (path, r.status_code)
            assert "nightly" not in r.text
        r = sec.call("GET", f"/?job={encoded}", None)
        assert r.status_code == 400
    assert sec.fingerprint() == before


def _guard_answer(headers: list[tuple[bytes, bytes]]) -> tuple[int, dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def app(_scope: Any, _receive: Any, _send: Any) -> None:
        raise AssertionError("the guard let it through")

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/jobs", "headers": headers}
    asyncio.run(BodyGuard(app)(scope, receive, send))
    body = json.loads(b"".join(m.get("body", b"") for m in sent if m["type"].endswith("body")))
    return int(sent[0]["status"]), body


@pytest.mark.parametrize("value", ["²".encode("latin-1"), b"+2", b"1_0", b"0x2", b"9" * 40])
def test_content_length_takes_ascii_digits_only(value: bytes) -> None:
    status, body = _guard_answer(
        [(b"content-length", value), (b"content-type", b"application/json")]
    )
    assert status == 400
    assert body["error"]["field"] == "Content-Length"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("retries", "١"),
        ("retries", "+1"),
        ("max_concurrency", "1_0"),
        ("priority", "١.٥"),
        ("priority", "1e2"),
        ("timeout", "١٠"),
        ("misfire_grace", "9" * 40),
    ],
)
def test_dashboard_form_numbers_take_ascii_digits_only(sec: Sec, field: str, value: str) -> None:
    csrf = sec.login("write")
    before = sec.fingerprint()
    form = {"name": "formed", "task": "report", "kind": "every", "schedule": "1h"}
    r = sec.call("POST", "/ui/jobs/new", None, json=form | {field: value}, headers=csrf)
    assert r.status_code == 422, r.text
    assert _err(r)["field"] == field
    assert sec.fingerprint() == before
    form |= {"allow_unknown_task": "on"}
    r = sec.call("POST", "/ui/jobs/new", None, json=form, headers=csrf)
    assert r.status_code == 201, r.text  # the same form with plain digits is stored
