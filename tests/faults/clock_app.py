"""The apps of the node-clock scenarios (test_node_clocks.py): two workers, each with a
task of its own, so that one under a shifted clock and a control on the host's clock run
firings due at the same instants side by side. The handlers do nothing: the store
records each start (``started_at``, the database's clock)."""

from __future__ import annotations

from typing import Any

from cronwheel import App

shifted = App("sqlite:///fault-clock-placeholder.db")  # the processes get --store
control = App("sqlite:///fault-clock-placeholder.db")


@shifted.task(name="on_shifted")
def on_shifted(ctx: Any) -> None:
    pass


@control.task(name="on_control")
def on_control(ctx: Any) -> None:
    pass
