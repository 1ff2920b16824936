"""Structured logs with stable event names (``firing_enqueued``, ``lease_lost`` ...).

Human-readable lines by default; one JSON object per line with ``json=True``
(``--log-format json`` or ``CRONWHEEL_LOG_FORMAT=json``). A traceback is rendered
plain (never rich's, which prints every frame's local variables); the HTTP server's
unexpected errors go through :mod:`cronwheel.observability.errorlog` (one short
line each, written off the event loop), configured here in the same format.
"""

from __future__ import annotations

import logging
import os
import sys

import structlog

from cronwheel.observability import errorlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure(
    *, level: str | None = None, json: bool | None = None, role: str | None = None
) -> None:
    level = (level or os.environ.get("CRONWHEEL_LOG_LEVEL") or "info").lower()
    if json is None:
        json = os.environ.get("CRONWHEEL_LOG_FORMAT", "").lower() == "json"
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if role:
        structlog.contextvars.bind_contextvars(role=role)
    if json:
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        processors.append(
            structlog.dev.ConsoleRenderer(
                colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
            )
        )
    errorlog.configure_default(json_lines=json, role=role)
    # Libraries (psycopg's pool) log through stdlib logging: show their warnings —
    # reconnect attempts matter to an operator of a long-running role.
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s [%(levelname)s] %(name)s: %(message)s",
    )
    logging.getLogger("psycopg").setLevel(logging.WARNING)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
