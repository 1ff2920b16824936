"""Who is asking: the bearer token's namespace and role (FastAPI dependencies).

The namespace of every request is its token's; a resource of another namespace
is answered exactly like one that does not exist. ``read`` tokens may only read;
``write`` and ``admin`` may also change jobs and firings (``admin`` is reserved
for operations on tokens and the cluster; today it can do what ``write`` can).
With authentication off (``cronwheel api`` on a loopback address only) every
request acts as ``admin`` of namespace ``default``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from cronwheel.api.errors import HttpError
from cronwheel.api.tokens import verify_token
from cronwheel.store.protocol import ApiStore

_RANK = {"read": 0, "write": 1, "admin": 2}
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="cronwheel"'}

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="`Authorization: Bearer cw_<id>_<secret>` (create with `cronwheel tokens create`)",
)


@dataclass(frozen=True, slots=True)
class Principal:
    namespace: str
    role: str
    token_id: int | None

    def can(self, role: str) -> bool:
        return _RANK[self.role] >= _RANK[role]


ANONYMOUS = Principal(namespace="default", role="admin", token_id=None)


def store_of(request: Request) -> ApiStore:
    store: ApiStore = request.app.state.store
    return store


def _principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    if not request.app.state.auth_required:
        return ANONYMOUS
    if credentials is None:
        raise HttpError(
            401,
            "unauthorized",
            "send 'Authorization: Bearer <token>'",
            field="Authorization",
            headers=_CHALLENGE,
        )
    token = verify_token(store_of(request), credentials.credentials)
    if token is None:
        raise HttpError(
            401,
            "unauthorized",
            "the bearer token is not valid",
            field="Authorization",
            headers={"WWW-Authenticate": 'Bearer realm="cronwheel", error="invalid_token"'},
        )
    return Principal(namespace=token.namespace, role=token.role, token_id=token.id)


async def _reader(principal: Annotated[Principal, Depends(_principal)]) -> Principal:
    return principal


async def _writer(principal: Annotated[Principal, Depends(_principal)]) -> Principal:
    if not principal.can("write"):
        raise HttpError(403, "forbidden", "this token may only read")
    return principal


Reader = Annotated[Principal, Depends(_reader)]
Writer = Annotated[Principal, Depends(_writer)]
