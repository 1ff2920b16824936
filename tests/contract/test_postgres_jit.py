"""PostgreSQL: cronwheel's statements never compile JIT code (schema.sql migration_32).

A generic plan over a month of day partitions of a million rows each is estimated past
``jit_above_cost`` however few rows it reads, and PostgreSQL compiles at every
execution: status' recent lateness took 193 ms a call on a store of 30 days at
1,000,000 a day (docs/benchmarks.md "The soak at the design's rate"). Here the cost
threshold is lowered to 0 in a session instead, which makes PostgreSQL compile for any
statement, and auto_explain reports each nested statement's plan to the client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.conftest import PG_URL
from tests.contract.conftest import Harness
from tests.contract.pg_harness import pg_store, postgres_harness

# the functions that may be inlined in a caller's plan carry no SET clause (a SET
# prevents inlining) and are left as they are
_UNSET = """
SELECT p.proname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'cronwheel\\_%%'
  AND (l.lanname = 'plpgsql' OR p.proconfig IS NOT NULL)
  AND NOT coalesce('jit=off' = ANY (p.proconfig), false)
ORDER BY 1
"""


@pytest.fixture
def h(tmp_path: Any) -> Iterator[Harness]:
    yield from postgres_harness(tmp_path)


def _schema(h: Harness) -> str:
    with pg_store(h).db.pool.connection() as conn:
        row = conn.execute("SELECT current_schema() AS s").fetchone()
        assert row is not None
        return str(row["s"])


def test_every_function_that_is_not_inlined_runs_without_jit(h: Harness) -> None:
    with pg_store(h).db.pool.connection() as conn:
        listed = conn.execute(_UNSET.replace("%%", "%")).fetchall()
        off = conn.execute(
            "SELECT proname FROM pg_proc WHERE pronamespace = current_schema()::regnamespace"
            " AND 'jit=off' = ANY (proconfig)"
        ).fetchall()
    assert listed == []
    assert {r["proname"] for r in off} >= {
        "cronwheel_recent_lateness",
        "cronwheel_live_counts",
        "cronwheel_claim_fast",
        "cronwheel_claim_scan",
        "cronwheel_start_at",
        "cronwheel_complete",
        "cronwheel_instants",
    }


def test_a_store_s_own_sessions_start_with_jit_off(h: Harness) -> None:
    with pg_store(h).db.pool.connection() as conn:
        row = conn.execute("SHOW jit").fetchone()
    assert row == {"jit": "off"}


def test_status_reads_compile_nothing_where_any_plan_would_be_compiled(h: Harness) -> None:
    """A session of its own (jit on, as the server's default), with every plan past the
    JIT threshold: a plain statement over the firings compiles, status' functions do
    not."""
    h.store.status()  # its functions exist and answer
    schema = _schema(h)
    notices: list[str] = []
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        available = conn.execute("SELECT pg_jit_available()").fetchone()
        if available != (True,):
            pytest.skip("this server has no JIT (llvmjit) to avoid")
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute(f"SET search_path = {schema}")  # type: ignore[arg-type]
        for setting in (
            "LOAD 'auto_explain'",
            "SET jit = on",
            "SET jit_above_cost = 0",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_analyze = on",
            "SET auto_explain.log_level = notice",
        ):
            conn.execute(setting)  # type: ignore[arg-type]
        conn.execute("SELECT count(*) FROM firings WHERE finished_at >= now()")
        plain = [n for n in notices if "JIT:" in n]
        notices.clear()
        conn.execute("SELECT * FROM cronwheel_recent_lateness(now(), NULL, 1000)")
        conn.execute("SELECT * FROM cronwheel_live_counts(NULL)")
        conn.execute("SELECT cronwheel_oldest_queued(NULL)")
        # the functions' own statements (the calls above are this session's, jit on)
        calls = ("Query Text: SELECT * FROM cronwheel_", "Query Text: SELECT cronwheel_")
        nested = [n for n in notices if not n.split("\n")[1].startswith(calls)]
    assert plain, "the control statement should have been compiled"
    assert any("ORDER BY f.finished_at DESC" in n for n in nested)  # lateness' own query
    assert not [n for n in nested if "JIT:" in n]
