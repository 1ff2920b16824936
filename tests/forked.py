"""A test's body run in a forked child, and the child's exit waited for with a bound."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable


def fork(body: Callable[[], bool]) -> int:
    """``body`` in a forked child, which exits 0 when it returns True, 1 when it returns
    False or raises; the child's pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if body() else 1
        finally:
            os._exit(code)
    return pid


def running(pid: int) -> bool:
    """Whether the child has not exited yet (reaping it if it has: ask once)."""
    return os.waitpid(pid, os.WNOHANG) == (0, 0)


def exit_code(pid: int, within_s: float = 20) -> int:
    """The child's exit code, waited for at most ``within_s``; past that it is killed
    and the test fails."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"the forked child did not exit within {within_s:g}s")
