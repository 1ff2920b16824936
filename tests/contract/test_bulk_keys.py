"""Idempotency keys in a batch, on every store (memory, SQLite, PostgreSQL):
``enqueue_now_batch_once`` treats each keyed item as ``enqueue_now_once`` treats one
request (one key space with it), in one transaction."""

from __future__ import annotations

import pytest

from cronwheel.domain.models import Firing, JobSpec
from cronwheel.domain.schedules import now
from cronwheel.errors import BatchError, ConflictError, CronwheelError
from tests.contract.conftest import Harness

NS = "ns-keys"


def _spec(name: str, namespace: str = NS) -> JobSpec:
    return JobSpec(name=name, task="t", schedule=now(), namespace=namespace)


def _firings(harness: Harness, namespace: str = NS) -> int:
    return len(harness.store.list_firings(namespace=namespace))


def _used(harness: Harness) -> int:
    return sum(int(u.used.get("firings_per_minute", 0)) for u in harness.store.quota_usage(NS))


def _outcome(r: tuple[Firing, bool] | CronwheelError) -> str:
    if isinstance(r, CronwheelError):
        return f"{type(r).__name__}:{r.field}"
    return "made" if r[1] else "repeat"


def test_a_key_makes_one_firing_and_a_repeat_answers_it(harness: Harness) -> None:
    store = harness.store
    first = store.enqueue_now_batch_once([(_spec("a"), ("k1", "r1")), (_spec("b"), None)])
    assert [_outcome(r) for r in first] == ["made", "made"]
    made = first[0]
    assert isinstance(made, tuple)
    again = store.enqueue_now_batch_once(
        [(_spec("c"), ("k1", "r1")), (_spec("d"), ("k1", "other")), (_spec("e"), ("k2", "r"))]
    )
    assert [_outcome(r) for r in again] == [
        "repeat",
        "ConflictError:idempotency_key",
        "made",
    ]
    repeat = again[0]
    assert isinstance(repeat, tuple) and repeat[0] == store.get_firing(made[0].id)
    assert _firings(harness) == 3 and _used(harness) == 3  # the repeat made and charged none


def test_the_same_key_twice_in_one_batch(harness: Harness) -> None:
    store = harness.store
    out = store.enqueue_now_batch_once(
        [
            (_spec("a"), ("k", "r")),
            (_spec("b"), ("k", "r")),  # a repeat of item 0
            (_spec("c"), ("k", "x")),  # the key with another request
        ]
    )
    assert [_outcome(r) for r in out] == ["made", "repeat", "ConflictError:idempotency_key"]
    assert isinstance(out[0], tuple) and isinstance(out[1], tuple)
    assert out[1][0].id == out[0][0].id
    assert _firings(harness) == 1 and _used(harness) == 1
    (later,) = store.enqueue_now_batch_once([(_spec("d"), ("k", "r"))])  # recorded once
    assert isinstance(later, tuple) and later == (out[0][0], False)


def test_one_key_space_with_enqueue_now_once(harness: Harness) -> None:
    store = harness.store
    single, created = store.enqueue_now_once(_spec("a"), key_hash="k", request_hash="r")
    assert created
    (out,) = store.enqueue_now_batch_once([(_spec("b"), ("k", "r"))])
    assert out == (single, False)
    store.enqueue_now_batch_once([(_spec("c"), ("k2", "r"))])
    with pytest.raises(ConflictError):
        store.enqueue_now_once(_spec("d"), key_hash="k2", request_hash="other")
    _, created = store.enqueue_now_once(_spec("e"), key_hash="k2", request_hash="r")
    assert not created and _firings(harness) == 2


def test_keys_belong_to_their_namespace(harness: Harness) -> None:
    out = harness.store.enqueue_now_batch_once(
        [(_spec("a"), ("k", "r")), (_spec("b", namespace="other-ns"), ("k", "x"))]
    )
    assert [_outcome(r) for r in out] == ["made", "made"]


def test_all_or_nothing_records_no_key(harness: Harness) -> None:
    store = harness.store
    store.enqueue_now_batch_once([(_spec("a"), ("taken", "r"))])
    with pytest.raises(BatchError) as err:
        store.enqueue_now_batch_once(
            [(_spec("b"), ("new", "r")), (_spec("c"), ("taken", "other"))], all_or_nothing=True
        )
    assert [(i, e.field) for i, e in err.value.errors] == [(1, "idempotency_key")]
    assert _firings(harness) == 1
    (out,) = store.enqueue_now_batch_once([(_spec("d"), ("new", "other"))])
    assert _outcome(out) == "made"  # "new" was not recorded by the refused batch


def test_a_repeat_of_a_refused_item_is_refused(harness: Harness) -> None:
    store = harness.store
    store.enqueue_now(_spec("taken"))
    out = store.enqueue_now_batch_once([(_spec("taken"), ("k", "r")), (_spec("b"), ("k", "r"))])
    assert [_outcome(r) for r in out] == ["ConflictError:name", "ConflictError:idempotency_key"]
    (later,) = store.enqueue_now_batch_once([(_spec("c"), ("k", "r"))])
    assert _outcome(later) == "made"  # the refused item recorded no key
