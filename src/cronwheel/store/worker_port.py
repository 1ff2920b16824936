"""The Store's worker port: claims, starts, outcomes, leases of claims, the worker's node
(re-exported by ``cronwheel.store.protocol``, whose docstring states what every store
keeps)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from cronwheel.domain.clock import ClockEstimate
from cronwheel.domain.models import ClaimedFiring, FiringId, NodeInfo
from cronwheel.store.records import Completion
from cronwheel.wakeup import Wakeup


class WorkerPort(Protocol):
    #: True where the store takes one write at a time (SQLite's writer lock, the memory
    #: store's lock): a worker then joins what it writes (outcomes to the starts of held
    #: firings). Where writers run side by side (PostgreSQL), joining them only makes one
    #: wait for the other, and a worker writes each on its own connection.
    one_writer: bool
    #: True where ``complete_and_start``'s ``not_before`` is waited for by the database
    #: server, on its own clock, in the statement that writes the start (PostgreSQL): the
    #: worker's ``ready`` then returns a few tenths of a millisecond before the instant,
    #: and the statement's round trip covers the rest. False: the start is written when
    #: ``ready`` returns, which is then at the instant.
    waits_for_instant: bool

    """The worker's port: claims, heartbeats, outcomes, wake-ups, its node record."""

    def id_key(self) -> bytes:
        """The cluster's secret for the ids users see (see AdminPort.id_key): a
        handler's context carries those ids."""
        ...

    def claim(
        self,
        worker_id: str,
        *,
        tasks: Sequence[str],
        limit: int,
        prefetch: timedelta = timedelta(0),
        start: int | None = None,
    ) -> list[ClaimedFiring]:
        """Atomically take up to ``limit`` QUEUED firings of these tasks whose
        ``due_at <= now + prefetch``, in virtual-deadline order: each becomes CLAIMED with
        attempt + 1, a fresh claim token, ``claimed_at = now`` and ``lease_until = now +
        its visibility timeout``. The first ``start`` of them (None: all), if due, also
        start in the same transaction (RUNNING, ``started_at = now``): the caller runs them
        as the claim returns; the others are held until :meth:`start`. Safe against
        concurrent claimers (no firing is claimed twice).

        In the same transaction the job policies apply (store/claiming.py): a firing
        whose start deadline passed becomes MISSED; a capped job (``max_concurrency``)
        never has more CLAIMED + RUNNING firings than its cap across all workers, and its due
        firings beyond the cap meet its overlap policy (SKIPPED, buffered, or the
        running ones cancelled/terminated). A capped job's firing is only taken once
        due (no prefetch), so the overlap decision is made at its instant."""
        ...

    def complete(self, completions: Sequence[Completion]) -> list[bool]:
        """Record outcomes (CAS on state RUNNING + claim token); True where accepted.
        A failure with ``retry_at`` and attempts left goes back to QUEUED due then, unless
        its cancellation was requested (then CANCELLED: a cancelled firing is not run
        again); otherwise DEAD."""
        ...

    def complete_and_claim(
        self,
        completions: Sequence[Completion],
        worker_id: str,
        *,
        tasks: Sequence[str],
        limit: int,
        prefetch: timedelta = timedelta(0),
        start: int | None = None,
    ) -> tuple[list[bool], list[ClaimedFiring]]:
        """``complete(completions)`` then ``claim(...)``, with one commit where the store
        can: a busy worker reports what finished in the transaction that takes the next
        firings. The outcomes are applied first (a capped job's finished firing frees its
        slot for this very claim). Returns complete's flags and claim's firings. If it
        raises, the outcomes are as after a failed ``complete``: not recorded, or (a
        connection lost at commit) unknown — resending them is safe."""
        ...

    def prepare_claims(self, connections: int) -> None:
        """Called by a worker before its first claim, with the number of store calls it
        makes side by side: the store gets ready to serve them (PostgreSQL opens that
        many connections and plans the claim's, the start's and the outcome's statements
        on each; a store without a pool does nothing). Best effort: a store that cannot
        answer now raises nothing, and its first claims get ready as they go."""
        ...

    def start(self, worker_id: str, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        """Held firings start: CLAIMED -> RUNNING (CAS on the claim token), ``started_at =
        now``. Returns the ones that started; a firing cancelled since its claim is not
        among them and its handler must never be called."""
        ...

    def complete_and_start(
        self,
        completions: Sequence[Completion],
        worker_id: str,
        claims: Sequence[tuple[FiringId, str]],
        ready: Callable[[], None] | None = None,
        not_before: datetime | None = None,
    ) -> tuple[list[bool], set[FiringId]]:
        """``complete(completions)`` and ``start(worker_id, claims)``, with one commit where
        the store can: the held firings that take the slots of handlers that finished
        start in the transaction that records those handlers' outcomes. Returns
        complete's flags and start's firings. If it raises, neither happened, or (a
        connection lost at commit) it is unknown: resending both is safe.

        ``ready``, when given, is called once before anything is written, after the
        store has got ready for the write (a connection checked out, the statement's
        path run on no firing): the worker waits there for the held firings' instant,
        so that the start at the instant runs on warm caches. ``not_before``: the
        instant, on the store's clock; a store that ``waits_for_instant`` writes no start
        before it."""
        ...

    def heartbeat(self, worker_id: str, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        """Extend the leases of these claims by their visibility timeouts. Returns the
        firings whose claim is no longer held (reassigned, cancelled): the worker must stop
        them and its late result will be rejected."""
        ...

    def cancel_requested(self, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        """Which of these held claims have a pending cancellation request."""
        ...

    def next_due_at(self) -> datetime | None:
        """The earliest ``due_at`` of a QUEUED firing that is not yet due (any task), a
        retry included: a worker's wake-up hint, since a capped job's firing is claimed only
        at its instant."""
        ...

    def open_wakeup(self, callback: Callable[[], None]) -> Wakeup:
        """Start listening for "work was queued" hints; ``callback`` may be called from any
        thread. ``enqueue``, ``enqueue_now`` and ``redrive_firing``
        send the hint after they commit. A lost hint costs only latency."""
        ...

    def now(self) -> datetime:
        """The store's clock, which nodes act on (domain/clock.py StoreClock)."""
        ...

    def register_node(self, node: NodeInfo) -> None: ...

    def heartbeat_node(self, node_id: str, clock: ClockEstimate | None = None) -> None:
        """The node is alive; ``clock``: its offset to the store's clock (None: unknown)."""
        ...

    def remove_node(self, node_id: str) -> None: ...
