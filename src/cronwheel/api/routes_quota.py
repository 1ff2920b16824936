"""``/v1/quota``: the token's namespace's quota and what it uses of it; an ``admin``
token may lower it (raising a quota is the cluster operator's: ``cronwheel quota
set``, which needs the store's credentials). A quota protects the other namespaces
from this one, so a token of this namespace, whatever its role, cannot loosen it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from cronwheel.api.auth import Reader, Writer, store_of
from cronwheel.api.calls import ApiRoute
from cronwheel.api.errors import HttpError
from cronwheel.api.schemas import QuotaIn, QuotaOut

router = APIRouter(prefix="/v1/quota", tags=["quota"], route_class=ApiRoute)


@router.get("", response_model=QuotaOut, summary="The namespace's quota and use")
def get_quota(principal: Reader, request: Request) -> dict[str, Any]:
    """Limits (`custom` false: the cluster's defaults) and current use: jobs, this
    minute's firings, held firings, today's trigger/backfill firings."""
    return store_of(request).quota_usage(principal.namespace)[0].to_dict()


@router.put("", response_model=QuotaOut, summary="Lower the namespace's quota")
def put_quota(body: QuotaIn, principal: Writer, request: Request) -> dict[str, Any]:
    """`admin` only. Each limit given must keep or tighten the current one (403 naming
    the field otherwise: the cluster's operator raises quotas with `cronwheel quota
    set`); omitted limits are kept."""
    if not principal.can("admin"):
        raise HttpError(403, "forbidden", "only an admin token may change the quota")
    store = store_of(request)
    store.set_quota(principal.namespace, body.model_dump(exclude_none=True), only_lower=True)
    return store.quota_usage(principal.namespace)[0].to_dict()
