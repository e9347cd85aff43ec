"""The SQL of a durable commit on SQLite: what each transaction runs, counted, not timed.

A step's commit is one transaction: the fencing read of its lease, the
session's row, its event. An event's shape (what repeats from event to event)
is interned in ``shapes`` once: the writer remembers the shapes it saw
committed (the table only grows), so a commit of a known shape runs no
``INSERT OR IGNORE INTO shapes`` (issue 41, "speed kept"). Should the file lose
one under it (a restored copy), the batch that finds it missing is run again
with the writer's caches dropped, which writes it: no commit fails.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo.protocols import Durability
from arkhon_rheo.store import SQLiteStore
from tests.store.test_store import event

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


class Statements:
    """The statements the store's writer connection runs, as it starts each one."""

    def __init__(self, store: SQLiteStore) -> None:
        self._lock = threading.Lock()
        self.texts: list[str] = []
        connection = store._writer._driver._connection  # type: ignore[union-attr]
        assert connection is not None
        connection.set_trace_callback(self._trace)

    def _trace(self, statement: str) -> None:
        with self._lock:
            self.texts.append(" ".join(statement.split()))

    def take(self) -> list[str]:
        with self._lock:
            texts, self.texts = self.texts, []
        return texts


def _kinds(texts: list[str]) -> list[str]:
    """Each statement by its first words (``INSERT INTO events``, ``UPDATE sessions``...)."""
    return [" ".join(text.split()[:3]) for text in texts]


@pytest.mark.parametrize("durability", [Durability.SYNC, Durability.BATCHED])
async def test_a_commit_of_a_known_shape_runs_five_statements(
    tmp_path: Path, durability: Durability
) -> None:
    async with SQLiteStore(tmp_path / "commits.db", durability=durability) as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.acquire("s", "me", ttl=60)
        statements = Statements(store)
        await store.append("s", [event("s", 1)], owner="me")
        first = _kinds(statements.take())
        assert "INSERT OR IGNORE" in first  # a shape the file has not seen yet
        for seq in range(2, 6):
            await store.append("s", [event("s", seq)], owner="me")
            assert _kinds(statements.take()) == [
                "BEGIN IMMEDIATE",
                "SELECT session_id, owner,",
                "UPDATE sessions SET",
                "INSERT INTO events",
                "COMMIT",
            ]
        assert [e.seq for e in await store.history("s")] == [1, 2, 3, 4, 5]


async def test_a_shape_lost_under_a_session_the_writer_trusts_fails_no_commit(
    tmp_path: Path,
) -> None:
    # A copy restored in place from before "b"'s commit: "a"'s row is as the writer
    # cached it (its guarded update passes), but the shape "b" stored is gone.
    path = tmp_path / "restored.db"
    async with SQLiteStore(path, durability=Durability.SYNC) as store:
        await store.create_session("a", machine="m", snapshot={})
        await store.create_session("b", machine="m", snapshot={})
        await store.append("b", [event("b", 1)])
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
            db.execute("DELETE FROM events")
            db.execute("DELETE FROM shapes")
            db.execute("UPDATE sessions SET last_seq = 0")
        statements = Statements(store)
        await store.append("a", [event("a", 1)])
        kinds = _kinds(statements.take())
        # The cached try found the shape missing and rolled back; the retry wrote it.
        assert kinds[: kinds.index("ROLLBACK") + 1] == [
            "BEGIN IMMEDIATE",
            "UPDATE sessions SET",
            "INSERT INTO events",
            "ROLLBACK",
        ]
        assert "INSERT OR IGNORE" in kinds[kinds.index("ROLLBACK") :]
        assert [e.seq for e in await store.history("a")] == [1]
        assert not await store.history("b")
        await store.append("b", [event("b", 1)])
        assert [e.seq for e in await store.history("b")] == [1]


async def test_a_shape_lost_under_the_writer_is_written_again(tmp_path: Path) -> None:
    path = tmp_path / "restored.db"
    async with SQLiteStore(path, durability=Durability.SYNC) as store:
        await store.create_session("s", machine="m", snapshot={})
        await store.append("s", [event("s", 1)])
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
            db.execute("DELETE FROM events")
            db.execute("DELETE FROM shapes")
            db.execute("UPDATE sessions SET last_seq = 0")
        # The writer still believes the shape stored: the commit finds it missing
        # and is run again, caches dropped, with the shape written.
        await store.append("s", [event("s", 1)])
        (stored,) = await store.history("s")
        assert stored == event("s", 1)
        await store.append("s", [event("s", 2)])  # and the writer knows it again
        assert [e.seq for e in await store.history("s")] == [1, 2]
