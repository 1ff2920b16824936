"""The apps of the node-clock scenarios (test_node_clocks.py): two workers, each with a
task of its own, so that one under a shifted clock and a control run firings due at the
same instants side by side.

A handler's start is measured by the TEST process, in real time: the handler sends its
job's name (no timestamp: its own clock is the shifted one) in a UDP datagram to the
address in ``$CRONWHEEL_CLOCK_PING`` (``host:port``), and the test keeps its arrival
instant as the kernel stamped it.
(The store's ``started_at`` will not do: a completion rewrites it with the worker's
reading of the start, i.e. by the clock under test.)"""

from __future__ import annotations

import os
import socket
from typing import Any

from cronwheel import App

PING_ENV = "CRONWHEEL_CLOCK_PING"

shifted = App("sqlite:///fault-clock-placeholder.db")  # the processes get --store
control = App("sqlite:///fault-clock-placeholder.db")
_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


def _ping(ctx: Any) -> None:
    host, _, port = os.environ[PING_ENV].rpartition(":")
    _sock.sendto(ctx.job.encode(), (host, int(port)))


@shifted.task(name="on_shifted")
def on_shifted(ctx: Any) -> None:
    _ping(ctx)


@control.task(name="on_control")
def on_control(ctx: Any) -> None:
    _ping(ctx)
