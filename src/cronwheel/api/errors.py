"""One error shape for every answer that is not a success::

    {"error": {"code": "invalid_cron", "message": "...", "field": "schedule.cron"}}

``code`` is stable and machine-readable; ``field`` names the input to blame (a
dotted path into the body, or a query parameter, header or path parameter), or
is null. cronwheel's own errors carry their code and field; pydantic's and the
framework's are mapped here. Nothing in a message echoes a credential.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError as PydanticValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from cronwheel.errors import (
    BatchError,
    ConflictError,
    CronwheelError,
    InvalidScheduleError,
    InvalidTransitionError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    StoreError,
    StoreUnavailableError,
    UnknownTimezoneError,
    ValidationError,
)
from cronwheel.observability.quotas import record_refusal
from cronwheel.web.errors import error_body


class HttpError(Exception):
    """An HTTP-level refusal (authentication, cursors, limits) with its status."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = dict(headers or {})


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(code, message, field), status_code=status, headers=headers)


def status_and_code(exc: CronwheelError) -> tuple[int, str]:
    """The HTTP status and stable code of one of cronwheel's own errors."""
    if isinstance(exc, UnknownTimezoneError):
        return 422, "unknown_timezone"
    if isinstance(exc, InvalidScheduleError):
        cron_field = exc.field is not None and exc.field.split(".")[-1] == "cron"
        return 422, "invalid_cron" if cron_field else exc.code
    if isinstance(exc, PermissionDeniedError):
        return 403, exc.code
    if isinstance(exc, QuotaExceededError):
        # a rate frees up (429, Retry-After); a count or a per-call bound does not (422)
        return (422 if exc.retry_after is None else 429), exc.code
    if isinstance(exc, ValidationError):
        return 422, exc.code
    if isinstance(exc, NotFoundError):
        # one code for every "no such thing (in your namespace)": no existence oracle
        return 404, "not_found"
    if isinstance(exc, BatchError):  # 409 when every refused item is a conflict
        return (409 if exc.conflicts else 422), exc.code
    if isinstance(exc, ConflictError | InvalidTransitionError):
        return 409, exc.code
    if isinstance(exc, StoreUnavailableError):
        return 503, "store_unavailable"
    if isinstance(exc, StoreError):
        return 503, exc.code
    return 400, exc.code


# pydantic names union members in error locations ("interval", "float"); a field
# path should only hold the fields and indexes the user wrote.
_UNION_TAGS = frozenset({"float", "str", "int", "bool", "none", "list", "dict"})
_TAG_RE = re.compile(r"^[a-z-]+\[.*\]$")


def field_path(loc: Sequence[Any]) -> str | None:
    parts = [
        str(p)
        for p in loc
        if isinstance(p, int) or (str(p) not in _UNION_TAGS and not _TAG_RE.match(str(p)))
    ]
    return ".".join(parts) or None


def _message(error: Mapping[str, Any]) -> str:
    """A pydantic error's words: our validators' own, without pydantic's prefix."""
    cause = (error.get("ctx") or {}).get("error")
    if error.get("type") == "value_error" and cause is not None:
        return str(cause)
    return str(error.get("msg", "invalid value"))


def _validation_response(exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if not errors:
        return error_response(422, "invalid_input", "invalid request")
    first = errors[0]
    loc = list(first.get("loc", ()))
    where = loc[0] if loc else "body"
    # a malformed body is a 422 (its meaning is wrong); a malformed query,
    # path or header is a malformed request: 400
    status = 422 if where == "body" else 400
    message = _message(first)
    if first.get("type") == "missing" and where == "body" and len(loc) == 1:
        message = "a JSON object body is required"
    return error_response(status, "invalid_input", message, field_path(loc[1:]))


def item_error(exc: PydanticValidationError) -> ValidationError:
    """One batch item's pydantic error as cronwheel's (its first error's words and field,
    relative to the item)."""
    errors = exc.errors()
    if not errors:
        return ValidationError("invalid item")
    first = errors[0]
    if first.get("type") in ("model_type", "dict_type") and not first.get("loc"):
        return ValidationError("must be a JSON object")
    return ValidationError(_message(first), field=field_path(list(first.get("loc", ()))))


def item_doc(index: int, exc: CronwheelError) -> dict[str, Any]:
    """A refused batch item in a response: its place, status and error."""
    status, code = status_and_code(exc)
    return {"index": index, "status": status} | error_body(code, exc.message, exc.field)


def install_error_handlers(app: FastAPI) -> None:
    async def on_cronwheel(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, CronwheelError)
        status, code = status_and_code(exc)
        headers = {"Retry-After": "1"} if status == 503 else None
        if isinstance(exc, QuotaExceededError):
            record_refusal(exc.namespace or "", exc.quota)
            if exc.retry_after is not None:
                headers = {"Retry-After": str(exc.retry_after)}
        if isinstance(exc, BatchError):  # every refused item's error, nothing written
            body = error_body(code, exc.message, exc.field)
            body["items"] = [item_doc(i, e) for i, e in exc.errors]
            return JSONResponse(body, status_code=status)
        return error_response(status, code, exc.message, exc.field, headers)

    async def on_http_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HttpError)
        return error_response(exc.status, exc.code, exc.message, exc.field, exc.headers)

    async def on_validation(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return _validation_response(exc)

    async def on_starlette(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404:
            return error_response(404, "not_found", "no such resource")
        if exc.status_code == 405:
            return error_response(
                405, "method_not_allowed", "method not allowed", headers=exc.headers
            )
        return error_response(exc.status_code, f"http_{exc.status_code}", str(exc.detail))

    app.add_exception_handler(CronwheelError, on_cronwheel)
    app.add_exception_handler(HttpError, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_starlette)
