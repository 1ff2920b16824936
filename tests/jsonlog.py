"""Reading the JSON-lines logs that test apps append to while a test reads them.

Each writer appends a whole line with one ``write()`` on an ``O_APPEND`` descriptor, so
lines never interleave. A reader that runs while a write is in progress may still see
that last line only in part (the kernel copies a write into the page cache page by page
and a concurrent ``read()`` takes no lock against it): a line is whole once its newline
is there. The unterminated tail is left for the next read; a line that does not parse
*before* the tail is a torn write, which fails the test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json_lines(path: Path, *, what: str = "log") -> list[dict[str, Any]]:
    """Every whole line of ``path`` as a dict ([] when there is no file yet)."""
    if not path.exists():
        return []
    *whole, _tail = path.read_text().split("\n")  # _tail: "" or a write in progress
    out = []
    for number, line in enumerate(whole, start=1):
        try:
            out.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"{path}:{number}: torn {what} line {line!r}") from None
    return out
