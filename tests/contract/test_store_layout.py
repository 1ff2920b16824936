"""The store's layout rules, checked: one set of core flow queries in both engines, each
query a named block with a comment, no SQL text outside the .sql files."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from cronwheel.store.sql import load_package_queries, load_queries

STORE = Path(__file__).resolve().parents[2] / "src" / "cronwheel" / "store"
ENGINES = ["cronwheel.store.sqlite", "cronwheel.store.postgres"]


def _core_queries(package: str) -> set[str]:
    """The names of an engine's core queries: its ``core*.sql`` files."""
    folder = STORE / package.rsplit(".", 1)[1]
    return {n for f in folder.glob("core*.sql") for n in load_queries(package, f.name)}


def test_both_engines_define_the_same_core_queries() -> None:
    """store/core names queries without knowing the engine: both define each name."""
    sqlite, postgres = (_core_queries(e) for e in ENGINES)
    assert sqlite, "no core queries found"
    assert sqlite == postgres, sqlite ^ postgres


def test_every_query_the_core_names_exists_in_core_sql() -> None:
    names: set[str] = set()
    for path in (STORE / "core").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"""tx\.(?:one|all|run|filtered)\(\s*"(\w+)\"""", text))
        names |= set(re.findall(r"""self\._(?:one|all)\(\s*"(\w+)\"""", text))
    assert names, "no query names found: the pattern no longer matches the code"
    core = _core_queries(ENGINES[0])
    assert names <= core, names - core


@pytest.mark.parametrize("package", ENGINES)
def test_every_query_block_says_what_it_does(package: str) -> None:
    undocumented = [
        name
        for name, body in load_package_queries(package).items()
        if not body.lstrip().startswith("--")
    ]
    assert not undocumented, f"{package}: blocks without a leading comment: {undocumented}"


def _sql_literals(path: Path) -> list[str]:
    found = []
    keywords = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|WITH)\b", re.IGNORECASE)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and keywords.match(node.value)
            and " FROM " in node.value.upper()
        ):
            found.append(node.value[:60])
    return found


def test_no_sql_text_in_the_store_python() -> None:
    """All SQL lives in .sql files; Python builds only WHERE clauses from fragments and
    the COPY header of the bulk path (its column list comes from codec.job_params)."""
    offenders = {
        str(p.relative_to(STORE)): lits for p in STORE.rglob("*.py") if (lits := _sql_literals(p))
    }
    assert not offenders, offenders
