"""``cronwheel.Client`` and ``cronwheel.AsyncClient``: the HTTP API from Python (httpx).

    from cronwheel import AsyncClient, Client, cron

    with Client("http://127.0.0.1:8080", token="cw_1_...") as api:
        api.put_job("digest", "send_digest", cron("0 7 * * mon-fri", tz="Europe/Paris"))
        firing = api.enqueue("resize", "img.png", idempotency_key="upload-42", width=640)

    async with AsyncClient("http://127.0.0.1:8080", token="cw_1_...") as api:
        firing = await api.enqueue("resize", "img.png", width=640)

Methods return cronwheel's own values (:class:`Job`, :class:`Firing`) and raise
its own errors, built from the API's error shape: ``ValidationError`` (with
``.field``), ``InvalidScheduleError``, ``UnknownTimezoneError``,
``JobNotFoundError``/``FiringNotFoundError``, ``ConflictError``,
``InvalidTransitionError``, ``StoreUnavailableError`` (503, or the API is
unreachable), ``BatchError`` (an all-or-nothing batch refused), and :class:`ApiError`
subclasses for authentication (401/403). The token is sent only in the
``Authorization`` header and never shown in ``repr`` or in errors.

Every operation is written once, in :class:`~cronwheel.client.calls.Operations`, as the
request it sends and how its answer is read (a :class:`Call`); the two clients differ
only in how they send it: :class:`Client` on ``httpx.Client``, :class:`AsyncClient` on
``httpx.AsyncClient`` (every method a coroutine, the listings async iterators).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from cronwheel.client.calls import Call, Operations, Page, next_page
from cronwheel.client.errors import (
    ApiError,
    ForbiddenError,
    UnauthorizedError,
    response_error,
)
from cronwheel.errors import StoreUnavailableError
from cronwheel.wire import FiringPage

if TYPE_CHECKING:  # httpx is imported when a client is made: `import cronwheel` stays fast
    import httpx

__all__ = [
    "ApiError",
    "AsyncClient",
    "Call",
    "Client",
    "FiringPage",
    "ForbiddenError",
    "UnauthorizedError",
]

R = TypeVar("R")
T = TypeVar("T")


# -- the two transports ------------------------------------------------------------------
def _headers(token: str | None) -> dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": "cronwheel-client"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _unreachable(url: str, exc: Exception) -> StoreUnavailableError:
    return StoreUnavailableError(
        f"cannot reach the API at {url}: {type(exc).__name__}", code="api_unreachable"
    )


def _answer(call: Call[R], response: httpx.Response) -> R:
    """The result of ``call`` from its response (an error raised, or turned into the
    result by ``call.on_error``)."""
    if response.status_code >= 400:
        error = response_error(response, len((call.json or {}).get("items") or ()))
        if call.on_error is None:
            raise error
        return call.on_error(error)
    doc = None if response.status_code == 204 or not response.content else response.json()
    return call.parse(doc)


class Client(Operations):
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

        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url, headers=_headers(token), timeout=timeout, transport=transport
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

    def _send(self, call: Call[R]) -> R:
        import httpx

        try:
            response = self._http.request(
                call.method, call.path, json=call.json, params=call.params, headers=call.headers
            )
        except httpx.TransportError as exc:
            error = _unreachable(self.url, exc)
            if call.on_error is None:
                raise error from None
            return call.on_error(error)
        return _answer(call, response)

    def _pages(self, call: Call[Page[T]]) -> Iterator[T]:
        while True:
            page = self._send(call)
            yield from page.items
            if not page.cursor:
                return
            call = next_page(call, page.cursor)


class AsyncClient(Operations):
    """:class:`Client`'s methods as coroutines (the listings async iterators), on
    ``httpx.AsyncClient``. Close it (``await api.aclose()``) or use ``async with``."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        import httpx

        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=_headers(token), timeout=timeout, transport=transport
        )

    def __repr__(self) -> str:
        return f"AsyncClient({self.url!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _send(self, call: Call[R]) -> R:
        import httpx

        try:
            response = await self._http.request(
                call.method, call.path, json=call.json, params=call.params, headers=call.headers
            )
        except httpx.TransportError as exc:
            error = _unreachable(self.url, exc)
            if call.on_error is None:
                raise error from None
            return call.on_error(error)
        return _answer(call, response)

    async def _pages(self, call: Call[Page[T]]) -> AsyncIterator[T]:
        while True:
            page = await self._send(call)
            for item in page.items:
                yield item
            if not page.cursor:
                return
            call = next_page(call, page.cursor)
