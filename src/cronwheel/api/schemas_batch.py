"""The batch endpoints' bodies (``POST /v1/jobs/batch``, ``POST /v1/firings/batch``):
strict as every request of schemas.py; their items are the single endpoints' bodies,
each validated on its own by the route (api/batch.py)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from cronwheel.api.schemas import EnqueueIn, ErrorDetail, FiringOut, JobOut
from cronwheel.domain.batch import BATCH_LIMIT

# an idempotency key: the Idempotency-Key header of POST /v1/firings, or a batch item's
KEY_PATTERN = r"[\x21-\x7e]{1,255}"
KEY_RE = re.compile(KEY_PATTERN)
KEY_FORMAT = "must be 1-255 printable ASCII characters"


class _BatchIn(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class _BatchOut(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _key(value: str) -> str:
    if not KEY_RE.fullmatch(value):
        raise ValueError(KEY_FORMAT)
    return value


class EnqueueBatchItem(EnqueueIn):
    """An item of ``POST /v1/firings/batch``: the body of ``POST /v1/firings``, with its
    ``Idempotency-Key`` header as a field."""

    idempotency_key: Annotated[str, AfterValidator(_key)] | None = Field(
        None,
        description="as the Idempotency-Key header of POST /v1/firings (one key space):"
        " a key seen with the same item (or an earlier item of the batch) answers the"
        " firing it made (status 200); with another item, 409",
        json_schema_extra={"pattern": f"^{KEY_PATTERN}$", "maxLength": 255, "minLength": 1},
    )


def _batch_items(item_schema: str | dict[str, Any], what: str) -> Any:
    """A batch's ``items``: each one validated on its own by the route (an item's error is
    that item's, ``items[3].schedule``), so the field takes any JSON value; the schema
    documents the item's (a component's name, or the schema itself)."""
    if isinstance(item_schema, str):
        item_schema = {"$ref": f"#/components/schemas/{item_schema}"}
    return Field(
        max_length=BATCH_LIMIT,
        description=f"at most {BATCH_LIMIT} {what}, each as its single endpoint takes it",
        json_schema_extra={"items": item_schema},
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
    each item, its idempotency key a field of the item)."""

    items: list[Any] = _batch_items(EnqueueBatchItem.model_json_schema(), "runs")
    all_or_nothing: bool = _ALL_OR_NOTHING


class BatchItemOut(_BatchOut):
    """One item's outcome: ``status`` 201 with its ``job``/``firing`` (200: the firing its
    idempotency key made before), or the HTTP status its single request would have had
    with its ``error`` (``field`` names the item:
    ``items[3].schedule``)."""

    index: int
    status: int
    job: JobOut | None = None
    firing: FiringOut | None = None
    error: ErrorDetail | None = None


class BatchOut(_BatchOut):
    created: int = Field(
        description="items written (status 201); an item answered by"
        " its idempotency key (200) is neither created nor refused"
    )
    refused: int = Field(description="items refused, each with its error")
    items: list[BatchItemOut]


class BatchErrorOut(_BatchOut):
    """An all-or-nothing batch refused: the first error, and every refused item's."""

    error: ErrorDetail
    items: list[BatchItemOut]
