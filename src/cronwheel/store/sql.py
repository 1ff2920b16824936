"""Named SQL blocks in ``.sql`` files (procrastinate's layout).

A file holds blocks introduced by ``-- name: <block>``; everything up to the next
such line belongs to the block. Keeping SQL in files keeps it greppable,
reviewable by people who know SQL, and out of Python string soup.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_BLOCK = re.compile(r"^-- name: ([a-z_0-9]+)\s*$", re.MULTILINE)


@cache
def load_queries(package: str, filename: str) -> dict[str, str]:
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    parts = _BLOCK.split(text)
    blocks: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in blocks:
            raise ValueError(f"{filename}: duplicate block {name!r}")
        blocks[name] = body.strip()
    return blocks
