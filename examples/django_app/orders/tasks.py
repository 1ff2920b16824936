"""The project's cronwheel App and its tasks (imported by the views and by
``manage.py runcronwheel``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from cronwheel import App

cw = App(settings.CRONWHEEL_STORE_URL)


@cw.task(retries=5)
def ship_order(ctx: Any, order_id: int) -> None:
    """Ship the order (here: mark it shipped). Runs on a worker, at least once: the update
    is idempotent. It runs in a worker thread, whose Django connection it closes."""
    from orders.models import Order

    try:
        Order.objects.filter(pk=order_id, shipped_at=None).update(shipped_at=timezone.now())
    finally:
        close_old_connections()
    ctx.logger.info("order_shipped", order_id=order_id, key=ctx.idempotency_key)
