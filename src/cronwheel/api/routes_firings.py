"""Firings: the namespace's list, per-job history, one firing with its attempts, cancel,
retry, and immediate one-off work."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import partial
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Header, Path, Query, Request, Response

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
    query_instant,
)
from cronwheel.api.errors import HttpError
from cronwheel.api.routes_jobs import JobName, accepted_unread, require_served
from cronwheel.api.schemas import CancelOut, EnqueueIn, FiringList, FiringOut, FiringStateName
from cronwheel.api.schemas_batch import (
    KEY_FORMAT,
    KEY_RE,
    BatchErrorOut,
    BatchOut,
    EnqueueBatchItem,
    FiringsBatchIn,
)
from cronwheel.api.traced import traced, traced_batch, tracing_on
from cronwheel.domain.attempts import Attempt
from cronwheel.domain.batch import BatchResult, run_batch
from cronwheel.domain.error_text import error_summary
from cronwheel.domain.firing import FiringState
from cronwheel.domain.ids import IdCodec
from cronwheel.domain.models import Firing, FiringId, JobSpec
from cronwheel.domain.results import CancelResult
from cronwheel.domain.schedules import NowSchedule
from cronwheel.errors import FiringNotFoundError
from cronwheel.store.async_port import AsyncCalls
from cronwheel.store.bulk_port import KeyRef
from cronwheel.store.protocol import ApiStore
from cronwheel.web.ids import internal_id
from cronwheel.wire import cancel_to_json, firing_to_json

T = TypeVar("T")

router = APIRouter(tags=["firings"], route_class=ApiRoute)
FiringIdPath = Annotated[AsciiInt, Path(ge=1, le=2**63 - 1, description="the firing's id")]
# FiringIdPath is the shown id (domain/ids.py): _firing turns it into the store's.


def _firing(store: ApiStore, principal: Principal, firing_id: int) -> Firing:
    """The firing of the shown id ``firing_id`` (as the store has it) if it belongs to
    the caller's namespace; else the same 404 as a firing that does not exist (no
    existence oracle)."""
    return _owned(store, principal, firing_id, lambda i: (store.get_firing(i), None))[0]


def _owned(
    store: ApiStore,
    principal: Principal,
    firing_id: int,
    read: Callable[[FiringId], tuple[Firing, T]],
) -> tuple[Firing, T]:
    """``read`` of the firing of the shown id ``firing_id`` (the firing and what comes
    with it) if it belongs to the caller's namespace; else the 404 of ``_firing``."""
    internal = internal_id(store, "firing", firing_id)
    try:
        found = None if internal is None else read(FiringId(internal))
    except FiringNotFoundError:
        found = None
    return _mine(found, principal, firing_id)


def _mine(found: tuple[Firing, T] | None, principal: Principal, firing_id: int) -> tuple[Firing, T]:
    """``found`` if its firing belongs to the caller's namespace; else the 404 of
    ``_firing``, naming the shown id."""
    if found is None or found[0].namespace != principal.namespace:
        raise FiringNotFoundError(f"no firing with id {firing_id}", field="firing_id")
    return found


@contextmanager
def _gone_as(firing_id: int) -> Iterator[None]:
    """A firing deleted between the check and the change: the 404 names the shown id
    (the store's message names its own)."""
    try:
        yield
    except FiringNotFoundError:
        raise FiringNotFoundError(f"no firing with id {firing_id}", field="firing_id") from None


def _retried(store: ApiStore, firing: Firing) -> list[Attempt] | None:
    """A retried firing's attempts: its lateness is its first attempt's, which its row
    (holding its last start) cannot tell; None for the others (the row tells)."""
    return store.list_attempts(firing.id) if firing.attempt > 1 else None


def _shown(principal: Principal, doc: dict[str, Any]) -> dict[str, Any]:
    """A read token sees each error's summary line only; the details (remote responses,
    command output, tracebacks) are for the write and admin roles (domain/error_text.py)."""
    if not principal.can("write"):
        doc["error"] = error_summary(doc["error"])
        for attempt in doc.get("attempts", ()):
            attempt["error"] = error_summary(attempt["error"])
    return doc


def _firing_docs(
    store: ApiStore, principal: Principal, ids: IdCodec, firings: list[Firing]
) -> list[dict[str, Any]]:
    return [
        _shown(principal, firing_to_json(ids.firing(f), attempts=_retried(store, f)))
        for f in firings
    ]


def _cancel_doc(store: ApiStore, ids: IdCodec, result: CancelResult) -> dict[str, Any]:
    shown = CancelResult(outcome=result.outcome, firing=ids.firing(result.firing))
    return cancel_to_json(shown, attempts=_retried(store, result.firing))


