"""The retention port: how long finished history is kept (``domain/retention.py``) and
the pruning that enforces it. Re-exported by ``store.protocol``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from cronwheel.domain.retention import PruneReport, Retention


class RetentionPort(Protocol):
    """Retention policies per namespace, and pruning (the leader's pass, the CLI's)."""

    def get_retention(self, namespace: str) -> Retention:
        """The namespace's own policy, else DEFAULT_RETENTION."""
        ...

    def list_retention(self) -> dict[str, Retention]:
        """The namespaces that have their own policy."""
        ...

    def set_retention(self, namespace: str, changes: Mapping[str, Any]) -> Retention:
        """Change ``keep_for`` and/or ``keep_last`` (the other kept); ValidationError
        names a bad one."""
        ...

    def reset_retention(self, namespace: str) -> None:
        """The namespace back on the default policy."""
        ...

    def prune_history(
        self,
        *,
        dry_run: bool = False,
        namespace: str | None = None,
        batch: int | None = None,
        max_batches: int | None = None,
        cursor: tuple[datetime, int] | None = None,
    ) -> PruneReport:
        """Remove the finished history the policies no longer keep (never a firing that
        is not terminal), a batch at a time: a whole pass, or ``max_batches`` batches
        from ``cursor`` (the report's ``cursor`` continues it; ``done`` when the pass
        reached its end). ``dry_run``: only count what would go."""
        ...
