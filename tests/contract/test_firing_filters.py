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


def test_finished_states_by_namespace_and_ids(harness: Harness) -> None:
    """States beyond the live ones (the dashboard's lateness sample: the newest finished
    firings), alone or mixed with a live one, by namespace and between ids."""
    from tests.contract.test_store_contract import _complete

    t = harness.now()
    a_ids = []
    for name in ("a", "b", "c"):
        job = harness.store.create_job(spec(name), first_fire_at=t)
        a_ids += _enqueue_instants(harness, job, [t - M])
    other = harness.store.create_job(spec("a", namespace="other"), first_fire_at=t)
    other_ids = _enqueue_instants(harness, other, [t - M])
    claims = {c.firing.id: c for c in harness.store.claim("w", tasks=["t"], limit=10)}
    assert sorted(claims) == sorted([*a_ids, *other_ids])
    done = [a_ids[0], a_ids[1], other_ids[0]]
    for fid in done:
        assert _complete(harness, claims[fid])
    held = a_ids[2]

    def ids(**filters: object) -> list[int]:
        return [f.id for f in harness.store.list_firings(**filters)]  # type: ignore[arg-type]

    succeeded = [FiringState.SUCCEEDED]
    assert ids(states=succeeded) == sorted(done, reverse=True)
    assert ids(states=succeeded, namespace="default") == [a_ids[1], a_ids[0]]
    assert ids(states=succeeded, namespace="other") == other_ids
    assert ids(states=succeeded, namespace="nowhere") == []
    assert ids(states=[FiringState.DEAD, FiringState.CANCELLED]) == []
    mixed = ids(states=[FiringState.SUCCEEDED, FiringState.RUNNING], namespace="default")
    assert mixed == sorted(a_ids, reverse=True)
    assert held not in ids(states=succeeded)
    assert ids(states=succeeded, limit=1) == [max(done)]
    assert ids(states=succeeded, before_id=max(done)) == sorted(done, reverse=True)[1:]
    assert ids(states=succeeded, after_id=a_ids[0]) == sorted(done, reverse=True)[:-1]
    assert ids(states=succeeded, after_id=a_ids[0], before_id=other_ids[0]) == [a_ids[1]]
