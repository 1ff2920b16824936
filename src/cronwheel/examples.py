"""The built-in example app that ``cronwheel serve`` runs when given no app.

It shows each schedule kind firing within the first minute: an interval job,
a seconds-resolution cron job, a minutely cron job in Berlin time, and a task
that fails once and succeeds on its retry.
"""

from __future__ import annotations

import random

from cronwheel.app import App
from cronwheel.domain.schedules import cron, every
from cronwheel.worker.context import Context

app = App()


@app.task(schedule=every("10s"))
def heartbeat(ctx: Context) -> None:
    """Every 10 seconds, anchored to the epoch: fires at :00, :10, :20 ... on any restart."""
    ctx.logger.info("heartbeat", scheduled_for=ctx.scheduled_for.isoformat())


@app.task(schedule=cron("*/15 * * * * *"))
def quarter_minute(ctx: Context) -> None:
    """A 6-field cron expression: seconds 0, 15, 30 and 45 of every minute."""
    ctx.logger.info("quarter_minute", idempotency_key=ctx.idempotency_key)


@app.task(schedule=cron("* * * * *", tz="Europe/Berlin"))
def berlin_minute(ctx: Context) -> None:
    """Every minute on Berlin's wall clock (keeps real time through DST changes)."""
    ctx.logger.info("berlin_minute", local=ctx.scheduled_for.isoformat())


@app.task(schedule=every("30s"), retries=2, retry_backoff=1.0)
def flaky(ctx: Context) -> None:
    """Fails its first attempt half of the time, to show retries with backoff."""
    if ctx.attempt == 1 and random.random() < 0.5:
        raise RuntimeError("simulated failure (will be retried)")
    ctx.logger.info("flaky_ok", attempt=ctx.attempt)
