"""The one error shape of every HTTP answer that is not a success::

{"error": {"code": "invalid_cron", "message": "...", "field": "schedule.cron"}}
"""

from __future__ import annotations

from typing import Any


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field}}
