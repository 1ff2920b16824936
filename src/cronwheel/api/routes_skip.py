"""``POST /v1/jobs/{name}/skip``: skip occurrences of a job without pausing it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from cronwheel.api.auth import Writer, store_of
from cronwheel.api.calls import ApiRoute
from cronwheel.api.convert import ids_of, instant
from cronwheel.api.routes_jobs import JobName
from cronwheel.api.schemas import SkipIn, SkipOut
from cronwheel.domain.firing import format_instant
from cronwheel.domain.skips import occurrences_to_skip, skip_reason
from cronwheel.errors import InvalidTransitionError
from cronwheel.web.auth import who

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=ApiRoute)


@router.post("/{name}/skip", response_model=SkipOut, summary="Skip occurrences")
def skip_job(name: JobName, body: SkipIn, principal: Writer, request: Request) -> dict[str, Any]:
    """Skip the occurrences `at` (each must be one of the schedule's) or the `next` N
    (1..100) from now, without pausing the job: each becomes a SKIPPED firing whose
    reason names who asked and why. A queued or held one is skipped at once; a running
    or finished one is refused (its state in the result); 409 when every one is."""
    store = store_of(request)
    job = store.get_job(principal.namespace, name)
    at = None if body.at is None else [instant(t, f"at[{i}]") for i, t in enumerate(body.at)]
    instants = occurrences_to_skip(job.spec, now=store.now(), at=at, next_n=body.next)
    reason = skip_reason(who(store, principal), body.reason)
    results = store.skip_occurrences(principal.namespace, name, instants, reason)
    if all(r.outcome == "refused" for r in results):
        first = results[0]
        state = first.state.value if first.state else "unknown"
        raise InvalidTransitionError(
            f"the occurrence {format_instant(first.at)} is {state}: only a queued, held "
            "or future occurrence can be skipped",
            field="at",
        )
    ids = ids_of(request)
    shown = [ids.skip(r).to_dict() for r in results]
    return {"job": name, "reason": reason, "results": shown}
