"""``cronwheel api --workers N`` (N > 1) on Linux: N processes, each with its OWN socket.

uvicorn's own supervisor binds one listening socket and its children all accept on
it: one accept queue, and whichever child's event loop wakes first takes the next
connection. A busy child wakes as readily as an idle one, so under a few keep-alive
clients (wrk's 8) one child took 7 or all 8 connections and two processes served
1.23-1.33x one. Here every child binds its own socket to the same host:port with
``SO_REUSEPORT``: the kernel keeps one accept queue per listener and hashes each new
connection's addresses to one of them, so connections spread evenly over the
children whatever their load.

The supervisor (the ``cronwheel api`` process itself):

- checks once, before any child starts, that host:port can be bound (a plain bind,
  no ``SO_REUSEPORT``, so another server there — even another cronwheel with its own
  ``SO_REUSEPORT`` listeners — is "address in use", one line and exit 2), then keeps
  a bound, never-listening ``SO_REUSEPORT`` socket on the port while it runs: the
  port (and a ``--port 0`` choice) stays ours across child restarts, and a socket that
  does not listen is never handed connections;
- starts each child as a fresh interpreter (``python -m cronwheel.cli.api_workers``,
  the settings in ``CRONWHEEL_API_PROCESS``): nothing of the parent, its store
  connections included, is inherited. A child builds the same app and uvicorn server
  as the single process (``api_cmd.app_from_env``, ``http_protocol``, same options);
- restarts a child that dies: at once if it ran for a while, after a doubling delay
  if it died within seconds of starting; after ``MAX_QUICK_EXITS`` such quick deaths
  in a row it stops the others and exits 1 (exit 2 from a starting child, a usage
  error such as a lost port, ends it at once with 2);
- on SIGINT/SIGTERM sends SIGTERM to every child (uvicorn's graceful shutdown: open
  requests finish, the store is closed), waits ``STOP_TIMEOUT_S`` and exits 0
  (1 if a child had to be killed).

A child whose supervisor disappears (SIGKILL) stops itself gracefully.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["PortInUseError", "hold_port", "reuse_port_supported", "supervise"]

QUICK_EXIT_S = 5.0  # a child dying sooner than this after its start crashed "at start"
MAX_QUICK_EXITS = 5  # ... that many times in a row: give up (exit 1)
FIRST_BACKOFF_S = 0.5  # delay before restarting a quick death, doubling up to MAX_BACKOFF_S
MAX_BACKOFF_S = 8.0
STOP_TIMEOUT_S = 30.0  # graceful shutdown of the children before SIGKILL
_POLL_S = 0.1


def reuse_port_supported() -> bool:
    """Linux has ``SO_REUSEPORT`` with load balancing across the listeners (other
    systems either lack it or give every connection to one of them)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


class PortInUseError(Exception):
    """host:port cannot be bound; the message names both and the reason."""


def _socket(host: str, *, reuse_port: bool) -> socket.socket:
    # uvicorn's choice of family (Config.bind_socket): IPv6 for an address with ':'
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return sock


def hold_port(host: str, port: int, *, reuse_port: bool = True) -> socket.socket:
    """A socket bound to host:port (``port`` 0: a free one), not listening.

    Checked first with a plain bind: anything listening there, ``SO_REUSEPORT`` or
    not, makes it raise :class:`PortInUseError`. With ``reuse_port`` the socket
    returned lets the children bind the same port with ``SO_REUSEPORT``."""
    probe = _socket(host, reuse_port=False)
    try:
        probe.bind((host, port))
        port = probe.getsockname()[1]
        if not reuse_port:
            return probe
    except OSError as exc:
        probe.close()
        raise PortInUseError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    probe.close()
    held = _socket(host, reuse_port=True)
    try:
        held.bind((host, port))
    except OSError as exc:  # taken between the two binds
        held.close()
        raise PortInUseError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return held


@dataclass(slots=True)
class _Child:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    quick_exits: int = 0
    restart_at: float = 0.0


