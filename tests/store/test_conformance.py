"""The store conformance suite (`arkhon_rheo.testing.StoreConformance`) on the package's stores.

`MemoryStore`; `SQLiteStore` in each durability mode on its default driver
(a thread), and on aiosqlite (asyncio only). The SQLite classes run the
upgrade tests on copies of the version 3, 4 and 5 files in ``tests/fixtures``.
"""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from arkhon_rheo.protocols import Durability
from arkhon_rheo.store import MemoryStore, SQLiteStore
from arkhon_rheo.testing import StoreConformance
from tests.fixtures import store_v3, store_v4, store_v5

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from arkhon_rheo.protocols import Store

#: Each older schema version's file, and its sessions' histories as that version read them.
OLD_FILES = {
    3: (store_v3.DB, lambda: json.loads(store_v3.HISTORY.read_text())),
    4: (store_v4.DB, lambda: json.loads(store_v4.RECORDS.read_text())["histories"]),
    5: (store_v5.DB, lambda: json.loads(store_v5.RECORDS.read_text())["histories"]),
}


class TestMemoryStore(StoreConformance):
    shared_storage = False

    @pytest.fixture
    def new_store(self) -> Callable[[], Store]:
        return MemoryStore


class _SQLite(StoreConformance):
    """`SQLiteStore` in one durability mode, on one driver."""

    durability: ClassVar[Durability]
    driver: ClassVar[str] = "auto"

    @pytest.fixture
    def new_store(self, tmp_path: Path) -> Callable[[], Store]:
        return lambda: SQLiteStore(
            tmp_path / "store.db",
            durability=self.durability,
            driver=self.driver,  # type: ignore[arg-type]
        )

    @pytest.fixture(params=sorted(OLD_FILES), ids=lambda version: f"v{version}")
    def old_version(self, request: pytest.FixtureRequest) -> int:
        version: int = request.param
        return version

    @pytest.fixture
    def old_store_factory(self, tmp_path: Path, old_version: int) -> Callable[[], Store]:
        path = tmp_path / "old.db"
        shutil.copyfile(OLD_FILES[old_version][0], path)
        return lambda: SQLiteStore(
            path,
            durability=self.durability,
            driver=self.driver,  # type: ignore[arg-type]
        )

    @pytest.fixture
    def old_store_histories(self, old_version: int) -> Mapping[str, Sequence[Mapping[str, Any]]]:
        histories: Mapping[str, Sequence[Mapping[str, Any]]] = OLD_FILES[old_version][1]()
        return histories


class TestSQLiteSync(_SQLite):
    durability = Durability.SYNC


class TestSQLiteBatched(_SQLite):
    durability = Durability.BATCHED


class TestSQLiteAsync(_SQLite):
    durability = Durability.ASYNC


class TestSQLiteAiosqlite(_SQLite):
    durability = Durability.BATCHED
    driver = "aiosqlite"
    backends = ("asyncio",)
