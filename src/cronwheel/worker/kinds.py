"""Task kinds besides Python functions: HTTP calls and shell commands from a tasks file.

A worker loads a TOML file (``cronwheel worker --tasks tasks.toml``) of ``[tasks.NAME]``
tables (``kind = "http"`` or ``"shell"``; see the README) and registers each as a task.

Security boundary: URL, method, headers, argv, environment and working directory come only
from the worker's configuration. API callers refer to a task by name and pass JSON
arguments, which reach an HTTP task as the default JSON body and a shell task as the
``CRONWHEEL_ARGS`` variable: never on a command line, never through a shell (argv only).
Templates substitute only ``FIELDS``, with a tiny parser, not ``str.format``
(``{job.__class__}`` is a load-time error); ``${VAR}`` is read from the worker's env then.
"""

from __future__ import annotations

import asyncio
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
from urllib.parse import quote, urlencode, urlsplit

import httpx

from cronwheel.domain.firing import format_instant
from cronwheel.domain.models import TASK_RE
from cronwheel.errors import CronwheelError, ValidationError
from cronwheel.signals import Retry
from cronwheel.worker.context import Context
from cronwheel.worker.procgroup import stop_group

if TYPE_CHECKING:
    from cronwheel.worker.registry import TaskRegistry

FIELDS = ("job", "job_id", "firing_id", "attempt", "idempotency_key", "scheduled_for", "namespace")
# ${VAR} (worker environment, at load time) or {word} (a firing field, at run time).
# A brace pair holding whitespace or a quote is literal text (JSON objects stay intact).
_TOKEN_RE = re.compile(r"\$\{([^{}]*)\}|\{([^\s{}\"']+)\}")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_BODYLESS = frozenset({"GET", "HEAD", "OPTIONS"})
_HTTP_KEYS = frozenset({"kind", "method", "url", "headers", "body", "timeout", "success"})
_SHELL_KEYS = frozenset({"kind", "argv", "env", "timeout", "kill_grace", "cwd"})
_BODY_SNIPPET = 500
_OUTPUT_TAIL = 4096
_RETRY_AFTER_MAX = 86400.0


class TaskKindError(CronwheelError):
    """A configured HTTP or shell task failed (the worker records it and retries)."""

    code = "task_failed"


def _bad(where: str, message: str) -> ValidationError:
    return ValidationError(message, field=where)


# -- templates -----------------------------------------------------------------------------
class _Field(str):
    """A placeholder's field name (a plain ``str`` part is literal text)."""


@dataclass(frozen=True, slots=True)
class Template:
    """Literal text and whitelisted ``{field}`` placeholders, parsed once at load time."""

    parts: tuple[str, ...]

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(p for p in self.parts if isinstance(p, _Field))

    def render(self, values: Mapping[str, str], escape: Callable[[str], str] | None = None) -> str:
        esc = escape or str
        return "".join(esc(values[p]) if isinstance(p, _Field) else p for p in self.parts)


def compile_template(text: str, where: str, environ: Mapping[str, str]) -> Template:
    """Parse ``text``; ``${VAR}`` is resolved now, ``{name}`` must be one of ``FIELDS``."""
    parts: list[str] = []
    pos = 0
    for m in _TOKEN_RE.finditer(text):
        parts.append(text[pos : m.start()])
        pos = m.end()
        var, name = m.group(1), m.group(2)
        if var is not None:
            if not _ENV_NAME_RE.match(var):
                raise _bad(where, f"${{{var}}} is not an environment variable name")
            if var not in environ:
                raise _bad(where, f"${{{var}}} is not set in the worker's environment")
            parts.append(environ[var])
        elif name in FIELDS:
            parts.append(_Field(name))
        else:
            allowed = ", ".join("{" + f + "}" for f in FIELDS)
            raise _bad(where, f"unknown template field {{{name}}} (allowed: {allowed})")
    parts.append(text[pos:])
    return Template(tuple(p for p in parts if p != ""))


def context_fields(ctx: Context) -> dict[str, str]:
    values = {f: str(getattr(ctx, f)) for f in FIELDS}  # Context has a property per field
    values["scheduled_for"] = format_instant(ctx.scheduled_for)
    return values


_ESCAPES: dict[str, Callable[[str], str] | None] = {
    "json": lambda v: json.dumps(v, ensure_ascii=False)[1:-1],
    "form": lambda v: urlencode({"": v})[1:],
    "text": None,
}


