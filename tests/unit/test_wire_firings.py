"""The firing's JSON shape read back by the client: every field the API writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronwheel.domain.firing import FiringState
from cronwheel.domain.models import Firing, FiringId, JobId
from cronwheel.wire import firing_from_json, firing_to_json

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_a_firing_survives_the_wire_with_its_reason_and_claim_time() -> None:
    """A cancelled firing whose worker died carries why (``reason``), and a held one
    when it was claimed: ``Client.get_firing`` dropped both."""
    firing = Firing(
        id=FiringId(7),
        job_id=JobId(3),
        job_name="nightly",
        namespace="default",
        task="report",
        args=(1, "a"),
        kwargs={"to": "ops"},
        scheduled_for=T0,
        due_at=T0,
        state=FiringState.CANCELLED,
        attempt=1,
        max_attempts=3,
        priority=1.0,
        enqueued_at=T0 - timedelta(seconds=1),
        enqueued_epoch=4,
        worker_id="worker:h:1:abc",
        claimed_at=T0 - timedelta(milliseconds=400),
        started_at=T0,
        finished_at=T0 + timedelta(seconds=5),
        error="lease expired: worker worker:h:1:abc stopped heartbeating",
        cancel_requested_at=T0 + timedelta(seconds=1),
        reason="cancel requested; the worker stopped heartbeating",
    )
    assert firing_from_json(firing_to_json(firing)) == firing
