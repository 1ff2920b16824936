"""``list_firings`` filters, on every store: namespace, job name, states (CLAIMED
included), ``scheduled_from <= scheduled_for < scheduled_to``, keyset paging by id (``before_id``,
``after_id``)."""

from __future__ import annotations

from datetime import timedelta

from cronwheel.domain.firing import FiringState
from tests.contract.conftest import Harness, spec
from tests.contract.test_store_contract import _enqueue_instants

M = timedelta(minutes=1)


def test_filters_combine(harness: Harness) -> None:
    t = harness.now()
    a = harness.store.create_job(spec("a"), first_fire_at=t)
    b = harness.store.create_job(spec("b"), first_fire_at=t)
    other = harness.store.create_job(spec("a", namespace="other"), first_fire_at=t)
    a_ids = _enqueue_instants(harness, a, [t, t + M, t + 2 * M])
    b_ids = _enqueue_instants(harness, b, [t])
    other_ids = _enqueue_instants(harness, other, [t])
    held = harness.store.claim("w", tasks=["t"], limit=1, start=0)[0].firing.id

    def ids(**filters: object) -> list[int]:
        return [f.id for f in harness.store.list_firings(**filters)]  # type: ignore[arg-type]

    assert ids(namespace="default", job_name="a") == sorted(a_ids, reverse=True)
    assert ids(job_name="a") == sorted(a_ids + other_ids, reverse=True)
    assert ids(namespace="other") == other_ids
    assert ids(namespace="default", job_name="nope") == []
    assert ids(states=[FiringState.CLAIMED]) == [held]
    assert held not in ids(states=[FiringState.QUEUED])
    assert ids(namespace="default", scheduled_from=t + M) == sorted(a_ids[1:], reverse=True)
    assert ids(namespace="default", scheduled_to=t + M) == sorted([a_ids[0], *b_ids], reverse=True)
    window = ids(namespace="default", job_name="a", scheduled_from=t + M, scheduled_to=t + 2 * M)
    assert window == [a_ids[1]]
    newest, *rest = sorted(a_ids, reverse=True)
    page = ids(namespace="default", job_name="a", limit=1)
    assert page == [newest]
    assert ids(namespace="default", job_name="a", before_id=newest) == rest
    oldest, middle, newest = sorted(a_ids)
    assert ids(namespace="default", job_name="a", after_id=oldest) == [newest, middle]
    assert ids(namespace="default", job_name="a", after_id=oldest, before_id=newest) == [middle]
    assert ids(job_name="a", after_id=max(a_ids + other_ids)) == []
