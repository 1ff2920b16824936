"""Node clocks in the registry: what a node reports of its clock's offset to the store's
(register_node, heartbeat_node) is what list_nodes and status show, on every store."""

from __future__ import annotations

import pytest

from cronwheel.domain.clock import ClockEstimate
from cronwheel.domain.models import NodeInfo
from tests.contract.conftest import Harness


def _node(harness: Harness, clock: ClockEstimate | None = None) -> None:
    now = harness.now()
    harness.store.register_node(
        NodeInfo(
            id="w1",
            kind="worker",
            hostname="h",
            pid=1,
            started_at=now,
            heartbeat_at=now,
            clock=clock,
        )
    )


def _clock(harness: Harness) -> ClockEstimate | None:
    (node,) = harness.store.list_nodes()
    return node.clock


def test_a_node_registered_without_a_measure_shows_none(harness: Harness) -> None:
    _node(harness)
    assert _clock(harness) is None


def test_the_clock_reported_at_registration_and_each_heartbeat_is_shown(harness: Harness) -> None:
    _node(harness, ClockEstimate(-3.0125, 0.0008))
    got = _clock(harness)
    assert got is not None
    assert got.offset == pytest.approx(-3.0125)
    assert got.uncertainty == pytest.approx(0.0008)
    assert got.flag is None
    flagged = ClockEstimate(12.5, 0.002, "clock offset +12.500 s is beyond ±10 s")
    harness.store.heartbeat_node("w1", flagged)
    assert _clock(harness) == flagged
    (node,) = harness.store.status().nodes
    assert node.clock == flagged
    harness.store.heartbeat_node("w1", ClockEstimate(0.25, 0.001))
    assert _clock(harness) == ClockEstimate(0.25, 0.001, None)
    harness.store.heartbeat_node("w1")  # a node that does not measure: none shown
    assert _clock(harness) is None
