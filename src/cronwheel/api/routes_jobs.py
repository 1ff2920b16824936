"""``/v1/jobs``: create, upsert, list, get, update, pause, resume, trigger, backfill, delete."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import AfterValidator

from cronwheel.api.auth import Principal, Reader, Writer, store_of
from cronwheel.api.batch import batch_out, parse_item, served_once
from cronwheel.api.calls import (
    ApiRoute,
    async_calls_of,
    awaited,
    store_read,
    store_write,
)
from cronwheel.api.convert import (
    AsciiInt,
    decode_cursor,
    encode_cursor,
    ids_of,
    ids_ready,
    instant,
    job_out,
    to_policies,
    to_schedule,
)
from cronwheel.api.guard import SLASH_STAND_IN
from cronwheel.api.schemas import (
    BackfillIn,
    BackfillOut,
    FiringOut,
    JobBody,
    JobCreate,
    JobList,
    JobOut,
    JobPatch,
    JobState,
    TriggerIn,
)
from cronwheel.api.schemas_batch import BatchErrorOut, BatchOut, JobsBatchIn
from cronwheel.api.traced import traced, traced_batch, tracing_on
from cronwheel.domain.batch import BatchResult, run_batch
from cronwheel.domain.calendars import CalendarRules
from cronwheel.domain.jobs import (
    bind_calendar,
    bind_schedule,
    first_fire_window,
    require_served_task,
    spec_first_fire_at,
)
from cronwheel.domain.models import Job, JobSpec
from cronwheel.domain.policies import instants_between
from cronwheel.domain.schedules import LISTING_STEPS, next_after_within
from cronwheel.domain.transitions import StepBudget
from cronwheel.errors import ConflictError, JobNotFoundError, ValidationError
from cronwheel.store.async_port import AsyncCalls
from cronwheel.store.calendar_port import Lookup, calendar_rules_of
from cronwheel.store.protocol import ApiStore
from cronwheel.wire import firing_to_json

UPCOMING = 5
# how far the store's clock may be behind the app's for a creation to be made in one
# statement from the app's clock (``_create_awaited``); further, the store's is read
CLOCK_MARGIN = timedelta(milliseconds=500)

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=ApiRoute)
JobName = Annotated[
    str,
    Path(min_length=1, max_length=200, description="the job's name (URL-encoded)"),
    AfterValidator(lambda name: name.replace(SLASH_STAND_IN, "/")),  # see guard.BodyGuard
]


def _spec(
    store: ApiStore,
    principal: Principal,
    name: str,
    body: JobBody,
    paused: bool,
    lookup: Lookup | None = None,
) -> JobSpec:
    """The job a body describes, its stored calendar's rules bound (422 naming
    ``schedule.calendar`` when the namespace has no such calendar); ``lookup``: the
    calendars' (a batch's, each read once)."""
    spec = JobSpec(
        name=name,
        task=body.task,
        schedule=to_schedule(body.schedule),
        args=tuple(body.args),
        kwargs=body.kwargs,
        namespace=principal.namespace,
        policies=to_policies(body.policies),
        paused=paused,
        start_at=None if body.start_at is None else instant(body.start_at, "start_at"),
        end_at=None if body.end_at is None else instant(body.end_at, "end_at"),
        max_runs=body.max_runs,
    )
    return bind_calendar(spec, lookup or calendar_rules_of(store))


@router.post("", status_code=201, response_model=JobOut, summary="Create a job")
@awaited
async def create_job(body: JobCreate, principal: Writer, request: Request) -> dict[str, Any]:
    """409 `job_exists` when the name is taken."""
    store = store_of(request)
    calls = async_calls_of(request)
    job = None if calls is None else await _create_awaited(calls, store, principal, body, request)
    if job is None:
        job = await store_write(_create, store, principal, body, request)
    return job_out(await ids_ready(request), job, upcoming=UPCOMING)


async def _create_awaited(
    calls: AsyncCalls, store: ApiStore, principal: Principal, body: JobCreate, request: Request
) -> Job | None:
    """The creation in one statement awaited on the loop (store/postgres/aio.py), its
    first instant made from the app's clock (a guess of the store's, checked by the
    statement: domain/jobs.py first_fire_window); or None when it is :func:`_create`'s
    to decide with the store's clock: a stored calendar's rules, a traced write (its
    producer span), a first instant the guess does not settle, the store's clock off
    the guess, a quota to wait for or refuse by, a task no worker serves. Bad input
    fails in :func:`_create` as it always did."""
    if tracing_on(request):
        return None
    try:
        spec = _spec(store, principal, body.name, body, bool(body.paused), _no_lookup)
    except (_NeedsStore, ValidationError):
        return None
    window = first_fire_window(
        spec, request.app.state.clock.now(), margin=CLOCK_MARGIN, allow_past=body.allow_past
    )
    if window is None:
        return None
    first, valid_from = window
    check = not accepted_unread(request, spec.task, body.allow_unknown_task)
    return await calls.create_job(
        spec, first_fire_at=first, valid_from=valid_from, check_task=check
    )


def _create(store: ApiStore, principal: Principal, body: JobCreate, request: Request) -> Job:
    """A creation in the thread pool (or on the loop, as the app runs its store calls)."""
    spec = _spec(store, principal, body.name, body, bool(body.paused))
    require_served(request, spec.task, body.allow_unknown_task)
    first = spec_first_fire_at(spec, store.now(), allow_past=body.allow_past)
    create = partial(store.create_job, first_fire_at=first)
    job: Job = traced(request, spec, create, name="cronwheel.schedule")
    return job


@router.post(
    "/batch",
    response_model=BatchOut,
    summary="Create many jobs",
    responses={409: {"model": BatchErrorOut}, 422: {"model": BatchErrorOut}},
)
def create_jobs_batch(body: JobsBatchIn, principal: Writer, request: Request) -> Response:
    """Each item as `POST /v1/jobs` takes it, all written in one transaction. Each item's
    answer: `status` 201 with its `job`, or the status and `error` of its single request
    (`field` names the item: `items[3].schedule`; a taken name, or one an earlier item
    took: 409 `job_exists`). `all_or_nothing`: one refused item refuses the batch (422,
    or 409 when every refused item is a conflict, listing each) and nothing is written.
    A quota the batch exceeds (`jobs`) refuses it whole."""
    store = store_of(request)
    now = store.now()
    calendars = functools.cache(calendar_rules_of(store))
    served = served_once(request)

    def run(carry: Callable[[JobSpec], JobSpec]) -> BatchResult[Job]:
        def prepare(raw: Any) -> tuple[JobSpec, datetime | None]:
            item = parse_item(JobCreate, raw)
            spec = _spec(store, principal, item.name, item, bool(item.paused), calendars)
            served(spec.task, item.allow_unknown_task)
            return carry(spec), spec_first_fire_at(spec, now, allow_past=item.allow_past)

        return run_batch(
            body.items,
            prepare,
            lambda specs, atomic: store.create_jobs_batch(specs, all_or_nothing=atomic),
            all_or_nothing=body.all_or_nothing,
        )

    result = traced_batch(
        request,
        run,
        name="cronwheel.schedule_many",
        count=len(body.items),
        namespace=principal.namespace,
    )
    ids = ids_of(request)
    return batch_out(result, lambda job: {"job": job_out(ids, job)})


@router.put("/{name}", response_model=JobOut, summary="Create or update a job by name")
@awaited
async def put_job(
    name: JobName, body: JobBody, principal: Writer, request: Request, response: Response
) -> dict[str, Any]:
    """201 when created; 200 otherwise, with `changed` false when the same definition was
    already stored (deploy scripts can PUT on every deploy). `paused` omitted keeps the
    job's state."""
    store = store_of(request)
    namespace = principal.namespace
    existing = await store_read(
        request,
        partial(_find, store, namespace, name),
        lambda reads: _found(reads.get_job(namespace, name)),
    )
    if existing is not None and _unchanged(store, request, principal, name, body, existing):
        # the definition stored as read: nothing to write (a write would find it so
        # again, or a newer one, which this PUT then precedes)
        response.status_code = 200
        return job_out(await ids_ready(request), existing, upcoming=UPCOMING, changed=False)
    return await store_write(_put, store, existing, name, body, principal, request, response)


