"""Whether tracing is on in this process (README "Tracing"), decided without importing
OpenTelemetry: a process that leaves it off never loads it.

On when asked explicitly: ``App(tracing=True)``, ``create_api(..., tracing=True)``,
``--tracing`` of ``cronwheel serve/worker/api`` (which sets ``CRONWHEEL_TRACING=1`` for
the process and the processes it starts), or ``CRONWHEEL_TRACING=1``. Never
automatically: an application whose dependencies happen to include opentelemetry-api
pays nothing until it asks.
"""

from __future__ import annotations

import importlib.util
import os

from cronwheel.errors import ValidationError

TRACING_ENV = "CRONWHEEL_TRACING"
_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")
INSTALL = "pip install 'cronwheel[otel]'"


def tracing_wanted(flag: bool | None, *, field: str = "tracing") -> bool:
    """``flag`` if given, else ``CRONWHEEL_TRACING``; on needs the ``otel`` extra (a
    ValidationError naming ``field``, or the variable, when it is missing)."""
    if flag is None:
        raw = os.environ.get(TRACING_ENV, "").strip().lower()
        if raw not in _ON + _OFF:
            raise ValidationError(f"must be 1 or 0 (got {raw!r})", field=TRACING_ENV)
        flag, field = raw in _ON, TRACING_ENV
    if flag and importlib.util.find_spec("opentelemetry.trace") is None:
        raise ValidationError(f"tracing needs OpenTelemetry: {INSTALL}", field=field)
    return bool(flag)
