"""The dashboard's CSRF token: what a request riding on the session cookie must also send.

A browser attaches the ``HttpOnly`` session cookie to every request to this server,
including ones a hostile page makes it send (``SameSite=Strict`` stops other sites,
not another port of the same host, such as a page on ``localhost:3000``). So every
state-changing dashboard request authenticated by that cookie — every action, logout
included — must carry the session's CSRF token in the ``X-CSRF-Token`` header, which
only the dashboard's own pages know: they hold it (htmx sends it from the page's
``hx-headers``, the new-job form from its hidden field). A missing or wrong token is
refused 403 and changes nothing.

The token is ``HMAC-SHA256(session token, "cronwheel-csrf")``: a synchronizer token
that needs no server-side state, so it survives restarts and holds across several API
processes; it is different for every session (every token) and cannot be computed
without the cookie's secret, which scripts cannot read. A request with
``Authorization: Bearer`` needs none: a page cannot make a browser send that header
to another origin.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.requests import Request

from cronwheel.web.auth import COOKIE, bearer_text

HEADER = "X-CSRF-Token"
FIELD = "csrf_token"
_LABEL = b"cronwheel-csrf-v1"


def csrf_token(session: str) -> str:
    """The CSRF token of the session whose cookie holds ``session``."""
    return hmac.new(session.encode("utf-8"), _LABEL, hashlib.sha256).hexdigest()


def cookie_session(request: Request) -> str | None:
    """The session cookie's text when it is what authenticates this request (auth on,
    no bearer header); else None."""
    if not request.app.state.auth_required or bearer_text(request):
        return None
    return request.cookies.get(COOKIE) or None


def page_token(request: Request) -> str:
    """The token a page rendered for this request embeds ("" without a cookie session)."""
    session = cookie_session(request)
    return "" if session is None else csrf_token(session)


def csrf_refusal(request: Request) -> str | None:
    """Why this state-changing request is refused for want of the right CSRF token, or
    None when it carries it or needs none (no cookie session)."""
    session = cookie_session(request)
    if session is None:
        return None
    sent = request.headers.get(HEADER)
    if not sent:
        return f"send the page's CSRF token in the {HEADER} header"
    if not hmac.compare_digest(sent.encode("utf-8", "replace"), csrf_token(session).encode()):
        return "the CSRF token does not belong to this session"
    return None
