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


@cache
def load_package_queries(package: str) -> dict[str, str]:
    """Every named block of a package's ``.sql`` files but ``schema.sql`` (migrations),
    as one mapping; a name defined in two files is an error."""
    blocks: dict[str, str] = {}
    for entry in sorted(resources.files(package).iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql") or entry.name == "schema.sql":
            continue
        for name, body in load_queries(package, entry.name).items():
            if name in blocks:
                raise ValueError(f"{package}: block {name!r} defined twice")
            blocks[name] = body
    return blocks
