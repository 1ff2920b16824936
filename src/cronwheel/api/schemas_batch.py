"""The batch endpoints' bodies (``POST /v1/jobs/batch``, ``POST /v1/firings/batch``):
strict as every request of schemas.py; their items are the single endpoints' bodies,
each validated on its own by the route (api/batch.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cronwheel.api.schemas import ErrorDetail, FiringOut, JobOut
from cronwheel.domain.batch import BATCH_LIMIT


class _BatchIn(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class _BatchOut(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _batch_items(item_schema: str, what: str) -> Any:
    """A batch's ``items``: each one validated on its own by the route (an item's error is
    that item's, ``items[3].schedule``), so the field takes any JSON value; the schema
    documents the item's."""
    return Field(
        max_length=BATCH_LIMIT,
        description=f"at most {BATCH_LIMIT} {what}, each as its single endpoint takes it",
        json_schema_extra={"items": {"$ref": f"#/components/schemas/{item_schema}"}},
    )


_ALL_OR_NOTHING = Field(
    False,
    description="true: one refused item refuses the batch (422, or 409 when every refused"
    " item is a conflict, with every item's error) and nothing is written; false: the"
    " valid items are written, each refused one gets its error",
)


class JobsBatchIn(_BatchIn):
    """Many jobs in one request and one transaction (``POST /v1/jobs`` for each item)."""

    items: list[Any] = _batch_items("JobCreate", "jobs")
    all_or_nothing: bool = _ALL_OR_NOTHING


class FiringsBatchIn(_BatchIn):
    """Many immediate runs in one request and one transaction (``POST /v1/firings`` for
    each item, without an idempotency key)."""

    items: list[Any] = _batch_items("EnqueueIn", "runs")
    all_or_nothing: bool = _ALL_OR_NOTHING


class BatchItemOut(_BatchOut):
    """One item's outcome: ``status`` 201 with its ``job``/``firing``, or the HTTP status
    its single request would have had with its ``error`` (``field`` names the item:
    ``items[3].schedule``)."""

    index: int
    status: int
    job: JobOut | None = None
    firing: FiringOut | None = None
    error: ErrorDetail | None = None


class BatchOut(_BatchOut):
    created: int = Field(description="items written")
    refused: int = Field(description="items refused, each with its error")
    items: list[BatchItemOut]


class BatchErrorOut(_BatchOut):
    """An all-or-nothing batch refused: the first error, and every refused item's."""

    error: ErrorDetail
    items: list[BatchItemOut]