def supervise(
    workers: int,
    argv: list[str],
    env: dict[str, str],
    *,
    log: Any,
    first_backoff_s: float = FIRST_BACKOFF_S,
) -> int:
    """Run ``workers`` copies of ``argv`` until SIGINT/SIGTERM; the exit code.

    No Python code runs in the signal handler beyond noting the signal: the loop
    below polls it (``time.sleep`` is interrupted by the signal, so it is seen at
    once) and there is no lock a handler could deadlock on."""
    stop: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stop.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    children = [_Child(i + 1) for i in range(workers)]
    code = 0
    try:
        code = _run(children, argv, env, stop, log, first_backoff_s)
    finally:
        stopped_cleanly = _stop_all(children, log)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if code == 0 and not stopped_cleanly:
        code = 1
    log.info("api_stopped", code=code, signal=stop[0] if stop else None)
    return code


def _run(
    children: list[_Child],
    argv: list[str],
    env: dict[str, str],
    stop: list[int],
    log: Any,
    first_backoff_s: float,
) -> int:
    while not stop:
        now = time.monotonic()
        for child in children:
            if child.proc is None:
                if now >= child.restart_at:
                    child.proc = subprocess.Popen(argv, env=env)
                    child.started = now
                    log.info("api_process_started", process=child.index, pid=child.proc.pid)
                continue
            rc = child.proc.poll()
            if rc is None:
                continue
            quick = now - child.started < QUICK_EXIT_S
            child.quick_exits = child.quick_exits + 1 if quick else 0
            pid = child.proc.pid
            child.proc = None
            if quick and rc == 2:  # a usage error (the port lost): restarting repeats it
                log.error("api_process_failed", process=child.index, pid=pid, code=rc)
                return 2
            if child.quick_exits >= MAX_QUICK_EXITS:
                log.error(
                    "api_processes_crashing",
                    process=child.index,
                    pid=pid,
                    code=rc,
                    quick_exits=child.quick_exits,
                )
                return 1
            delay = (
                min(first_backoff_s * 2 ** (child.quick_exits - 1), MAX_BACKOFF_S) if quick else 0.0
            )
            child.restart_at = now + delay
            log.warning(
                "api_process_exited", process=child.index, pid=pid, code=rc, restart_in_s=delay
            )
        time.sleep(_POLL_S)
    return 0


def _stop_all(children: list[_Child], log: Any) -> bool:
    """SIGTERM to every child, wait for all; whether none had to be killed."""
    running = [c.proc for c in children if c.proc is not None and c.proc.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    clean = True
    for proc in running:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.error("api_process_killed", pid=proc.pid, after_s=STOP_TIMEOUT_S)
            proc.kill()
            proc.wait()
            clean = False
    return clean


def child_argv() -> list[str]:
    return [sys.executable, "-m", "cronwheel.cli.api_workers"]


def _watch_parent() -> None:
    """Stop gracefully (SIGTERM to ourselves: uvicorn's handler) once orphaned."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="cronwheel-parent-watch", daemon=True).start()


def child_main() -> None:
    """One serving process: its own ``SO_REUSEPORT`` listener, then the same app and
    uvicorn server as ``cronwheel api`` with one process."""
    import uvicorn

    from cronwheel.cli.api_cmd import SETTINGS_ENV, app_from_env, server_options

    settings = json.loads(os.environ[SETTINGS_ENV])
    host, port = settings["host"], settings["port"]
    sock = _socket(host, reuse_port=True)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # uvicorn's default backlog
    except OSError as exc:
        print(
            f"cronwheel: error: --port: cannot listen on {host}:{port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        sys.exit(2)
    _watch_parent()
    app = app_from_env()  # its own store, closed at shutdown
    options = server_options(host, port, settings["log_level"])
    uvicorn.Server(uvicorn.Config(app, **options)).run(sockets=[sock])


if __name__ == "__main__":
    child_main()
