"""WriterTurn: whose turn it is to write, among the processes sharing a SQLite file.

SQLite has one writer lock per file. A writer that finds it taken does not wait for
its release: its busy handler sleeps (1, 2, 5, 10 ... 100 ms) and tries again, so it
wakes late, or finds the lock taken again by a process that wrote twice meanwhile.
Measured with two worker processes draining one file, the writers spent a third of
the drain asleep beside a free lock (docs/benchmarks.md).

So each write transaction first takes an exclusive ``flock`` on a file beside the
database (``<database>-lock``), which the kernel hands to a waiter the moment its
holder lets go (or dies: the kernel releases a dead process's locks), and only then
SQLite's lock (``BEGIN IMMEDIATE``), which is then normally free. The turn only orders
the writers: SQLite's lock still guards the data, so a turn shared by mistake (a
descriptor inherited across a fork) costs a busy wait, never a write. Processes that do not
take the turn (the ``sqlite3`` shell, another program) still meet SQLite's own lock and
its busy handling, as before.

A wait is bounded: an uncontended turn is one non-blocking ``flock`` call; a contended
one is waited for by a helper thread, on a descriptor of its own (a lock of its own),
for at most ``timeout_s``; a turn granted after its caller gave up is let go at once.
Without ``fcntl`` (Windows) or when the file cannot be opened (a read-only directory),
there is no turn and SQLite's busy handling alone applies.
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux or macOS
    fcntl = None  # type: ignore[assignment]

SUFFIX = "-lock"


class TurnTimeoutError(Exception):
    """The turn was not granted within the timeout."""


class _Wait:
    """One contended request: granted, or given up by its caller (then the helper
    lets the turn go as soon as it gets it)."""

    __slots__ = ("abandoned", "done", "error", "fd", "granted", "lock")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.granted = False
        self.abandoned = False
        self.error: OSError | None = None


class WriterTurn:
    """An exclusive turn, across processes, at the SQLite file ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path + SUFFIX
        self._fd: int | None = None
        self._helper_lock = threading.Lock()
        self._requests: queue.SimpleQueue[_Wait] | None = None
        if fcntl is None:
            return
        self._fd = self._open()
        _TURNS.add(self)

    def _open(self) -> int | None:
        """A descriptor of the lock file, created if missing; None when it cannot be
        opened (e.g. a read-only directory: SQLite's busy handling alone)."""
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return None

    def _after_fork(self) -> None:
        """In a forked child: a descriptor of its own (a lock shared with the parent
        is no turn) and no helper (its thread is not in the child)."""
        self._helper_lock = threading.Lock()
        self._requests = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = self._open()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @contextmanager
    def taken(self, timeout_s: float) -> Iterator[None]:
        """The turn held for the block; TurnTimeoutError if it was not granted within
        ``timeout_s`` (nothing held then)."""
        if self._fd is None or fcntl is None:
            yield
            return
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fd = self._wait(timeout_s)
            try:
                yield
            finally:
                os.close(fd)  # closing the helper's descriptor lets its lock go
            return
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _wait(self, timeout_s: float) -> int:
        """A descriptor of its own holding the turn, waited for by the helper thread."""
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        wait = _Wait(fd)
        with self._helper_lock:
            if self._requests is None:
                self._requests = queue.SimpleQueue()
                helper = threading.Thread(
                    target=_helper, args=(self._requests,), name="cronwheel-sqlite-turn"
                )
                helper.daemon = True
                helper.start()
            self._requests.put(wait)
        wait.done.wait(timeout_s)
        with wait.lock:
            if wait.granted:
                return fd
            if wait.error is None:
                wait.abandoned = True  # the helper closes fd (at once, or once granted)
                raise TurnTimeoutError(f"no turn to write within {timeout_s:g}s")
        os.close(fd)
        raise TurnTimeoutError(f"cannot take the turn to write: {wait.error}")


_TURNS: weakref.WeakSet[WriterTurn] = weakref.WeakSet()


def _reset_after_fork() -> None:
    for turn in list(_TURNS):
        turn._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _helper(requests: queue.SimpleQueue[_Wait]) -> None:
    """Waits in the kernel for each request's turn, in order (a daemon thread: one
    blocked on a frozen holder must not keep the process from exiting). Every request
    waits for the same thing, so a request behind one that waits long would wait as
    long anyway."""
    assert fcntl is not None
    while True:
        wait = requests.get()
        with wait.lock:
            given_up = wait.abandoned
        if not given_up:
            try:
                fcntl.flock(wait.fd, fcntl.LOCK_EX)
            except OSError as exc:
                wait.error = exc
        with wait.lock:
            if wait.abandoned:
                os.close(wait.fd)
                continue
            wait.granted = wait.error is None
        wait.done.set()
