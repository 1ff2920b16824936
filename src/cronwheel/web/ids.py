"""The ids users see, at every boundary: the API, the dashboard and the CLI turn the
store's ids into shown ones with :func:`ids_for` and parse shown ones back with
:func:`internal_id` (the one parser; see ``domain/ids.py`` for why and how)."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from cronwheel.domain.ids import MAX_ID, IdCodec, Kind
from cronwheel.store.protocol import AdminPort

__all__ = ["IdCodec", "ids_for", "internal_id", "known_ids"]

_CODECS: WeakKeyDictionary[AdminPort, IdCodec] = WeakKeyDictionary()


def ids_for(store: AdminPort) -> IdCodec:
    """The codec of ``store``'s cluster (its key read once per store handle)."""
    codec = _CODECS.get(store)
    if codec is None:
        codec = IdCodec(store.id_key())
        _CODECS[store] = codec
    return codec


def known_ids(store: AdminPort) -> IdCodec | None:
    """``ids_for(store)`` if its key was read already (no store call), else None."""
    return _CODECS.get(store)


def internal_id(store: AdminPort, kind: Kind, shown: int | str) -> int | None:
    """The store's id of a shown job or firing id (a path, query or CLI argument: ASCII
    digits, or an int already parsed); None when it is not one (malformed or out of
    range), which callers answer as they answer an id that does not exist."""
    if isinstance(shown, str):
        if not (shown.isascii() and shown.isdigit()) or len(shown) > len(str(MAX_ID)):
            return None
        shown = int(shown)
    return ids_for(store).decode(kind, shown)
