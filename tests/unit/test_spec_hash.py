"""JobSpec.spec_hash is assembled from cached parts; it must stay the hash of the one
canonical document (hashes already stored by upserts compare against it)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest

from cronwheel.domain.models import JobPolicies, JobSpec, encode_payload
from cronwheel.domain.overlap import OverlapPolicy
from cronwheel.domain.schedules import at, cron, every


def _reference(spec: JobSpec) -> str:
    doc = json.dumps(
        {
            "task": spec.task,
            "schedule": spec.schedule.to_dict(),
            "payload": spec.payload,
            "policies": spec.policies.to_dict(),
            "bounds": spec.bounds_dict(),
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(doc.encode("utf-8", "surrogatepass")).hexdigest()[:32]


SPECS = [
    JobSpec(name="a", task="t", schedule=cron("0 9 * * *", tz="Europe/Berlin")),
    JobSpec(
        name="b",
        task="t.x",
        schedule=every("5s"),
        args=("é\u2028", 1e300, {"z": 1, "a": [None]}),
        kwargs={"ü": "\U0001f600"},
    ),
    JobSpec(
        name="c",
        task="t",
        schedule=at(datetime(2027, 1, 1, tzinfo=UTC)),
        policies=JobPolicies(
            priority=3,
            overlap=OverlapPolicy.BUFFER_ALL,
            max_concurrency=2,
            timeout=timedelta(seconds=3),
        ),
    ),
    JobSpec(
        name="d",
        task="t",
        schedule=cron("*/5 * * * * *", tz="Asia/Kathmandu"),
        start_at=datetime(2026, 1, 1, tzinfo=UTC),
        end_at=datetime(2026, 2, 1, tzinfo=UTC),
        max_runs=5,
    ),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_spec_hash_is_the_hash_of_the_canonical_document(spec: JobSpec) -> None:
    assert spec.spec_hash() == _reference(spec)


def test_spec_hash_changes_with_each_declared_part() -> None:
    base = SPECS[0]
    from dataclasses import replace

    variants = [
        replace(base, task="u"),
        replace(base, schedule=cron("0 10 * * *", tz="Europe/Berlin")),
        replace(base, args=(1,)),
        replace(base, policies=JobPolicies(priority=2)),
        replace(base, max_runs=3),
    ]
    hashes = {base.spec_hash(), *(v.spec_hash() for v in variants)}
    assert len(hashes) == len(variants) + 1


def test_empty_payload_shortcut_is_the_canonical_encoding() -> None:
    assert encode_payload((), {}) == json.dumps(
        {"args": [], "kwargs": {}}, sort_keys=True, separators=(",", ":")
    )
