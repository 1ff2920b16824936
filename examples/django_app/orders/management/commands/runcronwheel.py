"""``manage.py runcronwheel``: run a cronwheel node for this project's tasks inside
Django (settings loaded, ORM ready): a worker (the default) or the scheduler, until
SIGINT/SIGTERM. Run one scheduler (or more: one leads, the others stand by) and as many
workers as the load needs, each its own process."""

from __future__ import annotations

from argparse import ArgumentParser, ArgumentTypeError
from typing import Any

from django.core.management.base import BaseCommand


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ArgumentTypeError(f"must be a positive integer, not {text!r}") from None
    if value < 1:
        raise ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return value


class Command(BaseCommand):
    help = "Run a cronwheel worker (default) or scheduler for this project's tasks."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--role", choices=["worker", "scheduler"], default="worker")
        parser.add_argument("--concurrency", type=_positive, default=8)

    def handle(self, *args: Any, role: str, concurrency: int, **options: Any) -> None:
        from cronwheel.node import run_scheduler, run_worker
        from cronwheel.worker.worker import WorkerConfig
        from orders.tasks import cw

        if role == "scheduler":
            run_scheduler(cw)
        else:
            run_worker(cw, WorkerConfig(concurrency=concurrency))
