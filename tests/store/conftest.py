"""The store suite's fixtures: every store, durability mode and driver.

``memory`` is `MemoryStore`; ``sync``, ``batched`` and ``async`` are `SQLiteStore` in
that mode with the default driver (threads); ``aiosqlite`` is `SQLiteStore` on
aiosqlite (asyncio only: skipped on trio).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo.protocols import Durability
from arkhon_rheo.store import MemoryStore, SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

AnyStore = MemoryStore | SQLiteStore


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    durability: Durability | None  # None: MemoryStore
    driver: str = "auto"

    @property
    def sqlite(self) -> bool:
        return self.durability is not None


KINDS = [
    Kind("memory", None),
    Kind("sync", Durability.SYNC),
    Kind("batched", Durability.BATCHED),
    Kind("async", Durability.ASYNC),
    Kind("aiosqlite", Durability.BATCHED, "aiosqlite"),
]


@pytest.fixture(params=KINDS, ids=[kind.name for kind in KINDS])
def kind(request: pytest.FixtureRequest) -> Kind:
    value: Kind = request.param
    return value


@pytest.fixture
def make_store(kind: Kind, tmp_path: Path, anyio_backend: str) -> Callable[..., AnyStore]:
    """Make a new store of the kind; SQLite ones all open the same file."""
    if kind.driver == "aiosqlite" and anyio_backend != "asyncio":
        pytest.skip("aiosqlite runs on asyncio only")

    def make(**options: Any) -> AnyStore:
        if kind.durability is None:
            return MemoryStore(**options)
        return SQLiteStore(
            tmp_path / "store.db",
            durability=kind.durability,
            driver=kind.driver,  # type: ignore[arg-type]
            **options,
        )

    return make
