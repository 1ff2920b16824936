"""Task kinds from a worker's tasks file: HTTP calls and shell commands.

Real processes (process groups, signals) and a real loopback HTTP server; no network.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from cronwheel.app import App
from cronwheel.domain.clock import FakeClock
from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import Firing, FiringId, JobId
from cronwheel.errors import ValidationError
from cronwheel.signals import Retry
from cronwheel.worker.context import Context, make_context
from cronwheel.worker.kinds import (
    HttpTaskSpec,
    ShellTaskSpec,
    TaskKindError,
    TaskKinds,
    TaskSpec,
    compile_template,
    load_tasks,
    parse_tasks,
    register_tasks,
    shell_env,
)
from cronwheel.worker.procgroup import group_alive

T0 = datetime(2026, 3, 27, 23, 0, tzinfo=UTC)
README = Path(__file__).resolve().parents[2] / "README.md"


def firing(job: str = "nightly", *args: Any, **kwargs: Any) -> Firing:
    return Firing(
        id=FiringId(7),
        job_id=JobId(42),
        job_name=job,
        namespace="default",
        task="t",
        args=args,
        kwargs=kwargs,
        scheduled_for=T0,
        due_at=T0,
        state=FiringState.RUNNING,
        attempt=2,
        max_attempts=3,
        priority=1.0,
        enqueued_at=T0,
        enqueued_epoch=1,
    )


def ctx_for(job: str = "nightly", *args: Any, **kwargs: Any) -> Context:
    return make_context(firing(job, *args, **kwargs), "claim-token", "worker-test")


def parse(toml: str, env: dict[str, str] | None = None) -> list[TaskSpec]:
    return parse_tasks(tomllib.loads(toml), env or {})


def one(toml: str, env: dict[str, str] | None = None) -> TaskSpec:
    [spec] = parse(toml, env)
    return spec


async def run_like_worker(handler: Any, ctx: Context, *args: Any, **kwargs: Any) -> None:
    """What Worker._run_handler does for an async handler: cancel it on ctx.request_cancel()."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(handler(ctx, *args, **kwargs))
    ctx.on_cancel(lambda: loop.call_soon_threadsafe(task.cancel))
    await task


# -- parsing and validation ------------------------------------------------------------------
def test_readme_example_file_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = README.read_text()
    start = text.index("```toml\n# tasks.toml") + len("```toml\n")
    example = text[start : text.index("```", start)]
    path = tmp_path / "tasks.toml"
    path.write_text(example.replace('cwd = "/var/backups"', f'cwd = "{tmp_path}"'))
    monkeypatch.setenv("BILLING_TOKEN", "s3cret")
    specs = {s.name: s for s in load_tasks(path)}
    http, shell = specs["ping_billing"], specs["backup"]
    assert isinstance(http, HttpTaskSpec) and isinstance(shell, ShellTaskSpec)
    assert http.method == "POST" and http.timeout == 10 and http.body_mode == "json"
    assert http.success == frozenset({200, 201, 202, 204})
    assert dict(http.headers)["Authorization"].render({}) == "Bearer s3cret"
    assert "s3cret" not in repr(http)  # secrets stay out of reprs and logs
    assert shell.kill_grace == 10 and shell.timeout == 3600 and shell.cwd == str(tmp_path)
    assert [t.render({"scheduled_for": "T"}) for t in shell.argv][-1] == "T"


