"""Where sessions live: the embedded SQLite store and an in-memory one.

Both implement `arkhon_rheo.protocols.Store`. `SQLiteStore` keeps an
event-sourced log with snapshots in one local SQLite file, with group commit
and explicit durability modes; `MemoryStore` keeps the same rows in memory.
Besides its log, each session has an inbox and an effect ledger (the intents
and answers of its tools' side effects).
"""

from __future__ import annotations

from .._exports import publish
from ._base import StoreState as StoreState
from ._memory import MemoryStore as MemoryStore
from ._sqlite import SQLiteStore as SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "StoreState"]

publish(__name__, __all__, globals())
del publish
