"""LISTEN/NOTIFY wake-ups for PostgresStore.

``enqueue``, ``enqueue_now``, ``enqueue_now_once``, ``add_firings`` and
``redrive_firing`` call ``pg_notify`` inside their transaction: PostgreSQL delivers
the notification at commit, never for a rolled-back write. A listener holds its own
connection (not a pooled one: LISTEN is session state) in a daemon thread. A
notification is only a latency hint: after a lost connection the listener reconnects
with backoff and calls back once, since hints may have been missed meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg

CHANNEL = "cronwheel_work"
_POLL_S = 0.25  # how long close() may wait for the listening thread
_BACKOFF_MAX_S = 5.0

log = logging.getLogger(__name__)


class PgListenWakeup:
    """A running ``LISTEN cronwheel_work``; ``callback`` is called from its thread."""

    def __init__(self, conninfo: str, callback: Callable[[], None]) -> None:
        self._conninfo = conninfo
        self._callback = callback
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cronwheel-pg-listen", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str | None:
        return None  # not address-based: notifications travel through the database

    def _run(self) -> None:
        delay = 0.1
        first = True
        while not self._closed.is_set():
            try:
                conn = psycopg.Connection.connect(self._conninfo, autocommit=True)
            except psycopg.Error as exc:
                log.warning("pg_listen_connect_failed: %s", exc)
                self._closed.wait(delay)
                delay = min(delay * 2, _BACKOFF_MAX_S)
                continue
            try:
                conn.execute("LISTEN " + CHANNEL)
                if not first:
                    self._ring()  # hints may have been lost while disconnected
                first = False
                delay = 0.1
                while not self._closed.is_set():
                    for _ in conn.notifies(timeout=_POLL_S):
                        self._ring()
            except psycopg.Error as exc:
                if not self._closed.is_set():
                    log.warning("pg_listen_lost: %s", exc)
                    self._closed.wait(delay)
                    delay = min(delay * 2, _BACKOFF_MAX_S)
            finally:
                conn.close()

    def _ring(self) -> None:
        try:
            self._callback()
        except Exception:  # a failing callback must not end the listener
            log.exception("pg_listen_callback_failed")

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=2 + _POLL_S)


class PollOnly:
    """No wake-ups: only a transaction pooler is reachable (``pooler=transaction``
    without ``listen_hosts``), so the worker finds new work by its fallback poll."""

    @property
    def address(self) -> str | None:
        return None

    def close(self) -> None:
        """Nothing runs."""
