"""Per-namespace quotas, on every store (memory, SQLite, PostgreSQL).

The promises under test (domain/quotas.py): a namespace without a record has the
defaults; ``set_quota`` changes only the limits given and checks them; each guarded
write is refused at its quota with QuotaExceededError naming it, and changes nothing;
a scheduled firing the leader enqueues over ``firings_per_minute`` is stored SKIPPED
with the reason (never dropped); a claim takes no more of a namespace's firings than
its ``running`` quota (the others wait QUEUED); ``quota_usage`` reports the use.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronwheel.domain.firing import FiringState
from cronwheel.domain.quotas import DEFAULT_QUOTA, SKIP_REASON, SKIPPED, UNLIMITED
from cronwheel.domain.schedules import cron, every, now
from cronwheel.errors import PermissionDeniedError, QuotaExceededError, ValidationError
from tests.contract.conftest import Harness, spec
from tests.contract.test_store_contract import _complete, _done, _fire

NS, OTHER = "ns-a", "ns-b"


def _use(h: Harness, namespace: str = NS) -> dict[str, int]:
    (use,) = h.store.quota_usage(namespace)
    return use.used


def test_defaults_until_set_and_set_changes_only_what_is_given(harness: Harness) -> None:
    store = harness.store
    assert store.get_quota(NS) == DEFAULT_QUOTA
    (use,) = store.quota_usage(NS)
    assert (use.namespace, use.custom, use.quota) == (NS, False, DEFAULT_QUOTA)
    quota = store.set_quota(NS, {"jobs": 3, "min_interval": "1m"})
    assert (quota.jobs, quota.min_interval) == (3, timedelta(minutes=1))
    assert quota.running == DEFAULT_QUOTA.running
    assert store.get_quota(NS) == quota and store.get_quota(OTHER) == DEFAULT_QUOTA
    assert store.set_quota(NS, {"running": 7}).jobs == 3  # kept
    (use,) = store.quota_usage(NS)
    assert use.custom and use.quota.running == 7


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"jobs": -1}, "jobs"),
        ({"running": "many"}, "running"),
        ({"min_interval": "soon"}, "min_interval"),
        ({"min_interval": "0s"}, "min_interval"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_a_bad_limit_names_its_field_and_changes_nothing(
    harness: Harness, changes: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as err:
        harness.store.set_quota(NS, changes)
    assert err.value.field == field
    assert harness.store.get_quota(NS) == DEFAULT_QUOTA


def test_only_lower_refuses_a_raise(harness: Harness) -> None:
    harness.store.set_quota(NS, {"jobs": 10, "min_interval": "1m"})
    with pytest.raises(PermissionDeniedError) as err:
        harness.store.set_quota(NS, {"jobs": 11}, only_lower=True)
    assert err.value.field == "jobs"
    with pytest.raises(PermissionDeniedError):
        harness.store.set_quota(NS, {"min_interval": "1s"}, only_lower=True)
    assert harness.store.set_quota(NS, {"jobs": 4}, only_lower=True).jobs == 4


def test_jobs_quota_counts_creates_and_deletes(harness: Harness) -> None:
    store = harness.store
    store.set_quota(NS, {"jobs": 2})
    for name in ("a", "b"):
        store.create_job(spec(name, namespace=NS), first_fire_at=harness.now())
    with pytest.raises(QuotaExceededError) as err:
        store.create_job(spec("c", namespace=NS), first_fire_at=harness.now())
    assert (err.value.quota, err.value.field, err.value.retry_after) == ("jobs", "quota.jobs", None)
    with pytest.raises(QuotaExceededError):
        store.upsert_job(spec("c", namespace=NS), first_fire_at=harness.now())
    with pytest.raises(QuotaExceededError):
        store.create_jobs([(spec("c", namespace=NS), harness.now())])
    assert [j.name for j in store.list_jobs(namespace=NS)] == ["a", "b"]
    assert _use(harness)["jobs"] == 2
    # another namespace is not affected; an immediate enqueue is not a job
    store.create_job(spec("c", namespace=OTHER), first_fire_at=harness.now())
    store.enqueue_now(spec("now", namespace=NS, schedule=now()))
    store.delete_job(NS, "a")
    assert _use(harness)["jobs"] == 1
    store.create_job(spec("c", namespace=NS), first_fire_at=harness.now())
    store.set_quota(NS, {"jobs": 5})
    assert store.create_jobs([(spec(n, namespace=NS), harness.now()) for n in "de"]) == 2
    assert _use(harness)["jobs"] == 4


def test_min_interval_checks_the_schedule_at_registration_and_update(harness: Harness) -> None:
    store = harness.store
    t = harness.now()
    with pytest.raises(QuotaExceededError) as err:
        store.create_job(spec("fast", namespace=NS, schedule=every("50ms")), first_fire_at=t)
    assert (err.value.quota, err.value.field) == ("min_interval", "schedule")
    store.create_job(spec("ok", namespace=NS, schedule=every("100ms")), first_fire_at=t)
    store.set_quota(NS, {"min_interval": "2m"})
    with pytest.raises(QuotaExceededError):
        store.create_job(spec("c", namespace=NS, schedule=cron("* * * * *")), first_fire_at=t)
    with pytest.raises(QuotaExceededError):  # a changed schedule is checked too
        store.upsert_job(spec("ok", namespace=NS, schedule=every("1m")), first_fire_at=t)
    assert store.get_job(NS, "ok").spec.schedule == every("100ms")
    store.create_job(spec("c", namespace=NS, schedule=cron("*/5 * * * *")), first_fire_at=t)


def test_enqueue_now_is_refused_over_firings_per_minute_until_the_minute_ends(
    harness: Harness,
) -> None:
    store = harness.store
    store.set_quota(NS, {"firings_per_minute": 2})
    for i in range(2):
        store.enqueue_now(spec(f"n{i}", namespace=NS, schedule=now()))
    with pytest.raises(QuotaExceededError) as err:
        store.enqueue_now(spec("n2", namespace=NS, schedule=now()))
    assert err.value.quota == "firings_per_minute"
    assert err.value.retry_after is not None and 1 <= err.value.retry_after <= 60
    with pytest.raises(QuotaExceededError):
        store.enqueue_now_once(
            spec("n3", namespace=NS, schedule=now()), key_hash="k", request_hash="r"
        )
    assert len(store.list_firings(namespace=NS)) == 2
    store.enqueue_now(spec("o", namespace=OTHER, schedule=now()))
    assert _use(harness)["firings_per_minute"] == 2
    harness.advance(timedelta(seconds=err.value.retry_after))
    store.enqueue_now(spec("n4", namespace=NS, schedule=now()))
    assert _use(harness)["firings_per_minute"] == 1


def test_backfill_is_bounded_per_call_and_per_day(harness: Harness) -> None:
    store = harness.store
    t = harness.now()
    store.create_job(spec("j", namespace=NS), first_fire_at=t + timedelta(hours=1))
    store.set_quota(NS, {"backfill": 3, "backfill_per_day": 4})
    past = [t - timedelta(minutes=m) for m in range(1, 6)]
    with pytest.raises(QuotaExceededError) as err:
        store.add_firings(NS, "j", past[:4], note="backfill")
    assert (err.value.quota, err.value.retry_after) == ("backfill", None)
    assert store.add_firings(NS, "j", past[:3], note="backfill").duplicates == 0
    # duplicates cost nothing; new firings over today's volume are refused
    assert store.add_firings(NS, "j", past[:1], note="backfill").duplicates == 1
    with pytest.raises(QuotaExceededError) as err:
        store.add_firings(NS, "j", past[3:5], note="backfill")
    assert err.value.quota == "backfill_per_day" and err.value.retry_after is not None
    assert len(store.list_firings(namespace=NS)) == 3
    assert _use(harness)["backfill_per_day"] == 3


def test_the_leaders_firings_over_the_rate_are_stored_skipped(harness: Harness) -> None:
    store = harness.store
    store.set_quota(NS, {"firings_per_minute": 2})
    job = store.create_job(
        spec("j", namespace=NS, schedule=every("1s")), first_fire_at=harness.now()
    )
    assert job.next_fire_at is not None
    instants = [job.next_fire_at + timedelta(seconds=i) for i in range(3)]
    result = _fire(harness, job, *instants)
    assert len(result.inserted) == 2 and len(result.over_quota) == 1
    skipped = store.get_firing(result.over_quota[0])
    assert skipped.state is FiringState.SKIPPED and skipped.reason == SKIP_REASON
    assert skipped.scheduled_for == instants[2]
    assert _use(harness)["firings_per_minute"] == 2 and _use(harness)[SKIPPED] == 1
    # the cursor moved past all three: nothing is lost or fired twice
    assert store.get_job(NS, "j").next_fire_at == instants[-1] + timedelta(minutes=1)


def test_a_claim_holds_no_more_of_a_namespace_than_its_running_quota(harness: Harness) -> None:
    store = harness.store
    store.set_quota(NS, {"running": 2})
    for i in range(4):
        store.enqueue_now(spec(f"n{i}", namespace=NS, schedule=now()))
    store.enqueue_now(spec("o", namespace=OTHER, schedule=now()))
    first = store.claim("w1", tasks=["t"], limit=10)
    assert sorted(c.firing.namespace for c in first) == [NS, NS, OTHER]
    assert store.claim("w2", tasks=["t"], limit=10) == []
    assert _use(harness)["running"] == 2
    queued = store.list_firings(namespace=NS, states=[FiringState.QUEUED])
    assert len(queued) == 2  # they wait, never lost
    done = next(c for c in first if c.firing.namespace == NS)
    assert _complete(harness, done)
    (more,) = store.claim("w2", tasks=["t"], limit=10)
    assert more.firing.namespace == NS


def test_a_claim_carrying_completions_holds_to_the_running_quota(harness: Harness) -> None:
    """complete_and_claim (a busy worker's claim, its finished firings riding along):
    the quota read with the claim's own statement is the one set before it, and the
    completions it records free their room in the same claim."""
    store = harness.store
    for i in range(5):
        store.enqueue_now(spec(f"n{i}", namespace=NS, schedule=now()))
    (first,) = store.claim("w1", tasks=["t"], limit=1)
    store.set_quota(NS, {"running": 2})
    accepted, more = store.complete_and_claim([_done(harness, first)], "w1", tasks=["t"], limit=10)
    assert accepted == [True]
    assert len(more) == 2  # the completed one's room is free again: two, not three
    assert _use(harness)["running"] == 2
    accepted, none = store.complete_and_claim([], "w2", tasks=["t"], limit=10)
    assert (accepted, none) == ([], [])
    assert len(store.list_firings(namespace=NS, states=[FiringState.QUEUED])) == 2


def test_running_is_not_limited_until_a_namespace_is_given_a_running_quota(
    harness: Harness,
) -> None:
    store = harness.store
    assert store.get_quota(NS).running == UNLIMITED  # the default: claims count nothing
    for i in range(5):
        store.enqueue_now(spec(f"n{i}", namespace=NS, schedule=now()))
    assert len(store.claim("w1", tasks=["t"], limit=3)) == 3
    store.set_quota(NS, {"running": 4})  # applies from the next claim
    assert len(store.claim("w2", tasks=["t"], limit=10)) == 1
    assert _use(harness)["running"] == 4


def test_two_handles_never_create_past_the_jobs_quota(harness: Harness) -> None:
    harness.store.set_quota(NS, {"jobs": 3})
    other = harness.open_another()
    made = 0
    for i in range(4):
        for k, store in enumerate((harness.store, other)):
            try:
                store.create_job(spec(f"j{i}-{k}", namespace=NS), first_fire_at=harness.now())
                made += 1
            except QuotaExceededError:
                pass
    assert made == 3 and len(harness.store.list_jobs(namespace=NS)) == 3
