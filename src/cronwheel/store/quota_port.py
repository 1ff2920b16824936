"""The quota port: per-namespace quotas (``domain/quotas.py``), which every store
enforces inside the write they limit. Re-exported by ``store.protocol``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from cronwheel.domain.quotas import Quota, QuotaUse


class QuotaPort(Protocol):
    """Per-namespace quotas (domain/quotas.py), enforced by the store in each write."""

    def get_quota(self, namespace: str) -> Quota:
        """The namespace's own quota, else DEFAULT_QUOTA."""
        ...

    def set_quota(
        self, namespace: str, changes: Mapping[str, Any], *, only_lower: bool = False
    ) -> Quota:
        """Change some limits (``quota_with``), the others kept; ``only_lower``: a
        raised one is PermissionDeniedError (a namespace token's change)."""
        ...

    def quota_usage(self, namespace: str | None = None) -> list[QuotaUse]:
        """Quota and use of one namespace, or of every namespace in use, by name."""
        ...
