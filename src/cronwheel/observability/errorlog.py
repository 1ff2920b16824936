"""Unhandled errors of the server processes: one short line each, written off the event loop.

An error the API did not expect is answered 500 at once; what is logged about it is
one line (``event=unhandled_error``, the request's method and path, the error's type
and first words, and a plain traceback of at most :data:`MAX_FRAMES` frames as
``file:line function``: no local variables, no source text, no rich rendering), at
most :data:`MAX_LINE` characters. The request path only puts the error on a bounded
queue (:class:`logging.handlers.QueueHandler`, which here does not format it); a
:class:`logging.handlers.QueueListener` thread formats and writes it. When errors
come faster than it writes, the queue (:data:`QUEUE_SIZE`) is full and the surplus
is counted in ``dropped``, never waited for.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import logging.handlers
import os
import queue
import sys
import threading
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "MAX_FRAMES",
    "MAX_LINE",
    "QUEUE_SIZE",
    "ErrorLog",
    "configure_default",
    "default_error_log",
]

MAX_FRAMES = 8
MAX_LINE = 2000
QUEUE_SIZE = 1000
_MAX_MESSAGE = 200


class _Deferred(logging.handlers.QueueHandler):
    """Puts the record on the queue as it is: formatting (the traceback) is the
    listener thread's work, not the event loop's."""

    def __init__(self, q: queue.Queue[Any]) -> None:
        super().__init__(q)
        self.dropped = 0

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1


def short_traceback(exc: BaseException) -> str:
    """The innermost MAX_FRAMES frames as ``file:line function``, outermost first."""
    frames = traceback.extract_tb(exc.__traceback__)[-MAX_FRAMES:]
    return " > ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames)


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class OneLineFormatter(logging.Formatter):
    """A record as one JSON object, or as ``key=value`` words for the console."""

    def __init__(self, *, json_lines: bool) -> None:
        super().__init__()
        self.json_lines = json_lines

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        fields.update(getattr(record, "cw_fields", {}))
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            fields["error"] = _one_line(f"{type(exc).__name__}: {exc}", _MAX_MESSAGE)
            fields["traceback"] = short_traceback(exc)
        if self.json_lines:
            line = json.dumps(fields, ensure_ascii=False, default=str)
        else:
            words = [fields.pop("timestamp"), f"[{fields.pop('level')}]", fields.pop("event")]
            words += [f"{k}={_one_line(str(v), MAX_LINE)!r}" for k, v in fields.items()]
            line = " ".join(words)
        return line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..."


class ErrorLog:
    """Where a server process reports the errors it did not expect (see the module)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        json_lines: bool = False,
        role: str | None = None,
        maxsize: int = QUEUE_SIZE,
    ) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(maxsize)
        self.handler = _Deferred(self.queue)
        self.logger = logging.Logger("cronwheel.errors", logging.ERROR)  # not in the tree
        self.logger.addHandler(self.handler)
        self.logger.propagate = False
        self.role = role
        target = logging.StreamHandler(sys.stderr if stream is None else stream)
        target.setFormatter(OneLineFormatter(json_lines=json_lines))
        self.listener = logging.handlers.QueueListener(self.queue, target)
        self._lock = threading.Lock()
        self._running = False

    @property
    def dropped(self) -> int:
        """Errors not logged because the queue was full."""
        return self.handler.dropped

    def report(self, exc: BaseException, **fields: Any) -> None:
        """Queue one line about ``exc``: cheap, never blocks, never raises."""
        if not self._running:
            with self._lock:
                if not self._running:
                    self.listener.start()
                    self._running = True
        extra = {"cw_fields": ({"role": self.role} if self.role else {}) | fields}
        self.logger.error("unhandled_error", exc_info=exc, extra=extra)

    def flush(self) -> None:
        """Wait until every queued line is written (tests, shutdown)."""
        if self._running:
            self.queue.join()

    def close(self) -> None:
        with self._lock:
            if self._running:
                self._running = False
                # writes what is queued, then ends the thread; a full queue has no room
                # for its stop mark: the (daemon) thread then ends with the process
                with contextlib.suppress(queue.Full):
                    self.listener.stop()


_default: list[ErrorLog] = []  # the process's error log, once made
_default_lock = threading.Lock()


def configure_default(*, json_lines: bool | None = None, role: str | None = None) -> ErrorLog:
    """The process's error log, in the format of its other logs (``logs.configure``)."""
    if json_lines is None:
        json_lines = os.environ.get("CRONWHEEL_LOG_FORMAT", "").lower() == "json"
    with _default_lock:
        for old in _default:
            old.close()
        log = ErrorLog(json_lines=json_lines, role=role)
        atexit.register(log.close)  # write what is queued before the process ends
        _default[:] = [log]
        return log


def default_error_log() -> ErrorLog:
    """The process's error log (standard error; see :func:`configure_default`)."""
    with _default_lock:
        current = list(_default)
    return current[0] if current else configure_default()