BAD_FILES = [
    ("[other]\nx = 1\n", "other", "unknown key"),
    ("x = 1\n", "x", "unknown key"),
    ("[tasks]\n", "tasks", "at least one"),
    ('[tasks."bad name"]\nkind = "shell"\nargv = ["x"]\n', "tasks.'bad name'", "not a task name"),
    ('[tasks.a]\nkind = "python"\n', "tasks.a.kind", '"http" or "shell"'),
    ("[tasks.a]\nargv = []\n", "tasks.a.kind", '"http" or "shell"'),
    ('[tasks.a]\nkind = "shell"\n', "tasks.a.argv", "non-empty list of strings"),
    ('[tasks.a]\nkind = "shell"\nargv = []\n', "tasks.a.argv", "non-empty list of strings"),
    ('[tasks.a]\nkind = "shell"\nargv = ["x", 1]\n', "tasks.a.argv", "non-empty list"),
    ('[tasks.a]\nkind = "shell"\nargv = "rm -rf /"\n', "tasks.a.argv", "non-empty list"),
    ('[tasks.a]\nkind = "shell"\nargv = [""]\n', "tasks.a.argv", "must not be empty"),
    ('[tasks.a]\nkind = "shell"\nargv = ["{job}"]\n', "tasks.a.argv", "template fields"),
    ('[tasks.a]\nkind = "shell"\nargv = ["x"]\nshell = true\n', "tasks.a.shell", "unknown key"),
    ('[tasks.a]\nkind = "shell"\nargv = ["x"]\ntimeout = 0\n', "tasks.a.timeout", "> 0"),
    ('[tasks.a]\nkind = "shell"\nargv = ["x"]\ntimeout = true\n', "tasks.a.timeout", "seconds"),
    ('[tasks.a]\nkind = "shell"\nargv = ["x"]\nkill_grace = -1\n', "tasks.a.kill_grace", ">= 0"),
    ('[tasks.a]\nkind = "shell"\nargv = ["x"]\nenv = { A = 1 }\n', "tasks.a.env", "strings"),
    ('[tasks.a]\nkind = "shell"\nargv = ["x"]\nenv = { "A-B" = "1" }\n', "tasks.a.env.A-B", "name"),
    (
        '[tasks.a]\nkind = "shell"\nargv = ["x"]\nenv = { CRONWHEEL_JOB = "x" }\n',
        "tasks.a.env.CRONWHEEL_JOB",
        "set by cronwheel",
    ),
    ('[tasks.a]\nkind = "shell"\nargv = ["x"]\ncwd = "relative"\n', "tasks.a.cwd", "absolute"),
    ('[tasks.a]\nkind = "shell"\nargv = ["x"]\ncwd = "/nonexistent/d"\n', "tasks.a.cwd", "exist"),
    ('[tasks.a]\nkind = "http"\n', "tasks.a.url", "http(s)://"),
    ('[tasks.a]\nkind = "http"\nurl = "ftp://h/x"\n', "tasks.a.url", "http(s)://"),
    ('[tasks.a]\nkind = "http"\nurl = "file:///etc/passwd"\n', "tasks.a.url", "http(s)://"),
    ('[tasks.a]\nkind = "http"\nurl = "https://{job}.example/"\n', "tasks.a.url", "after HOST"),
    ('[tasks.a]\nkind = "http"\nurl = "https://h{job}/x"\n', "tasks.a.url", "after HOST"),
    ('[tasks.a]\nkind = "http"\nurl = "https://u:p@h/x"\n', "tasks.a.url", "http(s)://"),
    ('[tasks.a]\nkind = "http"\nurl = "https://h/"\nmethod = "BREW"\n', "tasks.a.method", "one of"),
    ('[tasks.a]\nkind = "http"\nurl = "https://h/"\ntimeout = -1\n', "tasks.a.timeout", "> 0"),
    ('[tasks.a]\nkind = "http"\nurl = "https://h/"\nsuccess = []\n', "tasks.a.success", "codes"),
    ('[tasks.a]\nkind = "http"\nurl = "https://h/"\nsuccess = [99]\n', "tasks.a.success", "codes"),
    ('[tasks.a]\nkind = "http"\nurl = "https://h/"\nsuccess = 200\n', "tasks.a.success", "codes"),
    ('[tasks.a]\nkind = "http"\nurl = "https://h/"\nbody = 1\n', "tasks.a.body", "string"),
    ('[tasks.a]\nkind = "http"\nurl = "https://h/"\nretries = 3\n', "tasks.a.retries", "unknown"),
    (
        '[tasks.a]\nkind = "http"\nurl = "https://h/"\nheaders = { "Idempotency-Key" = "k" }\n',
        "tasks.a.headers.Idempotency-Key",
        "set by cronwheel",
    ),
    (
        '[tasks.a]\nkind = "http"\nurl = "https://h/"\nheaders = { "Bad Name" = "v" }\n',
        "tasks.a.headers.Bad Name",
        "header name",
    ),
    (
        '[tasks.a]\nkind = "http"\nurl = "https://h/"\nheaders = { X = "a\\r\\nEvil: 1" }\n',
        "tasks.a.headers.X",
        "CR, LF",
    ),
    (
        '[tasks.a]\nkind = "http"\nurl = "https://h/"\nbody = \'{"job": {job}}\'\n',
        "tasks.a.body",
        "in strings",
    ),
]


