"""The store core's skip flow: occurrences of a job skipped by an operator, written once
over a Dialect (the queries are each engine's ``core_skip.sql``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TypeVar

from cronwheel.domain.firing import FiringState
from cronwheel.domain.skips import SkipResult
from cronwheel.errors import JobNotFoundError
from cronwheel.store.codec import Row
from cronwheel.store.core.admin import AdminFlows
from cronwheel.store.core.dialect import Dialect, Tx

D = TypeVar("D", bound=Dialect)


class SkipFlows(AdminFlows[D]):
    def skip_occurrences(
        self, namespace: str, name: str, instants: Sequence[datetime], reason: str
    ) -> list[SkipResult]:
        """Each instant's firing SKIPPED with ``reason``, in one transaction: born SKIPPED
        when it has none yet (the leader's insert of it is then a duplicate), a QUEUED
        or CLAIMED one at once (CAS); a RUNNING or finished one is refused (reported
        with its state, left alone). JobNotFoundError when there is no such job."""
        wanted = list(instants)

        def body(tx: Tx) -> list[SkipResult]:
            job = tx.one("get_job", {"namespace": namespace, "name": name})
            if job is None:
                raise JobNotFoundError(f"no job named {name!r}", field="name")
            out = []
            for at in wanted:
                key = {"job_id": job["id"], "scheduled_for": self.db.instant(at)}
                row = tx.one("insert_skipped_firing", key | {"reason": reason})
                if row is not None:
                    out.append(_result(at, "skipped", row))
                    continue
                current = tx.one("firing_at", key)
                assert current is not None
                if current["state"] == FiringState.SKIPPED:
                    out.append(_result(at, "already_skipped", current))
                    continue
                params = {"id": current["id"], "reason": reason}
                row = tx.one("skip_unstarted", params)
                out.append(_result(at, "skipped", row) if row else _result(at, "refused", current))
            return out

        return self.db.write(body)


def _result(at: datetime, outcome: str, row: Row) -> SkipResult:
    return SkipResult(
        at=at, outcome=outcome, state=FiringState(row["state"]), firing_id=int(row["id"])
    )
