"""The in-memory store (``memory://``): the whole Store port in this process, for tests."""

from cronwheel.store.memory.rows import MemoryData
from cronwheel.store.memory.store import MemoryStore

__all__ = ["MemoryData", "MemoryStore"]
