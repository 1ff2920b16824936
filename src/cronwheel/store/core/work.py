"""The store core's worker side: claims, starts and outcomes, written once over a
Dialect; the engines give the claim and the transactions that join outcomes to a claim
or to starts (their SQL differs)."""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from cronwheel.domain.models import ClaimedFiring, FiringId
from cronwheel.store.claiming import ClaimAsk
from cronwheel.store.core.admin import AdminFlows
from cronwheel.store.core.dialect import Dialect
from cronwheel.store.records import Completion

D = TypeVar("D", bound=Dialect)
Ready = Callable[[], None] | None  # complete_and_start's (WorkerPort)


class WorkFlows(AdminFlows[D]):
    one_writer: bool  # the WorkerPort's: each engine says
    waits_for_instant = False  # the WorkerPort's: PostgreSQL's server waits (claims.py)

    @abstractmethod
    def _claim(self, ask: ClaimAsk) -> list[ClaimedFiring]:
        """claim() with a positive limit and at least one task."""

    @abstractmethod
    def _complete_and_claim(
        self, completions: Sequence[Completion], ask: ClaimAsk
    ) -> tuple[list[bool], list[ClaimedFiring]]:
        """complete_and_claim(); the claim part only when ``ask.wants`` is true."""

    @abstractmethod
    def complete(self, completions: Sequence[Completion]) -> list[bool]:
        """The engine's ``complete`` (the Store port's)."""

    @abstractmethod
    def _complete_and_start(
        self,
        completions: Sequence[Completion],
        params: dict[str, Any],
        ready: Ready,
        not_before: datetime | None,
    ) -> tuple[list[bool], set[FiringId]]:
        """complete_and_start() with both parts, in one transaction; ``params``: start's
        (``_start_params``); ``ready`` called before the transaction begins."""

    def claim(
        self,
        worker_id: str,
        *,
        tasks: Sequence[str],
        limit: int,
        prefetch: timedelta = timedelta(0),
        start: int | None = None,
    ) -> list[ClaimedFiring]:
        ask = ClaimAsk(worker_id, tuple(tasks), limit, prefetch, start)
        return self._claim(ask) if ask.wants else []

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
        """The completions and a claim, in one unit of work where the engine can."""
        ask = ClaimAsk(worker_id, tuple(tasks), limit, prefetch, start)
        return self._complete_and_claim(completions, ask)

    def prepare_claims(self, connections: int) -> None:
        """Nothing here (WorkerPort); PostgreSQL's engine opens and plans its pool's
        connections (store/postgres/claims.py)."""

    def start(self, worker_id: str, claims: Sequence[tuple[FiringId, str]]) -> set[FiringId]:
        """Held firings start: each CLAIMED -> RUNNING by a compare-and-swap on its claim
        token, ``started_at`` the store's clock. The ones that started; a firing
        cancelled (or reclaimed) since its claim is not among them, and its handler
        must not be called."""
        if not claims:
            return set()
        return self._started(self._start_params(claims), None, None)

    def _started(
        self, params: dict[str, Any], ready: Ready, not_before: datetime | None
    ) -> set[FiringId]:
        """``start`` in a transaction of its own, with ``_start_params``' parameters,
        once ``ready`` returned (this engine writes the start when it is called:
        ``not_before`` is the caller's to wait for)."""
        if ready is not None:
            ready()
        rows = self.db.write(lambda tx: tx.all("start", params), atomic=False)
        return {FiringId(r["id"]) for r in rows}

    def complete_and_start(
        self,
        completions: Sequence[Completion],
        worker_id: str,
        claims: Sequence[tuple[FiringId, str]],
        ready: Ready = None,
        not_before: datetime | None = None,
    ) -> tuple[list[bool], set[FiringId]]:
        """The completions and the starts, in one transaction when there are both."""
        if not claims:
            if ready is not None:
                ready()
            return self.complete(completions), set()
        params = self._start_params(claims)
        if not completions:
            return [], self._started(params, ready, not_before)
        return self._complete_and_start(completions, params, ready, not_before)

    def _start_params(self, claims: Sequence[tuple[FiringId, str]]) -> dict[str, Any]:
        """``start``'s parameters: the claims as one JSON array of [id, token]."""
        return {"batch": json.dumps([[fid, token] for fid, token in claims])}
