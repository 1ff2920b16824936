"""The app every fault-suite process runs: ``ledger_app:app`` (PYTHONPATH = tests/faults).

Each execution of a task leaves two independent traces:

1. an **effect row** in the scenario's own PostgreSQL database (table
   ``fault_effects``, created by the harness): ``INSERT ... ON CONFLICT (key) DO
   UPDATE SET runs = runs + 1`` keyed by the idempotency key, with the pid and
   attempt of every run appended. ``runs > 1`` is a duplicate execution, seen by
   the side effect itself — what a user's non-idempotent handler would suffer;
2. one JSON line in an **append-only log** (path in ``$FAULT_LEDGER_PATH``):
   ``phase`` (``start`` — written by ``slow`` before it sleeps, so a test can
   see an execution in flight — or ``done``), ``key``, ``attempt``, ``pid``,
   ``start``, ``end`` (Unix seconds), ``firing_id``, ``job``. Each line is one
   ``write()`` on an ``O_APPEND`` descriptor, then ``fsync``: a line is whole or
   absent even when the process is SIGKILLed right after.

The effect is committed before the ``done`` line is written, so ``done`` lines
never outnumber effect runs. ``record`` and ``slow`` ignore ``ctx.cancel_requested``
on purpose: a zombie must run to its end so the test sees its completion rejected.
``cooperative`` stops on a cancellation request (a ``cancelled`` line, then
``raise Cancel``), so a test can tell which way the handler itself ended.

No job is declared here: tests create their jobs by name (``record``, ``slow``)
through their own App on the scenario's database. The store URL below is a
placeholder: every process gets ``--store`` on its command line.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import psycopg

from cronwheel import App, Cancel, Context

LEDGER_ENV = "FAULT_LEDGER_PATH"
EFFECTS_URL_ENV = "FAULT_EFFECTS_URL"
SLOW_ENV = "FAULT_SLOW_S"

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS fault_effects (
    key text PRIMARY KEY,
    runs integer NOT NULL,
    pids integer[] NOT NULL,
    attempts integer[] NOT NULL,
    first_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

_UPSERT = """
INSERT INTO fault_effects AS e (key, runs, pids, attempts)
VALUES (%(key)s, 1, ARRAY[%(pid)s::integer], ARRAY[%(attempt)s::integer])
ON CONFLICT (key) DO UPDATE
SET runs = e.runs + 1, pids = e.pids || excluded.pids,
    attempts = e.attempts || excluded.attempts, last_at = clock_timestamp()
"""

app = App("sqlite:///fault-ledger-placeholder.db")


def append_line(entry: dict[str, Any]) -> None:
    """One JSON line, one write() on O_APPEND, then fsync."""
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    fd = os.open(os.environ[LEDGER_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(f"short ledger write: {written} of {len(line)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)


def write_effect(ctx: Context) -> None:
    """The side effect, keyed by the idempotency key (a fresh connection each time, so a
    database restart costs one failed attempt, never a stale pooled connection)."""
    params = {"key": ctx.firing.idempotency_key, "pid": os.getpid(), "attempt": ctx.attempt}
    with psycopg.connect(os.environ[EFFECTS_URL_ENV], autocommit=True, connect_timeout=3) as conn:
        conn.execute(_UPSERT, params)


def _entry(ctx: Context, phase: str, start: float, end: float | None) -> dict[str, Any]:
    return {
        "phase": phase,
        "key": ctx.firing.idempotency_key,  # the store's ids (checked against its rows)
        "attempt": ctx.attempt,
        "pid": os.getpid(),
        "start": start,
        "end": end,
        "firing_id": ctx.firing.id,
        "job": ctx.job,
        "scheduled_for": ctx.scheduled_for.timestamp(),
    }


@app.task
def record(ctx: Context) -> None:
    """A quick task: effect, then the ``done`` line."""
    start = time.time()
    write_effect(ctx)
    append_line(_entry(ctx, "done", start, time.time()))


@app.task
def slow(ctx: Context, seconds: float | None = None) -> None:
    """``start`` line, sleep ``seconds`` (or ``$FAULT_SLOW_S``), effect, ``done`` line."""
    start = time.time()
    append_line(_entry(ctx, "start", start, None))
    time.sleep(float(seconds if seconds is not None else os.environ.get(SLOW_ENV, "3")))
    write_effect(ctx)
    append_line(_entry(ctx, "done", start, time.time()))


@app.task
def cooperative(ctx: Context, seconds: float = 0.0) -> None:
    """``start`` line; wait up to ``seconds`` for a cancellation request: on one, a
    ``cancelled`` line and ``raise Cancel`` (the firing ends CANCELLED); otherwise the
    effect and the ``done`` line (it ends SUCCEEDED)."""
    start = time.time()
    append_line(_entry(ctx, "start", start, None))
    if ctx.wait_cancelled(seconds) if seconds > 0 else ctx.cancel_requested:
        append_line(_entry(ctx, "cancelled", start, time.time()))
        raise Cancel("the handler saw the request")
    write_effect(ctx)
    append_line(_entry(ctx, "done", start, time.time()))
