"""Issue 15, item 6: task templates substitute safely per context, and recorded errors
hold no configured secret.

Hostile job names go through a real loopback HTTP server and real commands (the worker's
own code paths: ``TaskKinds`` handlers); the exact request line, body and argv are
asserted. Redaction is read back through the API on SQLite and PostgreSQL (``sec``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from cronwheel.domain.clock import FakeClock
from cronwheel.domain.error_text import ERROR_MAX, bound_error, error_summary
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import Firing, FiringId, JobId
from cronwheel.errors import ValidationError
from cronwheel.worker.context import Context, make_context
from cronwheel.worker.kinds import (
    HttpTaskSpec,
    TaskKindError,
    TaskKinds,
    TaskSpec,
    parse_tasks,
    register_tasks,
)
from cronwheel.worker.redact import REDACTED, Redactor
from cronwheel.worker.registry import TaskRegistry
from cronwheel.worker.worker import Worker
from tests.security.conftest import Sec

T0 = datetime(2026, 3, 27, 23, 0, tzinfo=UTC)

# name -> the job name a hostile tenant picks
HOSTILE = {
    "dotdot": "..",
    "dot": ".",
    "slash": "/",
    "dot-steps": "a/../b",
    "encoded-dotdot": "%2e%2e",
    "rf": "-rf",
    "long-option": "--output=/etc/x",
    "newline": "a\nb",
    "markup": "<script>alert(1)</script>",
    "env-var": "${HOME}",
    "command-substitution": "$(id)",
    "nul": "a\0b",
    "very-long": "x" * 200,
    "unicode": "é/日",
}
# the value as one URL path segment, query value or form value (None: refused)
ENCODED: dict[str, str | None] = {
    "dotdot": None,
    "dot": None,
    "slash": "%2F",
    "dot-steps": None,
    "encoded-dotdot": "%252e%252e",
    "rf": "-rf",
    "long-option": "--output%3D%2Fetc%2Fx",
    "newline": "a%0Ab",
    "markup": "%3Cscript%3Ealert%281%29%3C%2Fscript%3E",
    "env-var": "%24%7BHOME%7D",
    "command-substitution": "%24%28id%29",
    "nul": "a%00b",
    "very-long": "x" * 200,
    "unicode": "%C3%A9%2F%E6%97%A5",
}
# a form value is no path: its dots are plain text
FORM = ENCODED | {"dotdot": "..", "dot": ".", "dot-steps": "a%2F..%2Fb"}
# inside a JSON string
JSON_TEXT = dict(HOSTILE) | {"newline": "a\\nb", "nul": "a\\u0000b"}
# in HTML/XML text (None: refused, XML cannot carry NUL)
MARKUP: dict[str, str | None] = dict(HOSTILE) | {
    "markup": "&lt;script&gt;alert(1)&lt;/script&gt;",
    "nul": None,
}
# as an argument after "--": the value itself, one argument (None: refused)
OPERAND: dict[str, str | None] = dict(HOSTILE) | {"nul": None}
# as an argument where it could be an option: values beginning with "-" are refused
OPTION_SLOT = OPERAND | {"rf": None, "long-option": None}


def ctx_for(job: str) -> Context:
    firing = Firing(
        id=FiringId(7),
        job_id=JobId(42),
        job_name=job,
        namespace="team-a",
        task="t",
        args=(),
        kwargs={},
        scheduled_for=T0,
        due_at=T0,
        state=FiringState.RUNNING,
        attempt=1,
        max_attempts=3,
        priority=1.0,
        enqueued_at=T0,
        enqueued_epoch=1,
    )
    return make_context(firing, "claim-token", "worker-test")


class Loopback(BaseHTTPRequestHandler):
    """Records each request; answers 500 on /fail (echoing what the caller sent), else 204."""

    requests: list[dict[str, Any]]

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        self.requests.append({"target": self.path, "headers": dict(self.headers), "body": body})
        if self.path.startswith("/fail"):
            echo = f"denied: auth={self.headers.get('Authorization')} body={body.decode()}"
            payload = (echo + "\n" + "y" * 3000).encode()
            self.send_response(500)
        else:
            payload = b""
            self.send_response(204)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _handle

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def loopback() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    requests: list[dict[str, Any]] = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (Loopback,), {"requests": requests}))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", requests
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def tasks(toml: str, env: dict[str, str] | None = None) -> dict[str, TaskSpec]:
    return {s.name: s for s in parse_tasks(tomllib.loads(toml), env or {})}


async def run(spec: TaskSpec, ctx: Context) -> None:
    kinds = TaskKinds()
    try:
        await kinds.handler(spec)(ctx)
    finally:
        await kinds.aclose()


ARGV_SCRIPT = "import json, sys; json.dump(sys.argv[2:], open(sys.argv[1], 'w'))"


def _contexts(base: str, out: Path) -> dict[str, TaskSpec]:
    operand = [sys.executable, "-c", ARGV_SCRIPT, f"{out}.operand", "--", "{job}", "at-{job}"]
    option = [sys.executable, "-c", ARGV_SCRIPT, f"{out}.option", "--name", "{job}"]
    return tasks(
        f"""
