"""Where sessions live: the embedded SQLite store and an in-memory one.

All implement `arkhon_rheo.protocols.Store`. `SQLiteStore` keeps an
event-sourced log with snapshots in one local SQLite file, with group commit
and explicit durability modes; `PostgresStore` keeps the same rows in
PostgreSQL (the ``postgres`` extra), shared by processes on many machines, with
fencing tokens on its leases and a work queue; `MemoryStore` keeps them in memory.
Besides its log, each session has an inbox and an effect ledger (the intents
and answers of its tools' side effects).
"""

from __future__ import annotations

from .._exports import publish
from ._base import StoreState as StoreState
from ._memory import MemoryStore as MemoryStore
from ._postgres import PostgresStore as PostgresStore
from ._sqlite import SQLiteStore as SQLiteStore

__all__ = ["MemoryStore", "PostgresStore", "SQLiteStore", "StoreState"]

publish(__name__, __all__, globals())
del publish
