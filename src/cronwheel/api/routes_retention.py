"""``/v1/retention``: how long the token's namespace keeps its finished firings
(domain/retention.py). An ``admin`` token may change it or reset it to the default;
jobs override it with their ``keep_for`` / ``keep_last`` policies."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from cronwheel.api.auth import Reader, Writer, store_of
from cronwheel.api.errors import HttpError
from cronwheel.api.schemas import RetentionIn, RetentionOut
from cronwheel.domain.policy_table import parse_seconds_or_duration
from cronwheel.store.protocol import RetentionPort

router = APIRouter(prefix="/v1/retention", tags=["retention"])


def retention_doc(store: RetentionPort, namespace: str) -> dict[str, Any]:
    policy = store.get_retention(namespace)
    custom = namespace in store.list_retention()
    return {"namespace": namespace, "custom": custom} | policy.to_dict()


@router.get("", response_model=RetentionOut, summary="The namespace's retention policy")
def get_retention(principal: Reader, request: Request) -> dict[str, Any]:
    """Finished firings are kept `keep_for_s` seconds and the last `keep_last` per
    outcome per recurring job (`custom` false: the default, 7 days and the last 1)."""
    return retention_doc(store_of(request), principal.namespace)


@router.put("", response_model=RetentionOut, summary="Change the namespace's retention")
def put_retention(body: RetentionIn, principal: Writer, request: Request) -> dict[str, Any]:
    """`admin` only. `keep_for`: seconds or text (`7d`, `12h`; 0: age keeps nothing),
    `keep_last`: 0-1000; an omitted one is kept. The leader's retention pass applies it
    within minutes."""
    if not principal.can("admin"):
        raise HttpError(403, "forbidden", "only an admin token may change the retention")
    changes: dict[str, Any] = body.model_dump(exclude_none=True)
    if isinstance(changes.get("keep_for"), str):
        changes["keep_for"] = parse_seconds_or_duration(changes["keep_for"], "keep_for")
    store = store_of(request)
    store.set_retention(principal.namespace, changes)
    return retention_doc(store, principal.namespace)


@router.delete("", response_model=RetentionOut, summary="Reset the namespace's retention")
def delete_retention(principal: Writer, request: Request) -> dict[str, Any]:
    """`admin` only: the namespace back on the default policy."""
    if not principal.can("admin"):
        raise HttpError(403, "forbidden", "only an admin token may change the retention")
    store = store_of(request)
    store.reset_retention(principal.namespace)
    return retention_doc(store, principal.namespace)
