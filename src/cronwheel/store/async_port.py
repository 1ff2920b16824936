"""AsyncCalls: store calls awaited on an event loop, for the API's hottest requests: the
reads of a firing and of a job by name (which a PUT of an unchanged job answers from),
and a job's creation and an immediate enqueue in one statement where they need no
decision.

The API runs a store call in a thread (``api/calls.py``), which costs more CPU than a
small read itself on PostgreSQL: the executor's queue, the loop's wake-up and the GIL
changing hands with the other threads. A store that can do better gives the API an
``AsyncCalls`` (``ApiJobsPort.async_calls``), opened by the app's lifespan on its
event loop and awaited there; one that cannot (SQLite, whose API calls run on the loop
already; the memory store) gives None, and its reads stay where they were.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from cronwheel.domain.attempts import Attempt
from cronwheel.domain.models import Firing, FiringId, Job, JobSpec


class AsyncCalls(Protocol):
    async def open(self) -> None:
        """Its connections, on the running event loop (the only one it serves)."""
        ...

    async def close(self) -> None: ...

    def ready(self) -> bool:
        """Open, and serving the running event loop (a caller on another loop uses the
        store's own call)."""
        ...

    async def firing_with_attempts(self, firing_id: FiringId) -> tuple[Firing, list[Attempt]]:
        """The store's ``firing_with_attempts``, with the same rules and errors."""
        ...

    async def get_job(self, namespace: str, name: str) -> Job:
        """The store's ``get_job``: JobNotFoundError when there is none."""
        ...

    async def enqueue_now(self, spec: JobSpec) -> Firing | None:
        """The store's ``enqueue_now`` of a one-shot job due now: its firing; or None,
        with nothing written, when the store's own call must decide (the namespace's
        ``firings_per_minute`` reached: it refuses with its retry-after). ConflictError
        ``job_exists`` when the namespace has the name."""
        ...

    async def create_job(
        self, spec: JobSpec, *, first_fire_at: datetime, valid_from: datetime, check_task: bool
    ) -> Job | None:
        """The store's ``create_job`` with ``first_fire_at`` as its first instant, which
        holds for a store clock in ``[valid_from, first_fire_at)`` (domain/jobs.py
        first_fire_window): ConflictError ``job_exists`` when the name is taken; or
        None, with nothing written, when the store's clock is outside that range or the
        creation needs a decision this call leaves to the store's own (a quota to wait
        for or refuse by; with ``check_task``, a task no worker serves while some worker
        has served tasks)."""
        ...
