"""The app the benchmark's worker processes run: a no-op task.

The worker records the handler's start instant in the firing row (``started_at``,
taken immediately before the handler is called), so lateness is measured from
the store afterwards without adding writes to the hot path.
"""

from __future__ import annotations

from cronwheel.app import App
from cronwheel.worker.context import Context

app = App()


@app.task(name="bench.noop")
def noop(_ctx: Context) -> None:
    return None


@app.task(name="bench.async_noop")
async def async_noop(_ctx: Context) -> None:
    return None
