"""A bounded memo: answers remembered by key, all forgotten at once when it is full (a
process's working set is a few schedules, policies and expressions; a full memo means a
burst of one-offs, which need not be kept)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def remembered(cache: dict[K, V], key: K, make: Callable[[], V], bound: int) -> V:
    """``cache[key]``, made by ``make()`` the first time (an error is raised, not
    remembered); ``cache`` is emptied first when it holds ``bound`` answers."""
    made = cache.get(key)
    if made is None:
        made = make()
        if len(cache) >= bound:
            cache.clear()
        cache[key] = made
    return made
