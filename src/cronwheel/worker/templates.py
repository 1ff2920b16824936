"""Templates of configured tasks, and substitution that is safe by construction per context.

A template is literal text and whitelisted ``{field}`` placeholders, parsed once when the
tasks file loads (a tiny parser, not ``str.format``: ``{job.__class__}`` is a load-time
error); ``${VAR}`` is read from the worker's environment then, as literal text.

A field's value is encoded for where it lands, so no value can change the structure
around it:

- URL (path and query): percent-encoded outside RFC 3986's unreserved characters, so a
  value is one path segment or one query value; a path value with a ``.`` or ``..`` step
  (``..``, ``a/../b``) is refused: servers resolve ``%2E%2E`` and some decode ``%2F``
  first. The host is never a field.
- Header values: percent-encoded outside visible ASCII and space (no CR/LF, no NUL).
- argv: one field, one argument (no shell). A value that begins with ``-`` at the start of
  an argument is refused, because the program would read it as an option, unless an
  argument ``--`` (the end of options) comes before it in the task's argv.
- Bodies by their declared format: JSON-escaped inside JSON strings, form-encoded,
  HTML/XML-escaped; fields in any other body format are a load-time error.

A refused value fails the attempt with a :class:`TaskKindError` naming the context and
the field; nothing is sent or started.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import quote, quote_plus, urlsplit

from cronwheel.domain.firing import format_instant
from cronwheel.errors import CronwheelError, ValidationError
from cronwheel.worker.context import Context

FIELDS = ("job", "job_id", "firing_id", "attempt", "idempotency_key", "scheduled_for", "namespace")
# ${VAR} (worker environment, at load time) or {word} (a firing field, at run time).
# A brace pair holding whitespace or a quote is literal text (JSON objects stay intact).
_TOKEN_RE = re.compile(r"\$\{([^{}]*)\}|\{([^\s{}\"']+)\}")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# XML 1.0 cannot carry these (not even as character references)
_NOT_XML_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in "%")
_SHOWN = 60


class TaskKindError(CronwheelError):
    """A configured HTTP or shell task failed (the worker records it and retries)."""

    code = "task_failed"


def bad(where: str, message: str) -> ValidationError:
    return ValidationError(message, field=where)


class _Field(str):
    """A placeholder's field name (a plain ``str`` part is literal text)."""


@dataclass(frozen=True, slots=True)
class Template:
    """Literal text and whitelisted ``{field}`` placeholders, parsed once at load time."""

    parts: tuple[str, ...]
    # the values of the ${VAR}s it holds (secrets, in headers and env: see kinds.py)
    env_values: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(p for p in self.parts if isinstance(p, _Field))

    def render(self, values: Mapping[str, str], escape: Callable[[str], str] | None = None) -> str:
        esc = escape or str
        return "".join(esc(values[p]) if isinstance(p, _Field) else p for p in self.parts)

    def leading_field(self, values: Mapping[str, str]) -> str | None:
        """The field whose value starts the rendered text, if one does."""
        for p in self.parts:
            if not isinstance(p, _Field):
                return None
            if values[p]:
                return p
        return None


def compile_template(text: str, where: str, environ: Mapping[str, str]) -> Template:
    """Parse ``text``; ``${VAR}`` is resolved now, ``{name}`` must be one of ``FIELDS``."""
    parts: list[str] = []
    env_values: list[str] = []
    pos = 0
    for m in _TOKEN_RE.finditer(text):
        parts.append(text[pos : m.start()])
        pos = m.end()
        var, name = m.group(1), m.group(2)
        if var is not None:
            if not ENV_NAME_RE.match(var):
                raise bad(where, f"${{{var}}} is not an environment variable name")
            if var not in environ:
                raise bad(where, f"${{{var}}} is not set in the worker's environment")
            parts.append(environ[var])
            env_values.append(environ[var])
        elif name in FIELDS:
            parts.append(_Field(name))
        else:
            allowed = ", ".join("{" + f + "}" for f in FIELDS)
            raise bad(where, f"unknown template field {{{name}}} (allowed: {allowed})")
    parts.append(text[pos:])
    return Template(tuple(p for p in parts if p != ""), tuple(env_values))


def context_fields(ctx: Context) -> dict[str, str]:
    values = {f: str(getattr(ctx, f)) for f in FIELDS}  # Context has a property per field
    values["scheduled_for"] = format_instant(ctx.scheduled_for)
    return values


def _shown(value: str) -> str:
    return repr(value if len(value) <= _SHOWN else value[:_SHOWN] + "…")


def _refuse(where: str, name: str, value: str, why: str) -> TaskKindError:
    return TaskKindError(f"{where}: {{{name}}} is {_shown(value)}, {why}; refused")


# -- URL -----------------------------------------------------------------------------------
def check_url_template(url: Template, where: str) -> None:
    """Load-time rules beyond the host check: fields only in the path and the query, and
    no literal ``.``/``..`` segment (so any such segment at run time came from a value)."""
    probe = url.render(dict.fromkeys(FIELDS, "\0"))
    if "#" in probe and "\0" in probe.split("#", 1)[1]:
        raise bad(where, "template fields belong in the path or the query, not the fragment")
    path = urlsplit(url.render(dict.fromkeys(FIELDS, "x"))).path
    if any(segment in {".", ".."} for segment in path.split("/")):
        raise bad(where, "must not have '.' or '..' path segments")


