"""The one error shape of every HTTP answer that is not a success::

{"error": {"code": "invalid_cron", "message": "...", "field": "schedule.cron"}}
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Send


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field}}


async def send_error(
    send: Send,
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    *,
    close: bool = False,
) -> None:
    """Answer an ASGI request with the error shape, from a middleware (before any route);
    ``close``: and end the connection (a request body left unread)."""
    body = json.dumps(error_body(code, message, field), ensure_ascii=False).encode("utf-8")
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