[tasks.url]
kind = "http"
url = "{base}/jobs/{{job}}/run?name={{job}}"
body = '{{"job": "{{job}}", "n": {{attempt}}}}'
[tasks.form]
kind = "http"
url = "{base}/form"
headers = {{ "Content-Type" = "application/x-www-form-urlencoded" }}
body = "job={{job}}&v=1"
[tasks.html]
kind = "http"
url = "{base}/html"
headers = {{ "Content-Type" = "text/html; charset=utf-8", "X-Job" = "{{job}}" }}
body = "<p title='{{job}}'>{{job}}</p>"
[tasks.operand]
kind = "shell"
argv = {json.dumps(operand)}
[tasks.option]
kind = "shell"
argv = {json.dumps(option)}
"""
    )


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_job_names_are_encoded_per_context(
    case: str, loopback: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    base, requests = loopback
    job = HOSTILE[case]
    specs = _contexts(base, tmp_path / "argv")

    def outcome(name: str) -> str | None:
        """None if it ran; the refusal otherwise."""
        try:
            asyncio.run(run(specs[name], ctx_for(job)))
        except TaskKindError as exc:
            return str(exc)
        return None

    # URL path segment and query value, with a JSON body
    refused = outcome("url")
    if ENCODED[case] is None:
        why = "which holds a '.' or '..' path step that could move the URL's path"
        assert refused == f"url: {{job}} is {job!r}, {why}; refused"
        assert not [r for r in requests if r["target"].startswith("/jobs")]  # nothing sent
    else:
        assert refused is None
        [sent] = [r for r in requests if r["target"].startswith("/jobs")]
        assert sent["target"] == f"/jobs/{ENCODED[case]}/run?name={ENCODED[case]}"
        assert sent["body"] == f'{{"job": "{JSON_TEXT[case]}", "n": 1}}'.encode()
        assert json.loads(sent["body"]) == {"job": job, "n": 1}

    # a form body
    assert outcome("form") is None
    [sent] = [r for r in requests if r["target"] == "/form"]
    assert sent["body"] == f"job={FORM[case]}&v=1".encode()

    # an HTML body (and a header value)
    refused = outcome("html")
    html_sent = [r for r in requests if r["target"] == "/html"]
    if MARKUP[case] is None:
        assert refused is not None and refused.startswith("body: {job} is ")
        assert "control character that HTML and XML cannot carry; refused" in refused
        assert html_sent == []
    else:
        assert refused is None
        [sent] = html_sent
        text = MARKUP[case]
        assert sent["body"] == f"<p title='{text}'>{text}</p>".encode()
        header = sent["headers"]["X-Job"]
        assert "\n" not in header and "\0" not in header
        assert header == quote(job, safe="".join(chr(c) for c in range(0x20, 0x7F) if c != 0x25))

    # argv after "--": one argument each, never a shell
    refused = outcome("operand")
    if OPERAND[case] is None:
        assert refused == f"argv[5]: {{job}} is {job!r}, which holds NUL; refused"
    else:
        assert refused is None
        argv = json.loads((tmp_path / "argv.operand").read_text())
        assert argv == ["--", job, f"at-{job}"]

    # argv where a value could be an option
    refused = outcome("option")
    out = tmp_path / "argv.option"
    if OPTION_SLOT[case] is None:
        assert refused is not None and refused.startswith(f"argv[5]: {{job}} is {job!r}, which")
        assert not out.exists()  # nothing started
        if job.startswith("-"):
            assert "would be read as an option" in refused
    else:
        assert refused is None
        assert json.loads(out.read_text()) == ["--name", job]


BAD_TEMPLATES = [
    ('url = "https://h/a/../{job}"', "tasks.t.url", "'.' or '..' path segments"),
    ('url = "https://h/a/./{job}"', "tasks.t.url", "'.' or '..' path segments"),
    ('url = "https://h/a#{job}"', "tasks.t.url", "not the fragment"),
    ('url = "https://{job}/"', "tasks.t.url", "after HOST"),
    (
        'url = "https://h/"\nheaders = { "Content-Type" = "text/plain" }\nbody = "hi {job}"',
        "tasks.t.body",
        "substituted raw",
    ),
    ('url = "https://h/"\nbody = "hi {job}"', "tasks.t.body", "no Content-Type"),
    (
        'url = "https://h/"\nheaders = { "Content-Type" = "{job}" }\nbody = "x"',
        "tasks.t.headers.Content-Type",
        "must not contain template fields",
    ),
    ('url = "https://h/"\nbody = \'{"n": {job}}\'', "tasks.t.body", "in strings"),
]


@pytest.mark.parametrize(("toml", "field", "message"), BAD_TEMPLATES)
def test_unsafe_templates_are_refused_at_load(toml: str, field: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        tasks(f'[tasks.t]\nkind = "http"\n{toml}\n')
    assert info.value.field == field and message in info.value.message


def test_literal_bodies_of_any_type_and_xml_are_fine() -> None:
    specs = tasks(
        '[tasks.a]\nkind = "http"\nurl = "https://h/"\n'
        'headers = { "Content-Type" = "text/plain" }\nbody = "no fields {{ here }}"\n'
        '[tasks.b]\nkind = "http"\nurl = "https://h/"\n'
        'headers = { "Content-Type" = "application/atom+xml" }\nbody = "<t>{job}</t>"\n'
    )
    a, b = specs["a"], specs["b"]
    assert isinstance(a, HttpTaskSpec) and isinstance(b, HttpTaskSpec)
    assert a.body_mode == "raw" and b.body_mode == "markup"


def test_a_bad_template_stops_the_worker_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cronwheel.cli.main import main

    bad = tmp_path / "tasks.toml"
    bad.write_text(
        '[tasks.note]\nkind = "http"\nurl = "https://h/"\n'
        'headers = { "Content-Type" = "text/plain" }\nbody = "job {job} failed"\n'
    )
    with pytest.raises(SystemExit) as info:
        main(["worker", "--store", f"sqlite:///{tmp_path}/c.db", "--tasks", str(bad)])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cronwheel: error: tasks.note.body: template fields")


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ('["NOPE"]', "redact[1]", "NOPE is not set"),
        ('["SHORT"]', "redact[1]", "shorter than 4"),
        ('"TOKEN"', "redact", "list of environment variable names"),
        ('["not-a-name"]', "redact[1]", "not an environment variable name"),
    ],
)
def test_bad_redact_lists(value: str, field: str, message: str) -> None:
    toml = f'redact = ["OK", {value[1:]}' if value.startswith("[") else f"redact = {value}"
    with pytest.raises(ValidationError) as info:
        tasks(
            f'{toml}\n[tasks.t]\nkind = "shell"\nargv = ["true"]\n', {"SHORT": "abc", "OK": "okay"}
        )
    assert info.value.field == field and message in info.value.message


# -- names refused at registration -------------------------------------------------------------
REFUSED_NAMES = {
    "..": "must not have a '.' or '..' step between slashes",
    ".": "must not have a '.' or '..' step between slashes",
    "a/../b": "must not have a '.' or '..' step between slashes",
    "./x": "must not have a '.' or '..' step between slashes",
    "-rf": "must not begin with '-'",
    "--output=/etc/x": "must not begin with '-'",
    "a\nb": "control characters",
    "a\0b": "control characters",
}


@pytest.mark.parametrize("name", sorted(REFUSED_NAMES))
def test_names_no_template_can_carry_are_refused_and_change_nothing(sec: Sec, name: str) -> None:
    before = sec.fingerprint()
    body = {
        "name": name,
        "task": "report",
        "schedule": {"kind": "cron", "cron": "0 9 * * *", "tz": "Europe/Berlin"},
        "allow_unknown_task": True,
    }
    r = sec.call("POST", "/v1/jobs", "admin", json=body)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == "name" and REFUSED_NAMES[name] in error["message"]
    if name.startswith("-"):  # by name too (a path cannot carry the others as they are)
        put = {k: v for k, v in body.items() if k != "name"}
        r = sec.call("PUT", f"/v1/jobs/{quote(name, safe='')}", "admin", json=put)
        assert r.status_code == 422 and r.json()["error"]["field"] == "name", r.text
    assert sec.fingerprint() == before


def test_hostile_but_carriable_names_are_accepted(sec: Sec) -> None:
    for name in ("%2e%2e", "a/b", "a..b/...", "<script>", "$(id)", "${HOME}", "é/日", "x" * 200):
        sec.cron_job(name)


# -- secrets out of recorded errors ----------------------------------------------------------
TOKEN = "tok-Secret-4711"  # in a header through ${API_TOKEN}: redacted without being listed
LISTED = "listed/secret&value"  # named in redact = [...]
PASSWORD = "hunter2-pass"  # a shell task's env through ${DB_PASSWORD}


def _worker(sec: Sec, base: str) -> Worker:
    registry = TaskRegistry()
    shell = (
        "import os, sys; sys.stdout.write('z' * 20000); "
        "print('pw', os.environ['PW'], 'listed', sys.argv[1]); sys.exit(4)"
    )
    specs = parse_tasks(
        tomllib.loads(
            f"""
