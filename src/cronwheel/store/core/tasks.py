"""The store core's served-tasks flows: which task names workers serve, and which
queued firings wait on a task no live worker serves (queries in core_tasks.sql).

Recording happens in the node flows (core/admin.py): a worker's registration records
its tasks, its heartbeat refreshes them at most once a minute."""

from __future__ import annotations

from datetime import timedelta
from typing import TypeVar

from cronwheel.store import codec
from cronwheel.store.core.admin import AdminFlows
from cronwheel.store.core.dialect import Dialect
from cronwheel.store.protocol import UNSERVED_SCAN, ServedTask

D = TypeVar("D", bound=Dialect)


class TaskFlows(AdminFlows[D]):
    """Served tasks, over a Dialect."""

    def served_tasks(self, *, limit: int = 1000) -> list[ServedTask]:
        return [
            ServedTask(
                task=str(r["task"]),
                first_seen=codec.req_instant(r["first_seen"]),
                last_seen=codec.req_instant(r["last_seen"]),
            )
            for r in self._all("list_served_tasks", {"limit": limit})
        ]

    def unserved_queued(
        self, *, alive_within: timedelta, namespace: str | None = None, limit: int = 50
    ) -> dict[str, int]:
        params = {
            "namespace": namespace,
            "within": self.db.duration(alive_within),
            "scan": UNSERVED_SCAN,
            "limit": limit,
        }
        return {str(r["task"]): int(r["n"]) for r in self._all("unserved_queued", params)}
