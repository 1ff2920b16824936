"""The bulk writes of the store core: many jobs, or many immediate runs, in one unit of
work, with a result per item (see JobsPort.create_jobs_batch, enqueue_now_batch).

Each keeps the single-item path's invariants: the same rows and states (the engines'
hooks insert what create_job / enqueue_now insert), the quotas charged in the same
transaction (``min_interval`` per item, ``jobs`` and ``firings_per_minute`` for the
batch), one bump of the jobs version and one wake-up for the batch.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from cronwheel.domain.batch import settle
from cronwheel.domain.models import Firing, Job, JobSpec
from cronwheel.domain.quotas import Quota
from cronwheel.errors import ConflictError, CronwheelError, QuotaExceededError
from cronwheel.store import codec
from cronwheel.store.bulk_port import KeyRef
from cronwheel.store.codec import Row
from cronwheel.store.core.admin import AdminFlows
from cronwheel.store.core.dialect import Dialect, Tx
from cronwheel.store.core.quotas import QuotaFlows

D = TypeVar("D", bound=Dialect)


def job_exists(spec: JobSpec, *, naming_namespace: bool = False) -> ConflictError:
    """The error of a job created under a name its namespace already has."""
    where = f" in namespace {spec.namespace!r}" if naming_namespace else ""
    return ConflictError(
        f"a job named {spec.name!r} already exists{where}", field="name", code="job_exists"
    )


def key_reused() -> ConflictError:
    """An idempotency key used again with another request (as enqueue_now_once's)."""
    return ConflictError(
        "this idempotency key was used with a different request", field="idempotency_key"
    )


def first_refused() -> ConflictError:
    """A batch item repeating an earlier item's key and request, that item refused."""
    return ConflictError(
        "an earlier item of the batch with this idempotency key was refused",
        field="idempotency_key",
    )


def by_name(items: Sequence[Row], inserted: Sequence[Row]) -> list[Row | None]:
    """The rows a bulk insert made, one per item (by namespace and name), in the items'
    order: the first item of a name has the row, a repeat or a taken name None."""
    made = {(r["namespace"], r["name"]): r for r in inserted}
    return [made.pop((r["namespace"], r["name"]), None) for r in items]


class BulkFlows(QuotaFlows[D], AdminFlows[D]):
    """create_jobs_batch and enqueue_now_batch over the engine's two hooks."""

    @abstractmethod
    def _insert_jobs_in(self, tx: Tx, rows: Sequence[dict[str, Any]]) -> list[Row | None]:
        """Inside ``tx``: insert the jobs of these ``job_params`` rows (with their
        ``next_fire_at``), in order, created now; each one's new row (at least ``id`` and
        ``created_at``), or None where its namespace has the name (or an earlier row
        took it)."""

    @abstractmethod
    def _enqueue_now_many_in(self, tx: Tx, specs: Sequence[JobSpec]) -> list[Row | None]:
        """Inside ``tx``: what ``_enqueue_now_in`` does for each spec, in order, with one
        wake-up for them all; each one's firing row, or None where the name is taken."""

    def create_jobs_batch(
        self, items: Sequence[tuple[JobSpec, datetime | None]], *, all_or_nothing: bool = False
    ) -> list[Job | CronwheelError]:
        """Bulk registration with a result per item, in one transaction (see JobsPort)."""
        params = [codec.job_params(s) | {"next_fire_at": self._opt(f)} for s, f in items]

        def body(tx: Tx) -> list[Row | CronwheelError]:
            out: list[Row | CronwheelError | None] = [None] * len(items)
            quotas: dict[str, Quota] = {}
            todo: list[int] = []
            for i, (spec, first) in enumerate(items):
                try:
                    self._check_schedule(tx, spec, first, quotas)
                except QuotaExceededError as exc:
                    out[i] = exc
                    continue
                todo.append(i)
            rows = self._insert_jobs_in(tx, [params[i] for i in todo])
            for i, row in zip(todo, rows, strict=True):
                out[i] = job_exists(items[i][0]) if row is None else row
            done = settle(out, all_or_nothing)
            created = [items[i][0] for i, r in enumerate(done) if not isinstance(r, Exception)]
            if created:
                self._charge_jobs(tx, created, quotas)
                tx.run("bump_jobs_version")
            return done

        written = self.db.write(body)
        return [
            r if isinstance(r, CronwheelError) else codec.new_job(r, *items[i])
            for i, r in enumerate(written)
        ]

    def enqueue_now_batch(
        self, specs: Sequence[JobSpec], *, all_or_nothing: bool = False
    ) -> list[Firing | CronwheelError]:
        """Many ``enqueue_now`` in one transaction, one wake-up (see JobsPort)."""
        done = self.enqueue_now_batch_once(
            [(s, None) for s in specs], all_or_nothing=all_or_nothing
        )
        return [r if isinstance(r, CronwheelError) else r[0] for r in done]

    def enqueue_now_batch_once(
        self, items: Sequence[tuple[JobSpec, KeyRef | None]], *, all_or_nothing: bool = False
    ) -> list[tuple[Firing, bool] | CronwheelError]:
        """The keyed items' keys locked (in order) and looked up, then the new items
        enqueued as enqueue_now_batch does, their keys recorded (see BulkPort)."""

        def body(tx: Tx) -> list[tuple[Row, bool] | CronwheelError]:
            out: list[tuple[Row, bool] | CronwheelError | None] = [None] * len(items)
            seen: dict[tuple[str, str], Row] = {}
            for namespace, key_hash in sorted({(s.namespace, r[0]) for s, r in items if r}):
                key = {"namespace": namespace, "key_hash": key_hash}
                tx.run("idempotency_lock", key)
                if (row := tx.one("find_idempotency_key", key)) is not None:
                    seen[(namespace, key_hash)] = row
            first: dict[tuple[str, str], int] = {}  # each new key's first item
            repeats: list[tuple[int, int]] = []  # (an item, the earlier one it repeats)
            todo: list[int] = []
            for i, (spec, ref) in enumerate(items):
                if ref is not None:
                    k = (spec.namespace, ref[0])
                    if k in seen:
                        same = seen[k]["request_hash"] == ref[1]
                        out[i] = (seen[k], False) if same else key_reused()
                        continue
                    if k in first:
                        earlier = first[k]
                        if items[earlier][1] == ref:
                            repeats.append((i, earlier))
                        else:
                            out[i] = key_reused()
                        continue
                    first[k] = i
                todo.append(i)
            rows = self._enqueue_now_many_in(tx, [items[i][0] for i in todo]) if todo else []
            for i, row in zip(todo, rows, strict=True):
                out[i] = job_exists(items[i][0]) if row is None else (row, True)
            for i, earlier in repeats:
                made = out[earlier]
                out[i] = (made[0], False) if isinstance(made, tuple) else first_refused()
            done = settle(out, all_or_nothing)
            per_namespace: dict[str, int] = {}
            for (spec, _), r in zip(items, done, strict=True):
                if isinstance(r, tuple) and r[1]:
                    per_namespace[spec.namespace] = per_namespace.get(spec.namespace, 0) + 1
            for namespace, n in sorted(per_namespace.items()):  # after the inserts, as above
                self._charge_firings(tx, namespace, n)
            for (namespace, key_hash), i in first.items():
                made, ref = done[i], items[i][1]
                if isinstance(made, tuple) and ref is not None:
                    key = {"namespace": namespace, "key_hash": key_hash}
                    ref_row = key | {"request_hash": ref[1], "firing_id": made[0]["id"]}
                    tx.run("insert_idempotency_key", ref_row)
            return done

        written = self.db.write(body)
        return [
            r if isinstance(r, CronwheelError) else (codec.firing_from_row(r[0]), r[1])
            for r in written
        ]