redact = ["LISTED_SECRET"]
[tasks.hook]
kind = "http"
url = "{base}/fail/{{job}}"
headers = {{ Authorization = "Bearer ${{API_TOKEN}}", "Content-Type" = "application/json" }}
body = '{{"job": "{{job}}", "key": "${{LISTED_SECRET}}"}}'
[tasks.script]
kind = "shell"
argv = {json.dumps([sys.executable, "-c", shell, "${LISTED_SECRET}"])}
env = {{ PW = "${{DB_PASSWORD}}" }}
"""
        ),
        {"API_TOKEN": TOKEN, "LISTED_SECRET": LISTED, "DB_PASSWORD": PASSWORD},
    )
    register_tasks(registry, specs)

    def leaky(ctx: Context) -> None:  # Python code leaking a secret: redacted all the same
        raise RuntimeError(f"cannot log in with {TOKEN}")

    registry.add("leaky", leaky)
    return Worker(sec.store, registry, FakeClock(sec.store.now()))


def test_recorded_errors_hold_no_secret_and_read_tokens_see_summaries(
    sec: Sec, loopback: tuple[str, list[dict[str, Any]]]
) -> None:
    base, requests = loopback
    worker = _worker(sec, base)
    ids = {}
    for task in ("hook", "script", "leaky"):
        r = sec.call("POST", "/v1/firings", json={"task": task, "allow_unknown_task": True})
        assert r.status_code == 201, r.text
        ids[task] = r.json()["id"]
    assert asyncio.run(worker.drain_once()) == 3
    assert requests[0]["headers"]["Authorization"] == f"Bearer {TOKEN}"  # it was sent

    stored = repr(sec.fingerprint())
    for secret in (TOKEN, LISTED, PASSWORD, quote(LISTED, safe=""), json.dumps(LISTED)[1:-1]):
        assert secret not in stored  # never written, in any form the remote echoed

    full = {t: sec.call("GET", f"/v1/firings/{i}", "write").json() for t, i in ids.items()}
    hook = full["hook"]["error"]
    first = hook.splitlines()[0]
    assert first.startswith(f"TaskKindError: HTTP 500 from POST {base}/fail/hook%40")
    assert f"denied: auth={REDACTED} body=" in hook  # "Bearer <token>" as a whole
    assert f'"key": "{REDACTED}"' in hook
    assert len(hook) < 700  # the response excerpt is bounded
    script = full["script"]["error"]
    assert script.splitlines()[0] == f"TaskKindError: {sys.executable}: exited with code 4"
    assert script.endswith(f"pw {REDACTED} listed {REDACTED}\n")
    assert len(script) < 4096 + 300  # only the output's tail
    assert full["leaky"]["error"].endswith(f"RuntimeError: cannot log in with {REDACTED}\n")
    assert full["leaky"]["attempts"][0]["error"] == full["leaky"]["error"]

    # a read token sees the summary line only: no response excerpt, output or traceback
    for task, i in ids.items():
        shown = sec.call("GET", f"/v1/firings/{i}", "read").json()
        assert shown["error"] == error_summary(full[task]["error"])
        assert [a["error"] for a in shown["attempts"]] == [shown["error"]]
    assert sec.call("GET", f"/v1/firings/{ids['hook']}", "read").json()["error"] == first
    listed = sec.call("GET", "/v1/firings", "read").json()["items"]
    assert {f["id"]: f["error"] for f in listed} == {
        i: error_summary(full[t]["error"]) for t, i in ids.items()
    }
    leaky = sec.call("GET", f"/v1/firings/{ids['leaky']}", "read").json()["error"]
    assert leaky == f"RuntimeError: cannot log in with {REDACTED}"
    # and the dashboard's firing page
    page = sec.call("GET", f"/ui/firings/{ids['script']}", "read").text
    assert "zzzz" not in page and "exited with code 4" in page
    page = sec.call("GET", f"/ui/firings/{ids['script']}", "write").text
    assert "zzzz" in page and PASSWORD not in page


def test_a_secret_cut_by_an_excerpt_is_not_shown_in_part() -> None:
    secret = "abcdefghijkl"
    redact = Redactor([secret])
    # the tail starts inside the secret: its second half must not show
    raw = (secret + "-" * 100).encode()[6:]
    tail = redact.excerpt(raw, size=50, head=False, cut=True)
    assert "ghijkl" not in tail and tail == "-" * 50
    # the head ends inside it
    raw = ("+" * 40 + secret).encode()[:46]
    head = redact.excerpt(raw, size=45, head=True, cut=True)
    assert "abcdef" not in head and set(head) <= {"+"}
    assert redact(f"x {secret} {quote(secret)} y") == f"x {REDACTED} {REDACTED} y"
    assert Redactor(["abc"])("abc") == "abc"  # too short to redact: left alone


def test_long_errors_are_bounded_keeping_summary_and_tail() -> None:
    error = "Summary line\n" + "m" * 50000 + "\nthe end"
    bounded = bound_error(error)
    assert len(bounded) <= ERROR_MAX
    assert bounded.startswith("Summary line\n[… ") and bounded.endswith("m\nthe end")
    assert error_summary(bounded) == "Summary line"
    traceback = "Traceback (most recent call last):\n  File x\nValueError: boom\n"
    assert error_summary(traceback) == "ValueError: boom"
