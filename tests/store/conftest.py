"""The store suite's fixtures: every store, durability mode and driver.

``memory`` is `MemoryStore`; ``sync``, ``batched`` and ``async`` are `SQLiteStore` in
that mode with the default driver (threads); ``aiosqlite`` is `SQLiteStore` on
aiosqlite (asyncio only: skipped on trio, and where the optional ``aiosqlite``
extra is not installed); ``postgres`` is `PostgresStore` (batched)
on a fresh database of the test run's throwaway server (skipped without PostgreSQL).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo.protocols import Durability
from arkhon_rheo.store import MemoryStore, PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

AnyStore = MemoryStore | SQLiteStore | PostgresStore
#: aiosqlite is an optional extra (``pip install 'arkhon-rheo[aiosqlite]'``; in ``dev`` too).
HAVE_AIOSQLITE = importlib.util.find_spec("aiosqlite") is not None
NO_AIOSQLITE = (
    "aiosqlite is not installed (an optional extra: pip install 'arkhon-rheo[aiosqlite]')"
)


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    durability: Durability | None  # None: MemoryStore
    driver: str = "auto"

    @property
    def sqlite(self) -> bool:
        """A durable store (SQLite or PostgreSQL): it keeps what it stored, in batches."""
        return self.durability is not None

    @property
    def postgres(self) -> bool:
        return self.driver == "postgres"


KINDS = [
    Kind("memory", None),
    Kind("sync", Durability.SYNC),
    Kind("batched", Durability.BATCHED),
    Kind("async", Durability.ASYNC),
    Kind("aiosqlite", Durability.BATCHED, "aiosqlite"),
    Kind("postgres", Durability.BATCHED, "postgres"),
]


@pytest.fixture(params=KINDS, ids=[kind.name for kind in KINDS])
def kind(request: pytest.FixtureRequest) -> Kind:
    value: Kind = request.param
    return value


@pytest.fixture
def make_store(
    kind: Kind, tmp_path: Path, anyio_backend: str, request: pytest.FixtureRequest
) -> Callable[..., AnyStore]:
    """Make a new store of the kind; SQLite ones all open the same file (Postgres: database)."""
    if kind.driver == "aiosqlite" and anyio_backend != "asyncio":
        pytest.skip("aiosqlite runs on asyncio only")
    if kind.driver == "aiosqlite" and not HAVE_AIOSQLITE:
        pytest.skip(NO_AIOSQLITE)
    url = request.getfixturevalue("postgres_url") if kind.postgres else ""

    def make(**options: Any) -> AnyStore:
        if kind.durability is None:
            return MemoryStore(**options)
        if kind.postgres:
            options.pop("busy_timeout", None)
            return PostgresStore(url, durability=kind.durability, **options)
        return SQLiteStore(
            tmp_path / "store.db",
            durability=kind.durability,
            driver=kind.driver,  # type: ignore[arg-type]
            **options,
        )

    return make
