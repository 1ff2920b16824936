"""The dashboard's routes: pages at ``/`` and ``/ui/...``, live fragments at ``/ui/f/...``
(polled by htmx every few seconds and swapped in place), ``/metrics``, and the
static files (htmx, vendored; CSS; one small script) at ``/ui/static``.

Who may look: with authentication off (a loopback ``cronwheel api``) everyone, as
the API's anonymous ``admin`` of namespace ``default``, who also sees the cluster
(leader, nodes, every namespace's counts). With it on, a token — from
``Authorization: Bearer`` or from the login form, which keeps it in an
``HttpOnly; SameSite=Strict`` cookie — and the pages show the token's namespace
only, every count and chart included. A cluster token sees the all-namespace
overview, the leader and the nodes, and no job or firing. ``/metrics`` needs an
``admin`` token of a namespace (that namespace's series, see
``observability.scoped``) or a cluster token (every series).

Every value reaches HTML through Jinja2 autoescaping; names are wrapped in
``<bdi>`` so right-to-left overrides cannot reorder the page around them; the
Content-Security-Policy allows scripts and styles from this origin only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, PackageLoader, StrictUndefined
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from cronwheel.domain.error_text import error_summary
from cronwheel.domain.models import Firing, FiringId, Job, JobId
from cronwheel.domain.numbers import parse_number
from cronwheel.domain.skips import occurrences_to_skip, skip_reason
from cronwheel.errors import NotFoundError, ValidationError
from cronwheel.observability.cluster import ClusterCollector
from cronwheel.observability.scoped import NamespaceView
from cronwheel.web.auth import (
    ANONYMOUS,
    Principal,
    auth_required,
    end_session,
    missing_role,
    principal_for,
    session_text,
    start_session,
    store_of,
)
from cronwheel.web.auth import who as signer
from cronwheel.web.csrf import HEADER, csrf_refusal, page_token
from cronwheel.web.errors import error_body
from cronwheel.web.ids import ids_for, internal_id

from . import charts, data

STATIC = Path(__file__).parent / "static"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

router = APIRouter(include_in_schema=False)
_env = Environment(
    loader=PackageLoader("cronwheel.dashboard", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _query(state: str | None, job: int | None) -> str:
    return urlencode([(k, v) for k, v in (("state", state), ("job", job)) if v is not None])


_env.globals["query"] = _query


def mount(app: FastAPI) -> None:
    """Add the dashboard and ``/metrics`` to the API app (``server.create_app`` does)."""
    collector = ClusterCollector(app.state.store)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    app.state.metrics_registry = registry
    app.state.metrics_collector = collector
    from .new_job import router as new_job_router  # the new-job form (policy table)

    app.include_router(new_job_router)  # before /ui/jobs/{job_id}: "new" is no job id
    app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="dashboard-static")


# -- who is looking ---------------------------------------------------------------------------
def viewer(request: Request) -> Principal | None:
    """The principal of this request, or None when a token is needed and missing/invalid."""
    if not auth_required(request):
        return ANONYMOUS
    text = session_text(request)
    if not text:
        return None
    return principal_for(request, text)


def _login_needed(request: Request) -> Response:
    if request.headers.get("hx-request"):
        # a polled fragment after the cookie expired: send the whole page to the login form
        return Response(status_code=200, headers={"HX-Redirect": "/ui/login", **SECURITY_HEADERS})
    return RedirectResponse("/ui/login", status_code=303, headers=SECURITY_HEADERS)


def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = _env.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def _base(request: Request, who: Principal) -> dict[str, Any]:
    return {
        "namespace": who.namespace if who.scoped else None,
        "cluster_token": not who.scoped,
        "auth": bool(request.app.state.auth_required),
        "csrf": page_token(request),
    }


def csrf_refused(request: Request) -> Response | None:
    """403 when a cookie-session request lacks its CSRF token (``web.csrf``), else None."""
    reason = csrf_refusal(request)
    if reason is None:
        return None
    return JSONResponse(error_body("forbidden", reason, HEADER), 403, headers=SECURITY_HEADERS)


def _overview(request: Request, who: Principal) -> data.Overview:
    """The viewer's overview: its namespace's, or the cluster's for a viewer who may
    see it (every namespace's for a cluster token)."""
    namespace = who.namespace if who.scoped else None
    return data.overview(store_of(request), namespace, cluster=who.cluster)


def _not_found(request: Request, who: Principal, what: str) -> HTMLResponse:
    return render("message.html", 404, message=f"No such {what}.", **_base(request, who))


def _id(text: str, field: str) -> int | None:
    """An id from a path or query (ASCII digits only, domain.numbers), else None."""
    try:
        return parse_number(text, field, low=1)
    except ValidationError:
        return None


def _filters(request: Request) -> tuple[str | None, int | None] | None:
    state = request.query_params.get("state") or None
    job_text = request.query_params.get("job") or None
    if state is not None and state not in data.FILTER_STATES:
        return None
    job_id = None if job_text is None else _id(job_text, "job")
    if job_text is not None and job_id is None:
        return None
    return state, job_id


def _bad_filter(request: Request, who: Principal) -> HTMLResponse:
    states = ", ".join(data.FILTER_STATES)
    return render(
        "message.html",
        400,
        message=f"Bad filter: state must be one of {states}; job must be a job id.",
        **_base(request, who),
    )


# -- pages ------------------------------------------------------------------------------------
@router.get("/")
def index(request: Request) -> Response:
    who = viewer(request)
    if who is None:
        return _login_needed(request)
    filters = _filters(request)
    if filters is None:
        return _bad_filter(request, who)
    state, job_id = filters
    store = store_of(request)
    rows, more = data.jobs(store, who.namespace)
    return render(
        "index.html",
        ov=_overview(request, who),
        jobs=rows,
        more_jobs=more,
        firings=data.firings(
            store, who.namespace, state=state, job_id=_own_job(request, who, job_id)
        ),
        states=data.FILTER_STATES,
        state=state,
        job_filter=job_id,
        charts=charts.charts(store, who.namespace if who.scoped else None),
        **_base(request, who),
    )


def _own_job(request: Request, who: Principal, job_id: int | None) -> int | None:
    """The store's id of the job shown as ``job_id`` if that job is in the viewer's
    namespace; else -1 (shows nothing)."""
    if job_id is None:
        return None
    store = store_of(request)
    internal = internal_id(store, "job", job_id)
    try:
        job = None if internal is None else store.get_job_by_id(JobId(internal))
    except NotFoundError:
        job = None
    return job.id if job is not None and job.namespace == who.namespace else -1


def _job_of(request: Request, who: Principal, job_id: str) -> Job | None:
    """The viewer's job shown as ``job_id``; None for any other text."""
    store = store_of(request)
    internal = internal_id(store, "job", job_id)
    try:
        job = None if internal is None else store.get_job_by_id(JobId(internal))
    except NotFoundError:
        return None
    return job if job is not None and job.namespace == who.namespace else None


@router.get("/ui/jobs/{job_id}")
def job_page(request: Request, job_id: str) -> Response:
    who = viewer(request)
    if who is None:
        return _login_needed(request)
    hours_text = request.query_params.get("hours", "1")
    job = _job_of(request, who, job_id)
    if job is None or hours_text not in ("1", "6", "24", "168"):
        return _not_found(request, who, "job")
    store = store_of(request)
    detail = data.job_detail(store, job, hours=int(hours_text))
    firings = data.firings(store, who.namespace, state=None, job_id=job.id)
    return render(
        "job.html",
        d=detail,
        firings=firings,
        states=data.FILTER_STATES,
        state=None,
        job_filter=ids_for(store).encode("job", job.id),
        can_write=who.can("write"),
        **_base(request, who),
    )


def _from_page(request: Request) -> bool:
    """A state-changing request came from this dashboard's own page: htmx's
    ``HX-Request`` header (a cross-site form cannot send one, and a cross-site script
    would need a CORS preflight that is never granted). Besides, the browser guard
    refuses a cross-site ``Origin``/``Sec-Fetch-Site`` and a cookie session needs its
    CSRF token (``web.csrf``)."""
    return request.headers.get("hx-request") == "true"


@router.post("/ui/jobs/{job_id}/skip-next")
def skip_next(request: Request, job_id: str) -> Response:
    """The job page's "skip next" button: its next occurrence is skipped (signed by the
    viewer's token, as the API's skip), then the page reloads. Needs the write role."""
    who = viewer(request)
    if who is None:
        return _login_needed(request)
    if (refused := csrf_refused(request)) is not None:
        return refused
    if not _from_page(request):
        return JSONResponse(
            error_body("forbidden", "send it from the dashboard's own page", "HX-Request"), 403
        )
    if not who.can("write"):
        message = f"skipping: {missing_role(who, 'write')}"
        return JSONResponse(error_body("forbidden", message, "role"), 403)
    store = store_of(request)
    job = _job_of(request, who, job_id)
    if job is None:
        return JSONResponse(error_body("not_found", "no such job", "job_id"), 404)
    try:
        instants = occurrences_to_skip(job.spec, now=store.now(), next_n=1)
    except ValidationError as exc:
        return JSONResponse(error_body("invalid_input", exc.message, exc.field), 422)
    reason = skip_reason(signer(store, who), "from the dashboard")
    store.skip_occurrences(job.namespace, job.name, instants, reason)
    return Response(status_code=204, headers={"HX-Refresh": "true", **SECURITY_HEADERS})


def _own_firing(request: Request, who: Principal, firing_id: str) -> Firing | None:
    """The viewer's firing shown as ``firing_id`` (as the store has it); else None."""
    store = store_of(request)
    internal = internal_id(store, "firing", firing_id)
    try:
        firing = None if internal is None else store.get_firing(FiringId(internal))
    except NotFoundError:
        return None
    return firing if firing is not None and firing.namespace == who.namespace else None


@router.get("/ui/firings/{firing_id}")
def firing_page(request: Request, firing_id: str) -> Response:
    who = viewer(request)
    if who is None:
        return _login_needed(request)
    firing = _own_firing(request, who, firing_id)
    if firing is None:
        return _not_found(request, who, "firing")
    store = store_of(request)
    full = who.can("write")  # a read token sees errors' summaries (domain/error_text.py)
    attempts = data.attempts(store, firing, full=full)
    error = firing.error if full else error_summary(firing.error)
    steps = data.timeline(firing)
    shown = ids_for(store).firing(firing)
    return render(
        "firing.html",
        f=shown,
        f_error=error,
        steps=steps,
        attempts=attempts,
        **_base(request, who),
    )


# -- fragments (htmx polls these) ----------------------------------------------------------------
@router.get("/ui/f/overview")
def overview_fragment(request: Request) -> Response:
    who = viewer(request)
    if who is None:
        return _login_needed(request)
    return render("overview.html", ov=_overview(request, who))


@router.get("/ui/f/nodes")
def nodes_fragment(request: Request) -> Response:
    who = viewer(request)
    if who is None:
        return _login_needed(request)
    return render("nodes.html", ov=_overview(request, who))


@router.get("/ui/f/jobs")
def jobs_fragment(request: Request) -> Response:
    who = viewer(request)
    if who is None:
        return _login_needed(request)
    rows, more = data.jobs(store_of(request), who.namespace)
    return render("jobs.html", jobs=rows, more_jobs=more)


@router.get("/ui/f/firings")
def firings_fragment(request: Request) -> Response:
    who = viewer(request)
    if who is None:
        return _login_needed(request)
    filters = _filters(request)
    if filters is None:
        return _bad_filter(request, who)
    state, job_id = filters
    rows = data.firings(
        store_of(request), who.namespace, state=state, job_id=_own_job(request, who, job_id)
    )
    return render(
        "firings.html", firings=rows, states=data.FILTER_STATES, state=state, job_filter=job_id
    )


@router.get("/ui/f/lateness")
def lateness_fragment(request: Request) -> Response:
    who = viewer(request)
    if who is None:
        return _login_needed(request)
    namespace = who.namespace if who.scoped else None
    return render("lateness.html", charts=charts.charts(store_of(request), namespace))


@router.get("/ui/f/firings/{firing_id}")
def firing_fragment(request: Request, firing_id: str) -> Response:
    who = viewer(request)
    if who is None:
        return _login_needed(request)
    firing = _own_firing(request, who, firing_id)
    if firing is None:
        return _not_found(request, who, "firing")
    store = store_of(request)
    full = who.can("write")
    attempts = data.attempts(store, firing, full=full)
    error = firing.error if full else error_summary(firing.error)
    shown = ids_for(store).firing(firing)
    return render(
        "timeline.html", f=shown, f_error=error, steps=data.timeline(firing), attempts=attempts
    )


# -- login --------------------------------------------------------------------------------------
@router.get("/ui/login")
def login_page(request: Request) -> Response:
    if not request.app.state.auth_required:
        return RedirectResponse("/", status_code=303)
    return render("login.html", namespace=None, auth=True, csrf="")


@router.post("/ui/login")
async def login(request: Request) -> Response:
    """Body ``{"token": "cw_..."}`` (JSON, as every body here); sets the session cookie."""
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        body = {}
    text = body.get("token") if isinstance(body, dict) else None
    if not isinstance(text, str) or not text.strip():
        return JSONResponse(error_body("invalid_input", "send the token", "token"), 422)
    text = text.strip()
    if principal_for(request, text) is None:
        return JSONResponse(error_body("unauthorized", "the token is not valid", "token"), 401)
    response = JSONResponse({"status": "ok"}, headers=SECURITY_HEADERS)
    start_session(response, request, text)
    return response


@router.post("/ui/logout")
def logout(request: Request) -> Response:
    """Ends the cookie session; like every action of a cookie session it needs the
    session's CSRF token (a hostile page must not log the viewer out)."""
    if (refused := csrf_refused(request)) is not None:
        return refused
    response = Response(status_code=204, headers={"HX-Redirect": "/ui/login", **SECURITY_HEADERS})
    end_session(response, request)
    return response


# -- Prometheus -----------------------------------------------------------------------------------
@router.get("/metrics")
def metrics(request: Request) -> Response:
    """The metrics in the Prometheus text format (see observability.cluster): every
    series for a cluster token (or with authentication off); for a namespace's
    ``admin`` token its namespace's series only (observability.scoped)."""
    registry: CollectorRegistry = request.app.state.metrics_registry
    if not request.app.state.auth_required:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
    who = viewer(request) if request.headers.get("authorization") else None
    if who is None:
        return JSONResponse(
            error_body("unauthorized", "/metrics needs a bearer token", "Authorization"),
            401,
            headers={"WWW-Authenticate": 'Bearer realm="cronwheel"'},
        )
    if who.cluster:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
    if not who.can("admin"):
        message = f"/metrics: {missing_role(who, 'admin')}"
        return JSONResponse(error_body("forbidden", message, "Authorization"), 403)
    scoped = CollectorRegistry(auto_describe=False)
    scoped.register(NamespaceView(request.app.state.metrics_collector, who.namespace))
    return Response(generate_latest(scoped), media_type=CONTENT_TYPE_LATEST)
