"""The benchmarks' jobs found again after a bulk registration (``create_jobs`` returns
a count, not the jobs)."""

from __future__ import annotations

from typing import Any

from cronwheel.store.protocol import Store


def jobs_from(store: Store, prefix: str, count: int) -> set[int]:
    """The ids of the ``count`` jobs just registered as ``{prefix}-0`` onwards: a walk by
    id from the first one's, not of every job (the soak's loaded store holds 3,000,000
    one-shot jobs of history: their walk, 300 pages of 63 ms, ran beside its herds and
    precision runs, whose jobs were registered while the cluster ran)."""
    first = store.get_job("default", f"{prefix}-0")
    ids: set[int] = set()
    after = first.id - 1
    while len(ids) < count and (page := store.list_jobs(after_id=after, limit=10_000)):
        ids |= {j.id for j in page if j.name.startswith(f"{prefix}-")}
        after = page[-1].id
    return ids


def all_jobs(store: Store) -> list[Any]:
    out: list[Any] = []
    after = 0
    while page := store.list_jobs(after_id=after, limit=10_000):
        out += page
        after = page[-1].id
    return out
