"""What a handler receives: the firing's identity, its attempt, cancellation, a logger."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from weakref import WeakKeyDictionary

from cronwheel.domain.ids import IdCodec
from cronwheel.domain.models import Firing


@dataclass(slots=True, kw_only=True)
class Context:
    """Passed as the first argument to every task handler.

    ``idempotency_key`` (``<job_id>:<scheduled_for RFC 3339 UTC>``) is stable
    across retries and redeliveries: use it to make side effects idempotent. Its
    ``job_id``, ``firing_id`` and key carry the ids users see everywhere else (the
    API, the dashboard, the CLI: ``domain/ids.py``), never the store's.
    ``cancel_requested`` turns true when the firing was cancelled or its claim
    was lost; a long handler should check it and stop.
    """

    firing: Firing
    claim_token: str
    worker_id: str
    shown: Firing | None = None  # the firing with the ids users see (None: as stored)
    # the codec of those ids: ``shown`` is made from it on first use (most handlers never
    # read an id, and the keyed permutation is a measurable part of a worker's own work)
    _ids: IdCodec | None = None
    _logger: Any = None
    _cancelled: bool = False
    # created by the first wait_cancelled(): most handlers never wait, and an Event (a
    # Condition and its lock) per firing was a measurable part of a worker's own work
    _waiter: threading.Event | None = None
    _on_cancel: list[Callable[[], None]] = field(default_factory=list)

    @property
    def logger(self) -> Any:
        """A structlog logger bound to this firing (job, firing_id, attempt, key); built on
        first use, so handlers that never log pay nothing for it."""
        if self._logger is None:
            import structlog  # the worker itself logs through its events sink

            self._logger = structlog.get_logger("cronwheel.task").bind(
                job=self.firing.job_name,
                firing_id=self.visible.id,
                attempt=self.firing.attempt,
                idempotency_key=self.visible.idempotency_key,
            )
        return self._logger

    @property
    def visible(self) -> Firing:
        """The firing as users see it (its ids and key those of the API)."""
        if self.shown is None and self._ids is not None:
            self.shown = self._ids.firing(self.firing)
        return self.firing if self.shown is None else self.shown

    @property
    def job(self) -> str:
        return self.firing.job_name

    @property
    def job_id(self) -> int:
        return self.visible.job_id

    @property
    def firing_id(self) -> int:
        return self.visible.id

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
        return self.visible.idempotency_key

    @property
    def cancel_requested(self) -> bool:
        return self._cancelled

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block (a sync handler's sleep) until cancellation is requested or ``timeout``."""
        with _LOCK:
            if self._waiter is None:
                self._waiter = threading.Event()
                if self._cancelled:
                    self._waiter.set()
            waiter = self._waiter
        return waiter.wait(timeout)

    def request_cancel(self) -> None:
        with _LOCK:
            if self._cancelled:
                return
            self._cancelled = True
            waiter = self._waiter
            callbacks = list(self._on_cancel)
        if waiter is not None:
            waiter.set()
        for callback in callbacks:
            callback()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when cancellation is requested (at once if it already was);
        exactly once, whichever thread requests it."""
        with _LOCK:
            self._on_cancel.append(callback)
            already = self._cancelled
        if already:
            callback()


# guards the cancellation state of every Context (held for a few instructions)
_LOCK = threading.Lock()


_CODECS: WeakKeyDictionary[Any, IdCodec] = WeakKeyDictionary()


def ids_of(store: Any) -> IdCodec:
    """The codec of the ids users see, for a worker's store (its key read once)."""
    codec = _CODECS.get(store)
    if codec is None:
        codec = _CODECS[store] = IdCodec(store.id_key())
    return codec


def make_context(
    firing: Firing, claim_token: str, worker_id: str, ids: IdCodec | None = None
) -> Context:
    """A handler's context; with ``ids`` its ids are those users see (a child process is
    given the shown firing along: it sets ``shown`` itself)."""
    return Context(firing=firing, claim_token=claim_token, worker_id=worker_id, _ids=ids)
