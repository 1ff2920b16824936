"""What a recorded error says, and to whom.

A firing's error is recorded by the worker as a summary line, then (for some) details:
a Python traceback, the excerpt of a remote response, the tail of a command's output.
Details can hold what the task touched (response bodies, file contents, local paths),
so they are shown to the write and admin roles, which can run the task anyway; a read
token (a wall screen, a monitoring probe) sees only the summary (:func:`error_summary`).
The worker bounds every recorded error (:func:`bound_error`) after redacting it.
"""

from __future__ import annotations

ERROR_MAX = 8000  # characters of a recorded error
SUMMARY_MAX = 300  # characters of its summary
_TRACEBACK = "Traceback (most recent call last):"


def error_summary(error: str | None) -> str | None:
    """The one line of ``error`` shown to anyone: a traceback's last line (the exception),
    else the first line (details follow it); at most ``SUMMARY_MAX`` characters."""
    if error is None:
        return None
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return error.strip()
    line = lines[-1] if lines[0] == _TRACEBACK else lines[0]
    return line if len(line) <= SUMMARY_MAX else line[: SUMMARY_MAX - 1] + "…"


def bound_error(error: str, limit: int = ERROR_MAX) -> str:
    """``error`` in at most about ``limit`` characters: its first line and its tail (where
    a traceback's exception and a command's last output are), the middle cut out."""
    if len(error) <= limit:
        return error
    first = error.split("\n", 1)[0][: limit // 4]
    cut = len(error) - len(first) - (limit // 2)
    return f"{first}\n[… {cut} characters cut …]\n{error[-(limit // 2) :]}"
