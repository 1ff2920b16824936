"""Who is asking, for the API and the dashboard alike.

A request carries a bearer token (``Authorization: Bearer cw_<id>_<secret>``) or,
on the dashboard, the same token in the ``HttpOnly; SameSite=Strict`` session
cookie set by its login form. The token gives the request its namespace and role:
``read`` may only read; ``write`` and ``admin`` may also change jobs and firings
(``admin`` also reads the namespace's ``/metrics``). A token sees its namespace
only, everywhere. A *cluster* token (namespace ``*``, role ``read`` or ``admin``,
``cronwheel tokens create --cluster``) belongs to no namespace: it sees the
cluster-wide views (``/metrics`` of every namespace, the dashboard's all-namespace
overview, the cluster status with its leader and nodes) and no job or firing. With
authentication off (``cronwheel api`` on a loopback address only) every request
acts as :data:`ANONYMOUS`, the ``admin`` of namespace ``default`` who also sees the
cluster-wide views (a single operator).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from cronwheel.store.protocol import ApiStore
from cronwheel.web.tokens import CLUSTER, TokenCache, verify_token

COOKIE = "cronwheel_token"
COOKIE_MAX_AGE = 12 * 3600
_RANK = {"read": 0, "write": 1, "admin": 2}


@dataclass(frozen=True, slots=True)
class Principal:
    namespace: str  # CLUSTER for a cluster token
    role: str
    token_id: int | None
    cluster: bool = False  # may see the cluster-wide views

    def can(self, role: str) -> bool:
        return _RANK[self.role] >= _RANK[role]

    @property
    def scoped(self) -> bool:
        """Acts in a namespace (every token but a cluster token)."""
        return self.namespace != CLUSTER


ANONYMOUS = Principal(namespace="default", role="admin", token_id=None, cluster=True)


def missing_role(principal: Principal, role: str) -> str:
    """The message of a 403: the role needed and the one the token has."""
    return f"this needs the {role} role; the token's role is {principal.role}"


def store_of(request: Request) -> ApiStore:
    """The store the app was built over (``app.state.store``)."""
    store: ApiStore = request.app.state.store
    return store


def auth_required(request: Request) -> bool:
    return bool(request.app.state.auth_required)


def principal_of(store: ApiStore, text: str, cache: TokenCache | None = None) -> Principal | None:
    """The principal a token text stands for; None when it is not a valid token."""
    token = verify_token(store, text, cache)
    if token is None:
        return None
    return Principal(
        namespace=token.namespace,
        role=token.role,
        token_id=token.id,
        cluster=token.namespace == CLUSTER,
    )


def principal_for(request: Request, text: str) -> Principal | None:
    """:func:`principal_of` through the app's token cache (``app.state.token_cache``,
    set by ``server.create_app``), if it has one."""
    cache = getattr(request.app.state, "token_cache", None)
    return principal_of(store_of(request), text, cache)


def bearer_text(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer`` header, if any."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def session_text(request: Request) -> str | None:
    """The bearer token if sent, else the session cookie's."""
    return bearer_text(request) or request.cookies.get(COOKIE)


def start_session(response: Response, request: Request, text: str) -> None:
    """Keep a verified token in the session cookie, ``Secure`` when the request came
    over https: directly, or as a trusted proxy reports it (see ``server.create_app``;
    an ``X-Forwarded-Proto`` from any other peer is ignored)."""
    response.set_cookie(
        COOKIE,
        text,
        max_age=COOKIE_MAX_AGE,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def end_session(response: Response, request: Request) -> None:
    response.delete_cookie(
        COOKIE, path="/", httponly=True, samesite="strict", secure=request.url.scheme == "https"
    )


def who(store: ApiStore, principal: Principal) -> str:
    """How a change made by ``principal`` is signed (a skip's "skipped by <who>"): its
    token's label, else ``token <id>``; ``anonymous`` when authentication is off."""
    if principal.token_id is None:
        return "anonymous"
    token = store.get_token(principal.token_id)
    label = None if token is None else token.label
    return label or f"token {principal.token_id}"
