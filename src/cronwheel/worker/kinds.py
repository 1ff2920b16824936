"""Task kinds besides Python functions: HTTP calls and shell commands from a tasks file.

A worker loads a TOML file (``cronwheel worker --tasks tasks.toml``) of ``[tasks.NAME]``
tables (``kind = "http"`` or ``"shell"``; see the README) and registers each as a task.

Security boundary: URL, method, headers, argv, environment and working directory come only
from the worker's configuration. API callers refer to a task by name and pass JSON
arguments, which reach an HTTP task as the default JSON body and a shell task as the
``CRONWHEEL_ARGS`` variable: never on a command line, never through a shell (argv only).
Templates substitute only firing fields, encoded per context (worker/templates.py).
Secrets (``redact = [...]`` names, ``${VAR}`` values in headers and env, credential
headers) are redacted from the errors a task records (worker/redact.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import json
import math
import os
import re
import tempfile
import tomllib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import httpx

from cronwheel.domain.names import TASK_RE
from cronwheel.signals import Retry
from cronwheel.worker.context import Context
from cronwheel.worker.procgroup import stop_group
from cronwheel.worker.redact import MIN_SECRET, Redactor
from cronwheel.worker.templates import (
    ENV_NAME_RE,
    FIELDS,
    BodyMode,
    TaskKindError,
    Template,
    body_mode,
    check_json_body,
    check_url_template,
    compile_template,
    context_fields,
    render_argv,
    render_body,
    render_env,
    render_header,
    render_url,
)
from cronwheel.worker.templates import bad as _bad

if TYPE_CHECKING:
    from cronwheel.worker.registry import TaskRegistry

__all__ = [
    "HttpTaskSpec",
    "ShellTaskSpec",
    "TaskKindError",
    "TaskKinds",
    "TaskSpec",
    "compile_template",
    "load_tasks",
    "parse_tasks",
    "register_tasks",
    "shell_env",
]

_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_BODYLESS = frozenset({"GET", "HEAD", "OPTIONS"})
_HTTP_KEYS = frozenset({"kind", "method", "url", "headers", "body", "timeout", "success"})
_SHELL_KEYS = frozenset({"kind", "argv", "env", "timeout", "kill_grace", "cwd"})
# headers whose values are credentials: redacted from errors whatever the file says
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key"})
_SECRET_HEADER_WORDS = ("token", "secret", "password", "auth", "api-key", "apikey")
_BODY_SNIPPET = 500
_OUTPUT_TAIL = 4096
_RETRY_AFTER_MAX = 86400.0


# -- specs ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpTaskSpec:
    name: str
    method: str
    url: Template
    headers: tuple[tuple[str, Template], ...] = field(default=(), repr=False)
    body: Template | None = field(default=None, repr=False)
    body_mode: BodyMode = "json"
    timeout: float = 30.0
    success: frozenset[int] = frozenset(range(200, 300))
    secrets: frozenset[str] = field(default=frozenset(), repr=False)  # redacted from errors
    kind: Literal["http"] = "http"


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellTaskSpec:
    name: str
    argv: tuple[Template, ...]
    env: tuple[tuple[str, Template], ...] = field(default=(), repr=False)
    timeout: float | None = None
    kill_grace: float = 10.0
    cwd: str | None = None
    secrets: frozenset[str] = field(default=frozenset(), repr=False)  # redacted from errors
    kind: Literal["shell"] = "shell"


TaskSpec = HttpTaskSpec | ShellTaskSpec


def load_tasks(path: str | os.PathLike[str]) -> list[TaskSpec]:
    """Read and validate a tasks file; ValidationError names the task and the field."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise _bad("tasks file", f"{os.fspath(path)}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise _bad("tasks file", f"{os.fspath(path)}: not valid TOML: {exc}") from None
    return parse_tasks(data)


def parse_tasks(data: Mapping[str, Any], env: Mapping[str, str] | None = None) -> list[TaskSpec]:
    """Validate parsed TOML; ``${VAR}`` is looked up in ``env`` (default: ``os.environ``)."""
    env = os.environ if env is None else env
    _check_keys(data, frozenset({"tasks", "redact"}), "")
    shared = _redact_values(data.get("redact", []), env)
    tasks = data.get("tasks")
    if not isinstance(tasks, dict) or not tasks:
        raise _bad("tasks", "must define at least one [tasks.NAME] table")
    specs: list[TaskSpec] = []
    for name, table in tasks.items():
        where = f"tasks.{name}"
        if not TASK_RE.match(name):
            raise _bad(f"tasks.{name!r}", "not a task name (a letter or '_', then [A-Za-z0-9_.:-])")
        if not isinstance(table, dict):
            raise _bad(where, "must be a table")
        parse = _PARSERS.get(str(table.get("kind")))
        if parse is None:
            raise _bad(f"{where}.kind", 'must be "http" or "shell"')
        spec = parse(name, table, where, env)
        specs.append(dataclasses.replace(spec, secrets=spec.secrets | shared))
    return specs


