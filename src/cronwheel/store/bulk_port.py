"""The bulk port: many jobs, or many immediate runs, in one write, with a result per
item (``App.schedule_many``/``enqueue_many`` and the API's batch endpoints use it).
Re-exported by ``store.protocol``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from cronwheel.domain.models import Firing, Job, JobSpec
from cronwheel.errors import CronwheelError

# an item's idempotency key: (key_hash, request_hash), as enqueue_now_once takes them
KeyRef = tuple[str, str]


class BulkPort(Protocol):
    """Bulk writes that keep every invariant of the single ones (the contract suite
    compares a bulk-created job and firing with singly created ones)."""

    def create_jobs_batch(
        self, items: Sequence[tuple[JobSpec, datetime | None]], *, all_or_nothing: bool = False
    ) -> list[Job | CronwheelError]:
        """Bulk registration in ONE transaction (COPY on PostgreSQL): per item, the job
        ``create_job`` makes (its ``spec`` the one given), or its error: ConflictError
        (``job_exists``) for a name its namespace has or an earlier item took,
        QuotaExceededError for a schedule denser than ``min_interval``. The created ones
        are charged to the ``jobs`` quota in the same transaction (over it: the batch is
        refused, nothing written). ``all_or_nothing``: any item's error raises BatchError
        (every item's, indexed by place in ``items``) and nothing is written."""
        ...

    def enqueue_now_batch(
        self, specs: Sequence[JobSpec], *, all_or_nothing: bool = False
    ) -> list[Firing | CronwheelError]:
        """``enqueue_now`` of every spec in ONE transaction, with one wake-up: per item its
        QUEUED firing, or ConflictError where the name is taken. The firings are charged
        to their namespaces' ``firings_per_minute`` together, in the same transaction
        (over it: the batch refused, nothing written). ``all_or_nothing`` as in
        ``create_jobs_batch``."""
        ...

    def enqueue_now_batch_once(
        self, items: Sequence[tuple[JobSpec, KeyRef | None]], *, all_or_nothing: bool = False
    ) -> list[tuple[Firing, bool] | CronwheelError]:
        """``enqueue_now_batch`` whose items may carry an idempotency key (``(key_hash,
        request_hash)``), each one as ``enqueue_now_once`` treats it, in the same ONE
        transaction: per item ``(firing, True)`` when made; ``(firing, False)`` when its
        key (in the spec's namespace) is recorded with the same ``request_hash``, or an
        earlier item of the batch has that key and request (a repeat: nothing made,
        nothing charged); ConflictError (field ``idempotency_key``) for a key recorded,
        or taken earlier in the batch, with another request. Keys are locked in order."""
        ...
