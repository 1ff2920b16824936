"""The cluster's tz database as status shows it (``cronwheel status``, ``/v1/status``,
the dashboard, ``/metrics``): the version the leader recorded, each live node's, and
which of them differ (see README "Time zone database")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cronwheel.domain.tzdb import tz_database
from cronwheel.store.protocol import WORKER_ALIVE_WITHIN, StoreStatus


def tz_status(s: StoreStatus, *, alive_within: timedelta = WORKER_ALIVE_WITHIN) -> dict[str, Any]:
    """``cluster``: the recorded tz database (None until a leader recorded one);
    ``process``: this process's; ``mismatched``: the live nodes (heartbeat within
    ``alive_within``) whose version is not the cluster's (a node that reports none, an
    older release, counts); ``mismatch``: whether any does, or this process does."""
    mine = tz_database()
    record = s.tzdata
    cluster = None if record is None else {"source": record.source, "version": record.version}
    mismatched = []
    if record is not None:
        for n in s.nodes:
            if s.now - n.heartbeat_at <= alive_within and n.tz_version != record.version:
                mismatched.append(
                    {"id": n.id, "kind": n.kind, "source": n.tz_source, "version": n.tz_version}
                )
    process_differs = record is not None and mine.version != record.version
    return {
        "cluster": cluster,
        "process": {"source": mine.source, "version": mine.version},
        "mismatched": mismatched,
        "mismatch": bool(mismatched) or process_differs,
    }
