"""The store conformance suite (`arkhon_rheo.testing.StoreConformance`) on the package's stores.

`MemoryStore`; `SQLiteStore` in each durability mode on its default driver
(a thread), and on aiosqlite (asyncio only; skipped without the optional extra).
The SQLite classes run the upgrade tests on copies of the version 3, 4 and 5
files in ``tests/fixtures``.
`PostgresStore` in each durability mode on the run's throwaway server (skipped
without PostgreSQL binaries): ``BATCHED`` in the default suite, ``SYNC`` and
``ASYNC`` in the slow one (each mode costs a minute or two: every test opens
its stores on a new schema). Its schema upgrades are tested in test_postgres.py.
The example of docs/how-to/fault-injection.md runs too, as a user runs it: in a
directory of its own, without this repository's ``conftest.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from arkhon_rheo.protocols import Durability
from arkhon_rheo.store import MemoryStore, PostgresStore, SQLiteStore
from arkhon_rheo.testing import FaultyStore, StoreConformance
from tests.fixtures import store_v3, store_v4, store_v5
from tests.store.conftest import HAVE_AIOSQLITE, NO_AIOSQLITE

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

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


# The default suite runs the suite on SQLite's batched mode (and aiosqlite); the
# store's own tests cover every mode, so sync and async run in the slow suite.
@pytest.mark.slow
class TestSQLiteSync(_SQLite):
    durability = Durability.SYNC


class TestSQLiteBatched(_SQLite):
    durability = Durability.BATCHED


@pytest.mark.slow
class TestSQLiteAsync(_SQLite):
    durability = Durability.ASYNC
    deferred_refusals = True


@pytest.mark.skipif(not HAVE_AIOSQLITE, reason=NO_AIOSQLITE)
class TestSQLiteAiosqlite(_SQLite):
    durability = Durability.BATCHED
    driver = "aiosqlite"
    backends = ("asyncio",)


@pytest.fixture(scope="module")
def conformance_database(postgres_server: Any) -> str:
    """The URL of one database of the run's PostgreSQL server for this module's tests."""
    import psycopg

    name = f"conformance_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server.url, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    url: str = postgres_server.database_url(name)
    return url


class _Postgres(StoreConformance):
    """`PostgresStore` in one durability mode, on a schema of its own for each test.

    (A schema per test, in one database: a store's tables, leases and
    ``LISTEN/NOTIFY`` channel are its schema's, and a schema costs a fraction
    of a fresh database's time and disk.)
    """

    durability: ClassVar[Durability]
    notifies_across_instances = True

    @pytest.fixture
    def new_store(self, conformance_database: str) -> Callable[[], Store]:
        schema = f"t_{uuid.uuid4().hex[:16]}"
        return lambda: PostgresStore(
            conformance_database, durability=self.durability, schema=schema
        )


class TestPostgresBatched(_Postgres):
    durability = Durability.BATCHED


@pytest.mark.slow
class TestPostgresSync(_Postgres):
    durability = Durability.SYNC


@pytest.mark.slow
class TestPostgresAsync(_Postgres):
    durability = Durability.ASYNC
    deferred_refusals = True


ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *(["-c", code] if code else []), *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # the tree under test
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=cwd,
    )


def test_the_docs_example_runs_the_suite_outside_this_repository(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "how-to" / "fault-injection.md").read_text()
    (example,) = re.findall(r"```python\n(# test_my_store\.py\n.*?)```", page, re.DOTALL)
    (tmp_path / "test_my_store.py").write_text(example)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # none of this repository's settings
    # The lease tests, the suite's own fixtures at work (all of it runs above, on SQLiteStore).
    result = _python("", tmp_path, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-k", "lease")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    passed = re.findall(r"::(test_\w+)\[(asyncio|trio)[^\]]*\] PASSED", result.stdout)
    assert {backend for _, backend in passed} == {"asyncio", "trio"}
    assert len(passed) > 20
    assert " FAILED" not in result.stdout


def test_the_package_imports_pytest_only_for_the_suite(tmp_path: Path) -> None:
    code = (
        "import sys, arkhon_rheo.testing\n"
        "assert 'pytest' not in sys.modules\n"
        "sys.modules['pytest'] = None  # as if it were not installed\n"
        "try:\n"
        "    arkhon_rheo.testing.StoreConformance\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = _python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "install pytest" in result.stdout


class TestFaultyStoreWithoutFaults(StoreConformance):
    """`FaultyStore` forwards every call: with no faults named, its store conforms as it is."""

    shared_storage = False

    @pytest.fixture
    def new_store(self) -> Callable[[], Store]:
        return lambda: FaultyStore(MemoryStore())