def _redact_values(names: Any, env: Mapping[str, str]) -> frozenset[str]:
    """The values of the ``redact`` list's variables: redacted from every task's errors."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise _bad("redact", "must be a list of environment variable names")
    values: set[str] = set()
    for i, name in enumerate(names):
        where = f"redact[{i}]"
        if not ENV_NAME_RE.match(name):
            raise _bad(where, f"{name!r} is not an environment variable name")
        if name not in env:
            raise _bad(where, f"{name} is not set in the worker's environment")
        if len(env[name]) < MIN_SECRET:
            raise _bad(
                where,
                f"{name} is shorter than {MIN_SECRET} characters: too short to redact"
                " without garbling errors",
            )
        values.add(env[name])
    return frozenset(values)


def _secrets(templates: list[tuple[str, Template]], credential: Callable[[str], bool]) -> set[str]:
    """The ``${VAR}`` values of these header or env templates, and for credential headers
    their whole value and its last word (``Bearer <token>``) when they hold no field."""
    found: set[str] = set()
    for key, template in templates:
        found.update(template.env_values)
        if credential(key) and not template.fields:
            value = template.render({})
            found.update({value, value.split()[-1]} if value.split() else set())
    return {v for v in found if len(v) >= MIN_SECRET}


def _credential_header(key: str) -> bool:
    key = key.lower()
    return key in _SECRET_HEADERS or any(word in key for word in _SECRET_HEADER_WORDS)


def _check_keys(table: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise _bad(f"{where}{unknown[0]}", f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _seconds(value: Any, where: str, *, allow_zero: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        raise _bad(where, f"must be a number of seconds {'>=' if allow_zero else '>'} 0")
    return float(value)


def _str_table(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _bad(where, "must be a table of strings")
    return dict(value)


def _parse_http(
    name: str, table: Mapping[str, Any], where: str, env: Mapping[str, str]
) -> HttpTaskSpec:
    _check_keys(table, _HTTP_KEYS, f"{where}.")
    method = str(table.get("method", "POST")).upper()
    if method not in _METHODS:
        raise _bad(f"{where}.method", f"must be one of {', '.join(sorted(_METHODS))}")
    raw_url = table.get("url")
    url = compile_template(raw_url if isinstance(raw_url, str) else "", f"{where}.url", env)
    prefix = url.render(dict.fromkeys(FIELDS, "\0")).split("\0")[0]  # text before any field
    host = r"^https?://[^/?#@\s]+" + (r"[/?]" if url.fields else r"([/?#]|$)")
    if not re.match(host, prefix, re.IGNORECASE):
        raise _bad(f"{where}.url", "must be http(s)://HOST/..., with template fields after HOST/")
    check_url_template(url, f"{where}.url")
    headers: list[tuple[str, Template]] = []
    for key, value in _str_table(table.get("headers", {}), f"{where}.headers").items():
        hwhere = f"{where}.headers.{key}"
        if not _HEADER_NAME_RE.match(key):
            raise _bad(hwhere, "not a valid header name")
        if key.lower() == "idempotency-key":
            raise _bad(hwhere, "is set by cronwheel (the firing's key)")
        template = compile_template(value, hwhere, env)
        if re.search(r"[\r\n\0]", template.render(dict.fromkeys(FIELDS, ""))):
            raise _bad(hwhere, "must not contain CR, LF or NUL")
        if key.lower() == "content-type" and template.fields:
            raise _bad(hwhere, "must not contain template fields (it decides the body's format)")
        headers.append((key, template))
    content_type = next((t for k, t in headers if k.lower() == "content-type"), None)
    ctype = content_type.render({}).lower() if content_type else ""
    body: Template | None = None
    mode: BodyMode = "json"
    raw_body = table.get("body")
    if raw_body is not None:
        if not isinstance(raw_body, str):
            raise _bad(f"{where}.body", "must be a string (a template)")
        body = compile_template(raw_body, f"{where}.body", env)
        mode = body_mode(ctype, raw_body, bool(body.fields), f"{where}.body")
        if mode == "json":
            check_json_body(body, f"{where}.body")
    codes = table.get("success", list(range(200, 300)))
    if not isinstance(codes, list) or not codes or not all(c in range(100, 600) for c in codes):
        raise _bad(f"{where}.success", "must be a non-empty list of status codes 100-599")
    return HttpTaskSpec(
        name=name,
        method=method,
        url=url,
        headers=tuple(headers),
        body=body,
        body_mode=mode,
        timeout=_seconds(table.get("timeout", 30.0), f"{where}.timeout"),
        success=frozenset(int(c) for c in codes),
        secrets=frozenset(_secrets(headers, _credential_header)),
    )


def _parse_shell(
    name: str, table: Mapping[str, Any], where: str, env: Mapping[str, str]
) -> ShellTaskSpec:
    _check_keys(table, _SHELL_KEYS, f"{where}.")
    argv = table.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise _bad(f"{where}.argv", "must be a non-empty list of strings")
    if not argv[0]:
        raise _bad(f"{where}.argv", "the program (argv[0]) must not be empty")
    argv_t = tuple(compile_template(a, f"{where}.argv[{i}]", env) for i, a in enumerate(argv))
    if argv_t[0].fields:
        raise _bad(f"{where}.argv", "the program (argv[0]) must not contain template fields")
    envs: list[tuple[str, Template]] = []
    for key, value in _str_table(table.get("env", {}), f"{where}.env").items():
        ewhere = f"{where}.env.{key}"
        if not ENV_NAME_RE.match(key):
            raise _bad(ewhere, "not a valid environment variable name")
        if key.upper().startswith("CRONWHEEL_"):
            raise _bad(ewhere, "CRONWHEEL_* variables are set by cronwheel")
        envs.append((key, compile_template(value, ewhere, env)))
    timeout = _seconds(table["timeout"], f"{where}.timeout") if "timeout" in table else None
    cwd = table.get("cwd")
    if cwd is not None and not (isinstance(cwd, str) and os.path.isabs(cwd) and os.path.isdir(cwd)):
        raise _bad(f"{where}.cwd", "must be an existing directory's absolute path")
    return ShellTaskSpec(
        name=name,
        argv=argv_t,
        env=tuple(envs),
        timeout=timeout,
        kill_grace=_seconds(table.get("kill_grace", 10.0), f"{where}.kill_grace", allow_zero=True),
        cwd=cwd,
        secrets=frozenset(_secrets(envs, lambda _: False)),
    )


_PARSERS: dict[str, Callable[..., TaskSpec]] = {"http": _parse_http, "shell": _parse_shell}


# -- runtime -------------------------------------------------------------------------------
Args = tuple[Any, ...]
Kwargs = dict[str, Any]


class TaskKinds:
    """The runtime of configured tasks in one worker process: owns the shared HTTP client."""

    def __init__(self, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def client(self) -> httpx.AsyncClient:
        """One client per process (per event loop), created on first use and reused."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop or self._client.is_closed:
            self._client = httpx.AsyncClient(transport=self._transport, follow_redirects=False)
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.aclose()

    def handler(self, spec: TaskSpec) -> Callable[..., Awaitable[None]]:
        redact = Redactor(spec.secrets)

        async def run(ctx: Context, *args: Any, **kwargs: Any) -> None:
            try:
                if isinstance(spec, HttpTaskSpec):
                    await run_http(self.client(), spec, ctx, args, kwargs, redact)
                else:
                    await run_shell(spec, ctx, args, kwargs, redact)
            except TaskKindError as exc:  # its secrets never leave the worker
                raise TaskKindError(redact(str(exc))) from None
            except Retry as exc:
                raise Retry(after=exc.after, reason=redact(exc.reason)) from None

        run.__name__ = run.__qualname__ = f"{spec.kind}_task_{spec.name}"
        return run


