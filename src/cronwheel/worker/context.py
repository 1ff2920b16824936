"""What a handler receives: the firing's identity, its attempt, cancellation, a logger."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from cronwheel.domain.models import Firing


@dataclass(slots=True, kw_only=True)
class Context:
    """Passed as the first argument to every task handler.

    ``idempotency_key`` (``<job_id>:<scheduled_for RFC 3339 UTC>``) is stable
    across retries and redeliveries: use it to make side effects idempotent.
    ``cancel_requested`` turns true when the firing was cancelled or its claim
    was lost; a long handler should check it and stop.
    """

    firing: Firing
    claim_token: str
    worker_id: str
    logger: Any
    _cancel: threading.Event = field(default_factory=threading.Event)

    @property
    def job(self) -> str:
        return self.firing.job_name

    @property
    def job_id(self) -> int:
        return self.firing.job_id

    @property
    def firing_id(self) -> int:
        return self.firing.id

    @property
    def namespace(self) -> str:
        return self.firing.namespace

    @property
    def scheduled_for(self) -> datetime:
        return self.firing.scheduled_for

    @property
    def attempt(self) -> int:
        return self.firing.attempt

    @property
    def idempotency_key(self) -> str:
        return self.firing.idempotency_key

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block (a sync handler's sleep) until cancellation is requested or ``timeout``."""
        return self._cancel.wait(timeout)

    def request_cancel(self) -> None:
        self._cancel.set()


def make_context(firing: Firing, claim_token: str, worker_id: str) -> Context:
    logger = structlog.get_logger("cronwheel.task").bind(
        job=firing.job_name,
        firing_id=firing.id,
        attempt=firing.attempt,
        idempotency_key=firing.idempotency_key,
    )
    return Context(firing=firing, claim_token=claim_token, worker_id=worker_id, logger=logger)
