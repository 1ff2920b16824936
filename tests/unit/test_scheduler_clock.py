"""A scheduler's clock (node.py): its dispatcher reads the store's time; each second a
round trip to the store's clock, every other one the node heartbeat with the estimate;
a change of flag is logged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import structlog.testing

from cronwheel.domain.clock import FakeClock, StoreClock
from cronwheel.domain.models import NodeInfo
from cronwheel.node import _clock_beat
from cronwheel.store.memory import MemoryStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_the_scheduler_measures_reports_and_logs_its_clock() -> None:
    store = MemoryStore(clock=FakeClock(T0))  # the store's clock
    store.register_node(
        NodeInfo(id="s1", kind="scheduler", hostname="h", pid=1, started_at=T0, heartbeat_at=T0)
    )
    local = FakeClock(T0 + timedelta(seconds=20))  # this host's: 20 s ahead
    clock = StoreClock(local)
    with structlog.testing.capture_logs() as logs:
        flag = _clock_beat(store, "s1", clock, None, beat=False)
        assert flag == "clock offset -20.000 s is beyond ±10 s"
        assert clock.now() == T0  # the dispatcher's clock: the store's time
        (node,) = store.list_nodes()
        assert node.clock is None  # not a heartbeat yet
        flag = _clock_beat(store, "s1", clock, flag, beat=True)
        (node,) = store.list_nodes()
        assert node.clock is not None and node.clock.offset == -20.0 and node.clock.flag == flag
        local.set(T0)  # its time service is fixed
        flag = _clock_beat(store, "s1", clock, flag, beat=True)
    assert flag is None
    (node,) = store.list_nodes()
    assert node.clock is not None and node.clock.offset == 0.0 and node.clock.flag is None
    assert [e["event"] for e in logs] == ["clock_flagged", "clock_recovered"]