@pytest.mark.parametrize(("toml", "field", "message"), BAD_FILES)
def test_bad_tasks_files_name_the_task_and_field(toml: str, field: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse(toml)
    assert info.value.field == field
    assert message in info.value.message
    assert str(info.value).startswith(f"{field}: ")


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="No such file"):
        load_tasks(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("[tasks.a\n")
    with pytest.raises(ValidationError, match="not valid TOML"):
        load_tasks(tmp_path / "bad.toml")


def test_env_vars_are_read_at_load_time() -> None:
    spec = one(
        '[tasks.a]\nkind = "http"\nurl = "${BASE}/hook"\nheaders = { A = "x ${TOKEN}" }\n',
        {"BASE": "https://h.internal", "TOKEN": "{job}"},
    )
    assert isinstance(spec, HttpTaskSpec)
    assert spec.url.render({}) == "https://h.internal/hook"
    # a variable's value is literal text, never a template
    assert dict(spec.headers)["A"].render({"job": "J"}) == "x {job}"
    with pytest.raises(ValidationError, match=r"\$\{TOKEN\} is not set") as info:
        one('[tasks.a]\nkind = "shell"\nargv = ["x", "${TOKEN}"]\n')
    assert info.value.field == "tasks.a.argv[1]"


# -- template safety -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "{job.__class__}",
        "{job.__class__.__mro__}",
        "{args[0]}",
        "{kwargs[name]}",
        "{job!r}",
        "{job:>99999}",
        "{0}",
        "{__import__}",
        "{ctx}",
        "{JOB}",
        "${NOT-A-NAME}",
        "${}",
    ],
)
def test_template_injection_attempts_are_rejected_at_load(text: str) -> None:
    with pytest.raises(ValidationError) as info:
        compile_template(f"prefix {text} suffix", "tasks.x.body", {})
    assert info.value.field == "tasks.x.body"


def test_templates_substitute_only_whitelisted_fields() -> None:
    t = compile_template('{"a": "{job}", "n": {attempt}, "s": "{ x }", "e": {}}', "w", {})
    assert t.fields == {"job", "attempt"}
    assert t.render({"job": "J", "attempt": "2"}) == '{"a": "J", "n": 2, "s": "{ x }", "e": {}}'


