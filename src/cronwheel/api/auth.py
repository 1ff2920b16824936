"""The API's authentication: FastAPI dependencies over ``cronwheel.web.auth``.

The namespace of every request is its token's; a resource of another namespace
is answered exactly like one that does not exist (roles: see ``web.auth``). A
missing or invalid token is 401 ``unauthorized``; a token whose role may not do
this, or a cluster token on a namespace's route, is 403 ``forbidden``. Token records
are cached by the app (``web.tokens.TokenCache``: a revoked token stops working within
``TOKEN_CACHE_S``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from cronwheel.api.calls import store_call
from cronwheel.api.errors import HttpError
from cronwheel.web.auth import ANONYMOUS, Principal, missing_role, principal_for, store_of

__all__ = ["Anyone", "Principal", "Reader", "Writer", "store_of"]

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="cronwheel"'}

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="`Authorization: Bearer cw_<id>_<secret>` (create with `cronwheel tokens create`)",
)


async def _principal(
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
    text = credentials.credentials
    cache = getattr(request.app.state, "token_cache", None)
    if cache is not None and cache.fresh(text):
        principal = principal_for(request, text)  # no store call: no thread needed
    else:
        principal = await store_call(principal_for, request, text)
    if principal is None:
        raise HttpError(
            401,
            "unauthorized",
            "the bearer token is not valid",
            field="Authorization",
            headers={"WWW-Authenticate": 'Bearer realm="cronwheel", error="invalid_token"'},
        )
    return principal


async def _reader(principal: Annotated[Principal, Depends(_principal)]) -> Principal:
    if not principal.scoped:
        raise HttpError(
            403,
            "forbidden",
            "a cluster token sees no jobs or firings: this needs a namespace token",
            field="Authorization",
        )
    return principal


async def _writer(principal: Annotated[Principal, Depends(_reader)]) -> Principal:
    if not principal.can("write"):
        raise HttpError(403, "forbidden", missing_role(principal, "write"))
    return principal


Anyone = Annotated[Principal, Depends(_principal)]  # a namespace's token or a cluster token
Reader = Annotated[Principal, Depends(_reader)]  # a namespace's token
Writer = Annotated[Principal, Depends(_writer)]  # a namespace's write or admin token


_CHAINS = {_principal: (), _reader: (_reader,), _writer: (_reader, _writer)}
PRINCIPAL_DEPENDENCIES = frozenset(_CHAINS)


async def resolve_principal(dependency: object, request: Request) -> Principal:
    """The principal of ``dependency`` (``_principal``, ``_reader`` or ``_writer``, as
    ``Anyone``, ``Reader`` or ``Writer`` declare it) for ``request``: the same functions
    in the order FastAPI's dependency solving calls them (``api.fast``)."""
    chain = _CHAINS[dependency]  # type: ignore[index]
    principal = await _principal(request, await bearer(request))
    for check in chain:
        principal = await check(principal)
    return principal
