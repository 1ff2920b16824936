"""``/v1/calendars``: the token's namespace's calendars, by name. Reading needs a
namespace token; writing one (which re-plans every job naming it) the ``admin`` role, as
the namespace's other shared settings (its quota) do. A calendar a job names cannot be
deleted (409 ``calendar_in_use`` naming the jobs)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response

from cronwheel.api.auth import Principal, Reader, Writer, store_of
from cronwheel.api.errors import HttpError
from cronwheel.api.schemas_calendars import CalendarIn, CalendarList, CalendarOut
from cronwheel.domain.calendars import CalendarRecord, CalendarRules, check_stored_name
from cronwheel.errors import CronwheelError
from cronwheel.store.calendar_port import no_calendar
from cronwheel.store.protocol import ApiStore

router = APIRouter(prefix="/v1/calendars", tags=["calendars"])
CalendarName = Annotated[str, Path(min_length=1, max_length=64, description="lower case")]


def calendar_out(
    store: ApiStore, record: CalendarRecord, replanned: tuple[str, ...] | None = None
) -> dict[str, Any]:
    return record.to_dict() | {
        "jobs": store.calendar_jobs(record.namespace, record.name),
        "replanned": None if replanned is None else list(replanned),
    }


def _admin(principal: Principal, doing: str) -> None:
    if not principal.can("admin"):
        raise HttpError(403, "forbidden", f"{doing}: this needs the admin role")


@router.get("", response_model=CalendarList, summary="List the namespace's calendars")
def list_calendars(principal: Reader, request: Request) -> dict[str, Any]:
    store = store_of(request)
    items = store.list_calendars(principal.namespace)
    return {"items": [calendar_out(store, c) for c in items]}


@router.get("/{name}", response_model=CalendarOut, summary="Get a calendar")
def get_calendar(name: CalendarName, principal: Reader, request: Request) -> dict[str, Any]:
    store = store_of(request)
    record = store.get_calendar(principal.namespace, check_stored_name(name))
    if record is None:
        raise no_calendar(principal.namespace, name)
    return calendar_out(store, record)


@router.put("/{name}", response_model=CalendarOut, summary="Create or replace a calendar")
def put_calendar(
    name: CalendarName, body: CalendarIn, principal: Writer, request: Request, response: Response
) -> dict[str, Any]:
    """`admin` only. 201 when created. Every job naming the calendar gets the new rules
    and its next instant searched again (`replanned`); a change that would leave one
    of them without a firing is 422 naming it, and nothing changes."""
    _admin(principal, "changing a calendar")
    check_stored_name(name)
    try:
        rules = CalendarRules.from_dict(body.model_dump())
    except CronwheelError as exc:
        exc.field = exc.field or "body"
        raise
    store = store_of(request)
    existed = store.get_calendar(principal.namespace, name) is not None
    change = store.set_calendar(principal.namespace, name, rules)
    response.status_code = 200 if existed else 201
    return calendar_out(store, change.calendar, change.replanned)


@router.delete("/{name}", status_code=204, summary="Delete a calendar")
def delete_calendar(name: CalendarName, principal: Writer, request: Request) -> Response:
    """`admin` only. 409 `calendar_in_use` naming the jobs that name it."""
    _admin(principal, "deleting a calendar")
    store_of(request).delete_calendar(principal.namespace, check_stored_name(name))
    return Response(status_code=204)
