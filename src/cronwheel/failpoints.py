"""Failpoints: named places where fault-injection tests make a process misbehave.

Off unless ``CRONWHEEL_FAILPOINTS`` is set (etcd's gofail idea), e.g.::

    CRONWHEEL_FAILPOINTS="store.enqueue.before_commit=kill@3;dispatch.before_enqueue=sleep(2)"

Each entry is ``name=action[@n]``; with ``@n`` the action runs on the n-th hit
only, otherwise on every hit. Actions: ``kill`` (SIGKILL this process), ``stop``
(SIGSTOP this process; a test resumes it with SIGCONT), ``sleep(S)``, ``raise``
(raise FailpointError), ``log`` (only log ``failpoint_hit``). Every triggered
failpoint logs ``failpoint_hit`` first, so a test can wait for it. A hit costs
one dictionary lookup when the variable is unset.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from dataclasses import dataclass

_ENTRY = re.compile(r"^([a-z0-9_.]+)=(kill|stop|raise|log|sleep\(([0-9.]+)\))(?:@([0-9]+))?$")


class FailpointError(RuntimeError):
    """Raised by a failpoint whose action is ``raise``."""


@dataclass(slots=True)
class _Point:
    action: str
    seconds: float = 0.0
    nth: int | None = None
    hits: int = 0


def _parse(spec: str) -> dict[str, _Point]:
    points: dict[str, _Point] = {}
    for raw in spec.split(";"):
        entry = raw.strip()
        if not entry:
            continue
        m = _ENTRY.match(entry)
        if m is None:
            raise ValueError(f"CRONWHEEL_FAILPOINTS: cannot parse {entry!r}")
        name, action, seconds, nth = m.groups()
        points[name] = _Point(
            action="sleep" if action.startswith("sleep") else action,
            seconds=float(seconds or 0),
            nth=int(nth) if nth else None,
        )
    return points


_POINTS: dict[str, _Point] = _parse(os.environ.get("CRONWHEEL_FAILPOINTS", ""))


def hit(name: str) -> None:
    """Run the failpoint ``name`` if one is configured."""
    point = _POINTS.get(name)
    if point is None:
        return
    point.hits += 1
    if point.nth is not None and point.hits != point.nth:
        return
    # A plain line on stderr (not the structured logger): it must be written even
    # in a process about to be killed, and tests grep for it.
    sys.stderr.write(f"failpoint_hit name={name} action={point.action} pid={os.getpid()}\n")
    sys.stderr.flush()
    if point.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif point.action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif point.action == "sleep":
        time.sleep(point.seconds)
    elif point.action == "raise":
        raise FailpointError(f"failpoint {name}")
