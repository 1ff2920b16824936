"""The PostgreSQL store: for fleets that span more than one host."""

from cronwheel.store.postgres.db import DbTime
from cronwheel.store.postgres.store import PostgresStore

__all__ = ["DbTime", "PostgresStore"]
