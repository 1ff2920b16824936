"""Open a store from a URL: ``sqlite:///relative.db``, ``sqlite:////abs/path.db``, a plain
file path, ``postgresql://user@host:port/db``, or ``memory://`` (a new, empty store in
this process's memory, for tests: see ``cronwheel.store.memory``)."""

from __future__ import annotations

from cronwheel.domain.clock import Clock
from cronwheel.errors import ValidationError
from cronwheel.store.protocol import Store

DEFAULT_STORE_URL = "sqlite:///cronwheel.db"
MEMORY_URL = "memory://"


def is_memory(url: str) -> bool:
    """Whether ``url`` names the in-process memory store (``memory://``)."""
    return url.strip().lower().startswith(MEMORY_URL)


def require_shared(url: str, command: str) -> None:
    """Refuse a store that other processes cannot see, for a command whose work is done
    in processes of its own (a scheduler, workers, an API server, a CLI one-shot)."""
    if is_memory(url):
        raise ValidationError(
            'memory:// lives inside one Python process (for tests, App("memory://")): '
            f"`cronwheel {command}` runs in processes of its own, which cannot share it; "
            "use sqlite:///path.db or postgresql://...",
            field="store",
        )


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
    store: Store
    if is_memory(url):
        if url.strip().lower() != MEMORY_URL:
            raise ValidationError("the memory store's URL is just memory://", field="store")
        from cronwheel.store.memory import MemoryStore

        store = MemoryStore(clock=clock)
    elif (path := sqlite_path(url)) is not None:
        from cronwheel.store.sqlite import SqliteStore

        store = SqliteStore(path, clock=clock)
    elif url.startswith(("postgresql://", "postgres://")):
        from cronwheel.store.postgres import PostgresStore

        store = PostgresStore(url, clock=clock)
    else:
        raise ValidationError(
            "unsupported store URL: use sqlite:///path.db, postgresql://... or memory://",
            field="store",
        )
    if migrate:
        store.migrate()
    return store
