"""Wake-ups: a worker sleeps until it is rung, its next due firing, or a fallback poll.

On SQLite every process shares one host, so the doorbell is a UDP datagram on
the loopback interface: each worker binds ``127.0.0.1:0`` and publishes the
address in its node row; whoever enqueues work rings the live workers. A lost
datagram costs only latency (the fallback poll still runs). The PostgreSQL
store uses LISTEN/NOTIFY for the same purpose.
"""

from __future__ import annotations

import asyncio
import socket
import time
from datetime import timedelta

from cronwheel.store.protocol import Store

_RING = b"\x01"


class DoorbellListener(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.event = asyncio.Event()

    def datagram_received(self, data: bytes, addr: tuple[str | object, int]) -> None:
        self.event.set()


async def open_listener() -> tuple[DoorbellListener, str, asyncio.DatagramTransport]:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(
        DoorbellListener, local_addr=("127.0.0.1", 0)
    )
    host, port = transport.get_extra_info("sockname")[:2]
    return protocol, f"udp://{host}:{port}", transport


class Doorbell:
    """Rings every live worker's doorbell (addresses cached for ``refresh``)."""

    def __init__(self, store: Store, *, refresh: timedelta = timedelta(seconds=2)) -> None:
        self._store = store
        self._refresh_s = refresh.total_seconds()
        self._addrs: list[tuple[str, int]] = []
        self._loaded_at = -1e9
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.setblocking(False)

    def ring(self) -> None:
        now = time.monotonic()
        if now - self._loaded_at > self._refresh_s:
            self._loaded_at = now
            self._addrs = []
            for node in self._store.list_nodes(alive_within=timedelta(seconds=30)):
                if node.kind == "worker" and node.wake_addr and node.wake_addr.startswith("udp://"):
                    host, _, port = node.wake_addr[len("udp://") :].rpartition(":")
                    self._addrs.append((host, int(port)))
        for addr in self._addrs:
            try:
                self._sock.sendto(_RING, addr)
            except OSError:
                pass  # a dead worker's port: it will be gone from the list soon

    def close(self) -> None:
        self._sock.close()