def register_tasks(
    registry: TaskRegistry, specs: list[TaskSpec], *, kinds: TaskKinds | None = None
) -> TaskKinds:
    """Add a handler per spec to ``registry`` (an ``App``'s); a name taken by Python code is
    an error. The specs' secrets are redacted from every error the registry's worker
    records (Python tasks' too)."""
    kinds = kinds or TaskKinds()
    for spec in specs:
        if spec.name in registry:
            raise _bad(f"tasks.{spec.name}", "already registered (by Python code, or twice)")
    for spec in specs:
        # on the worker's loop whatever its default isolation: a shell task runs in a
        # process group of its own, which it kills itself
        registry.add(spec.name, kinds.handler(spec), isolation="loop")
        registry.redact = registry.redact.union(Redactor(spec.secrets))
    return kinds


async def run_http(
    client: httpx.AsyncClient,
    spec: HttpTaskSpec,
    ctx: Context,
    args: Args,
    kwargs: Kwargs,
    redact: Redactor | None = None,
) -> None:
    redact = redact or Redactor(spec.secrets)
    values = context_fields(ctx)
    url = render_url(spec.url, values)
    split = urlsplit(url)
    shown = f"{spec.method} {split.scheme}://{split.netloc}{split.path}"  # no query: secrets
    headers = {k: render_header(t, values) for k, t in spec.headers}
    headers["Idempotency-Key"] = ctx.idempotency_key
    content: bytes | None = None
    if spec.body is not None:
        content = render_body(spec.body, spec.body_mode, values).encode()
        if spec.body_mode == "json":
            headers.setdefault("Content-Type", "application/json")
    elif spec.method not in _BODYLESS:
        payload = {"args": list(args), "kwargs": kwargs, "idempotency_key": ctx.idempotency_key}
        content = json.dumps(payload, separators=(",", ":")).encode()
        headers.setdefault("Content-Type", "application/json")
    limit = _BODY_SNIPPET + redact.margin  # a secret cut at the excerpt's end is read whole
    try:
        async with (
            asyncio.timeout(spec.timeout),
            client.stream(
                spec.method, url, headers=headers, content=content, timeout=spec.timeout
            ) as response,
        ):
            status = response.status_code
            if status in spec.success:
                return  # the body is not read
            snippet = bytearray()
            async for chunk in response.aiter_bytes():
                snippet += chunk
                if len(snippet) >= limit:
                    break
    except (TimeoutError, httpx.TimeoutException):
        raise TaskKindError(f"{shown}: timed out after {spec.timeout:g} s") from None
    except (httpx.HTTPError, httpx.InvalidURL, UnicodeError, ValueError) as exc:
        raise TaskKindError(f"{shown}: {type(exc).__name__}: {exc}") from None
    cut = len(snippet) >= limit  # the response goes on: a secret may be cut at the end
    text = redact.excerpt(bytes(snippet[:limit]), size=_BODY_SNIPPET, head=True, cut=cut)
    reason = f"HTTP {status} from {shown}"
    if text:
        reason += f"\n--- response (first {_BODY_SNIPPET} bytes) ---\n{text}"
    if status in {429, 503}:
        after = _retry_after(response.headers.get("Retry-After"))
        if after is not None:
            raise Retry(after=after, reason=reason)
    raise TaskKindError(reason)


