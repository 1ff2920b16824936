"""Open a store from a URL: ``sqlite:///relative.db``, ``sqlite:////abs/path.db``, a plain
file path, or ``postgresql://user@host:port/db``."""

from __future__ import annotations

from cronwheel.domain.clock import Clock
from cronwheel.errors import ValidationError
from cronwheel.store.protocol import Store

DEFAULT_STORE_URL = "sqlite:///cronwheel.db"


def sqlite_path(url: str) -> str | None:
    """The file path of a SQLite URL, or None if the URL is not SQLite."""
    if url.startswith("sqlite://"):
        rest = url[len("sqlite://") :]
        if not rest.startswith("/"):
            raise ValidationError(
                "sqlite URLs look like sqlite:///relative.db or sqlite:////abs.db", field="store"
            )
        path = rest[1:]
        if not path:
            raise ValidationError("the sqlite URL names no file", field="store")
        return path
    if "://" in url:
        return None
    if not url.strip():
        raise ValidationError("must not be empty", field="store")
    return url


def open_store(url: str, *, clock: Clock | None = None, migrate: bool = True) -> Store:
    path = sqlite_path(url)
    store: Store
    if path is not None:
        from cronwheel.store.sqlite import SqliteStore

        store = SqliteStore(path, clock=clock)
    elif url.startswith(("postgresql://", "postgres://")):
        from cronwheel.store.postgres import PostgresStore

        store = PostgresStore(url, clock=clock)
    else:
        raise ValidationError(
            "unsupported store URL: use sqlite:///path.db or postgresql://...", field="store"
        )
    if migrate:
        store.migrate()
    return store