def _path_fields(url: Template) -> frozenset[str]:
    """The fields in the URL's path (before its query or fragment)."""
    found: set[str] = set()
    for part in url.parts:
        if isinstance(part, _Field):
            found.add(part)
        elif "?" in part or "#" in part:
            break
    return frozenset(found)


def dot_steps(value: str) -> bool:
    """Whether ``value`` has a ``.`` or ``..`` step between slashes (or backslashes): one a
    server resolves, even percent-encoded, when it decodes before it normalises."""
    return any(step in {".", ".."} for step in re.split(r"[/\\]", value))


def render_url(url: Template, values: Mapping[str, str]) -> str:
    """The URL with each field percent-encoded as one path segment or query value."""
    why = "which holds a '.' or '..' path step that could move the URL's path"
    for name in sorted(_path_fields(url)):
        if dot_steps(values[name]):
            raise _refuse("url", name, values[name], why)
    rendered = url.render(values, lambda v: quote(v, safe=""))  # unreserved stays as is
    if dot_steps(urlsplit(rendered).path):  # fields side by side ({job}{job} of ".")
        name = sorted(_path_fields(url))[0]  # the literal path has no such step (loaded)
        raise _refuse("url", name, values[name], why)
    return rendered


def render_header(template: Template, values: Mapping[str, str]) -> str:
    """A header value: fields percent-encoded outside visible ASCII (no CR, LF or NUL)."""
    return template.render(values, lambda v: quote(v, safe=_HEADER_SAFE))


# -- argv and env --------------------------------------------------------------------------
def render_argv(argv: Iterable[Template], values: Mapping[str, str]) -> list[str]:
    """One argument per template; refused: NUL (no argument can carry it), and a value
    starting an argument with ``-`` (an option) unless ``--`` came before it."""
    out: list[str] = []
    operands = False  # after a literal "--", arguments are operands, never options
    for i, template in enumerate(argv):
        arg = template.render(values)
        for name in sorted(template.fields):
            if "\0" in values[name]:
                raise _refuse(f"argv[{i}]", name, values[name], "which holds NUL")
        lead = template.leading_field(values)
        if lead is not None and arg.startswith("-") and not operands:
            why = (
                "which begins with '-' and would be read as an option (put \"--\" before "
                "it in the task's argv to pass such values as operands)"
            )
            raise _refuse(f"argv[{i}]", lead, values[lead], why)
        operands = operands or template.parts == ("--",)
        out.append(arg)
    return out


def render_env(key: str, template: Template, values: Mapping[str, str]) -> str:
    for name in sorted(template.fields):
        if "\0" in values[name]:
            raise _refuse(f"env.{key}", name, values[name], "which holds NUL")
    return template.render(values)


# -- bodies --------------------------------------------------------------------------------
BodyMode = Literal["json", "form", "markup", "raw"]
BODY_TYPES = (
    "application/json (or +json), application/x-www-form-urlencoded, "
    "text/html, application/xml, text/xml (or +xml)"
)


def body_mode(content_type: str, body: str, has_fields: bool, where: str) -> BodyMode:
    """How fields are encoded in a body of ``content_type`` (lower case; "" if none)."""
    media = content_type.split(";", 1)[0].strip()
    if "json" in media or (not media and body.lstrip()[:1] in {"{", "["}):
        return "json"
    if media == "application/x-www-form-urlencoded":
        return "form"
    if "html" in media or "xml" in media:
        return "markup"
    if has_fields:
        declared = f"Content-Type {media!r}" if media else "no Content-Type"
        raise bad(
            where,
            f"template fields need a body format cronwheel can encode them for ({BODY_TYPES});"
            f" this body has {declared}, where they would be substituted raw",
        )
    return "raw"


def check_json_body(body: Template, where: str) -> None:
    """JSON stays JSON whatever the values: text fields only inside JSON strings (a bare
    "x" is no JSON token), the numeric ones (ids, attempt) anywhere a number can be."""
    numeric = {"job_id", "firing_id", "attempt"}
    probe = {f: ("0" if f in numeric else "x") for f in FIELDS}
    try:
        json.loads(body.render(probe))
    except ValueError:
        raise bad(where, "must be JSON, with fields like {job} in strings") from None


def _markup(value: str) -> str:
    return html.escape(value, quote=True)


_BODY_ESCAPES: dict[BodyMode, Callable[[str], str]] = {
    "json": lambda v: json.dumps(v, ensure_ascii=False)[1:-1],
    "form": quote_plus,
    "markup": _markup,
    "raw": str,
}


def render_body(body: Template, mode: BodyMode, values: Mapping[str, str]) -> str:
    if mode == "markup":
        for name in sorted(body.fields):
            if _NOT_XML_RE.search(values[name]):
                why = "which holds a control character that HTML and XML cannot carry"
                raise _refuse("body", name, values[name], why)
    return body.render(values, _BODY_ESCAPES[mode])
