"""Batches: many jobs or firings in one call, a result or an error per item.

Shared by ``App.schedule_many``/``enqueue_many`` and the API's batch endpoints, so the
two agree on what an item's error names and on the two modes:

- per item (the default): the valid items are written in one transaction, each
  refused one gets its error (``field`` prefixed with its place: ``items[3].schedule``);
- all or nothing: one refused item refuses the batch (:class:`BatchError` with every
  item's error) and nothing is written. Every item is validated first; the store's
  own refusals (a name that exists) are found once every item is valid.

A quota the batch as a whole exceeds (jobs, firings per minute) refuses the whole
batch in both modes, as it refuses a single write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from cronwheel.errors import BatchError, CronwheelError, ValidationError

BATCH_LIMIT = 1000  # items per request of the API's batch endpoints

T = TypeVar("T")
X = TypeVar("X")
P = TypeVar("P")


def item_field(index: int, field: str | None) -> str:
    """``items[3]`` or ``items[3].schedule.cron``."""
    return f"items[{index}]" if not field else f"items[{index}].{field}"


def at_item(index: int, exc: CronwheelError) -> CronwheelError:
    """``exc`` (made for this one item) with its field prefixed by the item's place."""
    exc.field = item_field(index, exc.field)
    return exc


@dataclass(frozen=True, slots=True)
class BatchResult(Generic[T]):
    """One entry per item, in the order given: what was created, or the item's error."""

    items: list[T | CronwheelError]

    @property
    def created(self) -> list[T]:
        return [r for r in self.items if not isinstance(r, CronwheelError)]

    @property
    def errors(self) -> list[tuple[int, CronwheelError]]:
        return [(i, r) for i, r in enumerate(self.items) if isinstance(r, CronwheelError)]

    @property
    def ok(self) -> bool:
        return not any(isinstance(r, CronwheelError) for r in self.items)

    def __len__(self) -> int:
        return len(self.items)


def item_fields(item: Mapping[str, Any], required: tuple[str, ...]) -> dict[str, Any]:
    """A batch item's keyword arguments (a copy), its ``required`` ones present."""
    if not isinstance(item, Mapping):
        raise ValidationError("must be a mapping of keyword arguments", field=None)
    fields = dict(item)
    for key in required:
        if fields.get(key) is None:
            raise ValidationError("is required", field=key)
    return fields


def settle(
    out: Sequence[T | CronwheelError | None], all_or_nothing: bool
) -> list[T | CronwheelError]:
    """A batch's per-item outcomes, every one decided; in all-or-nothing mode any error
    raises BatchError (indexed by place in ``out``, undecided items being None; a
    store's unit of work rolls back)."""
    errors = [(i, r) for i, r in enumerate(out) if isinstance(r, CronwheelError)]
    if errors and all_or_nothing:
        raise BatchError(errors, len(out))
    done = [r for r in out if r is not None]
    assert len(done) == len(out), "every item is decided"
    return done


def run_batch(
    items: Sequence[X],
    prepare: Callable[[X], P],
    write: Callable[[list[P], bool], Sequence[T | CronwheelError]],
    *,
    all_or_nothing: bool,
) -> BatchResult[T]:
    """``prepare`` each item (its CronwheelError is the item's error), then ``write`` the
    prepared ones in one call (``write(prepared, all_or_nothing)``: one result per
    prepared item, or BatchError in all-or-nothing mode, its indexes the prepared
    list's). Errors come back prefixed with their item's place in ``items``."""
    results: list[T | CronwheelError | None] = [None] * len(items)
    prepared: list[P] = []
    where: list[int] = []
    for i, item in enumerate(items):
        try:
            prepared.append(prepare(item))
        except CronwheelError as exc:
            results[i] = at_item(i, exc)
            continue
        where.append(i)
    refused = [(i, r) for i, r in enumerate(results) if isinstance(r, CronwheelError)]
    if refused and all_or_nothing:
        raise BatchError(refused, len(items))
    try:
        written = write(prepared, all_or_nothing) if prepared else []
    except BatchError as exc:
        remapped = [(where[j], at_item(where[j], e)) for j, e in exc.errors]
        raise BatchError(remapped, len(items)) from None
    for j, r in enumerate(written):
        results[where[j]] = at_item(where[j], r) if isinstance(r, CronwheelError) else r
    return BatchResult([r for r in results if r is not None])