def _unchanged(
    store: ApiStore,
    request: Request,
    principal: Principal,
    name: str,
    body: JobBody,
    existing: Job,
) -> bool:
    """Whether the body describes ``existing`` as it is, decided without a store call:
    False when that needs one (a stored calendar's rules), or a traced write (its
    producer span) is asked for."""
    if tracing_on(request):
        return False
    if body.paused is not None and body.paused != existing.paused:
        return False
    try:
        spec = _spec(store, principal, name, body, existing.paused, _no_lookup)
    except _NeedsStore:
        return False
    return existing.spec.spec_hash() == spec.spec_hash()


class _NeedsStore(Exception):
    """The body names a stored calendar, whose rules only the store has."""


def _no_lookup(namespace: str, name: str) -> CalendarRules | None:
    raise _NeedsStore(namespace, name)


async def _found(job: Awaitable[Job]) -> Job | None:
    try:
        return await job
    except JobNotFoundError:
        return None


def _put(
    store: ApiStore,
    existing: Job | None,
    name: str,
    body: JobBody,
    principal: Principal,
    request: Request,
    response: Response,
) -> dict[str, Any]:
    """A PUT that may write: in the thread pool (or on the loop, as the app runs its
    store calls)."""
    paused = body.paused if body.paused is not None else bool(existing and existing.paused)
    spec = _spec(store, principal, name, body, paused)
    if existing is None or existing.spec.task != spec.task:
        require_served(request, spec.task, body.allow_unknown_task)
    if existing is not None and existing.spec.spec_hash() == spec.spec_hash():
        first = existing.next_fire_at  # unchanged: an `at` now past is no error
    else:
        first = spec_first_fire_at(spec, store.now(), allow_past=body.allow_past)
    upsert = partial(store.upsert_job, first_fire_at=first)
    job, changed = traced(request, spec, upsert, name="cronwheel.schedule")
    if body.paused is not None and job.paused != body.paused:
        job, changed = store.set_paused(principal.namespace, name, body.paused), True
    response.status_code = 201 if existing is None else 200
    return job_out(ids_of(request), job, upcoming=UPCOMING, changed=changed)