def _retry_after(value: str | None) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date), capped at a day."""
    value = (value or "").strip()
    if value.isdigit():
        return min(float(value), _RETRY_AFTER_MAX)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    when = when.replace(tzinfo=when.tzinfo or UTC)
    return min(max(0.0, (when - datetime.now(UTC)).total_seconds()), _RETRY_AFTER_MAX)


def shell_env(spec: ShellTaskSpec, ctx: Context, args: Args, kwargs: Kwargs) -> dict[str, str]:
    """PATH, HOME, LANG of the worker + the task's env + CRONWHEEL_<FIELD> + CRONWHEEL_ARGS."""
    values = context_fields(ctx)
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update({k: render_env(k, t, values) for k, t in spec.env})
    for k, v in values.items():
        if "\0" in v:  # no variable can carry it
            raise TaskKindError(f"env: CRONWHEEL_{k.upper()} would hold NUL; refused")
        env[f"CRONWHEEL_{k.upper()}"] = v
    env["CRONWHEEL_ARGS"] = json.dumps({"args": list(args), "kwargs": kwargs})
    return env


async def run_shell(
    spec: ShellTaskSpec, ctx: Context, args: Args, kwargs: Kwargs, redact: Redactor | None = None
) -> None:
    redact = redact or Redactor(spec.secrets)
    argv = render_argv(spec.argv, context_fields(ctx))
    env = shell_env(spec, ctx, args, kwargs)
    with tempfile.TemporaryFile() as out:  # bounded memory; no pipe for leftovers to hold
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                cwd=spec.cwd,
                start_new_session=True,  # its own process group: killed as a whole
            )
        except OSError as exc:
            raise TaskKindError(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None
        try:
            async with asyncio.timeout(spec.timeout):
                code = await proc.wait()
        except BaseException as exc:  # timed out, or cancelled (the firing, or worker stopping)
            await stop_group(proc, spec.kill_grace)
            if isinstance(exc, TimeoutError):
                stopped = f"{argv[0]}: timed out after {spec.timeout:g} s; process group stopped"
                raise TaskKindError(stopped + _tail(out, redact)) from None
            raise
        await stop_group(proc, spec.kill_grace)  # processes it left behind end with it
        if code != 0:
            how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
            raise TaskKindError(f"{argv[0]}: {how}" + _tail(out, redact))


def _tail(out: IO[bytes], redact: Redactor) -> str:
    """The output's last bytes, redacted (read ``margin`` more: a secret cut there is whole)."""
    start = max(0, out.seek(0, os.SEEK_END) - _OUTPUT_TAIL - redact.margin)
    out.seek(start)  # the child wrote to the fd
    text = redact.excerpt(out.read(), size=_OUTPUT_TAIL, head=False, cut=start > 0)
    return f"\n--- output (last {_OUTPUT_TAIL} bytes) ---\n{text}" if text else ""
