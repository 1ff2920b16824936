"""The store core's administrative flows: migrations, the leader's lease, nodes,
status and API tokens, written once over a Dialect (see flows.py for the rest)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from cronwheel.domain.clock import ClockEstimate
from cronwheel.domain.models import Lease, NodeInfo
from cronwheel.errors import NotFoundError, StoreError, StoreUnavailableError
from cronwheel.store import codec
from cronwheel.store.codec import Row
from cronwheel.store.core.dialect import Dialect, Tx
from cronwheel.store.protocol import (
    DISPATCHER_LEASE,
    SERVED_TASKS_REFRESH,
    ApiToken,
    StoreStatus,
    TzRecord,
)

D = TypeVar("D", bound=Dialect)

# the window of status' finished counts and lateness sample
_STATUS_WINDOW = timedelta(hours=1)


class AdminFlows(Generic[D]):
    """Plumbing shared by every flow, and the administrative half of the store."""

    db: D

    # -- plumbing ---------------------------------------------------------------------
    def now(self) -> datetime:
        return self.db.now()

    def _opt(self, value: datetime | None) -> Any:
        return None if value is None else self.db.instant(value)

    def _one(self, name: str, params: dict[str, Any] | None = None) -> Row | None:
        return self.db.read(lambda tx: tx.one(name, params))

    def _all(self, name: str, params: dict[str, Any] | None = None) -> Sequence[Row]:
        return self.db.read(lambda tx: tx.all(name, params))

    # -- lifecycle ----------------------------------------------------------------------
    def migrate(self) -> int:
        """Apply the engine's ``migration_<n>`` scripts above the stored version, in one
        transaction that concurrent migrators serialize on (the migration lock).

        A schema already at this code's last migration (every process of a migrated
        deployment, starting) is read without the lock and left unwritten: a fleet's
        start does not queue its processes one by one on the lock, each holding a
        server connection (through a transaction pooler, the server pool)."""
        migrations = self.db.migrations()
        current = self._migrated_version()
        if current is not None and f"migration_{current + 1}" not in migrations:
            return current

        def body(tx: Tx) -> int:
            tx.unbounded()  # the lock may wait for another process's migration
            tx.run("migration_lock")
            tx.run("create_meta")
            row = tx.one("schema_version")
            version = int(row["value"]) if row else 0
            n = version
            while f"migration_{n + 1}" in migrations:
                n += 1
                tx.script(migrations[f"migration_{n}"])
            if n != version:
                tx.run("set_schema_version", {"version": str(n)})
            tx.run("insert_id_key", {"key": secrets.token_hex(32)})  # kept once written
            return n

        return self.db.write(body)

    def _migrated_version(self) -> int | None:
        """The schema's version, when it has one and the ids' key (both are written by
        the migration that reached it); None before."""
        has_meta = self._one("has_meta")
        if has_meta is None or not has_meta["ok"]:
            return None
        row = self._one("migrated_version")
        return None if row is None else int(row["value"])

    def ping(self) -> None:
        try:
            self._one("ping")
        except StoreUnavailableError:
            raise
        except StoreError as exc:
            raise StoreUnavailableError(exc.message) from exc

    # -- leadership ---------------------------------------------------------------------
    def acquire_lease(self, name: str, holder: str, ttl: timedelta) -> Lease | None:
        params = {"name": name, "holder": holder, "ttl": self.db.duration(ttl)}
        row = self.db.write(lambda tx: tx.one("acquire_lease", params), atomic=False)
        return None if row is None else codec.lease_from_row(row)

    def upkeep(self) -> None:
        """None by default (the DispatchPort's: SQLite's checkpoints)."""

    def release_lease(self, lease: Lease) -> None:
        params = {"name": lease.name, "holder": lease.holder, "epoch": lease.epoch}
        self.db.write(lambda tx: tx.run("release_lease", params), atomic=False)

    def get_lease(self, name: str) -> Lease | None:
        row = self._one("get_lease", {"name": name})
        return None if row is None else codec.lease_from_row(row)

    # -- nodes --------------------------------------------------------------------------
    def register_node(self, node: NodeInfo) -> None:
        params = {
            "id": node.id,
            "kind": node.kind,
            "hostname": node.hostname,
            "pid": node.pid,
            "started_at": self.db.instant(node.started_at),
            "wake_addr": node.wake_addr,
            "info": json.dumps(node.info),
            "tz_source": node.tz_source,
            "tz_version": node.tz_version,
        } | codec.clock_params(node.clock)
        served = {"id": node.id, "refresh": self.db.duration(timedelta(0))}

        def body(tx: Tx) -> Sequence[Row]:
            tx.run("register_node", params)
            return tx.all("record_served_tasks", served)  # a worker's tasks (core_tasks.sql)

        recorded = self.db.write(body)
        if recorded:
            self._served_recorded()[node.id] = codec.req_instant(recorded[0]["last_seen"])

    def heartbeat_node(self, node_id: str, clock: ClockEstimate | None = None) -> None:
        """The node's heartbeat, with its clock as it measures it now; a worker's served
        tasks are refreshed on at most one heartbeat a minute (by the store's clock) of
        this handle, so most heartbeats are the one UPDATE."""
        served = {"id": node_id, "refresh": self.db.duration(SERVED_TASKS_REFRESH)}
        last = self._served_recorded()

        def body(tx: Tx) -> datetime | None:
            row = tx.one("heartbeat_node", {"id": node_id} | codec.clock_params(clock))
            if row is None or row["kind"] != "worker":
                return None
            beat = codec.req_instant(row["heartbeat_at"])
            seen = last.get(node_id)
            if seen is not None and beat - seen < SERVED_TASKS_REFRESH:
                return None
            tx.all("record_served_tasks", served)
            return beat

        recorded_at = self.db.write(body)
        if recorded_at is not None:  # committed
            last[node_id] = recorded_at

    def _served_recorded(self) -> dict[str, datetime]:
        """When this handle last recorded each node's served tasks (the store's clock)."""
        recorded: dict[str, datetime] = vars(self).setdefault("_served_at", {})
        return recorded

    def remove_node(self, node_id: str) -> None:
        self.db.write(lambda tx: tx.run("remove_node", {"id": node_id}), atomic=False)

    def list_nodes(self, *, alive_within: timedelta | None = None) -> list[NodeInfo]:
        if alive_within is None:
            rows = self._all("list_nodes")
        else:
            rows = self._all("list_nodes_alive", {"within": self.db.duration(alive_within)})
        return [codec.node_from_row(r) for r in rows]

    def status(self, *, namespace: str | None = None) -> StoreStatus:
        window: dict[str, Any] = {"window": self.db.duration(_STATUS_WINDOW)}
        of, ns = ("", {}) if namespace is None else ("_of_namespace", {"namespace": namespace})

        def body(tx: Tx) -> StoreStatus:
            counts: dict[str, int] = {"queued": 0, "claimed": 0, "running": 0}
            for row in [
                *tx.all(f"status_counts{of}", ns),
                *tx.all(f"status_finished{of}", window | ns),
            ]:
                counts[row["state"]] = counts.get(row["state"], 0) + int(row["n"])
            jobs = tx.one(f"status_jobs{of}", ns or None)
            assert jobs is not None
            lateness = tx.all(f"recent_lateness{of}", window | ns | {"limit": 1000})
            lease = tx.one("get_lease", {"name": DISPATCHER_LEASE})
            return StoreStatus(
                now=codec.req_instant(jobs["now"]),
                lease=None if lease is None else codec.lease_from_row(lease),
                counts=counts,
                jobs=int(jobs["n"]),
                paused_jobs=int(jobs["p"]),
                oldest_queued_due_at=codec.opt_instant(jobs["oldest"]),
                nodes=[codec.node_from_row(r) for r in tx.all("list_nodes")],
                lateness_ms=[float(r["lateness_ms"]) for r in lateness],
                tzdata=self._tz_record_in(tx),
            )

        return self.db.read_replica(body)  # what an operator looks at: may be stale

    def _tz_record_in(self, tx: Tx) -> TzRecord | None:
        row = tx.one("get_tzdata")
        return None if row is None else codec.tz_record_from_text(row["value"])

    # -- the ids users see -------------------------------------------------------------
    def id_key(self) -> bytes:
        row = self._one("id_key")
        if row is None:
            raise StoreError("the store has no id key: run 'cronwheel migrate'", field="store")
        return bytes.fromhex(str(row["value"]))

    # -- API tokens ---------------------------------------------------------------------
    def create_token(
        self, *, namespace: str, role: str, label: str | None, secret_hash: str
    ) -> ApiToken:
        params = {"namespace": namespace, "role": role, "label": label, "secret_hash": secret_hash}
        row = self.db.write(lambda tx: tx.one("insert_token", params), atomic=False)
        assert row is not None
        return codec.token_from_row(row)

    def get_token(self, token_id: int) -> ApiToken | None:
        row = self._one("get_token", {"id": token_id})
        return None if row is None else codec.token_from_row(row)

    def list_tokens(self, *, namespace: str | None = None) -> list[ApiToken]:
        if namespace is None:
            rows = self._all("list_tokens")
        else:
            rows = self._all("list_tokens_of_namespace", {"namespace": namespace})
        return [codec.token_from_row(r) for r in rows]

    def revoke_token(self, token_id: int) -> ApiToken:
        row = self.db.write(lambda tx: tx.one("revoke_token", {"id": token_id}), atomic=False)
        if row is None:
            raise NotFoundError(f"no token with id {token_id}", field="token_id")
        return codec.token_from_row(row)