@router.get("/v1/firings", response_model=FiringList, summary="List firings")
def list_firings(
    principal: Reader,
    request: Request,
    state: Annotated[list[FiringStateName] | None, Query(max_length=9)] = None,
    job: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    scheduled_from: Annotated[str | None, Query(max_length=40)] = None,
    scheduled_to: Annotated[str | None, Query(max_length=40)] = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[AsciiInt, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """The namespace's firings, newest first (by id): `state` repeatable, `job` a job's
    exact name, `scheduled_from <= scheduled_for < scheduled_to` (RFC 3339); pass
    `next_cursor` back as `cursor` for the next page (null: the last one)."""
    store, ids = store_of(request), ids_of(request)
    before = None if cursor is None else decode_cursor(ids, cursor, principal.namespace, "firings")
    firings = store.list_firings(
        namespace=principal.namespace,
        job_name=job,
        states=[FiringState(s) for s in state] if state else None,
        scheduled_from=query_instant(scheduled_from, "scheduled_from"),
        scheduled_to=query_instant(scheduled_to, "scheduled_to"),
        before_id=before,
        limit=limit + 1,
    )
    more = len(firings) > limit
    firings = firings[:limit]
    next_cursor = (
        encode_cursor(ids, principal.namespace, "firings", firings[-1].id) if more else None
    )
    return {"items": _firing_docs(store, principal, ids, firings), "next_cursor": next_cursor}


@router.get("/v1/jobs/{name}/firings", response_model=FiringList, summary="A job's firings")
def list_job_firings(
    name: JobName,
    principal: Reader,
    request: Request,
    state: Annotated[list[FiringStateName] | None, Query(max_length=9)] = None,
    scheduled_from: Annotated[str | None, Query(max_length=40)] = None,
    scheduled_to: Annotated[str | None, Query(max_length=40)] = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[AsciiInt, Query(ge=1, le=500)] = 100,
) -> dict[str, Any]:
    """Newest first; `state` repeatable; `scheduled_from <= scheduled_for < scheduled_to`."""
    store, ids = store_of(request), ids_of(request)
    job = store.get_job(principal.namespace, name)
    kind = f"firings:{ids.encode('job', job.id)}"
    before = None if cursor is None else decode_cursor(ids, cursor, principal.namespace, kind)
    firings = store.list_job_firings(
        job.id,
        states=[FiringState(s) for s in state] if state else None,
        scheduled_from=query_instant(scheduled_from, "scheduled_from"),
        scheduled_to=query_instant(scheduled_to, "scheduled_to"),
        before_id=before,
        limit=limit + 1,
    )
    more = len(firings) > limit
    firings = firings[:limit]
    next_cursor = encode_cursor(ids, principal.namespace, kind, firings[-1].id) if more else None
    return {"items": _firing_docs(store, principal, ids, firings), "next_cursor": next_cursor}


@router.get("/v1/firings/{firing_id}", response_model=FiringOut, summary="Get a firing")
@awaited
async def get_firing(
    firing_id: FiringIdPath, principal: Reader, request: Request
) -> dict[str, Any]:
    """The firing with every attempt (`attempts`, in order); its `lateness_ms` is its
    first attempt's."""
    store = store_of(request)
    ids = await ids_ready(request)
    internal = ids.decode("firing", firing_id)  # as internal_id, with the codec at hand
    found = None
    if internal is not None:
        fid = FiringId(internal)
        with suppress(FiringNotFoundError):  # answered as a firing of another namespace
            found = await store_read(
                request,
                partial(store.firing_with_attempts, fid),
                lambda reads: reads.firing_with_attempts(fid),
            )
    firing, attempts = _mine(found, principal, firing_id)
    doc = firing_to_json(ids.firing(firing), attempts=attempts, with_attempts=True)
    return _shown(principal, doc)


@router.post("/v1/firings/{firing_id}/cancel", response_model=CancelOut, summary="Cancel")
def cancel_firing(firing_id: FiringIdPath, principal: Writer, request: Request) -> dict[str, Any]:
    """`cancelled` (it was not running), `cancel_requested` (running: the handler is
    asked to stop) or `already_final`."""
    store = store_of(request)
    firing = _firing(store, principal, firing_id)
    with _gone_as(firing_id):
        result = store.cancel_firing(firing.id)
    return _cancel_doc(store, ids_of(request), result)


@router.post("/v1/firings/{firing_id}/retry", response_model=FiringOut, summary="Re-drive")
def retry_firing(firing_id: FiringIdPath, principal: Writer, request: Request) -> dict[str, Any]:
    """Queue a DEAD firing again with a fresh attempt budget; 409 `invalid_transition`
    for any other state."""
    store = store_of(request)
    internal = _firing(store, principal, firing_id).id
    with _gone_as(firing_id):
        firing = store.redrive_firing(internal)
    return firing_to_json(ids_of(request).firing(firing), attempts=_retried(store, firing))


@router.post("/v1/firings", status_code=201, response_model=FiringOut, summary="Run a task now")
@awaited
async def enqueue(
    body: EnqueueIn,
    principal: Writer,
    request: Request,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(
            max_length=255,
            description="same key + same body: the same firing (200); same key + another body: 409",
        ),
    ] = None,
) -> dict[str, Any]:
    """A one-off firing of `task` due now (201); 422 naming `task` when no worker has
    ever served it (once any worker registered), unless `allow_unknown_task`."""
    firing = None
    if idempotency_key is None:
        calls = async_calls_of(request)
        firing = None if calls is None else await _enqueue_awaited(calls, principal, body, request)
    if firing is None:
        return await store_write(_enqueue, principal, body, request, response, idempotency_key)
    return firing_to_json((await ids_ready(request)).firing(firing))


async def _enqueue_awaited(
    calls: AsyncCalls, principal: Principal, body: EnqueueIn, request: Request
) -> Firing | None:
    """The enqueue in one statement awaited on the loop (store/postgres/aio.py); None
    when it is :func:`_enqueue`'s to make on a store thread: a traced write (its producer
    span), a task not known to be served (the check reads the store), or the namespace's
    ``firings_per_minute`` reached (the store's own call refuses with its retry-after)."""
    if tracing_on(request):
        return None
    spec = _now_spec(principal, body)
    if not accepted_unread(request, spec.task, body.allow_unknown_task):
        return None
    return await calls.enqueue_now(spec)


def _enqueue(
    principal: Principal,
    body: EnqueueIn,
    request: Request,
    response: Response,
    idempotency_key: str | None,
) -> dict[str, Any]:
    """An enqueue on a store thread (or on the loop, as the app runs its store calls)."""
    store = store_of(request)
    spec = _now_spec(principal, body)
    # as App.enqueue: a task no worker has served
    require_served(request, spec.task, body.allow_unknown_task)
    ids = ids_of(request)
    if idempotency_key is None:
        firing = traced(request, spec, store.enqueue_now, name="cronwheel.enqueue")
        return firing_to_json(ids.firing(firing))
    if not KEY_RE.fullmatch(idempotency_key):
        raise HttpError(400, "invalid_input", KEY_FORMAT, field="Idempotency-Key")
    key_hash, request_hash = _key_ref(idempotency_key, body.model_dump())
    firing, created = traced(
        request,
        spec,
        partial(store.enqueue_now_once, key_hash=key_hash, request_hash=request_hash),
        name="cronwheel.enqueue",
    )
    if not created:
        response.status_code = 200
    return firing_to_json(ids.firing(firing))


def _key_ref(key: str, request: dict[str, Any]) -> KeyRef:
    """What the store keeps of an idempotency key and the request it came with (the
    request's EnqueueIn fields: a batch item's and a single request's compare equal)."""
    canonical = json.dumps(request, sort_keys=True, ensure_ascii=False)
    return (
        hashlib.sha256(key.encode("ascii")).hexdigest(),
        hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
    )


def _now_spec(principal: Principal, body: EnqueueIn) -> JobSpec:
    """The one-shot job of an immediate run (a unique name)."""
    return JobSpec(
        name=f"{body.task}@{uuid.uuid4().hex[:12]}",
        task=body.task,
        schedule=NowSchedule(),
        args=tuple(body.args),
        kwargs=body.kwargs,
        namespace=principal.namespace,
    )


@router.post(
    "/v1/firings/batch",
    response_model=BatchOut,
    summary="Run many tasks now",
    responses={409: {"model": BatchErrorOut}, 422: {"model": BatchErrorOut}},
)
def enqueue_batch(body: FiringsBatchIn, principal: Writer, request: Request) -> Response:
    """Each item as `POST /v1/firings` takes it, its `Idempotency-Key` header as the
    item's `idempotency_key` field, all queued in one transaction with one wake-up for
    the workers. Each item's answer: `status` 201 with its `firing`, 200 with the firing
    its key made before (by a request, or an earlier item of this batch, with the same
    fields), or the status and `error` of its single request (`field` names the item:
    `items[3].task`; a key seen with other fields: 409 `items[3].idempotency_key`).
    `all_or_nothing` as for `POST /v1/jobs/batch`. The firings made count against
    `firings_per_minute` together: over it, the batch is refused (429)."""
    store = store_of(request)
    served = served_once(request)

    def run(carry: Callable[[JobSpec], JobSpec]) -> BatchResult[tuple[Firing, bool]]:
        def prepare(raw: Any) -> tuple[JobSpec, KeyRef | None]:
            item = parse_item(EnqueueBatchItem, raw)
            spec = _now_spec(principal, item)
            served(spec.task, item.allow_unknown_task)
            key = item.idempotency_key
            fields = item.model_dump(exclude={"idempotency_key"})
            return carry(spec), None if key is None else _key_ref(key, fields)

        return run_batch(
            body.items,
            prepare,
            lambda items, atomic: store.enqueue_now_batch_once(items, all_or_nothing=atomic),
            all_or_nothing=body.all_or_nothing,
        )

    result = traced_batch(
        request,
        run,
        name="cronwheel.enqueue_many",
        count=len(body.items),
        namespace=principal.namespace,
    )
    ids = ids_of(request)
    return batch_out(
        result,
        lambda made: {"firing": firing_to_json(ids.firing(made[0]))},
        status=lambda made: 201 if made[1] else 200,
    )
