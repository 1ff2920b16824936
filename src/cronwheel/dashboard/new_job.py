"""The dashboard's new-job form: ``GET /ui/jobs/new`` shows it, ``POST /ui/jobs/new``
creates the job in the viewer's namespace (a ``write`` token); the page then opens it.

Its policy fields are made from the domain's policy table (``domain/policy_table.py``),
as the CLI's ``jobs add`` flags and the API's ``policies`` fields are. A bad value is
a 422 naming the field (shown beside the form), and stores nothing; a task
no worker has ever served is refused unless "allow unknown task" is ticked, as the API
and the CLI do.

The page's script posts the fields as JSON (as the login form does), to this origin
only: the browser guard refuses a cross-site ``Origin``/``Sec-Fetch-Site``, and a cookie
session must send its CSRF token (the form's hidden field, sent as ``X-CSRF-Token``).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from cronwheel.domain import schedules
from cronwheel.domain.jobs import (
    bind_calendar,
    build_policies,
    require_served_task,
    spec_first_fire_at,
)
from cronwheel.domain.models import JobSpec
from cronwheel.domain.policy_table import POLICY_TABLE, Policy, policies_from_text
from cronwheel.errors import ConflictError, CronwheelError, ValidationError
from cronwheel.store.calendar_port import calendar_rules_of
from cronwheel.web.auth import Principal, missing_role, store_of
from cronwheel.web.csrf import page_token
from cronwheel.web.errors import error_body
from cronwheel.web.ids import ids_for

from .views import SECURITY_HEADERS, csrf_refused, render, viewer

router = APIRouter(include_in_schema=False)

SCHEDULE_KINDS = ("cron", "every", "at", "now")
_KNOWN_FIELDS = frozenset(
    (
        "name",
        "task",
        "kind",
        "schedule",
        "tz",
        "calendar",
        "allow_unknown_task",
        *(p.name for p in POLICY_TABLE),
    )
)


def status_of(exc: CronwheelError) -> int:
    """422 for a bad field, 409 for a name taken (the API's codes)."""
    return 409 if isinstance(exc, ConflictError) else 422


def form_fields() -> list[dict[str, Any]]:
    """The policy inputs of the form, one per row of the policy table."""
    return [_field(p) for p in POLICY_TABLE]


def _field(p: Policy) -> dict[str, Any]:
    return {
        "name": p.name,
        "label": p.name.replace("_", " "),
        "help": f"{p.help} ({p.unit})",
        "choices": list(p.choices),
        "placeholder": p.shown_default,
    }


@router.get("/ui/jobs/new")
def new_job_page(request: Request) -> Response:
    who = viewer(request)
    if who is None:
        return RedirectResponse("/ui/login", status_code=303, headers=SECURITY_HEADERS)
    return render(
        "new_job.html",
        fields=form_fields(),
        kinds=SCHEDULE_KINDS,
        namespace=who.namespace if who.scoped else None,
        auth=bool(request.app.state.auth_required),
        csrf=page_token(request),
    )


@router.post("/ui/jobs/new")
async def create_from_form(request: Request) -> Response:
    """Body: the form's fields as a JSON object of strings (dashboard.js sends it, as
    the login form does: every body here is JSON). 201 ``{"id", "url"}``; a bad field
    is 422 in the API's error shape, naming it."""
    who = viewer(request)
    if who is None:
        return JSONResponse(error_body("unauthorized", "log in first", "token"), 401)
    if (refused := csrf_refused(request)) is not None:
        return refused
    if not who.scoped:
        message = "a cluster token adds no jobs: this needs a namespace token"
        return JSONResponse(error_body("forbidden", message, "token"), 403)
    if not who.can("write"):
        message = f"adding a job: {missing_role(who, 'write')}"
        return JSONResponse(error_body("forbidden", message, "role"), 403)
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        body = None
    if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values()):
        return JSONResponse(error_body("invalid_input", "send the form's fields as text"), 422)
    try:
        job_id = _create(request, who, body)
    except CronwheelError as exc:
        field = exc.field or "form"
        return JSONResponse(error_body(exc.code, exc.message, field), status_of(exc))
    url = f"/ui/jobs/{job_id}"
    return JSONResponse({"id": job_id, "url": url}, 201, headers=SECURITY_HEADERS)


def _create(request: Request, who: Principal, values: dict[str, str]) -> int:
    """Validate every field (ValidationError naming the first bad one), then store."""
    for key in values:
        if key not in _KNOWN_FIELDS:
            raise ValidationError("is not a field of the form", field=key)
    name = values.get("name", "")
    task = values.get("task", "").strip()
    kind = values.get("kind", "")
    text = values.get("schedule", "").strip()
    if kind not in SCHEDULE_KINDS:
        raise ValidationError(f"must be one of {', '.join(SCHEDULE_KINDS)}", field="kind")
    if kind != "now" and not text:
        raise ValidationError(f"give the {kind} schedule", field="schedule")
    calendar = values.get("calendar", "").strip() or None
    if calendar is not None and kind != "cron":
        raise ValidationError("a calendar applies to a cron schedule only", field="calendar")
    if kind == "cron":
        schedule: schedules.Schedule = schedules.cron(
            text, values.get("tz") or "UTC", calendar=calendar
        )
    elif kind == "every":
        schedule = schedules.every(text)
    elif kind == "at":
        schedule = schedules.at(text)
    else:
        schedule = schedules.now()
    given = policies_from_text({p.name: values.get(p.name, "") for p in POLICY_TABLE})
    spec = JobSpec(
        name=name,
        task=task,
        schedule=schedule,
        namespace=who.namespace,
        policies=build_policies(**given),
    )
    store = store_of(request)
    try:
        spec = bind_calendar(spec, calendar_rules_of(store))
    except CronwheelError as exc:
        exc.field = "calendar"  # the form's input
        raise
    if values.get("allow_unknown_task") != "on":
        require_served_task(spec.task, [t.task for t in store.served_tasks()])
    job = store.create_job(spec, first_fire_at=spec_first_fire_at(spec, store.now()))
    return ids_for(store).encode("job", job.id)  # the shown id, as in the API