def require_served(request: Request, task: str, allow: bool) -> None:
    """A new job, or a job moved to another task: refuse a task no worker has served
    (422 naming ``task``) unless the body allows it. A task once served stays served
    (the store never forgets one), so the tasks seen served are remembered by the app
    (``app.state.served_tasks``) and a job of one of them needs no store call."""
    if accepted_unread(request, task, allow):
        return
    served = [t.task for t in store_of(request).served_tasks()]
    request.app.state.served_tasks.update(served)
    require_served_task(task, served)


def accepted_unread(request: Request, task: str, allow: bool) -> bool:
    """Whether :func:`require_served` accepts ``task`` with no store call: the body
    allows an unknown task, or the app has seen a worker serve it."""
    known: set[str] = request.app.state.served_tasks
    return allow or task in known


def _find(store: ApiStore, namespace: str, name: str) -> Job | None:
    try:
        return store.get_job(namespace, name)
    except JobNotFoundError:
        return None


@router.get("", response_model=JobList, summary="List jobs")
def list_jobs(
    principal: Reader,
    request: Request,
    state: JobState | None = None,
    task: Annotated[str | None, Query(max_length=200)] = None,
    name_prefix: Annotated[
        str | None, Query(max_length=200, description="literal prefix: % and _ match themselves")
    ] = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[AsciiInt, Query(ge=1, le=500)] = 100,
) -> dict[str, Any]:
    """Ordered by id; pass `next_cursor` back as `cursor` for the next page."""
    ids = ids_of(request)
    after = 0 if cursor is None else decode_cursor(ids, cursor, principal.namespace, "jobs")
    jobs = store_of(request).search_jobs(
        principal.namespace,
        state=state,
        task=task,
        name_prefix=name_prefix,
        after_id=after,
        limit=limit + 1,
    )
    more = len(jobs) > limit
    jobs = jobs[:limit]
    next_cursor = encode_cursor(ids, principal.namespace, "jobs", jobs[-1].id) if more else None
    return {"items": [job_out(ids, j) for j in jobs], "next_cursor": next_cursor}


@router.get("/{name}", response_model=JobOut, summary="Get a job")
def get_job(
    name: JobName,
    principal: Reader,
    request: Request,
    upcoming: Annotated[
        AsciiInt, Query(ge=0, le=100, description="next firing instants")
    ] = UPCOMING,
) -> dict[str, Any]:
    """Includes `next_fire_times`: the next instants in UTC and in the job's zone."""
    job = store_of(request).get_job(principal.namespace, name)
    return job_out(ids_of(request), job, upcoming=upcoming)