# -- specs ---------------------------------------------------------------------------------
BodyMode = Literal["json", "form", "text"]


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
    kind: Literal["http"] = "http"


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellTaskSpec:
    name: str
    argv: tuple[Template, ...]
    env: tuple[tuple[str, Template], ...] = field(default=(), repr=False)
    timeout: float | None = None
    kill_grace: float = 10.0
    cwd: str | None = None
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
    _check_keys(data, frozenset({"tasks"}), "")
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
        specs.append(parse(name, table, where, env))
    return specs


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
        headers.append((key, template))
    content_type = next((t for k, t in headers if k.lower() == "content-type"), None)
    ctype = content_type.render(dict.fromkeys(FIELDS, "x")).lower() if content_type else ""
    body: Template | None = None
    mode: BodyMode = "json"
    raw_body = table.get("body")
    if raw_body is not None:
        if not isinstance(raw_body, str):
            raise _bad(f"{where}.body", "must be a string (a template)")
        body = compile_template(raw_body, f"{where}.body", env)
        if "json" in ctype or (not ctype and raw_body.lstrip()[:1] in {"{", "["}):
            # JSON stays JSON whatever the values: text fields only inside JSON strings
            probe = {f: ("0" if f in {"job_id", "firing_id", "attempt"} else "x") for f in FIELDS}
            try:
                json.loads(body.render(probe))
            except ValueError:
                raise _bad(
                    f"{where}.body", "must be JSON, with fields like {job} in strings"
                ) from None
        else:
            mode = "form" if "x-www-form-urlencoded" in ctype else "text"
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
        if not _ENV_NAME_RE.match(key):
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
        async def run(ctx: Context, *args: Any, **kwargs: Any) -> None:
            if isinstance(spec, HttpTaskSpec):
                await run_http(self.client(), spec, ctx, args, kwargs)
            else:
                await run_shell(spec, ctx, args, kwargs)

        run.__name__ = run.__qualname__ = f"{spec.kind}_task_{spec.name}"
        return run


def register_tasks(
    registry: TaskRegistry, specs: list[TaskSpec], *, kinds: TaskKinds | None = None
) -> TaskKinds:
    """Add a handler per spec to ``registry`` (an ``App``'s); a name taken by Python code is
    an error."""
    kinds = kinds or TaskKinds()
    for spec in specs:
        if spec.name in registry:
            raise _bad(f"tasks.{spec.name}", "already registered (by Python code, or twice)")
        # on the worker's loop whatever its default isolation: a shell task runs in a
        # process group of its own, which it kills itself
        registry.add(spec.name, kinds.handler(spec), isolation="loop")
    return kinds


async def run_http(
    client: httpx.AsyncClient, spec: HttpTaskSpec, ctx: Context, args: Args, kwargs: Kwargs
) -> None:
    values = context_fields(ctx)
    url = spec.url.render(values, lambda v: quote(v, safe=""))
    split = urlsplit(url)
    shown = f"{spec.method} {split.scheme}://{split.netloc}{split.path}"  # no query: secrets
    headers = {k: t.render(values) for k, t in spec.headers}
    headers["Idempotency-Key"] = ctx.idempotency_key
    content: bytes | None = None
    if spec.body is not None:
        content = spec.body.render(values, _ESCAPES[spec.body_mode]).encode()
        if spec.body_mode == "json":
            headers.setdefault("Content-Type", "application/json")
    elif spec.method not in _BODYLESS:
        payload = {"args": list(args), "kwargs": kwargs, "idempotency_key": ctx.idempotency_key}
        content = json.dumps(payload, separators=(",", ":")).encode()
        headers.setdefault("Content-Type", "application/json")
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
                if len(snippet) >= _BODY_SNIPPET:
                    break
    except (TimeoutError, httpx.TimeoutException):
        raise TaskKindError(f"{shown}: timed out after {spec.timeout:g} s") from None
    except (httpx.HTTPError, httpx.InvalidURL, UnicodeError, ValueError) as exc:
        raise TaskKindError(f"{shown}: {type(exc).__name__}: {exc}") from None
    text = bytes(snippet[:_BODY_SNIPPET]).decode("utf-8", "replace")
    reason = f"HTTP {status} from {shown}: {text}"
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
    env.update({k: t.render(values) for k, t in spec.env})
    env.update({f"CRONWHEEL_{k.upper()}": v for k, v in values.items()})
    env["CRONWHEEL_ARGS"] = json.dumps({"args": list(args), "kwargs": kwargs})
    return env


async def run_shell(spec: ShellTaskSpec, ctx: Context, args: Args, kwargs: Kwargs) -> None:
    values = context_fields(ctx)
    argv = [t.render(values) for t in spec.argv]
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
                raise TaskKindError(stopped + _tail(out)) from None
            raise
        await stop_group(proc, spec.kill_grace)  # processes it left behind end with it
        if code != 0:
            how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
            raise TaskKindError(f"{argv[0]}: {how}" + _tail(out))


def _tail(out: IO[bytes]) -> str:
    out.seek(max(0, out.seek(0, os.SEEK_END) - _OUTPUT_TAIL))  # the child wrote to the fd
    text = out.read().decode("utf-8", "replace")
    return f"\n--- output (last {_OUTPUT_TAIL} bytes) ---\n{text}" if text else ""
