"""cli/http_protocol.py: what one loop turn writes leaves in one write, nothing is lost
or reordered, closing sends what was gathered; and uvicorn serves with it."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import uvicorn

from cronwheel.cli.http_protocol import CorkedTransport, OneWriteHttpToolsProtocol


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 9)}.get(name, default)


def test_one_turn_of_writes_is_one_write_in_order() -> None:
    async def scenario() -> list[bytes]:
        raw = Recorder()
        corked = CorkedTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
        corked.write(b"HTTP/1.1 200 OK\r\n\r\n")
        corked.write(memoryview(b"body"))
        assert raw.writes == []  # not before the turn ends
        await asyncio.sleep(0)
        corked.write(b"next")
        await asyncio.sleep(0)
        assert corked.get_extra_info("peername") == ("127.0.0.1", 9)
        return raw.writes

    assert asyncio.run(scenario()) == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"next"]


def test_closing_sends_what_was_gathered_first() -> None:
    async def scenario() -> Recorder:
        raw = Recorder()
        corked = CorkedTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
        corked.write(b"last words")
        corked.close()
        await asyncio.sleep(0)  # the scheduled flush finds nothing left
        return raw

    raw = asyncio.run(scenario())
    assert raw.writes == [b"last words"] and raw.closed


async def _app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = scope["path"].encode() * 3
    headers = [(b"x", b"y"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def test_uvicorn_serves_keep_alive_answers_with_it() -> None:
    config = uvicorn.Config(
        _app, host="127.0.0.1", port=0, http=OneWriteHttpToolsProtocol, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            for path in ("/a", "/bc", "/def"):
                conn.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                answer = b""
                while not answer.endswith(path.encode() * 3):
                    chunk = conn.recv(4096)
                    assert chunk, answer
                    answer += chunk
                head, _, body = answer.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200 OK") and b"\r\nx: y" in head
                assert f"content-length: {len(body)}".encode() in head.lower()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