@router.patch("/{name}", response_model=JobOut, summary="Update some fields of a job")
def patch_job(name: JobName, body: JobPatch, principal: Writer, request: Request) -> dict[str, Any]:
    store = store_of(request)
    job = store.get_job(principal.namespace, name)
    old = job.spec
    schedule = old.schedule
    if body.schedule is not None:
        schedule = bind_schedule(
            to_schedule(body.schedule), principal.namespace, calendar_rules_of(store)
        )
    spec = JobSpec(
        name=name,
        task=old.task if body.task is None else body.task,
        schedule=schedule,
        args=old.args if body.args is None else tuple(body.args),
        kwargs=old.kwargs if body.kwargs is None else body.kwargs,
        namespace=principal.namespace,
        policies=to_policies(body.policies, old.policies),
        paused=job.paused,
        start_at=old.start_at,
        end_at=old.end_at,
        max_runs=old.max_runs,
    )
    if spec.task != old.task:
        require_served(request, spec.task, body.allow_unknown_task)
    first = job.next_fire_at
    if schedule != old.schedule:
        first = spec_first_fire_at(spec, store.now(), allow_past=body.allow_past)
    job, changed = store.upsert_job(spec, first_fire_at=first)
    if body.paused is not None and body.paused != job.paused:
        job, changed = store.set_paused(principal.namespace, name, body.paused), True
    return job_out(ids_of(request), job, upcoming=UPCOMING, changed=changed)


@router.post("/{name}/pause", response_model=JobOut, summary="Pause a job")
def pause_job(name: JobName, principal: Writer, request: Request) -> dict[str, Any]:
    return job_out(ids_of(request), store_of(request).set_paused(principal.namespace, name, True))


@router.post("/{name}/resume", response_model=JobOut, summary="Resume a job")
def resume_job(name: JobName, principal: Writer, request: Request) -> dict[str, Any]:
    """Missed instants follow the job's misfire policy."""
    job = store_of(request).set_paused(principal.namespace, name, False)
    return job_out(ids_of(request), job)


@router.post("/{name}/trigger", status_code=201, response_model=FiringOut, summary="Fire now")
def trigger_job(
    name: JobName, principal: Writer, request: Request, body: TriggerIn | None = None
) -> dict[str, Any]:
    """A firing scheduled for now (the job's cursor does not move); 409 `conflict` if the
    job already has a firing at this very instant. `overlap` overrides the job's overlap
    policy for this firing (e.g. `allow` to run it even while another one runs)."""
    store = store_of(request)
    overlap = None if body is None else body.overlap
    added = store.add_firings(
        principal.namespace, name, [store.now()], note="trigger", overlap=overlap
    )
    if not added.inserted:
        raise ConflictError("the job already has a firing at this instant", field="name")
    return firing_to_json(ids_of(request).firing(added.inserted[0]))


@router.post("/{name}/backfill", response_model=BackfillOut, summary="Fire a past range")
def backfill_job(
    name: JobName, body: BackfillIn, principal: Writer, request: Request
) -> dict[str, Any]:
    """One firing per schedule instant in [start, end] (both in the past; at most 1000);
    instants that already have a firing are counted in `duplicates` and left alone."""
    store = store_of(request)
    start, end = instant(body.start, "start"), instant(body.end, "end")
    job = store.get_job(principal.namespace, name)
    now = store.now()
    if end > now:
        raise ValidationError(
            "backfill covers past instants only: end is in the future", field="end"
        )
    budget = StepBudget(LISTING_STEPS)  # the whole range's work, whatever its length
    instants = instants_between(next_after_within(job.spec.schedule, budget), start, end)
    added = store.add_firings(
        principal.namespace, name, instants, note="backfill", overlap=body.overlap
    )
    return {
        "requested": len(instants),
        "inserted": len(added.inserted),
        "duplicates": added.duplicates,
        "firing_ids": [ids_of(request).encode("firing", f.id) for f in added.inserted],
    }


@router.delete("/{name}", status_code=204, summary="Delete a job and its firings")
def delete_job(name: JobName, principal: Writer, request: Request) -> Response:
    store_of(request).delete_job(principal.namespace, name)
    return Response(status_code=204)