def test_json_body_escapes_hostile_job_names() -> None:
    spec = one(
        '[tasks.a]\nkind = "http"\nurl = "https://h/"\n'
        'body = \'{"job": "{job}", "key": "{idempotency_key}", "n": {attempt}}\'\n'
    )
    assert isinstance(spec, HttpTaskSpec) and spec.body is not None
    hostile = 'x", "admin": true, "y": "\\'
    seen: list[httpx.Request] = []

    def respond(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    asyncio.run(call(spec, ctx_for(hostile), transport=httpx.MockTransport(respond)))
    assert json.loads(seen[0].content) == {"job": hostile, "key": "42:2026-03-27T23:00:00Z", "n": 2}


def test_url_fields_are_percent_encoded() -> None:
    spec = one('[tasks.a]\nkind = "http"\nurl = "https://h/jobs/{job}?at={scheduled_for}"\n')
    seen: list[httpx.Request] = []

    def respond(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    asyncio.run(call(spec, ctx_for("a/b?c#d"), transport=httpx.MockTransport(respond)))
    url = seen[0].url
    assert url.host == "h" and url.raw_path.startswith(b"/jobs/a%2Fb%3Fc%23d?at=")
    # a '..' step is refused, encoded or not (tests/security/test_templates.py: every context)
    with pytest.raises(TaskKindError, match=r"url: \{job\} is 'a/../b', which holds a '.' or"):
        asyncio.run(call(spec, ctx_for("a/../b"), transport=httpx.MockTransport(respond)))
    assert len(seen) == 1


# -- shell -----------------------------------------------------------------------------------
def shell(toml_body: str, name: str = "s") -> ShellTaskSpec:
    spec = one(f'[tasks.{name}]\nkind = "shell"\n{toml_body}')
    assert isinstance(spec, ShellTaskSpec)
    return spec


async def call(
    spec: TaskSpec,
    ctx: Context,
    *args: Any,
    transport: httpx.AsyncBaseTransport | None = None,
    **kwargs: Any,
) -> None:
    kinds = TaskKinds(transport=transport)
    try:
        await run_like_worker(kinds.handler(spec), ctx, *args, **kwargs)
    finally:
        await kinds.aclose()


def test_shell_task_succeeds_with_fields_in_argv_and_args_only_in_env(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    script = (
        "import json, os, sys; json.dump({'argv': sys.argv[1:], 'cwd': os.getcwd(), "
        "'env': {k: v for k, v in os.environ.items()}}, open(sys.argv[1], 'w'))"
    )
    argv = json.dumps([sys.executable, "-c", script, str(out), "--date", "{scheduled_for}"])
    spec = shell(f'argv = {argv}\nenv = {{ TARGET = "s3://b/{{job}}" }}\ncwd = "{tmp_path}"\n')
    hostile = "$(touch pwned); rm -rf /"
    asyncio.run(call(spec, ctx_for("nightly"), hostile, mode=hostile))
    got = json.loads(out.read_text())
    assert got["argv"] == [str(out), "--date", "2026-03-27T23:00:00Z"]
    assert got["cwd"] == str(tmp_path)
    env = got["env"]
    assert json.loads(env["CRONWHEEL_ARGS"]) == {"args": [hostile], "kwargs": {"mode": hostile}}
    assert env["TARGET"] == "s3://b/nightly"
    assert env["CRONWHEEL_IDEMPOTENCY_KEY"] == "42:2026-03-27T23:00:00Z"
    assert env["CRONWHEEL_SCHEDULED_FOR"] == "2026-03-27T23:00:00Z"
    assert env["CRONWHEEL_ATTEMPT"] == "2" and env["CRONWHEEL_JOB"] == "nightly"
    # a minimal base environment: nothing else of the worker's leaks in
    fields = "JOB JOB_ID FIRING_ID ATTEMPT IDEMPOTENCY_KEY SCHEDULED_FOR NAMESPACE ARGS"
    assert {k for k in env if k.startswith("CRONWHEEL_")} == {
        f"CRONWHEEL_{f}" for f in fields.split()
    }
    assert set(env) - {"PATH", "HOME", "LANG", "TARGET", "LC_CTYPE"} <= {
        k for k in env if k.startswith("CRONWHEEL_")
    }
    assert not (tmp_path / "pwned").exists()


def test_shell_env_does_not_inherit_the_workers_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "nope")
    env = shell_env(shell('argv = ["true"]\n'), ctx_for(), (), {})
    assert "AWS_SECRET_ACCESS_KEY" not in env and "PATH" in env


def test_shell_task_failure_keeps_the_output_tail() -> None:
    script = (
        "import sys; sys.stdout.write('x' * 10000); sys.stdout.flush(); "
        "sys.stderr.write('boom: disk full'); sys.exit(3)"
    )
    spec = shell(f"argv = {json.dumps([sys.executable, '-c', script])}\n")
    with pytest.raises(TaskKindError) as info:
        asyncio.run(call(spec, ctx_for()))
    message = str(info.value)
    assert "exited with code 3" in message
    assert message.endswith("boom: disk full")
    assert len(message) < 4096 + 200  # only the tail is kept


def test_shell_task_that_cannot_start() -> None:
    spec = shell('argv = ["/nonexistent/program"]\n')
    with pytest.raises(TaskKindError, match="cannot start '/nonexistent/program'"):
        asyncio.run(call(spec, ctx_for()))


def _spawn_group_script(pidfile: Path, *, ignore_term: bool) -> str:
    trap = "trap '' TERM; " if ignore_term else ""
    return json.dumps(["/bin/sh", "-c", f"{trap}echo $$ > {pidfile}; sleep 60 & sleep 60; wait"])


@pytest.mark.parametrize("ignore_term", [False, True], ids=["sigterm", "sigkill-after-grace"])
def test_cancel_kills_the_whole_process_group(tmp_path: Path, ignore_term: bool) -> None:
    pidfile = tmp_path / "pid"
    grace = 0.5
    spec = shell(f"argv = {_spawn_group_script(pidfile, ignore_term=ignore_term)}\n")
    spec = ShellTaskSpec(name=spec.name, argv=spec.argv, kill_grace=grace)
    ctx = ctx_for()
    timings: dict[str, float] = {}

    async def scenario() -> None:
        running = asyncio.ensure_future(run_like_worker(TaskKinds().handler(spec), ctx))
        while not pidfile.exists() or not pidfile.read_text().strip():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # let both sleeps start
        timings["pgid"] = int(pidfile.read_text())
        assert group_alive(int(timings["pgid"]))
        timings["start"] = time.monotonic()
        threading.Thread(target=ctx.request_cancel).start()  # as the heartbeat thread would
        with pytest.raises(asyncio.CancelledError):
            await running
        timings["end"] = time.monotonic()

    asyncio.run(scenario())
    took = timings["end"] - timings["start"]
    assert not group_alive(int(timings["pgid"]))
    assert took < grace + 1.0
    if ignore_term:
        assert took >= grace - 0.05  # SIGTERM was ignored: SIGKILL came after the grace


def test_a_second_cancel_during_the_grace_kills_at_once(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    spec = shell(f"argv = {_spawn_group_script(pidfile, ignore_term=True)}\nkill_grace = 30\n")

    async def scenario() -> float:
        running = asyncio.ensure_future(TaskKinds().handler(spec)(ctx_for()))
        while not pidfile.exists() or not pidfile.read_text().strip():
            await asyncio.sleep(0.01)
        running.cancel()  # SIGTERM (ignored), then the grace ...
        await asyncio.sleep(0.2)
        started = time.monotonic()
        running.cancel()  # ... cut short: SIGKILL now
        with pytest.raises(asyncio.CancelledError):
            await running
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 2
    assert not group_alive(int(pidfile.read_text()))


def test_timeout_kills_the_process_group_and_fails(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    spec = shell(
        f"argv = {_spawn_group_script(pidfile, ignore_term=False)}\ntimeout = 0.5\nkill_grace = 2\n"
    )
    started = time.monotonic()
    with pytest.raises(TaskKindError, match=r"timed out after 0.5 s; process group stopped"):
        asyncio.run(call(spec, ctx_for()))
    assert time.monotonic() - started < 2.0
    assert not group_alive(int(pidfile.read_text()))


def test_processes_left_behind_end_with_the_task(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    argv = json.dumps(["/bin/sh", "-c", f"echo $$ > {pidfile}; sleep 60 > /dev/null 2>&1 &"])
    asyncio.run(call(shell(f"argv = {argv}\nkill_grace = 1\n"), ctx_for()))
    assert not group_alive(int(pidfile.read_text()))


# -- http ------------------------------------------------------------------------------------
class Recorder(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]]

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.requests.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": dict(self.headers.items()),
                "body": self.rfile.read(length),
            }
        )
        status = int(self.path.split("?")[0].split("/")[1] or 200)
        self.send_response(status)
        if status in (429, 503):
            self.send_header("Retry-After", "7")
        body = b"E" * 2000 if status >= 400 else b""
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = _handle

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    requests: list[dict[str, Any]] = []
    handler = type("H", (Recorder,), {"requests": requests})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", requests
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def http(base: str, path: str, extra: str = "") -> HttpTaskSpec:
    spec = one(
        f'[tasks.ping]\nkind = "http"\nmethod = "POST"\nurl = "{base}{path}"\n'
        'headers = { Authorization = "Bearer ${TOKEN}", "Content-Type" = "application/json" }\n'
        'body = \'{"job": "{job}", "key": "{idempotency_key}", "when": "{scheduled_for}"}\'\n'
        f"{extra}",
        {"TOKEN": "t0k"},
    )
    assert isinstance(spec, HttpTaskSpec)
    return spec


def test_http_task_against_a_loopback_server(server: tuple[str, list[dict[str, Any]]]) -> None:
    base, requests = server
    asyncio.run(call(http(base, "/204/{job}"), ctx_for("nightly")))
    [req] = requests
    assert req["method"] == "POST" and req["path"] == "/204/nightly"
    assert req["headers"]["Idempotency-Key"] == "42:2026-03-27T23:00:00Z"
    assert req["headers"]["Authorization"] == "Bearer t0k"
    assert json.loads(req["body"]) == {
        "job": "nightly",
        "key": "42:2026-03-27T23:00:00Z",
        "when": "2026-03-27T23:00:00Z",
    }


def test_http_failure_status_and_body_snippet(server: tuple[str, list[dict[str, Any]]]) -> None:
    base, _ = server
    with pytest.raises(TaskKindError) as info:
        asyncio.run(call(http(base, "/500?token=secret"), ctx_for()))
    message = str(info.value)
    # the summary line, then the excerpt (shown to write and admin tokens only)
    assert message.startswith(
        f"HTTP 500 from POST {base}/500\n--- response (first 500 bytes) ---\n"
    )
    assert "secret" not in message  # the query string stays out of errors
    assert message.endswith("E" * 500) and "E" * 501 not in message


def test_http_success_codes_are_configurable(server: tuple[str, list[dict[str, Any]]]) -> None:
    base, _ = server
    asyncio.run(call(http(base, "/418", "success = [418]\n"), ctx_for()))
    with pytest.raises(TaskKindError, match="HTTP 200"):
        asyncio.run(call(http(base, "/200", "success = [202]\n"), ctx_for()))


@pytest.mark.parametrize("status", [429, 503])
def test_http_retry_after(server: tuple[str, list[dict[str, Any]]], status: int) -> None:
    base, _ = server
    with pytest.raises(Retry) as info:
        asyncio.run(call(http(base, f"/{status}"), ctx_for()))
    assert info.value.after is not None and info.value.after.total_seconds() == 7
    assert f"HTTP {status}" in info.value.reason


def test_http_retry_after_as_a_date_and_redirects_not_followed() -> None:
    spec = one('[tasks.a]\nkind = "http"\nurl = "https://h/x"\n')
    responses = iter(
        [
            httpx.Response(503, headers={"Retry-After": "Fri, 01 Jan 2100 00:00:00 GMT"}),
            httpx.Response(503),
            httpx.Response(302, headers={"Location": "https://elsewhere/"}),
        ]
    )
    transport = httpx.MockTransport(lambda request: next(responses))
    with pytest.raises(Retry) as info:
        asyncio.run(call(spec, ctx_for(), transport=transport))
    assert info.value.after is not None and info.value.after.total_seconds() == 86400  # capped
    with pytest.raises(TaskKindError, match="HTTP 503"):  # no Retry-After: ordinary backoff
        asyncio.run(call(spec, ctx_for(), transport=transport))
    with pytest.raises(TaskKindError, match="HTTP 302"):
        asyncio.run(call(spec, ctx_for(), transport=transport))


def test_http_default_body_carries_the_arguments() -> None:
    spec = one('[tasks.a]\nkind = "http"\nurl = "https://h/x"\nmethod = "put"\n')
    seen: list[httpx.Request] = []

    def respond(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    asyncio.run(call(spec, ctx_for(), 1, "two", k=[3], transport=httpx.MockTransport(respond)))
    assert seen[0].method == "PUT" and seen[0].headers["Content-Type"] == "application/json"
    assert json.loads(seen[0].content) == {
        "args": [1, "two"],
        "kwargs": {"k": [3]},
        "idempotency_key": "42:2026-03-27T23:00:00Z",
    }


def test_http_timeout_fails_the_attempt() -> None:
    spec = one('[tasks.a]\nkind = "http"\nurl = "https://h/x"\ntimeout = 0.2\n')

    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200)

    started = time.monotonic()
    with pytest.raises(TaskKindError, match=r"POST https://h/x: timed out after 0.2 s"):
        asyncio.run(call(spec, ctx_for(), transport=httpx.MockTransport(slow)))
    assert time.monotonic() - started < 2


def test_http_task_is_cancelled_on_request() -> None:
    spec = one('[tasks.a]\nkind = "http"\nurl = "https://h/x"\n')
    ctx = ctx_for()

    async def hang(request: httpx.Request) -> httpx.Response:
        ctx.request_cancel()
        await asyncio.sleep(30)
        return httpx.Response(200)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(call(spec, ctx, transport=httpx.MockTransport(hang)))


# -- registration and the worker -------------------------------------------------------------
def test_register_tasks_refuses_a_python_tasks_name(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path}/x.db")

    @app.task
    def backup(ctx: Context) -> None: ...

    specs = parse('[tasks.backup]\nkind = "shell"\nargv = ["true"]\n')
    with pytest.raises(ValidationError, match="already registered") as info:
        register_tasks(app.registry, specs)
    assert info.value.field == "tasks.backup"
    other = parse('[tasks.restore]\nkind = "shell"\nargv = ["true"]\n')
    register_tasks(app.registry, other)
    assert app.registry.get("restore").is_async


def test_worker_runs_configured_tasks_end_to_end(tmp_path: Path) -> None:
    from cronwheel.store.sqlite import SqliteStore
    from cronwheel.worker.worker import Worker

    clock = FakeClock(T0)
    store = SqliteStore(str(tmp_path / "w.db"), clock=clock)
    store.migrate()
    app = App(clock=clock)
    app.use_store(store)
    out = tmp_path / "args.json"
    script = f"import os; open({str(out)!r}, 'w').write(os.environ['CRONWHEEL_ARGS'])"
    toml = (
        f'[tasks.ok]\nkind = "shell"\nargv = {json.dumps([sys.executable, "-c", script])}\n'
        '[tasks.bad]\nkind = "shell"\nargv = ["/bin/sh", "-c", "echo nope >&2; exit 3"]\n'
    )
    register_tasks(app.registry, parse(toml))
    try:
        good = app.enqueue("ok", 1, k="v")
        bad = app.enqueue("bad")
        worker = Worker(store, app.registry, clock)
        assert asyncio.run(worker.drain_once()) == 2
        assert store.get_firing(good.id).state is FiringState.SUCCEEDED
        assert json.loads(out.read_text()) == {"args": [1], "kwargs": {"k": "v"}}
        failed = store.get_firing(bad.id)
        assert failed.state is FiringState.QUEUED and failed.due_at > T0  # retried after backoff
        assert failed.error is not None and "exited with code 3" in failed.error
        assert failed.error.endswith("nope\n")
    finally:
        app.close()


@pytest.mark.parametrize(("command", "via_env"), [("worker", False), ("serve", True)])
def test_cli_rejects_a_bad_tasks_file_with_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    via_env: bool,
) -> None:
    from cronwheel.cli.main import main

    bad = tmp_path / "tasks.toml"
    bad.write_text('[tasks.backup]\nkind = "shell"\nargv = "backup.sh --all"\n')
    argv = [command, "--store", f"sqlite:///{tmp_path}/c.db"]
    if via_env:
        monkeypatch.setenv("CRONWHEEL_TASKS", str(bad))
    else:
        argv += ["--tasks", str(bad)]
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == "cronwheel: error: tasks.backup.argv: must be a non-empty list of strings"
