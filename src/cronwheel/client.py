"""``cronwheel.Client``: the HTTP API from Python (sync, on httpx).

    from cronwheel import Client, cron

    with Client("http://127.0.0.1:8080", token="cw_1_...") as api:
        api.put_job("digest", "send_digest", cron("0 7 * * mon-fri", tz="Europe/Paris"))
        firing = api.enqueue("resize", "img.png", idempotency_key="upload-42", width=640)

Methods return cronwheel's own values (:class:`Job`, :class:`Firing`) and raise
its own errors, built from the API's error shape: ``ValidationError`` (with
``.field``), ``InvalidScheduleError``, ``UnknownTimezoneError``,
``JobNotFoundError``/``FiringNotFoundError``, ``ConflictError``,
``InvalidTransitionError``, ``StoreUnavailableError`` (503, or the API is
unreachable), and :class:`ApiError` subclasses for authentication (401/403).
The token is sent only in the ``Authorization`` header and never shown in
``repr`` or in errors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from cronwheel.domain.attempts import Attempt
from cronwheel.domain.firing import format_instant
from cronwheel.domain.models import Firing, Job
from cronwheel.domain.results import CancelResult
from cronwheel.domain.schedules import Schedule
from cronwheel.domain.skips import SkipResult
from cronwheel.errors import (
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
from cronwheel.wire import (
    FiringPage,
    attempt_from_json,
    cancel_from_json,
    firing_from_json,
    firing_page_from_json,
    job_from_json,
    schedule_to_json,
    skip_results_from_json,
)

if TYPE_CHECKING:  # httpx is imported when a Client is made: `import cronwheel` stays fast
    import httpx

__all__ = ["ApiError", "Client", "FiringPage", "ForbiddenError", "UnauthorizedError"]


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


def _error(response: httpx.Response) -> CronwheelError:
    status = response.status_code
    try:
        doc = response.json()["error"]
        code, message, field = str(doc["code"]), str(doc["message"]), doc.get("field")
    except (ValueError, KeyError, TypeError):
        code, message, field = f"http_{status}", response.text[:200] or f"HTTP {status}", None
    if code == "quota_exceeded" and status in (422, 429):
        retry = response.headers.get("retry-after", "")
        quota = "min_interval" if field == "schedule" else str(field or "").removeprefix("quota.")
        return QuotaExceededError(
            message,
            quota=quota,
            field=field,
            retry_after=int(retry) if status == 429 and retry.isdigit() else None,
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


def _text(value: datetime | str) -> str:
    return format_instant(value) if isinstance(value, datetime) else value


def _job_body(
    task: str,
    schedule: Schedule | Mapping[str, Any],
    args: tuple[Any, ...] | list[Any],
    kwargs: Mapping[str, Any] | None,
    policies: Mapping[str, Any] | None,
    paused: bool | None,
    allow_past: bool,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task": task,
        "schedule": schedule_to_json(schedule),
        "args": list(args),
        "kwargs": dict(kwargs or {}),
    }
    if policies:
        body["policies"] = dict(policies)
    if paused is not None:
        body["paused"] = paused
    if allow_past:
        body["allow_past"] = True
    return body


def _firing_filters(
    states: list[str] | None,
    scheduled_from: datetime | str | None,
    scheduled_to: datetime | str | None,
) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if states:
        params["state"] = list(states)
    if scheduled_from is not None:
        params["scheduled_from"] = _text(scheduled_from)
    if scheduled_to is not None:
        params["scheduled_to"] = _text(scheduled_to)
    return params


class Client:
    """A connection pool to one cronwheel API. Close it (or use ``with``)."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx

        headers = {"Accept": "application/json", "User-Agent": "cronwheel-client"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        import httpx

        try:
            response = self._http.request(method, path, json=json, params=params, headers=headers)
        except httpx.TransportError as exc:
            raise StoreUnavailableError(
                f"cannot reach the API at {self.url}: {type(exc).__name__}", code="api_unreachable"
            ) from None
        if response.status_code >= 400:
            raise _error(response)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    @staticmethod
    def _path(name: str) -> str:
        from urllib.parse import quote

        return "/v1/jobs/" + quote(name, safe="")

    # -- jobs ---------------------------------------------------------------------
    def create_job(
        self,
        name: str,
        task: str,
        schedule: Schedule | Mapping[str, Any],
        *,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        policies: Mapping[str, Any] | None = None,
        paused: bool = False,
        allow_past: bool = False,
        bounds: Mapping[str, Any] | None = None,
        allow_unknown_task: bool = False,
    ) -> Job:
        """Create a job; ConflictError (code ``job_exists``) when the name is taken.
        ``policies`` keys: the names of domain/policy_table.py (retries, max_attempts,
        retry_backoff, misfire_grace, ...; durations in seconds or text like ``"5m"``).
        ``allow_unknown_task``: accept a task no worker has served yet."""
        body = _job_body(task, schedule, args, kwargs, policies, paused, allow_past)
        body |= {k: _text(v) if isinstance(v, datetime) else v for k, v in (bounds or {}).items()}
        if allow_unknown_task:  # a task no worker has served yet (see README)
            body["allow_unknown_task"] = True
        return job_from_json(self._call("POST", "/v1/jobs", json=body | {"name": name}))

    def put_job(
        self,
        name: str,
        task: str,
        schedule: Schedule | Mapping[str, Any],
        *,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        policies: Mapping[str, Any] | None = None,
        paused: bool | None = None,
        allow_past: bool = False,
        bounds: Mapping[str, Any] | None = None,
        allow_unknown_task: bool = False,
    ) -> tuple[Job, bool]:
        """Create or update by name; returns (job, changed). The same call twice is a no-op.
        ``bounds``: ``start_at``, ``end_at`` (instants) and ``max_runs``."""
        body = _job_body(task, schedule, args, kwargs, policies, paused, allow_past)
        body |= {k: _text(v) if isinstance(v, datetime) else v for k, v in (bounds or {}).items()}
        if allow_unknown_task:  # a task no worker has served yet (see README)
            body["allow_unknown_task"] = True
        doc = self._call("PUT", self._path(name), json=body)
        return job_from_json(doc), bool(doc.get("changed"))

    def get_job(self, name: str) -> Job:
        return job_from_json(self._call("GET", self._path(name)))

    def next_fire_times(self, name: str, count: int = 5) -> list[dict[str, str]]:
        """The job's next instants as ``{"utc": ..., "local": ...}``."""
        doc = self._call("GET", self._path(name), params={"upcoming": count})
        return list(doc.get("next_fire_times") or [])

    def list_jobs(
        self,
        *,
        state: str | None = None,
        task: str | None = None,
        name_prefix: str | None = None,
        page_size: int = 100,
    ) -> Iterator[Job]:
        """Every matching job, fetching pages of ``page_size`` as it goes."""
        params: dict[str, Any] = {"limit": page_size}
        for key, value in (("state", state), ("task", task), ("name_prefix", name_prefix)):
            if value is not None:
                params[key] = value
        while True:
            doc = self._call("GET", "/v1/jobs", params=params)
            yield from (job_from_json(item) for item in doc["items"])
            if not doc["next_cursor"]:
                return
            params["cursor"] = doc["next_cursor"]

    def update_job(self, name: str, **fields: Any) -> Job:
        """PATCH: task, schedule (a Schedule or mapping), args, kwargs, policies, paused."""
        if "schedule" in fields:
            fields["schedule"] = schedule_to_json(fields["schedule"])
        if "args" in fields:
            fields["args"] = list(fields["args"])
        return job_from_json(self._call("PATCH", self._path(name), json=fields))

    def pause(self, name: str) -> Job:
        return job_from_json(self._call("POST", self._path(name) + "/pause"))

    def resume(self, name: str) -> Job:
        return job_from_json(self._call("POST", self._path(name) + "/resume"))

    def skip(
        self,
        name: str,
        *,
        at: Sequence[datetime | str] | None = None,
        next: int | None = None,
        reason: str | None = None,
    ) -> list[SkipResult]:
        """Skip occurrences without pausing the job: ``at`` (each one of the schedule's
        occurrences) or the ``next`` N (1..100) from now. One result per occurrence:
        ``skipped``, ``already_skipped``, or ``refused`` (running or finished: its state);
        InvalidTransitionError when every one is refused."""
        body: dict[str, Any] = {}
        if at is not None:
            body["at"] = [_text(t) for t in at]
        if next is not None:
            body["next"] = next
        if reason is not None:
            body["reason"] = reason
        return skip_results_from_json(self._call("POST", self._path(name) + "/skip", json=body))

    def trigger(self, name: str, *, overlap: str | None = None) -> Firing:
        """Fire the job now (its schedule is not moved); ``overlap`` overrides the job's
        overlap policy for this firing."""
        body = {} if overlap is None else {"overlap": overlap}
        return firing_from_json(self._call("POST", self._path(name) + "/trigger", json=body))

    def backfill(
        self,
        name: str,
        start: datetime | str,
        end: datetime | str,
        *,
        overlap: str | None = None,
    ) -> dict[str, Any]:
        """One firing per schedule instant in [start, end] (past, at most 1000)."""
        body: dict[str, Any] = {"start": _text(start), "end": _text(end)}
        if overlap is not None:
            body["overlap"] = overlap
        result: dict[str, Any] = self._call("POST", self._path(name) + "/backfill", json=body)
        return result

    def delete_job(self, name: str) -> None:
        self._call("DELETE", self._path(name))

    # -- firings ------------------------------------------------------------------
    def firings_page(
        self,
        *,
        job: str | None = None,
        states: list[str] | None = None,
        scheduled_from: datetime | str | None = None,
        scheduled_to: datetime | str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> FiringPage:
        """One page of the namespace's firings (``GET /v1/firings``), newest first:
        ``job`` a job's exact name, ``states`` any of them, ``scheduled_from <=
        scheduled_for < scheduled_to``; ``limit`` 1-1000. Pass the page's
        ``next_cursor`` as ``cursor`` for the next one (None: it was the last)."""
        params = _firing_filters(states, scheduled_from, scheduled_to) | {"limit": limit}
        if job is not None:
            params["job"] = job
        if cursor is not None:
            params["cursor"] = cursor
        return firing_page_from_json(self._call("GET", "/v1/firings", params=params))

    def list_firings(
        self,
        name: str | None = None,
        *,
        states: list[str] | None = None,
        scheduled_from: datetime | str | None = None,
        scheduled_to: datetime | str | None = None,
        page_size: int = 100,
    ) -> Iterator[Firing]:
        """Job ``name``'s firings (every job's of the namespace without one), newest
        first, fetching pages as it goes."""
        params = _firing_filters(states, scheduled_from, scheduled_to) | {"limit": page_size}
        path = "/v1/firings" if name is None else self._path(name) + "/firings"
        while True:
            doc = self._call("GET", path, params=params)
            yield from (firing_from_json(item) for item in doc["items"])
            if not doc["next_cursor"]:
                return
            params["cursor"] = doc["next_cursor"]

    def get_firing(self, firing_id: int) -> Firing:
        return firing_from_json(self._call("GET", f"/v1/firings/{int(firing_id)}"))

    def list_attempts(self, firing_id: int) -> list[Attempt]:
        """The firing's attempts in order: worker, claimed/started/finished, outcome, error."""
        doc = self._call("GET", f"/v1/firings/{int(firing_id)}")
        return [attempt_from_json(a) for a in doc.get("attempts") or []]

    def cancel_firing(self, firing_id: int) -> CancelResult:
        """``outcome``: cancelled, cancel_requested or already_final."""
        doc = self._call("POST", f"/v1/firings/{int(firing_id)}/cancel")
        return cancel_from_json(doc)

    def retry_firing(self, firing_id: int) -> Firing:
        """Re-drive a DEAD firing; InvalidTransitionError otherwise."""
        return firing_from_json(self._call("POST", f"/v1/firings/{int(firing_id)}/retry"))

    def enqueue(
        self, task: str, /, *args: Any, idempotency_key: str | None = None, **kwargs: Any
    ) -> Firing:
        """Run ``task(*args, **kwargs)`` on a worker now. With ``idempotency_key``, the same
        key and arguments give the same firing; other arguments raise ConflictError."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
        body = {"task": task, "args": list(args), "kwargs": kwargs}
        return firing_from_json(self._call("POST", "/v1/firings", json=body, headers=headers))

    # -- calendars ----------------------------------------------------------------
    def put_calendar(self, name: str, rules: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace calendar ``name`` (an admin token); ``rules`` as the API's
        body (``{"holidays", "exclude", "include", "weekdays"}``). Names the jobs
        ``replanned``."""
        return cast(dict[str, Any], self._call("PUT", _cal(name), json=dict(rules)))

    def get_calendar(self, name: str) -> dict[str, Any]:
        return cast(dict[str, Any], self._call("GET", _cal(name)))

    def list_calendars(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self._call("GET", "/v1/calendars")["items"])

    def delete_calendar(self, name: str) -> None:
        """Refused (ConflictError naming them) while jobs name it."""
        self._call("DELETE", _cal(name))

    # -- cluster ------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/v1/status")
        return result

    def preview(
        self,
        cron: str,
        tz: str = "UTC",
        *,
        after: datetime | str | None = None,
        count: int = 5,
        dst_gap: str | None = None,
        dst_overlap: str | None = None,
        calendar: str | None = None,
    ) -> list[dict[str, Any]]:
        """The next instants of a cron schedule: ``{"utc", "local", "abbrev", "note"}``;
        with ``calendar`` (``"DE-BY"``), none on the days it excludes."""
        body: dict[str, Any] = {"cron": cron, "tz": tz, "count": count}
        if after is not None:
            body["after"] = _text(after)
        if dst_gap is not None:
            body["dst_gap"] = dst_gap
        if dst_overlap is not None:
            body["dst_overlap"] = dst_overlap
        if calendar is not None:
            body["calendar"] = calendar
        items: list[dict[str, Any]] = self._call("POST", "/v1/schedules/preview", json=body)[
            "items"
        ]
        return items

    def ready(self) -> bool:
        """True when the API answers and its store is reachable."""
        try:
            self._call("GET", "/readyz")
        except CronwheelError:
            return False
        return True


def _cal(name: str) -> str:
    return "/v1/calendars/" + quote(name, safe="")
