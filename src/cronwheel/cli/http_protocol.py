"""uvicorn's httptools protocol with each answer sent in one write (``cronwheel api``).

uvicorn writes a response's status line and headers as soon as the app sends
``http.response.start``, and the body with ``http.response.body``: two ``send()``
calls, so a keep-alive client is woken twice and reads twice per answer. Profiled
under wrk, the first of those writes was a quarter of the API process's samples.
Here the connection's transport gathers what is written during one turn of the
event loop and sends it at the end of that turn: an answer whose start and body
are sent together (every JSON answer) leaves in one write, a streamed one at the
same pace as before (each chunk at most one loop turn later). Closing sends what
is gathered first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["CorkedTransport", "OneWriteHttpToolsProtocol"]


class CorkedTransport:
    """``transport`` whose writes of one loop turn go out as one (see the module
    docstring); everything else is the transport's."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def flush(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a :class:`CorkedTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        corked: Any = CorkedTransport(transport, self.loop)
        super().connection_made(corked)
