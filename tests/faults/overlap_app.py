"""The app of the overlap scenarios: ``overlap_app:app`` (PYTHONPATH = tests/faults).

``busy`` runs in a child process of its worker (``isolation="process"``) and writes its
own ledger: a ``start`` line before it works and a ``done`` line when it returns (one
``write()`` on an ``O_APPEND`` descriptor each, then ``fsync``; see ``ledger_app``). It
ignores ``ctx.cancel_requested`` on purpose: only a kill stops it early, and then the
worker's ``handler_stopped`` log line (the instant its process was found gone) is its end.
"""

from __future__ import annotations

import os
import time

from ledger_app import append_line  # as the processes import it (PYTHONPATH = tests/faults)

from cronwheel import App, Context

app = App("sqlite:///overlap-placeholder.db")


@app.task(isolation="process")
def busy(ctx: Context, seconds: float = 2.5) -> None:
    entry = {
        "key": ctx.firing.idempotency_key,  # the store's ids (checked against its rows)
        "firing_id": ctx.firing.id,
        "attempt": ctx.attempt,
        "pid": os.getpid(),
        "job": ctx.job,
    }
    append_line({**entry, "phase": "start", "at": time.time()})
    time.sleep(seconds)
    append_line({**entry, "phase": "done", "at": time.time()})
