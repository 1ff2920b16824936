"""The client's errors: cronwheel's own, built from the API's error shape."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cronwheel.errors import (
    BatchError,
    ConflictError,
    CronwheelError,
    FiringNotFoundError,
    InvalidScheduleError,
    InvalidTransitionError,
    JobNotFoundError,
    NotFoundError,
    QuotaExceededError,
    StoreUnavailableError,
    UnknownTimezoneError,
    ValidationError,
)

if TYPE_CHECKING:
    import httpx


class ApiError(CronwheelError):
    """An HTTP answer that maps to no other cronwheel error; ``status`` is its code."""

    code = "api_error"

    def __init__(
        self, message: str, *, status: int, field: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message, field=field, code=code)
        self.status = status


class UnauthorizedError(ApiError):
    code = "unauthorized"


class ForbiddenError(ApiError):
    code = "forbidden"


def error_of(status: int, doc: Mapping[str, Any], retry_after: str = "") -> CronwheelError:
    """The cronwheel error of an answer's (or a batch item's) ``status`` and ``error``
    document (``{"code", "message", "field"}``)."""
    code, message, field = str(doc["code"]), str(doc["message"]), doc.get("field")
    if code == "quota_exceeded" and status in (422, 429):
        quota = str(field or "").rsplit(".", 1)[-1]
        quota = "min_interval" if quota == "schedule" else quota.removeprefix("quota.")
        return QuotaExceededError(
            message,
            quota=quota,
            field=field,
            retry_after=int(retry_after) if status == 429 and retry_after.isdigit() else None,
        )
    if status == 401:
        return UnauthorizedError(message, status=status, field=field, code=code)
    if status == 403:
        return ForbiddenError(message, status=status, field=field, code=code)
    if status == 404:
        if field == "name":
            return JobNotFoundError(message, field=field, code=code)
        if field == "firing_id":
            return FiringNotFoundError(message, field=field, code=code)
        return NotFoundError(message, field=field, code=code)
    if status == 409:
        if code == "invalid_transition":
            return InvalidTransitionError(message, field=field, code=code)
        return ConflictError(message, field=field, code=code)
    if status in (400, 413, 415, 422):
        if code == "unknown_timezone":
            return UnknownTimezoneError(message, field=field, code=code)
        if code in ("invalid_cron", "invalid_schedule"):
            return InvalidScheduleError(message, field=field, code=code)
        return ValidationError(message, field=field, code=code)
    if status == 503:
        return StoreUnavailableError(message, field=field, code=code)
    return ApiError(message, status=status, field=field, code=code)


def response_error(response: httpx.Response, items: int) -> CronwheelError:
    """The error of an answer with status >= 400 (``items``: the batch size sent, if any)."""
    status = response.status_code
    try:
        body = response.json()
        doc = body["error"]
        error_of(status, doc)  # a well-formed error document
    except (ValueError, KeyError, TypeError):
        text = response.text[:200] or f"HTTP {status}"
        return error_of(status, {"code": f"http_{status}", "message": text, "field": None})
    if doc["code"] in ("invalid_batch", "batch_conflict") and isinstance(body.get("items"), list):
        errors = [(int(i["index"]), error_of(int(i["status"]), i["error"])) for i in body["items"]]
        return BatchError(errors, items or len(errors))
    return error_of(status, doc, response.headers.get("retry-after", ""))
