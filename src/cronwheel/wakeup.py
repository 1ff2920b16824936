"""Wake-ups: a worker sleeps until it is woken, its next due firing, or a fallback poll.

A wake-up is only a latency hint: a lost one costs at most one poll interval.

On SQLite every process shares one host, so the doorbell is a UDP datagram on
the loopback interface: each worker binds ``127.0.0.1:0`` and publishes the
address in its node row (``wake_addr``); the store rings the live workers after
committing new work. The PostgreSQL store uses LISTEN/NOTIFY instead.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Protocol

_RING = b"\x01"


class Wakeup(Protocol):
    """A running wake-up listener."""

    @property
    def address(self) -> str | None:
        """What to publish as the node's ``wake_addr`` (None when not address-based)."""
        ...

    def close(self) -> None: ...


class UdpWakeup:
    """Listens on a loopback UDP port; calls ``callback`` (from its thread) per datagram."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.5)
        self._callback = callback
        self._closed = threading.Event()
        host, port = self._sock.getsockname()[:2]
        self._address = f"udp://{host}:{port}"
        self._thread = threading.Thread(target=self._run, name="cronwheel-wakeup", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str | None:
        return self._address

    def _run(self) -> None:
        while not self._closed.is_set():
            try:
                self._sock.recv(64)
            except TimeoutError:
                continue
            except OSError:
                return
            self._callback()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=2)
        self._sock.close()


class Doorbell:
    """Rings the UDP wake-up of every live worker (addresses cached for ``refresh``)."""

    def __init__(
        self,
        list_addresses: Callable[[], list[str]],
        *,
        refresh: timedelta = timedelta(seconds=1),
    ) -> None:
        self._list_addresses = list_addresses
        self._refresh_s = refresh.total_seconds()
        self._addrs: list[tuple[str, int]] = []
        self._loaded_at = -1e9
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def ring(self) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._loaded_at > self._refresh_s:
                self._loaded_at = now
                self._addrs = []
                for url in self._list_addresses():
                    if url.startswith("udp://"):
                        host, _, port = url[len("udp://") :].rpartition(":")
                        self._addrs.append((host, int(port)))
            if not self._addrs:
                return
            if self._sock is None:
                self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self._sock.setblocking(False)
            for addr in self._addrs:
                # a dead worker's port raises: it leaves the list at the next refresh
                with contextlib.suppress(OSError):
                    self._sock.sendto(_RING, addr)

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
