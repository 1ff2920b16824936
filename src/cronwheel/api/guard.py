"""The body guard: a pure-ASGI middleware in front of every route.

Hostile input is refused here, before any framework code or the store sees it,
with the one error shape and nothing stored:

- a body over ``max_body`` bytes: 413 from ``Content-Length`` up front, or while
  streaming, before the rest is read;
- a body that is not ``application/json`` (UTF-8): 415;
- bytes that are not UTF-8, JSON that is malformed, has duplicate keys,
  ``NaN``/``Infinity``, numbers out of range (``1e400``, integers of thousands of
  digits), nesting deeper than ``max_depth`` or lone surrogates: 400;
- a top level that is not an object: 422;
- a credential in the query string (``?token=``, ``?access_token=``): 400 — it
  would end up in proxies' and servers' logs.

It is also the last-resort catch-all: an unexpected exception is answered 500 in
the error shape (code ``internal``, no details), once, and logged as one short line
(event ``unhandled_error``: method, path, error, a plain traceback of file:line
frames; no headers, no query, no local variables) by
:mod:`cronwheel.observability.errorlog`, off the event loop.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, unquote

from cronwheel.domain.numbers import parse_number
from cronwheel.errors import ValidationError
from cronwheel.observability.errorlog import ErrorLog, default_error_log
from cronwheel.web.errors import send_error

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_MAX_BODY = 256 * 1024
DEFAULT_MAX_DEPTH = 32
SLASH_STAND_IN = "\x1f"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_QUERY_CREDENTIALS = frozenset({"token", "access_token", "api_key", "apikey"})


class Refusal(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


def _reject_constant(name: str) -> Any:
    raise Refusal(400, "invalid_json", f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Refusal(400, "invalid_json", f"number {text[:40]} is out of range")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise Refusal(400, "invalid_json", f"duplicate key {key[:80]!r}")
        out[key] = value
    return out


def _check_tree(value: Any, max_depth: int, *, strings: bool = True) -> None:
    """Depth and (``strings``) lone surrogates, iteratively (no recursion on hostile
    nesting)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if strings:
                _check_text(item)
        elif isinstance(item, dict | list):
            if depth > max_depth:
                raise Refusal(400, "invalid_json", f"nesting deeper than {max_depth} levels")
            if isinstance(item, dict):
                for key, child in item.items():
                    if strings:
                        _check_text(key)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Refusal(400, "invalid_json", "a string holds a lone surrogate") from None


def strict_json(raw: bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Parse a request body the strict way (see the module docstring); raise Refusal."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refusal(400, "invalid_json", f"body is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except Refusal:
        raise
    except RecursionError:
        raise Refusal(400, "invalid_json", f"nesting deeper than {max_depth} levels") from None
    except ValueError as exc:  # JSONDecodeError, and int() beyond its digit limit
        raise Refusal(400, "invalid_json", f"malformed JSON: {str(exc)[:120]}") from None
    # UTF-8 text decodes to no surrogate: only a \uD800-\uDFFF escape can make one, so
    # the strings are checked only when the text has such an escape (a 1,000-item batch
    # spent most of its guard time encoding every string again)
    _check_tree(value, max_depth, strings=_SURROGATE_ESCAPE.search(text) is not None)
    if not isinstance(value, dict):
        raise Refusal(422, "invalid_input", "the request body must be a JSON object")
    return value


def _json_media_type(content_type: str | None) -> bool:
    if content_type is None:
        return False
    media, _, params = content_type.partition(";")
    if media.strip().lower() != "application/json":
        return False
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in {
            "utf-8",
            "utf8",
        }:
            return False
    return True


def _error_log(scope: Scope) -> ErrorLog:
    """The app's error log (``app.state.error_log``), else the process's."""
    found = getattr(getattr(scope.get("app"), "state", None), "error_log", None)
    return found if isinstance(found, ErrorLog) else default_error_log()


class BodyGuard:
    def __init__(
        self, app: ASGIApp, *, max_body: int = DEFAULT_MAX_BODY, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> None:
        self.app = app
        self.max_body = max_body
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            receive = await self._guard(scope, receive)
            await self.app(scope, receive, tracking_send)
        except Refusal as refusal:
            if not started:
                await send_error(
                    send, refusal.status, refusal.code, refusal.message, refusal.field, close=True
                )
        except Exception as exc:
            # One short line, formatted and written by the error log's thread: the
            # event loop only queues it (a rich traceback rendered here stalled it).
            _error_log(scope).report(exc, method=scope.get("method"), path=scope.get("path"))
            if not started:
                await send_error(send, 500, "internal", "internal error", close=True)

    async def _guard(self, scope: Scope, receive: Receive) -> Receive:
        raw_path = scope.get("raw_path")
        if raw_path and b"%2f" in raw_path.lower():
            # Routing splits the *decoded* path on "/", so a name with an encoded
            # slash ("a%2Fb") would not reach its route. Keep such slashes as U+001F
            # (a control character, which names can never hold); routes decode it back.
            segments = raw_path.decode("latin-1").split("?")[0].split("/")
            scope["path"] = "/".join(
                unquote(seg.replace("%2F", "%1f").replace("%2f", "%1f")) for seg in segments
            )
        query = scope.get("query_string", b"").decode("latin-1")
        if query and any(k.lower() in _QUERY_CREDENTIALS for k, _ in parse_qsl(query, True)):
            raise Refusal(
                400,
                "credentials_in_query",
                "credentials in the query string are refused: send 'Authorization: Bearer ...'",
                "token",
            )
        headers: dict[str, str] = {}
        for name, value in scope.get("headers", ()):
            headers[name.decode("latin-1").lower()] = value.decode("latin-1")
        length_text = headers.get("content-length")
        declared: int | None = None
        if length_text is not None:
            try:  # ASCII digits only: isdigit() is true for '²', which int() refuses
                declared = parse_number(length_text.strip(" \t"), "Content-Length")
            except ValidationError as exc:
                raise Refusal(400, "invalid_input", exc.message, "Content-Length") from None
            if declared > self.max_body:
                raise Refusal(413, "payload_too_large", f"the body limit is {self.max_body} bytes")
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if not declared and not chunked:
            return receive
        if not _json_media_type(headers.get("content-type")):
            raise Refusal(
                415, "unsupported_media_type", "send the body as application/json (UTF-8)"
            )
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Refusal(400, "invalid_input", "the client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise Refusal(413, "payload_too_large", f"the body limit is {self.max_body} bytes")
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        raw = b"".join(chunks)
        if raw:
            strict_json(raw, max_depth=self.max_depth)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        return replay
