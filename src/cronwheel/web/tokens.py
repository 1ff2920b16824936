"""Bearer tokens: ``cw_<id>_<secret>``, the secret 32 random bytes (base64url).

Only ``sha256(secret)`` is stored. A token is looked up by its id and its
secret's hash compared with :func:`hmac.compare_digest`, so neither the lookup
nor the comparison leaks how much of a guessed secret was right. (A slow hash
such as scrypt buys nothing for 256-bit random secrets and would cost every
request.) This module has no web framework import: the CLI uses it too.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable

from cronwheel.domain.names import validate_name, validate_namespace
from cronwheel.errors import ValidationError
from cronwheel.store.protocol import TOKEN_ROLES, ApiAdminPort, ApiToken

TOKEN_CACHE_S = 1.0  # how long a looked-up token record is believed (the revocation bound)
CLUSTER = "*"  # the namespace of a cluster token (no job can be in it: see validate_namespace)
CLUSTER_ROLES = ("read", "admin")
TOKEN_RE = re.compile(r"cw_([1-9][0-9]{0,17})_([A-Za-z0-9_-]{43})", re.ASCII)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def issue_token(
    store: ApiAdminPort, *, namespace: str, role: str, label: str | None = None
) -> tuple[ApiToken, str]:
    """Create a token; return its record and the full token text (shown once, never stored).
    ``namespace`` :data:`CLUSTER` makes a cluster token (roles ``read`` or ``admin``)."""
    if namespace != CLUSTER:
        validate_namespace(namespace)
    if role not in TOKEN_ROLES:
        raise ValidationError(f"must be one of {', '.join(TOKEN_ROLES)}", field="role")
    if namespace == CLUSTER and role not in CLUSTER_ROLES:
        raise ValidationError(
            "a cluster token only reads the cluster: role read or admin", field="role"
        )
    if label is not None:
        validate_name(label, "name")
    secret = secrets.token_urlsafe(32)
    record = store.create_token(
        namespace=namespace, role=role, label=label, secret_hash=hash_secret(secret)
    )
    return record, f"cw_{record.id}_{secret}"


class TokenCache:
    """Token records by id, each believed for ``ttl_s`` seconds of ``monotonic`` time
    after it was read from the store (0: not cached). At most ``max_entries`` records
    (all dropped when full: they are re-read on use)."""

    def __init__(
        self,
        monotonic: Callable[[], float],
        ttl_s: float = TOKEN_CACHE_S,
        max_entries: int = 10_000,
    ) -> None:
        self._monotonic = monotonic
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._records: dict[int, tuple[float, ApiToken]] = {}

    def fresh(self, text: str) -> bool:
        """Whether the record of the token ``text`` names is cached and still believed
        (checking it then needs no store call)."""
        match = TOKEN_RE.fullmatch(text)
        hit = None if match is None else self._records.get(int(match.group(1)))
        return hit is not None and self._monotonic() - hit[0] < self.ttl_s

    def get(self, store: ApiAdminPort, token_id: int) -> ApiToken | None:
        now = self._monotonic()
        hit = self._records.get(token_id)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        record = store.get_token(token_id)
        if record is None:
            self._records.pop(token_id, None)
        elif self.ttl_s > 0:
            if len(self._records) >= self.max_entries:
                self._records.clear()
            self._records[token_id] = (now, record)
        return record


def verify_token(
    store: ApiAdminPort, text: str, cache: TokenCache | None = None
) -> ApiToken | None:
    """The valid (unrevoked) token this text is, or None; its record from ``cache``
    when given (revoked within the cache's ``ttl_s``), else from the store."""
    match = TOKEN_RE.fullmatch(text)
    if match is None:
        return None
    token_id = int(match.group(1))
    record = store.get_token(token_id) if cache is None else cache.get(store, token_id)
    expected = record.secret_hash if record is not None else "0" * 64
    ok = hmac.compare_digest(hash_secret(match.group(2)), expected)
    if record is None or not ok or record.revoked_at is not None:
        return None
    return record
