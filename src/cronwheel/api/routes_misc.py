"""Status, schedule preview, health and readiness, and the offline docs page."""

from __future__ import annotations

import html
from typing import Any, cast

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute

from cronwheel.api.auth import Anyone, store_of
from cronwheel.api.calls import ApiRoute
from cronwheel.api.convert import instant
from cronwheel.api.errors import error_response
from cronwheel.api.routes_retention import retention_doc
from cronwheel.api.schemas import HealthOut, PreviewIn, PreviewOut, StatusOut
from cronwheel.domain.firing import format_instant
from cronwheel.domain.jobs import bind_schedule
from cronwheel.domain.schedules import CronSchedule, next_firings
from cronwheel.errors import CronwheelError, ValidationError
from cronwheel.observability.tzdata import tz_status
from cronwheel.store.calendar_port import calendar_rules_of
from cronwheel.store.protocol import WORKER_ALIVE_WITHIN
from cronwheel.wire import node_clock_to_json

router = APIRouter(tags=["cluster"], route_class=ApiRoute)


def _ts(value: Any) -> str | None:
    return None if value is None else format_instant(value)


@router.get("/v1/status", response_model=StatusOut, summary="Status")
def status(principal: Anyone, request: Request) -> dict[str, Any]:
    """Firings by phase: `queue_depth` (queued: waiting for a worker's claim), `claimed`
    (held by a worker, not started) and `running`; the backlog (queued + claimed +
    running firings per job) of the caller's namespace, its queued firings per task
    no live worker serves (`unserved`), and its quota with what it uses of it (`quota`;
    null for a cluster token). A namespace's token sees its namespace's counts only,
    and no leader or nodes (`cluster` false); a cluster token (or authentication off)
    sees the cluster: every namespace's counts, the leader, epoch and nodes, each node's
    tz database and the cluster's (`tzdata`: who differs from it)."""
    store = store_of(request)
    cluster = principal.cluster
    s = store.status() if cluster else store.status(namespace=principal.namespace)
    lease = s.lease if cluster else None
    nodes = s.nodes
    alive = lease is not None and lease.expires_at > s.now
    scoped = principal.namespace if principal.scoped else None
    return {
        "now": format_instant(s.now),
        "namespace": principal.namespace,
        "cluster": cluster,
        "leader": lease.holder if alive and lease else None,
        "epoch": lease.epoch if lease else None,
        "lease_expires_at": _ts(lease.expires_at) if lease else None,
        "schedulers": sum(1 for n in nodes if n.kind == "scheduler") if cluster else None,
        "workers": sum(1 for n in nodes if n.kind == "worker") if cluster else None,
        "nodes": [
            {
                "id": n.id,
                "kind": n.kind,
                "hostname": n.hostname,
                "pid": n.pid,
                "heartbeat_at": format_instant(n.heartbeat_at),
                "heartbeat_age_s": round((s.now - n.heartbeat_at).total_seconds(), 1),
                "clock": node_clock_to_json(n.clock),
                "tz_source": n.tz_source,
                "tz_version": n.tz_version,
            }
            for n in nodes
        ]
        if cluster
        else None,
        "queue_depth": s.counts.get("queued", 0),
        "claimed": s.counts.get("claimed", 0),
        "running": s.counts.get("running", 0),
        "oldest_queued_due_at": _ts(s.oldest_queued_due_at),
        "backlog": {} if scoped is None else store.job_backlog(scoped, limit=50),
        "unserved": store.unserved_queued(alive_within=WORKER_ALIVE_WITHIN, namespace=scoped),
        "quota": None if scoped is None else store.quota_usage(scoped)[0].to_dict(),
        "tzdata": tz_status(s) if cluster else None,
        "retention": retention_doc(store, principal.namespace),
    }


@router.post("/v1/schedules/preview", response_model=PreviewOut, tags=["schedules"])
def preview(body: PreviewIn, _principal: Anyone, request: Request) -> dict[str, Any]:
    """The next `count` instants of a cron schedule, UTC and local, with DST notes
    (the computation of `cronwheel next`)."""
    store = store_of(request)
    schedule = CronSchedule(
        expr=body.cron,
        tz=body.tz,
        dst_gap=body.dst_gap,
        dst_overlap=body.dst_overlap,
        calendar=body.calendar,
    )
    if schedule.stored_calendar is not None:  # a calendar of the token's namespace
        if not _principal.scoped:
            raise ValidationError(
                "a stored calendar belongs to a namespace: preview it with a namespace token",
                field="calendar",
            )
        try:
            schedule = cast(
                CronSchedule,
                bind_schedule(schedule, _principal.namespace, calendar_rules_of(store)),
            )
        except CronwheelError as exc:
            exc.field = "calendar"
            raise
    after = store.now() if body.after is None else instant(body.after, "after")
    items = []
    for row in next_firings(schedule, after, body.count):
        local = row.utc.astimezone(schedule.zone)
        items.append(
            {
                "utc": format_instant(row.utc),
                "local": local.isoformat(),
                "abbrev": local.tzname(),
                "note": row.note,
            }
        )
    return {
        "cron": schedule.expr,
        "tz": schedule.tz,
        "dst_gap": schedule.gap,
        "dst_overlap": schedule.overlap,
        "calendar": schedule.calendar,
        "items": items,
    }


@router.get("/healthz", response_model=HealthOut, tags=["health"])
async def healthz() -> dict[str, str]:
    """200 while the process runs."""
    return {"status": "ok"}


@router.get("/readyz", response_model=HealthOut, tags=["health"], responses={503: {"model": None}})
def readyz(request: Request) -> Any:
    """200 when the store answers, else 503 `store_unavailable`."""
    try:
        store_of(request).ping()
    except CronwheelError as exc:
        return error_response(503, "store_unavailable", exc.message, headers={"Retry-After": "1"})
    return {"status": "ready"}


@router.get("/docs", include_in_schema=False)
def docs(request: Request) -> HTMLResponse:
    """A plain page (no scripts, no CDN) listing the endpoints; the schema is /openapi.json."""
    rows = []
    for route in request.app.routes:
        if isinstance(route, APIRoute) and route.include_in_schema:
            for method in sorted(route.methods or ()):
                rows.append(
                    f"<tr><td><code>{method}</code></td><td><code>{html.escape(route.path)}"
                    f"</code></td><td>{html.escape(route.summary or route.name)}</td></tr>"
                )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>cronwheel API</title>"
        "</head><body><h1>cronwheel HTTP API</h1><p>OpenAPI 3.1 document: "
        "<a href='/openapi.json'>/openapi.json</a>. Authenticate with "
        "<code>Authorization: Bearer cw_&lt;id&gt;_&lt;secret&gt;</code>.</p>"
        "<table border='1' cellpadding='4'><tr><th>method</th><th>path</th><th>what</th></tr>"
        + "".join(rows)
        + "</table></body></html>"
    )
    return HTMLResponse(page)
