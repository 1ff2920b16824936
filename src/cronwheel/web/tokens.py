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

from cronwheel.domain.models import validate_name, validate_namespace
from cronwheel.errors import ValidationError
from cronwheel.store.protocol import TOKEN_ROLES, ApiAdminPort, ApiToken

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


def verify_token(store: ApiAdminPort, text: str) -> ApiToken | None:
    """The valid (unrevoked) token this text is, or None."""
    match = TOKEN_RE.fullmatch(text)
    if match is None:
        return None
    record = store.get_token(int(match.group(1)))
    expected = record.secret_hash if record is not None else "0" * 64
    ok = hmac.compare_digest(hash_secret(match.group(2)), expected)
    if record is None or not ok or record.revoked_at is not None:
        return None
    return record
