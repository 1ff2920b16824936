"""The app the acceptance tests run in real ``cronwheel`` processes: ``ledger_app:app``.

Every task appends what it did to an append-only execution log, the *ledger*
(path in ``$LEDGER_PATH``): one JSON object per line, written with a single
``write()`` on an ``O_APPEND`` descriptor and fsync'ed, so a line is either
entirely there or not at all, even when the process is SIGKILLed right after.

Line kinds (``phase``):

- ``"done"`` — one execution that ran to its end: ``key`` (the idempotency key),
  ``attempt``, ``pid``, ``start``/``end`` (Unix seconds, wall clock),
  ``scheduled_for`` (Unix seconds), ``job``, ``firing_id``. The checker counts
  executions from these lines.
- ``"start"`` — written by ``sleepy`` before it sleeps, so a test can see an
  execution in flight (and kill it there).

Which jobs the app *declares* (upserted by a scheduler at start) is chosen per
test with ``$LEDGER_JOBS``, a comma-separated subset of ``tick`` (6-field cron,
every second), ``fast`` (every 200 ms) and ``catchup`` (every second,
``misfire=fire_once``, ``misfire_grace=1``). The tasks themselves are always
registered, so a test can also schedule them by name from its own process.

The store URL below is a placeholder: every process gets ``--store`` on the
command line.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from cronwheel import App, Context, cron, every

LEDGER_ENV = "LEDGER_PATH"
JOBS_ENV = "LEDGER_JOBS"
SLEEP_ENV = "LEDGER_SLEEP_S"

app = App("sqlite:///ledger-app-placeholder.db")

_DECLARED = {name.strip() for name in os.environ.get(JOBS_ENV, "").split(",") if name.strip()}


# The recurring jobs run every firing they get, one at a time: ``buffer_all`` instead of
# the default overlap policy ``skip``, which (like Temporal's) records SKIPPED every
# firing that is due while another of the job's firings is claimed — e.g. all but one
# of the late firings released together after a takeover or a worker crash. The tests
# check "every enqueued firing executes", so they opt out of skipping. A short
# visibility timeout makes redelivery after a kill quick.
_RUN_EVERY_FIRING: dict[str, Any] = {"overlap": "buffer_all", "visibility_timeout": 2}


def _declared(job: str, schedule: Any) -> Any:
    return schedule if job in _DECLARED else None


def append_line(entry: dict[str, Any]) -> None:
    """Append one JSON line to the ledger: one write() on O_APPEND, then fsync."""
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    fd = os.open(os.environ[LEDGER_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, line)
        if written != len(line):  # never happens on a local file; a torn line would be a lie
            raise OSError(f"short ledger write: {written} of {len(line)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)


def _entry(ctx: Context, phase: str, start: float, end: float | None) -> dict[str, Any]:
    return {
        "phase": phase,
        # the key with the store's job id, to compare with the store's rows; "shown_key"
        # is the handler's own (the id users see, cronwheel.domain.ids)
        "key": ctx.firing.idempotency_key,
        "shown_key": ctx.idempotency_key,
        "attempt": ctx.attempt,
        "pid": os.getpid(),
        "start": start,
        "end": end,
        "scheduled_for": ctx.scheduled_for.timestamp(),
        "job": ctx.job,
        "firing_id": ctx.firing.id,  # the store's id
    }


def _record(ctx: Context, sleep_s: float = 0.0) -> None:
    start = time.time()
    if sleep_s > 0:
        time.sleep(sleep_s)
    append_line(_entry(ctx, "done", start, time.time()))


@app.task(visibility_timeout=2, retries=3)
def record(ctx: Context, sleep_s: float = 0.0) -> None:
    """A quick task: optionally sleep ``sleep_s`` seconds, then log one execution."""
    _record(ctx, sleep_s)


@app.task(visibility_timeout=2, retries=3)
def sleepy(ctx: Context) -> None:
    """Log a start line, sleep ``$LEDGER_SLEEP_S`` seconds (default 30), log the execution.

    The sleep length comes from the worker's environment, so a test can run a
    worker that hangs (to be killed mid-run) and one that finishes quickly.
    """
    start = time.time()
    append_line(_entry(ctx, "start", start, None))
    time.sleep(float(os.environ.get(SLEEP_ENV, "30")))
    append_line(_entry(ctx, "done", start, time.time()))


@app.task(schedule=_declared("tick", cron("* * * * * *")), **_RUN_EVERY_FIRING)
def tick(ctx: Context) -> None:
    """Every second, by a 6-field cron expression."""
    _record(ctx)


@app.task(schedule=_declared("fast", every("200ms")), **_RUN_EVERY_FIRING)
def fast(ctx: Context) -> None:
    """Every 200 ms (anchored to the epoch)."""
    _record(ctx)


@app.task(
    schedule=_declared("catchup", every("1s")),
    misfire="fire_once",
    misfire_grace=1,
    **_RUN_EVERY_FIRING,
)
def catchup(ctx: Context) -> None:
    """Every second; after an outage: one catch-up firing for the latest missed instant."""
    _record(ctx)
